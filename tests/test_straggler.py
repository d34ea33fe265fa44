"""The straggler test on per-step lateness (issue 27, ``analysis/straggler.py``): exact
numbers on tiny matrices and tiny two-rank traces, fixed-seed cells of the synthetic
false-alarm benchmark, and 3- and 4-step cuts of the real h200x2 runs."""

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
from conftest import H200X2, REPO, SAMPLE_LOGS, as_json, cpu, kernel, write_trace

from tb_kineto_insights.analysis import straggler as st
from tb_kineto_insights.analysis.rules import diagnose_run
from tb_kineto_insights.analysis.run_view import run_summary
from tb_kineto_insights.cli.main import EXIT_OK, EXIT_REGRESSION, main
from tb_kineto_insights.summary import summarize_file, summarize_run

sys.path.insert(0, str(REPO / "benchmarks"))
import straggler_false_alarms as bench  # noqa: E402

AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"

# --- Student's t tail ---------------------------------------------------------------------


@pytest.mark.parametrize("t", [0.0, 0.3, 1.0, 2.5, 9.925, 40.0])
def test_student_t_tail_closed_forms(t: float) -> None:
    # df 1 (Cauchy): 1/2 − atan(t)/π; df 2: (1 − t / √(t² + 2)) / 2
    assert st.student_t_sf(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, abs=1e-15)
    assert st.student_t_sf(t, 2) == pytest.approx((1 - t / math.sqrt(t * t + 2)) / 2, abs=1e-15)
    assert st.student_t_sf(-t, 3) == pytest.approx(1.0 - st.student_t_sf(t, 3), abs=1e-15)


def test_student_t_tail_tables_and_errors() -> None:
    # two-sided 5 % / 1 % critical values of the t table
    assert st.student_t_sf(2.776, 4) == pytest.approx(0.025, abs=2e-5)
    assert st.student_t_sf(4.604, 4) == pytest.approx(0.005, abs=2e-5)
    assert st.student_t_sf(2.042, 30) == pytest.approx(0.025, abs=5e-5)
    # large df: the normal tail
    assert st.student_t_sf(3.0, 20_000) == pytest.approx(0.5 * math.erfc(3 / math.sqrt(2)))
    assert st.student_t_sf(3.0, 9_999) == pytest.approx(0.00135, rel=0.01)
    assert st.student_t_sf(math.inf, 2) == 0.0 and st.student_t_sf(-math.inf, 2) == 1.0
    with pytest.raises(ValueError):
        st.student_t_sf(1.0, 0)
    with pytest.raises(ValueError):
        st.student_t_sf(math.nan, 3)


# --- the rule's inputs ------------------------------------------------------------------


def test_step_lateness_exact() -> None:
    # 3 ranks, 4 collectives: steps 0, 0, 1 and one outside the steps (-1)
    start = np.array([[100, 130, 110], [200, 200, 260], [300, 390, 300], [0, 999, 0]])
    lateness, delay = st.step_lateness(start, np.array([0, 0, 1, -1]), 2)
    # step 0: lateness (0, 30, 10) then (0, 0, 60): max per rank; step 1: (0, 90, 0)
    assert lateness.tolist() == [[0, 0], [30, 90], [60, 0]]
    # delay: collective 0 rank 1 is last by 20 (130 − 110), collective 1 rank 2 by 60,
    # collective 2 rank 1 by 90
    assert delay.tolist() == [[0, 0], [20, 90], [60, 0]]
    # a tie for last causes no delay; a rank without a collective in a step has -1
    lateness, delay = st.step_lateness(np.array([[5, 9, 9]]), np.array([1]), 2)
    assert lateness.tolist() == [[-1, 0], [-1, 4], [-1, 4]] and not delay.any()


