"""health.trace_quality and its diagnoses: exact values on hand-written traces, and the
rules on real traces (the CUDA_LAUNCH_BLOCKING=1 recording in sample_logs must get
trace_cuda_launch_blocking; healthy runs must not).
Real traces: ``test_trace_quality_real.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import as_json, cpu, kernel, write_trace

from tb_kineto_insights.analysis.rules import area_diagnoses
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.analysis.trace_quality import trace_quality_summary
from tb_kineto_insights.summary import summarize_file
from tb_kineto_insights.trace.reader import read_trace


def _trace(
    path: Path,
    step_us: list[float],
    *,
    kernels_per_step: int = 5,
    blocking: bool = False,
    overhead_us: float = 0.0,
) -> Path:
    """Steps of the given lengths, back to back from ts 1000; each launches
    ``kernels_per_step`` 5 µs kernels, 20 µs apart, from 2 µs launch calls (or, with
    ``blocking``, launch calls that end 1 µs after their kernel)."""
    events: list[dict[str, Any]] = []
    corr = 0
    t0 = 1000.0
    for s, dur in enumerate(step_us):
        events.append(cpu(f"ProfilerStep#{s + 1}", t0, dur, cat="user_annotation"))
        for k in range(kernels_per_step):
            corr += 1
            launch_ts = t0 + 5 + 20 * k
            kernel_ts = launch_ts + 4
            launch_dur = (kernel_ts + 5 + 1 - launch_ts) if blocking else 2.0
            launch = cpu("cudaLaunchKernel", launch_ts, launch_dur, cat="cuda_runtime")
            launch["args"] = {"correlation": corr}
            events += [launch, kernel(f"k{k}", kernel_ts, 5, corr=corr)]
        t0 += dur
    if overhead_us:
        events.append(
            {
                "ph": "X",
                "cat": "overhead",
                "name": "Activity Buffer Request",
                "pid": 100,
                "tid": 1,
                "ts": 1001.0,
                "dur": overhead_us,
            }
        )
    return write_trace(path, events)


def _ids(summary: dict[str, Any]) -> set[str]:
    return {d["id"] for d in summary["diagnoses"] if d["id"].startswith("trace_")}


def test_steady_trace_is_clean(tmp_path: Path) -> None:
    s = as_json(summarize_file(str(_trace(tmp_path / "a.json", [200.0] * 5))))
    q = s["health"]["trace_quality"]
    assert q["steps"] == 5
    assert q["step_us"] == [200.0] * 5
    assert q["first_step_ratio"] == 1.0
    assert q["step_cv"] == 0.0
    assert q["launch_blocking"] == {"launches": 25, "ended_after_kernel": 0, "fraction": 0.0}
    assert q["profiler"]["overhead_us"] == 0.0
    assert _ids(s) == set()


def test_blocking_launches_are_recognised(tmp_path: Path) -> None:
    s = as_json(summarize_file(str(_trace(tmp_path / "b.json", [200.0] * 5, blocking=True))))
    q = s["health"]["trace_quality"]["launch_blocking"]
    assert q == {"launches": 25, "ended_after_kernel": 25, "fraction": 1.0}
    d = next(d for d in s["diagnoses"] if d["id"] == "trace_cuda_launch_blocking")
    assert d["severity"] == "medium" and d["impact_fraction"] == 0.0
    assert d["evidence"]["launches"] == 25
    assert d["title"].startswith("Kernel launches wait for their kernel (100 % of 25 launches)")


def test_blocking_needs_enough_launches(tmp_path: Path) -> None:
    # 3 steps x 5 = 15 launches, all blocking: under the 20-launch minimum
    s = as_json(summarize_file(str(_trace(tmp_path / "c.json", [200.0] * 3, blocking=True))))
    assert s["health"]["trace_quality"]["launch_blocking"]["fraction"] == 1.0
    assert "trace_cuda_launch_blocking" not in _ids(s)


def test_too_few_steps(tmp_path: Path) -> None:
    s = as_json(summarize_file(str(_trace(tmp_path / "d.json", [200.0, 200.0]))))
    d = next(d for d in s["diagnoses"] if d["id"] == "trace_too_few_steps")
    assert d["evidence"] == {"steps": 2, "steps_left_out": 0, "min_steps": 3}
    s3 = as_json(summarize_file(str(_trace(tmp_path / "e.json", [200.0] * 3))))
    assert "trace_too_few_steps" not in _ids(s3)


def test_warmup_step(tmp_path: Path) -> None:
    s = as_json(
        summarize_file(str(_trace(tmp_path / "f.json", [900.0, 200.0, 210.0, 190.0, 200.0])))
    )
    q = s["health"]["trace_quality"]
    assert q["first_step_ratio"] == 4.5  # 900 / median(200, 210, 190, 200)
    d = next(d for d in s["diagnoses"] if d["id"] == "trace_warmup_step")
    assert d["evidence"]["median_other_steps_us"] == 200.0
    assert (
        d["title"] == "Step 1 lasts 4.5x the others: a warm-up step, left out of the step figures"
    )
    # the warm-up step is left out of every step figure: the others are steady
    assert q["step_cv"] == pytest.approx(0.0408, abs=1e-4)
    assert "trace_unequal_steps" not in _ids(s)
    steps = s["steps"]
    assert (steps["count"], steps["mean_step_us"]) == (4, 200.0)
    assert [(w["number"], w["reason"], w["duration_us"]) for w in steps["left_out"]] == [
        (1, "warm_up", 900.0)
    ]
    assert (
        steps["left_out_note"]
        == "4 steady-state steps of 5: step 1 is a warm-up step (4.5x the others)"
    )
    s2 = as_json(summarize_file(str(_trace(tmp_path / "g.json", [390.0, 200.0, 210.0, 190.0]))))
    assert s2["health"]["trace_quality"]["first_step_ratio"] == 1.95
    assert "trace_warmup_step" not in _ids(s2)


def test_unequal_steps(tmp_path: Path) -> None:
    steps = [200.0, 200.0, 800.0, 200.0, 900.0]
    s = as_json(summarize_file(str(_trace(tmp_path / "h.json", steps))))
    q = s["health"]["trace_quality"]
    # mean 460, sample sd = sqrt((3 x 260^2 + 340^2 + 440^2) / 4) = sqrt(128000) = 357.77
    assert q["step_cv"] == pytest.approx(357.7709 / 460, abs=1e-4)
    assert "trace_unequal_steps" in _ids(s)


def test_profiler_overhead(tmp_path: Path) -> None:
    s = as_json(summarize_file(str(_trace(tmp_path / "i.json", [200.0] * 5, overhead_us=120.0))))
    q = s["health"]["trace_quality"]["profiler"]
    assert q["overhead_us"] == 120.0
    assert q["overhead_fraction"] == 0.12  # 120 / 1000 µs profiled
    d = next(d for d in s["diagnoses"] if d["id"] == "trace_profiler_overhead")
    # its cost is what it adds to the step: the 120 µs buffer request [1001, 1121) on the
    # step's thread, less the 5 launch calls (2 µs each) inside it that stay, comes out
    # of the host's time: 110 of 1000 µs, 11 % (medium from 10 %)
    assert (d["impact_fraction"], d["severity"]) == (0.11, "medium")
    assert d["prediction"]["predicted_step_us"] == 178.0  # 200 - 110 / 5
    assert d["title"] == (
        "The profiler's own activities lengthen the step by 11.0 % "
        "(12.0 % of the profiled time is their work)"
    )
    s2 = as_json(summarize_file(str(_trace(tmp_path / "j.json", [200.0] * 5, overhead_us=40.0))))
    assert s2["health"]["trace_quality"]["profiler"]["overhead_fraction"] == 0.04
    assert "trace_profiler_overhead" not in _ids(s2)  # under min_impact_fraction (5 %)


def test_thresholds_are_overridable(tmp_path: Path) -> None:
    index = build_index(read_trace(str(_trace(tmp_path / "k.json", [200.0] * 5))))
    q = trace_quality_summary(index)
    assert (q.steps, q.has_step_markers) == (5, True)
    health = {"health": index.trace.health.panel(q)}
    assert area_diagnoses("trace", health) == []  # 5 steps >= quality_min_steps (3)
    th = DEFAULT_THRESHOLDS.replace(quality_min_steps=6)
    assert [d.id for d in area_diagnoses("trace", health, th)] == ["trace_too_few_steps"]
