"""One trace end to end (issue 46): the default ``report`` against one process, the decode
floor and the interpreter's start, side by side, alternating.

    python benchmarks/bench_single_trace.py FILE_OR_DIR [...] [--rounds 5] [--cpus 0,1]
        [--modes start,floor,serial,default] [--pythonpath DIR] [--no-compile]
        [--hta-python .bench-venv/bin/python]  # with mode hta

Per round, each mode once, in a fresh child process (the order rotates every round, so
no mode always runs after another):

* ``start``: ``python -c pass`` (the interpreter's start, with the venv's ``.pth`` files);
* ``gzip`` (only when named in ``--modes``): a bare gzip read of the file (Python's
  ``gzip``, 1 MiB reads, the bytes dropped): issue 46's "x a bare gzip read";
* ``floor``: a child that inflates the file (``zlib_ng``) and decodes it with msgspec
  into the typed events the analysis reads (``benchmarks/profile_per_file.py``'s
  ``floor``), imports and start included: what any reader of the file pays;
* ``serial``: ``report PATH --format json --cache none`` with
  ``KINETO_INSIGHTS_READ_WORKERS=1`` (one process);
* ``default``: the same with the reader's own choice of processes;
* ``two`` (only when named in ``--modes``): the same with two workers whatever the
  machine (``KINETO_INSIGHTS_READ_WORKERS=2``): what the parallel read gives here;
* ``hta`` (only when named in ``--modes``): HolisticTraceAnalysis'
  ``TraceAnalysis(trace_dir=D)`` with ``--hta-python`` (its own environment), ``D`` a
  temporary folder holding one symlink ``rank0.json[.gz]`` to the file: HTA's load, the
  figure of issue 46's "x HTA".

For each mode: the median and the least wall seconds (``time.perf_counter`` around the
child), the median CPU seconds (user + system of the child and every process it
started and waited for, from ``os.wait4``) and the largest peak resident set of one
process of the child's tree (``ru_maxrss`` of ``os.wait4``: the child's own or that of
the largest process it waited for; the read's workers are), in MiB. The load average
is printed before and after: on a shared machine compare the modes of one run only.
``--cpus`` pins every child (``taskset``). ``--pythonpath``: the package's tree
(default: this checkout), to run the same benchmark against another checkout. Output
is a Markdown table for ``benchmarks/RESULTS.md``. A ``report`` that exits non-zero is
printed and stops the run.

Byte code: the package and the floor's module are compiled first (``compileall``, as
``pip install`` compiles a user's install), unless ``--no-compile``. Where
``PYTHONDONTWRITEBYTECODE=1`` is set (the development and device machines) and a module
has no current ``.pyc``, every ``report`` child would compile it again, a cost the floor
child (site-packages only) does not pay: the device run of 2026-12-07 15:53 UTC
(benchmarks/RESULTS.md) ran so, on a fresh tree.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FLOOR_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[2])
from profile_per_file import floor
floor(sys.argv[1])
"""


HTA_CHILD = r"""
import os, sys, tempfile, logging
logging.disable(logging.CRITICAL)
path = sys.argv[1]
d = tempfile.mkdtemp(prefix="bench_hta_")
os.symlink(path, os.path.join(d, "rank0.json.gz" if path.endswith(".gz") else "rank0.json"))
from hta.trace_analysis import TraceAnalysis
TraceAnalysis(trace_dir=d)
"""

GZIP_CHILD = r"""
import gzip, sys
with gzip.open(sys.argv[1], "rb") as f:
    while f.read(1 << 20):
        pass
"""

#: The Python of HTA's environment (``--hta-python``).
_hta_python = str(ROOT / ".bench-venv" / "bin" / "python")


def _command(mode: str, path: str) -> list[str]:
    """The child's argv for ``mode`` on ``path``."""
    if mode == "hta":
        return [_hta_python, "-c", HTA_CHILD, path]
    if mode == "start":
        return [sys.executable, "-c", "pass"]
    if mode == "gzip":
        return [sys.executable, "-c", GZIP_CHILD, path]
    if mode == "floor":
        return [sys.executable, "-c", FLOOR_CHILD, path, str(ROOT / "benchmarks")]
    return [
        sys.executable,
        "-m",
        "tb_kineto_insights.cli",
        "report",
        path,
        "--format",
        "json",
        "--cache",
        "none",
    ]


