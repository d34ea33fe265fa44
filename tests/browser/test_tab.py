"""The Kineto Insights tab in a real browser: Debian's Chromium driven by Playwright for
Python, against a real ``tensorboard`` process on loopback over a copy of sample_logs/
(plus a two-worker run and a run whose kernel names are HTML).

Every page records its requests (anything not on 127.0.0.1/localhost is aborted and
fails the test) and its console (an error fails the test). Panel screenshots go to
``artifacts/screenshots/`` (ignored by git); the README's ``docs/screenshot.png`` is
taken by ``scripts/readme_screenshot.py``, and checked here against what the tab shows.

Skipped, with the reason, when Playwright or Chromium is missing, unless
``KINETO_INSIGHTS_REQUIRE_SHARED=1`` (CI), where that is a failure: ``make browser-deps``
installs both (``pip install playwright``; ``apt-get install chromium``; Playwright's own
browser download is not used).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, SAMPLE_LOGS, SHARED_TRACES, cpu, kernel, wait_until, write_trace

CHROMIUM = Path(os.environ.get("KINETO_INSIGHTS_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PREFIX = "/data/plugin/kineto_insights"
SCREENSHOTS = REPO / "artifacts" / "screenshots"
README_SCREENSHOT = REPO / "docs" / "screenshot.png"
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
SPAN_PANELS = ("overview", "kernels", "idle", "timeline", "communication", "memory", "health")
EVIL = '<img src=x onerror="window.__kiPwned=1">'
TIMEOUT_MS = 60_000
TALL = 2400  # px: every panel fits in the plugin's iframe, for whole-panel screenshots


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (make browser-deps)"
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        return f"Chromium not found at {CHROMIUM} (make browser-deps: apt-get install chromium)"
    if _tensorboard() is None:
        return "the `tensorboard` executable is not installed"
    return None


def _tensorboard() -> str | None:
    beside = Path(sys.executable).parent / "tensorboard"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("tensorboard")


@pytest.fixture(scope="module", autouse=True)
def _browser_tools() -> None:
    reason = _missing()
    if reason:
        if os.environ.get("KINETO_INSIGHTS_REQUIRE_SHARED") == "1":
            pytest.fail(reason + " (KINETO_INSIGHTS_REQUIRE_SHARED=1)")
        pytest.skip(reason)


# --------------------------------------------------------------------------- logdir


def _two_worker_run(root: Path) -> str:
    """A run of two workers: hta's sampled_2ranks from ../shared when present, else two
    copies of sample_logs/ddp's rank file under two worker names."""
    if (SHARED_TRACES / "hta_sampled_2ranks").is_dir():
        shutil.copytree(SHARED_TRACES / "hta_sampled_2ranks", root / "hta_sampled_2ranks")
        return "hta_sampled_2ranks"
    source = next((SAMPLE_LOGS / "ddp").glob("*.pt.trace.json*"))
    span = source.name.split(".")[1]
    target = root / "two_ranks"
    target.mkdir()
    for rank in (0, 1):
        shutil.copy(source, target / f"rank{rank}.{span}.pt.trace.json.gz")
    return "two_ranks"


def _nightly_series(root: Path) -> None:
    """A series for the History view: ``nightly_run1..5``, copies of memory_fixed (3)
    then memory_leak (2) with their clocks an hour apart (an improvement at run 4)."""
    from test_history_real import HOUR_NS, T0, _copy_run

    plan = ["memory_fixed"] * 3 + ["memory_leak"] * 2
    for i, source in enumerate(plan):
        _copy_run(SAMPLE_LOGS / source, root / f"nightly_run{i + 1}", T0 + i * HOUR_NS, 2e9)


def _html_names_run(root: Path) -> str:
    """Two steps whose kernels and ops are named like HTML."""
    events: list[dict[str, Any]] = []
    for step in range(2):
        t0 = 1000.0 + step * 1000.0
        events.append(cpu(f"ProfilerStep#{step + 1}", t0, 900.0, cat="user_annotation"))
        events.append(cpu(EVIL, t0 + 10, 300.0))
        for i in range(4):
            events.append(kernel(f"{EVIL}<float, {i}>", t0 + 50 + i * 20, 4.0, corr=step * 10 + i))
    write_trace(root / "html_names" / "worker0.1700000000000.pt.trace.json", events)
    return "html_names"


#: A stand-in for Perfetto UI on loopback (``--kineto_insights_perfetto_url``): it
#: answers PING with PONG as the real UI does and keeps what it is posted.
FAKE_PERFETTO = """<!doctype html><meta charset="utf-8"><title>fake perfetto</title>
<script>
window.__pings = 0;
window.__got = null;
addEventListener("message", (e) => {
  if (e.data === "PING") { window.__pings += 1; e.source.postMessage("PONG", "*"); return; }
  const p = e.data && e.data.perfetto;
  if (p) {
    window.__got = { title: p.title, fileName: p.fileName, url: p.url,
      bytes: p.buffer.byteLength, text: new TextDecoder().decode(p.buffer) };
  }
});
</script>"""


def _fake_perfetto(root: Path) -> tuple[str, Any]:
    """Serve ``FAKE_PERFETTO`` on loopback; returns its address and the server."""
    import functools
    import http.server
    import threading

    root.mkdir(parents=True, exist_ok=True)
    (root / "perfetto.html").write_text(FAKE_PERFETTO, encoding="utf-8")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}/perfetto.html", httpd


def _truncated_run(root: Path) -> str:
    """Six steps, the file cut at 80 %: a trace_data_loss with a damaged region (its
    evidence holds a list of records)."""
    events: list[dict[str, Any]] = []
    for step in range(6):
        t0 = 1000.0 + step * 1000.0
        events.append(cpu(f"ProfilerStep#{step + 1}", t0, 900.0, cat="user_annotation"))
        for i in range(20):
            events.append(kernel(f"k{i}", t0 + 50 + i * 30, 10.0, corr=step * 100 + i))
    path = write_trace(root / "truncated" / "worker0.1700000000000.pt.trace.json", events)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * 0.8)])
    return "truncated"


