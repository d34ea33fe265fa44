"""CPU time of a serial read and of the analysis of one trace (best of N, in-process,
``time.process_time``), for comparing two checkouts (issue 26: the efficiency panel's
cost). Run it once per checkout, alternating, with that checkout first on the path::

    PYTHONPATH=/path/to/checkout python benchmarks/bench_efficiency_overhead.py TRACE LABEL
    PYTHONPATH=/path/to/checkout python benchmarks/bench_efficiency_overhead.py TRACE LABEL \
        --without-efficiency [--repeat 15]

``--without-efficiency`` measures the same checkout with issue 26's work switched off:
the reader keeps no ``Input type``, ``Concrete Inputs`` or ``flops`` args (no op has a
formula: ``trace.op_names.has_formula`` / ``needs_scalars`` answer False) and the
summary's efficiency panel is the empty one. Against a run without the flag that is
what the efficiency panel costs today, whatever else the checkout has gained since.
"""

from __future__ import annotations

import argparse
import time

from tb_kineto_insights import summary as summary_module
from tb_kineto_insights.analysis import efficiency
from tb_kineto_insights.summary import summarize_trace
from tb_kineto_insights.trace import op_names
from tb_kineto_insights.trace.reader import read_trace


def _switch_off_efficiency() -> None:
    op_names.has_formula = lambda name: False
    op_names.needs_scalars = lambda name: False

    def empty(index, thresholds=None):  # type: ignore[no-untyped-def]
        return efficiency._empty([], len(index.steps))

    summary_module.efficiency_summary = empty  # type: ignore[assignment]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace")
    parser.add_argument("label")
    parser.add_argument("--without-efficiency", action="store_true")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    if args.without_efficiency:
        _switch_off_efficiency()
    summarize_trace(read_trace(args.trace, workers=0))
    best_read = best_analyse = float("inf")
    for _ in range(args.repeat):
        t0 = time.process_time()
        trace = read_trace(args.trace, workers=0)
        t1 = time.process_time()
        summarize_trace(trace)
        t2 = time.process_time()
        best_read, best_analyse = min(best_read, t1 - t0), min(best_analyse, t2 - t1)
    total = best_read + best_analyse
    print(f"{args.label} read {best_read:.3f} analyse {best_analyse:.3f} total {total:.3f}")


if __name__ == "__main__":
    main()
