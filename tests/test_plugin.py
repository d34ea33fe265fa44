"""The TensorBoard plugin over HTTP: TensorBoard's real WSGI app under werkzeug's test
client, and a real ``tensorboard`` process on loopback."""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from tensorboard import program
from tensorboard.backend import application
from tensorboard.plugins.core import core_plugin
from werkzeug.test import Client, TestResponse

from tb_kineto_insights import plugin as plugin_module
from tb_kineto_insights.logdir import discover
from tb_kineto_insights.plugin import (
    RESCAN_ENV,
    KinetoInsightsPlugin,
    json_safe,
    logdir_from_context,
    rescan_interval_from_env,
)
from tb_kineto_insights.plugin_loader import KinetoInsightsLoader

REPO = Path(__file__).resolve().parents[1]
SAMPLE_LOGS = REPO / "sample_logs"
STATIC = REPO / "tb_kineto_insights" / "static"
PREFIX = "/data/plugin/kineto_insights"

GOOD_RUN, GOOD_WORKER, GOOD_SPAN = "good", "host_1", "1700000000000"
BAD_RUN, BAD_WORKER, BAD_SPAN = "broken", "host_2", "1700000000001"
GOOD_FILE = f"{GOOD_WORKER}.{GOOD_SPAN}.pt.trace.json.gz"
BAD_FILE = f"{BAD_WORKER}.{BAD_SPAN}.pt.trace.json"
# Steps of the good trace: 2 ms, 4 ms, 3 ms → mean 3000 µs.
STEP_DURATIONS_US = (2000.0, 4000.0, 3000.0)


# --------------------------------------------------------------------------- traces


def trace_events(step_durations_us: tuple[float, ...] = STEP_DURATIONS_US) -> list[dict[str, Any]]:
    """ProfilerStep#N annotations back to back from ts=1000 µs, one kernel in each."""
    events: list[dict[str, Any]] = []
    ts = 1000.0
    for number, dur in enumerate(step_durations_us, start=1):
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{number}",
                "pid": 100,
                "tid": 1,
                "ts": ts,
                "dur": dur,
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "void gemm_kernel<float>()",
                "pid": 0,
                "tid": 7,
                "ts": ts + 100.0,
                "dur": 50.0,
                "args": {"device": 0, "stream": 7, "correlation": number},
            }
        )
        ts += dur
    return events


def trace_bytes(step_durations_us: tuple[float, ...] = STEP_DURATIONS_US) -> bytes:
    root = {"schemaVersion": 1, "traceEvents": trace_events(step_durations_us)}
    return json.dumps(root).encode()


def write_good(path: Path, step_durations_us: tuple[float, ...] = STEP_DURATIONS_US) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(trace_bytes(step_durations_us)))
    return path


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    """Two runs: a good gzipped trace and a truncated one (a killed process)."""
    root = tmp_path / "logs"
    write_good(root / GOOD_RUN / GOOD_FILE)
    bad = root / BAD_RUN / BAD_FILE
    bad.parent.mkdir(parents=True)
    bad.write_bytes(trace_bytes()[:150])
    return root


# --------------------------------------------------------------------------- WSGI app


def make_app(logdir: Path, loader: Any = None) -> Any:
    """TensorBoard's own WSGI app with the core plugin and our loader, as `tensorboard`
    builds it (flags parsed by TensorBoard's own parser)."""
    loaders = [core_plugin.CorePluginLoader(), loader or KinetoInsightsLoader()]
    tb = program.TensorBoard(plugins=loaders)
    tb.configure(argv=["tensorboard", "--logdir", str(logdir)])
    return application.TensorBoardWSGIApp(tb.flags, tb.plugin_loaders)


@pytest.fixture
def client(logdir: Path) -> Client:
    return Client(make_app(logdir))


def summary_url(run: str, worker: str, span: str) -> str:
    query = urllib.parse.urlencode({"run": run, "worker": worker, "span": span})
    return f"{PREFIX}/summary?{query}"


