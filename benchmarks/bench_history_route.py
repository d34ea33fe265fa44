"""The plugin's ``/history`` on a log directory of many runs (issue 31: the tab's History
view from the cache, fast on 10,000 runs).

Serves LOGDIR with CACHE (the folders ``bench_history.py --work DIR`` leaves: 10,000
runs and their headline records) through TensorBoard's own WSGI app, in this process,
waits for the plugin's first scan, then asks ``/history`` (or, with ``--route
across_runs``, the landing view's first page) ``--repeat`` times: wall and
CPU time of each answer (CPU of the whole process: the plugin's background threads
count too), its size, and the process's peak RSS.

    python benchmarks/bench_history.py --runs 10000 --work /tmp/bh
    python benchmarks/bench_history_route.py /tmp/bh/logs /tmp/bh/cache
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

from tensorboard import program
from tensorboard.backend import application
from tensorboard.plugins.core import core_plugin
from werkzeug.test import Client

from tb_kineto_insights.serve.plugin import PRELOAD_ENV
from tb_kineto_insights.serve.plugin_loader import KinetoInsightsLoader

ROUTE = "/data/plugin/kineto_insights"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logdir")
    parser.add_argument("cache")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--route",
        choices=("history", "across_runs"),
        default="history",
        help="which route to ask (across_runs: the tab's landing view, its first page)",
    )
    args = parser.parse_args()
    os.environ[PRELOAD_ENV] = "0"  # /history asks for what it needs
    tb = program.TensorBoard(plugins=[core_plugin.CorePluginLoader(), KinetoInsightsLoader()])
    argv = ["tensorboard", "--logdir", args.logdir, "--kineto_insights_cache_dir", args.cache]
    tb.configure(argv=[*argv, "--kineto_insights_workers", "0"])
    client = Client(application.TensorBoardWSGIApp(tb.flags, tb.plugin_loaders))
    started = time.perf_counter()
    while True:
        runs = json.loads(client.get(f"{ROUTE}/runs").data)
        if not runs["scanning"] and runs["runs"]:
            break
        time.sleep(0.5)
    print(f"first scan: {time.perf_counter() - started:.1f} s, {len(runs['runs'])} runs")
    for i in range(args.repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        answer = client.get(f"{ROUTE}/{args.route}")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        doc = json.loads(answer.data)
        if args.route == "across_runs":
            print(
                f"/across_runs #{i + 1}: {wall:.3f} s wall, {cpu:.3f} s CPU, "
                f"{len(answer.data) / 1e3:.1f} kB, {doc['total']} runs ranked, "
                f"{len(doc['rows'])} rows, {doc['loading']} loading"
            )
            continue
        changes = sum(len(s["changes"]) for s in doc["series"])
        size_mb = len(answer.data) / 1e6
        print(
            f"/history #{i + 1}: {wall:.3f} s wall, {cpu:.3f} s CPU, {size_mb:.1f} MB, "
            f"{len(doc['series'])} series, {changes} changes, {len(doc['skipped'])} skipped"
        )
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print(f"load average: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
