"""Which time windows are steps, and which of them are steady-state steps.

Step windows (DESIGN.md, Metric definitions): each ``ProfilerStep#N`` CPU range,
extended to the end of the last GPU activity launched from inside it, then made to tile
time without overlap (a step starts no earlier than the previous one ends), so a window
runs from one step's start to the next on the resource that sets the pace: the host's
period when the GPU waits for it, the GPU's when the host runs ahead. Without markers
there is one pseudo-step from the first to the last event (``has_markers`` is False).

Steady-state steps (:func:`steady_steps`): the windows every step-time figure stands on.
Left out, and named for what they are (:class:`LeftOutStep`), are

* a first window that carries a GPU backlog from before the profiled range: a host that
  runs ahead of the GPU has queued the unprofiled steps' work, the GPU is still running
  it when the first profiled step starts on the host, and that window then lasts its
  own GPU period plus the backlog;
* a first window that is still warming up (:data:`WARM_UP`): at least
  ``Thresholds.quality_warmup_ratio`` times the median of the other windows (lazy
  initialisation, ``torch.compile``, cuDNN autotuning, the allocator's first
  ``cudaMalloc``s: work the later steps do not do);
* a last window cut off when the profiler stopped: its launches have no GPU event,
  beyond what the other steps lose the same way.

And the steps whose GPU work the reader lost (:func:`without_lost_gpu_steps`).
"""

from __future__ import annotations

from dataclasses import dataclass

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

    def select(self, keep: Mask) -> StepWindows:
        """The windows where ``keep`` (bool per window) is true, in order."""
        return StepWindows(
            self.number[keep],
            self.cpu_start_ns[keep],
            self.cpu_end_ns[keep],
            self.start_ns[keep],
            self.end_ns[keep],
            self.has_markers,
        )

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


def trace_span(trace: m.Trace) -> tuple[int, int]:
    starts = [int(t.start_ns.min()) for t in trace.tables.values() if len(t)]
    ends = [int(t.end_ns.max()) for t in trace.tables.values() if len(t)]
    if not starts:
        return 0, 0
    return min(starts), max(ends)


def marker_windows(trace: m.Trace, launch_row: dict[str, I64]) -> StepWindows:
    markers = profiler_steps(trace)
    if not markers:
        lo, hi = trace_span(trace)
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
        step = containing(launch_start, cpu_start, cpu_end)
        ok = step >= 0
        np.maximum.at(ext_end, step[ok], trace.tables[kind].end_ns[linked][ok])
    start = cpu_start.copy()
    end = ext_end.copy()
    for i in range(1, start.size):  # tile: no overlap with the previous window
        start[i] = max(start[i], end[i - 1])
        end[i] = max(end[i], start[i])
    return StepWindows(number, cpu_start, cpu_end, start, end, True)


def steps_cut_off(trace: m.Trace, steps: StepWindows) -> Mask:
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
    if not (steps.has_markers and len(rt) and gpu_events and file_cut_short(trace)):
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
    orphans = rt.start_ns[launches_without_gpu_event(trace)]
    hit = containing(orphans, steps.cpu_start_ns, steps.cpu_end_ns)
    bad[hit[hit >= 0]] = True
    return bad


def step_threads(trace: m.Trace, *, old_markers: bool = False) -> set[tuple[int, int]]:
    """``(pid, tid)`` of the threads that run the training step: the thread of the
    ``ProfilerStep#N`` markers and the autograd engine's threads (``autograd::engine::
    evaluate_function: …`` CPU ops; backward runs there on a GPU). They launch GPU work
    in every step of a GPU training loop; a CPU op elsewhere runs beside the step (a
    prefetching loader's thread, a thread pool). Empty without ``ProfilerStep`` markers
    (no step thread to tell them from). The markers are user annotations; with
    ``old_markers``, also the CPU ops old traces wrote them as (the step graph's host
    chain needs the threads there too; the tables keep the narrower rule)."""
    out: set[tuple[int, int]] = set()
    for kind in (m.USER_ANNOTATION, m.CPU_OP) if old_markers else (m.USER_ANNOTATION,):
        ann = trace.tables[kind]
        if len(ann) and not out:
            step_ids = [
                i for i in distinct(ann.name) if _name_starts(trace, int(i), "ProfilerStep#")
            ]
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


