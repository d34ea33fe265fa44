"""How long ``make demo`` takes to answer, with and without the PyTorch Profiler tab.

For each setup, from a cold start (a fresh cache folder): seconds until TensorBoard
answers the address ``make demo`` prints (TensorBoard's page, its plugin list and our
tab's ``/runs``: ``scripts/demo.py``'s ``ROUTES``), seconds until the PyTorch Profiler
tab has loaded every run (its ``/runs`` lists them and no longer says ``loading``), and
the most ``<defunct>`` processes seen under TensorBoard meanwhile. Setups:

- ``without``: TensorBoard without the PyTorch Profiler tab (what the browser tests run);
- ``all_at_once``: ``scripts/demo.py --profiler-loaders 0`` (the tab as it loads: every
  run at once);
- ``two_at_a_time``: ``scripts/demo.py`` (its default, 2 runs of that tab at a time).

    python benchmarks/bench_demo_start.py [--logdir sample_logs] [--repeat 1]

Needs torch-tb-profiler (``make demo`` installs it). Prints one line per run and the
medians; the figures go to benchmarks/RESULTS.md with the date, the machine's load and
this command.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "scripts"))

from demo import ROUTES, answers  # noqa: E402

#: TensorBoard without the PyTorch Profiler tab (as tests/browser/test_tab.py starts it).
WITHOUT_PROFILER = (
    "import sys\n"
    "from absl import app\n"
    "from tensorboard import default, main_lib, program\n"
    "main_lib.global_init()\n"
    "plugins = [p for p in default.get_plugins()\n"
    "           if not getattr(p, '__module__', '').startswith('torch_tb_profiler')]\n"
    "tb = program.TensorBoard(plugins=plugins)\n"
    "sys.argv[0] = 'tensorboard'\n"
    "app.run(tb.main, flags_parser=tb.configure)\n"
)
#: Seconds a setup may take to answer, and to load the PyTorch Profiler tab.
LIMIT_S = 600.0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _defunct(pid: int) -> int:
    """``<defunct>`` processes among the descendants of ``pid`` (ps)."""
    out = subprocess.run(
        ["ps", "-eo", "pid=,ppid=,stat="], capture_output=True, text=True, check=True
    ).stdout
    children: dict[int, list[tuple[int, str]]] = {}
    for line in out.splitlines():
        p, pp, st = line.split(None, 2)
        children.setdefault(int(pp), []).append((int(p), st))
    count, todo = 0, [pid]
    while todo:
        for child, st in children.get(todo.pop(), []):
            count += st.startswith("Z")
            todo.append(child)
    return count


def _profiler_done(base: str, runs: int) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/data/plugin/pytorch_profiler/runs", timeout=5) as r:
            doc = json.loads(r.read())
    except OSError:
        return False
    return not doc.get("loading") and len(doc.get("runs", [])) >= runs


def measure(setup: str, logdir: str, runs: int) -> dict[str, float]:
    """One cold start of ``setup``: seconds to answer, to the profiler tab loaded (NaN
    without it), most ``<defunct>`` processes seen."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as cache:
        tb_args = ["--logdir", logdir, "--host", "127.0.0.1", "--port", str(port)]
        tb_args += ["--kineto_insights_cache_dir", cache]
        if setup == "without":
            cmd = [sys.executable, "-c", WITHOUT_PROFILER, *tb_args]
        else:
            loaders = "0" if setup == "all_at_once" else "2"
            demo = str(REPO / "scripts" / "demo.py")
            cmd = [sys.executable, demo, "--serve", "--profiler-loaders", loaders, "--", *tb_args]
        env = dict(os.environ, TORCH_PROFILER_LOG_LEVEL="ERROR")
        started = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            answered = loaded = float("nan")
            zombies = 0
            while time.monotonic() - started < LIMIT_S:
                zombies = max(zombies, _defunct(proc.pid))
                if answered != answered and answers(base):  # NaN: not yet
                    answered = time.monotonic() - started
                    if setup == "without":
                        break
                if answered == answered and _profiler_done(base, runs):
                    loaded = time.monotonic() - started
                    break
                time.sleep(0.25)
            return {"answer_s": answered, "profiler_tab_s": loaded, "defunct": zombies}
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logdir", default=str(REPO / "sample_logs"))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--setups", default="without,all_at_once,two_at_a_time", help="comma-separated"
    )
    args = parser.parse_args()
    runs = sum(1 for p in Path(args.logdir).iterdir() if p.is_dir())
    print(f"{args.logdir}: {runs} run folders; load {os.getloadavg()[0]:.1f}; routes {ROUTES}")
    results: dict[str, list[dict[str, float]]] = {}
    for i in range(args.repeat):
        for setup in args.setups.split(","):
            got = measure(setup, args.logdir, runs)
            results.setdefault(setup, []).append(got)
            print(
                f"run {i + 1} {setup:14s} answers after {got['answer_s']:6.1f} s; "
                f"PyTorch Profiler tab loaded after {got['profiler_tab_s']:6.1f} s; "
                f"most <defunct> {got['defunct']:.0f}; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    for setup, rows in results.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(
            f"median {setup:14s} answer {med['answer_s']:.1f} s, profiler tab "
            f"{med['profiler_tab_s']:.1f} s, defunct {med['defunct']:.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
