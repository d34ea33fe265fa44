"""Run-level view across ranks: matching collectives, skew, wait, straggler; exact numbers
on tiny two-rank traces and the real two-rank pair hta_sampled_2ranks.
Real traces: ``test_run_view_real.py``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from conftest import as_json, cpu, kernel, write_trace

from tb_kineto_insights.analysis import straggler as st
from tb_kineto_insights.analysis.rules import diagnose_run
from tb_kineto_insights.analysis.run_view import run_summary
from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.schema import Summary
from tb_kineto_insights.summary import select_run_spans, summarize_file

AR = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
BC = "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"


def span_summary(path: Path) -> Summary:
    """The span's summary, as summary.py builds it (the run view reads its health,
    steps and communication panels)."""
    return summarize_file(str(path))


def rank_trace(
    tmp_path: Path,
    name: str,
    kernels: list[tuple[Any, ...]],
    rank: int | None,
    world: int = 2,
    steps: tuple[tuple[int, float, float], ...] = ((1, 0, 1000),),
) -> tuple[str, Summary]:
    events: list[dict[str, Any]] = [
        cpu(f"ProfilerStep#{n}", ts, dur, cat="user_annotation") for n, ts, dur in steps
    ]
    for i, item in enumerate(kernels):
        ev = kernel(item[0], item[1], 10, stream=20, corr=i + 1)
        if len(item) > 2:
            ev["args"].update(item[2])
        events.append(ev)
    root: dict[str, Any] = {}
    if rank is not None:
        root["distributedInfo"] = {"rank": rank, "world_size": world, "backend": "nccl"}
    path = write_trace(tmp_path / f"{name}.json", events, **root)
    return name, span_summary(path)


def test_two_ranks_known_skew_and_last_rank(tmp_path: Path) -> None:
    # rank 1 is given first: ranks come from distributedInfo, not worker order
    r1 = rank_trace(tmp_path, "w_b", [(AR, 150), (AR, 320), (AR, 490)], rank=1)
    r0 = rank_trace(tmp_path, "w_a", [(AR, 100), (AR, 300), (AR, 500)], rank=0)
    run = run_summary([r1, r0])
    json.dumps(run, allow_nan=False)
    assert run["rank_source"] == "distributed_info"
    assert run["match_key"] == "kind_step_order"
    assert [r["rank"] for r in run["ranks"]] == [0, 1]
    assert [r["worker"] for r in run["ranks"]] == ["w_a", "w_b"]
    assert run["matched_count"] == 3 and run["unmatched_count"] == 0
    assert run["skew_us"] == {
        "count": 3,
        "mean_us": pytest.approx(80 / 3),
        "median_us": 20.0,
        "p90_us": pytest.approx(44.0),
        "max_us": 50.0,
        "total_us": 80.0,
    }
    rank0, rank1 = run["ranks"]
    # skews 50 (rank 1 last), 20 (rank 1 last), 10 (rank 0 last)
    assert (rank0["last_count"], rank1["last_count"]) == (1, 2)
    assert (rank0["wait_us_total"], rank1["wait_us_total"]) == (70.0, 10.0)
    assert rank1["lateness_us_per_collective"] == pytest.approx(70 / 3)
    assert rank0["wait_us_per_collective"] == pytest.approx(70 / 3)
    assert rank0["collective_count"] == rank1["collective_count"] == 3
    assert rank0["mean_comm_us"] == 30.0
    # one step: rank 1 causes the largest delay in it (50 µs) and is 50 µs late against
    # rank 0's 10 µs, but one step has no step-to-step noise to judge it by (0 degrees
    # of freedom): no straggler, the test says why
    assert run["straggler"] is None
    test = run["straggler_test"]
    assert (test["rank"], test["last_steps"], test["tested_steps"]) == (1, 1, 1)
    assert test["lateness_excess_us_per_step"] == 40.0 and test["degrees_of_freedom"] == 0
    assert test["t_statistic"] is None and test["lateness_noise_us"] is None
    assert test["p_value_one_rank"] == 1.0
    assert test["p_value"] == 1.0 and not test["consistent"]
    assert test["delay_us_per_step"] == 50.0 and test["share_of_step"] == 0.05
    assert test["costly"] and test["verdict"] == "not consistent"
    top = run["largest_skews"][0]
    assert (top["skew_us"], top["last_rank"], top["kind"], top["step"]) == (
        50.0,
        1,
        "all_reduce",
        1,
    )
    assert top["start_offsets_us"] == {"1": 50.0, "0": 0.0}
    assert run["process_groups"] == [{"pg": "0", "ranks": [0, 1], "matched": 3, "unmatched": 0}]
    assert run["steps"] == [
        {
            "number": 1,
            "durations_us": {"1": 1000.0, "0": 1000.0},
            "spread_us": 0.0,
            "lateness_us": {"1": 50.0, "0": 10.0},
        }
    ]
    assert diagnose_run(run, []) == []
    # with a test that accepts any p the rule holds: 50 µs of a 1000 µs step
    loose = run_summary([r1, r0], Thresholds(straggler_alpha=1.0))
    assert loose["straggler"] is not None and loose["straggler"]["rank"] == 1
    # its fix, estimated: rank 0 loses 20 of its 70 µs wait on its step (50 hidden under
    # its own work), rank 1 its 50 µs delay: the job 1000 → 980 µs, a 2 % saving, under
    # the minimum impact: no diagnosis
    assert diagnose_run(loose, [], Thresholds(straggler_alpha=1.0)) == []
    low = Thresholds(straggler_alpha=1.0, min_impact_fraction=0.01)
    (d,) = as_json(diagnose_run(loose, [], low))
    assert d["id"] == "communication_straggler" and d["panel"] == "run"
    assert d["evidence"]["rank"] == 1 and d["evidence"]["delay_us_per_step"] == 50.0
    assert d["evidence"]["p_value"] == 1.0 and d["evidence"]["share_of_step"] == 0.05
    assert d["impact_fraction"] == 0.02 and d["severity"] == "low"
    p = d["prediction"]
    assert (p["method"], p["actual_step_us"], p["predicted_step_us"]) == ("estimate", 1000.0, 980.0)
    assert "rank 1" in d["recommendation"]
    costly = Thresholds(straggler_alpha=1.0, straggler_min_share_of_step=0.06)
    assert run_summary([r1, r0], costly)["straggler"] is None


def test_exact_skew_on_an_epoch_clock(tmp_path: Path) -> None:
    """Starts 3 ns apart on an epoch clock (~1.7e15 µs): a float µs cannot hold that, the
    sequence's start_ns can."""
    workers = []
    for rank, fraction in ((0, "001"), (1, "004")):
        events = [
            cpu("ProfilerStep#1", 0, 100, cat="user_annotation"),
            kernel(AR, 0, 10, stream=20),
        ]
        events[0]["ts"] = "STEP_TS"
        events[1]["ts"] = "KERNEL_TS"
        text = json.dumps(
            {"distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": events}
        )
        text = text.replace('"STEP_TS"', "1682725898094300.000")
        text = text.replace('"KERNEL_TS"', f"1682725898094377.{fraction}")
        path = write_trace(tmp_path / f"r{rank}.json", text=text)
        workers.append((path.name, span_summary(path)))
    run = run_summary(workers)
    assert run["skew_us"]["max_us"] == 0.003
    assert run["straggler"] is None and run["straggler_test"]["rank"] == 1


