"""What cutting a window costs against a plain read (issue 28), per trace, each in a
fresh process (so that its peak RSS is its own):

* ``read``: ``read_trace`` (the reader's default: worker processes for a large file);
* ``cut``: ``trace.window.cut_window`` of the middle step's window ± 10 % (the plugin's
  ``/window``: the window is known from the stored timeline, one pass over the file);
* ``window``: the CLI's ``window_of_step`` (one read that finds the step window and notes
  where the events lie, then the window's pieces read back from the inflater's
  checkpoints);
* ``cut all``: ``cut_window`` of the whole trace (every event kept: the worst case).

    python benchmarks/bench_window.py TRACE... [--repeat 3]

Wall seconds, medians of ``--repeat`` runs; peak RSS is the largest ``ru_maxrss`` of the
process over its runs (MiB), and of its worker processes (the parallel read's) apart.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def _one(kind: str, path: str, step: int) -> None:
    """Run one measurement here and print ``{"s": wall seconds, ...}`` as JSON."""
    from tb_kineto_insights.cli.window import step_window, window_of_step
    from tb_kineto_insights.trace.reader import read_trace
    from tb_kineto_insights.trace.window import cut_window, window_bounds

    bounds = (0, 0)
    if kind in ("cut", "all"):
        w = step_window(path, step)  # not timed
        bounds = window_bounds(w.start_ns, w.end_ns - w.start_ns, None, None) or bounds
        if kind == "all":
            bounds = (0, 2**62)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    if kind == "read":
        read_trace(path)
        events = 0
    elif kind == "window":
        events = window_of_step(path, step).events
    else:
        events = cut_window(path, *bounds).events
    wall = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "s": wall,
                "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "rss_before_mib": before / 1024,
                "workers_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                "events": events,
            }
        )
    )


def _measure(kind: str, path: str, step: int, repeat: int) -> dict[str, float]:
    runs = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, __file__, "--one", kind, path, "--step", str(step)],
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {
        "s": statistics.median(r["s"] for r in runs),
        "rss_mib": max(r["rss_mib"] for r in runs),
        "workers_rss_mib": max(r["workers_rss_mib"] for r in runs),
        "events": runs[-1]["events"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--step", type=int, default=-1, help="step number (default: middle)")
    args = parser.parse_args()
    if args.one:
        _one(args.one, args.traces[0], args.step)
        return
    print(
        "| trace | stored MB | read s (peak RSS MiB: parent / workers) | cut one step s "
        "(RSS) | cut / read | CLI window s (RSS) | window / read | cut all s (RSS) | "
        "events in the step's cut |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for path in args.traces:
        step = args.step
        if step < 0:
            from tb_kineto_insights.analysis.context import build_index
            from tb_kineto_insights.trace.reader import read_trace

            steps = build_index(read_trace(path)).steps
            step = int(steps.number[len(steps) // 2])
        read = _measure("read", path, step, args.repeat)
        cut = _measure("cut", path, step, args.repeat)
        window = _measure("window", path, step, args.repeat)
        every = _measure("all", path, step, 1)
        print(
            f"| {os.path.basename(path)} | {os.path.getsize(path) / 1e6:.2f} | "
            f"{read['s']:.2f} ({read['rss_mib']:.0f} / {read['workers_rss_mib']:.0f}) | "
            f"{cut['s']:.2f} ({cut['rss_mib']:.0f}) | {cut['s'] / read['s']:.2f} | "
            f"{window['s']:.2f} ({window['rss_mib']:.0f} / {window['workers_rss_mib']:.0f}) | "
            f"{window['s'] / read['s']:.2f} | {every['s']:.2f} ({every['rss_mib']:.0f}) | "
            f"{cut['events']} |"
        )


if __name__ == "__main__":
    main()
