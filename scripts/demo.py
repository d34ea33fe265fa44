"""``make demo``: TensorBoard on a log directory with the Kineto Insights tab and the
PyTorch Profiler tab beside it; the address is printed once TensorBoard answers it, last
and framed, so that the first click works.

    python scripts/demo.py --logdir sample_logs --port 6006 [--profiler-loaders 2] [-- TB_ARGS]

TensorBoard runs in a child process (this script again, ``--serve``), whose output goes
through as it is; this process asks the address until TensorBoard serves the page and
our tab's ``/runs``, then prints it. Ctrl-C stops both.

The PyTorch Profiler tab (``torch-tb-profiler``, optional) starts one loader thread per
run at once, each spawning a process per trace file (a fresh interpreter importing
pandas): on ``sample_logs`` (68 runs) on 2 busy cores TensorBoard answered after 102 s
(6 s without that tab), 70 finished processes left ``<defunct>`` until exit. In the
child, at most ``--profiler-loaders`` of its runs load at a time (the others wait their
turn; the tab lists runs as they are loaded) and each finished loader process is
reaped: TensorBoard answered after 8 s, that tab complete after 331 s instead of 190 s
(``benchmarks/bench_demo_start.py``, ``benchmarks/RESULTS.md``). Our tab and TensorBoard
are untouched; without ``torch-tb-profiler`` nothing is changed. Stopped by SIGTERM or
Ctrl-C, it stops TensorBoard too.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

#: Loaders of the PyTorch Profiler tab running at once, by default.
DEFAULT_PROFILER_LOADERS = 2
#: Seconds between two questions to the starting TensorBoard.
POLL_S = 0.25
#: Seconds between two "still starting" lines.
NOTE_EVERY_S = 30.0
#: What must answer before the address is printed: TensorBoard's page, its plugin list,
#: and our tab's list of runs.
ROUTES = ("/", "/data/plugins_listing", "/data/plugin/kineto_insights/runs")


def bound_profiler_loaders(limit: int) -> bool:
    """Let at most ``limit`` runs of the PyTorch Profiler tab load at a time, and reap
    each run's loader processes when it is done (they were left ``<defunct>``). False
    (nothing changed) when torch-tb-profiler is not installed or does not load runs
    the way this knows (``TorchProfilerPlugin._load_run``, version 0.4.x)."""
    try:
        from torch_tb_profiler import plugin as profiler
    except ImportError:
        return False
    cls = getattr(profiler, "TorchProfilerPlugin", None)
    load = getattr(cls, "_load_run", None)
    if cls is None or load is None:
        return False
    import multiprocessing

    gate = threading.BoundedSemaphore(limit)

    def bounded(self: Any, run_dir: str) -> None:
        with gate:
            load(self, run_dir)
        multiprocessing.active_children()  # joins the loader processes that ended

    setattr(cls, "_load_run", bounded)  # noqa: B010 (a class not ours, patched)
    return True


def serve(argv: list[str], profiler_loaders: int) -> None:
    """TensorBoard's console script (``tensorboard.main.run_main``) with every plugin,
    the PyTorch Profiler tab's loaders bounded; ``argv``: TensorBoard's arguments."""
    from absl import app
    from tensorboard import default, main_lib, program
    from tensorboard.plugins import base_plugin

    if profiler_loaders > 0:
        bound_profiler_loaders(profiler_loaders)
    main_lib.global_init()
    tb = program.TensorBoard(plugins=default.get_plugins())
    sys.argv = ["tensorboard", *argv]
    try:
        app.run(tb.main, flags_parser=tb.configure)
    except base_plugin.FlagsError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(1)


def answers(base: str) -> bool:
    """Whether every route of :data:`ROUTES` answers 200 at ``base`` now."""
    for route in ROUTES:
        try:
            with urllib.request.urlopen(base + route, timeout=5) as response:
                if response.status != 200:
                    return False
        except (OSError, urllib.error.URLError):
            return False
    return True


def banner(address: str, waited_s: float, profiler: bool, loaders: int) -> str:
    """The framed lines that say where the tab is, printed last."""
    lines = [
        f"Kineto Insights is ready:  {address}",
        f"(TensorBoard answered after {waited_s:.0f} s.)",
    ]
    if profiler:
        lines.append(
            f"The PyTorch Profiler tab keeps loading its runs, {loaders} at a time; "
            "it lists them as they are read."
        )
    lines.append("Ctrl-C stops it.")
    width = max(len(line) for line in lines) + 4
    rule = "=" * width
    return "\n".join(["", rule, *(f"  {line}" for line in lines), rule, ""])


def run(
    logdir: str, host: str, port: int, profiler_loaders: int, extra: list[str] | None = None
) -> int:
    """Start the child, print the address once it answers, wait for it; its exit code
    (130 after Ctrl-C). ``extra``: more TensorBoard arguments."""
    address = f"http://{host}:{port}/#kineto_insights"
    base = f"http://{host}:{port}"
    args = ["--logdir", logdir, "--host", host, "--port", str(port), *(extra or [])]
    env = dict(
        os.environ, TORCH_PROFILER_LOG_LEVEL=os.environ.get("TORCH_PROFILER_LOG_LEVEL", "ERROR")
    )
    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            "--profiler-loaders",
            str(profiler_loaders),
            "--",
            *args,
        ],
        env=env,
    )
    try:
        import importlib.util

        profiler = importlib.util.find_spec("torch_tb_profiler") is not None
        started = time.monotonic()
        noted = started
        while not answers(base):
            if child.poll() is not None:
                print(
                    f"TensorBoard stopped (exit {child.returncode}) before it answered.",
                    file=sys.stderr,
                )
                return child.returncode or 1
            if time.monotonic() - noted >= NOTE_EVERY_S:
                noted = time.monotonic()
                print(f"(waiting for TensorBoard to answer: {noted - started:.0f} s)", flush=True)
            time.sleep(POLL_S)
        print(banner(address, time.monotonic() - started, profiler, profiler_loaders), flush=True)
        return child.wait()
    except KeyboardInterrupt:
        # the terminal sent Ctrl-C to the child too; give it time to stop, then end it
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        return 130
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGINT)
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logdir", default="sample_logs")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6006)
    parser.add_argument(
        "--profiler-loaders",
        type=int,
        default=DEFAULT_PROFILER_LOADERS,
        help="runs of the PyTorch Profiler tab loading at once (0: as it does, all at once)",
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("tensorboard_args", nargs="*", help="after --: more TensorBoard arguments")
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.tensorboard_args, args.profiler_loaders)
        return 0
    # stopped by SIGTERM (a service manager, a test), stop TensorBoard too: run's finally
    # runs on SystemExit, not on SIGTERM's default (the child was left running)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    return run(args.logdir, args.host, args.port, args.profiler_loaders, args.tensorboard_args)


if __name__ == "__main__":
    sys.exit(main())