def test_lateness_test_by_hand() -> None:
    # 2 ranks × 3 steps: the paired t-test. d = (500, 520, 480): mean 500, sd 20,
    # t = 500 / (20 / √3) = 43.30 on 2 df; P(T ≥ t) = (1 − t / √(t² + 2)) / 2
    x = np.array([[0.0, 0.0, 0.0], [500.0, 520.0, 480.0]])
    out = st.lateness_test(x)
    t = 500 / (20 / math.sqrt(3))
    assert out["candidate"] == 1 and out["excess_us"] == 500.0 and out["df"] == 2
    assert out["t"] == pytest.approx(t)
    assert out["noise_us"] == pytest.approx(20 / math.sqrt(2))
    one = (1 - t / math.sqrt(t * t + 2)) / 2
    assert out["p_value_one_rank"] == pytest.approx(one) and out["p_value"] == pytest.approx(
        2 * one
    )
    # 3 ranks × 2 steps: excess = 70 − mean(5, 15) = 60; residuals (rank, step):
    # rank 0 (0, 10) row 5, rank 1 (20, 10) row 15, rank 2 (60, 80) row 70; columns
    # (26.67, 33.33), grand 30: residuals ±(1.67, 8.33, 6.67) → SS = 2·2·(1.67² + 8.33²
    # + 6.67²)/... computed below; df = 2 · 1
    x = np.array([[0.0, 10.0], [20.0, 10.0], [60.0, 80.0]])
    out = st.lateness_test(x)
    resid = x - x.mean(1, keepdims=True) - x.mean(0, keepdims=True) + x.mean()
    noise = math.sqrt((resid**2).sum() / 2)
    assert out["candidate"] == 2 and out["excess_us"] == pytest.approx(60.0)
    assert out["noise_us"] == pytest.approx(noise)
    assert out["t"] == pytest.approx(60.0 / (noise * math.sqrt(1 / 2 + 1 / 4)))
    assert out["p_value"] == pytest.approx(min(1.0, 3 * st.student_t_sf(out["t"], 2)))
    # the same lateness in every step: no noise, t = inf, p = 0
    perfect = st.lateness_test(np.array([[0.0, 0.0, 0.0], [700.0, 700.0, 700.0]]))
    assert perfect["t"] == math.inf and perfect["p_value"] == 0.0
    # one step or one rank: no test
    assert st.lateness_test(np.array([[0.0], [50.0]]))["p_value"] == 1.0
    assert st.lateness_test(np.array([[1.0, 2.0]]))["candidate"] is None


def test_min_excess_tail_against_student_and_normal() -> None:
    # one step: Student's t tail; the grid is within 1e-6 relative of the series
    for df in (3, 12, 14, 40, 1000):
        for m in (-1.0, 0.0, 0.5, 2.0, 3.0, 6.0):
            assert st.min_excess_sf(m, 1, df) == pytest.approx(st.student_t_sf(m, df), rel=1e-6)
    # beyond 10000 degrees of freedom the noise is known: Φ̄(m)^N
    tail = 0.5 * math.erfc(1.5 / math.sqrt(2))
    assert st.min_excess_sf(1.5, 3, 20_000) == pytest.approx(tail**3)
    # an estimated noise makes "all N at least m" likelier than with a known one
    assert st.min_excess_sf(1.5, 3, 12) > tail**3
    assert st.min_excess_sf(1.5, 3, 12) < st.min_excess_sf(1.5, 2, 12)
    assert st.min_excess_sf(math.inf, 3, 12) == 0.0 and st.min_excess_sf(-math.inf, 3, 12) == 1
    for bad in ((1.0, 0, 12), (1.0, 3, 2), (math.nan, 3, 12)):
        with pytest.raises(ValueError):
            st.min_excess_sf(*bad)


