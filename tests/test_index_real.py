"""The tests of ``test_index.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

import signal
import subprocess
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLE_LOGS, Parses, wait_until
from test_index import entries, index

from tb_kineto_insights.logdir.discovery import discover
from tb_kineto_insights.service.loader import READY
from tb_kineto_insights.summary import ANALYSIS_VERSION


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``index`` once over sample_logs and ../shared/traces (2 thread workers), parses
    counted; then a second run."""
    from conftest import SHARED, require_dir

    traces = require_dir(SHARED / "traces", "../shared/traces")
    cache = tmp_path_factory.mktemp("index") / "cache"
    monkeypatch = pytest.MonkeyPatch()
    try:
        parses = Parses(monkeypatch)
        first = index([SAMPLE_LOGS, traces], cache)
        first_paths = list(parses.paths)
        parses.paths.clear()
        second = index([SAMPLE_LOGS, traces], cache)
        second_paths = list(parses.paths)
    finally:
        monkeypatch.undo()
    return {
        "traces": traces,
        "cache": cache,
        "first": first,
        "second": second,
        "first_paths": first_paths,
        "second_paths": second_paths,
    }


@pytest.mark.slow
def test_index_caches_every_span_once(indexed: dict[str, Any]) -> None:
    first, cache = indexed["first"], indexed["cache"]
    listed = [
        s.path
        for logdir in (SAMPLE_LOGS, indexed["traces"])
        for run in discover(str(logdir))
        for w in run.workers
        for s in w.spans
    ]
    assert first.spans == len(listed) >= 30  # 41 when written: 19 sample + 22 shared
    # each distinct content parsed exactly once, by the cluster, and stored once
    assert Counter(indexed["first_paths"]).most_common(1)[0][1] == 1
    assert len(indexed["first_paths"]) == first.computed == first.entries - len(first.failed)
    assert first.cached == 0
    assert len(entries(cache)) == first.entries
    assert first.exit_code == (1 if first.failed else 0)
    assert all(f["reason"] and f["file"] in listed for f in first.failed)
    # runs of 2 ranks (h200x2: ddp_default, ddp_tuned, ddp_straggler, fsdp) get a view
    assert first.run_views["computed"] >= 4 and first.run_views["failed"] == []
    views = sorted((cache / f"v{ANALYSIS_VERSION}" / "runs").iterdir())
    assert len(views) == first.run_views["computed"]


@pytest.mark.slow
def test_index_again_computes_nothing(indexed: dict[str, Any]) -> None:
    first, second = indexed["first"], indexed["second"]
    assert indexed["second_paths"] == []
    assert second.computed == 0
    assert second.cached == first.computed + first.cached
    assert second.entries == first.entries
    assert second.run_views["computed"] == 0
    assert second.run_views["cached"] == first.run_views["computed"]
    assert len(entries(indexed["cache"])) == first.entries  # nothing added


@pytest.mark.slow
def test_tensorboard_then_parses_nothing(
    indexed: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin over an indexed log directory with that cache: every span is ready
    from the scan on, and no load is ever started (preloading on)."""
    from tb_kineto_insights.serve import plugin as plugin_module
    from tb_kineto_insights.service import workspace as workspace_module

    logdir = indexed["traces"] / "h200x2"

    def must_not_parse(path: str, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError(f"parsed {path}")

    context = types.SimpleNamespace(logdir=str(logdir), flags=None)
    plugin = plugin_module.KinetoInsightsPlugin(
        context,
        workers=0,
        cache_dir=str(indexed["cache"]),
        preload=True,
        summarize=must_not_parse,
        rescan_s=3600,
        watch=False,
    )
    try:
        assert plugin.rescan()
        spans = list(plugin.scanner.current().index.values())
        assert len(spans) == 8  # 4 runs x 2 ranks
        statuses = plugin.loader.statuses(workspace_module.listed_identity(s) for s in spans)
        # the scan is done (a preload is queued by the scan itself) and every span is
        # ready, so none is queued: no load has started, and none can start later
        assert [st.state for st in statuses] == [READY] * 8
        assert plugin.loader.loads_started == 0
    finally:
        plugin.close()


# ------------------------------------------------------------------ kill and resume


def test_killed_half_way_then_resumed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    command = [
        sys.executable,
        "-m",
        "tb_kineto_insights.cli.main",
        "index",
        str(SAMPLE_LOGS),
        "--cache",
        str(cache),
        "--workers",
        "2",
        "--threads",
        "--quiet",
    ]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(
            lambda: entries(cache) or proc.poll() is not None, 120, "the first entry written"
        )
        assert entries(cache), "no entry written before the deadline"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    stored = len(entries(cache))
    assert proc.returncode == -signal.SIGKILL
    resumed = index([SAMPLE_LOGS], cache)
    assert resumed.computed >= 1, "the first run was not killed half-way"
    assert resumed.cached == stored  # what the killed run wrote is whole, and reused
    assert resumed.computed + resumed.cached + len(resumed.failed) == resumed.entries
    assert len(entries(cache)) == resumed.entries
    assert index([SAMPLE_LOGS], cache).computed == 0