def strict_json(response: TestResponse) -> Any:
    """The body parsed as strict JSON (NaN / Infinity tokens rejected)."""

    def reject(token: str) -> Any:
        raise AssertionError(f"non-standard JSON token {token}")

    assert response.mimetype == "application/json", response.mimetype
    return json.loads(response.get_data(as_text=True), parse_constant=reject)


def span_entry(runs_json: dict[str, Any], run: str, worker: str, span: str) -> dict[str, Any]:
    for r in runs_json["runs"]:
        if r["run"] != run:
            continue
        for w in r["workers"]:
            if w["worker"] != worker:
                continue
            for s in w["spans"]:
                if s["span"] == span:
                    return dict(s)
    raise AssertionError(f"{run}/{worker}/{span} not in {runs_json}")


def test_plugins_listing_names_the_iframe_module(client: Client) -> None:
    response = client.get("/data/plugins_listing")
    assert response.status_code == 200
    listing = strict_json(response)
    entry = listing["kineto_insights"]
    assert entry["enabled"] is True
    assert entry["tab_name"] == "Kineto Insights"
    assert entry["loading_mechanism"] == {
        "type": "IFRAME",
        "module_path": f"{PREFIX}/index.js",
    }


def test_plugin_entry_page_imports_index_js_and_calls_render(client: Client) -> None:
    # The contract index.js must meet: TensorBoard's entry page sets the base to the
    # plugin's data folder and calls the module's exported render().
    response = client.get("/data/plugin_entry.html?name=kineto_insights")
    assert response.status_code == 200
    page = response.get_data(as_text=True)
    assert '<base href="plugin/kineto_insights/" />' in page
    assert 'import("./index.js").then((m) => void m.render());' in page
    source = (STATIC / "index.js").read_text(encoding="utf-8")
    assert re.search(r"^export (async )?function render\(", source, re.MULTILINE)


def test_index_js_is_plain_local_code() -> None:
    source = (STATIC / "index.js").read_text(encoding="utf-8")
    for forbidden in ("innerHTML", "outerHTML", "insertAdjacentHTML", "eval(", "new Function"):
        assert forbidden not in source
    assert not re.search(r"https?://", source)
    assert "import " not in source.replace("import.meta", "")


def test_inactive_without_traces(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    listing = strict_json(Client(make_app(tmp_path / "empty")).get("/data/plugins_listing"))
    assert listing["kineto_insights"]["enabled"] is False


def test_static_files_served_by_whitelist(client: Client) -> None:
    response = client.get(f"{PREFIX}/index.js")
    assert response.status_code == 200
    assert response.mimetype in ("text/javascript", "application/javascript")
    assert response.get_data() == (STATIC / "index.js").read_bytes()
    css = client.get(f"{PREFIX}/style.css")
    assert css.status_code == 200
    assert css.mimetype == "text/css"
    for name in ("plugin.py", "static/index.js", "index.js.map", "static", "__init__.py"):
        assert client.get(f"{PREFIX}/{name}").status_code == 404, name


def test_runs_lists_both_runs_not_loaded(client: Client) -> None:
    response = client.get(f"{PREFIX}/runs")
    assert response.status_code == 200
    body = strict_json(response)
    assert body["error"] is None
    assert [r["run"] for r in body["runs"]] == [BAD_RUN, GOOD_RUN]
    good = span_entry(body, GOOD_RUN, GOOD_WORKER, GOOD_SPAN)
    assert good["state"] == "not_loaded"
    assert good["error"] is None
    assert set(good) == {"span", "size_bytes", "mtime", "state", "error"}
    assert isinstance(good["size_bytes"], int) and good["size_bytes"] > 0
    assert isinstance(good["mtime"], float) and good["mtime"] > 0
    assert span_entry(body, BAD_RUN, BAD_WORKER, BAD_SPAN)["state"] == "not_loaded"


def test_summary_of_good_span(client: Client) -> None:
    response = client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN))
    assert response.status_code == 200
    body = strict_json(response)
    steps = body["steps"]
    assert steps["count"] == 3
    assert steps["mean_step_us"] == 3000.0
    assert [s["number"] for s in steps["steps"]] == [1, 2, 3]
    assert [s["duration_us"] for s in steps["steps"]] == list(STEP_DURATIONS_US)
    assert body["health"]["event_count"] == 6
    assert body["health"]["kind_counts"] == {"user_annotation": 3, "kernel": 3}
    runs = strict_json(client.get(f"{PREFIX}/runs"))
    assert span_entry(runs, GOOD_RUN, GOOD_WORKER, GOOD_SPAN)["state"] == "ready"
    # Served again from the cache, same content.
    assert strict_json(client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN))) == body


