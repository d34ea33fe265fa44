"""Step windows, step breakdown, idle gaps and diagnoses: exact numbers on tiny traces.

The main tiny trace (times in µs, one GPU, main thread pid 100 / tid 1):

step 1 [0, 100): DataLoader [0, 30); aten::conv [30, 50) launching K1 [40, 60) on
stream 7 and K2 [50, 70) on stream 8 (overlapping streams); Optimizer.step [70, 90)
launching K3 [80, 85).
step 2 [100, 200): aten::mm [100, 110) launching K5 [110, 140); aten::item [115, 145)
with cudaStreamSynchronize [118, 142); K6 [155, 165) launched at [150, 152).
K7 [300, 305) launched at [250, 252): outside every step.

Real traces: ``test_analysis_real.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import as_json, cpu, kernel, write_trace

from tb_kineto_insights.analysis.host_activity import CAUSE_NAMES as CAUSES
from tb_kineto_insights.analysis.idle import idle_summary
from tb_kineto_insights.analysis.overview import steps_summary
from tb_kineto_insights.analysis.rules import diagnose
from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.analysis.trace_quality import trace_quality_summary
from tb_kineto_insights.schema.idle import HostThread
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
    assert [x.duration_us for x in summary.steps] == [130.0, 90.0]
    assert [x.cpu_duration_us for x in summary.steps] == [100.0, 100.0]


def test_breakdown_is_exclusive_and_exact(main_index) -> None:  # type: ignore[no-untyped-def]
    summary = steps_summary(main_index)
    b1, b2 = (x.breakdown_us for x in summary.steps)
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
    assert summary.mean_step_us == 100.0 and summary.std_step_us == 0.0
    assert summary.gpu_utilization_fraction == pytest.approx(75 / 200)
    assert [x.gpu_utilization_fraction for x in summary.steps] == [0.35, 0.40]


def test_idle_gaps_causes_exact(main_index) -> None:  # type: ignore[no-untyped-def]
    idle = idle_summary(main_index)
    (dev,) = idle.devices
    assert dev.device == 0
    assert dev.gap_count == 6
    assert dev.busy_us == 75.0 and dev.idle_us == 125.0
    assert dev.busy_fraction == pytest.approx(0.375)
    causes = {c: dev.causes[c].us for c in CAUSES}
    assert causes == {
        "data_loading": 30.0,
        "host_sync": 15.0,
        "allocator": 0.0,
        "optimizer_step": 15.0,
        "launching": 9.0,
        "cpu_ops": 11.0,
        "host_untraced": 45.0,  # inside ProfilerStep#1/#2 on the host, no op recorded
        "nothing_recorded": 0.0,
    }
    assert dev.sync_opened_gaps == 1
    assert [s.idle_us for s in dev.per_step] == [65.0, 60.0]
    gaps = {(g.step, g.offset_us): g for g in dev.largest_gaps}
    first = gaps[(1, 0.0)]  # the gap with two causes
    assert first.length_us == 40.0
    assert first.causes_us == {"data_loading": 30.0, "launching": 5.0, "cpu_ops": 5.0}
    assert first.cause == "data_loading"
    assert first.op == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    sync_gap = gaps[(2, 40.0)]
    assert sync_gap.opened_by_sync and sync_gap.causes_us == {"host_sync": 15.0}
    last = dev.largest_gaps[0]
    assert (last.step, last.offset_us, last.length_us) == (1, 0.0, 40.0)
    hist = {(h.lo_us, h.hi_us): h.count for h in dev.gap_histogram}
    assert hist[(10.0, 20.0)] == 4 and hist[(20.0, 50.0)] == 2 and hist[(5.0, 10.0)] == 0
    assert hist[(10000.0, None)] == 0
    assert hist[(0.0, 1.0)] == 0 and sum(hist.values()) == 6
    # a gap cut at a step boundary stays two gaps: [85, 100) and [100, 110)
    assert gaps[(1, 85.0)].length_us == 15.0 and gaps[(2, 0.0)].length_us == 10.0


def test_diagnoses_and_threshold_override(main_index) -> None:  # type: ignore[no-untyped-def]
    panels = {"steps": steps_summary(main_index), "idle": idle_summary(main_index)}
    found = diagnose(main_index, panels)
    # severity from impact (share of the 200 µs of steps): 45 µs untraced host time
    # (22.5 %), 30 µs DataLoader (15 %), 15 µs sync-opened (7.5 %)
    assert [(d.id, d.severity, d.impact_fraction) for d in found] == [
        ("gpu_idle_host_untraced", "medium", pytest.approx(45 / 200)),
        ("gpu_idle_dataloader", "medium", pytest.approx(30 / 200)),
        ("gpu_idle_host_sync", "low", pytest.approx(15 / 200)),
    ]
    # utilization 37.5 % is low, but without the 90 µs the three explain it would be
    # 75 / 110 = 68 %: low_gpu_utilization adds nothing and stays silent
    dl = next(d for d in found if d.id == "gpu_idle_dataloader")
    assert dl.evidence["idle_fraction_of_step_time"] == pytest.approx(30 / 200)
    assert dl.evidence["steps_affected"] == 1 and dl.evidence["steps"] == 2
    # issue 17 §7: a total says it is one
    assert "(30 µs in total over 2 steps, mostly in 1 of them)" in dl.title
    strict = Thresholds().with_overrides(["min_impact_fraction=0.1"])
    assert [d.id for d in diagnose(main_index, panels, strict)] == [
        "gpu_idle_host_untraced",
        "gpu_idle_dataloader",
    ]
    high = Thresholds().with_overrides(["impact_high_fraction=0.2"])
    assert diagnose(main_index, panels, high)[0].severity == "high"
    with pytest.raises(ValueError, match="expected NAME=VALUE"):
        Thresholds().with_overrides(["nope=1"])


def test_no_markers_gpu_only(tmp_path: Path) -> None:
    events = [kernel("a", 10, 5), kernel("b", 30, 10)]
    idx = build_index(read_trace(str(write_trace(tmp_path / "t.json", events))))
    assert not idx.steps.has_markers
    assert idx.steps.start_ns.tolist() == [10_000] and idx.steps.end_ns.tolist() == [40_000]
    steps = steps_summary(idx)
    idle = idle_summary(idx)
    assert steps.gpu_utilization_fraction == pytest.approx(15 / 30)
    assert idle.devices[0].causes["nothing_recorded"].us == 15.0
    ids = [d.id for d in diagnose(idx, {"steps": steps, "idle": idle})]
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
        "health": trace.health.panel(trace_quality_summary(idx)),
    }
    found = {d.id: d for d in diagnose(idx, panels)}
    # 4 µs of pageable copy in a 100 µs step: 4 % < min_impact_fraction (5 %): silent
    assert "pageable_memcpy" not in found
    loose = Thresholds().with_overrides(["min_impact_fraction=0.01"])
    page = next(d for d in diagnose(idx, panels, loose) if d.id == "pageable_memcpy")
    assert page.evidence["count"] == 1 and page.evidence["time_us"] == 4.0
    assert page.evidence["fraction_of_step_time"] == pytest.approx(0.04)
    assert page.impact_fraction == pytest.approx(0.04) and page.severity == "low"
    loss = found["trace_data_loss"]
    assert loss.evidence["kineto_record_counts"] == {"Out-of-range": 12}
    assert loss.severity == "low"


def test_trace_data_loss_counts_unusable_events(tmp_path: Path) -> None:
    events = [{**e, "dur": {}} if e.get("cat") == "kernel" else e for e in MAIN_EVENTS]
    trace = read_trace(str(write_trace(tmp_path / "t.json", events)))
    idx = build_index(trace)
    panels = {
        "steps": steps_summary(idx),
        "idle": idle_summary(idx),
        "health": trace.health.panel(trace_quality_summary(idx)),
    }
    loss = next(d for d in diagnose(idx, panels) if d.id == "trace_data_loss")
    assert loss.evidence["skipped_events"] == 6 and loss.evidence["events"] == len(MAIN_EVENTS)
    assert loss.severity == "medium"  # 6 of 21 events: >= 5 %, < 50 %
    assert "6 of 21 events were unusable" in loss.title
    with pytest.raises(ValueError, match="finite number"):
        Thresholds().with_overrides(["short_kernel_us=-5"])
    with pytest.raises(ValueError, match="finite number"):
        Thresholds().with_overrides(["low_utilization=nan"])


def test_nothing_usable_gives_only_trace_data_loss(tmp_path: Path) -> None:
    events = [{**e, "ts": "x"} for e in MAIN_EVENTS]
    trace = read_trace(str(write_trace(tmp_path / "t.json", events)))
    idx = build_index(trace)
    health = trace.health.panel(trace_quality_summary(idx))
    panels = {"steps": steps_summary(idx), "idle": idle_summary(idx), "health": health}
    (only,) = diagnose(idx, panels)
    assert only.id == "trace_data_loss" and only.severity == "high"
    assert only.evidence["unusable_fraction"] == 1.0


def _launch_on(ts: float, dur: float, corr: int, tid: int) -> dict[str, Any]:
    return {**launch(ts, dur, corr), "tid": tid}


UNTRACED_EVENTS = [
    # host step 1 [0, 100), host step 2 [130, 230); the GPU runs K3 after step 1 ended
    step(1, 0, 100),
    launch(2, 2, 1),
    kernel("K1", 10, 10, corr=1),
    launch(60, 2, 2),  # [20, 60): the host thread runs nothing the profiler records
    kernel("K2", 65, 10, corr=2),
    launch(90, 2, 3),
    kernel("K3", 120, 5, corr=3),  # window 1 = [0, 125): [100, 120) is past the host step
    step(2, 130, 100),
    launch(131, 2, 4),
    kernel("K5", 135, 5, corr=4),
    cpu("aten::foo", 140, 40),  # the step thread (tid 1) is in a traced op
    _launch_on(200, 3, 5, tid=2),  # ... while tid 2, which launches K4, records nothing
    kernel("K4", 205, 5, corr=5),
]


def test_host_untraced_vs_nothing_recorded(tmp_path: Path) -> None:
    """Gaps (µs): [0,10) [20,65) [75,120) in window 1 = [0,125); [130,135) [140,205)
    [210,230) in window 2 = [130,230). Untraced = no range on the launching thread, inside
    a host ProfilerStep and the step thread not in a traced op: 8 + 43 + 23 + 3 + 22 + 20;
    nothing recorded: [100,120) after host step 1 ended, [140,180) while tid 1 ran
    aten::foo."""
    idx = build_index(read_trace(str(write_trace(tmp_path / "t.json", UNTRACED_EVENTS))))
    idle = idle_summary(idx)
    (dev,) = idle.devices
    assert dev.idle_us == 190.0
    causes = {c: v.us for c, v in dev.causes.items() if v.us}
    assert causes == {"launching": 11.0, "host_untraced": 119.0, "nothing_recorded": 60.0}
    assert dev.causes["host_untraced"].fraction_of_step_time == pytest.approx(119 / 225)
    assert idle.cause_order[-2:] == ["host_untraced", "nothing_recorded"]
    assert "untraced Python" in idle.cause_labels["host_untraced"]
    gaps = {(g.step, g.offset_us): g for g in dev.largest_gaps}
    assert gaps[(1, 75.0)].causes_us == {
        "launching": 2.0,
        "host_untraced": 23.0,
        "nothing_recorded": 20.0,
    }
    assert gaps[(2, 10.0)].causes_us == {
        "launching": 3.0,
        "host_untraced": 22.0,
        "nothing_recorded": 40.0,
    }
    assert gaps[(2, 10.0)].thread == HostThread(pid=100, tid=2)
    found = {d.id: d for d in diagnose(idx, {"steps": steps_summary(idx), "idle": idle})}
    untraced = found["gpu_idle_host_untraced"]
    assert untraced.severity == "high"  # 119 / 225 = 53 % of the step time
    # replayed without the untraced host time: all 119 µs of it lie on the host chain
    # before the launches, so the steps shorten by exactly that
    assert untraced.impact_fraction == round(119 / 225, 4)
    assert untraced.evidence["idle_us_per_step"] == pytest.approx(59.5)
    assert "with_stack=True" in untraced.recommendation and "py-spy" in untraced.recommendation
    assert "time.sleep" in untraced.recommendation


def test_no_markers_is_nothing_recorded_not_untraced(tmp_path: Path) -> None:
    events = [e for e in UNTRACED_EVENTS if not e["name"].startswith("ProfilerStep")]
    idx = build_index(read_trace(str(write_trace(tmp_path / "t.json", events))))
    (dev,) = idle_summary(idx).devices
    assert dev.causes["host_untraced"].us == 0.0
    assert dev.causes["nothing_recorded"].us > 0


def test_runtime_sync_just_after_the_gap_opens_it(tmp_path: Path) -> None:
    """``x.cpu()``: the copy drains the GPU at 20; cudaStreamSynchronize runs [25, 28)
    (within sync_return_tolerance_us of the gap start), then untraced Python. The gap
    [20, 60) belongs to host_sync. An aten::item of a CPU tensor at the same place is not
    a GPU sync: its gap stays with what the host did."""
    base = [step(1, 0, 100), launch(2, 2, 1), kernel("K1", 10, 10, corr=1)]
    base += [launch(55, 2, 2), kernel("K2", 60, 10, corr=2)]
    synced = base + [launch(25, 3, 99, name="cudaStreamSynchronize")]
    idx = build_index(read_trace(str(write_trace(tmp_path / "a.json", synced))))
    (dev,) = idle_summary(idx).devices
    gap = next(g for g in dev.largest_gaps if g.offset_us == 20.0)
    assert gap.opened_by_sync and gap.causes_us == {"host_sync": 40.0}
    cpu_item = base + [cpu("aten::item", 25, 3)]
    idx = build_index(read_trace(str(write_trace(tmp_path / "b.json", cpu_item))))
    (dev,) = idle_summary(idx).devices
    gap = next(g for g in dev.largest_gaps if g.offset_us == 20.0)
    assert not gap.opened_by_sync
    assert gap.causes_us == {"host_sync": 3.0, "launching": 2.0, "host_untraced": 35.0}


def _flood(long_gap_before: int | None = None) -> list[dict[str, Any]]:
    """250 short kernels (3 µs) each launched by its own op: op [b, b+9) with its launch
    call [b+5, b+7), kernel [b+9, b+12), b = 10 i: a 7 µs gap before every kernel while
    the host is in the op (cpu_ops 5 µs, launching 2 µs). With ``long_gap_before=j``, a
    298 µs host op runs before op j, shifting it by 300 µs: a 307 µs gap."""
    events: list[dict[str, Any]] = []
    for i in range(250):
        b = 10 * i + (300 if long_gap_before is not None and i >= long_gap_before else 0)
        if long_gap_before is not None and i == long_gap_before:
            events.append(cpu("aten::long_host_op", b - 301, 301))
        events += [
            cpu("aten::add", b, 9),
            launch(b + 5, 2, i + 1),
            kernel("vectorized_elementwise_kernel", b + 9, 3, corr=i + 1),
        ]
    end = events[-1]["ts"] + 3
    return [step(1, 0, end - 2), *events]


def _diagnose_events(tmp_path: Path, events: list[dict[str, Any]]) -> dict[str, Any]:
    from tb_kineto_insights.summary import summarize_trace

    return as_json(summarize_trace(read_trace(str(write_trace(tmp_path / "t.json", events)))))


def test_small_kernel_flood_impact_exact(tmp_path: Path) -> None:
    """Window [0, 2802) µs. Launch-bound idle: the first gap [0, 9) (9 µs, all inside
    aten::add) + 248 gaps of 7 µs; the 307 µs gap before kernel 125 is longer than
    launch_bound_max_gap_us (200) and does not count. Kernels closing a counted gap: 249
    × 3 µs. Impact = (9 + 248 × 7 + 249 × 3) / 2802."""
    s = _diagnose_events(tmp_path, _flood(long_gap_before=125))
    (dev,) = s["idle"]["devices"]
    cost = dev["short_kernels"]
    assert cost["launch_bound_gaps"] == 249
    assert cost["launch_bound_idle_us"] == 9 + 248 * 7
    assert cost["launch_bound_idle_us_by_cause"] == {
        "optimizer_step": 0.0,
        "launching": 249 * 2.0,
        "cpu_ops": 7 + 248 * 5.0,
    }
    assert cost["launch_bound_kernel_us"] == 249 * 3.0 and cost["busy_us"] == 750.0
    impact = (9 + 248 * 7 + 249 * 3) / 2802
    assert cost["cost_fraction_of_step_time"] == pytest.approx(impact)
    flood = s["diagnoses"][0]
    assert flood["id"] == "small_kernel_flood" and flood["severity"] == "high"
    assert flood["evidence"]["launch_bound_cost_fraction_of_step_time"] == pytest.approx(impact)
    assert flood["evidence"]["launch_bound_idle_us"] == 1745.0
    # its fix replayed (CUDA graphs: launch calls and the aten::add dispatch around them
    # gone, the 1 µs of untraced host time between ops and the 301 µs host op kept): the
    # host issues a launch every µs, faster than the 3 µs kernels, so kernels 0-124 run
    # back to back in [0, 375); the host op puts launch 125 at 124 + 301 = 425, kernels
    # 125-249 run [425, 800): 800 of 2802 µs, a 71.45 % saving
    assert flood["prediction"]["predicted_step_us"] == 800.0
    assert flood["impact_fraction"] == round(1 - 800 / 2802, 4)
    # utilization 750 / 2802 = 27 %, but without the 1745 µs of launch-bound idle it would
    # be 750 / 1057 = 71 %: the flood explains it, low_gpu_utilization stays silent
    # (and the one-step trace is too short for the diff's noise rule)
    assert [d["id"] for d in s["diagnoses"]] == ["small_kernel_flood", "trace_too_few_steps"]
    loose = Thresholds().with_overrides(["launch_bound_max_gap_us=400"])
    from tb_kineto_insights.summary import summarize_trace

    trace = read_trace(str(write_trace(tmp_path / "t.json", _flood(long_gap_before=125))))
    wider = as_json(summarize_trace(trace, loose))["idle"]["devices"][0]["short_kernels"]
    assert wider["launch_bound_gaps"] == 250
    assert wider["launch_bound_idle_us"] == 1745 + 307


def test_busy_gpu_with_many_short_kernels_is_not_a_flood(tmp_path: Path) -> None:
    """The host launches 250 kernels of 3 µs within the first 0.5 µs; they run back to
    back 0.2 µs apart from 0.5 µs on: 94 % busy, every kernel short. Only the first
    kernel waits on its launch (the window opens while the 250 launch calls of 1 ns run:
    0.25 µs of launching, then its 3 µs of kernel); every later launch returned long
    before its gap opened: no small_kernel_flood."""
    events: list[dict[str, Any]] = [step(1, 0, 100)]
    for i in range(250):
        events.append(launch(i * 0.002, 0.001, i + 1))
        events.append(kernel("short", 0.5 + 3.2 * i, 3, corr=i + 1))
    s = _diagnose_events(tmp_path, events)
    assert s["kernels"]["short_count_fraction"] == 1.0 and s["kernels"]["mean_per_step"] == 250
    (dev,) = s["idle"]["devices"]
    assert dev["busy_fraction"] == pytest.approx(750 / 800.3)
    assert dev["short_kernels"]["launch_bound_gaps"] == 1
    assert dev["short_kernels"]["launch_bound_idle_us"] == pytest.approx(0.25)
    assert dev["short_kernels"]["cost_fraction_of_step_time"] == pytest.approx(3.25 / 800.3)
    assert dev["short_kernels"]["busy_us"] == pytest.approx(750.0)
    # nothing about the GPU; the one-step trace is too short for the diff's noise rule
    assert [d["id"] for d in s["diagnoses"]] == ["trace_too_few_steps"]


def test_low_utilization_names_the_unexplained_cause(tmp_path: Path) -> None:
    """Step [0, 100): K1 [0, 10), then aten::cpu_heavy [10, 90) on the host and K2
    [90, 100): 80 % idle in a traced CPU op, which no cause-specific diagnosis claims."""
    events = [
        step(1, 0, 100),
        launch(0, 0.5, 1),
        kernel("K1", 0.5, 9.5, corr=1),
        cpu("aten::cpu_heavy", 10, 80),
        launch(90, 0.5, 2),
        kernel("K2", 90.5, 9.5, corr=2),
    ]
    s = _diagnose_events(tmp_path, events)
    assert sorted(d["id"] for d in s["diagnoses"]) == ["low_gpu_utilization", "trace_too_few_steps"]
    (low,) = [d for d in s["diagnoses"] if d["id"] == "low_gpu_utilization"]
    assert low["id"] == "low_gpu_utilization" and low["severity"] == "high"
    assert low["impact_fraction"] == pytest.approx(0.81)
    assert low["evidence"]["largest_unexplained_cause"] == "cpu_ops"
    assert low["evidence"]["explained_fraction_by_diagnosis"] == {}
    assert "mostly other CPU ops" in low["title"]


def test_graph_launched_or_sync_opened_gaps_are_not_launch_bound(tmp_path: Path) -> None:
    """The same flood, launched by cudaGraphLaunch (no host launch per kernel): no
    launch-bound idle. And a gap opened by a host sync before a short kernel belongs to
    the sync, not to launch overhead."""
    graph = [
        {**e, "name": "cudaGraphLaunch"} if e.get("name") == "cudaLaunchKernel" else e
        for e in _flood()
    ]
    s = _diagnose_events(tmp_path, graph)
    cost = s["idle"]["devices"][0]["short_kernels"]
    assert cost["launch_bound_gaps"] == 0 and cost["cost_us"] == 0.0
    assert "small_kernel_flood" not in [d["id"] for d in s["diagnoses"]]
    events = [
        step(1, 0, 100),
        launch(0, 1, 1),
        kernel("K1", 1, 15, corr=1),
        launch(2, 15, 99, name="cudaDeviceSynchronize"),  # returns at 17, the gap opens at 16
        cpu("aten::add", 17, 7),
        launch(19, 2, 2),
        kernel("short", 22, 3, corr=2),  # closes the gap [16, 22)
    ]
    idx = build_index(read_trace(str(write_trace(tmp_path / "s.json", events))))
    (dev,) = idle_summary(idx).devices
    # [16, 22) only; not [0, 1): the sync starts at 2, after that gap has closed
    assert dev.sync_opened_gaps == 1
    assert dev.short_kernels.launch_bound_gaps == 0


def _untraced_steps(stalled_steps: set[int]) -> list[dict[str, Any]]:
    """Four 100 µs steps, each with one traced op from ``late`` to the step's end that
    launches one 40 µs kernel. In a stalled step the host first sleeps (untraced) for
    ``late`` = 50 µs; elsewhere ``late`` = 0. The GPU idles 60 µs in every step, but only
    a stalled step's first 50 µs are host_untraced."""
    events: list[dict[str, Any]] = []
    for i in range(4):
        b = 100 * i
        late = 50 if i + 1 in stalled_steps else 0
        events += [step(i + 1, b, 100), cpu("aten::work", b + late, 100 - late)]
        events.append(launch(b + late + 1, 2, i + 1))
        events.append(kernel("gemm", b + late + 5, 40, corr=i + 1))
    return events


@pytest.mark.parametrize(("stalled", "fires"), [({1}, False), ({1, 3}, True), ({1, 2, 3, 4}, True)])
def test_one_off_stall_is_not_a_steady_cost(tmp_path: Path, stalled: set[int], fires: bool) -> None:
    """A cause that idles the GPU in one step of four (the first profiled step starting
    on an empty queue, a one-off checkpoint) raises nothing (``idle_cause_min_steps``=2);
    in two or more steps it does, with impact = its idle / summed step time."""
    path = write_trace(tmp_path / "t.json", _untraced_steps(stalled))
    idx = build_index(read_trace(str(path)))
    idle = idle_summary(idx)
    (dev,) = idle.devices
    assert dev.causes["host_untraced"].us == 50.0 * len(stalled)
    found = {d.id: d for d in diagnose(idx, {"steps": steps_summary(idx), "idle": idle})}
    assert ("gpu_idle_host_untraced" in found) is fires
    if fires:
        impact = found["gpu_idle_host_untraced"].impact_fraction
        assert impact == pytest.approx(50.0 * len(stalled) / dev.per_step[0].duration_us / 4)
