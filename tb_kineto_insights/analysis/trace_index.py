"""What every panel needs from a trace, computed once: step windows, devices, GPU busy
intervals, kernel ↔ launch links and name classes.

Step windows (DESIGN.md, Metric definitions): each ``ProfilerStep#N`` CPU range,
extended to the end of the last GPU activity launched from inside it. Windows are then
made to tile time without overlap: a step starts no earlier than the previous one ends,
so per-step sums add up to the whole profiled span. Without markers there is one
pseudo-step from the first to the last event (``has_markers`` is False).
"""

from __future__ import annotations

import dataclasses
import functools
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

    def step_of(self, ts_ns: I64) -> I64:
        """Per time ``ts_ns`` (ns on the trace's clock), the index of the step window
        holding it (``[start_ns, end_ns)``); -1 outside every window. The one rule for
        "which step": an event belongs to the step its start lies in."""
        return iv.window_index(ts_ns, self.start_ns, self.end_ns)

    def host_step_of(self, ts_ns: I64) -> I64:
        """As :meth:`step_of`, in the host windows (:meth:`host_windows`): for host-side
        events (allocations, CPU ops)."""
        return iv.window_index(ts_ns, *self.host_windows())

    def per_step(self, total: float) -> float | None:
        """``total`` (summed over the steps) as a mean per step; None without steps (a
        mean over no step is undefined, not 0): for the fields that can say so."""
        n = len(self)
        return total / n if n else None

    def mean_per_step(self, total: float) -> float:
        """:meth:`per_step` for a field that is always a number: 0.0 without steps (a
        total over no step is 0, and so is its mean)."""
        mean = self.per_step(total)
        return 0.0 if mean is None else mean

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
    #: GPU events (kernels, copies, memsets, GPU annotations) read from a file cut short
    #: inside its GPU section that covers no step whole (every step lost some of its GPU
    #: work): set aside, as if lost (:func:`build_index`; ``analysis.lost`` says so)
    gpu_events_set_aside: int = 0
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


def _steps_cut_off(trace: m.Trace, steps: StepWindows) -> Mask:
    """Per step: whether a file cut short inside its GPU section (some GPU event
    survived) lost GPU work of that step. Kineto writes the GPU section after the host
    section as one block per launching thread (its runtime calls in time order, each
    launch's GPU event beside it; ``sample_logs/optimizer_per_param``: the autograd
    thread's block, then the main thread's), so a cut keeps the blocks written before
    it whole, the block it falls in up to some moment, and loses the blocks after it.
    A step has lost GPU work when

    * its CPU range ends after the last launch call kept on some launching thread (the
      earliest such moment bounds what is known whole: the thread cut off, or one that
      launches no more), or
    * it holds a launch call whose GPU event was cut off, or
    * a thread that launches work in every GPU training step kept no launch call at all
      (its block came after the cut): the ``ProfilerStep`` thread, or an autograd engine
      thread (``autograd::engine::evaluate_function: …`` ops): then every step.

    All false for a whole file, or a cut before the GPU section."""
    rt = trace.runtime
    bad = np.zeros(len(steps), dtype=np.bool_)
    gpu_events = sum(len(trace.tables[kind]) for kind in GPU_WORK_KINDS)
    if not (steps.has_markers and len(rt) and gpu_events and _file_cut_short(trace)):
        return bad
    names = trace.names
    launch_ids = [int(i) for i in distinct(rt.name) if nm.is_launch(names[int(i)])]
    launch = np.isin(rt.name, np.asarray(launch_ids, dtype=rt.name.dtype))
    if not launch.any():
        bad[:] = True
        return bad
    threads = np.stack([rt.pid[launch], rt.tid[launch]], axis=1)
    keys, inverse = np.unique(threads, axis=0, return_inverse=True)
    last = np.full(len(keys), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last, inverse.ravel(), rt.start_ns[launch])
    bad |= steps.cpu_end_ns > int(last.min())
    launching = {(int(p), int(t)) for p, t in keys}
    if not step_threads(trace) <= launching:
        bad[:] = True
        return bad
    orphans = rt.start_ns[_launches_without_gpu_event(trace)]
    hit = _containing(orphans, steps.cpu_start_ns, steps.cpu_end_ns)
    bad[hit[hit >= 0]] = True
    return bad


