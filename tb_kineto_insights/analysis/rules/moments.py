"""Moments: where a diagnosis can be seen on the timeline.

A moment (``Diagnosis.moment``) is a step and a window in it, µs after the step window's
start (the timeline's ``offset_us``); a run-level one also names the worker whose
timeline shows it. Each rule says which moment it points at (its ``moment`` /
``run_moment``); these are the building blocks, each returning None when nothing of it
lies in a step window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tb_kineto_insights.schema.communication import CollectiveCall
from tb_kineto_insights.schema.diagnoses import Moment
from tb_kineto_insights.schema.idle import IdlePanel
from tb_kineto_insights.schema.memory import MemoryDevice, MemoryPanel
from tb_kineto_insights.schema.steps import StepsPanel

if TYPE_CHECKING:
    from tb_kineto_insights.analysis.trace_index import TraceIndex


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


def step_moment(index: TraceIndex, number: int, what: str) -> Moment | None:
    """The whole step window of ``ProfilerStep#number`` (a steady-state step, or one
    left out of them: the timeline shows both); None when there is none."""
    hit = np.flatnonzero(index.steps.number == number)
    if hit.size:
        i = int(hit[0])
        length = int(index.steps.end_ns[i] - index.steps.start_ns[i])
        return Moment(step=number, offset_us=0.0, length_us=length / 1000.0, what=what)
    left = next((w for w in index.left_out_steps if w.number == number), None)
    if left is None:
        return None
    return Moment(
        step=number, offset_us=0.0, length_us=(left.end_ns - left.start_ns) / 1000.0, what=what
    )


def gap_moment(idle: IdlePanel | None, cause: str | None) -> Moment | None:
    """The longest of the main GPU's listed largest gaps (``idle.devices[].largest_gaps``)
    whose cause is ``cause`` (any cause when None)."""
    dev = idle.main_entry() if idle is not None else None
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


def longest_event(index: TraceIndex, kind: str, rows: np.ndarray, what: str) -> Moment | None:
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


def memory_device(memory: MemoryPanel | None) -> MemoryDevice | None:
    """The device with the largest memory peak (reserved when recorded, else
    allocated)."""
    if memory is None or not memory.devices:
        return None
    return max(memory.devices, key=lambda d: d.peak_reserved_bytes or d.peak_allocated_bytes)


def collective_moment(
    steps: StepsPanel, call: CollectiveCall, what: str, worker: str
) -> Moment | None:
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