def test_kind_and_step_are_part_of_the_key(tmp_path: Path) -> None:
    """Without Seq, rank 1 interleaves a broadcast differently: each kind is matched with
    its own k-th occurrence in the step, not the k-th collective overall."""
    r0 = rank_trace(tmp_path, "a", [(AR, 100), (BC, 200), (AR, 300)], rank=0)
    r1 = rank_trace(tmp_path, "b", [(BC, 110), (AR, 220), (AR, 330)], rank=1)
    run = run_summary([r0, r1])
    skews = sorted((d["kind"], d["skew_us"], d["last_rank"]) for d in run["largest_skews"])
    assert skews == [("all_reduce", 30.0, 1), ("all_reduce", 120.0, 1), ("broadcast", 90.0, 0)]
    assert run["kind_mismatches"] == 0


def test_seq_matching_different_counts_and_no_distributed_info(tmp_path: Path) -> None:
    def seq(n: int) -> dict[str, Any]:
        return {
            "Collective name": "allreduce",
            "In msg nelems": 256,
            "dtype": "Float",
            "Group size": 2,
            "Process Group Name": "0",
            "Seq": n,
        }

    a = rank_trace(tmp_path, "a", [(AR, 100, seq(5)), (AR, 200, seq(6)), (AR, 300, seq(7))], None)
    b = rank_trace(
        tmp_path,
        "b",
        [(AR, 50, seq(4)), (AR, 130, seq(5)), (AR, 200, seq(6)), (AR, 301, seq(7))],
        None,
    )
    run = run_summary([a, b])
    json.dumps(run, allow_nan=False)
    assert run["rank_source"] == "worker_order"
    assert run["match_key"] == "seq"
    assert [r["rank"] for r in run["ranks"]] == [0, 1]
    assert run["matched_count"] == 3 and run["unmatched_count"] == 1
    assert sorted(d["skew_us"] for d in run["largest_skews"]) == [0.0, 1.0, 30.0]
    # the equal starts (Seq 6) have no last rank
    assert [r["last_count"] for r in run["ranks"]] == [0, 2]
    assert [r["collective_count"] for r in run["ranks"]] == [3, 4]
    assert [r["wait_us_total"] for r in run["ranks"]] == [31.0, 0.0]
    notes = " ".join(run["notes"])
    assert "no distributedInfo.rank" in notes
    assert "different numbers of collectives (rank 0: 3, rank 1: 4)" in notes
    assert "not found on every rank" in notes


