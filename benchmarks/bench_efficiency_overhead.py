"""CPU time of a serial read and of the analysis of one trace (best of 15, in-process,
``time.process_time``), for comparing two checkouts (issue 26: the efficiency panel's
cost). Run it once per checkout, alternating, with that checkout first on the path::

    PYTHONPATH=/path/to/checkout python benchmarks/bench_efficiency_overhead.py TRACE LABEL
"""

from __future__ import annotations

import sys
import time

from tb_kineto_insights.summary import summarize_trace
from tb_kineto_insights.trace.reader import read_trace


def main() -> None:
    path, label = sys.argv[1], sys.argv[2]
    summarize_trace(read_trace(path, workers=0))
    best_read = best_analyse = float("inf")
    for _ in range(15):
        t0 = time.process_time()
        trace = read_trace(path, workers=0)
        t1 = time.process_time()
        summarize_trace(trace)
        t2 = time.process_time()
        best_read, best_analyse = min(best_read, t1 - t0), min(best_analyse, t2 - t1)
    total = best_read + best_analyse
    print(f"{label} read {best_read:.3f} analyse {best_analyse:.3f} total {total:.3f}")


if __name__ == "__main__":
    main()
