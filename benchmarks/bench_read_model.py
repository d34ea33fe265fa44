"""The constants of the parallel read's cost model (issue 46, ``trace/parallel.py``'s
:class:`~tb_kineto_insights.trace.parallel.ReadCosts`), measured in CPU seconds, which a
loaded machine disturbs far less than wall time.

    python benchmarks/bench_read_model.py SMALL_FILE BIG_FILE [BIG_FILE ...] [--rounds 3]

Per file and round, alternating, each in a fresh child process:

* ``serial``: ``read_trace(path, workers=0)``: the child's CPU seconds
  (``time.process_time``: the inflate thread included);
* ``pool`` (the small file only): a pool of 2 started, a 0.2 s sleep run on each worker,
  and shut down: the workers' start alone (parent and descendants' CPU, wall);
* ``parallel``: ``read_trace(path, workers=2)``: the parent's CPU seconds, and the CPU
  seconds of every process it started (the forkserver, its decode workers, which it
  reaps, and the resource tracker: ``utime + stime + cutime + cstime`` of each descendant
  from ``/proc`` once the read returned), imports of the server included.

The small file gives the fixed cost of the workers (their start, the server's imports);
a big file's CPU over the small file's, per MB of JSON, gives the per-byte costs: serial
(inflate + decode + columns), the parent's share of a parallel read (inflate, cut, send,
merge) and the workers' (decode + columns + pickling). Medians over ``--rounds``.
Prints the load average: compare the modes of one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, sys, time
from tb_kineto_insights.trace.reader import read_trace

def descendants_cpu():
    tick = os.sysconf("SC_CLK_TCK")
    kids = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2 :].split()
            kids.setdefault(int(fields[1]), []).append((int(entry), fields))
    total, todo = 0.0, [os.getpid()]
    while todo:
        for pid, fields in kids.get(todo.pop(), []):
            total += sum(int(x) for x in fields[11:15]) / tick
            todo.append(pid)
    return total

if __name__ == "__main__":
    workers = int(sys.argv[2])
    c0, t0 = time.process_time(), time.perf_counter()
    if workers < 0:  # the pool alone: started, one task per worker done, shut down
        from tb_kineto_insights.trace.parallel import start_pool
        pool = start_pool(-workers)
        for f in [pool.submit(time.sleep, 0.2) for _ in range(-workers)]:
            f.result()
        pool.shutdown(wait=True)
        json_bytes = 0
    else:
        json_bytes = read_trace(sys.argv[1], workers=workers).health.json_bytes
    c1, t1 = time.process_time(), time.perf_counter()
    print(json.dumps({"parent_cpu": c1 - c0, "wall": t1 - t0,
                      "children_cpu": descendants_cpu(), "json_bytes": json_bytes}))
"""


def _child(path: str, workers: int) -> dict[str, float]:
    """One read of ``path`` in a fresh process; its figures."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    env.pop("KINETO_INSIGHTS_READ_WORKERS", None)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, path, str(workers)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("small")
    ap.add_argument("big", nargs="+")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()}")
    rows: dict[str, dict[str, float]] = {}
    for path in [args.small, *args.big]:
        figures: dict[str, list[float]] = {}
        mb = 0.0
        for _ in range(args.rounds):
            for workers in (0, 2, -2) if path == args.small else (0, 2):
                got = _child(path, workers)
                if workers < 0:
                    figures.setdefault("pool_parent", []).append(got["parent_cpu"])
                    figures.setdefault("pool_children", []).append(got["children_cpu"])
                    figures.setdefault("pool_wall", []).append(got["wall"])
                    continue
                mb = got["json_bytes"] / 1e6
                if workers:
                    figures.setdefault("par_parent", []).append(got["parent_cpu"])
                    figures.setdefault("par_children", []).append(got["children_cpu"])
                    figures.setdefault("par_wall", []).append(got["wall"])
                else:
                    figures.setdefault("serial", []).append(got["parent_cpu"])
                    figures.setdefault("serial_wall", []).append(got["wall"])
        rows[path] = {k: statistics.median(v) for k, v in figures.items()} | {"mb": mb}
    print(
        "| file | JSON MB | serial CPU s | parallel parent CPU s | workers+server CPU s "
        "| serial wall s | parallel wall s |"
    )
    print("|---|---|---|---|---|---|---|")
    for path, r in rows.items():
        print(
            f"| {Path(path).name} | {r['mb']:.1f} | {r['serial']:.3f} | {r['par_parent']:.3f} "
            f"| {r['par_children']:.3f} | {r['serial_wall']:.3f} | {r['par_wall']:.3f} |"
        )
    small = rows[args.small]
    print(
        f"pool of 2 alone (start, a 0.2 s task each, shutdown): parent CPU "
        f"{small['pool_parent']:.3f} s, server+workers CPU {small['pool_children']:.3f} s, "
        f"wall {small['pool_wall']:.3f} s"
    )
    print(
        f"fixed (small file): parent {small['par_parent'] - small['serial']:.3f} s "
        f"more than serial, workers+server {small['par_children']:.3f} s"
    )
    for path in args.big:
        r = rows[path]
        dmb = r["mb"] - small["mb"]
        print(
            f"{Path(path).name}: per MB of JSON: serial {1e3 * r['serial'] / r['mb']:.2f} ms, "
            f"parallel parent {1e3 * (r['par_parent'] - small['par_parent']) / dmb:.2f} ms, "
            f"workers {1e3 * (r['par_children'] - small['par_children']) / dmb:.2f} ms"
        )
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