def test_one_worker_and_no_workers(tmp_path: Path) -> None:
    one = run_summary([rank_trace(tmp_path, "a", [(AR, 100)], rank=0)])
    assert one["matched_count"] == 0 and one["straggler"] is None
    assert one["ranks"][0]["collective_count"] == 1
    assert any("One worker" in n for n in one["notes"])
    assert diagnose_run(one, []) == []
    none = run_summary([])
    assert none["worker_count"] == 0 and none["ranks"] == [] and none["straggler"] is None
    json.dumps(none, allow_nan=False)


def test_duplicate_ranks_fall_back_to_worker_order(tmp_path: Path) -> None:
    a = rank_trace(tmp_path, "a", [(AR, 100)], rank=0)
    b = rank_trace(tmp_path, "b", [(AR, 150)], rank=0)
    run = run_summary([a, b])
    assert run["rank_source"] == "worker_order"
    assert [r["rank"] for r in run["ranks"]] == [0, 1]
    assert any("same rank" in n for n in run["notes"])


# --- exact wait / transfer / exposure / bandwidth on a tiny pair --------------------------

MB_ARGS = {
    "Collective name": "allreduce",
    "In msg nelems": 262144,  # × 4 bytes (Float) = 1 MiB
    "Out msg nelems": 262144,
    "dtype": "Float",
    "Group size": 2,
}


def _pair(tmp_path: Path) -> list[tuple[str, Summary]]:
    """Two ranks, two steps of 1000 µs, one 1 MiB all-reduce per step.

    step 1: rank 0 [100, 300), rank 1 [150, 300): skew 50, rank 0 waits 50, transfer
    150; rank 0 runs compute [200, 260) under it, so its exposed time is [100, 200) +
    [260, 300): 50 in its wait, 90 in the transfer. step 2: both start at 1100, rank 0
    ends 1200, rank 1 at 1220: no skew, transfer 100.
    """
    out = []
    for rank, spans in ((0, ((100, 200), (1100, 100))), (1, ((150, 150), (1100, 120)))):
        events = [
            cpu("ProfilerStep#1", 0, 1000, cat="user_annotation"),
            cpu("ProfilerStep#2", 1000, 1000, cat="user_annotation"),
        ]
        for i, (ts, dur) in enumerate(spans):
            ev = kernel(AR, ts, dur, stream=20, corr=i + 1)
            ev["args"].update(MB_ARGS)
            events.append(ev)
        if rank == 0:
            events.append(kernel("gemm", 200, 60, stream=7, corr=9))
        path = write_trace(
            tmp_path / f"r{rank}.json",
            events,
            distributedInfo={"rank": rank, "world_size": 2},
        )
        out.append((f"r{rank}", span_summary(path)))
    return out


