"""The tests of ``test_straggler.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

import functools
import gzip
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import H200X2, REPO, SAMPLE_LOGS, as_json

sys.path.insert(0, str(REPO / "benchmarks"))
import straggler_false_alarms as bench  # noqa: E402

from tb_kineto_insights.analysis import straggler as st
from tb_kineto_insights.cli.main import EXIT_OK, EXIT_REGRESSION, main
from tb_kineto_insights.summary import summarize_file, summarize_run


@functools.cache
def _pool() -> np.ndarray:
    if not H200X2.is_dir():
        pytest.skip("../shared/traces/h200x2 is not there")
    return bench.real_offsets(H200X2)


def test_synthetic_pool_is_the_real_spread() -> None:
    pool = _pool()
    # 3 balanced runs × 5 steps: ±d/√2 of the two ranks' lateness difference d, which
    # reaches 13.25 % of the step (ddp_default's first step)
    assert pool.size == 30 and abs(pool.sum()) < 1e-9
    assert np.abs(pool).max() == pytest.approx(0.1325 / math.sqrt(2), abs=5e-4)
    # the difference of two independent draws has the real d's mean square
    late = bench.balanced_lateness(H200X2)
    d = np.concatenate([(lat[1] - lat[0]) / step for lat, step in late])
    assert 2 * float((pool**2).mean()) == pytest.approx(float((d**2).mean()))
    rng = np.random.default_rng(3)
    drawn = bench.draw(pool, 200_000, rng)
    assert float(drawn.var()) == pytest.approx(float(pool.var()), rel=0.02)


def test_reference_noise_is_the_thresholds_default() -> None:
    """The reference of the rule is what the benchmark measures on the balanced runs."""
    if not H200X2.is_dir():
        pytest.skip("../shared/traces/h200x2 is not there")
    share, df = bench.reference_noise(H200X2)
    th = bench.DEFAULT_THRESHOLDS
    assert df == th.straggler_reference_noise_df == 12
    assert share == pytest.approx(th.straggler_reference_noise_share_of_step, abs=5e-4)


@pytest.mark.parametrize(
    ("ranks", "steps", "trials", "late", "min_named"),
    [
        (2, 3, 1000, 0.10, 0.99),
        (2, 4, 500, 0.10, 0.99),
        (2, 20, 200, 0.10, 0.99),
        (8, 3, 300, 0.10, 0.99),
        (64, 4, 100, 0.10, 0.99),
        (1024, 3, 20, 0.10, 0.99),
    ],
)
def test_synthetic_cells(
    ranks: int, steps: int, trials: int, late: float, min_named: float
) -> None:
    """Balanced runs alarm in at most 1 % of the trials; a rank late by ``late`` of the
    step in every step is named in at least ``min_named`` of them (RESULTS.md has the
    whole table at 500 trials)."""
    seed = 27 + 1000 * ranks + steps
    alarms, named = bench.cell(_pool(), ranks, steps, trials, seed, late_fraction=late)
    assert alarms <= 0.01 * trials
    assert named >= min_named * trials


def test_synthetic_two_ranks_two_steps_small_straggler_is_often_missed() -> None:
    """The limit moved from 3 steps to 2: with 2 ranks and 2 steps a rank 10 % late is
    named in under half the runs (RESULTS.md), balanced runs still alarm under 1 %."""
    alarms, named = bench.cell(_pool(), 2, 2, 500, seed=5, late_fraction=0.10)
    assert alarms <= 5 and 0.2 * 500 < named < 0.5 * 500


def test_synthetic_noisier_than_the_reference_alarms_more() -> None:
    """The price of the reference, measured: balanced 2-rank 3-step runs with twice the
    real jitter alarm in a few % of the runs (RESULTS.md), not under 1 %."""
    alarms, _ = bench.cell(2 * _pool(), 2, 3, 500, seed=11, late_fraction=0.10)
    assert 0.02 * 500 < alarms < 0.10 * 500


def test_every_real_balanced_window_is_quiet_and_the_straggler_named() -> None:
    """Every window of 2 to 5 consecutive steps of the real runs, at the lateness level:
    the balanced runs are never consistent-and-costly, ddp_straggler's rank 1 always.
    (The trace-level cuts below check the last 3 and 4 steps end to end.)"""
    if not H200X2.is_dir():
        pytest.skip("../shared/traces/h200x2 is not there")
    th = bench.DEFAULT_THRESHOLDS
    runs = dict(zip(bench.BALANCED, bench.balanced_lateness(H200X2), strict=True))
    paths = sorted((H200X2 / "ddp_straggler").glob("rank*.pt.trace.json.gz"))
    view = summarize_run([(p.name, summarize_file(str(p))) for p in paths])
    straggler = np.array([[s.lateness_us[r] for s in view.steps] for r in ("0", "1")])
    runs["ddp_straggler"] = (straggler, float(np.mean([r.mean_step_us for r in view.ranks])))
    for name, (late, step_us) in runs.items():
        for size in range(2, 6):
            for first in range(0, 6 - size):
                window = late[:, first : first + size]
                out = st.lateness_test(
                    window, th.straggler_reference_noise_share_of_step * step_us, 12
                )
                consistent = out["p_value"] <= th.straggler_alpha
                if name == "ddp_straggler":
                    assert consistent and out["candidate"] == 1, (size, first, out)
                else:
                    # lateness of a balanced run never reaches 1 % (fsdp steps 0-2: rank 1
                    # 3.1-3.8 ms late of 80 ms, p = 0.5; the old t-test said 0.004)
                    assert not consistent, (name, size, first, out)


# --- real runs cut to 3 and 4 profiled steps ---------------------------------------------


@functools.lru_cache(maxsize=4)
def _load(path: str) -> dict[str, Any]:
    with gzip.open(path) as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def cut_steps(src: Path, dst: Path, keep: int) -> Path:
    """Copy a run folder keeping only its last ``keep`` profiled steps on every rank: the
    ``ProfilerStep#N`` of the dropped steps go, with every host event inside their host
    window, the GPU work and flows launched from those events (by correlation), and
    their GPU step annotations. Returns ``dst``."""
    dst.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.glob("rank*.pt.trace.json.gz")):
        doc = dict(_load(str(path)))
        events = doc["traceEvents"]
        steps = sorted(
            (
                e
                for e in events
                if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
            ),
            key=lambda e: e["ts"],
        )
        dropped = steps[: len(steps) - keep]
        names = {e["name"] for e in dropped}
        windows = [(e["ts"], e["ts"] + e["dur"]) for e in dropped]

        def in_dropped(ts: float, windows: list[tuple[float, float]] = windows) -> bool:
            return any(a <= ts < b for a, b in windows)

        gpu = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
        correlations = {
            e["args"]["correlation"]
            for e in events
            if e.get("cat") in ("cuda_runtime", "cuda_driver")
            and in_dropped(e["ts"])
            and "correlation" in e.get("args", {})
        }
        kept = []
        for e in events:
            cat = e.get("cat")
            if e.get("ph") == "M" or "ts" not in e:
                kept.append(e)
            elif cat in gpu:
                if e["name"] in names or e.get("args", {}).get("correlation") in correlations:
                    continue
                kept.append(e)
            elif cat == "ac2g":
                if e.get("id") not in correlations:
                    kept.append(e)
            elif not in_dropped(e["ts"]):
                kept.append(e)
        doc["traceEvents"] = kept
        with gzip.open(dst / path.name, "wt", compresslevel=1) as f:
            json.dump(doc, f)
    return dst


@functools.cache
def _cut_run(folder: str, keep: int, tmp: str) -> dict[str, Any]:
    out = cut_steps(
        Path(folder), Path(tmp) / f"{Path(folder).parent.name}_{Path(folder).name}_{keep}", keep
    )
    paths = sorted(out.glob("rank*.pt.trace.json.gz"))
    return as_json(summarize_run([(p.name.split(".")[0], summarize_file(str(p))) for p in paths]))


@pytest.fixture(scope="module")
def cut_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("cut"))


@pytest.mark.parametrize("source", ["shared", "sample_logs"])
@pytest.mark.parametrize("keep", [3, 4])
def test_cut_straggler_runs_name_rank_1(source: str, keep: int, cut_dir: str) -> None:
    folder = (H200X2 / "ddp_straggler") if source == "shared" else (SAMPLE_LOGS / "ddp2_straggler")
    if not folder.is_dir():
        pytest.skip(f"{folder} is not there")
    run = _cut_run(str(folder), keep, cut_dir)
    assert run["matched_step_count"] == keep
    s = run["straggler"]
    assert s is not None and s["rank"] == 1 and s["tested_steps"] == keep
    # rank 1 sleeps 20.09 ms/step before backward (recording_info.json): measured on the
    # cuts 18.7-21.2 ms/step of delay, 50-55 % of rank 0's step, p < 1e-3
    assert 17_000 < s["delay_us_per_step"] < 22_000
    assert 0.4 < s["share_of_step"] < 0.6 and s["p_value"] < 1e-3
    (d,) = [d for d in run["diagnoses"] if d["id"] == "communication_straggler"]
    # the fix's estimate: 38.4 → about 25.5 ms (the balanced run: 23.5)
    assert d["severity"] == "high" and 0.25 < d["impact_fraction"] < 0.45
    assert d["impact_fraction"] == d["prediction"]["saving_fraction"]
    # and why, from the cut steps alone: host time outside traced ops (the sleep)
    assert s["cause"]["class"] == "host_untraced"
    assert 17_000 < s["cause"]["us_per_step"] < 21_000
    assert "host time outside traced ops" in d["title"]


def test_cut_fsdp_runs_name_rank_1_once_the_collectives_say_so(cut_dir: str) -> None:
    """FSDP re-aligns the ranks at every collective: rank 1 is last in most of them.
    Cut to 4 steps it is named on the collectives' basis (a third of rank 0's step
    waited for); cut to 3, last in 65 of 114 (p = 0.16): not consistent, not named."""
    if not (H200X2 / "fsdp").is_dir():
        pytest.skip("../shared/traces/h200x2 is not there")
    four = _cut_run(str(H200X2 / "fsdp"), 4, cut_dir)
    s = four["straggler"]
    assert s is not None and s["rank"] == 1 and s["basis"] == "collectives"
    assert 0.25 < s["share_of_step"] < 0.45
    assert "communication_straggler" in [d["id"] for d in four["diagnoses"]]
    three = _cut_run(str(H200X2 / "fsdp"), 3, cut_dir)
    assert three["straggler"] is None
    per = three["straggler_test"]["per_collective"]
    assert (per["rank"], per["last_count"], per["collectives"]) == (1, 65, 114)
    assert per["p_value"] > 0.1 and not per["consistent"]
    assert "communication_straggler" not in [d["id"] for d in three["diagnoses"]]


@pytest.mark.parametrize("folder", ["ddp_default", "ddp_tuned"])
@pytest.mark.parametrize("keep", [3, 4])
def test_cut_balanced_runs_name_none(folder: str, keep: int, cut_dir: str) -> None:
    if not (H200X2 / folder).is_dir():
        pytest.skip("../shared/traces/h200x2 is not there")
    run = _cut_run(str(H200X2 / folder), keep, cut_dir)
    assert run["matched_step_count"] == keep
    assert run["straggler"] is None
    assert not run["straggler_test"]["consistent"]
    assert "communication_straggler" not in [d["id"] for d in run["diagnoses"]]


def test_check_fails_the_three_step_straggler_run(
    cut_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if not H200X2.is_dir():
        pytest.skip("../shared/traces/h200x2 is not there")
    _cut_run(str(H200X2 / "ddp_straggler"), 3, cut_dir)
    _cut_run(str(H200X2 / "ddp_default"), 3, cut_dir)
    straggler = str(Path(cut_dir) / "h200x2_ddp_straggler_3")
    balanced = str(Path(cut_dir) / "h200x2_ddp_default_3")
    args = ["--fail-on", "communication_straggler"]
    assert main(["check", straggler, straggler, *args]) == EXIT_REGRESSION
    assert "FAIL: diagnosis communication_straggler present in" in capsys.readouterr().out
    assert main(["check", balanced, balanced, *args]) == EXIT_OK
