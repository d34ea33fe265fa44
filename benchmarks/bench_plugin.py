"""The TensorBoard plugin under load: is it still fast while a big trace loads?

Builds TensorBoard's own WSGI app (core plugin + ours, flags parsed by TensorBoard) over
a temporary log directory holding a large trace (default: hta_mtia's rank 0, 3 MB gzip,
87 MB of JSON) twice under two names, plus the small sample_logs/ runs, with a fresh
cache folder, and measures through werkzeug's test client (no network):

1. ``/runs`` and ``/data/plugins_listing`` (``is_active``) latency while the big trace
   loads in a worker process (p50 / p95 / max over many requests);
2. first-load time of the big trace, cold (the worker process starts) and warm (a second
   copy, same process), in seconds and per MB of file and of JSON;
3. cached summary latency: from memory (whole summary, one panel, health), and from
   the disk cache after a restart (a new app on the same cache folder: the first
   request, and no parse at all);
4. with ``--threads-too``: ``/runs`` latency when loading in a thread of the TensorBoard
   process instead (``--kineto_insights_workers 0``), to show why processes are used.

Targets (issue "TensorBoard plugin backend"): ``/runs`` while loading and cached
summary both under 50 ms, on a 2-core machine.

    python benchmarks/bench_plugin.py [--trace FILE] [--threads-too]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("KINETO_INSIGHTS_PRELOAD", "0")  # the benchmark decides what loads

from tensorboard import program  # noqa: E402
from tensorboard.backend import application  # noqa: E402
from tensorboard.plugins.core import core_plugin  # noqa: E402
from werkzeug.test import Client  # noqa: E402

from tb_kineto_insights.serve.plugin import KinetoInsightsPlugin  # noqa: E402
from tb_kineto_insights.serve.plugin_loader import KinetoInsightsLoader  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "public" / "hta_mtia" / "mtia_rank_0.json.gz"
SAMPLE_LOGS = REPO / "sample_logs"
PREFIX = "/data/plugin/kineto_insights"
TARGET_MS = 50.0


class Loader(KinetoInsightsLoader):
    made: list[KinetoInsightsPlugin] = []

    def load(self, context: Any) -> Any:
        plugin = super().load(context)
        if plugin is not None:
            Loader.made.append(plugin)
        return plugin


def make_client(logdir: Path, cache: Path, workers: int) -> tuple[Client, KinetoInsightsPlugin]:
    tb = program.TensorBoard(plugins=[core_plugin.CorePluginLoader(), Loader()])
    tb.configure(
        argv=[
            "tensorboard",
            "--logdir",
            str(logdir),
            "--kineto_insights_cache_dir",
            str(cache),
            "--kineto_insights_workers",
            str(workers),
        ]
    )
    app = application.TensorBoardWSGIApp(tb.flags, tb.plugin_loaders)
    return Client(app), Loader.made[-1]


def summary_url(run: str, worker: str, span: str, **extra: str) -> str:
    query = urllib.parse.urlencode({"run": run, "worker": worker, "span": span, **extra})
    return f"{PREFIX}/summary?{query}"


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = call()
    return (time.perf_counter() - t0) * 1000.0, result


def stats_ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    verdict = "ok" if p95 < TARGET_MS else f"OVER {TARGET_MS:.0f} ms"
    return (
        f"p50 {statistics.median(ordered):7.2f} ms  p95 {p95:7.2f} ms  max {ordered[-1]:7.2f} ms  "
        f"(n={len(ordered)}) [{verdict}]"
    )


def span_state(client: Client, run: str) -> str:
    runs = client.get(f"{PREFIX}/runs").json
    for r in runs["runs"]:
        if r["run"] == run:
            return str(r["workers"][0]["spans"][0]["state"])
    raise KeyError(run)


def load_while_polling(
    client: Client, run: str, worker: str, span: str, timeout_s: float = 600.0
) -> tuple[float, list[float], list[float]]:
    """Ask for a span, then hammer /runs and plugins_listing until it is ready.
    Returns (seconds to ready, /runs latencies, plugins_listing latencies)."""
    runs_ms: list[float] = []
    listing_ms: list[float] = []
    t0 = time.perf_counter()
    first = client.get(summary_url(run, worker, span))
    if first.status_code == 200:
        return time.perf_counter() - t0, runs_ms, listing_ms
    assert first.status_code == 202, (first.status_code, first.get_data()[:300])
    while time.perf_counter() - t0 < timeout_s:
        ms, response = timed(lambda: client.get(f"{PREFIX}/runs"))
        runs_ms.append(ms)
        state = next(
            r["workers"][0]["spans"][0]["state"] for r in response.json["runs"] if r["run"] == run
        )
        if state in ("ready", "error"):
            if state == "error":
                raise SystemExit(f"{run}: load failed: {response.json}")
            break
        ms, _ = timed(lambda: client.get("/data/plugins_listing"))
        listing_ms.append(ms)
        time.sleep(0.01)
    return time.perf_counter() - t0, runs_ms, listing_ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="the large trace")
    parser.add_argument("--repeat", type=int, default=200, help="requests per cached latency")
    parser.add_argument(
        "--threads-too", action="store_true", help="also measure loading in a thread"
    )
    args = parser.parse_args(argv)
    if not args.trace.is_file():
        print(f"large trace not found: {args.trace}", file=sys.stderr)
        return 2

    work = Path(tempfile.mkdtemp(prefix="bench-plugin-"))
    try:
        logdir = work / "logs"
        for name in ("big", "big_copy"):
            (logdir / name).mkdir(parents=True)
            shutil.copy(args.trace, logdir / name / args.trace.name)
        if SAMPLE_LOGS.is_dir():
            for run in SAMPLE_LOGS.iterdir():
                if run.is_dir():
                    shutil.copytree(run, logdir / run.name)
        file_mb = args.trace.stat().st_size / 1e6
        worker = args.trace.name
        for suffix in (".json.gz", ".json"):
            if worker.endswith(suffix):
                worker = worker[: -len(suffix)]
                break
        print(f"cpu cores: {os.cpu_count()}; trace: {args.trace} ({file_mb:.1f} MB)")

        # 1 + 2: /runs while the big trace loads, cold then warm worker process.
        client, plugin = make_client(logdir, work / "cache", workers=2)
        listed = client.get(f"{PREFIX}/runs").json["runs"]
        n_runs = len(listed)
        print(f"runs discovered: {n_runs}")
        big = next(r for r in listed if r["run"] == "big")["workers"][0]
        worker, span = big["worker"], big["spans"][0]["span"]  # as the plugin names them
        cold_s, runs_ms, listing_ms = load_while_polling(client, "big", worker, span)
        summary = client.get(summary_url("big", worker, span)).json
        json_mb = summary["health"]["json_bytes"] / 1e6
        print("\n/runs while the big trace loads (worker processes):")
        print(f"  /runs                  {stats_ms(runs_ms)}")
        print(f"  plugins_listing        {stats_ms(listing_ms)}")
        warm_s, more_runs, _ = load_while_polling(client, "big_copy", worker, span)
        print(f"  /runs (2nd load)       {stats_ms(more_runs)}")
        print("\nfirst load of the big trace (request → ready, polled every ~10 ms):")
        for label, secs in (("cold worker", cold_s), ("warm worker", warm_s)):
            print(
                f"  {label:12s} {secs:6.2f} s   {secs / file_mb:6.3f} s per MB of file   "
                f"{1000 * secs / json_mb:6.1f} ms per MB of JSON ({json_mb:.0f} MB JSON)"
            )

        # 3: cached summary latency, from memory.
        big = summary_url("big", worker, span)
        print("\ncached summary (memory):")
        for label, target in (
            ("whole summary", big),
            ("one panel (steps)", summary_url("big", worker, span, panel="steps")),
            ("health route", big.replace("/summary?", "/health?")),
        ):
            samples = [timed(lambda t=target: client.get(t))[0] for _ in range(args.repeat)]
            size = len(client.get(target).get_data())
            print(f"  {label:22s} {stats_ms(samples)}  {size / 1e3:.0f} kB")
        gz_samples = [
            timed(lambda: client.get(big, headers={"Accept-Encoding": "gzip"}))[0]
            for _ in range(args.repeat)
        ]
        print(f"  {'whole, gzip':22s} {stats_ms(gz_samples)}")
        plugin.close()

        # 3b: after a restart: the disk cache, no parse.
        client2, plugin2 = make_client(logdir, work / "cache", workers=2)
        state = span_state(client2, "big")
        first_ms, response = timed(lambda: client2.get(big))
        assert response.status_code == 200, response.status_code
        samples = [timed(lambda: client2.get(big))[0] for _ in range(args.repeat)]
        print("\nafter a restart (disk cache):")
        print(f"  state before any request: {state}; loads started: {plugin2.loader.loads_started}")
        print(f"  first request (disk)   {first_ms:7.2f} ms")
        print(f"  then (memory)          {stats_ms(samples)}")
        plugin2.close()

        if args.threads_too:
            client3, plugin3 = make_client(logdir, work / "cache-threads", workers=0)
            _, thread_runs, _ = load_while_polling(client3, "big", worker, span)
            print("\n/runs while the big trace loads in a thread of this process (workers=0):")
            print(f"  /runs                  {stats_ms(thread_runs)}")
            plugin3.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