#: The modes that set the read's cores (``KINETO_INSIGHTS_READ_WORKERS``).
WORKERS_OF = {"serial": "1", "two": "2"}


def _once(mode: str, path: str, pythonpath: str, cpus: str | None) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (MiB, the largest process) of one child of
    ``mode``. Raises ``RuntimeError`` when the child exits with a status other than 0."""
    env = dict(os.environ, PYTHONPATH=pythonpath)
    env.pop("KINETO_INSIGHTS_READ_WORKERS", None)
    if mode == "hta":
        env.pop("PYTHONPATH")
    if mode in WORKERS_OF:
        env["KINETO_INSIGHTS_READ_WORKERS"] = WORKERS_OF[mode]
    argv = _command(mode, path)
    if cpus:
        argv = ["taskset", "-c", cpus, *argv]
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        # cwd: ``python -m`` puts the working folder before PYTHONPATH
        child = subprocess.Popen(
            argv, env=env, cwd=pythonpath, stdout=subprocess.DEVNULL, stderr=err
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t0
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            err.seek(0)
            tail = err.read()[-2000:]
            raise RuntimeError(f"{mode} {path}: exit {child.returncode}: {tail!r}")
    cpu = usage.ru_utime + usage.ru_stime
    return wall, cpu, usage.ru_maxrss / 1024  # Linux: KiB


def main() -> int:
    global _hta_python
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpus", default=None)
    ap.add_argument("--modes", default="start,floor,serial,default")
    ap.add_argument("--pythonpath", default=str(ROOT))
    ap.add_argument("--hta-python", default=None)
    ap.add_argument("--no-compile", action="store_true", help="leave byte code as it is")
    args = ap.parse_args()
    if not args.no_compile:
        compileall.compile_dir(str(Path(args.pythonpath) / "tb_kineto_insights"), quiet=1)
        compileall.compile_file(str(ROOT / "benchmarks" / "profile_per_file.py"), quiet=1)
    _hta_python = args.hta_python or _hta_python
    modes = [m for m in args.modes.split(",") if m]
    print(f"load average before: {os.getloadavg()}, python {sys.version.split()[0]}")
    print(f"affinity {sorted(os.sched_getaffinity(0))}, pinned to {args.cpus or 'none'}")
    print(
        "| input | mode | wall median s | wall min s | CPU median s | peak RSS MiB "
        "| vs serial (wall) | vs gzip (wall) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for path in [os.path.abspath(p) for p in args.paths]:
        walls: dict[str, list[float]] = {m: [] for m in modes}
        cpus: dict[str, list[float]] = {m: [] for m in modes}
        peaks: dict[str, list[float]] = {m: [] for m in modes}
        for r in range(args.rounds):
            order = modes[r % len(modes) :] + modes[: r % len(modes)]
            for mode in order:
                wall, cpu, peak = _once(mode, path, args.pythonpath, args.cpus)
                walls[mode].append(wall)
                cpus[mode].append(cpu)
                peaks[mode].append(peak)
        ref = statistics.median(walls["serial"]) if "serial" in walls else None
        gz = statistics.median(walls["gzip"]) if "gzip" in walls else None
        if "hta" in walls:
            hta = statistics.median(walls["hta"])
            for mode in ("serial", "default"):
                if mode in walls:
                    print(f"HTA / {mode}: {hta / statistics.median(walls[mode]):.1f}x (medians)")
        for mode in modes:
            med = statistics.median(walls[mode])
            rel = f"{med / ref:.2f}x" if ref else ""
            rel_gz = f"{med / gz:.1f}x" if gz else ""
            print(
                f"| {Path(path).name} | {mode} | {med:.3f} | {min(walls[mode]):.3f} "
                f"| {statistics.median(cpus[mode]):.3f} | {max(peaks[mode]):.0f} "
                f"| {rel} | {rel_gz} |"
            )
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