def without_lost_gpu_steps(trace: m.Trace, steps: StepWindows) -> StepWindows:
    """Leave out the steps whose CPU range launched GPU work the reader quarantined
    (``Trace.quarantined_correlations``: a broken timestamp, its GPU time unknown) or
    whose GPU work a file cut short inside its GPU section lost (:func:`steps_cut_off`),
    so no panel counts that time as idle; their numbers go to
    ``health.steps_without_gpu_data``. Kept as they are when every step is affected
    (:func:`build_index` has set a cut file's GPU events aside then; quarantined GPU
    work in every step is said by ``trace_data_loss``)."""
    if not steps.has_markers:
        return steps
    rt = trace.runtime
    bad = steps_cut_off(trace, steps)
    lost = trace.quarantined_correlations
    if lost.size:
        launches = rt.start_ns[np.isin(rt.correlation, lost)]
        hit = containing(launches, steps.cpu_start_ns, steps.cpu_end_ns)
        bad[hit[hit >= 0]] = True
    if not bad.any() or bad.all():
        return steps
    trace.health.steps_without_gpu_data = [int(n) for n in steps.number[bad]]
    return steps.select(~bad)


def file_cut_short(trace: m.Trace) -> bool:
    """The reader found the file ending early (``health.damage``: truncated JSON or
    gzip; a bad CRC or length after a whole stream does not count)."""
    return any(
        str(d.get("problem", "")).startswith(
            ("file ends early", "gzip stream ends early", "corrupt gzip")
        )
        and "check" not in str(d.get("problem", ""))
        for d in trace.health.damage
    )


def launches_without_gpu_event(trace: m.Trace) -> npt.NDArray[np.bool_]:
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


def containing(points: I64, starts: I64, ends: I64) -> I64:
    """Index of the (possibly overlapping, start-sorted) window holding each point: the
    latest-starting window that contains it, -1 if none."""
    idx = np.searchsorted(starts, points, side="right") - 1
    ok = idx >= 0
    inside = np.zeros(points.size, dtype=np.bool_)
    inside[ok] = points[ok] < ends[idx[ok]]
    return np.where(inside, idx, -1).astype(np.int64)


#: :attr:`LeftOutStep.reason` of a first window carrying GPU work from before the
#: profiled range
GPU_BACKLOG = "gpu_backlog"
#: :attr:`LeftOutStep.reason` of a first window that runs one-off work (a warm-up step)
WARM_UP = "warm_up"
#: :attr:`LeftOutStep.reason` of a last window whose GPU work the profiler's stop cut off
CUT_OFF = "cut_off"
#: A first window is left out when the GPU runs work from before it, ahead of the
#: step's own first GPU work, for at least this fraction of the median other window: a
#: step figure it would skew by more than noise (one of five steps 5 % long moves their
#: mean by 1 %, about the step-to-step spread of a steady loop).
BACKLOG_MIN_FRACTION = 0.05
#: A last window is left out when this fraction of its GPU launches (2 at least, its last
#: among them), beyond the most any other step loses, have no GPU event.
CUT_OFF_MIN_FRACTION = 0.1


@dataclass(frozen=True)
class LeftOutStep:
    """A step window left out of every steady-state figure, and why.

    ``reason``: :data:`GPU_BACKLOG`, :data:`WARM_UP` or :data:`CUT_OFF`; ``start_ns`` /
    ``end_ns``: the window (trace clock, ns); ``ratio``: its duration / the median of
    the steady-state windows; ``backlog_ns``: GPU busy time inside the window before
    the step's own first GPU work (work launched before the profiled range; 0 unless
    :data:`GPU_BACKLOG`); ``launches_without_gpu_event``: the window's launches whose GPU
    event is missing beyond the most any other step misses (0 unless :data:`CUT_OFF`).
    """

    number: int
    reason: str
    start_ns: int
    end_ns: int
    ratio: float
    backlog_ns: int = 0
    launches_without_gpu_event: int = 0