@dataclass
class Server:
    base: str
    logdir: Path
    two_ranks: str
    runs: dict[str, Any] = field(default_factory=dict)
    perfetto_url: str = ""

    def get(self, route: str, **params: str) -> tuple[int, Any]:
        query = urllib.parse.urlencode(params)
        target = f"{self.base}{PREFIX}/{route}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(target, timeout=120) as response:
                return int(response.status), json.loads(response.read())
        except urllib.error.HTTPError as err:
            return int(err.code), json.loads(err.read())

    def span_of(self, run: str) -> tuple[str, str]:
        entry = next(r for r in self.runs["runs"] if r["run"] == run)
        worker = entry["workers"][0]
        return worker["worker"], worker["spans"][-1]["span"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("browser")
    logdir = root / "logs"
    logdir.mkdir()
    for run in sorted(SAMPLE_LOGS.iterdir()):
        if run.is_dir():
            shutil.copytree(run, logdir / run.name)
    two_ranks = _two_worker_run(logdir)
    _nightly_series(logdir)
    _html_names_run(logdir)
    _truncated_run(logdir)
    # Old modification times: the plugin reads files at once (it waits a few seconds
    # for files modified just now, which may still be being written).
    old = time.time() - 3600
    for path in logdir.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
        os.utime(path, (old, old))
    perfetto_url, perfetto = _fake_perfetto(root / "fake-perfetto")
    flags = ["--kineto_insights_perfetto_url", perfetto_url]
    try:
        with tensorboard_process(logdir, root, *flags) as (base, proc, log_path):
            server = Server(base, logdir, two_ranks, perfetto_url=perfetto_url)
            _wait_until_ready(server, proc, log_path)
            yield server
    finally:
        perfetto.shutdown()


#: TensorBoard as its console script starts it (``tensorboard.main.run_main``), less the
#: PyTorch Profiler tab: ``make demo`` installs torch-tb-profiler into the same venv, and
#: its loader then read every test's log directory too (the landing view's 2,000 runs:
#: 261 processes, a load of 160 on 2 cores, 15.7 s for a view due in 2 s, and another
#: test's TensorBoard never ended its first scan). ``test_plugin.py`` starts the real
#: console script, with every plugin installed, where both tabs are the point.
WITHOUT_TORCH_PROFILER = (
    "import sys\n"
    "from absl import app\n"
    "from tensorboard import default, main_lib, program\n"
    "from tensorboard.plugins import base_plugin\n"
    "main_lib.global_init()\n"
    "plugins = [p for p in default.get_plugins()\n"
    "           if not getattr(p, '__module__', '').startswith('torch_tb_profiler')]\n"
    "tb = program.TensorBoard(plugins=plugins)\n"
    "sys.argv[0] = 'tensorboard'\n"
    "try:\n"
    "    app.run(tb.main, flags_parser=tb.configure)\n"
    "except base_plugin.FlagsError as e:\n"
    "    print('Error: %s' % e, file=sys.stderr)\n"
    "    sys.exit(1)\n"
)


@contextlib.contextmanager
def tensorboard_process(
    logdir: Path, root: Path, *flags: str
) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """A real ``tensorboard`` on a free loopback port over ``logdir`` (cache and log under
    ``root``, more ``flags`` appended): ``(base URL, process, log path)``; stopped (then
    killed) on exit. It may not answer yet: the caller waits for what it needs."""
    port = _free_port()
    assert _tensorboard() is not None
    cmd = [
        sys.executable,
        "-c",
        WITHOUT_TORCH_PROFILER,
        "--logdir",
        str(logdir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--load_fast=false",
        "--kineto_insights_cache_dir",
        str(root / "cache"),
        *flags,
    ]
    log_path = root / "tensorboard.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield f"http://127.0.0.1:{port}", proc, log_path
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)


def _wait_until_ready(server: Server, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    """Until every span is read (the page is then tested on ready data; loading states
    are covered by the unit tests and by the first request of a cold span)."""
    last: list[Any] = [None]

    def all_read() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"tensorboard exited with {proc.returncode}:\n{_tail(log_path)}")
        try:
            status, runs = server.get("runs")
        except OSError:
            status, runs = 0, None
        last[0] = runs
        if status == 200 and runs and runs["runs"] and not runs.get("scanning"):
            states = [s["state"] for r in runs["runs"] for w in r["workers"] for s in w["spans"]]
            if all(s in ("ready", "error") for s in states):
                server.runs = runs
                return True
            for r in runs["runs"]:  # ask for the ones nobody asked for yet
                for w in r["workers"]:
                    for s in w["spans"]:
                        if s["state"] == "not_loaded":
                            server.get("summary", run=r["run"], worker=w["worker"], span=s["span"])
        return False

    wait_until(all_read, 150, lambda: f"the spans read: {last[0]}\n{_tail(log_path)}", interval=0.5)


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


# --------------------------------------------------------------------------- browser


@pytest.fixture(scope="module")
def browser(server: Server) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


@dataclass
class Watch:
    """What a page did: every request URL, the ones that left localhost, errors."""

    requests: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@pytest.fixture
def open_page(browser: Any, server: Server) -> Iterator[Any]:
    contexts: list[tuple[Any, Watch]] = []

    def make(
        hash_: str = "",
        *,
        dark: bool = False,
        width: int = 1400,
        height: int = 1000,
        allow_errors: tuple[str, ...] = (),
    ) -> Any:
        context = browser.new_context(
            viewport={"width": width, "height": height}, color_scheme="dark" if dark else "light"
        )
        watch = Watch()

        def route(r: Any) -> None:
            url = r.request.url
            watch.requests.append(url)
            host = urllib.parse.urlsplit(url).hostname
            if url.startswith(("data:", "blob:")) or host in LOCAL_HOSTS:
                r.continue_()
            else:
                watch.foreign.append(url)
                r.abort()

        context.route("**/*", route)
        # every wait, navigation included, as patient as the explicit ones: on one slow
        # core TensorBoard's first page can take longer than Playwright's default 30 s
        context.set_default_timeout(TIMEOUT_MS)
        context.set_default_navigation_timeout(TIMEOUT_MS)
        page = context.new_page()

        def console(msg: Any) -> None:
            if msg.type != "error" or str(msg.location.get("url", "")).endswith("/favicon.ico"):
                return
            if not any(allowed in msg.text for allowed in allow_errors):
                watch.errors.append(f"console: {msg.text} at {msg.location}")

        page.on("console", console)
        page.on("pageerror", lambda err: watch.errors.append(f"page error: {err}"))
        page.goto(f"{server.base}/{hash_}")
        contexts.append((context, watch))
        return page

    yield make
    try:
        for _, watch in contexts:
            assert watch.foreign == [], f"requests left localhost: {watch.foreign}"
            assert watch.errors == [], "\n".join(watch.errors)
            assert watch.requests, "no request was recorded"
    finally:
        for context, _ in contexts:
            context.close()


def tab(page: Any) -> Any:
    """The plugin's iframe inside TensorBoard, once it has navigated to the plugin."""

    def is_plugin(frame: Any) -> bool:
        return "plugin_entry.html?name=kineto_insights" in frame.url

    # Playwright's events are handled within its calls only: a frame not listed now has
    # not navigated yet, and its navigation is the event waited for
    frame = next((f for f in page.frames if is_plugin(f)), None)
    if frame is None:
        frame = page.wait_for_event("framenavigated", predicate=is_plugin, timeout=TIMEOUT_MS)
    frame.wait_for_load_state("domcontentloaded")
    return frame


def wait_panels(frame: Any, panels: tuple[str, ...]) -> None:
    for name in panels:
        frame.wait_for_selector(
            f"#ki-panel-{name}[data-state]:not([data-state=loading])", timeout=TIMEOUT_MS
        )
    # charts are drawn once the chart library has loaded
    frame.wait_for_function(
        "() => [...document.querySelectorAll('.chart')].every(c => c.dataset.chartReady)",
        timeout=TIMEOUT_MS,
    )


def shoot(frame: Any, name: str, panel: str) -> Path:
    """A screenshot of one panel (the sticky header is unpinned so it does not cover it;
    the pages of these tests are tall enough for a whole panel)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    frame.evaluate("() => { document.querySelector('header.top').style.position = 'static'; }")
    path = SCREENSHOTS / f"{name}-{panel}.png"
    frame.locator(f"#ki-panel-{panel}").screenshot(path=str(path), animations="disabled")
    assert path.stat().st_size > 1000
    return path


def hash_of(page: Any) -> dict[str, str]:
    body = urllib.parse.urlsplit(page.url).fragment
    out = {}
    for part in body.split("&"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[urllib.parse.unquote(k)] = urllib.parse.unquote(v)
        elif part:
            out["__tab__"] = part
    return out


# --------------------------------------------------------------------------- tests


def test_tab_is_listed(server: Server, open_page: Any) -> None:
    status, _ = server.get("runs")
    assert status == 200
    page = open_page("#kineto_insights")
    page.get_by_text("Kineto Insights", exact=False).first.wait_for(timeout=TIMEOUT_MS)
    frame = tab(page)
    # the landing view (issue 30): every run, worst first, one page of at most 50
    wait_panels(frame, ("runs",))
    assert hash_of(page)["ki_mode"] == "runs"
    status, ranked = server.get("across_runs", limit="500")
    assert status == 200 and ranked["loading"] == 0
    listed = frame.locator("#ki-panel-runs .run-link").all_inner_texts()
    assert listed == [r["run"] for r in ranked["rows"]][:50]
    assert sorted(r["run"] for r in ranked["rows"]) == sorted(
        r.get("label", r["run"]) for r in server.runs["runs"]
    )
    # a run with a high-severity diagnosis comes before any without one
    severities = [r["diagnoses"][0]["severity"] if r["diagnoses"] else None for r in ranked["rows"]]
    assert severities[0] == "high" and severities.index(None) > severities.index("high")
    frame.click("#ki-mode-run")
    frame.wait_for_selector("#ki-run", timeout=TIMEOUT_MS)
    runs = [o.get_attribute("value") for o in frame.locator("#ki-run option").all()]
    assert runs == [r["run"] for r in server.runs["runs"]]


@pytest.mark.parametrize("run", ["dataloader_workers0", "transformer_eager", "memory_leak"])
def test_each_panel_shows_data(server: Server, open_page: Any, run: str) -> None:
    page = open_page(f"#kineto_insights&ki_run={run}", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("diagnoses", *SPAN_PANELS))
    for name in ("overview", "kernels", "idle", "memory", "health"):
        assert frame.get_attribute(f"#ki-panel-{name}", "data-state") == "ready", name
    # charts drawn with data
    for name in ("overview", "kernels", "idle", "memory"):
        assert frame.locator(f"#ki-panel-{name} .chart canvas").count() >= 1, name
    # communication: these single-GPU runs have no collectives, and the panel says so
    comm = frame.locator("#ki-panel-communication")
    assert comm.get_attribute("data-state") == "ready"
    assert "No NCCL/RCCL communication kernels" in comm.inner_text()
    # numbers carry units, and their definitions on hover
    overview = frame.locator("#ki-panel-overview")
    step_kpi = overview.locator(".kpi").first
    assert step_kpi.locator(".kpi-value").inner_text().endswith(" ms")
    assert "ProfilerStep" in (step_kpi.get_attribute("title") or "")
    worker, span = server.span_of(run)
    _, steps = server.get("summary", run=run, worker=worker, span=span, panel="steps")
    assert f"{steps['count']}" == overview.locator(".kpi-value").nth(2).inner_text()
    assert frame.locator("#ki-panel-kernels table.grid th[title]").count() > 3
    # the diagnoses listed are the backend's, in severity order
    _, diagnoses = server.get("summary", run=run, worker=worker, span=span, panel="diagnoses")
    cards = frame.locator("#ki-panel-diagnoses [data-diagnosis-id]")
    shown = [
        (c.get_attribute("data-diagnosis-id"), c.locator(".diagnosis-title").inner_text())
        for c in cards.all()
    ]
    assert sorted(shown) == sorted((d["id"], d["title"]) for d in diagnoses)
    order = ["high", "medium", "low", "info"]
    severities = [c.get_attribute("data-severity") for c in cards.all()]
    assert severities == sorted(severities, key=order.index)
    # the memory-leak run's growth shows up in the memory panel
    if run == "memory_leak":
        memory = frame.locator("#ki-panel-memory")
        assert "16 MiB/step" in memory.inner_text()
        assert "aten::addmm" in memory.inner_text()
    for name in ("diagnoses", *SPAN_PANELS):
        shoot(frame, run, name)


def _timeline_shown(frame: Any, step: int | None = None) -> dict[str, str]:
    """The timeline's data attributes once a step is drawn (that ``step`` when given)."""
    want = "" if step is None else f"[data-step='{step}']"
    frame.wait_for_selector(f"#ki-timeline-info{want}", timeout=TIMEOUT_MS)
    frame.wait_for_selector("#ki-timeline-chart[data-rows]", timeout=TIMEOUT_MS)
    return frame.evaluate(
        "() => ({...document.querySelector('#ki-timeline-info').dataset,"
        " ...document.querySelector('#ki-timeline-chart').dataset})"
    )


@pytest.mark.parametrize("run", ["dataloader_workers0", "transformer_eager"])
def test_timeline_shows_every_kernel_and_the_idle_band(
    server: Server, open_page: Any, run: str
) -> None:
    """Issue 28: the timeline of a step (the median one by default) draws every kernel
    the summary counts in it, and its idle band adds up to the Idle panel's figure."""
    page = open_page(f"#kineto_insights&ki_run={run}", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("idle", "timeline"))
    shown = _timeline_shown(frame)
    worker, span = server.span_of(run)
    _, steps = server.get("summary", run=run, worker=worker, span=span, panel="steps")
    durations = sorted(s["duration_us"] for s in steps["steps"])
    median = durations[(len(durations) - 1) // 2]
    expected_step = min(steps["steps"], key=lambda s: abs(s["duration_us"] - median))["number"]
    assert int(shown["step"]) == expected_step
    _, kernels = server.get("summary", run=run, worker=worker, span=span, panel="kernels")
    per_step = {s["number"]: s["count"] for s in kernels["per_step"]}
    assert int(shown["kernels"]) == per_step[expected_step] > 0
    _, idle = server.get("summary", run=run, worker=worker, span=span, panel="idle")
    device = next(d for d in idle["devices"] if d["device"] == idle["main_device"])
    idle_us = {s["number"]: s["idle_us"] for s in device["per_step"]}[expected_step]
    assert float(shown["idleUs"]) == pytest.approx(idle_us, abs=1e-3)
    assert int(shown["rows"]) > 0
    assert frame.locator("#ki-panel-timeline .chart canvas").count() >= 1
    # another step from the picker: its own kernels
    other = next(n for n in per_step if n != expected_step)
    frame.select_option("#ki-timeline-step", str(other))
    assert int(_timeline_shown(frame, other)["kernels"]) == per_step[other]
    assert hash_of(page)["ki_step"] == str(other)
    shoot(frame, run, "timeline")


def test_largest_gap_opens_the_timeline_back_and_a_pasted_link_restore(
    server: Server, open_page: Any
) -> None:
    """Issue 28: a Largest-gaps row opens the timeline at that gap, highlighted; Back
    returns to the view before; a link pasted into the open tab shows what it names."""
    run = "dataloader_workers0"
    page = open_page(f"#kineto_insights&ki_run={run}", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("idle", "timeline"))
    before = _timeline_shown(frame)
    worker, span = server.span_of(run)
    _, idle = server.get("summary", run=run, worker=worker, span=span, panel="idle")
    device = next(d for d in idle["devices"] if d["device"] == idle["main_device"])
    gap = device["largest_gaps"][0]
    frame.locator("#ki-panel-idle button.gap-open").first.click()
    at_gap = _timeline_shown(frame, gap["step"])
    start, end = gap["offset_us"], gap["offset_us"] + gap["length_us"]
    mark = [float(v) for v in at_gap["mark"].split("~")]
    assert mark == pytest.approx([start, end], abs=1e-3)
    lo, hi = (float(v) for v in at_gap["window"].split("~"))
    assert lo < start and hi > end and hi - lo < 3 * gap["length_us"] + 40
    state = hash_of(page)
    assert state["ki_step"] == str(gap["step"]) and "ki_mark" in state and "ki_window" in state
    # Back: the view before the click (the median step, nothing marked)
    page.go_back()
    frame.wait_for_function(
        "() => document.querySelector('#ki-timeline-chart')?.dataset.mark === ''",
        timeout=TIMEOUT_MS,
    )
    back = _timeline_shown(frame, int(before["step"]))
    assert back["window"] == before["window"]
    assert "ki_step" not in hash_of(page)
    # a pasted link: another step, zoomed
    other = next(s["number"] for s in device["per_step"] if s["number"] != int(before["step"]))
    page.evaluate(
        "([step]) => { location.hash = location.hash.split('&ki_step')[0]"
        " + `&ki_step=${step}&ki_window=10~250`; }",
        [other],
    )
    pasted = _timeline_shown(frame, other)
    frame.wait_for_function(
        "() => document.querySelector('#ki-timeline-chart')?.dataset.window === '10~250'",
        timeout=TIMEOUT_MS,
    )
    assert frame.locator("#ki-timeline-step").input_value() == str(other)
    assert pasted["mark"] == ""


def test_a_diagnosis_opens_the_timeline_at_its_moment(server: Server, open_page: Any) -> None:
    """Issue 28 §3: an idle diagnosis points at its moment: the longest listed gap with
    its cause opens on the timeline, highlighted."""
    run = "dataloader_workers0"
    page = open_page(f"#kineto_insights&ki_run={run}", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("diagnoses", "timeline"))
    _timeline_shown(frame)
    worker, span = server.span_of(run)
    _, idle = server.get("summary", run=run, worker=worker, span=span, panel="idle")
    device = next(d for d in idle["devices"] if d["device"] == idle["main_device"])
    gaps = [g for g in device["largest_gaps"] if g["cause"] == "data_loading"]
    gap = max(gaps, key=lambda g: g["length_us"])
    frame.locator('[data-diagnosis-id="gpu_idle_dataloader"] button.moment').click()
    at = _timeline_shown(frame, gap["step"])
    frame.wait_for_function(
        "() => document.querySelector('#ki-timeline-chart')?.dataset.mark !== ''",
        timeout=TIMEOUT_MS,
    )
    at = _timeline_shown(frame, gap["step"])
    mark = [float(v) for v in at["mark"].split("~")]
    assert mark == pytest.approx([gap["offset_us"], gap["offset_us"] + gap["length_us"]], abs=1e-3)
    # a diagnosis without a place in time has no such button
    assert frame.locator('[data-diagnosis-id="memory_growth"] button.moment').count() == 0


def test_a_what_if_fix_opens_its_moment_on_the_critical_path(
    server: Server, open_page: Any
) -> None:
    """Issue 44 §2, §4: the What-if table lists ``summary.what_if``'s fixes in order with
    their speed-ups; a fix's "On the timeline" opens its diagnosis' moment, highlighted,
    and the step drawn has a critical-path lane holding the step's critical path
    (``summary.critical_path.steps[].length_us``)."""
    run = "dataloader_workers0"
    worker, span = server.span_of(run)
    _, what_if = server.get("summary", run=run, worker=worker, span=span, panel="what_if")
    _, diagnoses = server.get("summary", run=run, worker=worker, span=span, panel="diagnoses")
    _, path = server.get("summary", run=run, worker=worker, span=span, panel="critical_path")
    assert what_if["fixes"] and what_if["fixes"][0]["diagnosis"] == "gpu_idle_dataloader"
    page = open_page(f"#kineto_insights&ki_run={run}", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("diagnoses", "timeline"))
    _timeline_shown(frame)
    rows = frame.locator("#ki-what-if tbody tr")
    assert rows.count() == len(what_if["fixes"])
    for k, fix in enumerate(what_if["fixes"]):
        assert f"{fix['speedup']:.2f}×" in rows.nth(k).inner_text()
    rows.nth(0).locator("button.moment").click()
    moment = next(d for d in diagnoses if d["id"] == "gpu_idle_dataloader")["moment"]
    frame.wait_for_function(
        "() => document.querySelector('#ki-timeline-chart')?.dataset.mark !== ''",
        timeout=TIMEOUT_MS,
    )
    at = _timeline_shown(frame, moment["step"])
    mark = [float(v) for v in at["mark"].split("~")]
    start = moment["offset_us"]
    assert mark == pytest.approx([start, start + moment["length_us"]], abs=1e-3)
    length = next(s["length_us"] for s in path["steps"] if s["number"] == moment["step"])
    assert float(at["pathUs"]) == pytest.approx(length, rel=1e-3)


@pytest.mark.parametrize(
    ("run", "id_"),
    [("transformer_eager", "small_kernel_flood"), ("memory_leak", "memory_growth")],
)
def test_every_diagnosis_with_a_moment_opens_it(
    server: Server, open_page: Any, run: str, id_: str
) -> None:
    """Issue 28 §3: not only idle diagnoses: the small-kernel flood's busiest step and
    the memory peak open on the timeline at the diagnosis's ``moment``, highlighted."""
    worker, span = server.span_of(run)
    _, diagnoses = server.get("summary", run=run, worker=worker, span=span, panel="diagnoses")
    moment = next(d for d in diagnoses if d["id"] == id_)["moment"]
    page = open_page(f"#kineto_insights&ki_run={run}", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("diagnoses", "timeline"))
    _timeline_shown(frame)
    frame.locator(f'[data-diagnosis-id="{id_}"] button.moment').click()
    frame.wait_for_function(
        "() => document.querySelector('#ki-timeline-chart')?.dataset.mark !== ''",
        timeout=TIMEOUT_MS,
    )
    at = _timeline_shown(frame, moment["step"])
    mark = [float(v) for v in at["mark"].split("~")]
    start = moment["offset_us"]
    assert mark == pytest.approx([start, start + moment["length_us"]], abs=1e-3)
    assert hash_of(page)["ki_step"] == str(moment["step"])


def test_the_straggler_opens_its_worst_collective_on_its_rank(
    server: Server, open_page: Any
) -> None:
    """Issue 28 §3: the straggler's card (view across ranks) opens the straggler rank's
    timeline at its worst collective, highlighted."""
    run = "ddp2_straggler"
    _, view = server.get("run_summary", run=run, wait="60")
    d = next(x for x in view["summary"]["diagnoses"] if x["id"] == "communication_straggler")
    moment = d["moment"]
    page = open_page(f"#kineto_insights&ki_run={run}", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("diagnoses", "ranks"))
    card = frame.locator('#ki-panel-diagnoses [data-diagnosis-id="communication_straggler"]')
    card.locator("button.moment").click()
    wait_panels(frame, ("diagnoses", "timeline"))
    assert frame.locator("#ki-worker").input_value() == moment["worker"]
    frame.wait_for_function(
        "() => document.querySelector('#ki-timeline-chart')?.dataset.mark !== ''",
        timeout=TIMEOUT_MS,
    )
    at = _timeline_shown(frame, moment["step"])
    mark = [float(v) for v in at["mark"].split("~")]
    start = moment["offset_us"]
    assert mark == pytest.approx([start, start + moment["length_us"]], abs=1e-3)
    state = hash_of(page)
    assert state["ki_worker"] == moment["worker"] and state["ki_step"] == str(moment["step"])


def test_another_rank_stacks_under_the_timeline(server: Server, open_page: Any) -> None:
    """Issue 28 §1: in a run of several ranks, the same step of another rank stacks under
    this one, aligned on the step start: on ddp2_straggler's rank0 the straggler (rank1)
    is preselected; the choice lives in the address bar (``ki_stack``), and Back and a
    pasted link restore it."""
    run = "ddp2_straggler"
    entry = next(r for r in server.runs["runs"] if r["run"] == run)
    (mine, mine_span), (other, other_span) = [
        (w["worker"], w["spans"][-1]["span"]) for w in entry["workers"]
    ]
    _, view = server.get("run_summary", run=run, wait="60")
    assert view["summary"]["straggler"]["worker"] == other
    page = open_page(f"#kineto_insights&ki_run={run}&ki_worker={mine}", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("timeline",))
    # preselected: the straggler, once the view across ranks is there
    frame.wait_for_selector(f"#ki-timeline-info[data-stacked='{other}']", timeout=TIMEOUT_MS)
    stacked = _timeline_shown(frame)
    step = stacked["step"]
    assert frame.locator("#ki-timeline-peer").input_value() == other
    assert "ki_stack" not in hash_of(page)
    _, own_doc = server.get("timeline", run=run, worker=mine, span=mine_span, step=step)
    _, peer_doc = server.get("timeline", run=run, worker=other, span=other_span, step=step)
    assert int(stacked["lanes"]) == len(own_doc["lanes"]) + len(peer_doc["lanes"])
    # none: this rank alone, said in the address bar
    frame.select_option("#ki-timeline-peer", "")
    frame.wait_for_selector("#ki-timeline-info[data-stacked='']", timeout=TIMEOUT_MS)
    alone = _timeline_shown(frame)
    assert alone["lanes"] == str(len(own_doc["lanes"]))
    assert stacked["kernels"] == alone["kernels"]  # the counts stay this rank's
    assert hash_of(page)["ki_stack"] == "none"
    # Back: stacked again
    page.go_back()
    frame.wait_for_selector(f"#ki-timeline-info[data-stacked='{other}']", timeout=TIMEOUT_MS)
    assert frame.locator("#ki-timeline-peer").input_value() == other
    assert "ki_stack" not in hash_of(page)
    # a pasted link that says none
    page.evaluate("() => { location.hash = location.hash + '&ki_stack=none'; }")
    frame.wait_for_selector("#ki-timeline-info[data-stacked='']", timeout=TIMEOUT_MS)
    assert frame.locator("#ki-timeline-peer").input_value() == ""
    # and one that names the rank
    page.evaluate(
        "([w]) => { location.hash = location.hash.replace('ki_stack=none', `ki_stack=${w}`); }",
        [other],
    )
    frame.wait_for_selector(f"#ki-timeline-info[data-stacked='{other}']", timeout=TIMEOUT_MS)


def test_clicking_a_kernel_names_its_launching_op(open_page: Any) -> None:
    page = open_page("#kineto_insights&ki_run=transformer_eager", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("timeline",))
    _timeline_shown(frame)
    frame.evaluate("() => document.getElementById('ki-panel-timeline').scrollIntoView()")
    box = frame.locator("#ki-timeline-chart").bounding_box()
    # the first GPU stream lane is the top one: click along it until a kernel answers
    for x in range(200, int(box["width"]) - 30, 4):
        frame.locator("#ki-timeline-chart").click(position={"x": x, "y": 18})
        text = frame.locator("#ki-timeline-launch").inner_text()
        if text:
            break
    assert "launched by" in text or "not in this step" in text, text


def test_open_in_perfetto_posts_the_window(server: Server, open_page: Any) -> None:
    """Issue 28: "Open in Perfetto" opens the configured Perfetto UI (here a fake one on
    loopback), PINGs until PONG, posts the window with a title, zoomed by its address;
    the posted window parses as Chrome trace JSON, covers the step, keeps every kernel of
    the cut, and has no partially overlapping complete events, on a with_stack=True
    trace (capture_full has such overlaps)."""
    import gzip

    from tb_kineto_insights.trace.reader import read_trace
    from tb_kineto_insights.trace.window import partial_overlaps

    run = "capture_full"
    page = open_page(f"#kineto_insights&ki_run={run}", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("timeline",))
    shown = _timeline_shown(frame)
    step = int(shown["step"])
    with page.context.expect_page(timeout=TIMEOUT_MS) as popup_info:
        frame.click("#ki-timeline-perfetto")
    popup = popup_info.value
    popup.wait_for_function("() => window.__got !== null", timeout=TIMEOUT_MS)
    got = popup.evaluate("() => window.__got")
    assert popup.evaluate("() => window.__pings") >= 1
    assert popup.url.startswith(server.perfetto_url + "?")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(popup.url).query)
    vis_start, vis_end = int(query["visStart"][0]), int(query["visEnd"][0])
    worker, span = server.span_of(run)
    assert got["title"] == f"{run}/{worker} step #{step}"
    assert got["fileName"] == f"{worker}.{span}.step{step}.window.json"
    data = got["text"].encode()
    doc = json.loads(data)
    assert partial_overlaps(data) == 0
    path = next((server.logdir / run).glob("*.pt.trace.json.gz"))
    assert partial_overlaps(gzip.decompress(path.read_bytes())) > 0  # the file has some
    # covers the step: its own marker is there, and the zoom is the step ± 10 %
    assert f"ProfilerStep#{step}" in {e.get("name") for e in doc["traceEvents"]}
    _, timeline = server.get("timeline", run=run, worker=worker, span=span, step=str(step))
    step_ns = round(timeline["duration_us"] * 1000)
    assert vis_start == timeline["trace_start_ns"] - step_ns // 10
    assert vis_end == timeline["trace_start_ns"] + step_ns + step_ns // 10
    # every kernel of the cut [visStart, visEnd) that the file has
    k = read_trace(str(path)).kernels
    inside = (k.start_ns < vis_end) & (k.start_ns + k.dur_ns > vis_start)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert len(kernels) == int(inside.sum()) > 0
    assert "Sent to Perfetto UI" in frame.locator("#ki-timeline-perfetto-status").inner_text()
    # the download link names the same window
    href = frame.get_attribute("#ki-timeline-download", "href") or ""
    assert "/window?" in href and f"step={step}" in href and "download=1" in href


def test_open_ranks_posts_every_rank_merged(server: Server, open_page: Any) -> None:
    """Issue 28 §4: "Open ranks" posts the shown step of every rank of the run, merged
    into one trace (each rank's processes named after its worker), to the fake Perfetto
    page; the posted trace parses and holds each rank's kernels of the step."""
    run = "ddp2_straggler"
    entry = next(r for r in server.runs["runs"] if r["run"] == run)
    workers = [(w["worker"], w["spans"][-1]["span"]) for w in entry["workers"]]
    page = open_page(
        f"#kineto_insights&ki_run={run}&ki_worker={workers[0][0]}&ki_stack=none", height=TALL
    )
    frame = tab(page)
    wait_panels(frame, ("timeline",))
    step = int(_timeline_shown(frame)["step"])
    with page.context.expect_page(timeout=TIMEOUT_MS) as popup_info:
        frame.click("#ki-timeline-perfetto-ranks")
    popup = popup_info.value
    popup.wait_for_function("() => window.__got !== null", timeout=TIMEOUT_MS)
    got = popup.evaluate("() => window.__got")
    assert got["title"] == f"{run} every rank, step #{step}"
    doc = json.loads(got["text"])
    events = doc["traceEvents"]
    names = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    for worker, span in workers:
        status, own = server.get(
            "window", run=run, worker=worker, span=span, step=str(step), wait="60"
        )
        assert status == 200
        expected = sorted(
            (e["name"], e["ts"]) for e in own["traceEvents"] if e.get("cat") == "kernel"
        )
        pids = {p for p, n in names.items() if n.startswith(f"{worker}: ")}
        kernels = sorted(
            (e["name"], e["ts"]) for e in events if e.get("cat") == "kernel" and e["pid"] in pids
        )
        assert kernels == expected and kernels, worker
    href = frame.get_attribute("#ki-timeline-download-ranks", "href") or ""
    assert "/window_ranks?" in href and f"step={step}" in href


def test_clicking_a_diagnosis_scrolls_to_its_panel(open_page: Any) -> None:
    page = open_page("#kineto_insights&ki_run=memory_leak", height=700)
    frame = tab(page)
    wait_panels(frame, ("diagnoses", *SPAN_PANELS))
    card = frame.locator('[data-diagnosis-id="memory_growth"]')
    assert card.get_attribute("data-target") == "memory"
    card.click()
    frame.wait_for_selector("#ki-panel-memory.flash", timeout=TIMEOUT_MS)
    frame.wait_for_function(
        "() => Math.abs(document.getElementById('ki-panel-memory').getBoundingClientRect().top"
        " - 110) < 60",
        timeout=TIMEOUT_MS,
    )


def test_selection_is_kept_in_the_url(server: Server, open_page: Any) -> None:
    page = open_page("#kineto_insights&ki_run=dataloader_workers0")
    frame = tab(page)
    wait_panels(frame, ("overview",))
    assert frame.locator("#ki-run").input_value() == "dataloader_workers0"
    frame.select_option("#ki-run", "transformer_eager")
    frame.wait_for_function(
        "() => document.querySelector('#ki-main').dataset.view.includes('transformer_eager')",
        timeout=TIMEOUT_MS,
    )
    wait_panels(frame, ("overview",))
    state = hash_of(page)
    worker, span = server.span_of("transformer_eager")
    assert state["__tab__"] == "kineto_insights"
    assert (state["ki_run"], state["ki_worker"], state["ki_span"]) == (
        "transformer_eager",
        worker,
        span,
    )
    page.reload()
    frame = tab(page)
    wait_panels(frame, ("overview",))
    assert frame.locator("#ki-run").input_value() == "transformer_eager"
    assert frame.locator("#ki-span").input_value() == span
    # diff mode is kept as well
    frame.click("#ki-mode-diff")
    wait_panels(frame, ("diff-summary",))
    assert hash_of(page)["ki_mode"] == "diff"
    page.reload()
    frame = tab(page)
    wait_panels(frame, ("diff-summary",))
    assert "active" in (frame.get_attribute("#ki-mode-diff", "class") or "")


def test_diff_headline_box_says_what_the_experiment_gained(server: Server, open_page: Any) -> None:
    """memory_fixed → memory_leak is faster but gains a HIGH leak: the headline box says
    both in one line, and names the gained diagnosis."""
    base, exp = "memory_fixed", "memory_leak"
    page = open_page(
        f"#kineto_insights&ki_mode=diff&ki_base_run={base}&ki_exp_run={exp}", height=TALL
    )
    frame = tab(page)
    wait_panels(frame, ("diff-summary",))
    status, doc = server.get("diff", base_run=base, exp_run=exp)
    assert status == 200
    assert doc["headline"]["text"].endswith("but memory_growth (high) appeared")
    told = frame.locator(".headline .headline-text")
    assert told.inner_text() == doc["headline"]["text"]
    assert "gained" in (told.get_attribute("class") or "")
    assert (
        frame.locator(".headline .headline-gained")
        .inner_text()
        .startswith("memory_growth (high): ")
    )


def test_diff_mode_shows_the_headline(server: Server, open_page: Any) -> None:
    base, exp = "dataloader_workers0", "dataloader_workers4"
    page = open_page(
        f"#kineto_insights&ki_mode=diff&ki_base_run={base}&ki_exp_run={exp}", height=TALL
    )
    frame = tab(page)
    panels = ("diff-summary", "diff-diagnoses", "diff-metrics", "diff-changes")
    wait_panels(frame, panels)
    status, doc = server.get("diff", base_run=base, exp_run=exp)
    assert status == 200
    headline = frame.locator(".headline")
    text = headline.inner_text()
    assert "→" in text
    assert f"{doc['headline']['speedup']:.2f}× faster" in text
    assert headline.get_attribute("data-verdict") == doc["headline"]["verdict"]
    rows = frame.locator("#ki-panel-diff-metrics table.metrics tbody tr")
    assert rows.count() == len(doc["metrics"])
    verdicts = [
        b.inner_text().lower() for b in frame.locator("#ki-panel-diff-metrics .badge").all()
    ]
    assert verdicts == [m["verdict"] for m in doc["metrics"]]
    lost = [
        li.get_attribute("data-diagnosis-id")
        for li in frame.locator("#ki-panel-diff-diagnoses ul.lost li").all()
    ]
    assert lost == doc["diagnoses"]["disappeared"]
    assert frame.locator("#ki-panel-diff-changes .chart canvas").count() >= 1
    for name in panels:
        shoot(frame, "diff", name)
    # one worker and span on the base side: the view reloads, and the URL says so
    worker, span = server.span_of(base)
    frame.select_option("#ki-base-worker", worker)
    frame.wait_for_function(
        "() => !document.querySelector('#ki-base-span').disabled", timeout=TIMEOUT_MS
    )
    frame.select_option("#ki-base-span", span)
    frame.wait_for_function(
        f"() => document.querySelector('#ki-main').dataset.view.includes('{span}')",
        timeout=TIMEOUT_MS,
    )
    wait_panels(frame, ("diff-summary",))
    state = hash_of(page)
    assert (state["ki_base_worker"], state["ki_base_span"]) == (worker, span)
    assert f"{base}/{worker}/{span}" in frame.locator(".headline-sides").inner_text()


def test_history_view_charts_the_series_and_opens_a_change(server: Server, open_page: Any) -> None:
    """Issue 31: the History view draws one chart per series of /history's document and
    lists its change points; "open run" shows that run."""

    def summarised() -> Any:  # every run (the view polls too; this keeps the test exact)
        status, doc = server.get("history")
        assert status == 200
        return doc if not doc["skipped"] else None

    doc = wait_until(summarised, TIMEOUT_MS / 1000, "every run summarised", interval=0.5)
    page = open_page("#kineto_insights&ki_mode=history", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("history",))
    # a chart per series of two runs or more; the runs alone in theirs in one table
    multi = [s for s in doc["series"] if len(s["runs"]) > 1]
    alone = [s["runs"][0]["run"] for s in doc["series"] if len(s["runs"]) == 1]
    heads = frame.locator("#ki-panel-history h3").all_inner_texts()
    assert [h.split(" — ")[0] for h in heads] == [
        *[s["name"] for s in multi],
        "Runs without a series",
    ]
    assert frame.locator("#ki-panel-history .chart canvas").count() == len(multi)
    listed = frame.locator("#ki-history-alone table.history-alone tbody tr td:nth-child(2)")
    assert listed.all_inner_texts() == alone
    changes = [c for s in doc["series"] for c in s["changes"]]
    nightly = next(s for s in doc["series"] if s["name"] == "nightly")
    assert [(c["run"], c["verdict"]) for c in nightly["changes"] if c["metric"] == "step_time"] == [
        ("nightly_run4", "improved")
    ]
    rows = frame.locator("#ki-panel-history table.history-changes tbody tr")
    assert rows.count() == len(changes)
    assert hash_of(page)["ki_mode"] == "history"
    shoot(frame, "history", "history")
    first = changes[0]
    frame.locator(
        "#ki-panel-history table.history-changes button", has_text="open run"
    ).first.click()
    frame.wait_for_function(
        "() => document.querySelector('#ki-main').dataset.view.includes('span')",
        timeout=TIMEOUT_MS,
    )
    state = hash_of(page)
    assert "ki_mode" not in state and state["ki_run"] == first["run"]


def test_a_link_to_a_missing_run_says_so(open_page: Any) -> None:
    """Issue 17 §2: a link naming a run that is not there says so (it used to show the
    first run silently and rewrite the URL); the notice goes once the user picks."""
    page = open_page("#kineto_insights&ki_run=nope")
    frame = tab(page)
    wait_panels(frame, ("overview",))
    banner = frame.locator(".banner.warning")
    banner.wait_for(timeout=TIMEOUT_MS)
    text = banner.inner_text()
    assert 'The run "nope" is not (or no longer) in the log directory.' in text
    shown = frame.locator("#ki-run").input_value()
    assert f'Showing run "{shown}" instead.' in text
    frame.select_option("#ki-run", "transformer_eager")
    frame.wait_for_function("() => document.querySelector('.banner').hidden", timeout=TIMEOUT_MS)


def test_kernel_names_open_in_full_and_tables_say_per_step(server: Server, open_page: Any) -> None:
    """Issue 17 §6, §7: a cut kernel name opens in full (selectable) on click; the kernel
    table shows per-step columns and names its total; idle-gap bars are time per step."""
    run = "transformer_eager"
    page = open_page(f"#kineto_insights&ki_run={run}", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("kernels", "idle"))
    worker, span = server.span_of(run)
    _, steps = server.get("summary", run=run, worker=worker, span=span, panel="steps")
    kernels = frame.locator("#ki-panel-kernels")
    headers = [h.inner_text() for h in kernels.locator("table.grid").first.locator("th").all()]
    assert headers == [
        "Kernel",
        "Count /step",
        "Time /step",
        "Mean",
        "Short",
        f"Time, total ({steps['count']} steps)",
    ]
    cell = kernels.locator("table.grid").first.locator("td.name-col").first
    name = cell.locator(".name")
    full = name.get_attribute("data-full") or ""
    assert full and (name.get_attribute("title") or "").startswith(full)
    name.click()
    box = cell.locator("code.name-full")
    assert box.inner_text() == full
    assert box.evaluate("n => getComputedStyle(n).userSelect") == "all"
    box.click()  # selecting the full name leaves it open
    assert frame.evaluate("() => window.getSelection().toString()") == full
    assert box.count() == 1
    name.click()
    assert box.count() == 0
    idle = frame.locator("#ki-panel-idle").inner_text()
    assert "idle time per step" in idle
    assert f"number of gaps, total over {steps['count']} steps" in idle


def test_diff_lists_names_on_one_side_without_a_verdict(server: Server, open_page: Any) -> None:
    """Issue 17 §9: Triton kernels after torch.compile are 'added', not 'regressed'."""
    base, exp = "transformer_eager", "transformer_compile"
    page = open_page(
        f"#kineto_insights&ki_mode=diff&ki_base_run={base}&ki_exp_run={exp}", height=TALL
    )
    frame = tab(page)
    wait_panels(frame, ("diff-changes",))
    changes = frame.locator("#ki-panel-diff-changes")
    one_sided = changes.locator("table.one-sided").first
    one_sided.wait_for(timeout=TIMEOUT_MS)
    rows = one_sided.locator("tbody tr")
    statuses = {r.locator(".badge").inner_text().lower() for r in rows.all()}
    assert statuses <= {"added", "removed", "moved out"} and "added" in statuses
    assert "triton_" in one_sided.inner_text()
    assert "regressed" not in one_sided.inner_text().lower()


def test_all_ranks_view(server: Server, open_page: Any) -> None:
    run = server.two_ranks
    page = open_page(f"#kineto_insights&ki_run={run}", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("diagnoses", "ranks"))
    assert frame.locator("#ki-worker").input_value() != ""
    assert frame.locator("#ki-worker option").first.inner_text().startswith("All ranks (2")
    status, view = server.get("run_summary", run=run)
    assert status == 200
    ranks = frame.locator("#ki-panel-ranks table.grid").first.locator("tbody tr")
    assert ranks.count() == len(view["summary"]["ranks"]) == 2
    shown = [
        c.get_attribute("data-diagnosis-id")
        for c in frame.locator("#ki-panel-diagnoses [data-diagnosis-id]").all()
    ]
    assert sorted(shown) == sorted(d["id"] for d in view["summary"]["diagnoses"])
    assert hash_of(page).get("ki_ranks") == "all"
    for name in ("diagnoses", "ranks"):
        shoot(frame, "all-ranks", name)
    # one worker: its communication panel, with the across-ranks section
    worker = view["summary"]["ranks"][1]["worker"]
    frame.select_option("#ki-worker", worker)
    wait_panels(frame, ("diagnoses", *SPAN_PANELS))
    frame.wait_for_selector("#ki-across-ranks table.grid", timeout=TIMEOUT_MS)
    comm = frame.locator("#ki-panel-communication")
    if view["summary"]["matched_count"]:
        assert comm.locator(".chart canvas").count() >= 2
    shoot(frame, "rank-worker", "communication")


def test_two_rank_sample_runs_say_per_step(server: Server, open_page: Any) -> None:
    """sample_logs/ddp2_straggler across ranks: the per-rank table says /step and per
    collective, never a bare "Waited"; the diff ddp2_default → ddp2_straggler lists the
    NCCL kernel apart (not judged) and has the waited /step row and the DDP buckets."""
    run = "ddp2_straggler"
    if not (server.logdir / run).is_dir():
        pytest.skip("sample_logs/ddp2_straggler is missing")
    page = open_page(f"#kineto_insights&ki_run={run}", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("diagnoses", "ranks"))
    grid = frame.locator("#ki-panel-ranks table.grid").first
    headers = [h.inner_text().strip() for h in grid.locator("thead th").all()]
    assert "Waited /step" in headers and "Lateness per collective" in headers
    assert "Waited" not in headers and "Lateness" not in headers
    status, view = server.get("run_summary", run=run)
    assert status == 200
    rank0 = next(r for r in view["summary"]["ranks"] if r["rank"] == 0)
    per_step = rank0.get("wait_us_per_step") or rank0["wait_us"] / rank0["step_count"]
    row0 = grid.locator("tbody tr").first.inner_text()
    assert f"{per_step / 1000:.1f} ms" in row0 or f"{per_step / 1000:.2f} ms" in row0, row0
    shoot(frame, "ddp2-straggler", "ranks")
    base = "ddp2_default"
    page = open_page(
        f"#kineto_insights&ki_mode=diff&ki_base_run={base}&ki_exp_run={run}", height=TALL
    )
    frame = tab(page)
    wait_panels(frame, ("diff-summary", "diff-diagnoses", "diff-metrics", "diff-changes"))
    metrics = frame.locator("#ki-panel-diff-metrics").inner_text()
    assert "communication: waited /step (mean over ranks)" in metrics
    assert "all_reduce calls /step" in metrics and "DDP buckets" in metrics
    changes = frame.locator("#ki-panel-diff-changes").inner_text()
    assert "Communication kernels" in changes and "not judged" in changes
    for name in ("diff-metrics", "diff-changes", "diff-diagnoses"):
        shoot(frame, "ddp2-diff", name)


def test_waiting_rank_is_told_it_waits(server: Server, open_page: Any) -> None:
    """sample_logs/ddp2_straggler, rank 0 alone: its own trace's exposed_communication is
    replaced, once the view across ranks arrives, by the run-level one that says it waits
    for rank 1 (issue 11: the waiting rank is not told to tune buckets)."""
    run = "ddp2_straggler"
    if not (server.logdir / run).is_dir():
        pytest.skip("sample_logs/ddp2_straggler is missing")
    status, view = server.get("run_summary", run=run, wait="60")
    assert status == 200
    replaced = view["summary"]["superseded_span_diagnoses"]
    # and rank 1's untraced host work, which the straggler card names as its cause
    assert [(x["rank"], x["id"]) for x in replaced] == [
        (0, "exposed_communication"),
        (1, "gpu_idle_host_untraced"),
    ]
    worker = replaced[0]["worker"]
    page = open_page(f"#kineto_insights&ki_run={run}&ki_worker={worker}", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("diagnoses", *SPAN_PANELS))
    frame.wait_for_selector("#ki-across-ranks table.grid", timeout=TIMEOUT_MS)
    card = frame.locator('#ki-panel-diagnoses [data-diagnosis-id="exposed_communication"]')
    assert card.count() == 1
    text = card.inner_text()
    assert "waiting for rank 1" in text, text
    assert "bucket_cap_mb" not in text, text


def test_straggler_card_says_why_and_opens_its_span(server: Server, open_page: Any) -> None:
    """Issue 27, sample_logs/ddp2_straggler: the straggler card's title says why rank 1 is
    late, its evidence items say it with the same numbers, and its link opens rank 1's
    span; the across-ranks section tells what the others
    lose in one breakdown; every rank's per-kind table shows the run's busbw from the
    matched transfer, the same on both ranks; the diff headline names the straggler."""
    run = "ddp2_straggler"
    if not (server.logdir / run).is_dir():
        pytest.skip("sample_logs/ddp2_straggler is missing")
    status, view = server.get("run_summary", run=run, wait="60")
    assert status == 200
    (kind,) = view["summary"]["kinds"]
    busbw = f"{kind['busbw_gbps']:.0f} GB/s"  # 241.6: three significant digits
    page = open_page(f"#kineto_insights&ki_run={run}", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("diagnoses", "ranks"))
    card = frame.locator('#ki-panel-diagnoses [data-diagnosis-id="communication_straggler"]')
    assert "host time outside traced ops" in card.inner_text()
    # the cause as evidence items, the numbers the title says
    title = card.locator(".diagnosis-title").inner_text()
    why = card.locator('dd[data-key="cause"]').inner_text()
    excess = card.locator('dd[data-key="cause_us_per_step"]').inner_text()
    assert why == "host time outside traced ops" and excess.startswith("+18."), excess
    assert f"{why}, {excess} against the median rank" in title, (title, excess)
    basis = card.locator('dd[data-key="cause_basis"]').inner_text()
    assert basis == "the time before the 5 collectives it is late to", basis
    story = frame.locator("#ki-panel-ranks .straggler-breakdown").inner_text()
    assert "hidden behind their own compute" in story and "Why it is late" in story, story
    card.locator("button.open-span").click()
    wait_panels(frame, ("diagnoses", *SPAN_PANELS))
    assert frame.locator("#ki-worker").input_value() == "rank1"
    shown = []
    for worker in ("rank1", "rank0"):
        if worker != "rank1":
            frame.select_option("#ki-worker", worker)
            wait_panels(frame, ("diagnoses", *SPAN_PANELS))
        frame.wait_for_selector("#ki-across-ranks table.grid", timeout=TIMEOUT_MS)
        comm = frame.locator("#ki-panel-communication")
        frame.wait_for_function(
            "() => document.querySelector('#ki-panel-communication')"
            "?.innerText.includes('Bus BW (all ranks)')",
            timeout=TIMEOUT_MS,
        )
        grid = comm.locator("table.grid").first
        headers = [h.inner_text().strip() for h in grid.locator("thead th").all()]
        cells = [c.inner_text().strip() for c in grid.locator("tbody tr").first.locator("td").all()]
        shown.append(cells[headers.index("Bus BW (all ranks)")])
    # the same on every rank, the run's value (not rank 0's lone-rank 35.6 GB/s)
    assert shown == [busbw, busbw], (busbw, shown)
    page = open_page(
        f"#kineto_insights&ki_mode=diff&ki_base_run=ddp2_default&ki_exp_run={run}", height=TALL
    )
    frame = tab(page)
    wait_panels(frame, ("diff-summary",))
    headline = frame.locator(".headline-straggler").inner_text()
    assert headline.startswith("Gained a straggler: Rank 1 holds the other ranks back")


def test_loading_progress_then_error_state(open_page: Any) -> None:
    """While the backend answers 202 the panels show the progress it reports; an
    unreadable trace (422) becomes an error in every panel, not a broken page."""
    from playwright.sync_api import Route

    answers = [
        (202, {"state": "queued", "error": None, "progress": None}),
        (
            202,
            {
                "state": "loading",
                "error": None,
                "progress": {"elapsed_s": 3.2, "estimated_fraction": 0.4},
            },
        ),
        (422, {"error": "worker0.1.pt.trace.json: truncated JSON at byte 1234"}),
    ]
    seen: list[str] = []
    held: list[Route] = []

    def answer(route: Route) -> None:
        status, body = answers[min(len(seen), len(answers)) - 1]
        route.fulfill(status=status, content_type="application/json", body=json.dumps(body))

    def summary(route: Route) -> None:
        seen.append(route.request.url)
        if len(seen) == 3:
            # the final answer is held back until the progress of the second one has
            # been seen on screen
            held.append(route)
            return
        answer(route)

    # the browser itself logs the 422 answer as a console error
    page = open_page(allow_errors=("status of 422",))
    page.route("**/data/plugin/kineto_insights/summary?*", summary)
    page.goto(page.url.split("#")[0] + "#kineto_insights&ki_run=transformer_eager")
    frame = tab(page)
    frame.wait_for_selector(
        "#ki-panel-overview[data-state=loading] >> text=reading 40 %", timeout=TIMEOUT_MS
    )
    shoot(frame, "states", "overview")
    # the page asks again; its request reaches the route within a call to Playwright
    (held_route,) = wait_until(
        lambda: held or frame.evaluate("() => false"), TIMEOUT_MS / 1000, "the third request"
    )
    answer(held_route)
    frame.wait_for_selector("#ki-panel-overview[data-state=error]", timeout=TIMEOUT_MS)
    for name in ("diagnoses", *SPAN_PANELS):
        panel = frame.locator(f"#ki-panel-{name}")
        assert panel.get_attribute("data-state") == "error"
        assert "truncated JSON at byte 1234" in panel.inner_text()
    assert len(seen) == 3 and all("wait=" in u for u in seen)


def test_names_are_text_never_html(open_page: Any) -> None:
    page = open_page("#kineto_insights&ki_run=html_names")
    frame = tab(page)
    wait_panels(frame, ("diagnoses", *SPAN_PANELS))
    assert frame.evaluate("() => window.__kiPwned") is None
    assert frame.locator("#ki-panel-kernels img").count() == 0
    # the backend folds template arguments (`<…>`); the full name is the hover text
    full = [n.get_attribute("title") or "" for n in frame.locator("#ki-panel-kernels .name").all()]
    assert any(EVIL in name for name in full), full
    shown = frame.locator("main").inner_text()
    assert EVIL in shown, "the HTML-like op name is shown as text (idle gaps: host was in)"


def test_dark_theme_follows_tensorboard(open_page: Any) -> None:
    page = open_page("#kineto_insights&ki_run=transformer_eager", dark=True, height=TALL)
    frame = tab(page)
    wait_panels(frame, ("diagnoses", "overview"))
    assert page.evaluate("() => document.body.classList.contains('dark-mode')")
    assert frame.evaluate("() => document.documentElement.classList.contains('ki-dark')")
    background = frame.evaluate("() => getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(32, 33, 36)"
    shoot(frame, "dark", "overview")
    page.screenshot(path=str(SCREENSHOTS / "dark-tab.png"))


def test_readme_screenshot(open_page: Any) -> None:
    """The tab as the README shows it (scripts/readme_screenshot.py, on sample_logs): the
    same view opened here shows what docs/screenshot.json says the picture shows (view
    switches, panels in order, diagnoses). It once showed four diagnoses and no All runs,
    History, Timeline or Efficiency while the tab had moved on (issue 48 §9)."""
    sys.path.insert(0, str(REPO / "scripts"))
    import readme_screenshot

    page = open_page(
        f"#kineto_insights&ki_run={readme_screenshot.RUN}", **readme_screenshot.VIEWPORT
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shown = readme_screenshot.take(page, SCREENSHOTS / "tab.png")
    assert README_SCREENSHOT.is_file(), "docs/screenshot.png is missing"
    pictured = json.loads(readme_screenshot.FACTS.read_text())
    assert shown == pictured, (
        "the README's screenshot is stale: run `python scripts/readme_screenshot.py` "
        f"(it shows {pictured}, the tab now {shown})"
    )


def test_all_ranks_view_at_1024_ranks(server: Server, open_page: Any) -> None:
    """1,024 ranks (copies of the real ddp_straggler ranks, rank 341 the straggler, served
    in place of the run's own view): distributions instead of one bar per rank, the worst
    ranks listed with the straggler first, the per-rank table limited to 50 rows."""
    from playwright.sync_api import Route

    sys.path.insert(0, str(REPO / "benchmarks"))
    import synth_ranks

    from tb_kineto_insights.store.cache import encode_json
    from tb_kineto_insights.summary import summarize_run

    if not synth_ranks.H200X2.is_dir():
        pytest.skip("../shared/traces/h200x2 is not there")
    view = summarize_run(synth_ranks.straggler_run(1024, 341))
    doc = {
        "run": server.two_ranks,
        "span_index": -1,
        "spans": [{"worker": r.worker, "span": "1"} for r in view.ranks],
        "errors": {},
        "summary": view,
    }
    body = encode_json(doc)

    def run_summary(route: Route) -> None:
        route.fulfill(status=200, content_type="application/json", body=body)

    page = open_page(height=TALL)
    page.route("**/data/plugin/kineto_insights/run_summary?*", run_summary)
    page.goto(page.url.split("#")[0] + f"#kineto_insights&ki_run={server.two_ranks}")
    frame = tab(page)
    wait_panels(frame, ("diagnoses", "ranks"))
    panel = frame.locator("#ki-panel-ranks")
    text = panel.inner_text()
    assert "Distribution across 1,024 ranks" in text and "Worst 10 ranks" in text
    assert panel.locator(".chart canvas").count() == 3  # three distributions, no per-rank bars
    tables = panel.locator("table.grid")
    worst = tables.nth(0).locator("tbody tr")
    assert worst.count() == 10
    assert worst.first.inner_text().startswith("341 (straggler)")
    every = tables.nth(1).locator("tbody tr")
    assert every.count() == 1024
    assert tables.nth(1).locator("tbody tr:not([hidden])").count() == 50
    assert "+1,008 ranks not listed" in text
    assert "rank7 / 1 and 1,016 more (1,024 in all)" in text and "rank8 / 1" not in text
    shoot(frame, "all-ranks-1024", "ranks")


def test_idle_panel_names_python_frames(server: Server, open_page: Any) -> None:
    """Issue 35: with stacks the idle panel lists the Python frames the host was in while
    the GPU idled, each expandable to its callers; without stacks it says how to record
    them."""
    page = open_page("#kineto_insights&ki_run=stacks_blocking_log", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("idle",))
    panel = frame.locator("#ki-panel-idle")
    text = panel.inner_text()
    assert "Python the host was in while the GPU idled" in text
    assert "record_stacks.py(57): log_metrics" in text
    assert "with_stack=True" not in text
    details = panel.locator("details").first
    assert not details.locator("ol").is_visible()
    details.locator("summary").click()
    assert details.locator("ol").is_visible()
    assert "record_stacks.py(95): step" in details.locator("ol").inner_text()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    panel.screenshot(path=str(SCREENSHOTS / "idle_python_frames.png"))
    page = open_page("#kineto_insights&ki_run=transformer_eager", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("idle",))
    assert "with_stack=True" in frame.locator("#ki-panel-idle").inner_text()


# --------------------------------------------------------------------------- sweep

#: Text that means a value was not rendered: a JavaScript object or a missing or
#: non-numeric value turned into a string ("NaN tokens" is the hover text naming damage).
BAD_TEXT = r"\[object Object\]|\bundefined\b|\bNaN\b(?! tokens)"

#: Every problem on the page: bad text in what is shown or in a hover text, an empty
#: number (a KPI value, a numeric table cell, an evidence value), a panel in error.
_PROBLEMS_JS = """(bad) => {
  const re = new RegExp(bad);
  const out = [];
  const text = document.body.innerText;
  const m = text.match(new RegExp(`.{0,60}(${bad}).{0,60}`));
  if (m) out.push(`text: ${m[0]}`);
  for (const node of document.querySelectorAll("[title]")) {
    const title = node.getAttribute("title");
    if (re.test(title)) out.push(`hover: ${title.slice(0, 160)}`);
  }
  for (const node of document.querySelectorAll(".kpi-value, td.n, .evidence dd, .headline")) {
    if (!node.closest("[hidden]") && !node.textContent.trim()) {
      const panel = node.closest("[id^=ki-panel-]");
      out.push(`empty number in ${panel ? panel.id : "page"}: ${node.className}`);
    }
  }
  for (const panel of document.querySelectorAll("[id^=ki-panel-][data-state=error]")) {
    out.push(`${panel.id} in error: ${panel.innerText.slice(0, 200)}`);
  }
  return out;
}"""

_SETTLED_JS = """() => {
  const panels = [...document.querySelectorAll('[id^="ki-panel-"]')];
  return panels.length > 0
    && panels.every(p => p.dataset.state && p.dataset.state !== 'loading')
    && !document.querySelector('#ki-main .state.loading')
    && [...document.querySelectorAll('.chart')].every(c => c.dataset.chartReady);
}"""

SWEEP_DIFFS = [
    ("dataloader_workers0", "dataloader_workers4"),
    ("transformer_eager", "transformer_compile"),
    ("memory_leak", "memory_fixed"),
    ("memory_fragmentation", "memory_fragmentation_fixed"),
    ("ddp2_default", "ddp2_straggler"),
]


def _sweep(frame: Any, first: tuple[str, ...], what: str) -> list[str]:
    wait_panels(frame, first)
    frame.wait_for_function(_SETTLED_JS, timeout=TIMEOUT_MS)
    return [f"{what}: {p}" for p in frame.evaluate(_PROBLEMS_JS, BAD_TEXT)]


def test_sweep_every_run_panel_and_diff(server: Server, open_page: Any) -> None:
    """Every run of the log dir (each worker of a run of several, and its view across
    ranks), every panel, and the diff of each sample pair: no "[object Object]",
    "undefined" or "NaN", no empty number, no panel in error."""
    problems: list[str] = []
    page = open_page(height=TALL)
    base_url = page.url.split("#")[0]
    seen = 0
    for entry in server.runs["runs"]:
        run = entry["run"]
        if entry["workers"] and all(
            s["state"] == "error" for w in entry["workers"] for s in w["spans"]
        ):
            continue
        workers = [w["worker"] for w in entry["workers"]]
        views = [
            (
                f"ki_run={run}",
                ("diagnoses", "ranks") if len(workers) > 1 else ("diagnoses", *SPAN_PANELS),
            )
        ]
        if len(workers) > 1:
            views += [(f"ki_run={run}&ki_worker={w}", ("diagnoses", *SPAN_PANELS)) for w in workers]
        for query, first in views:
            page.goto("about:blank")
            page.goto(f"{base_url}#kineto_insights&{query}")
            problems += _sweep(tab(page), first, query)
            seen += 1
    for query, first in (("ki_mode=runs", ("runs",)), ("ki_mode=history", ("history",))):
        page.goto("about:blank")
        page.goto(f"{base_url}#kineto_insights&{query}")
        problems += _sweep(tab(page), first, query)
        seen += 1
    for base, exp in SWEEP_DIFFS:
        query = f"ki_mode=diff&ki_base_run={base}&ki_exp_run={exp}"
        page.goto("about:blank")
        page.goto(f"{base_url}#kineto_insights&{query}")
        problems += _sweep(
            tab(page), ("diff-summary", "diff-diagnoses", "diff-metrics", "diff-changes"), query
        )
        seen += 1
    assert seen >= len(server.runs["runs"]) + len(SWEEP_DIFFS) + 2
    assert problems == [], "\n".join(problems)


def test_evidence_records_show_as_tables(open_page: Any) -> None:
    """Lists of records in the evidence (the largest fragmentation events, a damaged
    region) are small tables with a unit in each cell."""
    page = open_page("#kineto_insights&ki_run=memory_fragmentation", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("diagnoses", *SPAN_PANELS))
    card = frame.locator('[data-diagnosis-id="memory_fragmentation"]')
    rows = card.locator('dd[data-key="largest"] table tbody tr')
    assert rows.count() >= 1
    first = rows.first.inner_text()
    assert "MiB" in first and " ms" in first and "aten::" in first
    assert "[object Object]" not in card.inner_text()
    page = open_page("#kineto_insights&ki_run=truncated", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("diagnoses", *SPAN_PANELS))
    card = frame.locator('[data-diagnosis-id="trace_data_loss"]')
    damage = card.locator('dd[data-key="damage"] table tbody tr')
    assert damage.count() == 1
    assert "file ends early" in damage.first.inner_text()
    assert "[object Object]" not in card.inner_text()


def test_long_kernel_names_are_cut_in_the_middle(open_page: Any) -> None:
    """transformer_eager's three sm80_xmma GEMMs differ only in the middle of 121
    characters: the table shows each cut where it differs (all distinct, at most 48
    characters), the full name on hover."""
    page = open_page("#kineto_insights&ki_run=transformer_eager", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("kernels", "idle"))
    names = frame.locator("#ki-panel-kernels table.grid").first.locator("td.name-col .name")
    shown = [n.inner_text() for n in names.all()]
    full = [n.get_attribute("data-full") or "" for n in names.all()]
    gemms = [s for s, f in zip(shown, full, strict=True) if f.startswith("sm80_xmma_gemm")]
    assert len(gemms) >= 2 and len(set(gemms)) == len(gemms), gemms
    assert all(len(s) <= 48 and "…" in s for s in gemms), gemms
    assert len(set(shown)) == len(shown)


def test_efficiency_panel_roofline_and_sortable_table(open_page: Any) -> None:
    """sample_logs/eff_mlp_fp32: the matmul_without_tensor_cores card points at the
    efficiency panel, which draws the roofline and a table sorted by time that re-sorts
    on a header click; the datasheet-ceiling note is said."""
    page = open_page("#kineto_insights&ki_run=eff_mlp_fp32", height=TALL)
    frame = tab(page)
    wait_panels(frame, ("diagnoses", *SPAN_PANELS, "efficiency"))
    card = frame.locator('[data-diagnosis-id="matmul_without_tensor_cores"]')
    assert card.get_attribute("data-target") == "efficiency"
    panel = frame.locator("#ki-panel-efficiency")
    assert panel.get_attribute("data-state") == "ready"
    assert panel.locator(".chart canvas").count() >= 1
    text = panel.inner_text()
    assert "H200 SXM" in text and "ceilings" in text
    rows = panel.locator("table.efficiency-table tbody tr")
    assert rows.count() >= 4
    assert rows.first.inner_text().startswith("aten::mm")  # most time first
    panel.locator("table.efficiency-table th", has_text="calls / step").click()
    first = panel.locator("table.efficiency-table tbody tr").first.inner_text()
    assert first.startswith("aten::mm") and "15" in first  # 15 mm calls per step
    shoot(frame, "eff_mlp_fp32", "efficiency")


def test_diff_shows_efficiency_per_op_group(open_page: Any) -> None:
    """eff_mlp_fp32 → eff_mlp_bf16: the mm group is one row, fp32 → bf16, with its
    achieved TFLOP/s on both sides and its verdict (improved), and
    matmul_without_tensor_cores is lost."""
    base, exp = "eff_mlp_fp32", "eff_mlp_bf16"
    page = open_page(
        f"#kineto_insights&ki_mode=diff&ki_base_run={base}&ki_exp_run={exp}", height=TALL
    )
    frame = tab(page)
    wait_panels(frame, ("diff-summary", "diff-diagnoses", "diff-metrics", "diff-changes"))
    rows = frame.locator("#ki-panel-diff-changes table.efficiency-diff tbody tr")
    assert rows.count() >= 2
    mm = rows.filter(has_text="aten::mm").first.inner_text()
    assert "fp32 → bf16" in mm and "TFLOP/s" in mm and "improved" in mm.lower()
    assert "matmul_without_tensor_cores" in frame.locator(
        "#ki-panel-diff-diagnoses"
    ).inner_text() or (
        "fp32 matmuls on CUDA cores" in frame.locator("#ki-panel-diff-diagnoses").inner_text()
    )