def test_lateness_test_with_reference_by_hand() -> None:
    """2 ranks × 3 steps, reference noise 50 µs on 12 degrees of freedom: d = (500, 520,
    480) µs. Run: SS = Σ (d − 500)² / 2 = 400 on 2 df; pooled σ̃² = (400 + 12 · 50²) / 14;
    t = 500 / (σ̃ √(2/3)) on 14 df; every step: m = 480 / (50 √2)."""
    x = np.array([[0.0, 0.0, 0.0], [500.0, 520.0, 480.0]])
    out = st.lateness_test(x, 50.0, 12)
    noise = math.sqrt((400 + 12 * 2500) / 14)
    t = 500 / (noise * math.sqrt(2 / 3))
    assert out["candidate"] == 1 and out["df"] == 14 and out["min_excess_us"] == 480.0
    assert out["run_noise_us"] == pytest.approx(math.sqrt(200)) and out["reference_noise_us"] == 50
    assert out["noise_us"] == pytest.approx(noise) and out["t"] == pytest.approx(t)
    assert out["p_value_mean"] == pytest.approx(st.student_t_sf(t, 14))
    assert out["p_value_min"] == pytest.approx(st.min_excess_sf(480 / (50 * math.sqrt(2)), 3, 12))
    one = 2 * min(out["p_value_mean"], out["p_value_min"])
    assert out["p_value_one_rank"] == pytest.approx(one)
    assert out["p_value"] == pytest.approx(2 * one)
    # 3 ranks: the excess is against the other two's mean, its unit σ₀ √(1 + 1/2)
    x = np.array([[0.0, 10.0, 0.0], [20.0, 0.0, 10.0], [300.0, 330.0, 280.0]])
    out = st.lateness_test(x, 100.0, 12)
    assert out["candidate"] == 2 and out["min_excess_us"] == pytest.approx(275.0)
    m = 275.0 / (100.0 * math.sqrt(1.5))
    assert out["p_value_min"] == pytest.approx(st.min_excess_sf(m, 3, 12))
    # without a usable reference: the run's noise only (df < 3 is no reference)
    assert st.lateness_test(x, 100.0, 2)["p_value_min"] is None
    assert st.lateness_test(x, None, 12)["df"] == 4
    # one step says nothing, whatever the reference
    assert st.lateness_test(np.array([[0.0], [5000.0]]), 50.0, 12)["p_value"] == 1.0


def test_every_step_statistic_names_a_steady_ten_percent_straggler() -> None:
    """10 % of a 10 ms step late in each of 3 steps with a 10 µs spread, 2 ranks,
    reference 500 µs: the mean alone stays within what two balanced ranks reach (its p
    after × 2 × 2 is above 0.01); late by at least 10 % in every step is not."""
    x = np.array([[0.0, 0.0, 0.0], [1000.0, 1010.0, 1005.0]])
    out = st.lateness_test(x, 500.0, 12)
    assert 4 * out["p_value_mean"] > 0.01
    assert out["p_value"] == pytest.approx(4 * out["p_value_min"]) and out["p_value"] < 0.01
    # a larger mean with one step not late at all: the every-step test says nothing
    uneven = st.lateness_test(np.array([[0.0, 0.0, 0.0], [1500.0, 1515.0, 0.0]]), 500.0, 12)
    # smallest excess 0: P(all 3 ≥ 0) = 1/8 whatever the noise
    assert uneven["p_value"] > 0.01 and uneven["p_value_min"] == pytest.approx(0.125)


# --- tiny two-rank traces ----------------------------------------------------------------


def _rank(tmp_path: Path, rank: int, starts: list[float]) -> tuple[str, Any]:
    """One rank: steps of 1000 µs, one all-reduce per step starting at ``starts[j]`` µs
    into step j and ending at 900 µs into it on both ranks."""
    events = []
    for j, s in enumerate(starts):
        base = 1000.0 * j
        events.append(cpu(f"ProfilerStep#{j + 1}", base, 1000, cat="user_annotation"))
        ev = kernel(AR, base + s, 900 - s, stream=20, corr=j + 1)
        ev["args"].update({"Collective name": "allreduce", "Group size": 2})
        events.append(ev)
    path = write_trace(
        tmp_path / f"r{rank}.json", events, distributedInfo={"rank": rank, "world_size": 2}
    )
    return f"r{rank}", summarize_file(str(path))


