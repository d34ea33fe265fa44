"""Steady-state steps: the windows every step figure stands on, and the ones left out
(a first window carrying GPU work queued before the profiled range, a warm-up step, a
last window cut off when the profiler stopped), on hand-written traces with known
answers (the real host-ahead recordings: ``test_step_windows_real.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import as_json, cpu, kernel, write_trace

from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.summary import summarize_file
from tb_kineto_insights.trace.reader import read_trace


def _launch(ts: float, corr: int, dur: float = 2.0) -> dict[str, Any]:
    event = cpu("cudaLaunchKernel", ts, dur, cat="cuda_runtime")
    event["args"] = {"correlation": corr}
    return event


def _host_ahead(backlog_us: float) -> list[dict[str, Any]]:
    """4 steps issued by the host in 20 µs each from ts 1000; each launches one 100 µs
    kernel, which the GPU runs back to back after ``backlog_us`` of a kernel launched
    before the profiled range (no launch call in the trace)."""
    events = []
    if backlog_us:
        events.append(kernel("queued_before", 1000, backlog_us, corr=999))
    gpu = 1000 + max(backlog_us, 5.0)
    for i in range(4):
        t0 = 1000 + 20 * i
        events += [cpu(f"ProfilerStep#{i + 2}", t0, 20, cat="user_annotation")]
        events += [_launch(t0 + 2, i + 1), kernel(f"k{i}", gpu, 100, corr=i + 1)]
        gpu += 100
    return events


def test_a_first_window_carrying_a_gpu_backlog_is_left_out(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "ahead.json", _host_ahead(300.0))
    index = build_index(read_trace(str(path)))
    # window of step 2: its CPU start (1000) to its kernel's end (1300 + 100); the GPU
    # ran 300 µs of earlier work first
    [left] = index.left_out_steps
    assert (left.number, left.reason, left.backlog_ns) == (2, "gpu_backlog", 300_000)
    assert (left.start_ns, left.end_ns, left.ratio) == (1_000_000, 1_400_000, 4.0)
    assert index.steps.number.tolist() == [3, 4, 5]
    assert index.steps.dur_ns.tolist() == [100_000] * 3  # the GPU's period
    s = as_json(summarize_file(str(path)))
    steps = s["steps"]
    assert (steps["count"], steps["mean_step_us"], steps["max_step_us"]) == (3, 100.0, 100.0)
    assert steps["left_out_note"] == (
        "3 steady-state steps of 4: step 2 carries 300 µs of GPU backlog from before "
        "the profiled range"
    )
    assert [(w["reason"], w["start_us"], w["duration_us"]) for w in steps["left_out"]] == [
        ("gpu_backlog", 0.0, 400.0)
    ]
    assert "trace_warmup_step" not in {d["id"] for d in s["diagnoses"]}
    # the kernels count in the steady windows only: one per step
    assert (s["kernels"]["count_in_steps"], s["kernels"]["mean_per_step"]) == (3, 1.0)


@pytest.mark.parametrize("backlog_us", [0.0, 4.0])
def test_no_backlog_or_one_under_5_percent_keeps_every_step(
    tmp_path: Path, backlog_us: float
) -> None:
    index = build_index(read_trace(str(write_trace(tmp_path / "a.json", _host_ahead(backlog_us)))))
    assert index.left_out_steps == []
    assert index.steps.number.tolist() == [2, 3, 4, 5]


def test_a_warm_up_step_is_left_out_and_said(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    t0 = 1000.0
    for i, dur in enumerate([450.0, 100.0, 110.0, 90.0]):
        events += [cpu(f"ProfilerStep#{i + 1}", t0, dur, cat="user_annotation")]
        events += [_launch(t0 + 5, i + 1), kernel(f"k{i}", t0 + 10, 20, corr=i + 1)]
        t0 += dur
    s = as_json(summarize_file(str(write_trace(tmp_path / "w.json", events))))
    assert [(w["number"], w["reason"], w["ratio"]) for w in s["steps"]["left_out"]] == [
        (1, "warm_up", 4.5)
    ]
    assert s["steps"]["count"] == 3 and s["steps"]["mean_step_us"] == 100.0
    [d] = [d for d in s["diagnoses"] if d["id"] == "trace_warmup_step"]
    assert d["moment"]["step"] == 1 and d["moment"]["length_us"] == 450.0


def _cut_at_stop(lost_in_last: int, lost_in_each: int = 0) -> list[dict[str, Any]]:
    """4 host-bound steps of 100 µs, 5 launches each; the last ``lost_in_last`` launches
    of the last step, and ``lost_in_each`` of every step, have no kernel."""
    events: list[dict[str, Any]] = []
    corr = 0
    for i in range(4):
        t0 = 1000 + 100 * i
        events.append(cpu(f"ProfilerStep#{i + 1}", t0, 100, cat="user_annotation"))
        for k in range(5):
            corr += 1
            events.append(_launch(t0 + 5 + 15 * k, corr))
            lost = k >= 5 - lost_in_each or (i == 3 and k >= 5 - lost_in_last)
            if not lost:
                events.append(kernel(f"k{k}", t0 + 8 + 15 * k, 5, corr=corr))
    return events


def test_a_last_step_cut_off_at_the_stop_is_left_out(tmp_path: Path) -> None:
    index = build_index(read_trace(str(write_trace(tmp_path / "c.json", _cut_at_stop(3)))))
    [left] = index.left_out_steps
    assert (left.number, left.reason, left.launches_without_gpu_event) == (4, "cut_off", 3)
    assert index.steps.number.tolist() == [1, 2, 3]


def test_launches_every_step_misses_alike_cut_nothing(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "d.json", _cut_at_stop(0, lost_in_each=1))
    assert build_index(read_trace(str(path))).left_out_steps == []
