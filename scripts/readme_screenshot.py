"""The README's screenshot (``docs/screenshot.png``), taken again: TensorBoard on
``sample_logs`` (without the PyTorch Profiler tab, on a fresh cache), the Kineto Insights
tab on ``dataloader_workers0`` in Chromium driven by Playwright, once every trace is read
(a few minutes on 2 cores), the page as it opens.

    python scripts/readme_screenshot.py [--logdir sample_logs] [--run dataloader_workers0]

Beside the picture it writes ``docs/screenshot.json``: what the picture shows (the view
switches, the panels in order, the diagnoses' titles). The browser tests open the same
view and compare (``tests/browser/test_tab.py::test_readme_screenshot``): when the tab
changes what it shows there, they fail and name this command, so the picture cannot go
stale unnoticed. Needs Playwright for Python and Chromium (``make browser-deps``;
``KINETO_INSIGHTS_CHROMIUM`` names another Chromium).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PICTURE = REPO / "docs" / "screenshot.png"
FACTS = REPO / "docs" / "screenshot.json"
RUN = "dataloader_workers0"
#: The browser window: wide enough for the view switches and the run pickers on one line.
VIEWPORT = {"width": 1400, "height": 1400}
TIMEOUT_MS = 120_000
#: TensorBoard as its console script starts it, less the PyTorch Profiler tab (its
#: loaders would compete with ours while the page is read; its tab would show in the bar).
WITHOUT_TORCH_PROFILER = (
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
#: What the picture shows, read from the page (the plugin's frame).
FACTS_JS = """() => ({
  views: [...document.querySelectorAll('header.top .modes button')].map(b => b.textContent.trim()),
  panels: [...document.querySelectorAll('section[id^="ki-panel-"]')]
    .filter(s => !s.hidden && s.offsetParent !== null).map(s => s.id.slice('ki-panel-'.length)),
  diagnoses: [...document.querySelectorAll('#ki-panel-diagnoses .diagnosis-title')]
    .map(t => t.textContent.trim()),
})"""


def plugin_frame(page: Any) -> Any:
    """The Kineto Insights iframe inside TensorBoard's page, once it has navigated."""

    def is_plugin(frame: Any) -> bool:
        return "plugin_entry.html?name=kineto_insights" in frame.url

    frame = next((f for f in page.frames if is_plugin(f)), None)
    if frame is None:
        frame = page.wait_for_event("framenavigated", predicate=is_plugin, timeout=TIMEOUT_MS)
    frame.wait_for_load_state("domcontentloaded")
    return frame


def wait_drawn(frame: Any) -> None:
    """Until the diagnoses and every panel shown have their data, and every chart is drawn."""
    frame.wait_for_selector(
        "#ki-panel-diagnoses[data-state]:not([data-state=loading])", timeout=TIMEOUT_MS
    )
    frame.wait_for_function(
        "() => [...document.querySelectorAll('section[id^=\"ki-panel-\"][data-state]')]"
        ".every(s => s.dataset.state !== 'loading')",
        timeout=TIMEOUT_MS,
    )
    frame.wait_for_function(
        "() => [...document.querySelectorAll('.chart')].every(c => c.dataset.chartReady)",
        timeout=TIMEOUT_MS,
    )


def facts(frame: Any) -> dict[str, list[str]]:
    """What the view shows: its view switches, its panels in order, its diagnoses."""
    got: dict[str, list[str]] = frame.evaluate(FACTS_JS)
    return got


def take(page: Any, picture: Path) -> dict[str, list[str]]:
    """The screenshot of ``page`` (already on the run's view) into ``picture``; its facts."""
    frame = plugin_frame(page)
    wait_drawn(frame)
    page.screenshot(path=str(picture), animations="disabled")
    return facts(frame)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(base: str, route: str, **params: str) -> Any:
    query = urllib.parse.urlencode(params)
    url = f"{base}/data/plugin/kineto_insights/{route}" + (f"?{query}" if query else "")
    with urllib.request.urlopen(url, timeout=120) as response:
        return json.loads(response.read())


def _wait_all_read(base: str, proc: subprocess.Popen[bytes], limit_s: float = 900) -> None:
    """Until TensorBoard answers and every span of the log directory is read (the page's
    "N of N traces read"), asking for the spans nobody asked for yet."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"TensorBoard stopped (exit {proc.returncode})")
        try:
            runs = _get(base, "runs")
        except OSError:
            time.sleep(0.5)
            continue
        spans = [(r, w, s) for r in runs.get("runs", []) for w in r["workers"] for s in w["spans"]]
        if (
            spans
            and not runs.get("scanning")
            and all(s["state"] in ("ready", "error") for _, _, s in spans)
        ):
            return
        for r, w, s in spans:
            if s["state"] == "not_loaded":
                _get(base, "summary", run=r["run"], worker=w["worker"], span=s["span"])
        time.sleep(1.0)
    raise SystemExit(f"the log directory was not read within {limit_s:.0f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logdir", default=str(REPO / "sample_logs"))
    parser.add_argument("--run", default=RUN)
    parser.add_argument("--out", default=str(PICTURE), help="the picture (PNG)")
    parser.add_argument("--facts", default=str(FACTS), help="what it shows (JSON)")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("KINETO_INSIGHTS_CHROMIUM", "/usr/bin/chromium")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as cache:
        cmd = [sys.executable, "-c", WITHOUT_TORCH_PROFILER, "--logdir", args.logdir]
        cmd += ["--host", "127.0.0.1", "--port", str(port), "--load_fast=false"]
        cmd += ["--kineto_insights_cache_dir", cache]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_all_read(base, proc)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"]
                )
                try:
                    context = browser.new_context(
                        viewport={"width": VIEWPORT["width"], "height": VIEWPORT["height"]},
                        color_scheme="light",
                    )
                    context.set_default_timeout(TIMEOUT_MS)
                    page = context.new_page()
                    page.goto(f"{base}/#kineto_insights&ki_run={args.run}")
                    shown = take(page, Path(args.out))
                finally:
                    browser.close()
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    Path(args.facts).write_text(json.dumps(shown, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.out} and {args.facts}: {json.dumps(shown, ensure_ascii=False)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
