"""What the timeline store costs (issue 28): per trace, the read, the summary alone, the
summary with its per-step timelines and the store encoded (one index, one read), the
store's size against the stored file's, and the time to serve one step from the store.

    KINETO_INSIGHTS_READ_WORKERS=1 python benchmarks/bench_timeline.py TRACE... [--repeat 5]

Times are CPU seconds of this process (``time.process_time``: less sensitive to other
processes on a shared machine than wall time; hence the serial read), medians of
``--repeat`` rounds; in each round "summary alone" and "summary + timeline + encode"
run back to back on the same read trace, alternating which goes first, so drifts of the
machine's load hit both alike. The store share is
``(summary+timeline+encode − summary) ÷ (read + summary)``, the store's cost in the
read + analyse of a load. Prints a Markdown table; ``benchmarks/RESULTS.md`` keeps the
numbers with this command and the machine's load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import msgspec

from tb_kineto_insights.analysis.timeline_format import decode_store, encode_store, load_step
from tb_kineto_insights.summary import summarize_trace, summarize_trace_with_timeline
from tb_kineto_insights.trace.reader import read_trace


def _cpu_s(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(
        "| trace | stored MB | read s | summary s | summary+timeline+encode s | store share "
        "of read+analyse (median; min-max of rounds) | store KB | store / stored file | "
        "one step served ms |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for path in args.traces:
        reads, plains, boths, shares = [], [], [], []
        store = b""
        for r in range(args.repeat):
            read_s, trace = _cpu_s(lambda p=path: read_trace(p))  # type: ignore[misc]

            def plain(t: Any = trace) -> Any:
                return summarize_trace(t)

            def both(t: Any = trace) -> bytes:
                return encode_store(summarize_trace_with_timeline(t)[1])

            if r % 2:
                both_s, store = _cpu_s(both)
                plain_s, _ = _cpu_s(plain)
            else:
                plain_s, _ = _cpu_s(plain)
                both_s, store = _cpu_s(both)
            del trace
            reads.append(read_s)
            plains.append(plain_s)
            boths.append(both_s)
            shares.append((both_s - plain_s) / (read_s + plain_s))
        decoded = decode_store(store)
        middle = len(decoded.steps) // 2
        serves = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            msgspec.json.encode(load_step(decode_store(store), middle))
            serves.append(time.perf_counter() - t0)
        stored = os.path.getsize(path)
        med = statistics.median
        print(
            f"| {os.path.basename(path)} | {stored / 1e6:.2f} | {med(reads):.3f} | "
            f"{med(plains):.3f} | {med(boths):.3f} | {med(shares):.1%} "
            f"({min(shares):.1%}-{max(shares):.1%}) | {len(store) / 1e3:.1f} | "
            f"{len(store) / stored:.2%} | {med(serves) * 1000:.1f} |"
        )


if __name__ == "__main__":
    main()
