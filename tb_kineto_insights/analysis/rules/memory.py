"""Rules of the ``memory`` area: device memory at risk.

Memory diagnoses cost no step time directly (they end in an out-of-memory error, or in
cudaMalloc / cache-flush stalls the trace does not attribute): ``impact_fraction`` is 0,
at most one of each is raised (the worst device), ``panel`` ``"memory"``, and each one's
severity follows the device memory it puts at risk, as its docstring says.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tb_kineto_insights.analysis.rules.base import Fix, Rule, SpanInput, make_diagnosis
from tb_kineto_insights.analysis.rules.moments import memory_device, moment_at
from tb_kineto_insights.analysis.units import fmt_bytes
from tb_kineto_insights.schema.diagnoses import Diagnosis, Moment
from tb_kineto_insights.schema.memory import LiveByOp, MemoryDevice

#: Bytes in a MiB.
MIB = 1024.0 * 1024.0


def _devices(inp: SpanInput) -> list[MemoryDevice]:
    """The memory panel's devices (the rules that read them need the panel)."""
    memory = inp.memory
    return memory.devices if memory is not None else []


def _memory_diagnosis(
    id_: str, severity: str, title: str, evidence: dict[str, Any], recommendation: str
) -> Diagnosis:
    """A memory diagnosis: panel ``memory``, ``impact_fraction`` 0."""
    return make_diagnosis(id_, severity, title, evidence, recommendation, "memory", 0.0)


def _mib(x: float) -> str:
    """A size in the IEC unit that fits it (``units.fmt_bytes``): "16.0 MiB", "1.6 GiB"
    (always in MiB, a title would say "1,602.0 MiB" beside "1.94 GiB")."""
    return fmt_bytes(x)


def _gib(x: float) -> str:
    return f"{x / MIB / 1024:,.2f} GiB"


def _steps(x: float) -> str:
    return f"{x:,.0f}"


def _leaking_group(dev: MemoryDevice, min_steps: int) -> LiveByOp | None:
    """The live-at-end group most likely to be the leak: allocations made in the most
    steps (at least ``min_steps`` or all the steps), then the most bytes."""
    groups = dev.live_at_end.by_op if dev.live_at_end is not None else []
    if not groups:
        return None
    n_steps = len(dev.per_step)
    need = min(min_steps, n_steps) if n_steps else 1
    spread = [g for g in groups if len(g.steps) >= max(need, 2)]
    pool = spread or groups
    return max(pool, key=lambda g: (g.bytes, len(g.steps)))


def _growth_diag(inp: SpanInput) -> Diagnosis | None:
    """``memory_growth``: step-end allocated memory grows steadily (``growth.steady``).

    Severity follows how soon the growth fills the device: ``steps_to_capacity`` =
    (``totalGlobalMem`` − peak allocated) / bytes per step; ``high`` when that is at most
    ``th.memory_growth_high_steps_to_capacity``, else ``medium`` (also when the device's
    memory is unknown: a leak is a bug, its deadline is what is unknown).
    """
    devices, th = _devices(inp), inp.th
    # steady implies a fitted slope (MemoryGrowth: steady needs bytes_per_step and r2)
    steady = [d for d in devices if d.growth.steady and d.growth.bytes_per_step is not None]
    if not steady:
        return None
    dev = max(steady, key=lambda d: d.growth.bytes_per_step or 0.0)
    g = dev.growth
    slope = float(g.bytes_per_step or 0.0)
    group = _leaking_group(dev, th.memory_growth_min_steps)
    to_capacity = None
    cap = dev.capacity_bytes
    if cap and dev.has_totals:
        to_capacity = max(0.0, (cap - dev.peak_allocated_bytes) / slope)
    severity = (
        "high"
        if to_capacity is not None and to_capacity <= th.memory_growth_high_steps_to_capacity
        else "medium"
    )
    where = ""
    if group is not None:
        op = group.op or "code outside any recorded op"
        where = f"; allocations made by {op} stay alive"
    full = (
        f"; at this rate the device's {_gib(cap)} are allocated in ~{_steps(to_capacity)} steps"
        if to_capacity is not None and cap
        else ""
    )
    title = (
        f"Allocated memory on {dev.device} grows {_mib(slope)} per step "
        f"over {g.steps_used} steps (r² {g.r2:.2f}){where}{full}"
    )
    evidence: dict[str, Any] = {
        "device": dev.device,
        "bytes_per_step": slope,
        "r2": g.r2,
        "steps_used": g.steps_used,
        "step_end_bytes": [s.end_bytes for s in dev.per_step],
        "live_at_end_bytes": dev.live_at_end.bytes if dev.live_at_end is not None else None,
        "op": group.op if group else None,
        "op_input_shapes": group.input_shapes if group else None,
        "op_live_count": group.count if group else None,
        "op_live_bytes": group.bytes if group else None,
        "op_steps": group.steps if group else None,
        "peak_allocated_bytes": dev.peak_allocated_bytes,
        "capacity_bytes": cap,
        "steps_to_capacity": to_capacity,
        "high_steps_to_capacity": th.memory_growth_high_steps_to_capacity,
    }
    op_hint = f" The tensors still alive come from {group.op}." if group and group.op else ""
    return _memory_diagnosis(
        "memory_growth",
        severity,
        title,
        evidence,
        "Something keeps a reference to tensors from every step, usually with their "
        "autograd graph: accumulate metrics as numbers (loss.item(), or "
        "tensor.detach().cpu()) instead of appending GPU tensors or losses to a list, "
        "call .detach() on anything kept across steps (running averages, caches, "
        "outputs for logging), and move collected metrics to the CPU; appending "
        "un-detached losses keeps each step's whole graph alive." + op_hint,
    )


