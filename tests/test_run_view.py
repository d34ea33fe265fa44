"""Run-level view across ranks: matching collectives, skew, wait, straggler; exact numbers
on tiny two-rank traces and the real two-rank pair hta_sampled_2ranks."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import cpu, kernel, write_trace

from tb_kineto_insights.analysis.communication import communication_summary
from tb_kineto_insights.analysis.context import build_index
from tb_kineto_insights.analysis.overview import steps_summary
from tb_kineto_insights.analysis.run_view import run_diagnoses, run_summary
from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.trace.reader import read_trace

AR = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
BC = "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"


def span_summary(path: Path) -> dict[str, Any]:
    """The panels the run view reads, as summary.py builds them."""
    trace = read_trace(str(path))
    index = build_index(trace)
    return {
        "health": trace.health.to_dict(),
        "steps": steps_summary(index),
        "communication": communication_summary(index),
    }


def rank_trace(
    tmp_path: Path,
    name: str,
    kernels: list[tuple[Any, ...]],
    rank: int | None,
    world: int = 2,
    steps: tuple[tuple[int, float, float], ...] = ((1, 0, 1000),),
) -> tuple[str, dict[str, Any]]:
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
    # one step: rank 1 causes the largest delay in it (50 µs), but one step cannot show
    # consistency (p = 0.5 for 2 ranks): no straggler, the test says why
    assert run["straggler"] is None
    test = run["straggler_test"]
    assert (test["rank"], test["last_steps"], test["tested_steps"]) == (1, 1, 1)
    assert test["p_value"] == 0.5 and test["p0"] == 0.5 and not test["consistent"]
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
        {"number": 1, "durations_us": {"1": 1000.0, "0": 1000.0}, "spread_us": 0.0}
    ]
    assert run_diagnoses(run) == []
    # with a test that accepts p = 0.5 the rule holds: 50 µs of a 1000 µs step
    loose = run_summary([r1, r0], Thresholds(straggler_alpha=0.5))
    assert loose["straggler"] is not None and loose["straggler"]["rank"] == 1
    (d,) = run_diagnoses(loose, Thresholds(straggler_alpha=0.5))
    assert d["id"] == "communication_straggler" and d["panel"] == "run"
    assert d["evidence"]["rank"] == 1 and d["evidence"]["delay_us_per_step"] == 50.0
    assert d["evidence"]["p_value"] == 0.5 and d["evidence"]["share_of_step"] == 0.05
    assert d["impact_fraction"] == 0.05 and d["severity"] == "low"
    assert "rank 1" in d["recommendation"]
    costly = Thresholds(straggler_alpha=0.5, straggler_min_share_of_step=0.06)
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
    assert run_diagnoses(one) == []
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


def test_hta_sampled_2ranks(shared_traces: Path) -> None:
    folder = shared_traces / "hta_sampled_2ranks"
    paths = [folder / "sampled_rank-0.json.gz", folder / "sampled_rank-1.json.gz"]
    run = run_summary([(p.name, span_summary(p)) for p in paths])
    json.dumps(run, allow_nan=False)
    assert run["world_size"] == 128 and run["worker_count"] == 2
    assert [r["rank"] for r in run["ranks"]] == [0, 1]
    assert [r["collective_count"] for r in run["ranks"]] == [10, 10]
    assert run["matched_count"] == 10 and run["unmatched_count"] == 0
    assert run["kind_mismatches"] == 0
    assert any("Only 2 of 128 ranks" in n for n in run["notes"])
    assert [s["number"] for s in run["steps"]] == [551, 552]

    # independently from the raw files: the NCCL kernels in time order; the first one
    # (an all_to_all) and the fifth (step 551's all_gather) are the same call on both ranks
    raw = []
    for p in paths:
        with gzip.open(p) as f:
            events = json.load(f)["traceEvents"]
        raw.append(
            sorted(e["ts"] for e in events if e.get("cat") == "kernel" and "nccl" in e["name"])
        )
    by_key = {(d["kind"], d["step"], d["seq"]): d for d in run["largest_skews"]}
    first = by_key[("all_to_all", 551, 0)]
    assert first["skew_us"] == pytest.approx(raw[1][0] - raw[0][0]) == 35534.0
    assert first["last_rank"] == 1
    gather = by_key[("all_gather", 551, 4)]
    assert gather["skew_us"] == pytest.approx(raw[1][4] - raw[0][4]) == 84.0

    assert run["skew_us"]["count"] == 10
    assert run["skew_us"]["max_us"] == 231074.0
    # rank 1 is last in 8 of 10 collectives, but they fall in 2 steps: each rank causes
    # the largest delay in one of them, and 2 steps cannot show consistency anyway
    assert run["straggler"] is None
    test = run["straggler_test"]
    assert (test["rank"], test["last_count"], test["matched_count"]) == (1, 8, 10)
    assert (test["last_steps"], test["tested_steps"]) == (1, 2)
    assert test["p_value"] == 0.75 and test["verdict"] == "not consistent"
    assert "communication_straggler" not in [d["id"] for d in run_diagnoses(run)]
