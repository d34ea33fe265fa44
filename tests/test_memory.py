"""``summary.memory`` and the memory diagnoses: exact numbers on tiny hand-written traces,
then real traces (HTA, the sample-log leak pair, an old trace without Addr/totals).
Real traces: ``test_memory_real.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from conftest import cpu, kernel, write_trace

from tb_kineto_insights.analysis.enclosing_op import innermost_op
from tb_kineto_insights.analysis.memory import device_name, downsample, memory_summary
from tb_kineto_insights.analysis.rules import area_diagnoses
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS
from tb_kineto_insights.analysis.trace_index import build_index
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.memory import MemoryDevice, MemoryPanel
from tb_kineto_insights.trace import model as m
from tb_kineto_insights.trace.reader import read_trace

MIB = 1024 * 1024
GIB = 1024 * MIB


def mem(
    ts: float,
    nbytes: int,
    *,
    addr: int | None = None,
    alloc: int | None = None,
    reserved: int | None = None,
    dtype: int = 1,
    did: int = 0,
    tid: int = 1,
) -> dict[str, Any]:
    """A ``[memory]`` instant event on pid 100 (the pid of ``conftest.cpu``)."""
    args: dict[str, Any] = {"Device Type": dtype, "Device Id": did, "Bytes": nbytes}
    if addr is not None:
        args["Addr"] = addr
    if alloc is not None:
        args["Total Allocated"] = alloc
    if reserved is not None:
        args["Total Reserved"] = reserved
    return {
        "ph": "i",
        "s": "t",
        "name": "[memory]",
        "pid": 100,
        "tid": tid,
        "ts": ts,
        "args": args,
    }


def step(n: int, ts: float, dur: float = 1000.0) -> dict[str, Any]:
    return cpu(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")


def summarize(
    tmp_path: Path, events: list[dict[str, Any]], th: Any = DEFAULT_THRESHOLDS, **root: Any
) -> MemoryPanel:
    trace = read_trace(str(write_trace(tmp_path / "t.json", events, **root)))
    s = memory_summary(build_index(trace), th)
    json.dumps(msgspec.to_builtins(s), allow_nan=False)  # plain, strict JSON
    return s


def device(s: MemoryPanel, name: str) -> MemoryDevice:
    return next(d for d in s.devices if d.device == name)


def ids(diags: list[Diagnosis]) -> list[str]:
    return [d.id for d in diags]


# -- a leak of a fixed size per step ---------------------------------------------------

B = 100 * MIB  # allocated before the trace
LEAK = 4 * MIB  # kept alive every step by aten::addmm
TEMP = 8 * MIB  # allocated and freed every step inside aten::linear
RES = 200 * MIB  # reserved, constant


def leak_events(steps: int = 4) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for k in range(steps):
        s = 1000.0 * k
        events.append(step(k + 1, s))
        events.append(cpu("aten::linear", s + 50, 200))
        addmm = cpu("aten::addmm", s + 100, 100)
        addmm["args"] = {"Input Dims": [[2, 3], [3, 4]]}
        events.append(addmm)
        level = B + k * LEAK
        events.append(mem(s + 150, LEAK, addr=1000 + k, alloc=level + LEAK, reserved=RES))
        # after addmm ended, still inside aten::linear
        events.append(mem(s + 220, TEMP, addr=7, alloc=level + LEAK + TEMP, reserved=RES))
        events.append(mem(s + 350, -TEMP, addr=7, alloc=level + LEAK, reserved=RES))
    return events


def test_fixed_leak_per_step_exact(tmp_path: Path) -> None:
    s = summarize(tmp_path, leak_events())
    assert s.main_device == "CUDA:0" and s.notes == []
    d = device(s, "CUDA:0")
    assert d.has_totals and d.has_addresses and not d.allocated_from_deltas
    assert [(p.number, p.start_bytes, p.peak_bytes, p.end_bytes) for p in d.per_step] == [
        (k + 1, B + k * LEAK, B + (k + 1) * LEAK + TEMP, B + (k + 1) * LEAK) for k in range(4)
    ]
    assert all(p.peak_reserved_bytes == RES for p in d.per_step)
    g = d.growth
    assert g.bytes_per_step == LEAK
    assert g.r2 == pytest.approx(1.0, abs=1e-12)
    assert g.steps_used == 4 and g.steady is True
    assert g.total_bytes == 3 * LEAK
    # allocations never freed: the four leaked blocks, made by the innermost op
    live = d.live_at_end
    assert live.count == 4 and live.bytes == 4 * LEAK
    assert msgspec.to_builtins(live.by_op) == [
        {
            "op": "aten::addmm",
            "input_shapes": "[[2, 3], [3, 4]]",
            "count": 4,
            "bytes": 4 * LEAK,
            "steps": [1, 2, 3, 4],
        }
    ]
    assert d.matching.allocations_freed == 4
    assert msgspec.to_builtins(d.freed_before_window) == {"count": 0, "bytes": 0}
    # largest: the temporaries, from aten::linear (addmm had ended), freed after 130 µs
    top = d.largest_allocations[0]
    assert msgspec.to_builtins(top) == {
        "bytes": TEMP,
        "op": "aten::linear",
        "input_shapes": None,
        "step": 1,
        "t_us": 220.0,
        "freed": True,
        "lifetime_us": 130.0,
    }
    assert [a.bytes for a in d.largest_allocations] == [TEMP] * 4 + [LEAK] * 4
    assert d.largest_allocations[4].freed is False
    assert d.largest_allocations[4].lifetime_us is None
    # peaks and fragmentation: reserved sits at its peak throughout; the most allocated
    # meanwhile is the last step's peak
    assert d.peak_allocated_bytes == B + 4 * LEAK + TEMP
    assert d.peak_reserved_bytes == RES
    assert d.cached_free_at_reserved_peak_fraction == pytest.approx(1 - (B + 4 * LEAK + TEMP) / RES)
    assert d.capacity_bytes is None and d.peak_fraction_of_capacity is None
    # reserved never grows: nothing the cache failed to serve
    assert d.fragmentation.events == 0 and d.fragmentation.new_segment_events == 0

    diags = area_diagnoses("memory", {"memory": s})
    assert ids(diags) == ["memory_growth"]
    growth = diags[0]
    # the device's memory is unknown, so is the deadline: medium, not high
    assert growth.panel == "memory" and growth.severity == "medium"
    assert growth.impact_fraction == 0.0
    assert growth.evidence["steps_to_capacity"] is None
    assert growth.evidence["bytes_per_step"] == LEAK
    assert growth.evidence["op"] == "aten::addmm"
    assert growth.evidence["op_input_shapes"] == "[[2, 3], [3, 4]]"
    assert "aten::addmm" in growth.title and "4.0 MiB per step" in growth.title
    rec = growth.recommendation
    assert ".detach()" in rec and ".item()" in rec and "CPU" in rec
    assert set(msgspec.to_builtins(growth)) == {
        "id",
        "severity",
        "title",
        "evidence",
        "recommendation",
        "panel",
        "impact_fraction",
    }


def test_growth_needs_enough_steps_and_bytes(tmp_path: Path) -> None:
    # two steps only: exact line, but fewer than memory_growth_min_steps (3)
    s = summarize(tmp_path, leak_events(steps=2))
    g = device(s, "CUDA:0").growth
    assert g.bytes_per_step == LEAK and g.steps_used == 2 and g.steady is False
    assert area_diagnoses("memory", {"memory": s}) == []
    # the same leak with a higher byte threshold: not a diagnosis
    th = DEFAULT_THRESHOLDS.replace(memory_growth_min_bytes_per_step=8.0 * MIB)
    s = summarize(tmp_path, leak_events(), th)
    assert device(s, "CUDA:0").growth.steady is False
    assert area_diagnoses("memory", {"memory": s}, th) == []


def test_noisy_memory_is_not_steady_growth(tmp_path: Path) -> None:
    # step-end levels 0, 64, 8, 72, 16 MiB above B: positive slope, poor fit
    ends = [0, 64, 8, 72, 16]
    events: list[dict[str, Any]] = []
    for k, e in enumerate(ends):
        events.append(step(k, 1000.0 * k))
        events.append(mem(1000.0 * k + 500, MIB, addr=5000 + k, alloc=B + e * MIB, reserved=RES))
    s = summarize(tmp_path, events)
    g = device(s, "CUDA:0").growth
    slope = np.polyfit(np.arange(5.0), np.array(ends, dtype=float) * MIB + B, 1)[0]
    assert g.bytes_per_step == pytest.approx(slope)
    assert g.bytes_per_step >= MIB and g.r2 < 0.9 and g.steady is False
    assert area_diagnoses("memory", {"memory": s}) == []


# -- frees of blocks allocated before the window, equal timestamps ----------------------


def test_free_of_block_allocated_before_window(tmp_path: Path) -> None:
    events = [
        step(1, 0),
        step(2, 1000),
        mem(100, -2 * MIB, addr=1, alloc=B - 2 * MIB, reserved=RES),  # allocated before
        mem(200, MIB, addr=2, alloc=B - MIB, reserved=RES),
        mem(1200, -MIB, addr=2, alloc=B - 2 * MIB, reserved=RES),
        mem(1300, 3 * MIB, addr=1, alloc=B + MIB, reserved=RES),  # address reused
        mem(1400, -MIB, addr=9, alloc=B, reserved=RES),  # also allocated before
    ]
    d = device(summarize(tmp_path, events), "CUDA:0")
    assert msgspec.to_builtins(d.freed_before_window) == {"count": 2, "bytes": 3 * MIB}
    # the frees are not negative live memory: only the block at 1300 is still live
    assert d.live_at_end.count == 1 and d.live_at_end.bytes == 3 * MIB
    assert msgspec.to_builtins(d.matching) == {
        "allocations_freed": 1,
        "allocations_live_at_end": 1,
        "reused_without_free": 0,
        "unmatched_frees": 0,
        "events_without_addr": 0,
    }
    # the level before the first event is its total minus its own change
    assert d.per_step[0].start_bytes == B
    assert d.per_step[0].end_bytes == B - MIB
    assert d.per_step[1].start_bytes == B - MIB
    assert d.per_step[1].end_bytes == B
    assert d.peak_allocated_bytes == B + MIB
    assert d.live_at_end.by_op[0].op is None  # no op recorded around it


def test_equal_timestamps(tmp_path: Path) -> None:
    events = [
        step(1, 0),
        cpu("aten::empty", 100, 10),
        # alloc and free at the same ts, same address: freed, lifetime 0
        mem(105, MIB, addr=1, alloc=B + MIB, reserved=RES),
        mem(105, -MIB, addr=1, alloc=B, reserved=RES),
        # free of a block, then a new block at the same address, same ts
        mem(200, 2 * MIB, addr=2, alloc=B + 2 * MIB, reserved=RES),
        mem(300, -2 * MIB, addr=2, alloc=B, reserved=RES),
        mem(300, 4 * MIB, addr=2, alloc=B + 4 * MIB, reserved=RES),
        # a free followed by a second free at the same address: unmatched
        mem(400, -MIB, addr=3, alloc=B + 3 * MIB, reserved=RES),
        mem(410, -MIB, addr=3, alloc=B + 2 * MIB, reserved=RES),
        # two allocations at one address without a free in between
        mem(500, MIB, addr=4, alloc=B + 3 * MIB, reserved=RES),
        mem(510, MIB, addr=4, alloc=B + 4 * MIB, reserved=RES),
    ]
    d = device(summarize(tmp_path, events), "CUDA:0")
    assert msgspec.to_builtins(d.matching) == {
        "allocations_freed": 2,
        "allocations_live_at_end": 2,
        "reused_without_free": 1,
        "unmatched_frees": 1,
        "events_without_addr": 0,
    }
    assert msgspec.to_builtins(d.freed_before_window) == {"count": 1, "bytes": MIB}
    assert d.live_at_end.bytes == 4 * MIB + MIB
    zero = next(a for a in d.largest_allocations if a.t_us == 105.0)
    assert zero.freed is True and zero.lifetime_us == 0.0 and zero.op == "aten::empty"
    four = d.largest_allocations[0]
    assert four.bytes == 4 * MIB and four.freed is False
    two = d.largest_allocations[1]
    assert two.bytes == 2 * MIB and two.freed is True and two.lifetime_us == 100.0
    assert d.peak_allocated_bytes == B + 4 * MIB


def test_step_values_at_window_edges(tmp_path: Path) -> None:
    # an event exactly at the boundary of steps 1 and 2 (ts 1000): it is in step 1's end
    # (last total at or before the end) and step 2's peak, not in step 2's start
    events = [
        step(1, 0),
        step(2, 1000),
        mem(500, MIB, addr=1, alloc=B + MIB, reserved=RES),
        mem(1000, MIB, addr=2, alloc=B + 2 * MIB, reserved=RES),
        mem(1500, -MIB, addr=2, alloc=B + MIB, reserved=RES),
    ]
    d = device(summarize(tmp_path, events), "CUDA:0")
    assert [(p.start_bytes, p.peak_bytes, p.end_bytes, p.events) for p in d.per_step] == [
        (B, B + 2 * MIB, B + 2 * MIB, 2),
        (B + MIB, B + 2 * MIB, B + MIB, 2),
    ]


# -- series, fragmentation, capacity ---------------------------------------------------


def test_downsampling_keeps_the_peak(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = [step(1, 0, 10_000)]
    level = B
    for i in range(1000):
        nbytes = 500 * MIB if i == 617 else (MIB if i % 2 == 0 else -MIB)
        if i == 618:
            nbytes = -500 * MIB
        level += nbytes
        events.append(mem(1.0 + 9.0 * i, nbytes, addr=10**6 + i, alloc=level, reserved=RES + i))
    th = DEFAULT_THRESHOLDS.replace(memory_series_points=20)
    d = device(summarize(tmp_path, events, th), "CUDA:0")
    alloc = d.series.allocated
    assert d.series.points_in == 1000
    assert len(alloc.t_us) <= 20 and len(alloc.t_us) == len(alloc.bytes)
    assert alloc.t_us == sorted(alloc.t_us)
    assert max(alloc.bytes) == B + MIB + 500 * MIB == d.peak_allocated_bytes
    assert alloc.t_us[alloc.bytes.index(max(alloc.bytes))] == 1.0 + 9.0 * 617
    assert alloc.t_us[0] == 1.0 and alloc.t_us[-1] == 1.0 + 9.0 * 999
    reserved = d.series.reserved
    assert len(reserved.t_us) <= 20 and max(reserved.bytes) == RES + 999
    assert min(reserved.bytes) == RES


def test_downsample_bounds_and_extremes() -> None:
    rng = np.random.default_rng(7)
    for n, points in [(5, 10), (1000, 2000), (10_000, 2000), (10_000, 50), (3001, 7)]:
        t = np.sort(rng.integers(0, 10**9, n)).astype(np.int64)
        v = rng.integers(-(10**6), 10**6, n).astype(np.int64)
        keep = downsample(t, v, points)
        assert keep.size <= points
        assert np.all(np.diff(keep) > 0)
        assert int(np.argmax(v)) in keep and int(np.argmin(v)) in keep
        if n <= points:
            assert keep.size == n


def test_cached_free_bytes_are_not_fragmentation_capacity_exact(tmp_path: Path) -> None:
    # 8 GiB reserved, 3 GiB allocated at the peak: the cache holds 5 GiB, but reserved
    # only grows when the cache was empty enough: nothing it failed to serve
    events = [
        step(1, 0),
        mem(100, GIB, addr=1, alloc=GIB, reserved=GIB),
        mem(200, 2 * GIB, addr=2, alloc=3 * GIB, reserved=8 * GIB),  # reserved peak
        mem(300, -2 * GIB, addr=2, alloc=GIB, reserved=8 * GIB),
        mem(400, -GIB, addr=1, alloc=0, reserved=2 * GIB),
    ]
    props = [{"id": 0, "totalGlobalMem": 10 * GIB}, {"id": 1, "totalGlobalMem": 80 * GIB}]
    s = summarize(tmp_path, events, deviceProperties=props)
    d = device(s, "CUDA:0")
    assert d.peak_reserved_bytes == 8 * GIB and d.peak_reserved_us == 200.0
    assert d.allocated_at_reserved_peak_bytes == 3 * GIB
    assert d.cached_free_at_reserved_peak_fraction == 1 - 3 / 8
    assert d.capacity_bytes == 10 * GIB
    assert d.peak_basis == "reserved" and d.peak_fraction_of_capacity == 0.8
    # event 2 grows reserved by 7 GiB for 2 GiB, but only 0 bytes sat cached and free
    f = d.fragmentation
    assert f.new_segment_events == 1 and f.events == 0
    assert area_diagnoses("memory", {"memory": s}) == []
    # the same memory on a 8.5 GiB device: near capacity (reserved, not allocated)
    props = [{"id": 0, "totalGlobalMem": int(8.5 * GIB)}]
    s = summarize(tmp_path, events, deviceProperties=props)
    assert device(s, "CUDA:0").peak_fraction_of_capacity == 8 / 8.5
    diags = area_diagnoses("memory", {"memory": s})
    assert ids(diags) == ["memory_near_capacity"]
    near = diags[0]
    assert near.severity == "medium"  # allocated peak is 3/8.5 of the device
    assert near.evidence["capacity_bytes"] == int(8.5 * GIB)
    assert near.evidence["allocated_fraction_of_capacity"] == 3 / 8.5
    assert "94 %" in near.title and "allocated 35 %" in near.title


# -- fragmentation: new segments while the cache held enough ---------------------------

A0 = 100 * MIB  # allocated before the trace
R0 = GIB  # reserved before the first growth
SIZES = [32 * MIB, 40 * MIB, 48 * MIB, 56 * MIB]  # one request per step, rising


def frag_events(
    sizes: list[int] = SIZES,
    *,
    reserved0: int = R0,
    shortfall: int = 0,
    keep: bool = False,
    first_step_only: bool = False,
) -> list[dict[str, Any]]:
    """Step k (``ProfilerStep#k+1``, 1 ms) requests ``sizes[k]`` at +100 µs; reserved
    grows by ``sizes[k] - shortfall`` there (a new segment when ``shortfall`` is 0); the
    block is freed at +500 µs unless ``keep``. A 512-byte block at 10 µs opens the trace
    (the first event has no "before"). ``first_step_only``: steps 2.. ask for the first
    size again and find it cached (no growth)."""
    events: list[dict[str, Any]] = [
        mem(10, 512, addr=1, alloc=A0 + 512, reserved=reserved0),
        mem(20, -512, addr=1, alloc=A0, reserved=reserved0),
    ]
    res, alloc = reserved0, A0
    for k, size in enumerate(sizes):
        t = 1000.0 * k
        events.append(step(k + 1, t))
        events.append(cpu("aten::empty", t + 90, 20))
        grows = not (first_step_only and k > 0)
        res += size - shortfall if grows else 0
        events.append(mem(t + 100, size, addr=100 + k, alloc=alloc + size, reserved=res))
        alloc += size
        if not keep:
            alloc -= size
            events.append(mem(t + 500, -size, addr=100 + k, alloc=alloc, reserved=res))
    return events


def test_fragmentation_segment_growth_exact(tmp_path: Path) -> None:
    props = [{"id": 0, "totalGlobalMem": 10 * GIB}]
    s = summarize(tmp_path, frag_events(), deviceProperties=props)
    d = device(s, "CUDA:0")
    f = d.fragmentation
    assert f.events == 4 and f.new_segment_events == 4
    assert f.requested_bytes == sum(SIZES) == f.reserved_growth_bytes
    assert [(p.number, p.events, p.requested_bytes) for p in f.per_step] == [
        (k + 1, 1, SIZES[k]) for k in range(4)
    ]
    # before step 1's request the cache held R0 - A0 = 924 MiB; later ones more
    assert f.min_cached_free_before_bytes == R0 - A0
    assert f.steady_state_steps == [2, 3, 4]  # not step 1: the cache may warm up
    assert f.steady_state_events == 3
    assert f.steady_state_reserved_growth_bytes == (40 + 48 + 56) * MIB
    assert f.reserved_growth_bytes_per_step == (40 + 48 + 56) * MIB / 3  # 48 MiB
    assert f.allocated_peak_growth_bytes_per_step == (56 - 32) * MIB / 3  # 8 MiB
    assert f.excess_reserved_growth_bytes_per_step == 40 * MIB
    assert msgspec.to_builtins(f.largest[0]) == {
        "t_us": 3100.0,
        "step": 4,
        "requested_bytes": 56 * MIB,
        "cached_free_before_bytes": R0 + (32 + 40 + 48) * MIB - A0,
        "reserved_before_bytes": R0 + (32 + 40 + 48) * MIB,
        "reserved_growth_bytes": 56 * MIB,
        "op": "aten::empty",
    }
    diags = area_diagnoses("memory", {"memory": s})
    assert ids(diags) == ["memory_fragmentation"]
    frag = diags[0]
    # reserved peak 1 GiB + 176 MiB of 10 GiB; full in (10240 - 1200) / 48 steps
    ev = frag.evidence
    assert ev["peak_reserved_bytes"] == R0 + sum(SIZES)
    assert ev["steps_to_capacity"] == pytest.approx((10 * GIB - R0 - sum(SIZES)) / (48 * MIB))
    assert ev["events_per_step"] == {"1": 1, "2": 1, "3": 1, "4": 1}
    assert ev["steady_state_events"] == 3
    assert ev["steady_state_reserved_growth_bytes"] == (40 + 48 + 56) * MIB
    assert "reserved new memory 3 times (0.14 GiB) in 3 steady-state steps" in frag.title
    assert frag.severity == "medium" and frag.impact_fraction == 0.0
    # the title counts the steady-state steps only: 3 events (40 + 48 + 56 MiB) in 3
    assert "3 times (0.14 GiB) in 3 steady-state steps" in frag.title
    assert "924.0 MiB" in frag.title
    assert "expandable_segments:True" in frag.recommendation
    assert "pad" in frag.recommendation
    # severity follows the memory at risk: reserved peak >= 75 % of the device: high ...
    s = summarize(
        tmp_path, frag_events(), deviceProperties=[{"id": 0, "totalGlobalMem": 1536 * MIB}]
    )
    assert area_diagnoses("memory", {"memory": s})[0].severity == "high"  # 1200 / 1536 = 78 %
    # ... full only in > 1000 steps at this rate, or device memory unknown: low
    s = summarize(
        tmp_path, frag_events(), deviceProperties=[{"id": 0, "totalGlobalMem": 100 * GIB}]
    )
    assert (
        area_diagnoses("memory", {"memory": s})[0].severity == "low"
    )  # (102400 - 1200) / 48 = 2108 steps
    s = summarize(tmp_path, frag_events())
    assert area_diagnoses("memory", {"memory": s})[0].severity == "low"


def test_fragmentation_needs_evidence_the_cache_could_not_serve(tmp_path: Path) -> None:
    def frag(events: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
        s = summarize(tmp_path, events)
        return device(s, "CUDA:0").fragmentation, ids(area_diagnoses("memory", {"memory": s}))

    # reserved grows by less than the request (expandable segments extend a free tail)
    f, found = frag(frag_events(shortfall=8 * MIB))
    assert f.new_segment_events == 0 and f.events == 0 and found == []
    # a leak: every block is kept, the cache holds 16 MiB < each request: nothing
    f, found = frag(frag_events(reserved0=A0 + 16 * MIB, keep=True))
    assert f.new_segment_events == 4 and f.events == 0 and found == ["memory_growth"]
    # small-pool requests (<= 1 MiB) never count, even with the cache full of free bytes
    f, found = frag(frag_events([MIB] * 4))
    assert f.new_segment_events == 4 and f.events == 0 and found == []
    # growth in the first profiled step only: the cache warming up
    f, found = frag(frag_events(first_step_only=True))
    assert f.events == 1 and f.steady_state_steps == [] and found == []
    # kept blocks that split the cache: new segments while 924+ MiB sit free, but the
    # reserved growth is what the allocated peak grows: no excess, the leak is the cause
    f, found = frag(frag_events([32 * MIB] * 4, keep=True))
    assert f.events == 4 and f.steady_state_steps == [2, 3, 4]
    assert f.reserved_growth_bytes_per_step == 32 * MIB
    assert f.allocated_peak_growth_bytes_per_step == 32 * MIB
    assert f.excess_reserved_growth_bytes_per_step == 0.0
    assert found == ["memory_growth"]
    # the same rising sizes as the positive case with a higher minimum request: nothing
    th = DEFAULT_THRESHOLDS.replace(fragmentation_min_request_bytes=64.0 * MIB)
    s = summarize(tmp_path, frag_events(), th)
    assert device(s, "CUDA:0").fragmentation.events == 0
    assert area_diagnoses("memory", {"memory": s}, th) == []


def test_fragmentation_ignores_reserved_totals_left_stale_by_a_release(tmp_path: Path) -> None:
    """``torch.cuda.empty_cache()`` at the end of each step: its cudaFree (at +700 µs)
    returns the segment to the driver without a ``[memory]`` event, so the next request's
    "cached free before" is read from a stale Total Reserved. Steps 2-4's new segments
    follow a release and do not count (3 ignored); step 1's does (nothing was released
    before it) but one step is the cache warming up: no memory_fragmentation."""
    events = frag_events()
    for k in range(4):
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaFree",
                "pid": 100,
                "tid": 1,
                "ts": 1000.0 * k + 700,
                "dur": 30,
                "args": {"correlation": 0},
            }
        )
    s = summarize(tmp_path, events)
    f = device(s, "CUDA:0").fragmentation
    assert f.new_segment_events == 4 and f.events == 1 and f.stale_events_ignored == 3
    assert f.steady_state_steps == []
    assert area_diagnoses("memory", {"memory": s}) == []
    assert (
        device(summarize(tmp_path, frag_events()), "CUDA:0").fragmentation.stale_events_ignored == 0
    )


def test_no_reserved_total_no_fragmentation(tmp_path: Path) -> None:
    events = [step(1, 0), mem(100, MIB, addr=1, alloc=B + MIB)]
    d = device(summarize(tmp_path, events), "CUDA:0")
    assert d.fragmentation is None and d.cached_free_at_reserved_peak_fraction is None


# -- the host runs ahead of the GPU ----------------------------------------------------


def async_events(steps: int = 4) -> list[dict[str, Any]]:
    """A GPU-bound loop: host steps of 100 µs, each launching a 1000 µs kernel; the
    kernels run back to back from 1000 µs, so step k's GPU work ends at 2000 + 1000 k
    while the host finished all four steps by 400 µs. Each step keeps ``LEAK`` and
    frees a ``TEMP``."""
    events: list[dict[str, Any]] = []
    for k in range(steps):
        t = 100.0 * k
        events.append(step(k + 1, t, 100.0))
        launch = cpu("cudaLaunchKernel", t + 10, 5, cat="cuda_runtime")
        launch["args"] = {"correlation": k + 1}
        events.append(launch)
        events.append(kernel("gemm", 1000.0 + 1000.0 * k, 1000.0, corr=k + 1))
        level = B + k * LEAK
        events.append(cpu("aten::mm", t + 15, 10))
        events.append(mem(t + 20, LEAK, addr=1000 + k, alloc=level + LEAK, reserved=RES))
        events.append(mem(t + 30, TEMP, addr=7, alloc=level + LEAK + TEMP, reserved=RES))
        events.append(mem(t + 60, -TEMP, addr=7, alloc=level + LEAK, reserved=RES))
    return events


def test_host_ahead_memory_uses_host_windows_exact(tmp_path: Path) -> None:
    trace = read_trace(str(write_trace(tmp_path / "t.json", async_events())))
    index = build_index(trace)
    us = 1000
    # step 1's window (its kernel starts on an idle GPU 990 µs after its launch) is
    # twice the others: a warm-up step, left out of the steady-state steps
    assert [(w.number, w.reason) for w in index.left_out_steps] == [(1, "warm_up")]
    assert index.steps.number.tolist() == [2, 3, 4]
    st = index.host_steps  # every step: the memory panel's host windows
    # GPU windows: step 1 runs to its kernel's end (2000 µs), the others tile after it
    assert st.start_ns.tolist() == [0, 2000 * us, 3000 * us, 4000 * us]
    assert st.end_ns.tolist() == [2000 * us, 3000 * us, 4000 * us, 5000 * us]
    # the host started step 4 at 300 µs: steps 1-3 were all still on the GPU
    assert st.cpu_start_ns.tolist() == [0, 100 * us, 200 * us, 300 * us]
    in_flight = [int((st.end_ns[:k] > st.cpu_start_ns[k]).sum()) for k in range(4)]
    assert in_flight == [0, 1, 2, 3]
    h_start, h_end = st.host_windows()
    assert h_start.tolist() == [0, 100 * us, 200 * us, 300 * us]
    assert h_end.tolist() == [100 * us, 200 * us, 300 * us, 400 * us]

    s = memory_summary(index)
    d = device(s, "CUDA:0")
    assert [(p.number, p.start_bytes, p.peak_bytes, p.end_bytes, p.events) for p in d.per_step] == [
        (k + 1, B + k * LEAK, B + (k + 1) * LEAK + TEMP, B + (k + 1) * LEAK, 3) for k in range(4)
    ]
    g = d.growth
    assert g.bytes_per_step == LEAK and g.steady is True
    assert d.live_at_end.by_op[0].steps == [1, 2, 3, 4]
    assert [a.step for a in d.largest_allocations[:4]] == [1, 2, 3, 4]
    diags = area_diagnoses("memory", {"memory": s})
    assert ids(diags) == ["memory_growth"]
    assert diags[0].evidence["op"] == "aten::mm"


def test_host_windows_never_overlap() -> None:
    from tb_kineto_insights.analysis.trace_index import StepWindows

    i64 = np.int64
    st = StepWindows(
        number=np.array([1, 2, 3], dtype=i64),
        cpu_start_ns=np.array([0, 100, 250], dtype=i64),
        cpu_end_ns=np.array([150, 200, 400], dtype=i64),  # step 1 runs past step 2's start
        start_ns=np.array([0, 150, 250], dtype=i64),
        end_ns=np.array([150, 250, 400], dtype=i64),
        has_markers=True,
    )
    start, end = st.host_windows()
    assert start.tolist() == [0, 100, 250] and end.tolist() == [100, 200, 400]


def test_devices_by_type_and_id(tmp_path: Path) -> None:
    events = [
        step(1, 0),
        mem(10, 64, addr=1, alloc=64, reserved=0, dtype=0, did=-1),
        mem(20, MIB, addr=2, alloc=MIB, reserved=2 * MIB, dtype=1, did=1),
        mem(30, MIB, addr=3, alloc=MIB, reserved=2 * MIB, dtype=19, did=3),
        mem(40, 4 * MIB, addr=4, alloc=4 * MIB, reserved=4 * MIB, dtype=42, did=0),
    ]
    s = summarize(tmp_path, events)
    assert [d.device for d in s.devices] == ["CPU", "CUDA:1", "MTIA:3", "type 42:0"]
    assert s.main_device == "type 42:0"  # highest allocated peak that is not the CPU
    assert device(s, "CPU").cached_free_at_reserved_peak_fraction is None  # none reserved
    assert device(s, "type 42:0").device_type_name is None
    assert device_name(1, 0) == "CUDA:0" and device_name(0, -1) == "CPU"
    assert device_name(19, 3) == "MTIA:3" and device_name(42, 0) == "type 42:0"


def test_no_memory_events(tmp_path: Path) -> None:
    s = summarize(tmp_path, [step(1, 0), cpu("aten::mm", 10, 10)])
    assert s.devices == [] and s.main_device is None
    assert "profile_memory=True" in s.notes[0]
    assert area_diagnoses("memory", {"memory": s}) == []


# -- old traces ------------------------------------------------------------------------


def test_old_events_without_addr_or_totals(tmp_path: Path) -> None:
    events = [
        step(1, 0),
        step(2, 1000),
        cpu("aten::empty", 90, 20),
        mem(100, -MIB),  # a block from before the trace: the running sum goes below 0
        mem(105, 4 * MIB),
        mem(500, -4 * MIB),
        mem(1200, 2 * MIB),
    ]
    s = summarize(tmp_path, events)
    d = device(s, "CUDA:0")
    assert d.allocated_from_deltas is True and d.has_totals is False
    assert d.has_addresses is False
    assert [(p.start_bytes, p.peak_bytes, p.end_bytes) for p in d.per_step] == [
        (0, 3 * MIB, -MIB),
        (-MIB, MIB, MIB),
    ]
    assert d.series.allocated.bytes == [-MIB, 3 * MIB, -MIB, MIB]
    assert d.series.reserved is None
    assert d.peak_reserved_bytes is None and d.fragmentation is None
    assert d.live_at_end is None and d.freed_before_window is None
    big = d.largest_allocations[0]
    assert big.bytes == 4 * MIB and big.op == "aten::empty"
    assert big.freed is None and big.lifetime_us is None
    notes = " ".join(d.notes)
    assert "Total Allocated" in notes and "Addr" in notes and "running sum" in notes
    assert any(n.startswith("CUDA:0: ") for n in s.notes)
    assert area_diagnoses("memory", {"memory": s}) == []


def test_totals_without_addr(tmp_path: Path) -> None:
    events = [step(1, 0), mem(100, MIB, alloc=B + MIB, reserved=RES)]
    d = device(summarize(tmp_path, events), "CUDA:0")
    assert d.has_totals and not d.allocated_from_deltas
    assert len(d.notes) == 1 and "Addr" in d.notes[0]
    assert d.per_step[0].end_bytes == B + MIB


# -- the op that made an allocation ----------------------------------------------------


def test_innermost_op_matches_brute_force() -> None:
    rng = np.random.default_rng(3)
    # nested ranges (a random tree) plus some partially overlapping ones, two threads
    starts, ends, tids = [], [], []
    for tid in (1, 2):
        stack = [(0, 10**6)]
        for _ in range(400):
            lo, hi = stack[int(rng.integers(len(stack)))]
            if hi - lo < 4:
                continue
            a = int(rng.integers(lo, hi - 2))
            b = int(rng.integers(a + 1, hi + 1))
            stack.append((a, b))
            starts.append(a)
            ends.append(b)
            tids.append(tid)
        for _ in range(30):
            a = int(rng.integers(0, 10**6))
            starts.append(a)
            ends.append(a + int(rng.integers(0, 5000)))
            tids.append(tid)
    order = np.argsort(np.array(starts), kind="stable")
    s = np.array(starts, dtype=np.int64)[order]
    e = np.array(ends, dtype=np.int64)[order]
    t = np.array(tids, dtype=np.int64)[order]
    ops = m.EventTable(
        name=np.zeros(s.size, dtype=np.int32),
        start_ns=s,
        dur_ns=e - s,
        pid=np.full(s.size, 100, dtype=np.int64),
        tid=t,
    )
    q_ts = rng.integers(-10, 10**6 + 10, 3000).astype(np.int64)
    q_tid = rng.integers(1, 4, 3000).astype(np.int64)  # tid 3 has no ops
    got = innermost_op(ops, np.full(3000, 100, dtype=np.int64), q_tid, q_ts)
    for i in range(3000):
        inside = np.nonzero((t == q_tid[i]) & (s <= q_ts[i]) & (e > q_ts[i]))[0]
        want = int(inside.max()) if inside.size else -1  # latest-starting container
        assert got[i] == want, (i, int(q_ts[i]), int(q_tid[i]))


# -- real traces -----------------------------------------------------------------------


# -- real traces recorded for this: async leak pair, fragmentation trio ----------------


def test_downsample_exact_picks_with_ties() -> None:
    # 10 points, 3 buckets over t in [0, 90]: bucket = floor(t * 3 / 91)
    t = np.arange(10, dtype=np.int64) * 10
    v = np.array([5, 1, 1, 9, 9, 3, 4, 7, 0, 7], dtype=np.int64)
    # buckets: [0..3] (t 0..30), [4..6] (t 40..60), [7..9] (t 70..90)
    # per bucket the earliest lowest and the latest highest: 1 (v=1), 3 (v=9) | 5 (3),
    # 4 (9) | 8 (0), 9 (7, the later of the two 7s); plus the first and last samples
    assert downsample(t, v, 8).tolist() == [0, 1, 3, 4, 5, 8, 9]


def test_downsample_sorted_fast_path_matches_the_sort() -> None:
    """The O(n) per-bucket pick equals the (bucket, value, index) sort it replaced."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        n, points = int(rng.integers(1, 120)), int(rng.integers(4, 30))
        t = np.sort(rng.integers(0, int(rng.integers(1, 500)), n)).astype(np.int64)
        v = rng.integers(-3, 4, n).astype(np.int64)  # many ties
        buckets = max((points - 2) // 2, 1)
        span = int(t[-1]) - int(t[0])
        bucket = np.minimum(
            ((t - t[0]).astype(np.float64) * buckets / (span + 1)).astype(np.int64), buckets - 1
        )
        order = np.lexsort((v, bucket))
        b = bucket[order]
        first = np.r_[True, b[1:] != b[:-1]]
        last = np.r_[b[1:] != b[:-1], True]
        want = np.unique(np.concatenate([order[first], order[last], [0, n - 1]]))
        if n <= points:
            want = np.arange(n)
        assert downsample(t, v, points).tolist() == want.tolist()
