"""The tests of ``test_run_view.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

import functools
import gzip
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import H200X2, as_json
from msgspec.structs import replace
from test_run_view import span_summary

from tb_kineto_insights.analysis import straggler as st
from tb_kineto_insights.analysis.rules import diagnose_run
from tb_kineto_insights.analysis.run_view import run_summary
from tb_kineto_insights.cli.main import build_report, write_text
from tb_kineto_insights.schema import Summary
from tb_kineto_insights.summary import select_run_spans, summarize_file, summarize_run


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
    # the largest delay in one of them, and its lateness is not consistent over the two
    assert run["straggler"] is None
    test = run["straggler_test"]
    assert (test["rank"], test["last_count"], test["matched_count"]) == (1, 8, 10)
    assert (test["last_steps"], test["tested_steps"]) == (1, 2)
    # 2 ranks: the paired differences d of the per-step lateness against the run's noise
    # (1 df) pooled with the reference (5 % of the mean step, 12 df), by hand
    late = np.array([[s["lateness_us"][r] for s in run["steps"]] for r in ("0", "1")])
    d = late[1] - late[0]
    ref = 0.05 * np.mean([r["mean_step_us"] for r in run["ranks"]])
    assert test["reference_noise_us"] == pytest.approx(ref)
    assert test["run_noise_us"] == pytest.approx(d.std(ddof=1) / math.sqrt(2))
    noise = math.sqrt(((d - d.mean()) ** 2).sum() / 2 + 12 * ref**2) / math.sqrt(13)
    t = d.mean() / noise
    assert test["lateness_excess_us_per_step"] == pytest.approx(d.mean())
    assert test["lateness_noise_us"] == pytest.approx(noise)
    assert test["t_statistic"] == pytest.approx(t) and test["degrees_of_freedom"] == 13
    p_min = st.min_excess_sf(d.min() / (ref * math.sqrt(2)), 2, 12)
    assert test["p_value_mean"] == pytest.approx(st.student_t_sf(t, 13))
    assert test["p_value_min"] == pytest.approx(p_min)
    one = min(1.0, 2 * min(test["p_value_mean"], p_min))
    assert test["p_value_one_rank"] == pytest.approx(one)
    assert test["p_value"] == pytest.approx(min(1.0, 2 * one)) and test["p_value"] > 0.3
    assert test["verdict"] == "not consistent"
    found = as_json(diagnose_run(run, []))
    assert "communication_straggler" not in [d["id"] for d in found]
    # 2 of 128 ranks: what looks like transfer may be waiting for the ranks not profiled
    exposed = [d for d in found if d["id"] == "exposed_communication"]
    assert sorted(d["evidence"]["rank"] for d in exposed) == [0, 1]
    assert all("126 ranks not profiled" in d["title"] for d in exposed)
    assert any("transfer includes any wait for the ranks not profiled" in n for n in run["notes"])


@functools.cache
def _real(folder: str) -> tuple[tuple[str, Summary], ...]:
    """(worker, full span summary) of each rank of an h200x2 run, rank order."""
    paths = sorted((H200X2 / folder).glob("rank*.pt.trace.json.gz"))
    return tuple((p.name.split(".")[0], summarize_file(str(p))) for p in paths)


def _real_run(folder: str) -> dict[str, Any]:
    """The run view of an h200x2 run, as the JSON a user sees."""
    return as_json(summarize_run(list(_real(folder))))


def _raw_nccl(folder: Path) -> list[list[dict[str, Any]]]:
    """Per rank, its NCCL kernels in time order, read with plain gzip + json."""
    out = []
    for path in sorted(folder.glob("rank*.pt.trace.json.gz")):
        with gzip.open(path) as f:
            events = json.load(f)["traceEvents"]
        kernels = [e for e in events if e.get("cat") == "kernel" and "nccl" in e["name"].lower()]
        out.append(sorted(kernels, key=lambda e: e["ts"]))
    return out


def _independent_busbw(folder: Path) -> dict[str, float]:
    """busbw per collective name from the matched transfer, computed here: the k-th NCCL
    kernel of a name on each rank is the same collective; size = max(in, out) nelems ×
    4 (every collective here is Float); busbw = Σ size / Σ (earliest end − latest start)
    × nccl-tests factor for 2 ranks (all-reduce 1, all-gather / reduce-scatter 1/2)."""
    ranks = _raw_nccl(folder)
    names = {e["args"]["Collective name"] for e in ranks[0]}
    factor = {"allreduce": 1.0, "_allgather_base": 0.5, "_reduce_scatter_base": 0.5}
    out = {}
    for name in names:
        per_rank = [[e for e in r if e["args"]["Collective name"] == name] for r in ranks]
        assert len({len(r) for r in per_rank}) == 1
        size = transfer = 0.0
        for same in zip(*per_rank, strict=True):
            a = same[0]["args"]
            latest = max(e["ts"] for e in same)
            earliest_end = min(e["ts"] + e["dur"] for e in same)
            size += max(a["In msg nelems"], a["Out msg nelems"]) * 4
            transfer += max(0.0, earliest_end - latest)
        out[name] = size / (transfer * 1000.0) * factor[name]
    return out


_KIND = {"allreduce": "all_reduce", "_allgather_base": "all_gather"}
_KIND["_reduce_scatter_base"] = "reduce_scatter"


@pytest.mark.parametrize("folder", ["ddp_default", "ddp_tuned", "ddp_straggler", "fsdp"])
def test_busbw_from_the_matched_transfer(h200x2: Path, folder: str) -> None:
    expected = _independent_busbw(h200x2 / folder)
    run = _real_run(folder)
    kinds = {k["kind"]: k for k in run["kinds"]}
    assert set(kinds) == {_KIND[name] for name in expected}
    for name, value in expected.items():
        k = kinds[_KIND[name]]
        assert k["busbw_basis"] == "matched_transfer"
        assert k["busbw_gbps"] == pytest.approx(value, rel=0.2)
        # measured: 242 (ddp_default), 269 (ddp_tuned), 227 / 219 (fsdp) GB/s; not the
        # 55-63 GB/s of bytes over one rank's kernel time
        assert 150 < k["busbw_gbps"] < 400
    # span level, each rank alone: the least-wait estimate, within 20 % of it too, except
    # on a rank that waits in every collective (ddp_straggler rank 0, whose fastest
    # all-reduce still waited ~0.8 ms: only the view across ranks can see that)
    for worker, summary in _real(folder):
        span_kinds = {k.kind: k for k in summary.communication.kinds}
        for name, value in expected.items():
            sk = span_kinds[_KIND[name]]
            assert sk.busbw_basis == "least_wait_estimate" and sk.busbw_gbps is not None
            if folder == "ddp_straggler" and worker == "rank0":
                assert sk.busbw_gbps < 0.5 * value
            else:
                assert sk.busbw_gbps == pytest.approx(value, rel=0.2)


def test_calls_per_step_and_bytes(h200x2: Path) -> None:
    default, tuned = _real_run("ddp_default"), _real_run("ddp_tuned")
    (d,), (t,) = default["kinds"], tuned["kinds"]
    assert (d["calls_per_step"], t["calls_per_step"]) == (13.0, 4.0)
    info = json.loads((h200x2 / "ddp_default" / "recording_info.json").read_text())
    buckets = [int(x) for x in info["ranks"]["rank0"]["ddp"]["rebuilt_bucket_sizes"].split(",")]
    assert d["median_bytes"] == float(np.median(buckets)) == 33583104.0
    assert d["total_bytes"] == 5 * sum(buckets)
    fsdp = {k["kind"]: k for k in _real_run("fsdp")["kinds"]}
    assert (fsdp["all_gather"]["calls_per_step"], fsdp["reduce_scatter"]["calls_per_step"]) == (
        25.0,
        13.0,
    )


def test_straggler_found_with_its_cost(h200x2: Path) -> None:
    info = json.loads((h200x2 / "ddp_straggler" / "recording_info.json").read_text())
    injected_us = float(np.mean(info["straggler"]["extra_ms_measured"])) * 1000.0
    run = _real_run("ddp_straggler")
    s = run["straggler"]
    assert s is not None and s["rank"] == info["straggler"]["rank"] == 1
    # measured 19.56 ms/step against 20.09 ms of sleep
    assert s["delay_us_per_step"] == pytest.approx(injected_us, rel=0.25)
    assert (s["last_steps"], s["tested_steps"]) == (5, 5)
    # 19.9 ms/step later than rank 0 with 0.67 ms of step-to-step noise, pooled with the
    # reference 1.92 ms (5 % of the step) on 16 df: t = 18.5 (the sign test could only
    # say 2/32); late by at least 18.7 ms in every step
    assert s["lateness_excess_us_per_step"] == pytest.approx(injected_us, rel=0.1)
    assert s["lateness_min_excess_us"] > 0.9 * injected_us
    test = run["straggler_test"]
    assert test["run_noise_us"] < 1000.0 and 1000.0 < s["lateness_noise_us"] < 2000.0
    assert s["p_value"] < 1e-9
    assert 0.4 < s["share_of_step"] < 0.6
    (d,) = [d for d in run["diagnoses"] if d["id"] == "communication_straggler"]
    # its impact is the fix's estimate (rank 0 without its exposed wait, rank 1 without
    # its delay): 38.4 → 25.5 ms, where the balanced run measures 23.5
    # (benchmarks/what_if_pairs.py); the share of step is what the others lose to it
    p = d["prediction"]
    assert p["method"] == "estimate" and d["impact_fraction"] == p["saving_fraction"]
    assert 0.3 < d["impact_fraction"] < 0.4 and d["severity"] == "high"
    for key in ("rank", "delay_us_per_step", "share_of_step", "p_value"):
        assert d["evidence"][key] == s[key]
    assert "ms/step" in d["title"] and "Rank 1" in d["title"]


@pytest.mark.parametrize("folder", ["ddp_default", "ddp_tuned"])
def test_no_straggler_on_balanced_runs(h200x2: Path, folder: str) -> None:
    run = _real_run(folder)
    assert run["straggler"] is None
    assert "communication_straggler" not in [d["id"] for d in run["diagnoses"]]
    test = run["straggler_test"]
    # measured: the best candidate is 0.34-1.7 ms/step later than the other, within a
    # step-to-step noise of 0.7-1.8 ms (p >= 0.15 with the reference), and costs the
    # others 0.15-3.1 ms/step (under 5 % of their step)
    assert not test["consistent"] and test["p_value"] > 0.1
    assert not test["costly"] and test["share_of_step"] < 0.05
    # per collective: ddp_default's ranks flip between steps (rank 0 last in 33 of 65,
    # p = 1); ddp_tuned's rank 1 is last in 16 of 20 but the exposed wait for it is
    # 0.16 ms/step (0.9 %)
    per = test["per_collective"]
    assert test["basis"] == "steps"
    assert not (per["consistent"] and per["costly"])
    assert per["share_of_step"] < 0.03


def test_fsdp_per_collective_straggler(h200x2: Path) -> None:
    """FSDP: the ranks re-align at every collective, so rank 1 is only 1.7 ms/step later
    per step (within the noise), but it is last in 141 of 190 collectives (in most of
    them in 4 of 5 steps): rank 0 waits 46.3 ms/step for it, 31.7 ms/step exposed (40 %
    of its 80 ms step); its cause is CPU ops before the collectives it is late to. The
    exposed-communication card of rank 0 tells the same wait."""
    run = _real_run("fsdp")
    test = run["straggler_test"]
    assert test["p_value"] > 0.1  # the per-step test: within the noise
    s = run["straggler"]
    assert s is not None and s["rank"] == 1 and s["basis"] == "collectives"
    per = s["per_collective"]
    assert (per["last_count"], per["collectives"], per["steps_mostly_last"]) == (141, 190, 4)
    assert per["p_value"] < 1e-9
    assert 44_000 <= per["waited_for_us_per_step"] <= 48_000
    assert 30_000 <= s["delay_us_per_step"] <= 33_000
    assert 0.35 <= s["share_of_step"] <= 0.45
    assert s["cause"]["class"] == "cpu_ops" and s["cause"]["us_per_step"] > 20_000
    (d,) = [d for d in run["diagnoses"] if d["id"] == "communication_straggler"]
    assert d["evidence"]["rank"] == 1 and "last in 141 of 190 collectives" in d["title"]
    assert "CPU ops" in d["title"]
    exposed = {
        d["evidence"]["rank"]: d for d in run["diagnoses"] if d["id"] == "exposed_communication"
    }
    assert "waiting for rank 1 (the straggler)" in exposed[0]["title"]
    rank0 = run["ranks"][0]
    assert rank0["exposed_wait_us_per_step"] == pytest.approx(s["delay_us_per_step"], rel=0.01)


def test_waiting_rank_is_not_told_to_tune_buckets(h200x2: Path) -> None:
    run = _real_run("ddp_straggler")
    rank0 = run["ranks"][0]
    # rank 0 waits for rank 1: 12.8 of its 14.4 ms/step of exposed communication
    assert rank0["exposed_wait_us_per_step"] > 0.8 * rank0["mean_exposed_us"]
    assert rank0["exposed_wait_us_per_step"] + rank0["exposed_transfer_us_per_step"] == (
        pytest.approx(rank0["mean_exposed_us"], rel=0.01)
    )
    (d,) = [d for d in run["diagnoses"] if d["id"] == "exposed_communication"]
    assert d["evidence"]["rank"] == 0 and d["evidence"]["straggler_rank"] == 1
    assert "waiting for rank 1" in d["title"]
    assert "bucket_cap_mb" not in d["recommendation"]
    assert "not slow communication" in d["recommendation"]
    assert d["impact_fraction"] == pytest.approx(rank0["exposed_wait_us_per_step"] / 38359.7, 1e-3)
    # rank 1's own untraced host work is the straggler's cause: its card says it
    assert run["superseded_span_diagnoses"] == [
        {"worker": "rank0", "rank": 0, "id": "exposed_communication"},
        {"worker": "rank1", "rank": 1, "id": "gpu_idle_host_untraced"},
    ]


def test_report_text_has_no_bucket_advice_for_the_waiting_rank(h200x2: Path) -> None:
    buf = io.StringIO()
    write_text(build_report(str(h200x2 / "ddp_straggler")), buf)
    text = buf.getvalue()
    assert "bucket_cap_mb" not in text
    assert "waiting for rank 1 (the straggler)" in text
    assert "straggler: rank 1, costs the others 19.56 ms/step" in text
    # issue 17 §10: sizes in IEC units, as the tab writes them (33.6e6 B = 32.0 MiB)
    assert "all_reduce: 13.0 calls/step, 32.0 MiB per collective (median)" in text
    assert "busbw 241.6 GB/s" in text


def test_fsdp_waiting_is_seen_from_one_trace_too(h200x2: Path) -> None:
    """FSDP: both ranks spin in all-gathers issued before the peer; the span-level
    estimate (one trace alone) and the exact split agree that the exposed time is wait."""
    run = _real_run("fsdp")
    for (_, summary), row in zip(_real("fsdp"), run["ranks"], strict=True):
        estimate = summary.communication.exposed_wait_estimate_us_per_step
        assert estimate == pytest.approx(row["exposed_wait_us_per_step"], rel=0.1)
        (span_d,) = [d for d in summary.diagnoses if d.id == "exposed_communication"]
        assert "mostly waiting for other ranks" in span_d.title
        assert "bucket_cap_mb" not in span_d.recommendation
    # across ranks, rank 0 is told it waits for rank 1, the per-collective straggler;
    # rank 1 that its own wait is in the collectives it reached first
    by_rank = {
        d["evidence"]["rank"]: d for d in run["diagnoses"] if d["id"] == "exposed_communication"
    }
    assert by_rank[0]["title"].endswith("waiting for rank 1 (the straggler)")
    assert "in the collectives it reached first (rank 1 is the straggler" in by_rank[1]["title"]


# --- synthetic runs of many ranks, built from a real rank -------------------------------


def _synthetic(
    base: Summary, n: int, rng: np.random.Generator, late_rank: int | None, late_us: float
) -> list[tuple[str, Summary]]:
    """``n`` ranks that replay ``base``'s collectives (ddp_tuned rank 0: 4 all-reduces in
    each of 5 steps). Each rank arrives at each collective with its own random jitter
    (exponential, mean 300 µs: heavier than measured between the two real ranks); every
    rank's kernel ends 150 µs after the last arrival, all of it exposed (nothing else
    runs while a rank waits). ``late_rank`` arrives ``late_us`` later at every
    collective (a rank that is late every step)."""
    seq = [e for e in base.communication.sequence if e.step is not None]
    starts = np.array([e.start_ns for e in seq], dtype=np.int64)
    arrive = starts[None, :] + (rng.exponential(300_000.0, size=(n, len(seq)))).astype(np.int64)
    if late_rank is not None:
        arrive[late_rank] += int(late_us * 1000)
    ends = arrive.max(axis=0) + 150_000
    workers = []
    for r in range(n):
        sequence = [
            replace(
                e,
                start_ns=int(arrive[r, j]),
                end_ns=int(ends[j]),
                group_size=n,
                exposed_us=(int(ends[j]) - int(arrive[r, j])) / 1000.0,
                exposed_ns=None,
            )
            for j, e in enumerate(seq)
        ]
        health = replace(base.health, distributed_info={"rank": r, "world_size": n})
        comm = replace(
            base.communication,
            sequence=sequence,
            seq_source="order",
            collective_count=len(sequence),
            mean_exposed_us=0.0,
        )
        workers.append((f"w{r}", replace(base, health=health, communication=comm)))
    return workers


@pytest.mark.parametrize("n", [8, 64])
def test_synthetic_runs_of_many_ranks(h200x2: Path, n: int) -> None:
    base = dict(_real("ddp_tuned"))["rank0"]
    step_us = base.steps.mean_step_us  # 18.1 ms
    rng = np.random.default_rng(11 + n)
    for _ in range(200):  # jitter only: never a straggler
        run = run_summary(_synthetic(base, n, rng, None, 0.0))
        assert run["matched_count"] == 20 and run["straggler"] is None
        assert run["straggler_test"]["ranks_tested"] == n
        assert diagnose_run(run, []) == []
    for trial in range(200):  # one rank 5 ms late in every collective: found, right rank
        late = trial % n
        run = run_summary(_synthetic(base, n, rng, late, 5000.0))
        s = run["straggler"]
        assert s is not None and s["rank"] == late
        assert s["delay_us_per_step"] == pytest.approx(5000.0, abs=3000.0)
        assert s["share_of_step"] == pytest.approx(s["delay_us_per_step"] / step_us, rel=1e-9)
        (d,) = as_json(diagnose_run(run, []))
        assert d["id"] == "communication_straggler" and d["evidence"]["rank"] == late


# --- B13: ranks saved under one worker name ---------------------------------------------


def test_ranks_under_one_worker_name_are_split(shared_cases: Path) -> None:
    folder = shared_cases / "B13_same_worker_prefix_all_ranks"
    spans = [summarize_file(str(p)) for p in sorted(folder.glob("*.pt.trace.json"))]
    chosen, notes = select_run_spans([("r0-2025-3-14-14-46", spans)])
    assert [name for name, _ in chosen] == [
        "r0-2025-3-14-14-46 (rank 0)",
        "r0-2025-3-14-14-46 (rank 1)",
    ]
    assert "holds spans of ranks 0, 1 in the same time window" in notes[0]
    run = as_json(summarize_run(chosen))
    assert [r["rank"] for r in run["ranks"]] == [0, 1] and run["rank_source"] == "distributed_info"
    # 4 all-reduces with Seq; rank 1 is 300 µs late in 2 of the 4 steps
    assert run["match_key"] == "seq" and run["matched_count"] == 4
    assert sorted(d["skew_us"] for d in run["largest_skews"]) == [0.0, 0.0, 300.0, 300.0]
    assert run["straggler"] is None and run["straggler_test"]["rank"] == 1
    # the CLI builds its view through the same function
    report = build_report(str(folder))
    view = as_json(report.runs[0].run_summary)
    assert view["worker_count"] == 2 and view["matched_count"] == 4
    assert any("each rank is treated as its own worker" in n for n in view["notes"])
