"""The tab's History view on a log directory of many runs, in a real browser (issue 31:
the History view in at most 2 s on 10,000 runs).

Starts ``tensorboard`` (the one beside this Python) on LOGDIR with CACHE (the folders
``bench_history.py --work DIR`` leaves) and the plugin's ``KINETO_INSIGHTS_PRELOAD=0``,
waits for the plugin's first scan of the log directory and ``--settle`` seconds more
(the loader's worker processes start meanwhile), then, ``--repeat`` times, a fresh
TensorBoard process each time (so that ``/history``'s first answer is measured, not its
memo), opens ``#kineto_insights&ki_mode=history`` in headless Chromium
(``KINETO_INSIGHTS_CHROMIUM``, default ``/usr/bin/chromium``, through Playwright) and
measures, on the browser's own clock:

- ``answer``: from the page's ``/history`` request to its response's last byte
  (the server's first answer: headline files read, document built and encoded, sent);
- ``draw``: from that last byte until every chart of the History panel says it is drawn
  (``data-chart-ready``: JSON parsed, table and ECharts charts rendered);
- ``view``: the two together, what the user waits for once the tab is open.

    python benchmarks/bench_history.py --runs 10000 --work /tmp/bh
    python benchmarks/bench_history_view.py /tmp/bh/logs /tmp/bh/cache
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROUTE = "/data/plugin/kineto_insights"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(
    logdir: str, cache: str, log: Path, settle_s: float
) -> tuple[subprocess.Popen[bytes], str]:
    """A TensorBoard process on LOGDIR and its base URL, once its first scan is done."""
    tensorboard = Path(sys.executable).parent / "tensorboard"
    port = _free_port()
    cmd = [str(tensorboard), "--logdir", logdir, "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--load_fast=false", "--kineto_insights_cache_dir", cache]
    env = {**os.environ, "KINETO_INSIGHTS_PRELOAD": "0"}
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"tensorboard exited with {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"{base}{ROUTE}/runs", timeout=30) as r:
                runs = json.loads(r.read())
            if runs["runs"] and not runs.get("scanning"):
                time.sleep(settle_s)  # the loader's worker processes start meanwhile
                return proc, base
        except OSError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise RuntimeError(f"the first scan did not end within 300 s; see {log}")


def _task_s(cdp: object) -> float:
    """Chromium's ``TaskDuration`` (s the renderer's main thread has been busy) now."""
    metrics = cdp.send("Performance.getMetrics")["metrics"]  # type: ignore[attr-defined]
    return float(next(m["value"] for m in metrics if m["name"] == "TaskDuration"))


def _measure(browser: object, base: str) -> tuple[float, float, int]:
    """(answer_s, draw_s, charts) of one opening of the History view."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})  # type: ignore[attr-defined]
    context.set_default_timeout(120_000)
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Performance.enable")
    busy: list[float] = []

    def finished(request: object) -> None:
        if "/history" in request.url:  # type: ignore[attr-defined]
            busy.append(_task_s(cdp))

    page.on("requestfinished", finished)
    page.goto(f"{base}/#kineto_insights&ki_mode=history")
    page.wait_for_selector("iframe")
    frame = None
    while frame is None or "kineto_insights" not in frame.url:
        handle = page.locator("iframe").element_handle()
        frame = handle.content_frame() if handle else None
        time.sleep(0.05)
    frame.wait_for_selector("#ki-panel-history[data-state]:not([data-state=loading])")
    frame.wait_for_function(
        "() => { const c = [...document.querySelectorAll('#ki-panel-history .chart')];"
        " return c.length > 0 && c.every(e => e.dataset.chartReady); }"
    )
    ready_ms = frame.evaluate("() => performance.now()")
    busy.append(_task_s(cdp))
    timing = frame.evaluate(
        "() => performance.getEntriesByType('resource')"
        ".filter(e => e.name.includes('/history')).map(e => [e.startTime, e.responseEnd])"
    )
    vendor = frame.evaluate(
        "() => performance.getEntriesByType('resource')"
        ".filter(e => e.name.includes('echarts')).map(e => [e.startTime, e.responseEnd])"
    )
    draw_busy_s = busy[-1] - busy[0]
    print(
        f"  /history {timing}, echarts.js {vendor}, ready {ready_ms:.0f} ms; "
        f"renderer main-thread busy while drawing {draw_busy_s:.3f} s"
    )
    charts = frame.locator("#ki-panel-history .chart canvas").count()
    context.close()
    start_ms, end_ms = timing[-1]
    return (end_ms - start_ms) / 1000, (ready_ms - end_ms) / 1000, charts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logdir")
    parser.add_argument("cache")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--settle", type=float, default=5.0, help="s to wait after the scan")
    parser.add_argument("--log", default="/tmp/bench_history_view.log")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("KINETO_INSIGHTS_CHROMIUM", "/usr/bin/chromium")
    answers, draws = [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which(chromium) or chromium)
        for i in range(args.repeat):
            proc, base = _serve(args.logdir, args.cache, Path(args.log), args.settle)
            try:
                answer_s, draw_s, charts = _measure(browser, base)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
            answers.append(answer_s)
            draws.append(draw_s)
            print(
                f"#{i + 1}: /history answer {answer_s:.3f} s, drawing {draw_s:.3f} s, "
                f"view {answer_s + draw_s:.3f} s, {charts} charts"
            )
        browser.close()
    views = [a + d for a, d in zip(answers, draws, strict=True)]
    print(
        f"median: answer {statistics.median(answers):.3f} s, drawing "
        f"{statistics.median(draws):.3f} s, view {statistics.median(views):.3f} s"
    )
    print(f"load average: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
