"""What every panel needs from a trace, computed once: step windows, devices, GPU busy
intervals, kernel ↔ launch links and name classes.

Step windows (DESIGN.md, Metric definitions): each ``ProfilerStep#N`` CPU range,
extended to the end of the last GPU activity launched from inside it. Windows are then
made to tile time without overlap: a step starts no earlier than the previous one ends,
so per-step sums add up to the whole profiled span. Without markers there is one
pseudo-step from the first to the last event (``has_markers`` is False).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.group_sums import distinct
from tb_kineto_insights.analysis.steps import profiler_steps
from tb_kineto_insights.trace import model as m

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
GPU_WORK_KINDS: tuple[str, ...] = (m.KERNEL, m.MEMCPY, m.MEMSET)


@dataclass
class StepWindows:
    """Step windows, sorted and non-overlapping; arrays of length ``n``.

    ``number``: N of ``ProfilerStep#N`` (0 for the pseudo-step); ``cpu_start_ns`` /
    ``cpu_end_ns``: the marker's own range; ``start_ns`` / ``end_ns``: the window used
    for every per-step metric.
    """

    number: I64
    cpu_start_ns: I64
    cpu_end_ns: I64
    start_ns: I64
    end_ns: I64
    has_markers: bool

    def __len__(self) -> int:
        return int(self.number.size)

    @property
    def dur_ns(self) -> I64:
        return self.end_ns - self.start_ns

    @property
    def total_ns(self) -> int:
        return int(self.dur_ns.sum())

    def host_windows(self) -> tuple[I64, I64]:
        """Host-side windows ``(start_ns, end_ns)``, one per step: the ``ProfilerStep#N``
        CPU range itself, cut at the next marker's start if it runs past it, so the
        windows are sorted and never overlap. Host events (``[memory]`` allocations, CPU
        ops) belong here: in a GPU-bound loop the host runs steps ahead of the GPU, and
        the GPU-extended windows (``start_ns``/``end_ns``) put all of its host events in
        the first step. For the pseudo-step (no markers) this is the pseudo-step."""
        start = self.cpu_start_ns.copy()
        end = self.cpu_end_ns.copy()
        if end.size > 1:
            end[:-1] = np.minimum(end[:-1], start[1:])
        return start, np.maximum(end, start)


@dataclass
class TraceIndex:
    """Shared, precomputed views of one trace (see module docstring)."""

    trace: m.Trace
    #: step windows for GPU time: without the steps whose GPU work the reader quarantined
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
    _name_masks: dict[object, Mask] = field(default_factory=dict)

    def name_class(self, predicate: Callable[[str], bool]) -> Mask:
        """Boolean per interned name id: ``predicate(name)``; cached per predicate."""
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
        """Boolean per row of table ``kind``: the row's name satisfies ``predicate``."""
        table = self.trace.tables[kind]
        if len(table) == 0:
            return np.zeros(0, dtype=np.bool_)
        return self.name_class(predicate)[table.name]

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


def _span(trace: m.Trace) -> tuple[int, int]:
    starts = [int(t.start_ns.min()) for t in trace.tables.values() if len(t)]
    ends = [int(t.end_ns.max()) for t in trace.tables.values() if len(t)]
    if not starts:
        return 0, 0
    return min(starts), max(ends)


def _step_windows(trace: m.Trace, launch_row: dict[str, I64]) -> StepWindows:
    markers = profiler_steps(trace)
    if not markers:
        lo, hi = _span(trace)
        one = np.array([lo], dtype=np.int64)
        two = np.array([hi], dtype=np.int64)
        return StepWindows(np.zeros(1, dtype=np.int64), one, two, one.copy(), two.copy(), False)
    number = np.array([s.number for s in markers], dtype=np.int64)
    cpu_start = np.array([s.start_ns for s in markers], dtype=np.int64)
    cpu_end = np.array([s.end_ns for s in markers], dtype=np.int64)
    ext_end = cpu_end.copy()
    rt = trace.runtime
    for kind in GPU_WORK_KINDS:
        rows = launch_row[kind]
        linked = rows >= 0
        if not linked.any():
            continue
        launch_start = rt.start_ns[rows[linked]]
        step = _containing(launch_start, cpu_start, cpu_end)
        ok = step >= 0
        np.maximum.at(ext_end, step[ok], trace.tables[kind].end_ns[linked][ok])
    start = cpu_start.copy()
    end = ext_end.copy()
    for i in range(1, start.size):  # tile: no overlap with the previous window
        start[i] = max(start[i], end[i - 1])
        end[i] = max(end[i], start[i])
    return StepWindows(number, cpu_start, cpu_end, start, end, True)


