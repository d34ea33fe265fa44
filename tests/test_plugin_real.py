"""The tests of ``test_plugin.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
from test_plugin import (
    PREFIX,
    REPO,
    WAIT,
    _close_plugins,
    cache_dir,
    client,
    get_json,
    http_get,
    logdir,
    make_app,
    needs_tensorboard,
    running_tensorboard,
    strict_json,
    summary_url,
    tail,
    url,
)
from werkzeug.test import Client

from tb_kineto_insights import summary as summary_module
from tb_kineto_insights.logdir.discovery import discover
from tb_kineto_insights.serve.plugin import PRELOAD_ENV

#: Fixtures of test_plugin.py that these tests take: pytest looks them up
#: among the names of the test's module (this use of them keeps the import).
FIXTURES = (_close_plugins, cache_dir, client, logdir)


SAMPLE_LOGS = REPO / "sample_logs"


def test_every_route_on_sample_logs(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not has_traces(SAMPLE_LOGS):
        pytest.skip("sample_logs/ holds no traces")
    monkeypatch.setenv(PRELOAD_ENV, "0")
    expected = discover(str(SAMPLE_LOGS))
    app_client = Client(make_app(SAMPLE_LOGS, "--kineto_insights_cache_dir", str(cache_dir)))
    runs = strict_json(app_client.get(f"{PREFIX}/runs"))
    assert [r["run"] for r in runs["runs"]] == [r.name for r in expected]
    for run in expected:
        for worker in run.workers:
            for span in worker.spans:
                key = {"run": run.name, "worker": worker.name, "span": span.span}
                response = app_client.get(url("summary", **key, wait=WAIT))
                assert response.status_code == 200, (key, response.get_data()[:300])
                whole = strict_json(response)
                assert list(whole) == list(summary_module.PANELS)
                assert whole["steps"]["count"] > 0, key
                for panel in summary_module.PANELS:
                    one = app_client.get(url("summary", **key, panel=panel))
                    assert one.status_code == 200 and strict_json(one) == whole[panel]
                health = app_client.get(url("health", **key))
                assert strict_json(health) == whole["health"]
        response = app_client.get(url("run_summary", run=run.name, wait=WAIT))
        assert response.status_code == 200, response.get_data()[:300]
        assert strict_json(response)["run"] == run.name
    runs = strict_json(app_client.get(f"{PREFIX}/runs"))
    states = {s["state"] for r in runs["runs"] for w in r["workers"] for s in w["spans"]}
    assert states == {"ready"}
    names = [r.name for r in expected]
    if {"transformer_eager", "transformer_compile"} <= set(names):
        response = app_client.get(
            url("diff", base_run="transformer_eager", exp_run="transformer_compile", wait=WAIT)
        )
        assert response.status_code == 200
        assert strict_json(response)["headline"]["speedup"] > 1  # compile is faster


HAS_TORCH_PROFILER = importlib.util.find_spec("torch_tb_profiler") is not None


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
    with running_tensorboard(served, log_path, tmp_path / "tb-cache", rescan_s="30") as base:
        status, listing = get_json(f"{base}/data/plugins_listing")
        assert status == 200
        assert listing["kineto_insights"]["enabled"] is True, tail(log_path)
        assert listing["kineto_insights"]["loading_mechanism"]["type"] == "IFRAME"
        if HAS_TORCH_PROFILER:
            assert "pytorch_profiler" in listing, tail(log_path)
        status, runs = get_json(f"{base}{PREFIX}/runs")
        assert status == 200
        assert [r["run"] for r in runs["runs"]] == [r.name for r in expected]
        status, script = http_get(f"{base}{PREFIX}/index.js")
        assert status == 200 and b"export async function render" in script
        smallest = min(
            (s for r in expected for w in r.workers for s in w.spans), key=lambda s: s.size_bytes
        )
        status, summary = get_json(
            base + summary_url(smallest.run, smallest.worker, smallest.span, wait=WAIT)
        )
        assert status == 200, (status, summary)
        assert set(summary) == set(summary_module.PANELS)
        assert summary["health"]["event_count"] > 0
        status, health = get_json(
            base + url("health", run=smallest.run, worker=smallest.worker, span=smallest.span)
        )
        assert status == 200 and health == summary["health"]
        assert get_json(base + url("run_summary", run=smallest.run, wait=WAIT))[0] == 200
        status, missing = get_json(base + summary_url("../..", "etc", "passwd"))
        assert status == 404 and "error" in missing


def test_run_summary_splits_ranks_saved_under_one_worker(
    shared_cases: Path, tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B13: two ranks' files named alike are one worker to discovery; the view across
    ranks sees two ranks (summary.select_run_spans, the same choice as the CLI)."""
    logdir = tmp_path / "logs"
    shutil.copytree(shared_cases / "B13_same_worker_prefix_all_ranks", logdir / "b13")
    monkeypatch.setenv(PRELOAD_ENV, "0")
    client = Client(make_app(logdir, "--kineto_insights_cache_dir", str(cache_dir)))
    body = strict_json(client.get(url("run_summary", run="b13", wait=WAIT)))
    worker = "r0-2025-3-14-14-46"
    assert body["spans"] == [
        {"worker": f"{worker} (rank 0)", "span": "1741988781221064630"},
        {"worker": f"{worker} (rank 1)", "span": "1741988781256064630"},
    ]
    view = body["summary"]
    assert [r["rank"] for r in view["ranks"]] == [0, 1] and view["matched_count"] == 4
    assert any("each rank is treated as its own worker" in n for n in view["notes"])
