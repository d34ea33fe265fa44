"""What every panel needs from a trace, computed once: the steady-state step windows
(:mod:`.step_windows`), devices, GPU busy intervals, kernel ↔ launch links and name
classes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.group_sums import distinct
from tb_kineto_insights.analysis.step_windows import (
    GPU_WORK_KINDS,
    I64,
    LeftOutStep,
    Mask,
    StepWindows,
    marker_windows,
    steady_steps,
    step_threads,
    steps_cut_off,
    trace_span,
    without_lost_gpu_steps,
)
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.trace import model as m


@dataclass
class TraceIndex:
    """Shared, precomputed views of one trace (see module docstring)."""

    trace: m.Trace
    #: the steady-state step windows (:func:`.step_windows.steady_steps`): every
    #: per-step figure stands on these; without the steps whose GPU work the reader
    #: lost, and without the windows left out (``left_out_steps``)
    steps: StepWindows
    origin_ns: int
    devices: list[int]
    #: per device: normalised union of kernel, memcpy and memset intervals
    gpu_busy: dict[int, iv.Intervals]
    #: per GPU-work kind: row of the runtime call that launched each event, -1 if unknown
    launch_row: dict[str, I64]
    #: every step, also those whose GPU work was lost: for host-side events ([memory]
    #: allocations), which a broken kernel timestamp does not touch
    host_steps: StepWindows
    #: GPU events (kernels, copies, memsets, GPU annotations) read from a file cut short
    #: inside its GPU section that covers no step whole (every step lost some of its GPU
    #: work): set aside, as if lost (:func:`build_index`; ``analysis.lost`` says so)
    gpu_events_set_aside: int = 0
    #: windows left out of every steady-state figure, and why (a first window carrying
    #: a GPU backlog, a last window cut off at the profiler's stop), in window order
    left_out_steps: list[LeftOutStep] = field(default_factory=list)
    _name_masks: dict[object, Mask] = field(default_factory=dict)
    #: per (table kind, predicate): the predicate over that table's names only (False
    #: for every other name); per table kind: its distinct name ids
    _kind_masks: dict[tuple[str, object], Mask] = field(default_factory=dict)
    _kind_names: dict[str, list[int]] = field(default_factory=dict)

    def busy_in_steps_ns(self, device: int) -> int:
        """The device's GPU busy time inside the step windows (ns): its union of kernels,
        copies and memsets cut to the windows (which never overlap)."""
        busy = self.gpu_busy.get(device)
        if busy is None:
            return 0
        return int(iv.total(iv.intersect(busy, iv.union(self.steps.start_ns, self.steps.end_ns))))

    @functools.cached_property
    def main_device(self) -> int | None:
        """The main device, one rule for every panel: the GPU with the most busy time
        inside the step windows (:meth:`busy_in_steps_ns`), the lowest id among equals;
        None without GPU work."""
        best: int | None = None
        best_ns = -1
        for device in self.devices:  # sorted: the lowest id wins a tie
            ns = self.busy_in_steps_ns(device)
            if ns > best_ns:
                best, best_ns = device, ns
        return best

    @functools.cached_property
    def cpu_ops_by_external_id(self) -> tuple[I64, I64]:
        """The rows of ``cpu_ops`` that carry an ``External id``, sorted by it (stable),
        and their ids: a GPU event's ``External id`` found by ``searchsorted``."""
        ops = self.trace.cpu_ops
        valid = np.flatnonzero(ops.external_id >= 0)
        order = valid[np.argsort(ops.external_id[valid], kind="stable")]
        return order, ops.external_id[order]

    def name_class(self, predicate: Callable[[str], bool]) -> Mask:
        """Boolean per interned name id: ``predicate(name)``; cached per predicate (a
        module-level function, not a lambda made at each call, which would miss it)."""
        cached = self._name_masks.get(predicate)
        if cached is None:
            cached = np.fromiter(
                (predicate(n) for n in self.trace.names),
                dtype=np.bool_,
                count=len(self.trace.names),
            )
            self._name_masks[predicate] = cached
        return cached

    def rows_where(self, kind: str, predicate: Callable[[str], bool]) -> Mask:
        """Boolean per row of table ``kind``: the row's name satisfies ``predicate``.
        The predicate runs once per distinct name of that table (cached per kind and
        predicate), not over every name of the trace: a runtime table has tens of names
        where the trace has thousands (over every name, the predicates would be a
        sizeable share of the analysis of small traces: ``benchmarks/RESULTS.md``)."""
        table = self.trace.tables[kind]
        if len(table) == 0:
            return np.zeros(0, dtype=np.bool_)
        every = self._name_masks.get(predicate)
        if every is not None:
            return every[table.name]
        mask = self._kind_masks.get((kind, predicate))
        if mask is None:
            ids = self._kind_names.get(kind)
            if ids is None:
                ids = self._kind_names[kind] = distinct(table.name).tolist()
            names = self.trace.names
            mask = np.zeros(len(names), dtype=np.bool_)
            mask[ids] = np.fromiter((predicate(names[i]) for i in ids), np.bool_, len(ids))
            self._kind_masks[(kind, predicate)] = mask
        return mask[table.name]

    def us(self, ns: float | int) -> float:
        """ns → µs as float."""
        return float(ns) / 1000.0


