"""The TensorBoard plugin over HTTP: TensorBoard's real WSGI app under werkzeug's test
client, and a real ``tensorboard`` process on loopback.
Real traces: ``test_plugin_real.py``."""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from conftest import wait_until
from tensorboard import program
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from tensorboard.plugins.core import core_plugin
from werkzeug.test import Client, TestResponse

from tb_kineto_insights import summary as summary_module
from tb_kineto_insights.cli.doctor import run_doctor
from tb_kineto_insights.logdir.discovery import LogdirError, discover
from tb_kineto_insights.serve import plugin as plugin_module
from tb_kineto_insights.serve import scanner as scanner_module
from tb_kineto_insights.serve.plugin import (
    PRELOAD_ENV,
    RESCAN_ENV,
    ROUTES,
    KinetoInsightsPlugin,
    LogdirSource,
    json_safe,
    logdir_sources,
    preload_from_env,
    rescan_interval_from_env,
)
from tb_kineto_insights.serve.plugin_loader import KinetoInsightsLoader
from tb_kineto_insights.service import loader as loader_module
from tb_kineto_insights.service import workspace as workspace_module
from tb_kineto_insights.service.worker_pool import LoadDeadline
from tb_kineto_insights.store.cache import DiskCache

REPO = Path(__file__).resolve().parents[1]
STATIC = REPO / "tb_kineto_insights" / "static"
API_DOC = REPO / "docs" / "api.md"
PREFIX = "/data/plugin/kineto_insights"
WAIT = "30"

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


class RecordingLoader(KinetoInsightsLoader):
    """Our loader, remembering the plugin instances it made (so tests can close them)."""

    made: list[Any] = []

    def load(self, context: base_plugin.TBContext) -> Any:
        instance = super().load(context)
        if instance is not None:
            RecordingLoader.made.append(instance)
        return instance


@pytest.fixture(autouse=True)
def _close_plugins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    # Never the user's cache folder, never a real preload unless a test asks for it.
    monkeypatch.setenv("KINETO_INSIGHTS_CACHE_DIR", str(tmp_path / "env-cache"))
    RecordingLoader.made = []
    yield
    for instance in RecordingLoader.made:
        instance.close()


def make_app(logdir: Path | None, *argv: str, loader: Any = None, workers: str = "0") -> Any:
    """TensorBoard's own WSGI app with the core plugin and our loader, as `tensorboard`
    builds it (flags parsed by TensorBoard's own parser, ours included)."""
    loaders = [core_plugin.CorePluginLoader(), loader or RecordingLoader()]
    tb = program.TensorBoard(plugins=loaders)
    args = ["tensorboard", "--kineto_insights_workers", workers]
    if logdir is not None:
        args += ["--logdir", str(logdir)]
    tb.configure(argv=[*args, *argv])
    return application.TensorBoardWSGIApp(tb.flags, tb.plugin_loaders)


