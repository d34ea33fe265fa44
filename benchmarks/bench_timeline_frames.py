"""What the timeline's Python frames lanes (issue 35) cost: per trace, the time to build
the timeline store and its size (zlib blobs, bytes), with the ``python_frames`` lanes and
without them (``_frame_lanes`` replaced by one that makes none), on one index and one
set of idle pieces (a warm-up call first, then the best of ``--repeat``).

    KINETO_INSIGHTS_READ_WORKERS=1 python benchmarks/bench_timeline_frames.py TRACE_OR_DIR...

Prints a Markdown table (best of ``--repeat`` runs); ``benchmarks/RESULTS.md`` keeps the
numbers with this command.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import tb_kineto_insights.analysis.timeline as tl
from tb_kineto_insights.analysis.idle import IdlePieces, idle_summary
from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.trace import model as m
from tb_kineto_insights.trace.reader import read_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with_frames = tl._frame_lanes
    print("| trace | `python_function` | steps | store with frames | without | growth |")
    print("| --- | --- | --- | --- | --- | --- |")
    for arg in args.traces:
        p = Path(arg)
        path = next(p.rglob("*.pt.trace.json*")) if p.is_dir() else p
        index = build_index(read_trace(str(path)))
        pieces: dict[int, IdlePieces] = {}
        idle_summary(index, Thresholds(), pieces=pieces)
        out = {}
        for label, fn in (("with", with_frames), ("without", lambda _i, _h: [])):
            tl._frame_lanes = fn
            best = float("inf")
            tl.timeline_store(index, pieces)  # warm-up, not timed
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                store = tl.timeline_store(index, pieces)
                best = min(best, time.perf_counter() - t0)
            out[label] = (best * 1000.0, sum(len(b) for b in store.blobs))
        tl._frame_lanes = with_frames
        (tw, bw), (to, bo) = out["with"], out["without"]
        print(
            f"| {arg} | {len(index.trace.tables[m.PYTHON]):,} | {len(index.steps)} "
            f"| {tw:.0f} ms, {bw:,} B | {to:.0f} ms, {bo:,} B "
            f"| +{tw - to:.0f} ms, +{100 * (bw - bo) / bo:.1f} % |"
        )


if __name__ == "__main__":
    main()
