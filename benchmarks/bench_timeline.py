"""What the timeline store costs (issue 28): per trace, the read, the summary alone, the
summary with its per-step timelines (one index, one read), the store's size against the
stored file's, and the time to serve one step from the store.

    python benchmarks/bench_timeline.py TRACE... [--repeat 3]

Prints a Markdown table (medians of ``--repeat`` runs); ``benchmarks/RESULTS.md`` keeps
the numbers with this command.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import msgspec

from tb_kineto_insights.analysis.timeline import decode_store, encode_store, load_step
from tb_kineto_insights.summary import summarize_trace, summarize_trace_with_timeline
from tb_kineto_insights.trace.reader import read_trace


def _median_s(fn: object, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(
        "| trace | stored MB | read s | summary s | summary+timeline s | timeline share of "
        "read+analyse | store KB | store / stored file | one step served ms |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for path in args.traces:
        read_s, trace = _median_s(lambda p=path: read_trace(p), args.repeat)
        plain_s, _ = _median_s(lambda t=trace: summarize_trace(t), args.repeat)  # type: ignore[misc]
        both_s, both = _median_s(lambda t=trace: summarize_trace_with_timeline(t), args.repeat)  # type: ignore[misc]
        store = encode_store(both[1])  # type: ignore[index]
        decoded = decode_store(store)
        middle = len(decoded.steps) // 2
        serve_s, _ = _median_s(
            lambda s=store, m=middle: msgspec.json.encode(load_step(decode_store(s), m)),
            args.repeat,
        )
        stored = os.path.getsize(path)
        extra = (both_s - plain_s) / (read_s + plain_s)
        print(
            f"| {os.path.basename(path)} | {stored / 1e6:.2f} | {read_s:.3f} | {plain_s:.3f} | "
            f"{both_s:.3f} | {extra:.1%} | {len(store) / 1e3:.1f} | {len(store) / stored:.2f} | "
            f"{serve_s * 1000:.1f} |"
        )


if __name__ == "__main__":
    main()
