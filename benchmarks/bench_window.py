"""What cutting a window costs against a plain read (issue 28), per trace, each in a
fresh process (so that its peak RSS is its own):

* ``read``: ``read_trace`` (``--workers``: the reader's worker processes; default 1, a
  serial read, whose CPU time is all in the process measured);
* ``cut``: ``trace.window.cut_window`` of the middle step's window ± 10 % (the plugin's
  ``/window``: the window is known from the stored timeline; one pass over the file);
* ``window``: the CLI's ``window_of_step`` (one read that finds the step window and notes
  where the events lie, then the window's pieces read back from the inflater's
  checkpoints), with the same ``--workers`` as the read;
* ``cut all``: ``cut_window`` of the whole trace (every event kept: the worst case).

    python benchmarks/bench_window.py TRACE... [--repeat 3] [--workers 1]

Per measurement: wall seconds and CPU seconds of the process (``time.process_time``;
the better figure on a loaded machine, where wall time mostly measures the others),
medians of ``--repeat`` runs; peak RSS is the largest ``ru_maxrss`` of the process over
its runs (MiB, ``VmHWM``). The window's bounds are found once in the parent and handed to the cut
processes, so their RSS is the cut's alone.
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


def _peak_rss_mib() -> float:
    """This process's peak RSS (``VmHWM``: of its own address space, unlike
    ``ru_maxrss``, which Linux carries over ``execve`` from the parent)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _one(kind: str, path: str, step: int, lo: int, hi: int) -> None:
    """Run one measurement here and print ``{"s", "cpu_s", "rss_mib", "events"}``."""
    from tb_kineto_insights.service.windows import window_of_step
    from tb_kineto_insights.trace.reader import read_trace
    from tb_kineto_insights.trace.window import cut_window

    t0, c0 = time.perf_counter(), time.process_time()
    if kind == "read":
        read_trace(path)
        events = 0
    elif kind == "window":
        events = window_of_step(path, step).events
    elif kind == "all":
        events = cut_window(path, 0, 2**62).events
    else:
        events = cut_window(path, lo, hi).events
    print(
        json.dumps(
            {
                "s": time.perf_counter() - t0,
                "cpu_s": time.process_time() - c0,
                "rss_mib": _peak_rss_mib(),
                "events": events,
            }
        )
    )


def _measure(
    kind: str, path: str, step: int, bounds: tuple[int, int], repeat: int, workers: int
) -> dict[str, float]:
    env = {**os.environ, "KINETO_INSIGHTS_READ_WORKERS": str(workers)}
    runs = []
    for _ in range(repeat):
        args = [sys.executable, __file__, "--one", kind, path, "--step", str(step)]
        args += ["--bounds", f"{bounds[0]}:{bounds[1]}"]
        out = subprocess.run(args, capture_output=True, text=True, check=True, env=env)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {
        "s": statistics.median(r["s"] for r in runs),
        "cpu_s": statistics.median(r["cpu_s"] for r in runs),
        "rss_mib": max(r["rss_mib"] for r in runs),
        "events": runs[-1]["events"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1, help="the reader's worker processes")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--step", type=int, default=-1, help="step number (default: middle)")
    parser.add_argument("--bounds", default="0:1", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        lo, hi = (int(v) for v in args.bounds.split(":"))
        _one(args.one, args.traces[0], args.step, lo, hi)
        return
    from tb_kineto_insights.service.windows import step_window
    from tb_kineto_insights.trace.window import window_bounds

    print(
        "| trace | stored MB | JSON MB | read: wall s / CPU s (peak RSS MiB) | cut one step "
        "| cut ÷ read (wall / CPU) | CLI window | window ÷ read (wall / CPU) | cut all |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for path in args.traces:
        from tb_kineto_insights.analysis.trace_index import build_index
        from tb_kineto_insights.trace.reader import read_trace

        trace = read_trace(path)
        steps = build_index(trace).steps
        json_mb = trace.health.json_bytes / 1e6
        del trace
        step = args.step if args.step >= 0 else int(steps.number[len(steps) // 2])
        w = step_window(path, step)
        bounds = window_bounds(w.start_ns, w.end_ns - w.start_ns, None, None) or (0, 1)
        m = {
            kind: _measure(
                kind, path, step, bounds, args.repeat if kind != "all" else 1, args.workers
            )
            for kind in ("read", "cut", "window", "all")
        }

        cell = {k: f"{v['s']:.2f} / {v['cpu_s']:.2f} ({v['rss_mib']:.0f})" for k, v in m.items()}
        ratio = {
            k: f"{v['s'] / m['read']['s']:.2f} / {v['cpu_s'] / m['read']['cpu_s']:.2f}"
            for k, v in m.items()
        }

        print(
            f"| {os.path.basename(path)} (step {step}: {m['cut']['events']} events) | "
            f"{os.path.getsize(path) / 1e6:.2f} | {json_mb:.0f} | {cell['read']} | "
            f"{cell['cut']} | {ratio['cut']} | {cell['window']} | {ratio['window']} | "
            f"{cell['all']} |"
        )


if __name__ == "__main__":
    main()