def _fragmentation_diag(inp: SpanInput) -> Diagnosis | None:
    """``memory_fragmentation``: the caching allocator reserved new segments although its
    cached free bytes covered the request, in at least ``th.fragmentation_min_steps``
    profiled steps after the first, and reserved memory grows faster than the allocated
    peak by at least ``th.fragmentation_min_excess_bytes_per_step``
    (``fragmentation`` in the module docstring).

    Severity follows the device memory at risk: ``high`` when the reserved peak is at
    least ``th.fragmentation_high_capacity_fraction`` of ``totalGlobalMem``; ``medium``
    when, at ``reserved_growth_bytes_per_step``, the device would be full within
    ``th.fragmentation_medium_steps_to_capacity`` steps (an extrapolation: the growth
    stops once the cache holds a block for every size); ``low`` otherwise or when the
    device's memory is unknown.
    """
    devices, th = _devices(inp), inp.th
    hits = [
        (d, d.fragmentation)
        for d in devices
        if d.fragmentation is not None
        and len(d.fragmentation.steady_state_steps) >= th.fragmentation_min_steps
        and (d.fragmentation.excess_reserved_growth_bytes_per_step or 0.0)
        >= th.fragmentation_min_excess_bytes_per_step
    ]
    if not hits:
        return None
    dev, f = max(hits, key=lambda hit: hit[1].reserved_growth_bytes)
    cap = dev.capacity_bytes
    peak = dev.peak_reserved_bytes
    rate = f.reserved_growth_bytes_per_step
    share = peak / cap if cap and peak is not None else None
    to_capacity = max(0.0, (cap - peak) / rate) if cap and peak is not None and rate else None
    if share is not None and share >= th.fragmentation_high_capacity_fraction:
        severity = "high"
    elif to_capacity is not None and to_capacity <= th.fragmentation_medium_steps_to_capacity:
        severity = "medium"
    else:
        severity = "low"
    # one set of numbers: the title states the steady-state steps' count and growth, the
    # evidence and the Memory panel the same fields (the first step's are in
    # events_per_step only)
    n_events = f.steady_state_events
    n_bytes = f.steady_state_reserved_growth_bytes
    title = (
        f"The caching allocator on {dev.device} reserved new memory {n_events} times "
        f"({_gib(n_bytes)}) in {len(f.steady_state_steps)} steady-state steps although "
        f"at least {_mib(f.min_cached_free_before_bytes or 0)} sat cached and free each time: "
        "its free blocks did not fit the requests"
    )
    if to_capacity is not None:
        title += f" (at this rate the device is full in ~{_steps(to_capacity)} steps)"
    evidence = {
        "device": dev.device,
        "steady_state_events": n_events,
        "steady_state_reserved_growth_bytes": n_bytes,
        "steady_state_steps": f.steady_state_steps,
        "events_per_step": {str(p.number): p.events for p in f.per_step},
        "min_cached_free_before_bytes": f.min_cached_free_before_bytes,
        "reserved_growth_bytes_per_step": rate,
        "allocated_peak_growth_bytes_per_step": f.allocated_peak_growth_bytes_per_step,
        "excess_reserved_growth_bytes_per_step": f.excess_reserved_growth_bytes_per_step,
        "largest": msgspec.to_builtins(f.largest),
        "peak_reserved_bytes": peak,
        "peak_allocated_bytes": dev.peak_allocated_bytes,
        "capacity_bytes": cap,
        "peak_reserved_fraction_of_capacity": share,
        "steps_to_capacity": to_capacity,
    }
    return _memory_diagnosis(
        "memory_fragmentation",
        severity,
        title,
        evidence,
        "Requests of new sizes (variable-length batches, growing sequence lengths, "
        "changing shapes) do not fit the cached blocks of earlier sizes. Keep shapes "
        "steady: pad variable-length batches to one length or a few bucket lengths, or "
        "preallocate buffers of the largest size and reuse them. Or start the process "
        "with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (read when CUDA is "
        "initialised): a segment then grows in place and its freed tail serves the next, "
        "larger request (measured on an H200 with rising sizes: reserved grew 20-40 "
        "MiB per step instead of 288-544 MiB). Avoid torch.cuda.empty_cache() in the "
        "loop.",
    )