def test_exact_wait_transfer_and_exposure(tmp_path: Path) -> None:
    run = run_summary(_pair(tmp_path))
    json.dumps(run, allow_nan=False)
    assert run["matched_count"] == 2 and run["matched_step_count"] == 2
    assert run["transfer_us"]["total_us"] == 250.0
    assert sorted(d["transfer_us"] for d in run["largest_skews"]) == [100.0, 150.0]
    r0, r1 = run["ranks"]
    assert r0["wait_us_per_step"] == 25.0 and r1["wait_us_per_step"] == 0.0
    assert r0["transfer_us_per_step"] == 125.0  # (150 + 100) / 2
    assert r1["transfer_us_per_step"] == 135.0  # (150 + 120) / 2: its own end
    assert r0["exposed_wait_us_per_step"] == 25.0  # 50 / 2
    assert r0["exposed_transfer_us_per_step"] == 95.0  # (90 + 100) / 2
    assert (r1["exposed_wait_us_per_step"], r1["exposed_transfer_us_per_step"]) == (0.0, 135.0)
    # a rank's collective time = its wait + its transfer
    assert r0["wait_us_total"] + 2 * r0["transfer_us_per_step"] == 300.0
    (kind,) = run["kinds"]
    assert kind["kind"] == "all_reduce" and kind["matched_count"] == 2
    assert kind["calls_per_step"] == 1.0 and kind["median_bytes"] == 1048576.0
    assert kind["median_transfer_us"] == 125.0 and kind["transfer_us_total"] == 250.0
    # 2 MiB in 250 µs; all-reduce on 2 ranks: busbw = algbw × 2(2−1)/2
    assert kind["algbw_gbps"] == pytest.approx(2 * 1048576 / 250_000, rel=1e-12)
    assert kind["busbw_gbps"] == kind["algbw_gbps"]
    assert kind["busbw_basis"] == "matched_transfer" and kind["group_sizes"] == [2]
    # straggler test: rank 1 causes 50 µs in step 1, nothing in step 2 (median 25 µs);
    # lateness rank 0 [0, 0], rank 1 [50, 0]: excess 25, run's residual noise
    # √(4 · 12.5² / 1) = 25, pooled with the reference 50 µs (5 % of 1000 µs) on 12 df:
    # √((625 + 12 · 2500) / 13), t = 25 / that on 13 df; smallest excess 0: P(both ≥ 0)
    # = 1/4; p = 2 ranks × 2 statistics × 1/4 = 1
    test = run["straggler_test"]
    assert (test["rank"], test["last_steps"], test["tested_steps"]) == (1, 1, 2)
    assert test["lateness_excess_us_per_step"] == 25.0
    assert test["run_noise_us"] == pytest.approx(25.0)
    assert test["lateness_noise_us"] == pytest.approx(math.sqrt(30625 / 13))
    assert test["t_statistic"] == pytest.approx(25 / math.sqrt(30625 / 13))
    assert test["degrees_of_freedom"] == 13 and test["p_value_min"] == pytest.approx(0.25)
    assert test["p_value_one_rank"] == pytest.approx(0.5) and test["p_value"] == pytest.approx(1.0)
    assert test["delay_us_per_step"] == 25.0 and test["share_of_step"] == 0.025