def _launch_rows(trace: m.Trace) -> dict[str, I64]:
    """For each GPU event, the runtime row with the same correlation id (-1 if none)."""
    rt = trace.runtime
    valid = rt.correlation >= 0
    corr = rt.correlation[valid]
    rows = np.nonzero(valid)[0]
    order = np.argsort(corr, kind="stable")
    corr_sorted, rows_sorted = corr[order], rows[order]
    out: dict[str, I64] = {}
    for kind in GPU_WORK_KINDS:
        c = trace.tables[kind].correlation
        if corr_sorted.size == 0 or c.size == 0:
            out[kind] = np.full(c.size, -1, dtype=np.int64)
            continue
        pos = np.clip(np.searchsorted(corr_sorted, c), 0, corr_sorted.size - 1)
        hit = (corr_sorted[pos] == c) & (c >= 0)
        out[kind] = np.where(hit, rows_sorted[pos], -1).astype(np.int64)
    return out


def _without_gpu_events(trace: m.Trace) -> tuple[m.Trace, int]:
    """``trace`` with its GPU events (``m.GPU_KINDS``: kernels, copies, memsets, GPU
    annotations and syncs) left out, and how many there were; the host side, health
    and names shared with ``trace``, which is not changed."""
    tables = dict(trace.tables)
    dropped = 0
    for kind in m.GPU_KINDS:
        if kind in tables:
            dropped += len(tables[kind])
            tables[kind] = m.EventTable()
    return dataclasses.replace(trace, tables=tables), dropped


def build_index(trace: m.Trace, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> TraceIndex:
    """Precompute the shared views of ``trace``. O(n log n) in the number of events.
    ``thresholds``: ``quality_warmup_ratio`` and ``quality_warmup_min_steps`` (the
    warm-up step left out of the steady-state steps).

    A file cut short inside its GPU section where every step lost some of its GPU work
    (:func:`steps_cut_off` true for all: the cut fell in the first step's GPU events)
    has no step whose GPU numbers can be read; its GPU events are set aside
    (``gpu_events_set_aside``; the index's ``trace`` is a copy without them), so the GPU
    panels say their input was lost instead of reading idle from the missing work. The
    host section before the cut is whole and is kept."""
    launch_row = _launch_rows(trace)
    all_steps = marker_windows(trace, launch_row)
    set_aside = 0
    cut = steps_cut_off(trace, all_steps)
    if cut.size and cut.all():
        trace, set_aside = _without_gpu_events(trace)
        launch_row = _launch_rows(trace)
        all_steps = marker_windows(trace, launch_row)
    kept = without_lost_gpu_steps(trace, all_steps)
    devices: set[int] = set()
    for kind in GPU_WORK_KINDS:
        devices.update(int(d) for d in distinct(trace.tables[kind].device))
    busy: dict[int, iv.Intervals] = {}
    for dev in sorted(devices):
        starts, ends = [], []
        for kind in GPU_WORK_KINDS:
            t = trace.tables[kind]
            sel = t.device == dev
            starts.append(t.start_ns[sel])
            ends.append(t.end_ns[sel])
        busy[dev] = iv.union(np.concatenate(starts), np.concatenate(ends))
    steps, left_out = steady_steps(
        trace,
        kept,
        launch_row,
        busy,
        thresholds.quality_warmup_ratio,
        thresholds.quality_warmup_min_steps,
    )
    origin = int(kept.start_ns[0]) if len(kept) else 0
    lo, _ = trace_span(trace)
    return TraceIndex(
        trace=trace,
        steps=steps,
        origin_ns=min(origin, lo) if lo else origin,
        devices=sorted(devices),
        gpu_busy=busy,
        launch_row=launch_row,
        host_steps=all_steps,
        gpu_events_set_aside=set_aside,
        left_out_steps=left_out,
    )


__all__ = [
    "GPU_WORK_KINDS",
    "I64",
    "LeftOutStep",
    "Mask",
    "StepWindows",
    "TraceIndex",
    "build_index",
    "nm",
    "step_threads",
]