def test_broken_span_is_422_then_error_state_and_others_keep_working(client: Client) -> None:
    response = client.get(summary_url(BAD_RUN, BAD_WORKER, BAD_SPAN))
    assert response.status_code == 422
    message = strict_json(response)["error"]
    assert BAD_FILE in message
    assert "truncated" in message or "ends early" in message
    runs = strict_json(client.get(f"{PREFIX}/runs"))
    bad = span_entry(runs, BAD_RUN, BAD_WORKER, BAD_SPAN)
    assert bad["state"] == "error"
    assert bad["error"] == message
    # Asked again: the same answer (cached), and the good run still works.
    again = client.get(summary_url(BAD_RUN, BAD_WORKER, BAD_SPAN))
    assert again.status_code == 422
    assert strict_json(again)["error"] == message
    assert client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN)).status_code == 200
    runs = strict_json(client.get(f"{PREFIX}/runs"))
    assert span_entry(runs, GOOD_RUN, GOOD_WORKER, GOOD_SPAN)["state"] == "ready"
    assert span_entry(runs, BAD_RUN, BAD_WORKER, BAD_SPAN)["state"] == "error"


@pytest.mark.parametrize(
    ("run", "worker", "span"),
    [
        ("nope", GOOD_WORKER, GOOD_SPAN),
        (GOOD_RUN, "nope", GOOD_SPAN),
        (GOOD_RUN, GOOD_WORKER, "1"),
        (BAD_RUN, GOOD_WORKER, GOOD_SPAN),  # worker of another run
        (GOOD_RUN.upper(), GOOD_WORKER, GOOD_SPAN),
    ],
)
def test_unknown_keys_are_404(client: Client, run: str, worker: str, span: str) -> None:
    response = client.get(summary_url(run, worker, span))
    assert response.status_code == 404
    assert "error" in strict_json(response)


@pytest.mark.parametrize(
    "query",
    [
        "",
        f"run={GOOD_RUN}&worker={GOOD_WORKER}",
        f"run={GOOD_RUN}&span={GOOD_SPAN}",
        f"worker={GOOD_WORKER}&span={GOOD_SPAN}",
        f"run=&worker={GOOD_WORKER}&span={GOOD_SPAN}",
    ],
)
def test_missing_parameters_are_400(client: Client, query: str) -> None:
    response = client.get(f"{PREFIX}/summary?{query}")
    assert response.status_code == 400
    assert "missing" in strict_json(response)["error"]


def _assert_no_file_contents(response: TestResponse) -> None:
    assert response.status_code in (400, 404), response.status_code
    text = response.get_data(as_text=True)
    assert "root:" not in text
    assert "KinetoInsightsPlugin" not in text
    assert "traceEvents" not in text


@pytest.mark.parametrize(
    "query",
    [
        {"run": "../../etc", "worker": "passwd", "span": "0"},
        {"run": "/etc", "worker": "passwd", "span": "0"},
        {"run": "..", "worker": GOOD_WORKER, "span": GOOD_SPAN},
        {"run": f"{GOOD_RUN}/..", "worker": GOOD_WORKER, "span": GOOD_SPAN},
        {"run": GOOD_RUN, "worker": f"../{GOOD_RUN}/{GOOD_WORKER}", "span": GOOD_SPAN},
        {"run": GOOD_RUN, "worker": GOOD_WORKER, "span": f"{GOOD_SPAN}/../../x"},
        {"run": "/etc/passwd", "worker": "/etc/passwd", "span": "/etc/passwd"},
    ],
)
def test_traversal_in_parameters_is_404(client: Client, query: dict[str, str]) -> None:
    _assert_no_file_contents(client.get(f"{PREFIX}/summary?{urllib.parse.urlencode(query)}"))


