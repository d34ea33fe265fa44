"""The tests of ``test_memory.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import SAMPLE_LOGS, require_dir
from test_memory import MIB, device, ids

from tb_kineto_insights.analysis.memory import memory_summary
from tb_kineto_insights.analysis.rules import area_diagnoses
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.memory import MemoryPanel
from tb_kineto_insights.trace.reader import read_trace


def _one(folder: Path) -> str:
    files = sorted(folder.glob("*.json*"))
    assert files, f"no trace in {folder}"
    return files[0].as_posix()


def _real(path: str) -> tuple[MemoryPanel, list[Diagnosis]]:
    s = memory_summary(build_index(read_trace(path)))
    json.dumps(msgspec.to_builtins(s), allow_nan=False)
    return s, area_diagnoses("memory", {"memory": s})


def test_hta_df_index_resolver_steady_memory_is_not_a_leak(shared_traces: Path) -> None:
    s, diags = _real(_one(shared_traces / "hta_df_index_resolver"))
    assert sum(d.event_count for d in s.devices) == 28_010
    assert s.main_device == "CUDA:1" and s.notes == []
    d = device(s, "CUDA:1")
    assert d.growth.steps_used == 5 and d.growth.steady is False
    assert abs(d.growth.bytes_per_step) < MIB
    assert d.capacity_bytes == 34_089_730_048
    assert len(d.series.allocated.t_us) <= DEFAULT_THRESHOLDS.memory_series_points
    assert max(d.series.allocated.bytes) == d.peak_allocated_bytes
    assert "memory_growth" not in ids(diags)


def test_sample_memory_leak() -> None:
    logs = require_dir(SAMPLE_LOGS, "sample_logs/")
    s, diags = _real(_one(logs / "memory_leak"))
    d = device(s, "CUDA:0")
    g = d.growth
    assert g.bytes_per_step == 16_777_216  # 1024 x 4096 fp32 kept per step, exactly
    assert g.steady is True and g.steps_used == 5
    growth = next(x for x in diags if x.id == "memory_growth")
    assert growth.evidence["device"] == "CUDA:0"
    # the non-detached Linear output: addmm of the second layer, one block per step
    assert growth.evidence["op"] == "aten::addmm"
    assert growth.evidence["op_live_bytes"] == 5 * 16_777_216
    assert growth.evidence["op_steps"] == [2, 3, 4, 5, 6]
    assert "aten::addmm" in growth.title
    assert d.capacity_bytes == 150_109_880_320
    # 139.8 GiB fill up at 16 MiB per step in ~8,900 steps (< 10,000): high
    assert 8_500 < growth.evidence["steps_to_capacity"] < 9_000
    assert growth.severity == "high"
    assert "memory_fragmentation" not in ids(diags)


def test_sample_memory_fixed() -> None:
    logs = require_dir(SAMPLE_LOGS, "sample_logs/")
    s, diags = _real(_one(logs / "memory_fixed"))
    d = device(s, "CUDA:0")
    assert abs(d.growth.bytes_per_step) < MIB
    assert d.growth.steady is False
    assert "memory_growth" not in ids(diags)


def test_old_resnet50_trace_says_what_is_missing(shared_traces: Path) -> None:
    folder = shared_traces / "kineto_resnet50" / "resnet50_num_workers_0"
    s, diags = _real(_one(folder))
    d = device(s, "CUDA:0")
    assert d.allocated_from_deltas is True and d.live_at_end is None
    assert d.peak_allocated_bytes > 0 and len(d.series.allocated.t_us) > 0
    assert any("Addr" in n for n in d.notes) and any("Total Allocated" in n for n in d.notes)
    assert "memory_growth" not in ids(diags)


# -- real traces recorded for this: async leak pair, fragmentation trio ----------------


def _recording_info() -> dict[str, Any]:
    logs = require_dir(SAMPLE_LOGS, "sample_logs/")
    info: dict[str, Any] = json.loads((logs / "recording_info.json").read_text())
    return info


def _steps_in_flight(path: str) -> list[int]:
    """Per step: earlier steps whose GPU-extended window had not ended when the host
    started it (how many steps ahead the host ran): every profiled window, the one
    left out for its GPU backlog included."""
    st = build_index(read_trace(path)).host_steps
    return [int((st.end_ns[:k] > st.cpu_start_ns[k]).sum()) for k in range(len(st))]


@pytest.mark.parametrize("run", ["memory_leak_async", "memory_fixed_async"])
def test_async_runs_have_the_host_ahead(run: str) -> None:
    path = _one(require_dir(SAMPLE_LOGS, "sample_logs/") / run)
    ahead = _steps_in_flight(path)
    assert ahead[0] == 0 and min(ahead[2:]) >= 2  # measured: [0, 1, 2, 3, 4]
    # the recording script's own reading of the same trace agrees
    lead = _recording_info()["memory"][run]["host_lead_per_profiled_step"]
    assert [x["steps_in_flight"] for x in lead] == ahead


def test_sample_memory_leak_async() -> None:
    s, diags = _real(_one(require_dir(SAMPLE_LOGS, "sample_logs/") / "memory_leak_async"))
    info = _recording_info()["memory"]["memory_leak_async"]
    leaked = info["expected_growth_bytes_per_step"]
    assert leaked == 2048 * 4096 * 4  # 32 MiB
    assert set(info["measured_growth_bytes_per_step"]) == {leaked}
    d = device(s, "CUDA:0")
    g = d.growth
    assert g.bytes_per_step == pytest.approx(leaked, rel=0.10)  # measured: exactly
    assert g.steady is True and g.steps_used == 5
    # step ends from the host windows: 32 MiB apart (GPU windows gave 5 equal values)
    ends = [p.end_bytes for p in d.per_step]
    assert [b - a for a, b in zip(ends, ends[1:], strict=False)] == [leaked] * 4
    growth = next(x for x in diags if x.id == "memory_growth")
    assert growth.severity == "high"  # full in ~4,400 steps
    assert growth.evidence["op"] == "aten::mm"
    assert growth.evidence["op_input_shapes"] == "[[2048, 4096], [4096, 4096]]"
    assert growth.evidence["op_live_bytes"] == 5 * leaked
    assert growth.evidence["op_steps"] == [2, 3, 4, 5, 6]
    # kept blocks split the cache, so 64 MiB gradients need new segments (3 of them),
    # but reserved grows as the allocated peak does: the leak, not fragmentation
    f = d.fragmentation
    assert f.events == 3 and f.excess_reserved_growth_bytes_per_step == 0.0
    assert ids(diags) == ["memory_growth"]


def test_sample_memory_fixed_async() -> None:
    s, diags = _real(_one(require_dir(SAMPLE_LOGS, "sample_logs/") / "memory_fixed_async"))
    d = device(s, "CUDA:0")
    assert d.growth.bytes_per_step == 0.0 and d.growth.steady is False
    assert {p.end_bytes for p in d.per_step} == {369_099_264}
    assert d.fragmentation.events == 0
    assert diags == []


def test_sample_memory_fragmentation() -> None:
    logs = require_dir(SAMPLE_LOGS, "sample_logs/")
    s, diags = _real(_one(logs / "memory_fragmentation"))
    info = _recording_info()["memory"]["memory_fragmentation"]
    d = device(s, "CUDA:0")
    f = d.fragmentation
    # 4 activations per step, each larger than every cached block: 4 new segments a
    # step (3 in the first profiled step: the trace's first event has no "before")
    assert [p.events for p in f.per_step] == [3, 4, 4, 4, 4]
    assert f.steady_state_steps == [3, 4, 5, 6]
    # profiled steps 3..6 are the run's steps 6..9 (3 warm-up, wait, warmup before)
    act = info["activation_bytes_per_step"]
    assert [p.requested_bytes for p in f.per_step[1:]] == [4 * a for a in act[6:10]]
    assert f.requested_bytes == f.reserved_growth_bytes == 2_407_530_496
    assert f.min_cached_free_before_bytes == 1_679_818_240  # 1.56 GiB cached and free
    assert f.reserved_growth_bytes_per_step == 520_093_696.0
    assert f.allocated_peak_growth_bytes_per_step == 4 * 8 * MIB  # 4 x 8 MiB more a step
    # the allocator's own count: 4 segments per step, reserved 4.33 GB at the end
    stats = info["allocator_stats_after_each_step"]
    assert [
        b["segments_current"] - a["segments_current"]
        for a, b in zip(stats, stats[1:], strict=False)
    ] == [4] * 9
    assert d.peak_reserved_bytes == stats[-1]["reserved_bytes"] == 4_330_618_880
    assert ids(diags) == ["memory_fragmentation"]
    frag = diags[0]
    assert frag.severity == "medium"  # 2.9 % of the H200, full in ~280 steps
    assert 250 < frag.evidence["steps_to_capacity"] < 300
    # one count per fact: the title, the evidence and the panel's struct say 16 (the 4
    # steady-state steps); the first step's 3 are in events_per_step only
    assert f.events == 19 and f.steady_state_events == 16
    assert frag.evidence["steady_state_events"] == 16
    assert "events" not in frag.evidence and "reserved_growth_bytes" not in frag.evidence
    assert sum(frag.evidence["events_per_step"].values()) == 19
    gib = frag.evidence["steady_state_reserved_growth_bytes"] / 2**30
    assert gib == pytest.approx(1.94, abs=0.005)
    assert "reserved new memory 16 times" in frag.title
    assert "in 4 steady-state steps" in frag.title
    # sizes in the unit that fits (units.py): was "at least 1,602.0 MiB" beside "(1.94 GiB)"
    assert "(1.94 GiB) in 4" in frag.title
    assert "at least 1.6 GiB sat cached and free" in frag.title
    assert frag.evidence["largest"][0]["requested_bytes"] == 136 * MIB


@pytest.mark.parametrize("run", ["memory_fragmentation_fixed", "memory_fragmentation_expandable"])
def test_sample_fragmentation_fixes(run: str) -> None:
    s, diags = _real(_one(require_dir(SAMPLE_LOGS, "sample_logs/") / run))
    d = device(s, "CUDA:0")
    assert d.fragmentation.events == 0
    assert diags == []
    info = _recording_info()["memory"][run]
    res = [x["reserved_bytes"] for x in info["allocator_stats_after_each_step"]]
    growth = [b - a for a, b in zip(res, res[1:], strict=False)]
    if run == "memory_fragmentation_fixed":  # one padded size: no growth after step 1
        assert growth == [0] * 9
    else:  # expandable segments: after the first steps 20 or 40 MiB a step (the 32 MiB
        # the requests grow by, in 20 MiB pages), not a new segment per request
        assert info["pytorch_cuda_alloc_conf"] == "expandable_segments:True"
        assert set(growth[1:]) == {20 * MIB, 40 * MIB}
        assert sum(growth[1:]) == 260 * MIB  # ~8 x 32 MiB, mapped in 20 MiB pages


NO_FRAGMENTATION_SAMPLES = [
    "dataloader_workers0",
    "dataloader_workers4",
    "ddp",
    "transformer_eager",
    "transformer_compile",
    "memory_leak",
    "memory_fixed",
]


@pytest.mark.parametrize("run", NO_FRAGMENTATION_SAMPLES)
def test_no_fragmentation_on_sample_logs(run: str) -> None:
    s, diags = _real(_one(require_dir(SAMPLE_LOGS, "sample_logs/") / run))
    assert "memory_fragmentation" not in ids(diags)
    # dataloader_workers0/4 and ddp were flagged by 1 - allocated/reserved >= 30 %
    for d in s.devices:
        f = d.fragmentation
        assert (
            f is None
            or len(f.steady_state_steps) < 2
            or not (f.excess_reserved_growth_bytes_per_step or 0)
        )


@pytest.mark.parametrize("run", ["ddp_default", "ddp_tuned", "ddp_straggler", "fsdp"])
def test_no_fragmentation_on_h200x2(h200x2: Path, run: str) -> None:
    files = sorted((h200x2 / run).glob("rank*.pt.trace.json*"))
    assert len(files) == 2
    for path in files:
        s, diags = _real(path.as_posix())
        assert "memory_fragmentation" not in ids(diags)
        assert all((d.fragmentation.events if d.fragmentation else 0) == 0 for d in s.devices)


def test_no_fragmentation_on_case_b0(shared_cases: Path) -> None:
    s, diags = _real(_one(shared_cases / "B0_baseline"))
    d = device(s, "CUDA:0")
    assert d.fragmentation.events == 0
    assert "memory_fragmentation" not in ids(diags)
