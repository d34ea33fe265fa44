"""Fixed cost of a command (issue 14): interpreter start, imports, a small report.

    python benchmarks/bench_startup.py --startup [--repeat 5] [--pythonpath DIR]
        [--trace FILE]

Runs, each in a fresh interpreter, ``--repeat`` times in turn (A B C D A B C D ...,
so a burst of load from a neighbour hits all of them alike), and prints per command
the median wall time, the median CPU time (user + sys of the child, less sensitive
to other load than the wall time), the fastest wall time and the load average:

- ``python -c pass``: the interpreter alone (the floor);
- ``import numpy, msgspec``: the two libraries every analysis needs;
- ``--version``: the console script up to argparse, i.e. importing ``cli`` and what it
  imports;
- ``report TRACE --format json --cache none``: a whole report of a small trace
  (default: ``sample_logs/transformer_eager``'s trace, 12.7 MB of JSON).

``--pythonpath DIR`` puts another copy of the package first on ``sys.path`` (e.g. a
``git archive`` of main unpacked into DIR): a before/after on one machine.

Byte code: a package installed by pip has its ``.pyc`` files compiled at install time;
with ``PYTHONDONTWRITEBYTECODE=1`` and a source tree never compiled, every start
compiles every module again (0.2-0.6 s for this package on a 2-core machine). This
script compiles the package it runs (``compileall``) first, unless ``--no-compile``,
so it measures what a user's install starts in.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = next(iter(sorted((REPO / "sample_logs/transformer_eager").glob("*.json*"))), None)
MAIN = "import sys; from tb_kineto_insights.cli.main import main; sys.exit(main())"


def _commands(trace: Path) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "python -c pass": [py, "-c", "pass"],
        "import numpy, msgspec": [py, "-c", "import numpy, msgspec"],
        "--version": [py, "-c", MAIN, "--version"],
        f"report {trace.name} --format json": [
            py,
            "-c",
            MAIN,
            "report",
            str(trace),
            "--format",
            "json",
            "--cache",
            "none",
        ],
    }


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s of the child) of one run; raises CalledProcessError on failure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd="/", stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--startup", action="store_true", help="the start-up measurement")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--pythonpath", type=Path, default=None)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--no-compile", action="store_true", help="leave byte code as it is")
    args = parser.parse_args()
    if not args.startup:
        parser.error("nothing to do: give --startup")
    if args.trace is None or not args.trace.is_file():
        parser.error(f"no trace file: {args.trace}")
    package_root = args.pythonpath.resolve() if args.pythonpath else REPO
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(package_root), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    if not args.no_compile:
        compileall.compile_dir(str(package_root / "tb_kineto_insights"), quiet=1)
    commands = _commands(args.trace.resolve())
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(args.repeat):
        for name, argv in commands.items():
            samples[name].append(_run(argv, env))
    print(f"package: {package_root}  python: {sys.version.split()[0]}  repeat: {args.repeat}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'command':44s} {'wall s':>7s} {'cpu s':>7s} {'min wall':>9s}")
    for name, runs in samples.items():
        walls = [w for w, _ in runs]
        cpus = [c for _, c in runs]
        print(
            f"{name:44s} {statistics.median(walls):7.3f} {statistics.median(cpus):7.3f} "
            f"{min(walls):9.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
