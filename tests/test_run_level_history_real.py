"""Run-level diagnoses in the history and the view across runs (issues 30/31): a run of
several workers is listed as ``report`` lists it (the view across ranks' run-level
diagnoses such as ``communication_straggler``, the per-rank ones it supersedes left out),
each per-rank value naming its rank; a run of one worker is unchanged; the headline
index computes a run's list once and again only when one of its files changes. On the
real two-rank recording ``sample_logs/ddp2_straggler`` (rank 1 late) and one-rank
``sample_logs/eff_mlp_fp32``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import wait_until
from test_plugin import _close_plugins, make_app, strict_json, url  # noqa: F401
from werkzeug.test import Client

from tb_kineto_insights.cli.history import collect_runs
from tb_kineto_insights.cli.report import _all_diagnoses, build_report
from tb_kineto_insights.compare.across_runs import page_of, rank_runs
from tb_kineto_insights.compare.history import RunHeadlines, combine_run
from tb_kineto_insights.logdir.discovery import discover
from tb_kineto_insights.schema.history import AcrossRunsPage, HeadlineDiagnosis
from tb_kineto_insights.serve.plugin import PRELOAD_ENV
from tb_kineto_insights.store import headline_index as hi
from tb_kineto_insights.store.cached_summaries import CachedSummaries
from tb_kineto_insights.summary import ALL_RANKS

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"
STRAGGLER = "ddp2_straggler"
ONE_RANK = "eff_mlp_fp32"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runlevel") / "logs"
    for name in (STRAGGLER, ONE_RANK):
        shutil.copytree(SAMPLES / name, root / name)
    return root


@pytest.fixture(scope="module")
def collected(
    logdir: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[RunHeadlines], CachedSummaries]:
    summaries = CachedSummaries(str(tmp_path_factory.mktemp("cache")))
    runs, skipped = collect_runs(discover(str(logdir)), summaries, str(logdir))
    assert skipped == {}
    return runs, summaries


def _report_list(path: Path) -> list[tuple[str, Any]]:
    return _all_diagnoses(build_report(str(path)))


def _first_per_id(found: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    seen: dict[str, tuple[str, Any]] = {}
    for where, d in found:
        seen.setdefault(d.id, (where, d))
    return list(seen.values())


def test_a_straggler_run_is_listed_as_report_lists_it(
    logdir: Path, collected: tuple[list[RunHeadlines], CachedSummaries]
) -> None:
    runs, _ = collected
    run = next(r for r in runs if r.name == STRAGGLER)
    assert sorted(run.workers) == ["rank0", "rank1"]
    combined = combine_run(run)
    listed = _first_per_id(_report_list(logdir / STRAGGLER))
    where, first = listed[0]
    # report: [HIGH] communication_straggler ddp2_straggler (all ranks): Rank 1 holds ...
    assert (first.id, first.severity, where) == (
        "communication_straggler",
        "high",
        f"{STRAGGLER} (all ranks)",
    )
    assert combined.top_diagnosis == "communication_straggler"
    top = combined.diagnoses[0]
    assert top == HeadlineDiagnosis(
        id=first.id,
        severity=first.severity,
        impact_fraction=first.impact_fraction,
        title=first.title,
        where=ALL_RANKS,
    )
    assert top.title.startswith("Rank 1 holds the other ranks back")
    assert 0.3 < top.impact_fraction < 0.7  # 19.56 ms of a ~38 ms step
    # the same ids, in report's order; each per-rank one names its worker
    assert [d.id for d in combined.diagnoses] == [d.id for _, d in listed]
    for d, (w, r) in zip(combined.diagnoses, listed, strict=True):
        assert (d.title, d.impact_fraction) == (r.title, r.impact_fraction)
        assert d.where == (ALL_RANKS if w.endswith("(all ranks)") else w.split("/")[1])
    # report hides a rank's own estimate of exposed communication; so does the history
    per_rank = [(w, d.id) for w, d in _report_list(logdir / STRAGGLER) if "/" in w]
    assert all(i != "exposed_communication" for _, i in per_rank)
    assert all(d.id != "exposed_communication" or d.where == ALL_RANKS for d in combined.diagnoses)
    # the per-rank values are the slowest rank's, which is named
    slow = run.workers["rank1"]
    assert combined.slowest_worker == "rank1"
    assert combined.median_step_us == slow.median_step_us
    assert combined.gpu_utilization_fraction == slow.gpu_utilization_fraction


def test_the_view_across_runs_ranks_and_filters_on_the_run_level_diagnosis(
    collected: tuple[list[RunHeadlines], CachedSummaries],
) -> None:
    runs, _ = collected
    rows = rank_runs(runs)
    row = next(r for r in rows if r.run == STRAGGLER)
    assert row.diagnosis_ids[0] == "communication_straggler"
    assert row.diagnoses[0].where == ALL_RANKS
    assert row.slowest_worker == "rank1"
    assert len(row.diagnosis_ids) == len(set(row.diagnosis_ids))
    page = page_of(rows, "communication_straggler", 0, 50)
    assert page.matched == 1 and [r.run for r in page.rows] == [STRAGGLER]
    # the one-rank run does not have it, and names no rank
    single = next(r for r in rows if r.run == ONE_RANK)
    assert "communication_straggler" not in single.diagnosis_ids
    assert single.slowest_worker is None
    assert all(d.where is None for d in single.diagnoses)


def test_a_one_rank_run_is_unchanged(
    logdir: Path, collected: tuple[list[RunHeadlines], CachedSummaries]
) -> None:
    runs, _ = collected
    run = next(r for r in runs if r.name == ONE_RANK)
    assert run.run_diagnoses is None and len(run.workers) == 1
    (head,) = run.workers.values()
    combined = combine_run(run)
    # per id the largest impact, largest first: the span's own diagnoses
    expected = sorted(head.diagnoses, key=lambda d: (-d.impact_fraction, d.id))
    assert combined.diagnoses == expected
    assert {d.id for d in combined.diagnoses} == {d.id for _, d in _report_list(logdir / ONE_RANK)}


def test_the_index_computes_a_runs_list_only_when_one_of_its_files_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logdir = tmp_path / "logs"
    shutil.copytree(SAMPLES / STRAGGLER, logdir / STRAGGLER)
    shutil.copytree(SAMPLES / ONE_RANK, logdir / ONE_RANK)
    cache = tmp_path / "cache"
    calls: list[list[str]] = []
    compute = CachedSummaries.run_headline_diagnoses

    def spy(self: CachedSummaries, workers: Any) -> list[HeadlineDiagnosis]:
        calls.append([w.name for w in workers])
        return compute(self, workers)

    monkeypatch.setattr(CachedSummaries, "run_headline_diagnoses", spy)
    first, _ = collect_runs(discover(str(logdir)), CachedSummaries(str(cache)), str(logdir))
    assert calls == [["rank0", "rank1"]]  # the one-rank run needs none
    summaries = CachedSummaries(str(cache))
    index = summaries.headline_index(str(logdir))
    assert len(index._runs) == 1
    again, _ = collect_runs(discover(str(logdir)), summaries, str(logdir))
    assert len(calls) == 1 and summaries.parsed == 0
    assert [r.run_diagnoses for r in again] == [r.run_diagnoses for r in first]
    # one file of the run changes: its list is computed again, once
    trace = next((logdir / STRAGGLER).glob("rank1.*"))
    stat = trace.stat()
    os.utime(trace, (stat.st_atime, stat.st_mtime + 10))
    collect_runs(discover(str(logdir)), CachedSummaries(str(cache)), str(logdir))
    collect_runs(discover(str(logdir)), CachedSummaries(str(cache)), str(logdir))
    assert len(calls) == 2
    body = msgspec.json.decode((cache / index.name).read_bytes().split(b"\n", 1)[1])
    assert body["format"] == hi.INDEX_FORMAT and len(body["runs"]) == 1
    assert [f[0] for f in body["runs"][0][0]] == sorted(
        str(p) for p in (logdir / STRAGGLER).glob("*.pt.trace.json.gz")
    )


def test_across_runs_and_history_routes_name_the_straggler(
    logdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PRELOAD_ENV, "0")
    client = Client(make_app(logdir, "--kineto_insights_cache_dir", str(tmp_path / "cache")))

    def loaded() -> Any:
        doc = strict_json(client.get(url("across_runs", q="communication_straggler")))
        return doc if doc["loading"] == 0 else None

    doc = wait_until(loaded, 120, "no run loading in /across_runs", interval=0.2)
    page = msgspec.json.decode(msgspec.json.encode(doc), type=AcrossRunsPage)
    assert page.matched == 1 and page.rows[0].run == STRAGGLER
    row = page.rows[0]
    report_first = _first_per_id(_report_list(logdir / STRAGGLER))[0][1]
    assert row.diagnoses[0].id == report_first.id == "communication_straggler"
    assert row.diagnoses[0].impact_fraction == report_first.impact_fraction
    assert row.diagnoses[0].title == report_first.title
    assert row.slowest_worker == "rank1"
    history = strict_json(client.get(url("history")))
    tops = {r["run"]: r["top_diagnosis"] for s in history["series"] for r in s["runs"]}
    assert tops[STRAGGLER] == "communication_straggler"


def test_a_forged_run_diagnosis_in_the_index_is_damage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run's diagnoses in the index resealed with an impossible impact (the checksum is
    plain SHA-256) are dropped with one log line naming the index, and computed again."""
    from tb_kineto_insights.store.cache import encode_json, sealed

    logdir = tmp_path / "logs"
    shutil.copytree(SAMPLES / STRAGGLER, logdir / STRAGGLER)
    cache = tmp_path / "cache"
    first, _ = collect_runs(discover(str(logdir)), CachedSummaries(str(cache)), str(logdir))
    path = cache / CachedSummaries(str(cache)).headline_index(str(logdir)).name
    body = msgspec.json.decode(path.read_bytes().split(b"\n", 1)[1])
    body["runs"][0][1][0]["impact_fraction"] = -1e308
    path.write_bytes(sealed(encode_json(body)))
    caplog.set_level("WARNING")
    again, _ = collect_runs(discover(str(logdir)), CachedSummaries(str(cache)), str(logdir))
    assert [r.run_diagnoses for r in again] == [r.run_diagnoses for r in first]
    assert again[0].run_diagnoses and again[0].run_diagnoses[0].impact_fraction > 0.3
    lines = [r.getMessage() for r in caplog.records if "damaged headline index" in r.getMessage()]
    assert len(lines) == 1 and "impact_fraction -1e+308 of 'communication_straggler'" in lines[0]
