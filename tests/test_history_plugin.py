"""``/history`` of the TensorBoard plugin: the history document of the log directory from
the cache's headline records, or from summaries the plugin loads (queued by the request
and named ``loading`` in ``skipped`` until ready)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import wait_until
from test_history import DAY_NS, T0, tiny_trace
from test_plugin import _close_plugins, make_app, strict_json, url  # noqa: F401
from werkzeug.test import Client

from tb_kineto_insights.serve.plugin import PRELOAD_ENV


def history_until_loaded(client: Client, **params: str) -> tuple[Any, int]:
    """``/history`` asked until no run is loading; returns the document and how many
    answers had runs loading."""
    answers: list[Any] = []

    def loaded() -> bool:
        answers.append(strict_json(client.get(url("history", **params))))
        return "loading" not in answers[-1]["skipped"].values()

    wait_until(
        loaded, 60, lambda: f"no run loading in /history: {answers[-1]['skipped']}", interval=0.2
    )
    return answers[-1], len(answers) - 1


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
    # no run has the field: each is a series of its own, with no change point
    assert sorted(s["name"] for s in grouped["series"]) == ["exp_0", "exp_1", "exp_2", "exp_3"]
    assert all(not s["changes"] for s in grouped["series"])


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
    assert bad.status_code == 400 and "not a regex RE2 takes" in bad.get_data(as_text=True)
    assert seen == [False, False] and gc.isenabled()


def test_an_unreadable_run_is_named_with_its_error_not_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose trace cannot be read is listed in ``skipped`` with the reader's error
    (naming the file), as ``history`` prints it; it was "loading" for ever, and the
    tab polled for a minute."""
    monkeypatch.setenv(PRELOAD_ENV, "0")
    logdir = tmp_path / "logs"
    for i in range(2):
        tiny_trace(logdir / f"exp_{i}" / "w.1.pt.trace.json", 200.0, T0 + i * DAY_NS)
    bad = logdir / "exp_2" / "w.1.pt.trace.json"
    bad.parent.mkdir()
    bad.write_text('{"traceEvents": [{"ph": "X", "name": ')
    client = Client(make_app(logdir, "--kineto_insights_cache_dir", str(tmp_path / "cache")))
    doc, _ = history_until_loaded(client, metric="step_time")
    assert [r["run"] for r in doc["series"][0]["runs"]] == ["exp_0", "exp_1"]
    assert list(doc["skipped"]) == ["exp_2"]
    reason = doc["skipped"]["exp_2"]
    assert reason.startswith("error (trace): ") and str(bad) in reason
    # the CLI names the same file
    import io
    import json

    from tb_kineto_insights.cli.main import _parser

    args = _parser().parse_args(["history", str(logdir), "--format", "json", "--cache", "none"])
    out = io.StringIO()
    assert args.func(args, out, io.StringIO()) == 0
    assert str(bad) in json.loads(out.getvalue())["skipped"]["exp_2"]


def test_the_plugin_reads_the_headline_index_once_and_adds_new_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second TensorBoard on the same cache answers ``/history`` from the log
    directory's headline index (no per-file headline read); a run added later is read
    alone and added to the index."""
    import msgspec

    from tb_kineto_insights.store.cache import DiskCache

    monkeypatch.setenv(PRELOAD_ENV, "0")
    logdir = tmp_path / "logs"
    for i, step in enumerate((200.0, 200.0, 300.0)):
        tiny_trace(logdir / f"exp_{i}" / "w.1.pt.trace.json", step, T0 + i * DAY_NS)
    cache = str(tmp_path / "cache")
    first, _ = history_until_loaded(
        Client(make_app(logdir, "--kineto_insights_cache_dir", cache)), metric="step_time"
    )
    seen: list[str] = []
    load = DiskCache.load_file_headline

    def spy(self: DiskCache, ident: Any) -> Any:
        seen.append(ident.path)
        return load(self, ident)

    monkeypatch.setattr(DiskCache, "load_file_headline", spy)
    app = make_app(
        logdir, "--kineto_insights_cache_dir", cache, "--kineto_insights_rescan_s", "0.3"
    )
    client = Client(app)
    doc, loading = history_until_loaded(client, metric="step_time")
    assert loading == 0 and seen == [] and doc["series"] == first["series"]
    new = tiny_trace(logdir / "exp_3" / "w.1.pt.trace.json", 300.0, T0 + 3 * DAY_NS)
    wait_until(
        lambda: len(history_until_loaded(client, metric="step_time")[0]["series"][0]["runs"]) == 4,
        60,
        "exp_3 in /history's series",
        interval=0.3,
    )
    assert set(seen) == {str(new)}  # looked up while it loads, then found
    (stored,) = (tmp_path / "cache").rglob("*.index")
    entries = msgspec.json.decode(stored.read_bytes().split(b"\n", 1)[1])["entries"]
    assert sorted(h["mean_step_us"] for _, h in entries) == [200.0, 200.0, 300.0, 300.0]