def test_span_level_least_wait_estimate(tmp_path: Path) -> None:
    """Rank 0 alone: its fastest 1 MiB all-reduce took 100 µs, so the 200 µs one is
    estimated to have waited 100 µs at its start, where [100, 200) is exposed."""
    (_, s0), (_, s1) = _pair(tmp_path)
    comm = as_json(s0)["communication"]
    (kind,) = comm["kinds"]
    assert kind["busbw_basis"] == "least_wait_estimate"
    assert kind["busbw_gbps"] == pytest.approx(2 * 1048576 / 200_000, rel=1e-12)
    assert kind["kernel_time_busbw_gbps"] == pytest.approx(2 * 1048576 / 300_000, rel=1e-12)
    assert kind["calls_per_step"] == 1.0 and kind["median_bytes"] == 1048576.0
    assert kind["wait_estimate_us_total"] == 100.0
    assert kind["exposed_us_per_step"] == 120.0  # (140 + 100) / 2
    s1_step, s2_step = comm["steps"]
    assert (s1_step["wait_estimate_us"], s1_step["exposed_wait_estimate_us"]) == (100.0, 100.0)
    assert s1_step["exposed_transfer_estimate_us"] == 40.0
    assert (s2_step["wait_estimate_us"], s2_step["exposed_transfer_estimate_us"]) == (0.0, 100.0)
    assert comm["exposed_wait_estimate_us_per_step"] == 50.0
    assert comm["exposed_transfer_estimate_us_per_step"] == 70.0
    first = comm["sequence"][0]
    assert (first["end_ns"], first["size_bytes"], first["group_size"]) == (300_000, 1048576, 2)
    assert first["exposed_ns"] == [[0, 100_000], [160_000, 200_000]]
    assert first["exposed_us"] == 140.0


def test_least_wait_uses_larger_messages_too(tmp_path: Path) -> None:
    """A larger message of the same kind bounds a smaller one's transfer: a 1 MiB
    all-reduce of 500 µs beside a 2 MiB one of 120 µs waited at least 380 µs."""
    big = dict(MB_ARGS, **{"In msg nelems": 524288, "Out msg nelems": 524288})
    events = [cpu("ProfilerStep#1", 0, 2000, cat="user_annotation")]
    for i, (ts, dur, args) in enumerate(((0, 500, MB_ARGS), (1000, 120, big))):
        ev = kernel(AR, ts, dur, stream=20, corr=i + 1)
        ev["args"].update(args)
        events.append(ev)
    path = write_trace(tmp_path / "t.json", events, distributedInfo={"rank": 0, "world_size": 2})
    comm = as_json(span_summary(path))["communication"]
    (kind,) = comm["kinds"]
    assert kind["wait_estimate_us_total"] == 380.0
    assert kind["median_bytes"] == 1.5 * 1048576
    assert kind["algbw_gbps"] == pytest.approx(3 * 1048576 / 240_000, rel=1e-12)


@pytest.mark.parametrize(
    "k,n,p",
    [(0, 5, 0.5), (5, 5, 0.5), (3, 5, 0.5), (2, 5, 1 / 8), (6, 5, 0.5), (1, 3, 0.0), (2, 2, 1.0)],
)
def test_binomial_tail_exact(k: int, n: int, p: float) -> None:
    expected = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(max(k, 0), n + 1))
    assert st.binomial_tail(k, n, p) == pytest.approx(expected, abs=1e-15)


def test_binomial_tail_values_and_errors() -> None:
    assert st.binomial_tail(5, 5, 0.5) == 1 / 32
    assert st.binomial_tail(4, 5, 0.5) == 6 / 32
    # the log-gamma branch agrees with exact integers where both apply
    exact = sum(math.comb(2000, i) for i in range(1030, 2001)) / 2**2000
    assert st.binomial_tail(1030, 2000, 0.5) == pytest.approx(exact, rel=1e-9)
    with pytest.raises(ValueError):
        st.binomial_tail(1, 3, 1.5)
    with pytest.raises(ValueError):
        st.binomial_tail(1, -1, 0.5)


# --- B13: ranks saved under one worker name ---------------------------------------------


def test_spans_of_one_rank_over_time_stay_one_worker(tmp_path: Path) -> None:
    """A worker whose spans are one rank (schedule repeat > 1), or different ranks at
    different times, is one worker: its latest span (or span_index) is used."""
    early = rank_trace(tmp_path, "a0", [(AR, 100)], rank=0)[1]
    late_steps = ((2, 5000, 1000),)
    late = rank_trace(tmp_path, "a1", [(AR, 5100)], rank=1, steps=late_steps)[1]
    chosen, notes = select_run_spans([("w", [early, late])])
    assert [(name, s is late) for name, s in chosen] == [("w", True)] and notes == []
    chosen, _ = select_run_spans([("w", [early, late])], span_index=0)
    assert chosen[0][1] is early
    assert select_run_spans([("w", [early])], span_index=3) == ([], [])
