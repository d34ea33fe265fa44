"""The straggler test on per-step lateness (issue 27, ``analysis/straggler.py``): exact
numbers on tiny matrices and tiny two-rank traces, fixed-seed cells of the synthetic
false-alarm benchmark, and 3- and 4-step cuts of the real h200x2 runs.
Real traces: ``test_straggler_real.py``."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO, as_json, cpu, kernel, write_trace

from tb_kineto_insights.analysis import straggler as st
from tb_kineto_insights.analysis.rules import diagnose_run
from tb_kineto_insights.analysis.run_view import run_summary
from tb_kineto_insights.summary import summarize_file

sys.path.insert(0, str(REPO / "benchmarks"))

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


# --- per-collective stragglers (FSDP, tensor parallelism) --------------------------------


def _rank_slots(tmp_path: Path, rank: int, arrivals: list[list[float]]) -> tuple[str, Any]:
    """One rank: steps of 1000 µs with ``len(arrivals[j])`` all-reduces in step j, the
    c-th in the slot [20 c, 20 c + 18) µs, arriving ``arrivals[j][c]`` µs into its slot
    and ending at 18 µs into it on both ranks (no compute: every wait is exposed)."""
    events = []
    corr = 0
    for j, slots in enumerate(arrivals):
        base = 1000.0 * j
        events.append(cpu(f"ProfilerStep#{j + 1}", base, 1000, cat="user_annotation"))
        for c, a in enumerate(slots):
            corr += 1
            ev = kernel(AR, base + 20.0 * c + a, 18.0 - a, stream=20, corr=corr)
            ev["args"].update({"Collective name": "allreduce", "Group size": 2})
            events.append(ev)
    path = write_trace(
        tmp_path / f"r{rank}.json", events, distributedInfo={"rank": rank, "world_size": 2}
    )
    return f"r{rank}", summarize_file(str(path))


def test_rank_last_in_most_collectives_is_a_per_collective_straggler(tmp_path: Path) -> None:
    """3 steps of 8 all-reduces: rank 1 arrives 10 µs after rank 0 in 7 of each step's 8
    and rank 0 10 µs after rank 1 in the other: per step each rank is 10 µs late at its
    worst collective (per-step excess 0: no straggler there), but rank 1 is last in 21 of
    24 collectives: p = 2 · P(Bin(24, ½) ≥ 21) = 2 · 2325 / 2²⁴, in most collectives of
    all 3 steps; rank 0 waits 7 × 10 = 70 µs per step for it, all exposed: 7 % of its
    1000 µs step ≥ 5 %. The card names rank 1 with that cost; the exposed-communication
    card of rank 0 says it waits for rank 1 (the straggler)."""
    r0 = [[0.0] * 7 + [10.0]] * 3
    r1 = [[10.0] * 7 + [0.0]] * 3
    run = run_summary([_rank_slots(tmp_path, 0, r0), _rank_slots(tmp_path, 1, r1)])
    test = run["straggler_test"]
    assert test["lateness_excess_us_per_step"] == pytest.approx(0.0)
    per = test["per_collective"]
    assert (per["rank"], per["last_count"], per["collectives"]) == (1, 21, 24)
    assert per["p_value"] == pytest.approx(2 * 2325 / 2**24)
    assert per["steps_mostly_last"] == 3 and per["tested_steps"] == 3
    assert per["waited_for_us_per_step"] == pytest.approx(70.0)
    assert per["exposed_waited_for_us_per_step"] == pytest.approx(70.0)
    assert per["share_of_step"] == pytest.approx(0.07)
    s = run["straggler"]
    assert s is not None and s["rank"] == 1 and s["basis"] == "collectives"
    assert s["delay_us_per_step"] == pytest.approx(70.0)
    assert s["share_of_step"] == pytest.approx(0.07)
    ds = as_json(diagnose_run(run, []))
    (d,) = [d for d in ds if d["id"] == "communication_straggler"]
    assert d["title"].startswith(
        "Rank 1 holds the other ranks back 70.0 µs/step (7 % of their step): last in 21 "
        "of 24 collectives, the others wait 70.0 µs/step for it, 70.0 µs exposed"
    )
    assert d["evidence"]["basis"] == "collectives"


def test_per_collective_noise_and_cheap_waits_are_no_straggler(tmp_path: Path) -> None:
    """Negatives. Flipping between steps (rank 1 last in all 8 of steps 1 and 3, rank 0
    in all 8 of steps 2 and 4; 16 of 32, p = 1); consistent but cheap (rank 1 last in 7
    of 8 by 2 µs: 14 µs a step, 1.4 %); last in 110 of 160 (p ≈ 1e-6) but in most
    collectives of only 2 of 4 steps (a DDP run's late steps make a rank last in all
    their collectives): no straggler in any."""
    early, late = [0.0] * 8, [10.0] * 8
    run = run_summary(
        [
            _rank_slots(tmp_path / "a", 0, [early, late, early, late]),
            _rank_slots(tmp_path / "b", 1, [late, early, late, early]),
        ]
    )
    per = run["straggler_test"]["per_collective"]
    assert per["last_count"] == 16 and per["p_value"] == 1.0 and not per["consistent"]
    assert run["straggler"] is None
    cheap = run_summary(
        [
            _rank_slots(tmp_path / "c", 0, [[0.0] * 7 + [2.0]] * 3),
            _rank_slots(tmp_path / "d", 1, [[2.0] * 7 + [0.0]] * 3),
        ]
    )
    per = cheap["straggler_test"]["per_collective"]
    assert per["consistent"] and not per["costly"]
    assert per["share_of_step"] == pytest.approx(0.014)
    assert cheap["straggler"] is None
    r1 = [[10.0] * 40, [10.0] * 40, [10.0] * 15 + [0.0] * 25, [10.0] * 15 + [0.0] * 25]
    r0 = [[0.0] * 40, [0.0] * 40, [0.0] * 15 + [10.0] * 25, [0.0] * 15 + [10.0] * 25]
    half = run_summary([_rank_slots(tmp_path / "e", 0, r0), _rank_slots(tmp_path / "f", 1, r1)])
    per = half["straggler_test"]["per_collective"]
    assert per["last_count"] == 110 and per["p_value"] < 1e-5
    assert per["steps_mostly_last"] == 2 and not per["consistent"]
    assert half["straggler"] is None
    for view in (run, cheap, half):
        assert "communication_straggler" not in {d["id"] for d in as_json(diagnose_run(view, []))}
