"""History on real traces: a log directory built in tmp_path from sample_logs/ and
../shared/traces/h200x2, each run a copy of a recorded run with its clock shifted
(``baseTimeNanoseconds`` rewritten) and its file time reversed, so only the trace's own
clock orders it right. Expected answers come from the recordings: memory_leak's steps are
shorter than memory_fixed's (3.11 vs 3.40 ms median, recording_info.json), a
memory_fragmentation_fixed run (12.1 ms) is a one-off, and ddp_straggler's step time is
the straggler's (38 ms against ddp_default's 24-25 ms)."""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

import pytest
from conftest import REPO

from tb_kineto_insights.compare.history import build_history
from tb_kineto_insights.logdir.discovery import discover
from tb_kineto_insights.service.headlines import collect_runs
from tb_kineto_insights.store.cached_summaries import CachedSummaries
from tb_kineto_insights.summary import summarize_file

SAMPLES = REPO / "sample_logs"
HOUR_NS = 3600 * 10**9
T0 = 1_795_000_000 * 10**9


def _copy_run(source: Path, dest: Path, start_ns: int, mtime: float) -> None:
    """Copy every trace of the run folder ``source`` into ``dest`` with
    ``baseTimeNanoseconds`` rewritten so that its first step starts at ``start_ns``."""
    for trace in sorted(source.glob("*.pt.trace.json.gz")):
        origin = summarize_file(str(trace)).steps.origin_ns
        assert origin is not None
        data = gzip.decompress(trace.read_bytes())
        data, n = re.subn(
            rb'"baseTimeNanoseconds": *\d+',
            b'"baseTimeNanoseconds": %d' % (start_ns - origin),
            data,
            count=1,
        )
        assert n == 1, trace
        target = dest / trace.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(gzip.compress(data, mtime=0))
        os.utime(target, (mtime, mtime))


@pytest.fixture(scope="module")
def memory_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logdir = tmp_path_factory.mktemp("history") / "logs"
    plan = ["memory_fixed"] * 3 + ["memory_leak"] * 3 + ["memory_fragmentation_fixed"]
    plan += ["memory_leak"] * 2 + ["memory_fixed"] * 3
    for i, source in enumerate(plan):
        # file times run backwards: ordering by them would reverse the history
        _copy_run(SAMPLES / source, logdir / f"job_{i:02d}", T0 + i * HOUR_NS, 2e9 - i * 60)
    return logdir


def test_regression_recovery_and_outlier_named_at_the_right_run(
    memory_logdir: Path, tmp_path: Path
) -> None:
    cache = str(tmp_path / "cache")
    runs, skipped = collect_runs(discover(str(memory_logdir)), CachedSummaries(cache))
    assert skipped == {}
    doc = build_history(runs, logdir=str(memory_logdir), metrics=["step_time"])
    (series,) = doc.series
    assert series.name == "job" and series.grouped_by == "name"
    assert [r.run for r in series.runs] == [f"job_{i:02d}" for i in range(12)]
    assert all(r.time_source == "trace" for r in series.runs)
    assert series.runs[0].start_ns == T0
    found = [(c.run, c.verdict, c.confirmed) for c in series.changes]
    assert found == [
        ("job_03", "improved", True),
        ("job_06", "outlier", True),
        ("job_09", "regressed", True),
    ]
    improved, outlier, regressed = series.changes
    # levels: memory_fixed's mean step ~3.4 ms, memory_leak's ~3.1 ms
    assert 3.2e3 < improved.before < 3.6e3 and 2.9e3 < improved.after < 3.3e3
    assert -0.15 < (improved.change_fraction or 0) < -0.05
    assert "memory_growth" in improved.gained and "memory_growth" in regressed.lost
    assert improved.settings_changed == []  # same machine, versions and settings
    assert 11e3 < outlier.after < 13e3 and outlier.before_runs == 3
    assert 0.05 < (regressed.change_fraction or 0) < 0.15
    assert series.runs[6].outlier == ["step_time"] and series.runs[3].change == ["step_time"]