def test_traversal_with_real_paths_and_encodings_is_404(client: Client, logdir: Path) -> None:
    good_path = str(logdir / GOOD_RUN / GOOD_FILE)
    urls = [
        f"{PREFIX}/summary?run=%2e%2e%2f%2e%2e%2fetc&worker=passwd&span=0",
        f"{PREFIX}/summary?run=%2E%2E%2F&worker={GOOD_WORKER}&span={GOOD_SPAN}",
        summary_url(str(logdir), GOOD_WORKER, GOOD_SPAN),
        summary_url(str(logdir / GOOD_RUN), GOOD_WORKER, GOOD_SPAN),
        summary_url(GOOD_RUN, good_path, GOOD_SPAN),
        summary_url(good_path, GOOD_WORKER, GOOD_SPAN),
        f"{PREFIX}/../../etc/passwd",
        f"{PREFIX}/%2e%2e/%2e%2e/etc/passwd",
        f"{PREFIX}/static/../plugin.py",
        f"{PREFIX}/static/%2e%2e/plugin.py",
        f"{PREFIX}/..%2fplugin.py",
        f"{PREFIX}/index.js/../../plugin.py",
        f"{PREFIX}//etc/passwd",
        f"{PREFIX}/{good_path}",
    ]
    for url in urls:
        _assert_no_file_contents(client.get(url))


def test_non_finite_numbers_become_null(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_summary(path: str) -> dict[str, Any]:
        return {
            "steps": {"mean_step_us": float("nan"), "values": [float("inf"), np.float64("-inf")]},
            "health": {"event_count": np.int64(3), "ratio": np.float32(0.5)},
        }

    monkeypatch.setattr(plugin_module, "summarize_file", fake_summary)
    body = strict_json(client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN)))
    assert body == {
        "steps": {"mean_step_us": None, "values": [None, None]},
        "health": {"event_count": 3, "ratio": 0.5},
    }


def test_unexpected_analysis_error_is_json_and_not_cached(
    client: Client, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(path: str) -> dict[str, Any]:
        raise RuntimeError("analysis bug")

    monkeypatch.setattr(plugin_module, "summarize_file", broken)
    with caplog.at_level(logging.ERROR, logger=plugin_module.__name__):
        response = client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN))
    assert response.status_code == 500
    assert "analysis bug" in strict_json(response)["error"]
    monkeypatch.undo()
    assert client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN)).status_code == 200


def test_logdir_created_after_start_is_empty_not_an_error(tmp_path: Path) -> None:
    app_client = Client(make_app(tmp_path / "logs"))
    (tmp_path / "logs").mkdir()  # TensorBoard itself does not need it to exist
    listing = strict_json(app_client.get("/data/plugins_listing"))
    assert listing["kineto_insights"]["enabled"] is False
    runs = strict_json(app_client.get(f"{PREFIX}/runs"))
    assert runs["runs"] == []
    response = app_client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN))
    assert response.status_code == 404


def test_missing_logdir_error_text(tmp_path: Path) -> None:
    app_client = Client(make_app(tmp_path / "nowhere"))
    runs = strict_json(app_client.get(f"{PREFIX}/runs"))
    assert runs["runs"] == []
    assert "does not exist" in runs["error"]


# --------------------------------------------------------------------------- loader