def step_threads(trace: m.Trace) -> set[tuple[int, int]]:
    """``(pid, tid)`` of the threads that run the training step: the thread of the
    ``ProfilerStep#N`` markers and the autograd engine's threads (``autograd::engine::
    evaluate_function: …`` CPU ops; backward runs there on a GPU). They launch GPU work
    in every step of a GPU training loop; a CPU op elsewhere runs beside the step (a
    prefetching loader's thread, a thread pool). Empty without ``ProfilerStep`` markers
    (no step thread to tell them from)."""
    out: set[tuple[int, int]] = set()
    ann = trace.tables[m.USER_ANNOTATION]
    if len(ann):
        step_ids = [i for i in distinct(ann.name) if _name_starts(trace, int(i), "ProfilerStep#")]
        rows = np.isin(ann.name, np.asarray(step_ids, dtype=ann.name.dtype))
        out.update(zip(ann.pid[rows].tolist(), ann.tid[rows].tolist(), strict=True))
    if not out:
        return out
    ops = trace.tables[m.CPU_OP]
    if len(ops):
        engine = [
            i
            for i in distinct(ops.name)
            if _name_starts(trace, int(i), "autograd::engine::evaluate_function")
        ]
        rows = np.isin(ops.name, np.asarray(engine, dtype=ops.name.dtype))
        out.update(zip(ops.pid[rows].tolist(), ops.tid[rows].tolist(), strict=True))
    return out


def _name_starts(trace: m.Trace, name_id: int, prefix: str) -> bool:
    """Whether interned name ``name_id`` of ``trace`` starts with ``prefix``."""
    return trace.names[name_id].startswith(prefix)


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


def _without_lost_gpu_steps(trace: m.Trace, steps: StepWindows) -> StepWindows:
    """Leave out the steps whose CPU range launched GPU work the reader quarantined
    (``Trace.quarantined_correlations``: a broken timestamp, its GPU time unknown) or
    whose GPU work a file cut short inside its GPU section lost (:func:`_steps_cut_off`),
    so no panel counts that time as idle; their numbers go to
    ``health.steps_without_gpu_data``. Kept as they are when every step is affected
    (:func:`build_index` has set a cut file's GPU events aside then; quarantined GPU
    work in every step is said by ``trace_data_loss``)."""
    if not steps.has_markers:
        return steps
    rt = trace.runtime
    bad = _steps_cut_off(trace, steps)
    lost = trace.quarantined_correlations
    if lost.size:
        launches = rt.start_ns[np.isin(rt.correlation, lost)]
        hit = _containing(launches, steps.cpu_start_ns, steps.cpu_end_ns)
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
    """Precompute the shared views of ``trace``. O(n log n) in the number of events.

    A file cut short inside its GPU section where every step lost some of its GPU work
    (:func:`_steps_cut_off` true for all: the cut fell in the first step's GPU events)
    has no step whose GPU numbers can be read; its GPU events are set aside
    (``gpu_events_set_aside``; the index's ``trace`` is a copy without them), so the GPU
    panels say their input was lost instead of reading idle from the missing work. The
    host section before the cut is whole and is kept."""
    launch_row = _launch_rows(trace)
    all_steps = _step_windows(trace, launch_row)
    set_aside = 0
    cut = _steps_cut_off(trace, all_steps)
    if cut.size and cut.all():
        trace, set_aside = _without_gpu_events(trace)
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
        gpu_events_set_aside=set_aside,
    )


__all__ = ["TraceIndex", "StepWindows", "build_index", "step_threads", "GPU_WORK_KINDS", "nm"]
