"""Step windows, step breakdown, idle gaps and diagnoses: exact numbers on tiny traces.

The main tiny trace (times in µs, one GPU, main thread pid 100 / tid 1):

step 1 [0, 100): DataLoader [0, 30); aten::conv [30, 50) launching K1 [40, 60) on
stream 7 and K2 [50, 70) on stream 8 (overlapping streams); Optimizer.step [70, 90)
launching K3 [80, 85).
step 2 [100, 200): aten::mm [100, 110) launching K5 [110, 140); aten::item [115, 145)
with cudaStreamSynchronize [118, 142); K6 [155, 165) launched at [150, 152).
K7 [300, 305) launched at [250, 252): outside every step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import cpu, kernel, write_trace

from tb_kineto_insights.analysis.context import build_index
from tb_kineto_insights.analysis.diagnoses import diagnose
from tb_kineto_insights.analysis.idle import CAUSES, idle_summary
from tb_kineto_insights.analysis.overview import steps_summary
from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.trace.reader import read_trace


def launch(ts: float, dur: float, corr: int, name: str = "cudaLaunchKernel") -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": 100,
        "tid": 1,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr},
    }


def step(n: int, ts: float, dur: float) -> dict[str, Any]:
    return cpu(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")


DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
MAIN_EVENTS = [
    step(1, 0, 100),
    cpu(
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 30, cat="user_annotation"
    ),
    cpu("aten::conv2d", 30, 20),
    launch(32, 3, 1),
    launch(36, 2, 2),
    kernel("K1", 40, 20, stream=7, corr=1),
    kernel("K2", 50, 20, stream=8, corr=2),
    cpu("Optimizer.step#SGD.step", 70, 20, cat="user_annotation"),
    launch(72, 2, 3),
    kernel("K3", 80, 5, corr=3),
    step(2, 100, 100),
    cpu("aten::mm", 100, 10),
    launch(102, 2, 4),
    launch(105, 2, 5),
    kernel("K5", 110, 30, corr=5),
    cpu("aten::item", 115, 30),
    launch(118, 24, 99, name="cudaStreamSynchronize"),
    launch(150, 2, 6),
    kernel("K6", 155, 10, corr=6),
    launch(250, 2, 7),
    kernel("K7", 300, 5, corr=7),
]


@pytest.fixture
def main_index(tmp_path: Path):  # type: ignore[no-untyped-def]
    return build_index(read_trace(str(write_trace(tmp_path / "w.1.pt.trace.json", MAIN_EVENTS))))


def test_step_windows(main_index) -> None:  # type: ignore[no-untyped-def]
    s = main_index.steps
    assert s.number.tolist() == [1, 2]
    assert s.start_ns.tolist() == [0, 100_000]
    assert s.end_ns.tolist() == [100_000, 200_000]
    assert s.has_markers


def test_step_window_extends_to_gpu_end_and_tiles(tmp_path: Path) -> None:
    events = [
        step(1, 0, 100),
        launch(10, 2, 1),
        kernel("long", 90, 40, corr=1),  # launched in step 1, ends at 130
        step(2, 100, 100),
        launch(150, 2, 2),
        kernel("late", 190, 30, corr=2),  # ends at 220
    ]
    idx = build_index(read_trace(str(write_trace(tmp_path / "t.json", events))))
    assert idx.steps.cpu_end_ns.tolist() == [100_000, 200_000]
    assert idx.steps.start_ns.tolist() == [0, 130_000]
    assert idx.steps.end_ns.tolist() == [130_000, 220_000]
    summary = steps_summary(idx)
    assert [x["duration_us"] for x in summary["steps"]] == [130.0, 90.0]
    assert [x["cpu_duration_us"] for x in summary["steps"]] == [100.0, 100.0]


def test_breakdown_is_exclusive_and_exact(main_index) -> None:  # type: ignore[no-untyped-def]
    summary = steps_summary(main_index)
    b1, b2 = (x["breakdown_us"] for x in summary["steps"])
    assert b1 == {
        "kernel": 35.0,
        "memcpy": 0.0,
        "memset": 0.0,
        "communication": 0.0,
        "runtime": 7.0,
        "data_loading": 30.0,
        "cpu_exec": 18.0,
        "other": 10.0,
    }
    assert b2 == {
        "kernel": 40.0,
        "memcpy": 0.0,
        "memset": 0.0,
        "communication": 0.0,
        "runtime": 8.0,
        "data_loading": 0.0,
        "cpu_exec": 9.0,
        "other": 43.0,
    }
    assert summary["mean_step_us"] == 100.0 and summary["std_step_us"] == 0.0
    assert summary["gpu_utilization_fraction"] == pytest.approx(75 / 200)
    assert [x["gpu_utilization_fraction"] for x in summary["steps"]] == [0.35, 0.40]


def test_idle_gaps_causes_exact(main_index) -> None:  # type: ignore[no-untyped-def]
    idle = idle_summary(main_index)
    (dev,) = idle["devices"]
    assert dev["device"] == 0
    assert dev["gap_count"] == 6
    assert dev["busy_us"] == 75.0 and dev["idle_us"] == 125.0
    assert dev["busy_fraction"] == pytest.approx(0.375)
    causes = {c: dev["causes"][c]["us"] for c in CAUSES}
    assert causes == {
        "data_loading": 30.0,
        "host_sync": 15.0,
        "optimizer_step": 15.0,
        "launching": 9.0,
        "cpu_ops": 11.0,
        "host_untraced": 45.0,  # inside ProfilerStep#1/#2 on the host, no op recorded
        "nothing_recorded": 0.0,
    }
    assert dev["sync_opened_gaps"] == 1
    assert [s["idle_us"] for s in dev["per_step"]] == [65.0, 60.0]
    gaps = {(g["step"], g["offset_us"]): g for g in dev["largest_gaps"]}
    first = gaps[(1, 0.0)]  # the gap with two causes
    assert first["length_us"] == 40.0
    assert first["causes_us"] == {"data_loading": 30.0, "launching": 5.0, "cpu_ops": 5.0}
    assert first["cause"] == "data_loading"
    assert first["op"] == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    sync_gap = gaps[(2, 40.0)]
    assert sync_gap["opened_by_sync"] and sync_gap["causes_us"] == {"host_sync": 15.0}
    last = dev["largest_gaps"][0]
    assert (last["step"], last["offset_us"], last["length_us"]) == (1, 0.0, 40.0)
    hist = {(h["lo_us"], h["hi_us"]): h["count"] for h in dev["gap_histogram"]}
    assert hist[(10.0, 20.0)] == 4 and hist[(20.0, 50.0)] == 2 and hist[(5.0, 10.0)] == 0
    assert hist[(10000.0, None)] == 0
    assert hist[(0.0, 1.0)] == 0 and sum(hist.values()) == 6
    # a gap cut at a step boundary stays two gaps: [85, 100) and [100, 110)
    assert gaps[(1, 85.0)]["length_us"] == 15.0 and gaps[(2, 0.0)]["length_us"] == 10.0


def test_diagnoses_and_threshold_override(main_index) -> None:  # type: ignore[no-untyped-def]
    panels = {"steps": steps_summary(main_index), "idle": idle_summary(main_index)}
    found = diagnose(main_index, panels)
    # severity from impact (share of the 200 µs of steps): 45 µs untraced host time
    # (22.5 %), 30 µs DataLoader (15 %), 15 µs sync-opened (7.5 %)
    assert [(d["id"], d["severity"], d["impact_fraction"]) for d in found] == [
        ("gpu_idle_host_untraced", "medium", pytest.approx(45 / 200)),
        ("gpu_idle_dataloader", "medium", pytest.approx(30 / 200)),
        ("gpu_idle_host_sync", "low", pytest.approx(15 / 200)),
    ]
    # utilization 37.5 % is low, but without the 90 µs the three explain it would be
    # 75 / 110 = 68 %: low_gpu_utilization adds nothing and stays silent
    dl = next(d for d in found if d["id"] == "gpu_idle_dataloader")
    assert dl["evidence"]["idle_fraction_of_step_time"] == pytest.approx(30 / 200)
    assert dl["evidence"]["steps_affected"] == 1 and dl["evidence"]["steps"] == 2
    assert "(30 µs, mostly in 1 of 2 steps)" in dl["title"]
    strict = Thresholds().with_overrides(["min_impact_fraction=0.1"])
    assert [d["id"] for d in diagnose(main_index, panels, strict)] == [
        "gpu_idle_host_untraced",
        "gpu_idle_dataloader",
    ]
    high = Thresholds().with_overrides(["impact_high_fraction=0.2"])
    assert diagnose(main_index, panels, high)[0]["severity"] == "high"
    with pytest.raises(ValueError, match="expected NAME=VALUE"):
        Thresholds().with_overrides(["nope=1"])


def test_no_markers_gpu_only(tmp_path: Path) -> None:
    events = [kernel("a", 10, 5), kernel("b", 30, 10)]
    idx = build_index(read_trace(str(write_trace(tmp_path / "t.json", events))))
    assert not idx.steps.has_markers
    assert idx.steps.start_ns.tolist() == [10_000] and idx.steps.end_ns.tolist() == [40_000]
    steps = steps_summary(idx)
    idle = idle_summary(idx)
    assert steps["gpu_utilization_fraction"] == pytest.approx(15 / 30)
    assert idle["devices"][0]["causes"]["nothing_recorded"]["us"] == 15.0
    ids = [d["id"] for d in diagnose(idx, {"steps": steps, "idle": idle})]
    assert "no_step_markers" in ids


def test_pageable_memcpy_and_trace_data_loss(tmp_path: Path) -> None:
    copy = {
        "ph": "X",
        "cat": "gpu_memcpy",
        "name": "Memcpy HtoD (Pageable -> Device)",
        "pid": 0,
        "tid": 7,
        "ts": 10,
        "dur": 4,
        "args": {"device": 0, "stream": 7, "correlation": 1},
    }
    pinned = dict(copy, name="Memcpy HtoD (Pinned -> Device)", ts=20)
    info = [
        "INFO:... Record counts: Out-of-range = 12, Blocklisted runtime = 3, "
        "Invalid ext correlations = 0, CUPTI stopped early? = 0"
    ]
    events = [step(1, 0, 100), launch(5, 2, 1), copy, pinned]
    trace = read_trace(str(write_trace(tmp_path / "t.json", events, INFO=info)))
    idx = build_index(trace)
    panels = {
        "steps": steps_summary(idx),
        "idle": idle_summary(idx),
        "health": trace.health.to_dict(),
    }
    found = {d["id"]: d for d in diagnose(idx, panels)}
    # 4 µs of pageable copy in a 100 µs step: 4 % < min_impact_fraction (5 %): silent
    assert "pageable_memcpy" not in found
    loose = Thresholds().with_overrides(["min_impact_fraction=0.01"])
    page = next(d for d in diagnose(idx, panels, loose) if d["id"] == "pageable_memcpy")
    assert page["evidence"]["count"] == 1 and page["evidence"]["time_us"] == 4.0
    assert page["evidence"]["fraction_of_step_time"] == pytest.approx(0.04)
    assert page["impact_fraction"] == pytest.approx(0.04) and page["severity"] == "low"
    loss = found["trace_data_loss"]
    assert loss["evidence"]["kineto_record_counts"] == {"Out-of-range": 12}
    assert loss["severity"] == "low"


def test_trace_data_loss_on_real_trace(shared_traces: Path) -> None:
    from tb_kineto_insights.summary import summarize_file

    s = summarize_file(str(shared_traces / "hta_nccl_a100" / "nccl_data.json.gz"))
    loss = next(d for d in s["diagnoses"] if d["id"] == "trace_data_loss")
    assert loss["evidence"]["kineto_record_counts"]["Out-of-range"] == 4181


def test_trace_data_loss_counts_unusable_events(tmp_path: Path) -> None:
    events = [{**e, "dur": {}} if e.get("cat") == "kernel" else e for e in MAIN_EVENTS]
    trace = read_trace(str(write_trace(tmp_path / "t.json", events)))
    idx = build_index(trace)
    panels = {
        "steps": steps_summary(idx),
        "idle": idle_summary(idx),
        "health": trace.health.to_dict(),
    }
    loss = next(d for d in diagnose(idx, panels) if d["id"] == "trace_data_loss")
    assert loss["evidence"]["skipped_events"] == 6 and loss["evidence"]["events"] == len(
        MAIN_EVENTS
    )
    assert loss["severity"] == "medium"  # 6 of 21 events: >= 5 %, < 50 %
    assert "6 of 21 events were unusable" in loss["title"]
    with pytest.raises(ValueError, match="finite number"):
        Thresholds().with_overrides(["short_kernel_us=-5"])
    with pytest.raises(ValueError, match="finite number"):
        Thresholds().with_overrides(["low_utilization=nan"])


def test_nothing_usable_gives_only_trace_data_loss(tmp_path: Path) -> None:
    events = [{**e, "ts": "x"} for e in MAIN_EVENTS]
    trace = read_trace(str(write_trace(tmp_path / "t.json", events)))
    idx = build_index(trace)
    health = trace.health.to_dict()
    panels = {"steps": steps_summary(idx), "idle": idle_summary(idx), "health": health}
    (only,) = diagnose(idx, panels)
    assert only["id"] == "trace_data_loss" and only["severity"] == "high"
    assert only["evidence"]["unusable_fraction"] == 1.0
