"""``/runs`` latency with 10,000 spans listed (issue 15 §4).

Writes a temporary log directory of ``--runs`` runs × ``--workers`` workers ×
``--spans`` spans (default 10 × 1,000 × 1 = 10,000 files; each an empty but valid
``*.pt.trace.json``: ``/runs`` lists files unread), starts the plugin on it (no
preloading, loads in threads), waits for the first scan, then times ``--requests``
``/runs`` requests through werkzeug's test client (no network): p50 / p95 / max in ms
and the answer's size. Also times one scan of the directory.

    python benchmarks/bench_runs.py [--runs 10] [--workers 1000] [--spans 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from werkzeug.test import Client

from tb_kineto_insights.serve.plugin import KinetoInsightsPlugin

EMPTY_TRACE = b'{"traceEvents": []}'


def write_logdir(root: Path, runs: int, workers: int, spans: int) -> int:
    """``runs`` × ``workers`` × ``spans`` empty trace files under ``root``; their count."""
    for r in range(runs):
        folder = root / f"run{r:03d}"
        folder.mkdir(parents=True)
        for w in range(workers):
            for s in range(spans):
                (folder / f"host{w:05d}_{w}.{1700000000000 + s}.pt.trace.json").write_bytes(
                    EMPTY_TRACE
                )
    return runs * workers * spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--spans", type=int, default=1)
    parser.add_argument("--requests", type=int, default=50)
    args = parser.parse_args()
    os.environ.setdefault("KINETO_INSIGHTS_PRELOAD", "0")  # here, never on import (tests)
    with tempfile.TemporaryDirectory() as tmp:
        logdir, cache = Path(tmp) / "logs", Path(tmp) / "cache"
        n = write_logdir(logdir, args.runs, args.workers, args.spans)
        plugin = KinetoInsightsPlugin(
            SimpleNamespace(logdir=str(logdir), flags=None),
            workers=0,
            cache_dir=cache,
            preload=False,
        )
        try:
            t0 = time.perf_counter()
            plugin.rescan(timeout=120)
            scan_s = time.perf_counter() - t0
            client = Client(plugin.get_plugin_apps()["/runs"])
            times, size = [], 0
            for _ in range(args.requests):
                t0 = time.perf_counter()
                response = client.get("/")
                body = response.get_data()
                times.append((time.perf_counter() - t0) * 1000.0)
                size = len(body)
            times.sort()
            p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
            print(
                f"{n} spans: scan {scan_s:.2f} s; /runs p50 {statistics.median(times):.1f} ms, "
                f"p95 {p95:.1f} ms, max {times[-1]:.1f} ms over {len(times)} requests; "
                f"answer {size / 1024:.0f} KiB"
            )
        finally:
            plugin.close()


if __name__ == "__main__":
    main()