def test_three_steps_two_ranks_straggler_named(tmp_path: Path) -> None:
    """Rank 1 arrives 500, 520 and 480 µs after rank 0 in each of 3 steps of 1000 µs: the
    sign test could say at best p = 2/8; the lateness, against the reference noise of 5 %
    of the step (50 µs on 12 df) pooled with the run's, says t = 13.1 on 14 df."""
    run = run_summary([_rank(tmp_path, 0, [100, 100, 100]), _rank(tmp_path, 1, [600, 620, 580])])
    s = run["straggler"]
    assert s is not None and s["rank"] == 1
    assert s["lateness_excess_us_per_step"] == pytest.approx(500.0)
    assert s["lateness_min_excess_us"] == pytest.approx(480.0)
    assert s["delay_us_per_step"] == 500.0 and s["share_of_step"] == pytest.approx(0.5)
    test = run["straggler_test"]
    assert test["reference_noise_us"] == pytest.approx(50.0)
    assert test["reference_degrees_of_freedom"] == 12 and test["degrees_of_freedom"] == 14
    t = 500 / (math.sqrt((400 + 12 * 2500) / 14) * math.sqrt(2 / 3))
    assert test["t_statistic"] == pytest.approx(t)
    assert s["p_value"] == pytest.approx(4 * min(st.student_t_sf(t, 14), test["p_value_min"]))
    assert s["p_value"] < 1e-6
    (d,) = [d for d in as_json(diagnose_run(run, [])) if d["id"] == "communication_straggler"]
    assert d["title"].startswith("Rank 1 holds the other ranks back 500.0 µs/step (50 % of")
    assert d["evidence"]["lateness_excess_us_per_step"] == pytest.approx(500.0)


def test_three_steps_alternating_lateness_is_no_straggler(tmp_path: Path) -> None:
    """Each rank is late by 500 µs in some step (rank 1 twice): costly on the median, but
    not consistent: excess 166.7 µs against the run's step-to-step noise of 408.2 µs
    pooled with the reference's 50 µs (t = 1.27), and rank 1 500 µs early in one step
    (its smallest excess is −500 µs: the every-step test says nothing)."""
    run = run_summary([_rank(tmp_path, 0, [100, 600, 100]), _rank(tmp_path, 1, [600, 100, 600])])
    assert run["straggler"] is None
    test = run["straggler_test"]
    assert test["rank"] == 1 and test["lateness_excess_us_per_step"] == pytest.approx(500 / 3)
    assert test["run_noise_us"] == pytest.approx(math.sqrt(1e6 / 6))
    noise = math.sqrt((1e6 / 3 + 12 * 2500) / 14)
    assert test["lateness_noise_us"] == pytest.approx(noise)
    assert test["t_statistic"] == pytest.approx(500 / 3 / (noise * math.sqrt(2 / 3)))
    assert test["lateness_min_excess_us"] == pytest.approx(-500.0) and test["p_value_min"] > 0.99
    assert not test["consistent"] and test["p_value"] > 0.3
    assert test["verdict"] == "not consistent"
    assert [d["id"] for d in as_json(diagnose_run(run, []))].count("communication_straggler") == 0


# --- the synthetic false-alarm benchmark, fixed seeds ------------------------------------


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
    assert d["severity"] == "high" and d["impact_fraction"] == s["share_of_step"]
    # and why, from the cut steps alone: host time outside traced ops (the sleep)
    assert s["cause"]["class"] == "host_untraced"
    assert 17_000 < s["cause"]["us_per_step"] < 21_000
    assert "host time outside traced ops" in d["title"]


@pytest.mark.parametrize("folder", ["ddp_default", "ddp_tuned", "fsdp"])
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
