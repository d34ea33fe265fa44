"""The tests of ``test_diff_comm.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from conftest import as_json
from test_diff_comm import _rows

from tb_kineto_insights.compare.before_after import compare, diff_text, load_side


def test_ddp_default_vs_tuned(h200x2: Path) -> None:
    """ddp_default (bucket_cap_mb=25) → ddp_tuned (100 MB, gradient_as_bucket_view): the
    rows say what changed, checked against recording_info.json and an independent
    recount of the wait from the collective sequences."""
    before, after = h200x2 / "ddp_default", h200x2 / "ddp_tuned"
    base, exp = load_side(str(before)), load_side(str(after))
    diffed = compare(base, exp)
    doc = as_json(diffed)
    r = _rows(doc["metrics"])
    truth = [json.loads((p / "recording_info.json").read_text()) for p in (before, after)]
    ddp = [t["ranks"]["rank0"]["ddp"] for t in truth]
    calls = r["communication.calls_per_step.all_reduce"]
    assert (calls["base"], calls["exp"]) == (13.0, 4.0)
    assert (ddp[0]["num_buckets_reduced"], ddp[1]["num_buckets_reduced"]) == (13, 4)
    assert calls["verdict"] == "changed"
    buckets = doc["communication"]["ddp_buckets"]
    for side, info in zip(("base", "exp"), ddp, strict=True):
        listed = {int(x) for x in info["rebuilt_bucket_sizes"].split(",")}
        assert {x["bytes"] for x in buckets[side]["sizes"]} == listed
    assert buckets["base"]["count_per_step"] == 13.0 and buckets["exp"]["count_per_step"] == 4.0
    assert r["communication.ddp_bucket_median_bytes"]["base"] == 33583104
    busbw = r["communication.busbw.all_reduce_gbps"]
    assert busbw["unit"] == "GB/s"
    assert busbw["basis"] == {"base": "matched_transfer", "exp": "matched_transfer"}
    assert busbw["label"] == "busbw all_reduce (matched transfer)"
    # independently: bytes / (earliest end - latest start) per matched all-reduce, median
    # (n = 2: busbw = algbw); the issue measured ~244-270 GB/s, a change of about +11 %
    for key, side in (("base", base), ("exp", exp)):
        seqs = [as_json(s.communication.sequence) for _, s in side.summaries]
        rates, transfer_us = [], 0.0
        for a, b in zip(*seqs, strict=True):
            start = max(a["start_ns"], b["start_ns"])
            end = min(a["start_ns"] + a["dur_us"] * 1000, b["start_ns"] + b["dur_us"] * 1000)
            rates.append(a["bytes"] / (end - start))  # bytes per ns = GB/s
            transfer_us += (end - start) / 1000
        assert busbw[key] == pytest.approx(statistics.median(rates), rel=0.05), key
        transfer = r["communication.transfer_us_per_step"]
        assert transfer[key] == pytest.approx(transfer_us / 5, rel=0.10), key  # 5 steps
    assert 230 < busbw["base"] < 255 and 255 < busbw["exp"] < 285
    assert busbw["change_fraction"] == pytest.approx(0.11, abs=0.03)
    assert busbw["verdict"] == "improved"
    text = diff_text(diffed)
    line = next(x for x in text.splitlines() if x.strip().startswith("busbw all_reduce"))
    assert line.count("GB/s") == 2
    assert "all_reduce calls /step" in text and "13.0 ->          4.0" in text
    # the NCCL kernel is listed apart, not judged, and is not among the largest changes
    comm_kernels = doc["kernels"]["communication"]
    assert [k["name"] for k in comm_kernels] == ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
    assert comm_kernels[0]["time_us_per_step"]["verdict"] == "not judged"
    judged = doc["kernels"]["changed"] + doc["kernels"]["added"] + doc["kernels"]["removed"]
    assert not any("nccl" in k["name"].lower() for k in judged)
    assert not any("nccl" in c["name"].lower() for c in doc["largest_changes"])
    # waited /step: latest start − this rank's start, per matched collective, per step
    for key, side in (("base", base), ("exp", exp)):
        seqs = [as_json(s.communication.sequence) for _, s in side.summaries]
        waits = [0.0, 0.0]
        for a, b in zip(*seqs, strict=True):
            assert (a["step"], a["kind"]) == (b["step"], b["kind"])
            hi = max(a["start_ns"], b["start_ns"])
            waits[0] += (hi - a["start_ns"]) / 1000
            waits[1] += (hi - b["start_ns"]) / 1000
        expected = sum(waits) / 2 / 5  # mean over ranks, 5 steps
        assert r["communication.waited_us_per_step"][key] == pytest.approx(expected, rel=0.10)
    waited = r["communication.waited_us_per_step"]
    assert 4000 < waited["base"] < 6000 and 400 < waited["exp"] < 1000
    assert waited["verdict"] == "improved"


def test_ranks_saved_under_one_worker_name(shared_cases: Path) -> None:
    """B13: both ranks' files under one worker prefix (distributedInfo.rank 0 and 1);
    rank 1 is 300 µs late on 2 of the 4 steps, so rank 0 waited 600 µs in total, 150 µs
    /step, and rank 1 nothing. The diff sees two ranks, not one worker."""
    side = load_side(str(shared_cases / "B13_same_worker_prefix_all_ranks"))
    assert len({label.partition("/")[0] for label, _ in side.summaries}) == 1
    doc = as_json(compare(side, side))
    assert doc["communication"]["rank_rows_from"] == "run_view"
    waited = _rows(doc["metrics"])["communication.waited_us_per_step"]
    assert waited["by_rank"]["base"] == pytest.approx({"0": 150.0, "1": 0.0}, abs=0.5)
    assert (waited["base"], waited["verdict"]) == (pytest.approx(75.0, abs=0.5), "unchanged")
