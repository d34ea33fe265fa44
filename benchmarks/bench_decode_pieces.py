"""Time the typed msgspec decode and the exact-ns timestamp parse of one trace's pieces,
cut as the serial reader cuts them (1 MiB blocks, each at its last event boundary).

Usage: python benchmarks/bench_decode_pieces.py TRACE.json[.gz] [repeats]
Prints, per stage, the best-of-``repeats`` CPU seconds (process time) over all pieces.
"""

from __future__ import annotations

import gzip
import sys
import time
from operator import attrgetter

from tb_kineto_insights.trace.decode import raw_ts_phase_event_decoder
from tb_kineto_insights.trace.framing import TRACE_EVENTS_KEY, last_event_boundary
from tb_kineto_insights.trace.numbers import parse_us_literals_to_ns
from tb_kineto_insights.trace.source import BLOCK_BYTES
from tb_kineto_insights.trace.timestamps import literals_ns


def pieces(path: str) -> list[bytes]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as fh:
        data = fh.read()
    start = TRACE_EVENTS_KEY.search(data).end()
    out, pending, pos, block = [], b"", start, BLOCK_BYTES
    while pos < len(data):
        chunk = data[pos : pos + block]
        pos += block
        cut = last_event_boundary(chunk)
        if cut is None:
            pending += chunk
            continue
        out.append(b"[" + pending + chunk[: cut[0]] + b"]")
        pending = chunk[cut[1] :]
    return out


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)


def main() -> None:
    path = sys.argv[1]
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    ps = pieces(path)
    print(f"{len(ps)} pieces, {sum(map(len, ps)) / 1e6:.1f} MB")
    # the typed decode as decode_typed runs it in exact mode
    dec = raw_ts_phase_event_decoder
    print(f"decode (by phase): {best(lambda: [dec.decode(p) for p in ps], repeats):.3f} s")
    decoded = [dec.decode(p) for p in ps]
    ts = attrgetter("ts")
    lits = [list(map(ts, d)) for d in decoded]
    print(
        "parse_us_literals_to_ns: "
        f"{best(lambda: [parse_us_literals_to_ns(x) for x in lits], repeats):.3f} s"
    )
    # the timestamp stage as decode_typed runs it
    print(f"ts stage (literals_ns): {best(lambda: [literals_ns(x) for x in lits], repeats):.3f} s")


if __name__ == "__main__":
    main()