def the_plugin() -> KinetoInsightsPlugin:
    assert RecordingLoader.made, "no plugin was made"
    plugin = RecordingLoader.made[-1]
    assert isinstance(plugin, KinetoInsightsPlugin)
    return plugin


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def client(logdir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Client:
    monkeypatch.setenv(PRELOAD_ENV, "0")
    return Client(make_app(logdir, "--kineto_insights_cache_dir", str(cache_dir)))


def url(route: str, **params: str) -> str:
    return f"{PREFIX}/{route}?{urllib.parse.urlencode(params)}"


def summary_url(run: str, worker: str, span: str, **extra: str) -> str:
    return url("summary", run=run, worker=worker, span=span, **extra)


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


# --------------------------------------------------------------------------- frontend


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


# --------------------------------------------------------------------------- documentation


def documented_routes() -> list[str]:
    """First-column routes of the table in docs/api.md."""
    routes = []
    for line in API_DOC.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\|\s*`(/[^`]*)`\s*\|", line)
        if match:
            routes.append(match.group(1))
    return routes


def test_served_routes_are_exactly_the_documented_ones(client: Client) -> None:
    documented = documented_routes()
    assert len(documented) == len(set(documented)), documented
    served = set(the_plugin().get_plugin_apps())
    assert served == set(documented) == set(ROUTES)
    # ... and each one answers under TensorBoard's prefix (not a TensorBoard 404 page).
    for route in served:
        response = client.get(f"{PREFIX}{route}")
        assert response.status_code in (200, 400), (route, response.status_code)


# --------------------------------------------------------------------------- runs


def test_active_on_an_empty_logdir_inactive_on_a_missing_one(tmp_path: Path) -> None:
    """Issue 30: the tab is listed from the start when its log directory exists (it
    names the folder and waits for traces there); not when there is no such folder."""
    (tmp_path / "empty").mkdir()
    listing = strict_json(Client(make_app(tmp_path / "empty")).get("/data/plugins_listing"))
    assert listing["kineto_insights"]["enabled"] is True
    listing = strict_json(Client(make_app(tmp_path / "missing")).get("/data/plugins_listing"))
    assert listing["kineto_insights"]["enabled"] is False


def test_a_run_folder_as_logdir_is_labelled_by_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 17 §1: ``--logdir`` a run folder: its run keeps the key "." (TensorBoard's,
    and the URLs'), and carries ``label`` = the folder's name for the tab to show; runs
    of a log directory have no label."""
    monkeypatch.setenv(PRELOAD_ENV, "0")
    run = tmp_path / "logs" / "my_run"
    run.mkdir(parents=True)
    (run / GOOD_FILE).write_bytes(
        gzip.compress(json.dumps({"traceEvents": trace_events()}).encode())
    )
    direct_client = Client(make_app(run, "--kineto_insights_cache_dir", str(tmp_path / "c1")))
    direct = strict_json(direct_client.get(f"{PREFIX}/runs"))
    assert [(r["run"], r.get("label")) for r in direct["runs"]] == [(".", "my_run")]
    # the diff's sides are named the same way, not "."
    diffed = direct_client.get(f"{PREFIX}/diff?base_run=.&exp_run=.&wait=30")
    assert diffed.status_code == 200
    doc = strict_json(diffed)
    assert doc["base"]["label"] == "my_run" and doc["exp"]["label"] == "my_run"
    above = strict_json(
        Client(make_app(run.parent, "--kineto_insights_cache_dir", str(tmp_path / "c2"))).get(
            f"{PREFIX}/runs"
        )
    )
    assert [(r["run"], r.get("label")) for r in above["runs"]] == [("my_run", None)]


def test_runs_lists_both_runs_not_loaded_without_preload(client: Client) -> None:
    response = client.get(f"{PREFIX}/runs")
    assert response.status_code == 200
    body = strict_json(response)
    assert body["error"] is None
    assert body["scanning"] is False
    assert [r["run"] for r in body["runs"]] == [BAD_RUN, GOOD_RUN]
    good = span_entry(body, GOOD_RUN, GOOD_WORKER, GOOD_SPAN)
    assert good["state"] == "not_loaded"
    assert good["error"] is None and good["progress"] is None
    assert set(good) == {"span", "size_bytes", "mtime", "state", "error", "progress"}
    assert isinstance(good["size_bytes"], int) and good["size_bytes"] > 0
    assert isinstance(good["mtime"], float) and good["mtime"] > 0
    assert span_entry(body, BAD_RUN, BAD_WORKER, BAD_SPAN)["state"] == "not_loaded"


def test_a_name_that_is_not_utf8_is_listed_not_a_500(tmp_path: Path) -> None:
    """A run folder and a file named with bytes that are not UTF-8 (Linux allows it):
    ``/runs`` answers 200 with the name's bad bytes escaped (``\\xff``), the other runs
    intact, ``/summary`` finds it by that name, and the span is read (its cache entry
    written): one such name used to make every ``/runs`` a 500 ("surrogates not
    allowed"), then, shown with U+FFFD, a 404 when asked for."""
    logdir = tmp_path / "logs"
    good = write_good(logdir / GOOD_RUN / GOOD_FILE)
    try:
        odd = os.fsdecode(str(logdir).encode() + b"/bad\xffrun")
        bad = write_good(Path(odd) / os.fsdecode(b"w\xfe.7.pt.trace.json.gz"), (1000.0, 2000.0))
    except (OSError, UnicodeError):
        pytest.skip("this filesystem refuses names that are not UTF-8")
    for path in (good, bad):
        os.utime(path, (1e9, 1e9))  # settled long ago: preloaded at once
    cache = tmp_path / "cache"
    app_client = Client(make_app(logdir, "--kineto_insights_cache_dir", str(cache)))

    def both_ready() -> Any:
        response = app_client.get(f"{PREFIX}/runs")
        assert response.status_code == 200, response.get_data(as_text=True)
        body = strict_json(response)
        states = [s["state"] for r in body["runs"] for w in r["workers"] for s in w["spans"]]
        return body if states == ["ready", "ready"] else None

    body = wait_until(both_ready, 30, "both spans ready in /runs", interval=0.05)
    states = [s["state"] for r in body["runs"] for w in r["workers"] for s in w["spans"]]
    assert [(r["run"], r["workers"][0]["worker"]) for r in body["runs"]] == [
        ("bad\\xffrun", "w\\xfe"),  # the bytes escaped (issue 32 §9; was U+FFFD)
        (GOOD_RUN, GOOD_WORKER),
    ]
    assert states == ["ready", "ready"]
    # asked for by the name /runs gave, it is found (with U+FFFD it answered 404)
    response = app_client.get(summary_url("bad\\xffrun", "w\\xfe", "7", wait=WAIT))
    assert response.status_code == 200, response.get_data(as_text=True)
    assert strict_json(response)["steps"]["count"] == 2
    assert len(list((cache / f"v{summary_module.ANALYSIS_VERSION}").glob("*.summary"))) == 2


def test_preload_reads_every_span_in_the_background(logdir: Path, cache_dir: Path) -> None:
    os.utime(logdir / GOOD_RUN / GOOD_FILE, (1e9, 1e9))  # settled long ago
    os.utime(logdir / BAD_RUN / BAD_FILE, (1e9, 1e9))
    app_client = Client(make_app(logdir, "--kineto_insights_cache_dir", str(cache_dir)))

    def states_of(runs: Any) -> dict[str, str]:
        return {
            r["run"]: r["workers"][0]["spans"][0]["state"] for r in runs["runs"]
        }  # one span each

    def both_done() -> Any:
        runs = strict_json(app_client.get(f"{PREFIX}/runs"))
        return runs if states_of(runs) == {GOOD_RUN: "ready", BAD_RUN: "error"} else None

    runs = wait_until(both_done, 30, "the good span ready, the bad one an error", interval=0.05)
    assert states_of(runs) == {GOOD_RUN: "ready", BAD_RUN: "error"}
    bad = span_entry(runs, BAD_RUN, BAD_WORKER, BAD_SPAN)
    assert BAD_FILE in bad["error"]


def test_logdir_created_after_start_is_empty_not_an_error(tmp_path: Path) -> None:
    app_client = Client(make_app(tmp_path / "logs", "--kineto_insights_rescan_s", "3600"))
    assert not the_plugin().is_active()  # the first scan: no folder yet
    (tmp_path / "logs").mkdir()  # TensorBoard itself does not need it to exist
    write_good(tmp_path / "logs" / GOOD_RUN / GOOD_FILE)
    listing = strict_json(app_client.get("/data/plugins_listing"))
    # the folder exists now: active at once; its trace is known after the next scan
    assert listing["kineto_insights"]["enabled"] is True
    assert app_client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN)).status_code == 404
    assert the_plugin().rescan()
    listing = strict_json(app_client.get("/data/plugins_listing"))
    assert listing["kineto_insights"]["enabled"] is True
    runs = strict_json(app_client.get(f"{PREFIX}/runs"))
    assert [r["run"] for r in runs["runs"]] == [GOOD_RUN]
    assert runs["error"] is None


def test_missing_logdir_error_text(tmp_path: Path) -> None:
    app_client = Client(make_app(tmp_path / "nowhere"))
    runs = strict_json(app_client.get(f"{PREFIX}/runs"))
    assert runs["runs"] == []
    assert "does not exist" in runs["error"]


def test_new_span_appears_after_rescan(client: Client, logdir: Path) -> None:
    plugin = the_plugin()
    write_good(logdir / GOOD_RUN / f"{GOOD_WORKER}.1700000000005.pt.trace.json.gz", (1000.0,))
    write_good(logdir / "later" / "host_3.1.pt.trace.json.gz")
    assert plugin.rescan()
    runs = strict_json(client.get(f"{PREFIX}/runs"))
    assert [r["run"] for r in runs["runs"]] == [BAD_RUN, GOOD_RUN, "later"]
    spans = [s["span"] for s in runs["runs"][1]["workers"][0]["spans"]]
    assert spans == [GOOD_SPAN, "1700000000005"]
    response = client.get(summary_url(GOOD_RUN, GOOD_WORKER, "1700000000005", wait=WAIT))
    assert response.status_code == 200
    assert strict_json(response)["steps"]["mean_step_us"] == 1000.0


def test_logdir_spec_prefixes_runs_with_names(tmp_path: Path, logdir: Path) -> None:
    other = tmp_path / "other"
    write_good(other / "exp" / "w.5.pt.trace.json.gz", (1000.0, 1000.0))
    write_good(other / "top.6.pt.trace.json.gz", (500.0,))
    spec = f"base:{logdir},new:{other}"
    app_client = Client(make_app(None, "--logdir_spec", spec))
    runs = strict_json(app_client.get(f"{PREFIX}/runs"))
    assert [r["run"] for r in runs["runs"]] == [
        f"base/{BAD_RUN}",
        f"base/{GOOD_RUN}",
        "new",
        "new/exp",
    ]
    response = app_client.get(summary_url("new/exp", "w", "5", wait=WAIT))
    assert response.status_code == 200
    assert strict_json(response)["steps"]["count"] == 2
    assert app_client.get(summary_url("new", "top", "6", wait=WAIT)).status_code == 200
    assert app_client.get(summary_url("exp", "w", "5")).status_code == 404


def test_fsspec_url_logdir(tmp_path: Path, logdir: Path) -> None:
    app_client = Client(make_app(None, "--logdir_spec", f"file://{logdir}"))
    runs = strict_json(app_client.get(f"{PREFIX}/runs"))
    assert [r["run"] for r in runs["runs"]] == [BAD_RUN, GOOD_RUN]
    response = app_client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait=WAIT))
    assert response.status_code == 200


# --------------------------------------------------------------------------- summary


def test_summary_of_good_span(client: Client) -> None:
    response = client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait=WAIT))
    assert response.status_code == 200
    body = strict_json(response)
    assert list(body) == list(summary_module.PANELS)
    steps = body["steps"]
    assert steps["count"] == 3
    assert steps["mean_step_us"] == 3000.0
    assert [s["number"] for s in steps["steps"]] == [1, 2, 3]
    assert [s["duration_us"] for s in steps["steps"]] == list(STEP_DURATIONS_US)
    assert body["health"]["event_count"] == 6
    runs = strict_json(client.get(f"{PREFIX}/runs"))
    assert span_entry(runs, GOOD_RUN, GOOD_WORKER, GOOD_SPAN)["state"] == "ready"
    # Served again from memory, same content, no wait needed.
    again = client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN))
    assert again.status_code == 200 and strict_json(again) == body


def test_each_panel_and_health_route(client: Client) -> None:
    whole = strict_json(client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait=WAIT)))
    for panel in summary_module.PANELS:
        response = client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, panel=panel))
        assert response.status_code == 200, panel
        assert strict_json(response) == whole[panel]
    health = client.get(url("health", run=GOOD_RUN, worker=GOOD_WORKER, span=GOOD_SPAN))
    assert health.status_code == 200
    assert strict_json(health) == whole["health"]
    response = client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, panel="nope"))
    assert response.status_code == 400
    assert "unknown panel" in strict_json(response)["error"]


def timeline_url(step: str, run: str = GOOD_RUN, **extra: str) -> str:
    worker, span = (GOOD_WORKER, GOOD_SPAN) if run == GOOD_RUN else (BAD_WORKER, BAD_SPAN)
    return url("timeline", run=run, worker=worker, span=span, step=step, **extra)


def test_timeline_of_a_step(client: Client) -> None:
    response = client.get(timeline_url("2", wait=WAIT))
    assert response.status_code == 200
    doc = strict_json(response)
    assert (doc["step"], doc["start_us"], doc["end_us"]) == (2, 2000.0, 6000.0)
    assert doc["kernel_count"] == 1
    (gpu,) = [lane for lane in doc["lanes"] if lane["kind"] == "gpu_stream"]
    assert (gpu["device"], gpu["stream"]) == (0, 7)
    assert [doc["names"][n] for n in gpu["name"]] == ["void gemm_kernel<float>()"]
    assert (gpu["offset_us"], gpu["dur_us"], gpu["correlation"]) == ([100.0], [50.0], [2])
    idle = strict_json(client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, panel="idle")))
    per_step = idle["devices"][0]["per_step"][1]
    (band,) = [lane for lane in doc["lanes"] if lane["kind"] == "idle"]
    assert doc["idle_us"] == {"0": per_step["idle_us"]} == {"0": 3950.0}
    assert sum(band["dur_us"]) == 3950.0
    # the same document from the cache after a restart of the loader's memory
    the_plugin().loader._memory.clear()
    assert strict_json(client.get(timeline_url("2"))) == doc


@pytest.mark.parametrize(
    ("step", "code", "words"),
    [
        ("9", 404, "its step numbers: 1, 2, 3"),
        ("x", 400, "whole number"),
        ("-1", 400, "whole number"),
    ],
)
def test_timeline_bad_step(client: Client, step: str, code: int, words: str) -> None:
    response = client.get(timeline_url(step, wait=WAIT))
    assert response.status_code == code
    assert words in strict_json(response)["error"]


def test_timeline_errors_as_summary(client: Client) -> None:
    missing = client.get(url("timeline", run=GOOD_RUN, worker=GOOD_WORKER, span=GOOD_SPAN))
    assert missing.status_code == 400 and "step" in strict_json(missing)["error"]
    broken = client.get(timeline_url("1", run=BAD_RUN, wait=WAIT))
    assert broken.status_code == 422 and BAD_FILE in strict_json(broken)["error"]
    assert client.get(timeline_url("1", wait="nope")).status_code == 400


def test_window_of_a_step_cut_from_the_file(client: Client) -> None:
    # step 2: ts 3000-7000 µs on the trace's clock, ± 10 % (400 µs)
    response = client.get(
        url("window", run=GOOD_RUN, worker=GOOD_WORKER, span=GOOD_SPAN, step="2", wait=WAIT)
    )
    assert response.status_code == 200
    assert response.headers["X-Window-Start-Ns"] == "2600000"
    assert response.headers["X-Window-End-Ns"] == "7400000"
    assert response.headers["X-Window-Moved-Events"] == "0"
    assert "Content-Disposition" not in response.headers
    doc = strict_json(response)
    kept = [(e["name"], e["ts"]) for e in doc["traceEvents"]]
    assert kept == [
        ("ProfilerStep#1", 1000.0),  # ends at 3000, inside the margin
        ("ProfilerStep#2", 3000.0),
        ("void gemm_kernel<float>()", 3100.0),
        ("ProfilerStep#3", 7000.0),
        ("void gemm_kernel<float>()", 7100.0),
    ]
    assert doc["schemaVersion"] == 1
    narrow = client.get(
        url(
            "window",
            run=GOOD_RUN,
            worker=GOOD_WORKER,
            span=GOOD_SPAN,
            step="2",
            start_us="0",
            end_us="120.5",
            download="1",
        )
    )
    assert narrow.status_code == 200
    assert [e["name"] for e in strict_json(narrow)["traceEvents"]] == [
        "ProfilerStep#2",
        "void gemm_kernel<float>()",
    ]
    assert narrow.headers["X-Window-End-Ns"] == "3120500"
    disposition = narrow.headers["Content-Disposition"]
    assert disposition == f'attachment; filename="{GOOD_WORKER}.{GOOD_SPAN}.step2.window.json"'
    for bad, said in (
        ({"start_us": "0"}, "give both start_us and end_us"),
        ({"start_us": "5", "end_us": "5"}, "end_us 5 is not after start_us 5"),
        ({"start_us": "x", "end_us": "1"}, "start_us"),
    ):
        response = client.get(
            url("window", run=GOOD_RUN, worker=GOOD_WORKER, span=GOOD_SPAN, step="2", **bad)
        )
        assert response.status_code == 400, bad
        assert said in response.get_data(as_text=True), bad
    assert (
        client.get(
            url("window", run=GOOD_RUN, worker=GOOD_WORKER, span=GOOD_SPAN, step="9")
        ).status_code
        == 404
    )
    broken = client.get(
        url("window", run=BAD_RUN, worker=BAD_WORKER, span=BAD_SPAN, step="1", wait=WAIT)
    )
    assert broken.status_code == 422


def test_perfetto_url_flag_and_environment(
    logdir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PRELOAD_ENV, "0")
    monkeypatch.setenv("KINETO_INSIGHTS_PERFETTO_URL", "http://perfetto.example/env")
    app = Client(make_app(logdir, "--kineto_insights_cache_dir", str(cache_dir)))
    assert strict_json(app.get(f"{PREFIX}/runs"))["perfetto_url"] == "http://perfetto.example/env"
    flagged = Client(make_app(logdir, "--kineto_insights_perfetto_url", "http://127.0.0.1:9/ui"))
    assert strict_json(flagged.get(f"{PREFIX}/runs"))["perfetto_url"] == "http://127.0.0.1:9/ui"
    with pytest.raises(base_plugin.FlagsError, match="perfetto_url must be an http"):
        make_app(logdir, "--kineto_insights_perfetto_url", "javascript:alert(1)")


def test_timeline_of_an_entry_without_one_is_404(
    logdir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PRELOAD_ENV, "0")
    without = summary_module.summarize_file  # an entry as an older version wrote it
    monkeypatch.setattr(loader_module, "summarize_file_with_timeline", without)
    app_client = Client(make_app(logdir, "--kineto_insights_cache_dir", str(cache_dir)))
    summary = app_client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait=WAIT))
    assert summary.status_code == 200
    response = app_client.get(timeline_url("1"))
    assert response.status_code == 404
    assert "no timeline is stored" in strict_json(response)["error"]


def test_summary_is_202_while_loading_and_runs_answers_at_once(
    logdir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    started = threading.Event()
    real = summary_module.summarize_file_with_timeline

    def slow(path: str, **kwargs: Any) -> Any:
        started.set()
        assert gate.wait(30)
        return real(path, **kwargs)

    monkeypatch.setenv(PRELOAD_ENV, "0")
    monkeypatch.setattr(loader_module, "summarize_file_with_timeline", slow)
    app_client = Client(make_app(logdir, "--kineto_insights_cache_dir", str(cache_dir)))
    try:
        first = app_client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN))
        assert first.status_code == 202
        assert strict_json(first)["state"] in ("queued", "loading")
        assert started.wait(10)
        t0 = time.perf_counter()
        runs = strict_json(app_client.get(f"{PREFIX}/runs"))
        listing = strict_json(app_client.get("/data/plugins_listing"))
        assert time.perf_counter() - t0 < 1.0  # not blocked by the load
        assert listing["kineto_insights"]["enabled"] is True
        entry = span_entry(runs, GOOD_RUN, GOOD_WORKER, GOOD_SPAN)
        assert entry["state"] == "loading"
        assert entry["progress"]["elapsed_s"] >= 0
        waiting = app_client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait="0.2"))
        assert waiting.status_code == 202
        assert strict_json(waiting)["state"] == "loading"
    finally:
        gate.set()
    done = app_client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait=WAIT))
    assert done.status_code == 200


def test_discovery_runs_in_the_background(
    logdir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    calls = [0]
    real = scanner_module.discover

    def slow_discover(path: str, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] > 1:
            assert gate.wait(30)
        return real(path, **kwargs)

    monkeypatch.setattr(scanner_module, "discover", slow_discover)
    app_client = Client(make_app(logdir, "--kineto_insights_cache_dir", str(cache_dir)))
    plugin = the_plugin()
    try:
        threading.Thread(target=plugin.rescan, daemon=True).start()
        wait_until(lambda: calls[0] >= 2, 10, "the second scan")
        assert calls[0] == 2  # the second scan is stuck in storage
        t0 = time.perf_counter()
        assert plugin.is_active()
        runs = strict_json(app_client.get(f"{PREFIX}/runs"))
        assert time.perf_counter() - t0 < 1.0
        assert [r["run"] for r in runs["runs"]] == [BAD_RUN, GOOD_RUN]  # the cached scan
    finally:
        gate.set()


def test_slow_first_scan_blocks_only_the_first_caller(
    logdir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    real = scanner_module.discover

    def stuck(path: str, **kwargs: Any) -> Any:
        assert gate.wait(30)
        return real(path, **kwargs)

    monkeypatch.setattr(scanner_module, "discover", stuck)
    plugin = KinetoInsightsPlugin(
        SimpleNamespace(logdir=str(logdir), flags=None),
        workers=0,
        cache_dir=cache_dir,
        first_scan_wait_s=0.3,
    )
    try:
        app_client = Client(plugin.get_plugin_apps()["/runs"])
        t0 = time.perf_counter()
        assert plugin.is_active()  # the log directory exists: active at once, no scan
        assert time.perf_counter() - t0 < 0.2
        t0 = time.perf_counter()
        body = strict_json(app_client.get("/"))  # waited for the first scan, then gave up
        assert 0.25 < time.perf_counter() - t0 < 2.0
        t0 = time.perf_counter()
        body = strict_json(app_client.get("/"))
        assert time.perf_counter() - t0 < 0.2  # later callers do not wait
        assert (body["runs"], body["error"], body["scanning"]) == ([], None, True)
        assert body["logdirs"] == [os.path.realpath(logdir)]
        assert body["perfetto_url"] == "https://ui.perfetto.dev"
        gate.set()
        assert plugin.rescan()
        assert plugin.is_active()
        assert strict_json(app_client.get("/"))["scanning"] is False
    finally:
        gate.set()
        plugin.close()


def test_broken_span_is_422_then_error_state_and_others_keep_working(client: Client) -> None:
    response = client.get(summary_url(BAD_RUN, BAD_WORKER, BAD_SPAN, wait=WAIT))
    assert response.status_code == 422
    message = strict_json(response)["error"]
    assert BAD_FILE in message
    assert "truncated" in message or "ends early" in message
    runs = strict_json(client.get(f"{PREFIX}/runs"))
    bad = span_entry(runs, BAD_RUN, BAD_WORKER, BAD_SPAN)
    assert bad["state"] == "error"
    assert bad["error"] == message
    # Asked again: the same answer (cached), and the good run still works.
    for route in ("summary", "health"):
        again = client.get(url(route, run=BAD_RUN, worker=BAD_WORKER, span=BAD_SPAN))
        assert again.status_code == 422
        assert strict_json(again)["error"] == message
    assert client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait=WAIT)).status_code == 200
    runs = strict_json(client.get(f"{PREFIX}/runs"))
    assert span_entry(runs, GOOD_RUN, GOOD_WORKER, GOOD_SPAN)["state"] == "ready"
    assert span_entry(runs, BAD_RUN, BAD_WORKER, BAD_SPAN)["state"] == "error"


def test_disk_cache_survives_a_restart(
    logdir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = summary_module.summarize_file_with_timeline

    def counting(path: str, **kwargs: Any) -> dict[str, Any]:
        calls.append(path)
        return real(path, **kwargs)

    monkeypatch.setenv(PRELOAD_ENV, "0")
    monkeypatch.setattr(loader_module, "summarize_file_with_timeline", counting)
    first = Client(make_app(logdir, "--kineto_insights_cache_dir", str(cache_dir)))
    body = first.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait=WAIT)).get_data()
    assert first.get(summary_url(BAD_RUN, BAD_WORKER, BAD_SPAN, wait=WAIT)).status_code == 422
    assert len(calls) == 2
    the_plugin().close()

    second = Client(make_app(logdir, "--kineto_insights_cache_dir", str(cache_dir)))
    runs = strict_json(second.get(f"{PREFIX}/runs"))
    assert span_entry(runs, GOOD_RUN, GOOD_WORKER, GOOD_SPAN)["state"] == "ready"
    assert span_entry(runs, BAD_RUN, BAD_WORKER, BAD_SPAN)["state"] == "error"
    again = second.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN))
    assert again.status_code == 200 and again.get_data() == body
    assert second.get(summary_url(BAD_RUN, BAD_WORKER, BAD_SPAN)).status_code == 422
    assert len(calls) == 2  # nothing parsed again

    # The file changes: read again.
    write_good(logdir / GOOD_RUN / GOOD_FILE, (1000.0,))
    os.utime(logdir / GOOD_RUN / GOOD_FILE, (2e9, 2e9))
    assert the_plugin().rescan()
    changed = second.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait=WAIT))
    assert strict_json(changed)["steps"]["mean_step_us"] == 1000.0
    assert len(calls) == 3


def test_cache_dir_none_keeps_memory_only(logdir: Path, tmp_path: Path) -> None:
    app_client = Client(make_app(logdir, "--kineto_insights_cache_dir", "none"))
    response = app_client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait=WAIT))
    assert response.status_code == 200
    assert the_plugin().loader.cache is None
    assert not (tmp_path / "env-cache").exists()


def test_unusable_cache_dir_falls_back_to_memory(
    logdir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with caplog.at_level(logging.WARNING, logger=plugin_module.__name__):
        app_client = Client(make_app(logdir, "--kineto_insights_cache_dir", str(blocker / "x")))
    assert "memory only" in caplog.text
    response = app_client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait=WAIT))
    assert response.status_code == 200


def test_non_finite_numbers_become_null(
    logdir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_summary(path: str, **kwargs: Any) -> dict[str, Any]:
        return {
            "steps": {"mean_step_us": float("nan"), "values": [float("inf"), np.float64("-inf")]},
            "health": {"event_count": np.int64(3), "ratio": np.float32(0.5)},
        }

    monkeypatch.setattr(loader_module, "summarize_file_with_timeline", fake_summary)
    app_client = Client(make_app(logdir, "--kineto_insights_cache_dir", str(cache_dir)))
    body = strict_json(app_client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait=WAIT)))
    assert body == {
        "steps": {"mean_step_us": None, "values": [None, None]},
        "health": {"event_count": 3, "ratio": 0.5},
    }
    # A panel the summary lacks (here: every other one) is a 404, not a 500.
    missing = app_client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, panel="kernels"))
    assert missing.status_code == 404


def test_unexpected_analysis_error_is_json_500_and_retried(
    logdir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(path: str, **kwargs: Any) -> dict[str, Any]:
        raise RuntimeError("analysis bug")

    monkeypatch.setenv(PRELOAD_ENV, "0")
    monkeypatch.setattr(loader_module, "summarize_file_with_timeline", broken)
    app_client = Client(make_app(logdir, "--kineto_insights_cache_dir", str(cache_dir)))
    plugin = the_plugin()
    with caplog.at_level(logging.ERROR):
        response = app_client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait=WAIT))
    assert response.status_code == 500
    assert "analysis bug" in strict_json(response)["error"]
    plugin.loader._summarize = summary_module.summarize_file  # the bug is fixed
    retried = app_client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait=WAIT))
    assert retried.status_code == 200


# --------------------------------------------------------------------------- errors


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
@pytest.mark.parametrize("route", ["summary", "health", "timeline"])
def test_unknown_keys_are_404(client: Client, route: str, run: str, worker: str, span: str) -> None:
    response = client.get(url(route, run=run, worker=worker, span=span))
    assert response.status_code == 404
    assert "error" in strict_json(response)


@pytest.mark.parametrize(
    "path",
    [
        "summary?",
        f"summary?run={GOOD_RUN}&worker={GOOD_WORKER}",
        f"summary?run={GOOD_RUN}&span={GOOD_SPAN}",
        f"summary?worker={GOOD_WORKER}&span={GOOD_SPAN}",
        f"summary?run=&worker={GOOD_WORKER}&span={GOOD_SPAN}",
        f"health?run={GOOD_RUN}&worker={GOOD_WORKER}",
        "run_summary?",
        "run_summary?run=",
        f"diff?base_run={GOOD_RUN}",
        f"diff?exp_run={GOOD_RUN}",
    ],
)
def test_missing_parameters_are_400(client: Client, path: str) -> None:
    response = client.get(f"{PREFIX}/{path}")
    assert response.status_code == 400
    assert "missing" in strict_json(response)["error"]


@pytest.mark.parametrize(
    "path",
    [
        f"summary?run={GOOD_RUN}&worker={GOOD_WORKER}&span={GOOD_SPAN}&wait=-1",
        f"summary?run={GOOD_RUN}&worker={GOOD_WORKER}&span={GOOD_SPAN}&wait=nan",
        f"summary?run={GOOD_RUN}&worker={GOOD_WORKER}&span={GOOD_SPAN}&wait=inf",
        f"summary?run={GOOD_RUN}&worker={GOOD_WORKER}&span={GOOD_SPAN}&wait=61",
        f"summary?run={GOOD_RUN}&worker={GOOD_WORKER}&span={GOOD_SPAN}&wait=soon",
        f"summary?run={GOOD_RUN}&worker={GOOD_WORKER}&span={GOOD_SPAN}&wait=1_0",
        f"summary?run={GOOD_RUN}&worker={GOOD_WORKER}&span={GOOD_SPAN}&wait=%EF%BC%95",
        f"summary?run={GOOD_RUN}&worker={GOOD_WORKER}&span={GOOD_SPAN}&wait=+5",
        f"summary?run={GOOD_RUN}&worker={GOOD_WORKER}&span={GOOD_SPAN}&wait=1e1",
        f"summary?run={GOOD_RUN}&worker={GOOD_WORKER}&span={GOOD_SPAN}&panel=..%2fx",
        f"run_summary?run={GOOD_RUN}&span_index=x",
        f"run_summary?run={GOOD_RUN}&span_index=1.5",
        f"diff?base_run={GOOD_RUN}&base_span={GOOD_SPAN}&exp_run={GOOD_RUN}",
    ],
)
def test_bad_parameters_are_400(client: Client, path: str) -> None:
    response = client.get(f"{PREFIX}/{path}")
    assert response.status_code == 400
    assert strict_json(response)["error"]


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
@pytest.mark.parametrize("route", ["summary", "health"])
def test_traversal_in_parameters_is_404(client: Client, route: str, query: dict[str, str]) -> None:
    _assert_no_file_contents(client.get(f"{PREFIX}/{route}?{urllib.parse.urlencode(query)}"))


def test_traversal_with_real_paths_and_encodings_is_404(client: Client, logdir: Path) -> None:
    good_path = str(logdir / GOOD_RUN / GOOD_FILE)
    urls = [
        f"{PREFIX}/summary?run=%2e%2e%2f%2e%2e%2fetc&worker=passwd&span=0",
        f"{PREFIX}/summary?run=%2E%2E%2F&worker={GOOD_WORKER}&span={GOOD_SPAN}",
        f"{PREFIX}/health?run=%2e%2e%2f{GOOD_RUN}&worker={GOOD_WORKER}&span={GOOD_SPAN}",
        summary_url(str(logdir), GOOD_WORKER, GOOD_SPAN),
        summary_url(str(logdir / GOOD_RUN), GOOD_WORKER, GOOD_SPAN),
        summary_url(GOOD_RUN, good_path, GOOD_SPAN),
        summary_url(good_path, GOOD_WORKER, GOOD_SPAN),
        url("run_summary", run=str(logdir / GOOD_RUN)),
        url("run_summary", run="../" + GOOD_RUN),
        f"{PREFIX}/run_summary?run=%2e%2e%2f{GOOD_RUN}",
        url("diff", base_run=str(logdir / GOOD_RUN), exp_run=GOOD_RUN),
        url("diff", base_run=GOOD_RUN, exp_run=GOOD_RUN, exp_worker="../" + GOOD_WORKER),
        url(
            "diff",
            base_run=GOOD_RUN,
            exp_run=GOOD_RUN,
            exp_worker=GOOD_WORKER,
            exp_span=f"{GOOD_SPAN}/../..",
        ),
        f"{PREFIX}/../../etc/passwd",
        f"{PREFIX}/%2e%2e/%2e%2e/etc/passwd",
        f"{PREFIX}/static/../plugin.py",
        f"{PREFIX}/static/%2e%2e/plugin.py",
        f"{PREFIX}/..%2fplugin.py",
        f"{PREFIX}/index.js/../../plugin.py",
        f"{PREFIX}//etc/passwd",
        f"{PREFIX}/{good_path}",
    ]
    for target in urls:
        _assert_no_file_contents(client.get(target))


# --------------------------------------------------------------------------- run summary


@pytest.fixture
def ranks(tmp_path: Path) -> Path:
    """A run of two workers (ranks), two spans each; a second run for diffs."""
    root = tmp_path / "ranks"
    write_good(root / "job" / "rank0.100.pt.trace.json.gz", (1000.0, 1000.0))
    write_good(root / "job" / "rank0.200.pt.trace.json.gz", (2000.0, 2000.0))
    write_good(root / "job" / "rank1.101.pt.trace.json.gz", (3000.0, 3000.0))
    write_good(root / "job" / "rank1.201.pt.trace.json.gz", (4000.0, 4000.0))
    write_good(root / "faster" / "rank0.300.pt.trace.json.gz", (500.0, 500.0, 500.0))
    write_good(root / "faster" / "rank1.301.pt.trace.json.gz", (500.0, 520.0, 480.0))
    broken = root / "broken" / "rank0.400.pt.trace.json"
    broken.parent.mkdir()
    broken.write_bytes(trace_bytes()[:100])
    return root


@pytest.fixture
def ranks_client(ranks: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Client:
    monkeypatch.setenv(PRELOAD_ENV, "0")
    return Client(make_app(ranks, "--kineto_insights_cache_dir", str(cache_dir)))


def test_run_summary_per_rank(ranks_client: Client) -> None:
    response = ranks_client.get(url("run_summary", run="job", wait=WAIT))
    assert response.status_code == 200
    body = strict_json(response)
    assert body["run"] == "job" and body["span_index"] == -1 and body["errors"] == {}
    assert body["spans"] == [{"worker": "rank0", "span": "200"}, {"worker": "rank1", "span": "201"}]
    ranks = body["summary"]["ranks"]
    assert [(r["worker"], r["step_count"], r["mean_step_us"]) for r in ranks] == [
        ("rank0", 2, 2000.0),
        ("rank1", 2, 4000.0),
    ]
    assert body["summary"]["diagnoses"] == []
    first = strict_json(ranks_client.get(url("run_summary", run="job", span_index="0", wait=WAIT)))
    assert [r["mean_step_us"] for r in first["summary"]["ranks"]] == [1000.0, 3000.0]
    beyond = strict_json(ranks_client.get(url("run_summary", run="job", span_index="5")))
    assert beyond["error"].startswith("no worker")


def test_run_summary_202_then_hook_swapped(
    ranks_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    pending = ranks_client.get(url("run_summary", run="faster"))
    assert pending.status_code == 202
    body = strict_json(pending)
    assert body["state"] == "loading" and body["total"] == 2
    assert {p["worker"] for p in body["pending"]} <= {"rank0", "rank1"}
    seen: list[Any] = []

    def hook(side: Any) -> dict[str, Any]:
        seen.append(side)
        return {"ranks": [name for name, _ in side], "nan": math.nan}

    monkeypatch.setattr(plugin_module, "RUN_SUMMARY_HOOK", hook)
    body = strict_json(ranks_client.get(url("run_summary", run="faster", wait=WAIT)))
    assert body["summary"] == {"ranks": ["rank0", "rank1"], "nan": None}
    assert seen[0][0][1].steps.count == 3  # whole summaries reach the hook
    monkeypatch.setattr(plugin_module, "RUN_SUMMARY_HOOK", None)
    assert ranks_client.get(url("run_summary", run="faster")).status_code == 501
    assert ranks_client.get(url("run_summary", run="nope")).status_code == 404


def test_run_summary_of_unreadable_run_is_422(ranks_client: Client) -> None:
    response = ranks_client.get(url("run_summary", run="broken", wait=WAIT))
    assert response.status_code == 422
    assert "rank0.400" in strict_json(response)["error"]


# --------------------------------------------------------------------------- diff


def test_diff_of_two_runs_spans_and_workers(ranks_client: Client) -> None:
    response = ranks_client.get(url("diff", base_run="job", exp_run="faster", wait=WAIT))
    assert response.status_code == 200
    doc = strict_json(response)
    assert doc["schema"] == "tb_kineto_insights.diff/1"
    assert doc["base"]["label"] == "job" and doc["exp"]["label"] == "faster"
    assert len(doc["base"]["workers"]) == 4 and len(doc["exp"]["workers"]) == 2
    assert doc["headline"]["speedup"] > 1
    one = ranks_client.get(
        url(
            "diff",
            base_run="job",
            base_worker="rank0",
            base_span="100",
            exp_run="faster",
            exp_worker="rank0",
            exp_span="300",
            wait=WAIT,
        )
    )
    assert one.status_code == 200
    assert strict_json(one)["base"]["workers"] == ["rank0/100"]
    worker = ranks_client.get(
        url("diff", base_run="job", base_worker="rank1", exp_run="job", exp_worker="rank0")
    )
    assert worker.status_code == 200  # loaded above already
    assert strict_json(worker)["base"]["workers"] == ["rank1/101", "rank1/201"]


def test_diff_errors(ranks_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    cases = {
        url("diff", base_run="nope", exp_run="job"): (404, "no run 'nope'"),
        url("diff", base_run="job", base_worker="rank9", exp_run="job"): (404, "rank9"),
        url("diff", base_run="job", exp_run="job", exp_worker="rank0", exp_span="9"): (404, "'9'"),
        url("diff", base_run="broken", exp_run="job", wait=WAIT): (422, "base: no trace"),
    }
    for target, (code, text) in cases.items():
        response = ranks_client.get(target)
        assert response.status_code == code, (target, response.get_data())
        assert text in strict_json(response)["error"]
    monkeypatch.setattr(plugin_module, "DIFF_HOOK", None)
    response = ranks_client.get(url("diff", base_run="job", exp_run="faster"))
    assert response.status_code == 501
    assert "not available" in strict_json(response)["error"]


# --------------------------------------------------------------------------- worker processes


def test_summary_through_a_worker_process(logdir: Path, cache_dir: Path) -> None:
    app_client = Client(
        make_app(logdir, "--kineto_insights_cache_dir", str(cache_dir), workers="1")
    )
    response = app_client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait=WAIT))
    assert response.status_code == 200
    assert strict_json(response)["steps"]["mean_step_us"] == 3000.0
    bad = app_client.get(summary_url(BAD_RUN, BAD_WORKER, BAD_SPAN, wait=WAIT))
    assert bad.status_code == 422 and BAD_FILE in strict_json(bad)["error"]
    plugin = the_plugin()
    assert len(plugin.loader.worker_pids) == 1  # one process, reused
    span = discover(str(logdir))[1].workers[0].spans[0]
    written = DiskCache(cache_dir, plugin.loader.settings).load(
        workspace_module.listed_identity(span)
    )
    assert written is not None and written.error is None


# --------------------------------------------------------------------------- loader


def test_loader_returns_none_and_warns_when_import_fails(
    logdir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A None entry in sys.modules makes `import` raise ImportError.
    monkeypatch.setitem(sys.modules, "tb_kineto_insights.serve.plugin", None)
    monkeypatch.delattr("tb_kineto_insights.serve.plugin", raising=False)
    with caplog.at_level(logging.WARNING, logger="tb_kineto_insights.serve.plugin_loader"):
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

    monkeypatch.setitem(sys.modules, "tb_kineto_insights.serve.plugin", Exploding())
    monkeypatch.delattr("tb_kineto_insights.serve.plugin", raising=False)
    context = SimpleNamespace(logdir="/nonexistent", flags=None)
    with caplog.at_level(logging.WARNING, logger="tb_kineto_insights.serve.plugin_loader"):
        assert KinetoInsightsLoader().load(context) is None
    assert "broken native library" in caplog.text


def test_loader_module_imports_nothing_heavy() -> None:
    code = (
        "import sys, tb_kineto_insights.serve.plugin_loader as m; "
        "heavy = [n for n in ('numpy', 'msgspec', 'fsspec', 'tb_kineto_insights.serve.plugin') "
        "if n in sys.modules]; print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--kineto_insights_workers", "-1"),
        ("--kineto_insights_rescan_s", "-2"),
        ("--kineto_insights_load_timeout_s", "-1"),
        ("--kineto_insights_load_timeout_s_per_mib", "nan"),
        ("--kineto_insights_retry_backoff_s", "-5"),
        ("--kineto_insights_load_max_rss_mib", "inf"),
    ],
)
def test_bad_flags_are_rejected_by_tensorboard(flag: str, value: str) -> None:
    tb = program.TensorBoard(plugins=[core_plugin.CorePluginLoader(), KinetoInsightsLoader()])
    with pytest.raises(base_plugin.FlagsError):
        tb.configure(argv=["tensorboard", "--logdir", "/tmp", flag, value])


def test_load_deadline_flags_reach_the_loader(
    logdir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINETO_INSIGHTS_LOAD_TIMEOUT_S_PER_MIB", "0.25")
    make_app(logdir, "--kineto_insights_load_timeout_s", "7")
    assert the_plugin().loader.deadline == LoadDeadline(7.0, 0.25)  # flag, then environment


def test_back_off_and_memory_cap_flags_reach_the_loader(
    logdir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The back-off and the memory cap are TensorBoard flags (each over its environment
    variable), not only environment variables."""
    monkeypatch.setenv("KINETO_INSIGHTS_RETRY_BACKOFF_S", "99")
    monkeypatch.setenv("KINETO_INSIGHTS_LOAD_MAX_RSS_MIB", "99")
    make_app(
        logdir,
        "--kineto_insights_retry_backoff_s",
        "7",
        "--kineto_insights_load_max_rss_mib",
        "300",
    )
    loader = the_plugin().loader
    assert loader.retry_backoff_s == 7.0
    assert loader.memory_cap.max_rss_bytes == 300 * 1024**2
    make_app(logdir)  # no flags: the environment
    loader = the_plugin().loader
    assert loader.retry_backoff_s == 99.0
    assert loader.memory_cap.max_rss_bytes == 99 * 1024**2


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


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, 30.0), ("", 30.0), ("0", 0.0), ("2.5", 2.5), ("-1", 30.0), ("x", 30.0), ("nan", 30.0)],
)
def test_rescan_interval_from_env(raw: str | None, expected: float) -> None:
    environ = {} if raw is None else {RESCAN_ENV: raw}
    assert rescan_interval_from_env(environ) == expected


@pytest.mark.parametrize(
    ("raw", "expected"), [("", True), ("1", True), ("0", False), ("false", False), ("No", False)]
)
def test_preload_from_env(raw: str, expected: bool) -> None:
    assert preload_from_env({PRELOAD_ENV: raw}) is expected


@pytest.mark.parametrize(
    ("logdir", "spec", "expected"),
    [
        ("/logs", "", [LogdirSource(None, "/logs")]),
        ("", "/a/b", [LogdirSource(None, "/a/b")]),
        ("", "base:/a/b,exp:/c", [LogdirSource("base", "/a/b"), LogdirSource("exp", "/c")]),
        ("", "gs://bucket/logs", [LogdirSource(None, "gs://bucket/logs")]),
        ("", "x:gs://bucket/logs", [LogdirSource("x", "gs://bucket/logs")]),
        ("", "/a:b/c", [LogdirSource(None, "/a:b/c")]),
        ("file:///a/b%20c", "", [LogdirSource(None, "/a/b c")]),  # local: confined at open
        ("", "", []),
    ],
)
def test_logdir_sources(logdir: str, spec: str, expected: list[LogdirSource]) -> None:
    context = SimpleNamespace(logdir=logdir, flags=SimpleNamespace(logdir_spec=spec))
    assert logdir_sources(context) == expected


def test_empty_logdir_is_active_and_named(tmp_path: Path) -> None:
    """An existing, empty log directory: the tab is active from the start (TensorBoard
    asks is_active rarely; a tab under INACTIVE stays there after traces arrive), /runs
    names the folder watched, and lists a trace once a scan finds it."""
    logs = tmp_path / "logs"
    logs.mkdir()
    plugin = KinetoInsightsPlugin(
        SimpleNamespace(logdir=str(logs), flags=None), workers=0, preload=False
    )
    try:
        assert plugin.is_active()
        app_client = Client(plugin.get_plugin_apps()["/runs"])
        assert plugin.rescan()
        body = strict_json(app_client.get("/"))
        assert body["runs"] == [] and body["logdirs"] == [os.path.realpath(logs)]
        assert isinstance(body["watched"], bool)
        write_good(logs / GOOD_RUN / GOOD_FILE)
        assert plugin.rescan()
        body = strict_json(app_client.get("/"))
        assert [r["run"] for r in body["runs"]] == [GOOD_RUN]
    finally:
        plugin.close()


def test_missing_logdir_is_inactive(tmp_path: Path) -> None:
    plugin = KinetoInsightsPlugin(
        SimpleNamespace(logdir=str(tmp_path / "nope"), flags=None), workers=0, preload=False
    )
    try:
        assert not plugin.is_active()
    finally:
        plugin.close()


def test_no_logdir_is_inactive() -> None:
    plugin = KinetoInsightsPlugin(SimpleNamespace(logdir="", flags=None), workers=0, preload=False)
    try:
        assert not plugin.is_active()
    finally:
        plugin.close()


def test_doctor_reports_our_plugin_ready() -> None:
    import io

    out, err = io.StringIO(), io.StringIO()
    code = run_doctor(out, err)
    report = out.getvalue()
    assert code == 0, report + err.getvalue()
    assert re.search(r"^\[ok  \] tensorboard: \d+\.\d+", report, re.MULTILINE)
    assert "[ok  ] plugin kineto_insights" in report
    assert "plugin pytorch_profiler" in report  # ok, or a warning naming the package
    assert "[ok  ] parse" in report
    assert report.rstrip().endswith("ready")


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


def http_get(target: str, timeout: float = 120.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(target, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as err:
        return int(err.code), bytes(err.read())


def get_json(target: str, timeout: float = 120.0) -> tuple[int, Any]:
    status, data = http_get(target, timeout)
    return status, json.loads(data)


@contextmanager
def running_tensorboard(
    logdir: Path,
    log_path: Path,
    cache_dir: Path,
    rescan_s: str,
    *extra: str,
    procs: list[subprocess.Popen[bytes]] | None = None,
) -> Iterator[str]:
    """A `tensorboard` process on 127.0.0.1 serving ``logdir``; yields its base URL.
    ``extra``: more command-line flags; ``procs`` receives the process. The process is
    always terminated (then killed) on exit."""
    assert TENSORBOARD is not None
    port = free_port()
    cmd = [
        TENSORBOARD,
        "--logdir",
        str(logdir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--load_fast=false",  # no separate data-server process: this test is about us
        "--kineto_insights_cache_dir",
        str(cache_dir),
        "--kineto_insights_rescan_s",
        rescan_s,
        *extra,
    ]
    base = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        if procs is not None:
            procs.append(proc)
        try:

            def answers() -> bool:
                if proc.poll() is not None:
                    pytest.fail(f"tensorboard exited with {proc.returncode}:\n{tail(log_path)}")
                try:
                    return http_get(f"{base}/data/plugins_listing", timeout=5.0)[0] == 200
                except OSError:
                    return False

            wait_until(
                answers, 60.0, lambda: f"tensorboard to answer:\n{tail(log_path)}", interval=0.25
            )
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


@needs_tensorboard
def test_real_tensorboard_finds_new_span_after_rescan(logdir: Path, tmp_path: Path) -> None:
    log_path = tmp_path / "tensorboard.log"
    with running_tensorboard(logdir, log_path, tmp_path / "tb-cache", rescan_s="0.5") as base:
        _, runs = get_json(f"{base}{PREFIX}/runs")
        assert [r["run"] for r in runs["runs"]] == [BAD_RUN, GOOD_RUN]
        write_good(logdir / "new_run" / "host_9.1700000000002.pt.trace.json.gz", (1500.0,))

        def new_run_listed() -> list[str] | None:
            _, runs = get_json(f"{base}{PREFIX}/runs")
            names = [r["run"] for r in runs["runs"]]
            return names if "new_run" in names else None

        names = wait_until(
            new_run_listed, 30.0, lambda: f"new_run in /runs:\n{tail(log_path)}", interval=0.25
        )
        assert names == [BAD_RUN, GOOD_RUN, "new_run"], tail(log_path)
        status, summary = get_json(
            base + summary_url("new_run", "host_9", "1700000000002", wait=WAIT)
        )
        assert status == 200
        assert summary["steps"]["count"] == 1
        assert summary["steps"]["mean_step_us"] == 1500.0


# --------------------------------------------------------------------------- issue 13

# The trace outside the log directory: its mean step (7000 µs) must never be served.
SECRET_STEPS_US = (7000.0, 7000.0)
PASSWD = b"root:x:0:0:root:/root:/bin/bash\nsecret-line-42\n"


def relink(link: Path, target: str | Path) -> None:
    """``ln -sfn target link``: a new link renamed over the old one."""
    tmp = link.with_name(link.name + ".swap")
    os.symlink(target, tmp)
    os.replace(tmp, link)


def swap_layout(tmp_path: Path, kind: str) -> tuple[Path, Callable[[], None]]:
    """A log directory whose span ``r/w/1`` (steps 2, 4, 3 ms) is listed inside it, and
    the swap that makes its path lead outside afterwards."""
    root = tmp_path / "logs"
    data = root / ".data"  # hidden: not a run
    write_good(data / "real.pt.trace.json.gz")
    outside = tmp_path / "outside"
    outside_trace = write_good(outside / "r" / "w.1.pt.trace.json.gz", SECRET_STEPS_US)
    (outside / "passwd").write_bytes(PASSWD)
    run = root / "r"
    run.mkdir()
    trace = run / "w.1.pt.trace.json.gz"
    if kind == "file_link":
        trace.symlink_to("../.data/real.pt.trace.json.gz")
        return root, lambda: relink(trace, outside_trace)
    if kind == "link_to_non_trace":
        trace.symlink_to("../.data/real.pt.trace.json.gz")
        return root, lambda: relink(trace, outside / "passwd")
    if kind == "link_chain":
        (data / "hop").symlink_to("real.pt.trace.json.gz")
        trace.symlink_to("../.data/hop")
        return root, lambda: relink(data / "hop", outside_trace)
    assert kind == "folder_link"
    write_good(trace)

    def swap_folder() -> None:
        os.rename(run, root / ".old_r")
        run.symlink_to(outside / "r", target_is_directory=True)

    return root, swap_folder


@needs_tensorboard
@pytest.mark.parametrize("kind", ["file_link", "folder_link", "link_chain", "link_to_non_trace"])
def test_real_tensorboard_never_reads_a_path_swapped_outside(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13 §1: listed inside, swapped to lead outside, then asked for: refused when
    the file is opened (a 422 naming the reason), nothing of the outside file in the
    answer or in the cache, also after TensorBoard re-scans."""
    monkeypatch.setenv(PRELOAD_ENV, "0")
    root, swap = swap_layout(tmp_path, kind)
    cache = tmp_path / "tb-cache"
    log_path = tmp_path / "tensorboard.log"
    target = summary_url("r", "w", "1", wait=WAIT)
    with running_tensorboard(root, log_path, cache, "30", "--kineto_insights_workers", "1") as base:
        _, runs = get_json(f"{base}{PREFIX}/runs")
        assert span_entry(runs, "r", "w", "1")["state"] == "not_loaded", tail(log_path)
        status, before = get_json(base + target)
        assert status == 200 and before["steps"]["mean_step_us"] == 3000.0
        swap()
        for _ in range(2):  # the second time after the re-scan the swap asked for
            status, body = http_get(base + target)
            assert status in (404, 422), (status, body)
            assert b"7000" not in body and b"root:x" not in body and b"secret-line" not in body
            if status == 422:
                assert "outside the log directory" in json.loads(body)["error"]
    for entry in cache.rglob("*"):
        if entry.is_file():
            content = entry.read_bytes()
            assert b"7000.0" not in content and b"root:x" not in content, entry


def test_a_non_trace_file_is_never_quoted(client: Client, logdir: Path) -> None:
    """A listed file that is not JSON: the 422 names the problem, not the file's bytes."""
    (logdir / BAD_RUN / BAD_FILE).write_bytes(PASSWD)
    response = client.get(summary_url(BAD_RUN, BAD_WORKER, BAD_SPAN, wait=WAIT))
    assert response.status_code == 422
    error = strict_json(response)["error"]
    assert "not a JSON trace" in error and BAD_FILE in error
    assert "root:x" not in error and "secret-line" not in error


@needs_tensorboard
def test_real_tensorboard_retries_a_deleted_trace_copied_back(
    logdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13 §2: a missing file is an I/O error, answered (422) but never remembered:
    `cp -p` it back and it is served, also after a restart."""
    monkeypatch.setenv(PRELOAD_ENV, "0")
    trace = logdir / GOOD_RUN / GOOD_FILE
    backup = tmp_path / "backup.pt.trace.json.gz"
    shutil.copy2(trace, backup)
    cache = tmp_path / "tb-cache"
    log_path = tmp_path / "tensorboard.log"
    target = summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait=WAIT)
    with running_tensorboard(logdir, log_path, cache, "30") as base:
        _, runs = get_json(f"{base}{PREFIX}/runs")
        assert span_entry(runs, GOOD_RUN, GOOD_WORKER, GOOD_SPAN)["state"] == "not_loaded"
        trace.unlink()
        status, doc = get_json(base + target)
        assert status == 422 and "file not found" in doc["error"], doc
        shutil.copy2(backup, trace)  # cp -p: same size and mtime

        # The deletion may already have been listed (filesystem events, watch.py): the
        # span is then a 404 until the copy's event lists it again, within about 1 s.
        def listed_again() -> Any:
            answer = get_json(base + target)
            return answer if answer[0] != 404 else None

        status, doc = wait_until(listed_again, 5.0, "the copied-back span listed", interval=0.1)
        assert status == 200, doc
        assert doc["steps"]["mean_step_us"] == 3000.0
    assert not [p for p in cache.rglob("*.error")]
    with running_tensorboard(logdir, log_path, cache, "30") as base:
        status, doc = get_json(base + target)
        assert status == 200 and doc["steps"]["mean_step_us"] == 3000.0


@needs_tensorboard
def test_real_tensorboard_sees_a_rewritten_symlink_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13 §2: the identity is the target's (inode, size, mtime_ns), not the link's:
    a target rewritten with the same size is read again, at once and after a restart."""
    monkeypatch.setenv(PRELOAD_ENV, "0")
    root = tmp_path / "logs"
    real = root / ".data" / "t.pt.trace.json"
    real.parent.mkdir(parents=True)
    real.write_bytes(trace_bytes())
    (root / "r").mkdir()
    (root / "r" / "w.1.pt.trace.json").symlink_to("../.data/t.pt.trace.json")
    cache = tmp_path / "tb-cache"
    log_path = tmp_path / "tensorboard.log"
    target = summary_url("r", "w", "1", wait=WAIT)
    rewritten = trace_bytes((3000.0, 5000.0, 4000.0))
    assert len(rewritten) == len(trace_bytes())
    with running_tensorboard(root, log_path, cache, "30") as base:
        status, doc = get_json(base + target)
        assert status == 200 and doc["steps"]["mean_step_us"] == 3000.0
        before = real.stat().st_mtime_ns
        real.write_bytes(rewritten)
        os.utime(real, ns=(before + 5 * 10**9, before + 5 * 10**9))
        status, doc = get_json(base + target)
        assert status == 200 and doc["steps"]["mean_step_us"] == 4000.0
    with running_tensorboard(root, log_path, cache, "30") as base:
        status, doc = get_json(base + target)
        assert status == 200 and doc["steps"]["mean_step_us"] == 4000.0


def corrupt_value(data: bytes) -> bytes:
    """A cache entry with one digit of its first ``mean_step_us`` changed: still valid
    JSON (and valid UTF-8), with a wrong value."""
    at = data.index(b'"mean_step_us":') + len(b'"mean_step_us":')
    digit = data[at : at + 1]
    assert digit.isdigit()
    return data[:at] + (b"9" if digit != b"9" else b"1") + data[at + 1 :]


def corrupt_utf8(data: bytes) -> bytes:
    """A cache entry with a byte inside a string replaced by 0xff (invalid UTF-8)."""
    at = data.index(b'"steps"') + 2
    return data[:at] + b"\xff" + data[at + 1 :]


@needs_tensorboard
def test_real_tensorboard_never_serves_a_corrupt_cache_entry(
    ranks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13 §3: entries with a changed value or invalid UTF-8 are dropped and
    recomputed after a restart; /summary, /run_summary and /diff answer as before."""
    monkeypatch.setenv(PRELOAD_ENV, "0")
    cache = tmp_path / "tb-cache"
    log_path = tmp_path / "tensorboard.log"
    routes = [
        summary_url("job", "rank0", "200", wait=WAIT),
        url("run_summary", run="job", wait=WAIT),
        url("diff", base_run="job", exp_run="faster", wait=WAIT),
    ]
    with running_tensorboard(ranks, log_path, cache, "30") as base:
        first = [get_json(base + route) for route in routes]
    assert [status for status, _ in first] == [200, 200, 200]
    assert first[0][1]["steps"]["mean_step_us"] == 2000.0
    entries = sorted(p for p in cache.rglob("*") if p.is_file() and "headlines" not in p.parts)
    assert len(entries) == 6  # every span of job and faster
    # and each summary's headline record, by content key and by listed file
    assert len([p for p in cache.rglob("*.headline") if p.is_file()]) == 12
    for i, entry in enumerate(entries):
        data = entry.read_bytes()
        entry.write_bytes(corrupt_value(data) if i % 2 else corrupt_utf8(data))
    with running_tensorboard(ranks, log_path, cache, "30") as base:
        again = [get_json(base + route) for route in routes]
    assert again == first, tail(log_path)
    settings = loader_module.analysis_settings()
    disk = DiskCache(cache, settings)
    spans = [s for r in discover(str(ranks)) for w in r.workers for s in w.spans]
    rewritten = [disk.load(workspace_module.listed_identity(s)) for s in spans if s.run != "broken"]
    assert all(r is not None and r.error is None for r in rewritten)  # recomputed, valid


def tensorboard_workers(proc: subprocess.Popen[bytes]) -> list[int]:
    """Process ids of the plugin's worker processes, children of TensorBoard's process."""
    pids: list[int] = []
    for children in Path(f"/proc/{proc.pid}/task").glob("*/children"):
        pids += [int(p) for p in children.read_text().split()]
    out = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"worker_main" in cmdline:
            out.append(pid)
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not reaped, counts as dead)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


@needs_tensorboard
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")
def test_real_tensorboard_stopped_worker_hits_the_deadline(
    logdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13 §4: a worker stopped (SIGSTOP) in the middle of a load is killed at the
    load's deadline (3 s here), the span answers 503 naming the deadline, and asking
    again loads it with a fresh worker (no back-off here: KINETO_INSIGHTS_RETRY_BACKOFF_S=0;
    the back-off is tested in test_cache.py)."""
    monkeypatch.setenv(PRELOAD_ENV, "0")
    monkeypatch.setenv("KINETO_INSIGHTS_RETRY_BACKOFF_S", "0")
    write_good(logdir / "second" / "host_3.1700000000003.pt.trace.json.gz", (2500.0,))
    cache = tmp_path / "tb-cache"
    log_path = tmp_path / "tensorboard.log"
    procs: list[subprocess.Popen[bytes]] = []
    flags = (
        "--kineto_insights_workers",
        "1",
        "--kineto_insights_load_timeout_s",
        "3",
        "--kineto_insights_load_timeout_s_per_mib",
        "0",
    )
    with running_tensorboard(logdir, log_path, cache, "30", *flags, procs=procs) as base:
        status, _ = get_json(base + summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait=WAIT))
        assert status == 200
        (worker,) = tensorboard_workers(procs[0])
        os.kill(worker, signal.SIGSTOP)
        target = summary_url("second", "host_3", "1700000000003")
        started = time.monotonic()
        status, doc = get_json(base + target)
        assert status == 202 and doc["state"] in ("queued", "loading"), doc
        entry: dict[str, Any] = {}
        while time.monotonic() - started < 1.5 and entry.get("state") != "loading":
            _, runs = get_json(f"{base}{PREFIX}/runs")
            entry = span_entry(runs, "second", "host_3", "1700000000003")
        assert entry["state"] == "loading" and entry["progress"]["deadline_s"] == 3.0, entry
        status, doc = get_json(base + target + "&wait=20")
        assert status == 503, doc
        assert time.monotonic() - started < 20.0
        assert "deadline of 3.0 s" in doc["error"] and "retry" in doc["error"], doc
        assert not alive(worker)
        status, doc = get_json(base + target + "&wait=20")
        assert status == 200, doc
        assert doc["steps"]["mean_step_us"] == 2500.0
        assert tensorboard_workers(procs[0]) != [worker]


# --------------------------------------------------------------------------- issue 32 §4


def test_a_failed_listing_keeps_the_last_good_one(
    logdir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing that fails for a moment (503 SlowDown, EMFILE) used to empty /runs and
    make loaded spans 404: the last good listing stays, with the error beside it."""
    monkeypatch.setenv(PRELOAD_ENV, "0")
    app_client = Client(make_app(logdir, "--kineto_insights_cache_dir", str(cache_dir)))
    first = strict_json(app_client.get(f"{PREFIX}/runs"))
    assert sorted(r["run"] for r in first["runs"]) == [BAD_RUN, GOOD_RUN] and not first["error"]

    def failing(path: str, **kwargs: Any) -> Any:
        raise LogdirError(path, "cannot list: OSError: [Errno 24] Too many open files")

    monkeypatch.setattr(scanner_module, "discover", failing)
    assert the_plugin().rescan()
    again = strict_json(app_client.get(f"{PREFIX}/runs"))
    assert [r["run"] for r in again["runs"]] == [r["run"] for r in first["runs"]]
    assert "Too many open files" in again["error"] and "showing its listing of" in again["error"]
    response = app_client.get(summary_url(GOOD_RUN, GOOD_WORKER, GOOD_SPAN, wait=WAIT))
    assert response.status_code == 200  # not 404


def test_deep_folders_are_reported_beside_the_runs(
    logdir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Folders past the depth cap (3 here; 64 by default, see test_logdir.py for the
    1,000-folder reproduction) are skipped, the runs listed, the skip reported."""
    monkeypatch.setenv(PRELOAD_ENV, "0")
    monkeypatch.setenv("KINETO_INSIGHTS_MAX_FOLDER_DEPTH", "3")
    (logdir / "a" / "a" / "a" / "a" / "a").mkdir(parents=True)
    app_client = Client(make_app(logdir, "--kineto_insights_cache_dir", str(cache_dir)))
    runs = strict_json(app_client.get(f"{PREFIX}/runs"))
    assert sorted(r["run"] for r in runs["runs"]) == [BAD_RUN, GOOD_RUN]
    assert "skipped 1 path(s)" in runs["error"] and "deeper than 3 folders" in runs["error"]


# --------------------------------------------------------------------------- issue 32 (memory)


def test_concurrent_diffs_of_one_pair_are_computed_once(ranks_client: Client) -> None:
    """Single-flight: 4 concurrent /diff requests for the same runs wait for one
    computation, gathering included (4 concurrent diffs over 1,000 ranks each built the
    view: 5.4 GB)."""
    import threading

    plugin = the_plugin()
    calls: list[int] = []
    joined = threading.Semaphore(0)

    class Running(dict):  # type: ignore[type-arg]
        """The workspace's computations in progress: a look-up that finds one is a
        request that waits for it instead of computing."""

        def get(self, key: Any, default: Any = None) -> Any:
            found = super().get(key, default)
            if found is not None:
                joined.release()
            return found

    def slow_diff(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        for _ in range(3):  # until the three other requests wait for this computation
            assert joined.acquire(timeout=60)
        return plugin_module.DIFF_HOOK(*args, **kwargs)  # type: ignore[misc]

    target = url("diff", base_run="job", exp_run="faster", wait=WAIT)
    assert ranks_client.get(target.replace("faster", "job")).status_code == 200  # loads all
    plugin._diff_override = slow_diff
    plugin.workspace.answers._flights = Running()
    gathered: list[int] = []
    real_gather = plugin.workspace.gather

    def counted_gather(*args: Any, **kwargs: Any) -> Any:
        gathered.append(1)
        return real_gather(*args, **kwargs)

    plugin.workspace.gather = counted_gather  # type: ignore[method-assign]
    bodies: list[tuple[int, bytes]] = []

    def ask() -> None:
        response = Client(ranks_client.application).get(target)
        bodies.append((response.status_code, response.get_data()))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert [code for code, _ in bodies] == [200] * 4
    assert len({body for _, body in bodies}) == 1
    assert len(calls) == 1
    # issue 47: the summaries are gathered once too (each request gathered and held
    # every rank's summaries: 4 concurrent diffs of 400 ranks, +2.06 GB vs +0.50 GB)
    assert len(gathered) == 1
    # and the answer is kept while no file changes: a fifth request gathers nothing
    assert ranks_client.get(target).get_data() == bodies[0][1]
    assert len(gathered) == 1 and len(calls) == 1


def window_url(step: str, **extra: str) -> str:
    return url("window", run=GOOD_RUN, worker=GOOD_WORKER, span=GOOD_SPAN, step=step, **extra)


@pytest.mark.parametrize(
    ("start", "end", "words"),
    [
        # the attack run's reproduction: an exponent was "must be a number of µs"
        ("0", "1e20", "end_us must be a decimal number of µs (digits, an optional '-'"),
        ("0", "1e20", "within ±1,000,000,000,000 of the step's start (got '1e20')"),
        ("nan", "10", "start_us must be a decimal number of µs"),
        ("0", "100000000000000", "end_us must be within ±1,000,000,000,000 µs of the step's"),
    ],
)
def test_window_offsets_past_the_limit_name_the_option(
    client: Client, start: str, end: str, words: str
) -> None:
    assert client.get(timeline_url("2", wait=WAIT)).status_code == 200
    response = client.get(window_url("2", start_us=start, end_us=end))
    assert response.status_code == 400
    assert words in strict_json(response)["error"]


def test_window_offsets_inside_the_limit_are_cut(client: Client) -> None:
    assert client.get(timeline_url("2", wait=WAIT)).status_code == 200
    response = client.get(window_url("2", start_us="0", end_us="1000000000000"))
    assert response.status_code == 200
    assert (
        int(response.headers["X-Window-End-Ns"]) - int(response.headers["X-Window-Start-Ns"])
        == 10**15
    )


def test_window_offsets_of_any_decimal_are_rounded_to_the_ns(client: Client) -> None:
    """A float's shortest text (what the page sent after a Largest-gaps click,
    ``766.7589999999999``) is a decimal: cut, rounded once to the ns (it was a 400)."""
    assert client.get(timeline_url("2", wait=WAIT)).status_code == 200
    response = client.get(
        window_url("2", start_us="99.99999999999999", end_us="1000.0004999999999")
    )
    assert response.status_code == 200
    # step 2 starts at 3000 µs on the trace's clock
    assert response.headers["X-Window-Start-Ns"] == str(3_000_000 + 100_000)
    assert response.headers["X-Window-End-Ns"] == str(3_000_000 + 1_000_000)


def test_a_window_outside_the_trace_is_422(client: Client, ranks_client: Client) -> None:
    """Attack run: ``start_us=99999999999&end_us=999999999999`` answered 200 with only
    metadata."""
    assert client.get(timeline_url("2", wait=WAIT)).status_code == 200
    far = {"start_us": "99999999999", "end_us": "999999999999"}
    response = client.get(window_url("2", **far))
    assert response.status_code == 422
    error = strict_json(response)["error"]
    assert "the window 99,999,999,999.000 to 999,999,999,999.000 µs after step 2's start " in error
    assert "holds no event; the trace's events span -" in error
    ranks = ranks_client.get(url("window_ranks", run="job", step="2", wait=WAIT, **far))
    assert ranks.status_code == 422
    assert "holds no event; the trace's events span " in strict_json(ranks)["error"]
    # the negative: a window inside the step is cut
    near = client.get(window_url("2", start_us="0", end_us="10"))
    assert near.status_code == 200


def test_window_of_every_rank_merged(ranks_client: Client) -> None:
    """``/window_ranks``: step 2's window of each worker's last span, merged: each rank's
    processes renumbered apart and named after its worker; every kernel kept."""
    response = ranks_client.get(url("window_ranks", run="job", step="2", wait=WAIT))
    assert response.status_code == 200
    assert response.headers["X-Window-Ranks"] == "rank0,rank1"
    assert "X-Window-Ranks-Missing" not in response.headers
    doc = strict_json(response)
    events = doc["traceEvents"]
    names = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert sorted(names.values()) == [
        "rank0: pid 0",
        "rank0: pid 100",
        "rank1: pid 0",
        "rank1: pid 100",
    ]
    kernels = sorted((names[e["pid"]], e["ts"]) for e in events if e.get("cat") == "kernel")
    # rank0's span 200 (steps of 2000 µs): step 2 at 3000; rank1's span 201 (4000 µs): 5000
    assert kernels == [("rank0: pid 0", 3100.0), ("rank1: pid 0", 5100.0)]
    steps = sorted(
        (names[e["pid"]], e["name"]) for e in events if e.get("cat") == "user_annotation"
    )
    assert ("rank0: pid 100", "ProfilerStep#2") in steps and (
        "rank1: pid 100",
        "ProfilerStep#2",
    ) in steps
    assert doc["traceName"] == "ranks: rank0, rank1"
    missing = ranks_client.get(url("window_ranks", run="job", step="7", wait=WAIT))
    assert missing.status_code == 404 and "has that step" in strict_json(missing)["error"]
    assert ranks_client.get(url("window_ranks", run="nope", step="1")).status_code == 404
    bad = ranks_client.get(url("window_ranks", run="job", step="2", start_us="1", wait=WAIT))
    assert bad.status_code == 400


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            {"offset": "-1"},
            "offset must be a whole number, 0 or more, of at most 18 digits (got '-1')",
        ),
        (
            {"offset": "1" * 30},
            f"offset must be a whole number, 0 or more, of at most 18 digits (got '{'1' * 30}')",
        ),
        ({"limit": "-3"}, "limit must be a whole number, from 1 to 500, of at most 18 digits"),
        ({"limit": "0"}, "limit must be from 1 to 500"),
    ],
)
def test_across_runs_paging_says_the_bounds(
    client: Client, args: dict[str, str], words: str
) -> None:
    """Attack run: ``offset=-1`` and a 30-digit offset both said only "offset must be a
    whole number"."""
    response = client.get(url("across_runs", **args))
    assert response.status_code == 400
    assert strict_json(response)["error"].startswith(words)