def _without_lost_gpu_steps(trace: m.Trace, steps: StepWindows) -> StepWindows:
    """Leave out the steps whose CPU range launched GPU work the reader quarantined
    (``Trace.quarantined_correlations``: a broken timestamp, its GPU time unknown) or, in
    a file cut short inside its GPU section, whose CPU range ends after the last
    surviving runtime call (Kineto writes runtime calls and GPU events together, in time
    order, after the host section: the step's later launches and their GPU work were cut
    off) or that holds a launch call whose GPU event was cut off (CUPTI flushes its
    buffers one after another, each in time order), so no panel counts that time as
    idle; their numbers go to
    ``health.steps_without_gpu_data``. Kept as they are when every step is affected (a
    cut before the GPU section: ``analysis.lost`` says so)."""
    if not steps.has_markers:
        return steps
    rt = trace.runtime
    bad = np.zeros(len(steps), dtype=np.bool_)
    lost = trace.quarantined_correlations
    if lost.size:
        launches = rt.start_ns[np.isin(rt.correlation, lost)]
        hit = _containing(launches, steps.cpu_start_ns, steps.cpu_end_ns)
        bad[hit[hit >= 0]] = True
    gpu_events = sum(len(trace.tables[kind]) for kind in GPU_WORK_KINDS)
    if len(rt) and gpu_events and _file_cut_short(trace):
        bad |= steps.cpu_end_ns > int(rt.start_ns.max())
        orphans = rt.start_ns[_launches_without_gpu_event(trace)]
        hit = _containing(orphans, steps.cpu_start_ns, steps.cpu_end_ns)
        bad[hit[hit >= 0]] = True
    if not bad.any() or bad.all():
        return steps
    trace.health.steps_without_gpu_data = [int(n) for n in steps.number[bad]]
    keep = ~bad
    return StepWindows(
        steps.number[keep],
        steps.cpu_start_ns[keep],
        steps.cpu_end_ns[keep],
        steps.start_ns[keep],
        steps.end_ns[keep],
        True,
    )


def _file_cut_short(trace: m.Trace) -> bool:
    """The reader found the file ending early (``health.damage``: truncated JSON or
    gzip; a bad CRC or length after a whole stream does not count)."""
    return any(
        str(d.get("problem", "")).startswith(
            ("file ends early", "gzip stream ends early", "corrupt gzip")
        )
        and "check" not in str(d.get("problem", ""))
        for d in trace.health.damage
    )


def _launches_without_gpu_event(trace: m.Trace) -> npt.NDArray[np.bool_]:
    """Rows of the runtime calls that launch GPU work (kernel, copy, memset; a
    correlation id) whose correlation no GPU event of the trace carries."""
    rt = trace.runtime
    names = trace.names
    launch_ids = [int(i) for i in distinct(rt.name) if nm.is_launch(names[int(i)])]
    launch = np.isin(rt.name, np.asarray(launch_ids, dtype=rt.name.dtype))
    launch &= rt.correlation >= 0
    seen = np.concatenate([trace.tables[kind].correlation for kind in GPU_WORK_KINDS])
    out = np.zeros(len(rt), dtype=np.bool_)
    out[launch] = ~np.isin(rt.correlation[launch], seen)
    return out


def _containing(points: I64, starts: I64, ends: I64) -> I64:
    """Index of the (possibly overlapping, start-sorted) window holding each point: the
    latest-starting window that contains it, -1 if none."""
    idx = np.searchsorted(starts, points, side="right") - 1
    ok = idx >= 0
    inside = np.zeros(points.size, dtype=np.bool_)
    inside[ok] = points[ok] < ends[idx[ok]]
    return np.where(inside, idx, -1).astype(np.int64)


def build_index(trace: m.Trace) -> TraceIndex:
    """Precompute the shared views of ``trace``. O(n log n) in the number of events."""
    launch_row = _launch_rows(trace)
    all_steps = _step_windows(trace, launch_row)
    steps = _without_lost_gpu_steps(trace, all_steps)
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
    origin = int(steps.start_ns[0]) if len(steps) else 0
    lo, _ = _span(trace)
    return TraceIndex(
        trace=trace,
        steps=steps,
        origin_ns=min(origin, lo) if lo else origin,
        devices=sorted(devices),
        gpu_busy=busy,
        launch_row=launch_row,
        host_steps=all_steps,
    )


__all__ = ["TraceIndex", "StepWindows", "build_index", "GPU_WORK_KINDS", "nm"]