def test_copies_of_one_run_raise_nothing_and_a_new_run_is_read_alone(
    memory_logdir: Path, tmp_path: Path
) -> None:
    logdir = tmp_path / "copies"
    for i in range(5):
        _copy_run(
            SAMPLES / "memory_leak", logdir / f"nightly-2026-11-{20 + i}", T0 + i * HOUR_NS, 2e9
        )
    cache = str(tmp_path / "cache")
    runs, _ = collect_runs(discover(str(logdir)), CachedSummaries(cache))
    doc = build_history(runs, logdir=str(logdir))
    (series,) = doc.series
    assert series.name == "nightly" and len(series.runs) == 5
    assert series.changes == []
    # a run added: read alone, the others' headlines come from the cache
    _copy_run(SAMPLES / "memory_fixed", logdir / "nightly-2026-11-25", T0 + 5 * HOUR_NS, 2e9)
    again = CachedSummaries(cache)
    runs, _ = collect_runs(discover(str(logdir)), again)
    assert again.parsed == 1 and again.headlines_read == 5
    doc = build_history(runs, logdir=str(logdir), metrics=["step_time"])
    (change,) = doc.series[0].changes
    assert (change.run, change.verdict, change.confirmed) == (
        "nightly-2026-11-25",
        "regressed",
        False,
    )


def test_two_ranks_straggler_regression(h200x2: Path, tmp_path: Path) -> None:
    logdir = tmp_path / "ddp"
    plan = ["ddp_default"] * 3 + ["ddp_straggler"] * 2
    for i, source in enumerate(plan):
        _copy_run(h200x2 / source, logdir / f"ddp_{i}", T0 + i * HOUR_NS, 2e9)
    runs, _ = collect_runs(discover(str(logdir)), CachedSummaries(None))
    doc = build_history(runs, logdir=str(logdir))
    (series,) = doc.series
    assert all(r.ranks == 2 and r.world_size == 2 for r in series.runs)
    # the slowest rank's step time
    for r in series.runs:
        assert r.slowest_worker is not None and r.mean_step_us is not None
        assert r.gpu_model == "NVIDIA H200"
    step = [c for c in series.changes if c.metric == "step_time"]
    assert [(c.run, c.verdict) for c in step] == [("ddp_3", "regressed")]
    assert 22e3 < step[0].before < 27e3 and 36e3 < step[0].after < 41e3
    assert "exposed_communication" in step[0].gained


def test_a_trace_cut_before_its_gpu_events_is_no_regression(tmp_path: Path) -> None:
    """A new user's trial: three copies of ``capture_light`` and one cut to its first
    5,000 bytes (no GPU event, no step marker left) in one series. The cut's headline
    has no step time (its ``trace_data_loss`` says no GPU number can be trusted), so the
    history names no change; it was "REGRESSED step_time at trunc: +120 %"."""
    (source,) = (SAMPLES / "capture_light").glob("*.pt.trace.json.gz")
    logdir = tmp_path / "logs"
    for i in range(3):
        (logdir / f"light_{i}").mkdir(parents=True)
        (logdir / f"light_{i}" / source.name).write_bytes(source.read_bytes())
    (logdir / "light_3").mkdir()
    cut = gzip.decompress(source.read_bytes())[:5000]
    (logdir / "light_3" / source.name).write_bytes(gzip.compress(cut))
    runs, skipped = collect_runs(discover(str(logdir)), CachedSummaries(None))
    assert skipped == {}
    by_name = {r.name: r for r in runs}
    (cut_headline,) = by_name["light_3"].workers.values()
    assert cut_headline.median_step_us is None and cut_headline.gpu_utilization_fraction is None
    assert any(d.id == "trace_data_loss" for d in cut_headline.diagnoses)
    (whole,) = by_name["light_0"].workers.values()
    assert whole.median_step_us is not None and whole.median_step_us > 0
    doc = build_history(runs, logdir=str(logdir), metrics=["step_time"])
    assert [c for s in doc.series for c in s.changes] == []
