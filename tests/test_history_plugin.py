"""``/history`` of the TensorBoard plugin: the history document of the log directory from
the cache's headline records, or from summaries the plugin loads (queued by the request
and named ``loading`` in ``skipped`` until ready)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from test_history import DAY_NS, T0, tiny_trace
from test_plugin import _close_plugins, make_app, strict_json, url  # noqa: F401
from werkzeug.test import Client

from tb_kineto_insights.serve.plugin import PRELOAD_ENV


def history_until_loaded(client: Client, **params: str) -> tuple[Any, int]:
    """``/history`` asked until no run is loading; returns the document and how many
    answers had runs loading."""
    loading = 0
    deadline = time.monotonic() + 60
    while True:
        doc = strict_json(client.get(url("history", **params)))
        if not doc["skipped"]:
            return doc, loading
        assert set(doc["skipped"].values()) == {"loading"}
        loading += 1
        assert time.monotonic() < deadline, doc["skipped"]
        time.sleep(0.2)


def test_history_route(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PRELOAD_ENV, "0")
    logdir = tmp_path / "logs"
    for i, step in enumerate((200.0, 200.0, 300.0, 300.0)):
        tiny_trace(logdir / f"exp_{i}" / "w.1.pt.trace.json", step, T0 + i * DAY_NS)
    cache = str(tmp_path / "cache")
    client = Client(make_app(logdir, "--kineto_insights_cache_dir", cache))
    doc, loading = history_until_loaded(client, metric="step_time")
    assert loading >= 1  # the first answer queued the loads
    assert doc["schema"] == "tb_kineto_insights.history/1"
    (series,) = doc["series"]
    assert [r["run"] for r in series["runs"]] == ["exp_0", "exp_1", "exp_2", "exp_3"]
    assert [(c["run"], c["verdict"]) for c in series["changes"]] == [("exp_2", "regressed")]
    # another TensorBoard on the same cache answers at once, from the headlines
    again = Client(make_app(logdir, "--kineto_insights_cache_dir", cache))
    doc2, loading2 = history_until_loaded(again, metric="step_time")
    assert loading2 == 0 and doc2["series"] == doc["series"]
    bad = again.get(url("history", metric="speed"))
    assert bad.status_code == 400 and "unknown metric" in bad.get_data(as_text=True)
    grouped = strict_json(again.get(url("history", group_by="key:nope")))
    assert [s["name"] for s in grouped["series"]] == ["(nope unknown)"]


def test_history_builds_with_the_garbage_collector_off_and_turns_it_back_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first answer is built with the cyclic garbage collector off (its passes cost
    a third of it on 10,000 runs), and the collector is on again afterwards, also when
    the request is refused (a bad ``group_by`` regex: 400)."""
    import gc

    from tb_kineto_insights.compare import history as hist

    monkeypatch.setenv(PRELOAD_ENV, "0")
    logdir = tmp_path / "logs"
    for i in range(2):
        tiny_trace(logdir / f"exp_{i}" / "w.1.pt.trace.json", 200.0, T0 + i * DAY_NS)
    client = Client(make_app(logdir, "--kineto_insights_cache_dir", str(tmp_path / "cache")))
    history_until_loaded(client)
    seen: list[bool] = []
    build = hist.build_history

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return build(*args, **kwargs)

    monkeypatch.setattr(hist, "build_history", spy)
    assert gc.isenabled()
    doc = strict_json(client.get(url("history", metric="gpu_utilization")))
    assert [r["run"] for r in doc["series"][0]["runs"]] == ["exp_0", "exp_1"]
    assert seen == [False] and gc.isenabled()
    bad = client.get(url("history", group_by="(unclosed"))
    assert bad.status_code == 400 and "not a valid regex" in bad.get_data(as_text=True)
    assert seen == [False, False] and gc.isenabled()
