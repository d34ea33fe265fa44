"""Thousands of ranks (issue 15 §4): the view across 1,024 ranks built from the real
h200x2 ranks (``benchmarks/synth_ranks.py``: copies with seeded jitter, renamed), and
``/runs`` with 10,000 spans. Results, not times: ``benchmarks/bench_ranks.py`` and
``benchmarks/bench_runs.py`` measure those."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import REPO, as_json
from werkzeug.test import Client

from tb_kineto_insights.analysis.run_view_match import LARGEST_SKEW_RANKS
from tb_kineto_insights.schema import Summary
from tb_kineto_insights.serve.plugin import RUN_VIEW_PANELS, KinetoInsightsPlugin
from tb_kineto_insights.store.cache import LoadResult, encode_json
from tb_kineto_insights.summary import summarize_file, summarize_run

sys.path.insert(0, str(REPO / "benchmarks"))
import bench_runs  # noqa: E402
import synth_ranks  # noqa: E402

N = 1024
STRAGGLER = 341


@pytest.fixture(scope="module")
def straggler_workers(h200x2_dir: Path) -> list[tuple[str, Summary]]:
    return synth_ranks.straggler_run(N, STRAGGLER)


@pytest.fixture(scope="module")
def h200x2_dir() -> Path:
    if not synth_ranks.H200X2.is_dir():
        pytest.skip("../shared/traces/h200x2 is not there")
    return synth_ranks.H200X2


def test_1024_ranks_find_the_one_straggler(
    straggler_workers: list[tuple[str, Summary]],
) -> None:
    run = as_json(summarize_run(straggler_workers))
    # ddp_default: 13 all-reduces per step, 5 profiled steps, every one on every rank
    assert run["worker_count"] == N and run["world_size"] == N
    assert run["rank_source"] == "distributed_info"
    assert run["matched_count"] == 65 and run["unmatched_count"] == 0
    assert run["matched_step_count"] == 5
    assert run["process_groups"] == [
        {"pg": "0", "ranks": list(range(N)), "matched": 65, "unmatched": 0}
    ]
    assert [r["rank"] for r in run["ranks"]] == list(range(N))
    assert {r["matched_count"] for r in run["ranks"]} == {65}
    s = run["straggler"]
    assert s is not None and s["rank"] == STRAGGLER and s["worker"] == f"rank{STRAGGLER}"
    # last in all 5 steps among 1,024 ranks, ~20 ms later than the others in each, with
    # a step-to-step noise of under a millisecond: p (× 1,024) far below any alpha
    assert (s["last_steps"], s["tested_steps"]) == (5, 5)
    assert 18_000 < s["lateness_excess_us_per_step"] < 22_000
    assert s["lateness_noise_us"] < 1_000 and s["p_value"] < 1e-10
    # why: the sleep, host time outside traced ops, against the median of 64 other ranks
    assert s["cause"]["class"] == "host_untraced" and s["cause"]["reference_ranks"] == 64
    assert 17_000 < s["cause"]["us_per_step"] < 21_000
    # it sleeps 20 ms per step (recording_info.json); two real ranks give 19.56 ms
    assert 18_000 < s["delay_us_per_step"] < 21_000
    assert 0.45 < s["share_of_step"] < 0.56
    ids = [d["id"] for d in run["diagnoses"]]
    assert ids.count("communication_straggler") == 1
    assert run["diagnoses"][0]["evidence"]["rank"] == STRAGGLER
    # every other rank waits for it (exposed wait), the straggler itself does not
    waiting = {
        d["evidence"]["rank"] for d in run["diagnoses"] if d["id"] == "exposed_communication"
    }
    assert len(run["diagnoses"]) == N
    assert waiting == set(range(N)) - {STRAGGLER}


def test_1024_ranks_json_is_bounded(straggler_workers: list[tuple[str, Summary]]) -> None:
    view = summarize_run(straggler_workers)
    body = encode_json(view)
    assert len(body) < 3_000_000  # measured 2.05 MB: 1,024 rank rows + 1,023 diagnoses
    run = as_json(view)
    largest = run["largest_skews"]
    assert len(largest) == 20
    top = largest[0]
    assert top["last_rank"] == STRAGGLER
    assert len(top["start_offsets_us"]) == LARGEST_SKEW_RANKS
    assert top["ranks_not_listed"] == N - LARGEST_SKEW_RANKS
    # independent recount from the input: the same collective (same seq) on every rank
    starts = np.array(
        [
            next(e.start_ns for e in w.communication.sequence if e.seq == top["seq"])
            for _, w in straggler_workers
        ]
    )
    offsets = starts - starts.min()
    assert top["skew_us"] == int(offsets.max()) / 1000.0
    latest = np.argsort(-offsets, kind="stable")[: LARGEST_SKEW_RANKS - 1].tolist()
    expected = {str(r): int(offsets[r]) / 1000.0 for r in latest}
    expected[str(int(np.argmin(offsets)))] = 0.0
    assert top["start_offsets_us"] == expected
    assert top["start_offsets_us"][str(STRAGGLER)] == top["skew_us"]
    for item in largest:
        assert len(item["start_offsets_us"]) + item["ranks_not_listed"] == N


def test_1024_balanced_ranks_have_no_straggler(h200x2_dir: Path) -> None:
    view = summarize_run(synth_ranks.balanced_run(N))
    run = as_json(view)
    assert run["matched_count"] == 65 and run["unmatched_count"] == 0
    assert run["straggler"] is None
    test = run["straggler_test"]
    assert test is not None and not test["consistent"] and test["p_value"] == 1.0
    assert test["delay_us_per_step"] < 1000.0  # jitter of 50 µs, no sleeping rank
    assert "communication_straggler" not in [d["id"] for d in run["diagnoses"]]
    assert len(encode_json(view)) < 1_000_000  # measured 637 KiB


def test_few_ranks_list_every_offset(h200x2_dir: Path) -> None:
    run = as_json(summarize_run(synth_ranks.straggler_run(LARGEST_SKEW_RANKS, 3)))
    assert run["straggler"] is not None and run["straggler"]["rank"] == 3
    for item in run["largest_skews"]:
        assert item["ranks_not_listed"] == 0
        assert sorted(item["start_offsets_us"], key=int) == [
            str(r) for r in range(LARGEST_SKEW_RANKS)
        ]


def test_runs_lists_10000_spans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINETO_INSIGHTS_PRELOAD", "0")
    logdir = tmp_path / "logs"
    assert bench_runs.write_logdir(logdir, 10, 1000, 1) == 10_000
    plugin = KinetoInsightsPlugin(
        SimpleNamespace(logdir=str(logdir), flags=None),
        workers=0,
        cache_dir=tmp_path / "cache",
        preload=False,
    )
    try:
        assert plugin.rescan(timeout=120)
        client = Client(plugin.get_plugin_apps()["/runs"])
        doc = json.loads(client.get("/").get_data())
        assert doc["error"] is None and doc["scanning"] is False
        assert [r["run"] for r in doc["runs"]] == [f"run{r:03d}" for r in range(10)]
        size = len(bench_runs.EMPTY_TRACE)
        spans = [
            (r["run"], w["worker"], s)
            for r in doc["runs"]
            for w in r["workers"]
            for s in w["spans"]
        ]
        assert len(spans) == 10_000
        assert {w["worker"] for w in doc["runs"][3]["workers"]} == {
            f"host{w:05d}_{w}" for w in range(1000)
        }
        for _, _, s in spans:
            assert s["span"] == "1700000000000" and s["size_bytes"] == size
            assert s["state"] == "not_loaded" and s["error"] is None
        # the same listing again is the same answer; a span loaded since changes it
        assert json.loads(client.get("/").get_data()) == doc
        summary = Client(plugin.get_plugin_apps()["/summary"])
        loaded = summary.get("/?run=run002&worker=host00042_42&span=1700000000000&wait=30")
        assert loaded.status_code in (200, 422)
        doc = json.loads(client.get("/").get_data())
        states = {
            (r["run"], w["worker"]): w["spans"][0]["state"]
            for r in doc["runs"]
            for w in r["workers"]
        }
        assert states.pop(("run002", "host00042_42")) in ("ready", "error")
        assert set(states.values()) == {"not_loaded"}
        # a new scan is a new listing: a new file appears, a removed one goes
        (logdir / "run005" / "host00007_7.1700000000000.pt.trace.json").unlink()
        (logdir / "run010").mkdir()
        (logdir / "run010" / "new_1.1700000000001.pt.trace.json").write_bytes(b"{}")
        assert plugin.rescan(timeout=120)
        doc = json.loads(client.get("/").get_data())
        assert len(doc["runs"]) == 11 and doc["runs"][-1]["workers"][0]["worker"] == "new_1"
        assert len(doc["runs"][5]["workers"]) == 999
        assert sum(len(w["spans"]) for r in doc["runs"] for w in r["workers"]) == 10_000
    finally:
        plugin.close()


def test_run_summary_route_reads_three_panels_same_view(
    tmp_path: Path, h200x2_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/run_summary`` decodes only health, steps and communication of each rank (a
    fifth of a real rank's summary): the view is the one whole summaries give."""
    monkeypatch.setenv("KINETO_INSIGHTS_PRELOAD", "0")
    plugin = KinetoInsightsPlugin(
        SimpleNamespace(logdir=str(h200x2_dir), flags=None),
        workers=0,
        cache_dir=tmp_path / "cache",
        preload=False,
    )
    try:
        assert plugin.rescan(timeout=120)

        def whole_decode(self: LoadResult) -> Summary:
            raise AssertionError("the whole summary was decoded")

        monkeypatch.setattr(LoadResult, "decoded", whole_decode)
        client = Client(plugin.get_plugin_apps()["/run_summary"])
        response = client.get("/?run=ddp_straggler&wait=60")
        assert response.status_code == 200
        doc = json.loads(response.get_data())
    finally:
        plugin.close()
    files = sorted((h200x2_dir / "ddp_straggler").glob("*.pt.trace.json.gz"))
    whole = [(f.name.split(".")[0], summarize_file(str(f))) for f in files]
    assert set(whole[0][1].__struct_fields__) > set(RUN_VIEW_PANELS)
    expected = json.loads(encode_json(summarize_run(whole)))
    assert doc["summary"] == expected
    assert doc["summary"]["straggler"]["rank"] == 1