def test_loader_returns_none_and_warns_when_import_fails(
    logdir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A None entry in sys.modules makes `import` raise ImportError.
    monkeypatch.setitem(sys.modules, "tb_kineto_insights.plugin", None)
    monkeypatch.delattr("tb_kineto_insights.plugin", raising=False)
    with caplog.at_level(logging.WARNING, logger="tb_kineto_insights.plugin_loader"):
        app = make_app(logdir)
    assert "Kineto Insights plugin disabled" in caplog.text
    assert "None in sys.modules" in caplog.text  # the reason, as Python words it
    app_client = Client(app)
    listing = strict_json(app_client.get("/data/plugins_listing"))
    assert "kineto_insights" not in listing
    assert app_client.get(f"{PREFIX}/runs").status_code == 404


def test_loader_survives_broken_dependency(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class Exploding:
        def __getattr__(self, name: str) -> Any:
            raise RuntimeError("broken native library")

    monkeypatch.setitem(sys.modules, "tb_kineto_insights.plugin", Exploding())
    monkeypatch.delattr("tb_kineto_insights.plugin", raising=False)
    context = SimpleNamespace(logdir="/nonexistent", flags=None)
    with caplog.at_level(logging.WARNING, logger="tb_kineto_insights.plugin_loader"):
        assert KinetoInsightsLoader().load(context) is None
    assert "broken native library" in caplog.text


def test_loader_module_imports_nothing_heavy() -> None:
    code = (
        "import sys, tb_kineto_insights.plugin_loader as m; "
        "heavy = [n for n in ('numpy', 'msgspec', 'fsspec', 'tb_kineto_insights.plugin') "
        "if n in sys.modules]; print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- units


def test_json_safe() -> None:
    value = {
        "a": float("nan"),
        "b": (1, 2.5, float("-inf")),
        "c": np.array([1.0, np.nan]),
        "d": {3: np.bool_(True)},
        "e": None,
        "f": "x",
    }
    assert json_safe(value) == {
        "a": None,
        "b": [1, 2.5, None],
        "c": [1.0, None],
        "d": {"3": True},
        "e": None,
        "f": "x",
    }
    assert not any(isinstance(v, float) and math.isnan(v) for v in json_safe([math.nan]) if v)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, 30.0), ("", 30.0), ("0", 0.0), ("2.5", 2.5), ("-1", 30.0), ("x", 30.0), ("nan", 30.0)],
)
def test_rescan_interval_from_env(raw: str | None, expected: float) -> None:
    environ = {} if raw is None else {RESCAN_ENV: raw}
    assert rescan_interval_from_env(environ) == expected


@pytest.mark.parametrize(
    ("logdir", "spec", "expected"),
    [
        ("/logs", "", "/logs"),
        ("", "/a/b", "/a/b"),
        ("", "base:/a/b,exp:/c", "/a/b"),
        ("", "gs://bucket/logs", "gs://bucket/logs"),
        ("", "", ""),
    ],
)
def test_logdir_from_context(logdir: str, spec: str, expected: str) -> None:
    context = SimpleNamespace(logdir=logdir, flags=SimpleNamespace(logdir_spec=spec))
    assert logdir_from_context(context) == expected


def test_discovery_is_cached_between_rescans(logdir: Path) -> None:
    now = [100.0]
    plugin = KinetoInsightsPlugin(
        SimpleNamespace(logdir=str(logdir), flags=None), rescan_s=30.0, clock=lambda: now[0]
    )
    assert plugin.is_active()
    write_good(logdir / "later" / "host_3.1.pt.trace.json.gz")
    now[0] += 29.0
    assert [r.name for r in plugin._discovered()[0]] == [BAD_RUN, GOOD_RUN]
    now[0] += 1.0
    assert [r.name for r in plugin._discovered()[0]] == [BAD_RUN, GOOD_RUN, "later"]


def test_no_logdir_is_inactive() -> None:
    plugin = KinetoInsightsPlugin(SimpleNamespace(logdir="", flags=None))
    assert not plugin.is_active()


# --------------------------------------------------------------------------- real process


def tensorboard_executable() -> str | None:
    beside = Path(sys.executable).parent / "tensorboard"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("tensorboard")