def _capacity_diag(inp: SpanInput) -> Diagnosis | None:
    """``memory_near_capacity``: the peak reserved (allocated when reserved is unknown)
    is at least ``th.near_capacity_fraction`` of ``totalGlobalMem``.

    Severity follows what is really in use: ``high`` when the *allocated* peak is at least
    that share too (little room for a larger batch or a fragmented request); ``medium``
    when only reserved is (the allocator frees its cached blocks and retries before it
    raises out-of-memory, but that flush synchronises and is slow).
    """
    devices, th = _devices(inp), inp.th
    # peak_fraction_of_capacity is set only with a known capacity (_device_summary)
    best: tuple[MemoryDevice, float, int] | None = None
    for d in devices:
        share, cap = d.peak_fraction_of_capacity, d.capacity_bytes
        if share is None or not cap or share < th.near_capacity_fraction:
            continue
        if best is None or share > best[1]:  # the first of equal shares, as max() did
            best = (d, share, cap)
    if best is None:
        return None
    dev, share, cap = best
    alloc_share = dev.peak_allocated_bytes / cap
    return _memory_diagnosis(
        "memory_near_capacity",
        "high" if alloc_share >= th.near_capacity_fraction else "medium",
        f"Peak {dev.peak_basis} memory on {dev.device} is {100 * share:.0f} % of the "
        f"device's {_gib(cap)} (peak allocated {100 * alloc_share:.0f} %)",
        {
            "device": dev.device,
            "peak_fraction_of_capacity": share,
            "peak_basis": dev.peak_basis,
            "peak_reserved_bytes": dev.peak_reserved_bytes,
            "peak_allocated_bytes": dev.peak_allocated_bytes,
            "allocated_fraction_of_capacity": alloc_share,
            "capacity_bytes": cap,
            "threshold_fraction": th.near_capacity_fraction,
        },
        "The job is close to running out of device memory. Lower the peak: mixed precision "
        "(torch.autocast with bfloat16), activation checkpointing "
        "(torch.utils.checkpoint), a smaller micro-batch with gradient accumulation, "
        "optimizer state sharding (FSDP / ZeroRedundancyOptimizer). When much of it is "
        "reserved but not allocated, see memory_fragmentation (if raised) before the "
        "allocator settings.",
    )


def _segment(d: Diagnosis, inp: SpanInput) -> Moment | None:
    """The new segment that grew the reserved memory most
    (``memory.devices[].fragmentation.largest``), as a 1 µs window."""
    dev = memory_device(inp.memory)
    frag = dev.fragmentation if dev is not None else None
    if frag is None or not frag.largest:
        return None
    top = max(frag.largest, key=lambda e: e.reserved_growth_bytes)
    at = inp.index.origin_ns + round(top.t_us * 1000)
    mib = top.reserved_growth_bytes / 2**20
    return moment_at(
        inp.index, at, at + 1000, f"the new segment that grew reserved memory most (+{mib:.1f} MiB)"
    )


def _peak(d: Diagnosis, inp: SpanInput) -> Moment | None:
    """The moment of the memory peak (reserved when recorded, else allocated), as a
    1 µs window."""
    dev = memory_device(inp.memory)
    if dev is None:
        return None
    reserved = dev.peak_reserved_us is not None
    t_us = dev.peak_reserved_us if dev.peak_reserved_us is not None else dev.peak_allocated_us
    at = inp.index.origin_ns + round(t_us * 1000)
    which = "reserved" if reserved else "allocated"
    return moment_at(inp.index, at, at + 1000, f"the peak of {which} memory")


MEMORY_GROWTH = Rule(
    id="memory_growth",
    area="memory",
    label="Memory growth",
    definition="Step-end allocated memory grows steadily over the profiled steps (a "
    "slope with a good fit): something keeps tensors of every step alive; severity "
    "follows how soon the device would be full.",
    panels=("memory",),
    thresholds=("memory_growth_min_steps", "memory_growth_high_steps_to_capacity"),
    check=_growth_diag,
    moment=_peak,
    fix=Fix("tensors kept across steps detached or dropped"),
)
MEMORY_FRAGMENTATION = Rule(
    id="memory_fragmentation",
    area="memory",
    label="Memory fragmentation",
    definition="The caching allocator reserves new segments in steady-state steps "
    "although its cached free bytes covered the requests, and reserved memory grows "
    "faster than the allocated peak.",
    panels=("memory",),
    thresholds=(
        "fragmentation_min_steps",
        "fragmentation_min_excess_bytes_per_step",
        "fragmentation_high_capacity_fraction",
        "fragmentation_medium_steps_to_capacity",
    ),
    check=_fragmentation_diag,
    moment=_segment,
    fix=Fix("steady shapes or expandable segments"),
)
MEMORY_NEAR_CAPACITY = Rule(
    id="memory_near_capacity",
    area="memory",
    label="Memory near capacity",
    definition="The memory peak (reserved when recorded) is close to the device's "
    "capacity (`totalGlobalMem`).",
    panels=("memory",),
    thresholds=("near_capacity_fraction",),
    check=_capacity_diag,
    moment=_peak,
    fix=Fix("a lower memory peak"),
)