def steady_steps(
    trace: m.Trace,
    steps: StepWindows,
    launch_row: dict[str, I64],
    gpu_busy: dict[int, iv.Intervals],
    warmup_ratio: float,
    warmup_min_steps: int,
) -> tuple[StepWindows, list[LeftOutStep]]:
    """The steady-state windows of ``steps`` and the windows left out (module
    docstring), in window order. With fewer than 2 windows, or without markers, every
    window is kept (nothing to compare a window with); at least one is always kept.

    Args:
        trace: the trace the windows were cut from.
        steps: its step windows (the lost ones already left out).
        launch_row: per GPU-work kind, the runtime row that launched each event.
        gpu_busy: per device, the union of its kernels, copies and memsets.
        warmup_ratio: a first window at least this many times the median of the others
            is a warm-up step (``Thresholds.quality_warmup_ratio``) ...
        warmup_min_steps: ... when at least this many windows are left to compare
            (``Thresholds.quality_warmup_min_steps``).
    """
    n = len(steps)
    if n < 2 or not steps.has_markers:
        return steps, []
    dur = steps.dur_ns.astype(np.float64)
    keep = np.ones(n, dtype=np.bool_)
    found: list[tuple[int, str, dict[str, int]]] = []
    backlog = _backlog_ns(trace, steps, launch_row, gpu_busy)
    if backlog > 0 and backlog >= BACKLOG_MIN_FRACTION * float(np.median(dur[1:])):
        keep[0] = False
        found.append((0, GPU_BACKLOG, {"backlog_ns": backlog}))
    first = int(np.argmax(keep))
    rest = dur[first + 1 :]
    if n - first >= warmup_min_steps and dur[first] >= warmup_ratio * float(np.median(rest)):
        keep[first] = False
        found.append((first, WARM_UP, {}))
    lost = _launches_lost_at_stop(trace, steps)
    if lost and keep.sum() > 1:
        keep[-1] = False
        found.append((n - 1, CUT_OFF, {"launches_without_gpu_event": lost}))
    if keep.all():
        return steps, []
    median = float(np.median(dur[keep]))
    left = [
        LeftOutStep(
            number=int(steps.number[i]),
            reason=reason,
            start_ns=int(steps.start_ns[i]),
            end_ns=int(steps.end_ns[i]),
            ratio=round(float(dur[i]) / median, 3) if median > 0 else 0.0,
            **counts,
        )
        for i, reason, counts in found
    ]
    return steps.select(keep), left


def _backlog_ns(
    trace: m.Trace,
    steps: StepWindows,
    launch_row: dict[str, I64],
    gpu_busy: dict[int, iv.Intervals],
) -> int:
    """GPU busy time (the busiest device) in the first window before the first GPU
    event launched from the first step's CPU range: work queued before it. 0 when the
    step launched no GPU work the trace links to its launch call (nothing to tell its
    own work from earlier work by)."""
    lo, cpu_hi = int(steps.cpu_start_ns[0]), int(steps.cpu_end_ns[0])
    first_own = int(steps.end_ns[0])
    rt_start = trace.runtime.start_ns
    for kind in GPU_WORK_KINDS:
        rows = launch_row[kind]
        linked = rows >= 0
        if not linked.any():
            continue
        at = rt_start[rows[linked]]
        own = (at >= lo) & (at < cpu_hi)
        if own.any():
            first_own = min(first_own, int(trace.tables[kind].start_ns[linked][own].min()))
    if first_own >= int(steps.end_ns[0]):
        return 0  # no GPU work of its own to have been delayed (or no launch links)
    hi = max(lo, first_own)
    window = (np.array([lo], dtype=np.int64), np.array([hi], dtype=np.int64))
    return max((iv.total(iv.intersect(b, window)) for b in gpu_busy.values()), default=0)


def _launches_lost_at_stop(trace: m.Trace, steps: StepWindows) -> int:
    """The last window's launches without a GPU event beyond the most any other window
    has, when the profiler's stop cut its GPU work off: at least
    :data:`CUT_OFF_MIN_FRACTION` of its launches and 2 or more, its last launch among
    them (a cut loses the tail); 0 otherwise, and for a file cut short
    (:func:`steps_cut_off` handles that)."""
    rt = trace.runtime
    if not len(rt) or file_cut_short(trace):
        return 0
    names = trace.names
    launch_ids = [int(i) for i in distinct(rt.name) if nm.is_launch(names[int(i)])]
    launch = np.isin(rt.name, np.asarray(launch_ids, dtype=rt.name.dtype)) & (rt.correlation >= 0)
    step = containing(rt.start_ns, steps.cpu_start_ns, steps.cpu_end_ns)
    n = len(steps)
    inside = (step >= 0) & launch
    launches = np.bincount(step[inside], minlength=n)
    orphan = launches_without_gpu_event(trace)
    lost = np.bincount(step[inside & orphan], minlength=n)
    extra = int(lost[-1] - lost[:-1].max())
    in_last = np.flatnonzero(inside & (step == n - 1))
    if extra < max(2, CUT_OFF_MIN_FRACTION * int(launches[-1])) or not orphan[in_last[-1]]:
        return 0
    return extra
