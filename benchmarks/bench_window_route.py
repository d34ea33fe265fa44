"""Concurrent ``/window`` requests against one large trace (issue 47: "4 concurrent
``/window`` of a 300 MB trace keep TensorBoard under its memory cap"): TensorBoard's own
WSGI app in this process, the plugin with its worker processes (default settings, or
``--workers``), the trace copied into a fresh log directory, no cache.

Waits until the span is summarised, then sends ``--concurrent`` identical ``/window``
requests for its middle step at once (threads; werkzeug's test client, no network),
and samples the resident memory of this process and all its children (the load
workers, their decode processes) every 50 ms: before, the peak while the requests run,
and after. Prints each answer's status, size and wall time, and the cap a load runs
under (``--kineto_insights_load_max_rss_mib``, default half the machine's memory).

    python benchmarks/bench_window_route.py TRACE.json.gz [--concurrent 4] [--cap-mib 0]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from tensorboard import program
from tensorboard.backend import application
from tensorboard.plugins.core import core_plugin
from werkzeug.test import Client

from tb_kineto_insights.serve.plugin_loader import KinetoInsightsLoader
from tb_kineto_insights.service.worker_pool import tree_rss_bytes

ROUTE = "/data/plugin/kineto_insights"
MIB = 1024**2


class Sampler(threading.Thread):
    """The peak resident memory of this process tree while it runs (50 ms samples)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, tree_rss_bytes(os.getpid()))
            time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--concurrent", type=int, default=4)
    parser.add_argument("--cap-mib", type=float, default=None, help="the load memory cap")
    args = parser.parse_args()
    logdir = Path(tempfile.mkdtemp(prefix="bench-window-route-"))
    try:
        run = logdir / "big"
        run.mkdir()
        name = Path(args.trace).name
        if ".pt.trace.json" not in name:
            name = "worker0.1.pt.trace.json" + (".gz" if name.endswith(".gz") else "")
        shutil.copyfile(args.trace, run / name)
        argv = ["tensorboard", "--logdir", str(logdir), "--kineto_insights_cache_dir", "none"]
        if args.cap_mib is not None:
            argv += ["--kineto_insights_load_max_rss_mib", str(args.cap_mib)]
        tb = program.TensorBoard(plugins=[core_plugin.CorePluginLoader(), KinetoInsightsLoader()])
        tb.configure(argv=argv)
        client = Client(application.TensorBoardWSGIApp(tb.flags, tb.plugin_loaders))
        started = time.perf_counter()
        span = None
        while time.perf_counter() - started < 600:
            runs = json.loads(client.get(f"{ROUTE}/runs").data)
            spans = [
                (r["run"], w["worker"], s)
                for r in runs["runs"]
                for w in r["workers"]
                for s in w["spans"]
            ]
            if spans and spans[0][2]["state"] in ("ready", "error"):
                span = spans[0]
                break
            time.sleep(0.5)
        if span is None or span[2]["state"] != "ready":
            print(f"the span did not load: {span}")
            return 1
        run_name, worker, info = span
        query = f"run={run_name}&worker={worker}&span={info['span']}"
        summary = json.loads(client.get(f"{ROUTE}/summary?{query}").data)
        steps = [s["number"] for s in summary["steps"]["steps"]]
        step = steps[len(steps) // 2]
        print(
            f"{args.trace}: {os.path.getsize(args.trace) / 1e6:.1f} MB on disk, summarised in "
            f"{time.perf_counter() - started:.1f} s, {len(steps)} steps; /window of step {step}"
        )
        time.sleep(2.0)  # the load's worker settles
        before = tree_rss_bytes(os.getpid())
        sampler = Sampler()
        sampler.start()
        answers: list[tuple[int, int, float]] = []

        def ask() -> None:
            t0 = time.perf_counter()
            got = client.get(f"{ROUTE}/window?{query}&step={step}&wait=1")
            answers.append((got.status_code, len(got.data), time.perf_counter() - t0))

        t0 = time.perf_counter()
        threads = [threading.Thread(target=ask) for _ in range(args.concurrent)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        time.sleep(2.0)
        sampler.done.set()
        sampler.join()
        after = tree_rss_bytes(os.getpid())
        for status, size, took in sorted(answers, key=lambda a: a[2]):
            print(f"  answer {status}, {size / 1e6:.1f} MB, {took:.2f} s")
        cap = tb.flags.kineto_insights_load_max_rss_mib
        print(
            f"{args.concurrent} concurrent /window: {wall:.2f} s; TensorBoard's process tree "
            f"{before / MIB:.0f} MiB before, peak {sampler.peak / MIB:.0f} MiB, "
            f"{after / MIB:.0f} MiB 2 s after (load cap: {cap if cap is not None else 'default'})"
        )
        return 0
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
