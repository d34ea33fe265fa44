"""What cutting a window costs against a plain read (issue 28): per trace, the read
(``read_trace``), and ``trace.window.cut_window`` of its middle step window ± 10 % and
of the whole trace.

    python benchmarks/bench_window.py TRACE... [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from tb_kineto_insights.analysis.context import build_index
from tb_kineto_insights.trace.reader import read_trace
from tb_kineto_insights.trace.window import cut_window, window_bounds


def _median_s(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| trace | stored MB | read s | cut one step s | step / read | cut all s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for path in args.traces:
        read_s = _median_s(lambda p=path: read_trace(p), args.repeat)  # type: ignore[misc]
        steps = build_index(read_trace(path)).steps
        i = len(steps) // 2
        start, end = int(steps.start_ns[i]), int(steps.end_ns[i])
        lo, hi = window_bounds(start, end - start, None, None) or (start, end)
        step_s = _median_s(lambda p=path, a=lo, b=hi: cut_window(p, a, b), args.repeat)  # type: ignore[misc]
        all_s = _median_s(lambda p=path: cut_window(p, 0, 2**62), args.repeat)  # type: ignore[misc]
        print(
            f"| {os.path.basename(path)} | {os.path.getsize(path) / 1e6:.2f} | {read_s:.3f} | "
            f"{step_s:.3f} | {step_s / read_s:.2f} | {all_s:.3f} |"
        )


if __name__ == "__main__":
    main()
