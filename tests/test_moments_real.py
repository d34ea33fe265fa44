"""The tests of ``test_moments.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

from functools import cache

import msgspec
import pytest
from conftest import H200X2, SAMPLE_LOGS

from tb_kineto_insights.analysis.rules import RULES_BY_ID, moment_of
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.schema import Summary
from tb_kineto_insights.schema.diagnoses import Diagnosis, Moment
from tb_kineto_insights.summary import summarize_file
from tb_kineto_insights.trace.reader import read_trace


@cache
def _summary(folder: str) -> Summary:
    path = next((SAMPLE_LOGS / folder).glob("*.pt.trace.json.gz"))
    return summarize_file(str(path))


def _diagnosis(folder: str, id_: str) -> Diagnosis:
    found = [d for d in _summary(folder).diagnoses if d.id == id_]
    assert found, f"{folder} no longer raises {id_}"
    return found[0]


def _step_start_us(summary: Summary, number: int) -> float:
    return next(s.start_us for s in summary.steps.steps if s.number == number)


def test_unequal_steps_points_at_the_longest_step() -> None:
    idx_trace = next((SAMPLE_LOGS / "stacks_healthy").glob("*.pt.trace.json.gz"))
    idx = build_index(read_trace(str(idx_trace)))
    longest = int(idx.steps.dur_ns.argmax())
    fake = Diagnosis(
        id="trace_unequal_steps",
        severity="low",
        title="",
        evidence={},
        recommendation="",
        panel="health",
        impact_fraction=0.0,
    )
    found = moment_of(fake, idx, {})
    assert found is not None
    assert found.step == int(idx.steps.number[longest]) and found.offset_us == 0.0
    assert found.length_us == int(idx.steps.dur_ns[longest]) / 1000.0
    # the warm-up step's moment: tests/test_step_windows.py (no sample has one)


@pytest.mark.parametrize(
    ("folder", "id_"),
    [
        ("dataloader_workers0", "gpu_idle_dataloader"),
        ("stacks_blocking_log", "gpu_idle_host_sync"),
        ("capture_blocking", "gpu_idle_host_untraced"),
        ("optimizer_per_param", "optimizer_step_bound"),
        ("allocator_empty_cache", "allocator_churn"),
        ("capture_blocking", "low_gpu_utilization"),
        ("transformer_eager", "low_gpu_utilization"),
    ],
)
def test_idle_diagnoses_point_at_their_longest_gap(folder: str, id_: str) -> None:
    summary = _summary(folder)
    d = _diagnosis(folder, id_)
    cause = RULES_BY_ID[id_].idle_cause
    dev = next(x for x in summary.idle.devices if x.device == summary.idle.main_device)
    gaps = [g for g in dev.largest_gaps if cause is None or g.cause == cause]
    longest = max(gaps, key=lambda g: g.length_us)
    assert isinstance(d.moment, Moment)
    assert (d.moment.step, d.moment.offset_us, d.moment.length_us) == (
        longest.step,
        longest.offset_us,
        longest.length_us,
    )
    assert longest.cause.replace("_", " ") in d.moment.what


def test_small_kernel_flood_points_at_its_busiest_step() -> None:
    summary = _summary("optimizer_per_param")
    d = _diagnosis("optimizer_per_param", "small_kernel_flood")
    top = max(summary.kernels.per_step, key=lambda s: s.count)
    assert (
        isinstance(d.moment, Moment) and d.moment.step == top.number and d.moment.offset_us == 0.0
    )
    window = next(s for s in summary.steps.steps if s.number == top.number)
    assert d.moment.length_us == pytest.approx(window.duration_us, abs=1e-3)
    assert f"({top.count})" in d.moment.what


def test_cudnn_autotune_points_at_its_tuning_step() -> None:
    d = _diagnosis("cudnn_autotune_varying", "cudnn_autotune_in_step")
    tuning = d.evidence["tuning_us_per_step"]
    summary = _summary("cudnn_autotune_varying")
    numbers = [s.number for s in summary.steps.steps]
    assert isinstance(d.moment, Moment)
    assert d.moment.step == numbers[tuning.index(max(tuning))] and d.moment.offset_us == 0.0


def _index_origin_us(folder: str) -> float:
    path = next((SAMPLE_LOGS / folder).glob("*.pt.trace.json.gz"))
    return build_index(read_trace(str(path))).origin_ns / 1000.0


def test_memory_diagnoses_point_at_their_event() -> None:
    """Memory times count from the index's origin (``memory.py``), step starts from the
    first step's start (``steps.origin_ns``): the moment lands on the event's µs."""
    for folder in ("memory_fragmentation",):
        summary = _summary(folder)
        d = _diagnosis(folder, "memory_fragmentation")
        dev = max(summary.memory.devices, key=lambda x: x.peak_reserved_bytes or 0)
        top = max(dev.fragmentation.largest, key=lambda e: e.reserved_growth_bytes)
        assert isinstance(d.moment, Moment) and d.moment.step == top.step
        step_at_us = summary.steps.origin_ns / 1000.0 + _step_start_us(summary, top.step)
        at_us = step_at_us + d.moment.offset_us - _index_origin_us(folder)
        assert at_us == pytest.approx(top.t_us, abs=2e-3)
        assert "grew reserved memory most" in d.moment.what
    summary = _summary("memory_leak")
    d = _diagnosis("memory_leak", "memory_growth")
    dev = max(summary.memory.devices, key=lambda x: x.peak_reserved_bytes or 0)
    assert isinstance(d.moment, Moment) and d.moment.length_us == 1.0
    step_at_us = summary.steps.origin_ns / 1000.0 + _step_start_us(summary, d.moment.step)
    at_us = step_at_us + d.moment.offset_us - _index_origin_us("memory_leak")
    assert at_us == pytest.approx(dev.peak_reserved_us, abs=2e-3)


@pytest.mark.skipif(not (H200X2 / "ddp_straggler").is_dir(), reason="h200x2 traces missing")
def test_straggler_points_at_its_worst_collective_on_its_rank() -> None:
    from tb_kineto_insights.cli.main import build_report

    report = msgspec.to_builtins(build_report(str(H200X2 / "ddp_straggler")))
    run = report["runs"][0]["run_summary"]
    by_id = {d["id"]: d for d in run["diagnoses"]}
    straggler = by_id["communication_straggler"]
    moment = straggler["moment"]
    worst = next(s for s in run["largest_skews"] if s["last_rank"] == straggler["evidence"]["rank"])
    assert moment["worker"] == straggler["evidence"]["worker"]
    assert moment["step"] == worst["step"]
    assert f"#{worst['seq']}" in moment["what"] and moment["length_us"] > 0
    # the rank's own collective: offset in its step window
    spans = [w for w in report["runs"][0]["workers"] if w["worker"] == moment["worker"]]
    summary = spans[0]["spans"][0]["summary"]
    call = next(
        c
        for c in summary["communication"]["sequence"]
        if c["seq"] == worst["seq"] and c["pg"] == worst["pg"]
    )
    start = next(s["start_us"] for s in summary["steps"]["steps"] if s["number"] == call["step"])
    origin = summary["steps"]["origin_ns"]
    assert moment["offset_us"] == pytest.approx(
        (call["start_ns"] - origin) / 1000 - start, abs=2e-3
    )
    exposed = [d for d in run["diagnoses"] if d["id"] == "exposed_communication"]
    assert exposed and all(d["moment"]["worker"] == d["evidence"]["worker"] for d in exposed)


def test_diagnoses_without_a_place_in_time_have_no_moment() -> None:
    for folder, id_ in (
        ("eff_mlp_fp32", "matmul_without_tensor_cores"),
        ("capture_blocking", "trace_cuda_launch_blocking"),
        ("eff_gemm_odd", "low_kernel_efficiency"),
    ):
        assert _diagnosis(folder, id_).moment is msgspec.UNSET


def test_a_quiet_trace_has_no_moment_to_show() -> None:
    # dataloader_workers4: the DataLoader fix; no idle diagnosis, so no gap moment
    ids = {d.id for d in _summary("dataloader_workers4").diagnoses}
    idle_ids = {r.id for r in RULES_BY_ID.values() if r.idle_cause} | {"low_gpu_utilization"}
    assert not ids & idle_ids
    assert all(d.moment is msgspec.UNSET for d in _summary("dataloader_workers4").diagnoses)


def _fake(id_: str, panel: str = "memory") -> Diagnosis:
    return Diagnosis(
        id=id_,
        severity="low",
        title="",
        evidence={},
        recommendation="",
        panel=panel,
        impact_fraction=0.0,
    )


def test_near_capacity_points_at_the_peak_and_span_exposure_at_its_collective() -> None:
    """``memory_near_capacity`` (no sample raises it: the same moment as
    ``memory_growth``, the reserved peak) and the span-level ``exposed_communication``
    (the collective with the most exposed time), on real traces."""
    summary = _summary("memory_leak")
    path = next((SAMPLE_LOGS / "memory_leak").glob("*.pt.trace.json.gz"))
    idx = build_index(read_trace(str(path)))
    panels = {"memory": summary.memory, "idle": summary.idle}
    near = moment_of(_fake("memory_near_capacity"), idx, panels)
    growth = _diagnosis("memory_leak", "memory_growth").moment
    assert isinstance(near, Moment) and near == growth
    rank0 = next((SAMPLE_LOGS / "ddp2_straggler").glob("rank0*.pt.trace.json.gz"))
    s0 = summarize_file(str(rank0))
    i0 = build_index(read_trace(str(rank0)))
    found = moment_of(
        _fake("exposed_communication", "communication"), i0, {"communication": s0.communication}
    )
    top = max(s0.communication.sequence, key=lambda c: c.exposed_us)
    assert isinstance(found, Moment) and found.step == top.step
    assert found.length_us == (top.end_ns - top.start_ns) / 1000.0
    start_us = next(s.start_us for s in s0.steps.steps if s.number == top.step)
    at_us = (top.start_ns - s0.steps.origin_ns) / 1000.0
    assert found.offset_us == pytest.approx(at_us - start_us, abs=2e-3)
    # no sequence: no moment
    assert moment_of(_fake("exposed_communication", "communication"), i0, {}) is None
