"""Where each diagnosis can be seen: one moment on the timeline per diagnosis that has a
place in time (``Diagnosis.moment``: a step and a window in it, µs after the step
window's start, as the timeline's ``offset_us``).

What each id points at (the first that exists; none when nothing of it lies in a step
window):

* the idle causes (``gpu_idle_dataloader``: ``data_loading``, ``gpu_idle_host_sync``:
  ``host_sync``, ``gpu_idle_host_untraced``: ``host_untraced``,
  ``optimizer_step_bound``: ``optimizer_step``, ``allocator_churn``: ``allocator``) and
  ``low_gpu_utilization`` (any cause): the longest of the main GPU's listed largest gaps
  whose cause it is (``summary.idle.devices[].largest_gaps``); for ``allocator_churn``
  with no such gap listed, the longest ``cudaMalloc``/``cudaFree`` call in a step;
* ``small_kernel_flood``: the step with the most kernels (``kernels.per_step``), whole;
* ``cudnn_autotune_in_step``: the step with the most autotuning time, whole;
* ``pageable_memcpy``: the longest copy from pageable host memory;
* ``exposed_communication``: the collective with the most exposed time
  (``communication.sequence``);
* ``memory_fragmentation``: the new segment that grew the reserved memory most
  (``memory.devices[].fragmentation.largest``); ``memory_growth`` and
  ``memory_near_capacity``: the moment of the peak (reserved when recorded, else
  allocated), as a 1 µs window;
* ``trace_warmup_step``: the first step, whole; ``trace_unequal_steps``: the longest
  step, whole.

Diagnoses across ranks (``analysis.run_view``) set theirs there, with the worker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.context import TraceIndex
from tb_kineto_insights.schema.communication import CollectiveCall, CommunicationPanel
from tb_kineto_insights.schema.diagnoses import Diagnosis, Moment
from tb_kineto_insights.schema.idle import IdleDevice, IdlePanel
from tb_kineto_insights.schema.kernels import KernelsPanel
from tb_kineto_insights.schema.memory import MemoryDevice, MemoryPanel
from tb_kineto_insights.schema.steps import StepsPanel
from tb_kineto_insights.trace import model as m

#: Diagnosis id → the idle cause its moment is a gap of (None: any cause).
IDLE_CAUSE_OF: dict[str, str | None] = {
    "gpu_idle_dataloader": "data_loading",
    "gpu_idle_host_sync": "host_sync",
    "gpu_idle_host_untraced": "host_untraced",
    "optimizer_step_bound": "optimizer_step",
    "allocator_churn": "allocator",
    "low_gpu_utilization": None,
}
#: Runtime calls of the allocator (``allocator_churn`` without a listed gap).
_ALLOCATOR_CALLS = frozenset({"cudaMalloc", "cudaFree", "hipMalloc", "hipFree"})


def _is_allocator_call(name: str) -> bool:
    """Exactly one of :data:`_ALLOCATOR_CALLS` (a predicate of its own: the index caches
    its mask per predicate)."""
    return name in _ALLOCATOR_CALLS


def moment_at(index: TraceIndex, start_ns: int, end_ns: int, what: str) -> Moment | None:
    """The moment ``[start_ns, end_ns)`` (ns on the trace's clock) in the step window
    holding ``start_ns``; None when no step window holds it."""
    steps = index.steps
    i = int(np.searchsorted(steps.start_ns, start_ns, side="right")) - 1
    if i < 0 or start_ns >= int(steps.end_ns[i]):
        return None
    origin = int(steps.start_ns[i])
    return Moment(
        step=int(steps.number[i]),
        offset_us=(start_ns - origin) / 1000.0,
        length_us=max(end_ns - start_ns, 0) / 1000.0,
        what=what,
    )


def _step_moment(index: TraceIndex, number: int, what: str) -> Moment | None:
    hit = np.flatnonzero(index.steps.number == number)
    if hit.size == 0:
        return None
    i = int(hit[0])
    length = int(index.steps.end_ns[i] - index.steps.start_ns[i])
    return Moment(step=number, offset_us=0.0, length_us=length / 1000.0, what=what)


def _main_device(idle: IdlePanel | None) -> IdleDevice | None:
    if idle is None or not idle.devices:
        return None
    return next((d for d in idle.devices if d.device == idle.main_device), idle.devices[0])


def _gap_moment(idle: IdlePanel | None, cause: str | None) -> Moment | None:
    dev = _main_device(idle)
    best = None
    for g in dev.largest_gaps if dev is not None else []:
        if g.step is None or g.offset_us is None or (cause is not None and g.cause != cause):
            continue
        if best is None or g.length_us > best.length_us:
            best = g
    if best is None or best.step is None or best.offset_us is None:
        return None
    label = cause.replace("_", " ") if cause else best.cause.replace("_", " ")
    return Moment(
        step=best.step,
        offset_us=best.offset_us,
        length_us=best.length_us,
        what=f"the longest GPU idle gap ({label}), {best.length_us:.1f} µs",
    )


def _longest_event(index: TraceIndex, kind: str, rows: np.ndarray, what: str) -> Moment | None:
    """The longest event of ``rows`` (bool mask of table ``kind``) that lies in a step."""
    table = index.trace.tables[kind]
    at = np.flatnonzero(rows)
    for i in at[np.argsort(-table.dur_ns[at], kind="stable")][:64].tolist():
        start = int(table.start_ns[i])
        dur = int(table.dur_ns[i])
        found = moment_at(index, start, start + dur, f"{what}, {dur / 1000:.1f} µs")
        if found is not None:
            return found
    return None


def _allocator_call(index: TraceIndex) -> Moment | None:
    rows = index.rows_where(m.RUNTIME, _is_allocator_call)
    return _longest_event(index, m.RUNTIME, rows, "the longest cudaMalloc/cudaFree call")


def _flood_step(kernels: KernelsPanel | None, index: TraceIndex) -> Moment | None:
    if kernels is None or not kernels.per_step:
        return None
    top = max(kernels.per_step, key=lambda s: (s.count, -s.number))
    return _step_moment(index, top.number, f"the step with the most kernels ({top.count})")


def _autotune_step(index: TraceIndex, d: Diagnosis) -> Moment | None:
    """The step with the most autotuning time, from the diagnosis's own evidence
    (``tuning_us_per_step``, one value per step window in order)."""
    tuning = d.evidence.get("tuning_us_per_step")
    if not isinstance(tuning, list) or not tuning or len(tuning) != len(index.steps):
        return None
    i = max(range(len(tuning)), key=lambda k: (tuning[k], -k))
    if not tuning[i] > 0:
        return None
    return _step_moment(
        index,
        int(index.steps.number[i]),
        f"the step with the most autotuning ({tuning[i]:.0f} µs)",
    )


def _exposed_collective(index: TraceIndex, comm: CommunicationPanel | None) -> Moment | None:
    if comm is None or not comm.sequence:
        return None
    top = max(comm.sequence, key=lambda c: c.exposed_us)
    if top.exposed_us <= 0:
        return None
    return moment_at(
        index,
        top.start_ns,
        top.end_ns,
        f"the collective with the most exposed time ({top.kind} #{top.seq}, "
        f"{top.exposed_us:.1f} µs exposed)",
    )


def _memory_device(memory: MemoryPanel | None) -> MemoryDevice | None:
    if memory is None or not memory.devices:
        return None
    return max(memory.devices, key=lambda d: d.peak_reserved_bytes or d.peak_allocated_bytes)


def _segment(index: TraceIndex, memory: MemoryPanel | None) -> Moment | None:
    dev = _memory_device(memory)
    frag = dev.fragmentation if dev is not None else None
    if frag is None or not frag.largest:
        return None
    top = max(frag.largest, key=lambda e: e.reserved_growth_bytes)
    at = index.origin_ns + round(top.t_us * 1000)
    mib = top.reserved_growth_bytes / 2**20
    return moment_at(
        index, at, at + 1000, f"the new segment that grew reserved memory most (+{mib:.1f} MiB)"
    )


def _peak(index: TraceIndex, memory: MemoryPanel | None) -> Moment | None:
    dev = _memory_device(memory)
    if dev is None:
        return None
    reserved = dev.peak_reserved_us is not None
    t_us = dev.peak_reserved_us if dev.peak_reserved_us is not None else dev.peak_allocated_us
    at = index.origin_ns + round(t_us * 1000)
    which = "reserved" if reserved else "allocated"
    return moment_at(index, at, at + 1000, f"the peak of {which} memory")


def diagnosis_moment(
    d: Diagnosis, index: TraceIndex, panels: Mapping[str, msgspec.Struct]
) -> Moment | None:
    """The moment of one span-level diagnosis (module docstring), or None."""
    idle = panels.get("idle")
    idle = idle if isinstance(idle, IdlePanel) else None
    if d.id in IDLE_CAUSE_OF:
        found = _gap_moment(idle, IDLE_CAUSE_OF[d.id])
        if found is None and d.id == "allocator_churn":
            found = _allocator_call(index)
        return found
    if d.id == "small_kernel_flood":
        kernels = panels.get("kernels")
        return _flood_step(kernels if isinstance(kernels, KernelsPanel) else None, index)
    if d.id == "cudnn_autotune_in_step":
        return _autotune_step(index, d)
    if d.id == "pageable_memcpy":
        rows = index.rows_where(m.MEMCPY, nm.is_pageable_memcpy)
        return _longest_event(index, m.MEMCPY, rows, "the longest pageable copy")
    if d.id == "exposed_communication":
        comm = panels.get("communication")
        return _exposed_collective(index, comm if isinstance(comm, CommunicationPanel) else None)
    memory = panels.get("memory")
    memory = memory if isinstance(memory, MemoryPanel) else None
    if d.id == "memory_fragmentation":
        return _segment(index, memory)
    if d.id in ("memory_growth", "memory_near_capacity"):
        return _peak(index, memory)
    if d.id == "trace_warmup_step" and len(index.steps):
        return _step_moment(index, int(index.steps.number[0]), "the warm-up step")
    if d.id == "trace_unequal_steps" and len(index.steps):
        i = int(np.argmax(index.steps.dur_ns))
        return _step_moment(index, int(index.steps.number[i]), "the longest step")
    return None


def with_moments(
    diagnoses: list[Diagnosis], index: TraceIndex, panels: Mapping[str, msgspec.Struct]
) -> list[Diagnosis]:
    """``diagnoses`` (same order), each with its ``moment`` when it has one."""
    out = []
    for d in diagnoses:
        found = diagnosis_moment(d, index, panels)
        out.append(d if found is None else msgspec.structs.replace(d, moment=found))
    return out


def _span_moment(steps: StepsPanel, call: CollectiveCall, what: str, worker: str) -> Moment | None:
    """A collective of a rank's span as a moment on that rank's timeline."""
    if call.step is None or steps.origin_ns is None:
        return None
    step = next((s for s in steps.steps if s.number == call.step), None)
    if step is None:
        return None
    start = steps.origin_ns + round(step.start_us * 1000)
    return Moment(
        step=step.number,
        offset_us=(call.start_ns - start) / 1000.0,
        length_us=max(call.end_ns - call.start_ns, 0) / 1000.0,
        what=what,
        worker=worker,
    )


def run_moment(
    d: Diagnosis,
    run: Mapping[str, Any],
    workers: Sequence[tuple[str, Any]],
) -> Moment | None:
    """The moment of a diagnosis across ranks (``analysis.run_view``), on one rank's
    timeline (``worker``):

    * ``communication_straggler``: the straggler's worst collective, the matched
      collective where it came last with the largest skew (``run["largest_skews"]``,
      matched to its own entry by process group and sequence key);
    * ``exposed_communication`` (one per rank): that rank's collective with the most
      exposed time.

    ``workers``: ``(worker name, span summary)`` pairs, as ``run_view`` has them."""
    spans = dict(workers)
    if d.id == "communication_straggler":
        worker = str(d.evidence.get("worker"))
        span = spans.get(worker)
        if span is None:
            return None
        rank = d.evidence.get("rank")
        for item in run.get("largest_skews") or []:
            if item.get("last_rank") != rank:
                continue
            call = next(
                (
                    c
                    for c in span.communication.sequence
                    if c.pg == item["pg"] and c.seq == item["seq"] and c.kind == item["kind"]
                ),
                None,
            )
            if call is None:
                continue
            found = _span_moment(
                span.steps,
                call,
                f"the straggler's worst collective ({call.kind} #{call.seq}: the others "
                f"waited {item['skew_us']:.1f} µs for it)",
                worker,
            )
            if found is not None:
                return found
        return None
    if d.id == "exposed_communication" and d.panel == "run":
        worker = str(d.evidence.get("worker"))
        span = spans.get(worker)
        if span is None or not span.communication.sequence:
            return None
        top = max(span.communication.sequence, key=lambda c: c.exposed_us)
        if top.exposed_us <= 0:
            return None
        return _span_moment(
            span.steps,
            top,
            f"the collective with the most exposed time ({top.kind} #{top.seq}, "
            f"{top.exposed_us:.1f} µs exposed)",
            worker,
        )
    return None
