"""The fixed costs of one ``report`` (issue 46): what a one-trace report pays beyond the
read and the analysis.

    python benchmarks/bench_fixed_costs.py FILE [--repeat 3] [--top 12]

Prints, least of ``--repeat`` (the noise of a shared machine only adds):

* the interpreter's start (``python -c pass``, wall);
* ``report FILE --format json --cache none`` with ``KINETO_INSIGHTS_READ_WORKERS=1``,
  wall, as a child process;
* its imports: ``python -X importtime`` of the same command, the imports' own time
  summed per package (``tb_kineto_insights.<subpackage>``, else the top-level module),
  least per module over the repeats, and the ``--top`` modules of our package by own
  time;
* in this process: the read (``read_trace(workers=0)``), the analysis
  (``summarize_trace``: its schema check included, timed apart too), the report document
  (``build_report`` on the file, which reads and analyses it again) and the JSON
  encoding of it (``cli.json_output.write_json`` into a buffer);
* what is left: the command's wall less the interpreter's start, the imports, the read
  and the report's own work, i.e. the pool, the time budget's watchdog, the exit.

The load average is printed before and after: compare within one run.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _least(repeat: int, call: Callable[[], Any]) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = call()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _child(argv: list[str], importtime: bool = False) -> str:
    """Run ``argv`` (a Python command) in this checkout; its stderr."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), KINETO_INSIGHTS_READ_WORKERS="1")
    py = [sys.executable, "-X", "importtime"] if importtime else [sys.executable]
    done = subprocess.run(
        py + argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"{argv}: exit {done.returncode}: {done.stderr[-2000:]}")
    return done.stderr


def _imports(stderr: str) -> dict[str, float]:
    """Own import seconds per module from ``-X importtime`` output."""
    own: dict[str, float] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = line.split(":", 1)[1].split("|")
        own[name.strip()] = own.get(name.strip(), 0.0) + int(self_us) / 1e6
    return own


def _group(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "tb_kineto_insights" else parts[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    path = os.path.abspath(args.file)
    report = ["-m", "tb_kineto_insights.cli", "report", path, "--format", "json"]
    report += ["--cache", "none"]
    print(f"load average before: {os.getloadavg()}")
    t_start, _ = _least(args.repeat, lambda: _child(["-c", "pass"]))
    t_cmd, _ = _least(args.repeat, lambda: _child(report))
    least: dict[str, float] = defaultdict(lambda: float("inf"))
    for _ in range(args.repeat):
        for module, s in _imports(_child(report, importtime=True)).items():
            least[module] = min(least[module], s)
    t_imports = sum(least.values())

    os.environ["KINETO_INSIGHTS_READ_WORKERS"] = "1"
    from tb_kineto_insights import schema
    from tb_kineto_insights.cli.json_output import write_json
    from tb_kineto_insights.cli.main import build_report
    from tb_kineto_insights.summary import summarize_trace
    from tb_kineto_insights.trace.reader import read_trace

    t_read, trace = _least(args.repeat, lambda: read_trace(path, workers=0))
    t_an, summary = _least(args.repeat, lambda: summarize_trace(trace))
    t_schema, _ = _least(args.repeat, lambda: schema.check_summary(summary))
    t_doc, doc = _least(args.repeat, lambda: build_report(path))
    t_json, _ = _least(args.repeat, lambda: write_json(doc, io.StringIO()))
    left = t_cmd - t_start - t_imports - t_doc - t_json

    print(f"\n{Path(path).name}, least of {args.repeat}, seconds:")
    print("| what | s | share of the command |")
    print("|---|---|---|")
    rows = [
        ("report command (wall)", t_cmd),
        ("interpreter start (`python -c pass`)", t_start),
        ("imports (own time summed, `-X importtime`)", t_imports),
        ("read (in process)", t_read),
        ("analysis (in process, schema check included)", t_an),
        ("  of it: schema check", t_schema),
        ("report document (read + analysis + run view, in process)", t_doc),
        ("JSON written", t_json),
        ("left: command less start, imports, document, JSON", left),
    ]
    for what, s in rows:
        print(f"| {what} | {s:.3f} | {100 * s / t_cmd:.0f} % |")
    groups: dict[str, float] = defaultdict(float)
    for module, s in least.items():
        groups[_group(module)] += s
    print("\nimports by package (own time, s):")
    for name, s in sorted(groups.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {s:.3f}  {name}")
    print("\nour modules with the most own import time (s):")
    ours = [(m, s) for m, s in least.items() if m.startswith("tb_kineto_insights")]
    for name, s in sorted(ours, key=lambda kv: -kv[1])[: args.top]:
        print(f"  {s:.3f}  {name}")
    print(f"\nload average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