TENSORBOARD = tensorboard_executable()
needs_tensorboard = pytest.mark.skipif(
    TENSORBOARD is None, reason="the `tensorboard` executable is not installed"
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(url: str, timeout: float = 120.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as err:
        return int(err.code), bytes(err.read())


def get_json(url: str, timeout: float = 120.0) -> tuple[int, Any]:
    status, data = http_get(url, timeout)
    return status, json.loads(data)


@contextmanager
def running_tensorboard(logdir: Path, log_path: Path, rescan_s: str) -> Iterator[str]:
    """A `tensorboard` process on 127.0.0.1 serving ``logdir``; yields its base URL.
    The process is always terminated (then killed) on exit."""
    assert TENSORBOARD is not None
    port = free_port()
    env = dict(os.environ, **{RESCAN_ENV: rescan_s})
    cmd = [
        TENSORBOARD,
        "--logdir",
        str(logdir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--load_fast=false",  # no separate data-server process: this test is about us
    ]
    base = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 60.0
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"tensorboard exited with {proc.returncode}:\n{tail(log_path)}")
                try:
                    if http_get(f"{base}/data/plugins_listing", timeout=5.0)[0] == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"tensorboard did not answer within 60 s:\n{tail(log_path)}")
                time.sleep(0.25)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)


def tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


def has_traces(path: Path) -> bool:
    try:
        return path.is_dir() and bool(discover(str(path)))
    except Exception:
        return False


@needs_tensorboard
def test_real_tensorboard_serves_traces(logdir: Path, tmp_path: Path) -> None:
    """Over sample_logs/ when it holds traces, else over the temporary log directory."""
    served = SAMPLE_LOGS if has_traces(SAMPLE_LOGS) else logdir
    expected = discover(str(served))
    log_path = tmp_path / "tensorboard.log"
    with running_tensorboard(served, log_path, rescan_s="30") as base:
        status, listing = get_json(f"{base}/data/plugins_listing")
        assert status == 200
        assert listing["kineto_insights"]["enabled"] is True, tail(log_path)
        assert listing["kineto_insights"]["loading_mechanism"]["type"] == "IFRAME"
        status, runs = get_json(f"{base}{PREFIX}/runs")
        assert status == 200
        assert [r["run"] for r in runs["runs"]] == [r.name for r in expected]
        status, script = http_get(f"{base}{PREFIX}/index.js")
        assert status == 200 and b"export async function render" in script
        # One span: the smallest file, so that real sample traces stay quick.
        smallest = min(
            (s for r in expected for w in r.workers for s in w.spans), key=lambda s: s.size_bytes
        )
        status, summary = get_json(base + summary_url(smallest.run, smallest.worker, smallest.span))
        assert status in (200, 422), (status, summary)
        if status == 200:
            assert set(summary) >= {"health", "steps"}
            assert summary["health"]["event_count"] > 0
        if served == logdir:
            status, good = get_json(base + summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN))
            assert status == 200
            assert good["steps"]["count"] == 3
            assert good["steps"]["mean_step_us"] == 3000.0


@needs_tensorboard
def test_real_tensorboard_finds_new_run_after_rescan(logdir: Path, tmp_path: Path) -> None:
    log_path = tmp_path / "tensorboard.log"
    with running_tensorboard(logdir, log_path, rescan_s="1") as base:
        _, runs = get_json(f"{base}{PREFIX}/runs")
        assert [r["run"] for r in runs["runs"]] == [BAD_RUN, GOOD_RUN]
        write_good(logdir / "new_run" / "host_9.1700000000002.pt.trace.json.gz", (1500.0,))
        deadline = time.monotonic() + 30.0
        names: list[str] = []
        while time.monotonic() < deadline:
            _, runs = get_json(f"{base}{PREFIX}/runs")
            names = [r["run"] for r in runs["runs"]]
            if "new_run" in names:
                break
            time.sleep(0.5)
        assert names == [BAD_RUN, GOOD_RUN, "new_run"], tail(log_path)
        status, summary = get_json(base + summary_url("new_run", "host_9", "1700000000002"))
        assert status == 200
        assert summary["steps"]["count"] == 1
        assert summary["steps"]["mean_step_us"] == 1500.0
