"""Serial against parallel decode of large traces (issue 14): wall time and peak RSS of
read + analysis, and the cost per GB (least-squares slope over the files given).

    python benchmarks/bench_parallel_read.py [--cpus 0,1] FILE.json.gz ...

Each run is a fresh ``python`` process pinned to ``--cpus`` (``taskset``), so the
workers it starts share those cores. Peak RSS is the largest sum, sampled every 20 ms
from ``/proc``, of the RSS of that process and all its descendants (the forkserver and
the decode workers); shared library pages count once per process, so the sum is an
upper bound. ``serial`` sets ``KINETO_INSIGHTS_READ_WORKERS=1``; ``parallel`` leaves
the reader's own choice (one worker per usable core).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import json, sys, time
from tb_kineto_insights.trace.reader import read_trace
from tb_kineto_insights.summary import summarize_trace
if __name__ == "__main__":
    t0 = time.perf_counter()
    trace = read_trace(sys.argv[1])
    t1 = time.perf_counter()
    summarize_trace(trace)
    t2 = time.perf_counter()
    print(json.dumps({"read_s": t1 - t0, "total_s": t2 - t0,
                      "json_bytes": trace.health.json_bytes}))
"""


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def tree_rss_bytes(root: int) -> int:
    """RSS of ``root`` and all its descendants, summed (bytes)."""
    kids = _children()
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += _rss_bytes(pid)
        todo.extend(kids.get(pid, []))
    return total


def measure(path: str, mode: str, cpus: str) -> dict[str, float]:
    """One run of read + analysis of ``path``; mode ``serial`` or ``parallel``."""
    env = dict(os.environ)
    env.pop("KINETO_INSIGHTS_READ_WORKERS", None)
    if mode == "serial":
        env["KINETO_INSIGHTS_READ_WORKERS"] = "1"
    cmd = [sys.executable, "-c", CHILD, path]
    if cpus:
        cmd = ["taskset", "-c", cpus, *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss_bytes(proc.pid))
        time.sleep(0.02)
    out = proc.stdout.read() if proc.stdout else b""
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} run of {path} failed ({proc.returncode})")
    result = json.loads(out.decode().strip().splitlines()[-1])
    result["peak_tree_rss_bytes"] = peak
    return result


def slope_s_per_gb(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of seconds against GB (10^9 bytes)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--cpus", default="0,1", help="taskset cpu list ('' = none)")
    parser.add_argument("--modes", default="serial,parallel")
    args = parser.parse_args()
    rows: dict[str, list[tuple[float, float]]] = {}
    print(f"{'file':28} {'mode':9} {'JSON MB':>8} {'read s':>7} {'total s':>8} {'peak MB':>8}")
    for path in args.files:
        for mode in args.modes.split(","):
            r = measure(path, mode, args.cpus)
            gb = r["json_bytes"] / 1e9
            rows.setdefault(mode, []).append((gb, r["total_s"]))
            print(
                f"{Path(path).name:28} {mode:9} {r['json_bytes'] / 1e6:8.1f} {r['read_s']:7.2f} "
                f"{r['total_s']:8.2f} {r['peak_tree_rss_bytes'] / 1e6:8.0f}",
                flush=True,
            )
    for mode, points in rows.items():
        if len(points) > 1:
            print(f"{mode}: slope {slope_s_per_gb(points):.2f} s/GB over {len(points)} sizes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
