"""``summary.idle``: where each GPU waits inside the step windows, and why.

An idle gap is a maximal interval inside a step window where the device runs no kernel,
memcpy or memset (gaps are cut at step boundaries). Its cause is read from the *launching
host thread*: the thread that launched the GPU work that ends the gap (else the work
before it, else the thread of the ProfilerStep markers, the *step thread*).

Attribution (DESIGN.md, Metric definitions):

1. A gap that opens as a host synchronization on that thread returns belongs wholly to
   ``host_sync``: the host drained the queue instead of running ahead. Likewise a gap
   that opens while the thread is inside a device-memory allocation call (``cudaFree``,
   ``cudaMalloc``, HIP's: :func:`~tb_kineto_insights.analysis.names.is_allocator_call`)
   belongs wholly to ``allocator``: ``cudaFree`` synchronises the device (the caching
   allocator releasing its cache: ``torch.cuda.empty_cache()``), and what the host does
   until the GPU has work again is the price of that release. "Opens as it
   returns": the sync range returned within ``sync_return_tolerance_us`` of the gap's
   start and started no later than the gap (for a CUDA runtime sync call, no later than
   that tolerance after it: ``x.cpu()`` copies, then synchronizes; see
   :func:`_opened_by_sync`).
2. Otherwise each idle microsecond goes to what the thread was doing then, first match
   in :data:`CAUSE_NAMES` order: ``data_loading`` (``enumerate(DataLoader)#…``),
   ``host_sync`` (``*Synchronize``, synchronous copies, ``aten::item``,
   ``aten::_local_scalar_dense``), ``allocator`` (``cudaMalloc``/``cudaFree`` calls),
   ``optimizer_step`` (``Optimizer.step#…``),
   ``launching`` (any runtime call), ``cpu_ops`` (any other op), then, when no traced
   range covers the moment:

   * ``host_untraced``: the moment lies inside a host ``ProfilerStep#N`` range (the CPU
     marker's own span) and the step thread is not in a traced op either: the host is
     running the step but outside every op the profiler records (untraced Python, a
     ``time.sleep``, file or network I/O, the autograd engine starting up);
   * ``nothing_recorded``: the rest: outside every host ProfilerStep range (a window's
     GPU-only tail, between steps, no markers at all), or while another thread, the
     step thread, ran traced ops.

   ``python_function`` ranges (``with_stack=True``) are not ops here: Python code shows
   as ``host_untraced``.

With Python stacks, each idle nanosecond also goes to the user Python frame the
launching thread was in at that moment, with its cause (:mod:`.python_frames`: library
frames folded into the nearest user frame): ``devices[].python_frames``, and the frame
that held most of each listed gap (``largest_gaps[].python_frame``). A sync-opened gap's
time in another frame than the one open as it opened (the frame that synchronised) is
``after_sync_us``: what the host did after the sync. The causes and their numbers do not
depend on the frames (proved on ``sample_logs/stacks_*`` and ``capture_full`` with and
without their ``python_function`` events, ``tests/test_stacks_real.py``).

Launch-bound idle before short kernels (``devices[].short_kernels``, the cost of
``small_kernel_flood``): see :func:`launch_bound_gaps`.

Cost: numpy throughout; the Python loops run once per launching thread, per cause and
per listed gap, never per gap or event. Gaps are grouped by thread with one stable
``lexsort`` (:func:`_by_thread`; ``np.unique(axis=0)`` sorted the rows as records), the
listed largest gaps come from a partition (:func:`_longest_first`), a listed gap's
thread rows are selected once (:func:`_op_at`), sums per step are exact ``bincount``
sums (:mod:`.group_sums`). The panel took 0.77 s CPU on a 250 MB trace (90k gaps) and
0.32 s on the GPT trace (149 MB) before these changes, 0.30 s and 0.12 s after; what
is left is mostly ``searchsorted`` in the interval algebra.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis import python_frames as pf
from tb_kineto_insights.analysis.group_sums import int_sums, int_sums_2d
from tb_kineto_insights.analysis.host_activity import (
    CAUSE_NAMES,
    CAUSE_WORDS,
    TRACED,
    TRACED_NAMES,
    rows_of,
    step_thread_of,
)
from tb_kineto_insights.analysis.lost import gpu_lost_note
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.trace_index import GPU_WORK_KINDS, TraceIndex
from tb_kineto_insights.schema.idle import (
    HostThread,
    IdleCause,
    IdleDevice,
    IdleGap,
    IdlePanel,
    IdleStep,
    OpIdle,
    OptimizerKernel,
    OptimizerStepCost,
    ShortKernelCost,
)
from tb_kineto_insights.schema.kernels import HistogramBin
from tb_kineto_insights.trace import model as m

#: Gap-length histogram edges in µs (last bin open-ended).
GAP_EDGES_US: tuple[float, ...] = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class _ThreadActivity:
    """Per (pid, tid): normalised interval sets of each cause, plus raw ranges for naming."""

    def __init__(self, index: TraceIndex) -> None:
        self.index = index
        trace = index.trace
        self.rt = trace.runtime
        parts: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = {
            c: [] for c in TRACED_NAMES
        }

        def add(cause: str, kind: str, mask: np.ndarray) -> None:
            t = trace.tables[kind]
            parts[cause].append((t.pid[mask], t.tid[mask], t.start_ns[mask], t.end_ns[mask]))

        for cause in TRACED:
            for kind in cause.kinds:
                add(cause.name, kind, rows_of(index, cause, kind))
        rt_sync = index.rows_where(m.RUNTIME, nm.is_sync)
        self._runtime_sync = (
            self.rt.pid[rt_sync],
            self.rt.tid[rt_sync],
            self.rt.start_ns[rt_sync],
            self.rt.end_ns[rt_sync],
        )
        self.parts = {c: _concat(p) for c, p in parts.items()}
        self._cache: dict[tuple[int, int], dict[str, iv.Intervals]] = {}

    def sets(self, thread: tuple[int, int]) -> dict[str, iv.Intervals]:
        cached = self._cache.get(thread)
        if cached is None:
            cached = {}
            for cause, (pid, tid, s, e) in self.parts.items():
                sel = (pid == thread[0]) & (tid == thread[1])
                cached[cause] = iv.union(s[sel], e[sel])
            self._cache[thread] = cached
        return cached

    def traced(self, thread: tuple[int, int]) -> iv.Intervals:
        """Union of every traced range (op, annotation, runtime call) on the thread,
        ProfilerStep markers excluded."""
        sets = self.sets(thread)
        starts = np.concatenate([sets[c][0] for c in TRACED_NAMES])
        ends = np.concatenate([sets[c][1] for c in TRACED_NAMES])
        return iv.union(starts, ends)

    def sync_calls(
        self, thread: tuple[int, int], runtime_only: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Sync ranges on the thread sorted by end: (starts, ends); with
        ``runtime_only`` only CUDA/HIP runtime sync calls (``cudaStreamSynchronize``...),
        which always wait for the GPU (``aten::item`` of a CPU tensor does not)."""
        pid, tid, s, e = self._runtime_sync if runtime_only else self.parts["host_sync"]
        sel = (pid == thread[0]) & (tid == thread[1])
        s, e = s[sel], e[sel]
        order = np.argsort(e, kind="stable")
        return s[order], e[order]


def _concat(
    items: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    if not items:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z, z
    return tuple(np.concatenate([it[k] for it in items]) for k in range(4))  # type: ignore[return-value]


class _DeviceEvents(NamedTuple):
    """Every GPU event on one device, sorted by start: start/end (ns), the row of the
    runtime call that launched it (-1: unknown), whether it is a *short compute
    kernel* (a kernel, not NCCL/RCCL, shorter than ``Thresholds.short_kernel_us``) and
    whether it is a communication (NCCL/RCCL) kernel."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    launch_row: np.ndarray
    short_kernel: np.ndarray
    communication: np.ndarray


def _gpu_events(index: TraceIndex, device: int, short_ns: float) -> _DeviceEvents:
    """The GPU events of ``device`` (see :class:`_DeviceEvents`)."""
    starts, ends, rows, short, comm = [], [], [], [], []
    for kind in GPU_WORK_KINDS:
        t = index.trace.tables[kind]
        sel = t.device == device
        starts.append(t.start_ns[sel])
        ends.append(t.end_ns[sel])
        rows.append(index.launch_row[kind][sel])
        if kind == m.KERNEL:
            compute = ~index.rows_where(m.KERNEL, nm.is_communication_kernel)[sel]
            short.append(compute & (t.dur_ns[sel] < short_ns))
            comm.append(~compute)
        else:
            short.append(np.zeros(int(sel.sum()), dtype=np.bool_))
            comm.append(np.zeros(int(sel.sum()), dtype=np.bool_))
    s, e, r = np.concatenate(starts), np.concatenate(ends), np.concatenate(rows)
    order = np.argsort(s, kind="stable")
    return _DeviceEvents(
        s[order],
        e[order],
        r[order],
        np.concatenate(short)[order],
        np.concatenate(comm)[order],
    )


def _next_event(ev: _DeviceEvents, gap_e: np.ndarray) -> np.ndarray:
    """Per gap, the index in ``ev`` of the event that starts exactly where the gap ends
    (the work that closes it); -1 where the gap ends at a step boundary instead."""
    nxt = np.searchsorted(ev.start_ns, gap_e, side="left")
    ok = nxt < ev.start_ns.size
    ok[ok] = ev.start_ns[nxt[ok]] == gap_e[ok]
    return np.where(ok, nxt, -1)


def _launch_threads(
    index: TraceIndex, ev: _DeviceEvents, gap_s: np.ndarray, gap_e: np.ndarray
) -> np.ndarray:
    """(n, 2) array of (pid, tid) of the launching thread of each gap."""
    rt = index.trace.runtime
    fallback = step_thread_of(index)
    out = np.empty((gap_s.size, 2), dtype=np.int64)
    out[:] = fallback
    if ev.start_ns.size == 0:
        return out
    # the event that starts where the gap ends (first event at or after the gap end)
    nxt = np.searchsorted(ev.start_ns, gap_e, side="left")
    nxt_ok = nxt < ev.start_ns.size
    row = np.full(gap_s.size, -1, dtype=np.int64)
    row[nxt_ok] = ev.launch_row[nxt[nxt_ok]]
    # else the event that ended where the gap starts
    ends_sorted = np.argsort(ev.end_ns, kind="stable")
    prv = np.searchsorted(ev.end_ns[ends_sorted], gap_s, side="right") - 1
    need = (row < 0) & (prv >= 0)
    row[need] = ev.launch_row[ends_sorted[prv[need]]]
    ok = row >= 0
    out[ok, 0] = rt.pid[row[ok]]
    out[ok, 1] = rt.tid[row[ok]]
    return out


def _busy_in(events: _DeviceEvents, sel: np.ndarray, windows: iv.Intervals) -> int:
    """Wall time (ns) covered by the selected events inside the step windows."""
    return int(iv.total(iv.intersect(iv.union(events.start_ns[sel], events.end_ns[sel]), windows)))


def _opened_by_sync(
    activity: _ThreadActivity,
    thread: tuple[int, int],
    gap_s: np.ndarray,
    gap_e: np.ndarray,
    tol_ns: int,
) -> np.ndarray:
    """Per gap: it opens as a host synchronization on ``thread`` returns. The first sync
    range on the thread ending at or after the gap start must end within ``tol_ns`` of
    it and have started no later than the gap start (the host was blocked when the GPU
    ran dry). A CUDA runtime sync call (which always waits for the GPU) may also start
    inside the gap, within that tolerance of its start: ``x.cpu()`` copies, then calls
    ``cudaStreamSynchronize`` a few µs after the copy drained the GPU."""
    hit = np.zeros(gap_s.size, dtype=np.bool_)
    for runtime_only in (False, True):
        sync_s, sync_e = activity.sync_calls(thread, runtime_only)
        if sync_e.size == 0:
            continue
        k = np.searchsorted(sync_e, gap_s, side="left")
        ok = k < sync_e.size
        kk = k[ok]
        gs, ge = gap_s[ok], gap_e[ok]
        started = sync_s[kk] <= gs
        if runtime_only:
            started |= (sync_s[kk] <= gs + tol_ns) & (sync_s[kk] < ge)
        hit[ok] |= (sync_e[kk] <= gs + tol_ns) & started
    return hit


def _histogram(lengths_ns: np.ndarray) -> list[HistogramBin]:
    edges = np.array(GAP_EDGES_US, dtype=np.float64) * 1000.0
    lengths = lengths_ns.astype(np.float64)
    bins = np.searchsorted(edges, lengths, side="right") - 1
    out = []
    for b, lo in enumerate(GAP_EDGES_US):
        sel = bins == b
        out.append(
            HistogramBin(
                lo_us=float(lo),
                hi_us=float(GAP_EDGES_US[b + 1]) if b + 1 < len(GAP_EDGES_US) else None,
                count=int(sel.sum()),
                time_us=float(lengths[sel].sum()) / 1000.0,
            )
        )
    return out


def _op_at(
    index: TraceIndex,
    thread: tuple[int, int],
    t_ns: int,
    thread_rows: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray, np.ndarray]]]
    | None = None,
) -> tuple[str | None, str | None]:
    """(outermost, innermost) CPU range name on ``thread`` containing ``t_ns``.

    ``thread_rows``: optional cache, per thread, of each table's ``(name, start_ns,
    end_ns)`` restricted to the thread's rows (in row order), so that asking for several
    moments on one thread selects its rows once."""
    trace = index.trace
    per_kind = thread_rows.get(thread) if thread_rows is not None else None
    if per_kind is None:
        per_kind = []
        for kind in (m.USER_ANNOTATION, m.CPU_OP, m.RUNTIME):
            t = trace.tables[kind]
            rows = np.nonzero((t.pid == thread[0]) & (t.tid == thread[1]))[0]
            row_starts = t.start_ns[rows]
            per_kind.append((t.name[rows], row_starts, row_starts + t.dur_ns[rows]))
        if thread_rows is not None:
            thread_rows[thread] = per_kind
    best_outer: tuple[int, str] | None = None
    best_inner: tuple[int, str] | None = None
    for names, starts, ends in per_kind:
        sel = (starts <= t_ns) & (ends > t_ns)
        for r in np.nonzero(sel)[0]:
            name = trace.names[int(names[r])]
            if name.startswith("ProfilerStep#"):
                continue
            start = int(starts[r])
            if best_outer is None or start < best_outer[0]:
                best_outer = (start, name)
            if best_inner is None or start >= best_inner[0]:
                best_inner = (start, name)
    return (
        best_outer[1] if best_outer else None,
        best_inner[1] if best_inner else None,
    )


def _longest_first(lengths: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest ``lengths``, largest first, ties in index order: the
    first ``k`` of ``np.argsort(-lengths, kind="stable")``, without sorting every gap
    (a partition finds the k-th largest; only the gaps at least that long are sorted)."""
    n = int(lengths.size)
    neg = -lengths
    if k <= 0 or n <= k:
        return np.argsort(neg, kind="stable")[:k]
    kth = np.partition(neg, k - 1)[k - 1]
    cand = np.flatnonzero(neg <= kth)  # ascending: ties stay in index order
    return cand[np.argsort(neg[cand], kind="stable")][:k]


def _by_thread(threads: np.ndarray) -> list[tuple[tuple[int, int], np.ndarray]]:
    """Rows of an ``(n, 2)`` array of (pid, tid) grouped by thread: ``((pid, tid),
    ascending row indices)`` in (pid, tid) order, as ``np.unique(threads, axis=0)`` and
    one mask per thread would give, with one stable ``lexsort`` (about 10x cheaper than
    ``np.unique(axis=0)``, which sorts the rows as records)."""
    if threads.shape[0] == 0:
        return []
    order = np.lexsort((threads[:, 1], threads[:, 0]))
    p, t = threads[order, 0], threads[order, 1]
    change = np.ones(order.size, dtype=np.bool_)
    change[1:] = (p[1:] != p[:-1]) | (t[1:] != t[:-1])
    lo = np.nonzero(change)[0]
    hi = np.append(lo[1:], order.size)
    return [
        ((int(p[a]), int(t[a])), order[a:b]) for a, b in zip(lo.tolist(), hi.tolist(), strict=True)
    ]


class IdlePieces(NamedTuple):
    """One device's idle time inside the step windows as attributed by
    :func:`idle_summary`: disjoint intervals sorted by start, none crossing a step start
    (``start_ns``, ``end_ns`` int64 ns), and each one's cause (``cause``: int64 index
    into :data:`CAUSE_NAMES`). Their lengths summed per step and cause are the panel's
    ``per_step[].causes_us``, to the ns."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    cause: np.ndarray


def _pieces(collected: list[tuple[iv.Intervals, int]], step_starts: np.ndarray) -> IdlePieces:
    """The attributed intervals of one device as :class:`IdlePieces`: each cause's set
    cut at the step starts (a set of one cause may join two gaps that touch at a step
    boundary), all sorted by start."""
    starts, ends, causes = [], [], []
    for part, cause in collected:
        s, e = iv.split_at(part, step_starts)
        starts.append(s)
        ends.append(e)
        causes.append(np.full(s.size, cause, dtype=np.int64))
    if not starts:
        z = np.zeros(0, dtype=np.int64)
        return IdlePieces(z, z.copy(), z.copy())
    s, e, c = np.concatenate(starts), np.concatenate(ends), np.concatenate(causes)
    keep = e > s
    order = np.argsort(s[keep], kind="stable")
    return IdlePieces(s[keep][order], e[keep][order], c[keep][order])


#: Causes during which a host is on the launch path: in a traced op or runtime call.
LAUNCH_PATH_CAUSES: tuple[str, ...] = ("optimizer_step", "launching", "cpu_ops")


def launch_bound_gaps(
    index: TraceIndex,
    events: _DeviceEvents,
    gaps: iv.Intervals,
    amounts: np.ndarray,
    sync_opened: np.ndarray,
    max_gap_ns: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Which gaps are *launch-bound* before a short kernel, and how much of each.

    A gap ``[s, e)`` counts when all hold: the work that closes it (starts at ``e``) is
    a short compute kernel; that kernel's launch call (found by correlation id) is a
    kernel launch, not a graph launch, and had not returned when the gap opened
    (``launch end > s``: the GPU ran dry while the host was still issuing it); the gap
    was not opened by a host synchronization; and it is shorter than ``max_gap_ns``
    (``Thresholds.launch_bound_max_gap_us``: per-op host overhead of eager PyTorch is
    tens of µs; a longer wait before one kernel is a stretch of other host work, such
    as DDP's forward hooks or torch.compile's guards, that fusing kernels would not
    remove). Its launch-bound part is the idle time during which the launching thread
    was on the launch path (:data:`LAUNCH_PATH_CAUSES`); idle while loading data or
    outside traced ops is not launch overhead.

    Args:
        index: the trace index.
        events: the device's GPU events (:func:`_gpu_events`).
        gaps: the device's idle gaps (starts, ends in ns), sorted.
        amounts: (n_gaps, len(CAUSE_NAMES)) idle ns per cause.
        sync_opened: per gap, opened by a host synchronization.
        max_gap_ns: longest gap that can be launch-bound, ns.

    Returns:
        ``(idle_ns, closing_event)``: per gap, the launch-bound idle (int64 ns, 0 when
        the gap does not count), and the index in ``events`` of the short kernel that
        closes each counted gap (-1 elsewhere).
    """
    gap_s, gap_e = gaps
    out = np.zeros(gap_s.size, dtype=np.int64)
    closing = np.full(gap_s.size, -1, dtype=np.int64)
    if gap_s.size == 0 or events.start_ns.size == 0:
        return out, closing
    rt = index.trace.runtime
    nxt = _next_event(events, gap_e)
    cand = nxt >= 0
    cand[cand] = events.short_kernel[nxt[cand]]
    cand &= ~sync_opened & ((gap_e - gap_s) < max_gap_ns)
    row = np.full(gap_s.size, -1, dtype=np.int64)
    row[cand] = events.launch_row[nxt[cand]]
    cand &= row >= 0
    if not cand.any():
        return out, closing
    launch_ok = index.rows_where(m.RUNTIME, nm.is_kernel_launch) & ~index.rows_where(
        m.RUNTIME, nm.is_graph_launch
    )
    r = row[cand]
    cand[cand] = launch_ok[r] & (rt.end_ns[r] > gap_s[cand])
    cols = [CAUSE_NAMES.index(c) for c in LAUNCH_PATH_CAUSES]
    out[cand] = amounts[cand][:, cols].sum(axis=1)
    cand &= out > 0
    closing[cand] = nxt[cand]
    return out, closing


_FUSED_KERNEL = re.compile(r"fused", re.IGNORECASE)


def optimizer_mode(
    kernel_names: list[str], kernels_per_range: float, counts: list[int] | None = None
) -> str:
    """How an optimizer step runs, from the kernels it launches (demangled names;
    ``counts``: how many kernels bear each name, one each when not given, so that a
    name is tested once however many kernels bear it):

    * ``compiled``: most are Inductor (Triton) kernels (a ``torch.compile``'d step);
    * ``fused``: else, a kernel whose name says fused (``FusedAdamMathFunctor``,
      ``fused_adam``...: ``torch.optim.Adam(fused=True)``, apex ``FusedAdam``);
    * ``foreach``: else, any ``multi_tensor_apply`` kernel (``foreach=True``: a few
      kernels per tensor group; a distributed optimizer adds its own GEMMs and
      collectives around them);
    * ``per_parameter``: none of those and at least 2 kernels per optimizer range (the
      ``for p in params`` loop: a small kernel chain per parameter tensor);
    * ``none``: no kernel at all (an optimizer on the CPU, or none traced).

    ``kernels_per_range``: kernels per ``Optimizer.step#…`` range.
    """
    if not kernel_names:
        return "none"
    counts = [1] * len(kernel_names) if counts is None else counts
    compiled = sum(c for k, c in zip(kernel_names, counts, strict=True) if nm.is_compiled_kernel(k))
    if compiled * 2 >= sum(counts):
        return "compiled"  # Inductor names its kernels triton_poi_fused_...: first
    if any(_FUSED_KERNEL.search(k) for k in kernel_names):
        return "fused"
    if any("multi_tensor_apply" in k for k in kernel_names):
        return "foreach"
    return "per_parameter" if kernels_per_range >= 2 else "none"


def _inside(sets: iv.Intervals, t: np.ndarray) -> np.ndarray:
    """Per point: inside one of the normalised intervals."""
    k = np.searchsorted(sets[0], t, side="right") - 1
    ok = k >= 0
    ok[ok] = t[ok] < sets[1][k[ok]]
    return ok


def _optimizer_cost(
    index: TraceIndex,
    activity: _ThreadActivity,
    dev: int,
    events: _DeviceEvents,
    windows: iv.Intervals,
    closing_ev: np.ndarray,
    idle_ns: int,
    launch_bound_idle_ns: int,
    th: Thresholds,
) -> OptimizerStepCost:
    """:class:`~tb_kineto_insights.schema.idle.OptimizerStepCost` of device ``dev``.

    GPU work is *launched from the optimizer* when its launch call (correlation) starts
    inside an ``Optimizer.step#…`` / ``Optimizer.zero_grad#…`` range of its own thread;
    communication kernels (a sharded optimizer's collectives) are left out: their time
    is the communication panel's claim.
    ``busy_us`` is the wall time those events cover inside the step windows,
    ``idle_us`` the ``optimizer_step`` idle cause (``idle_ns``), ``host_us`` the summed
    length of the ranges inside the host windows; per-step values divide by the steps.
    """
    steps = index.steps
    n_steps = max(len(steps), 1)
    total_ns = steps.total_ns
    rt = index.trace.runtime
    in_opt_rt = np.zeros(len(rt), dtype=np.bool_)
    pid, tid, s, e = activity.parts["optimizer_step"]
    host = iv.union(*steps.host_windows()) if steps.has_markers else windows
    host_ns = 0
    if s.size:
        threads = np.unique(np.stack([pid, tid], axis=1), axis=0)
        for p, t in threads.tolist():
            sel = (pid == p) & (tid == t)
            opt = iv.union(s[sel], e[sel])
            host_ns += iv.total(iv.intersect(opt, host))
            on = (rt.pid == p) & (rt.tid == t)
            in_opt_rt[on] = _inside(opt, rt.start_ns[on])
    n_ranges = 0
    for kind in (m.CPU_OP, m.USER_ANNOTATION):
        tab = index.trace.tables[kind]
        is_step = index.rows_where(kind, nm.is_optimizer_step)
        n_ranges += int((iv.window_index(tab.start_ns[is_step], *host) >= 0).sum())
    row = events.launch_row
    from_opt = np.zeros(row.size, dtype=np.bool_)
    ok = row >= 0
    from_opt[ok] = in_opt_rt[row[ok]]
    from_opt &= ~events.communication  # collectives are the communication panel's claim
    busy_ns = _busy_in(events, from_opt, windows)
    lb_kernel_ns = _busy_in(events, from_opt & closing_ev, windows)
    kt = index.trace.tables[m.KERNEL]
    krow = index.launch_row[m.KERNEL]
    ksel = (kt.device == dev) & (krow >= 0)
    ksel[ksel] = in_opt_rt[krow[ksel]]
    ksel &= iv.window_index(kt.start_ns, *windows) >= 0
    ksel &= ~index.rows_where(m.KERNEL, nm.is_communication_kernel)
    names = kt.name[ksel]
    count = int(ksel.sum())
    top: list[OptimizerKernel] = []
    distinct: list[str] = []
    per_name: list[int] = []
    if count:
        ids, counts = np.unique(names, return_counts=True)
        distinct = [index.trace.names[int(i)] for i in ids.tolist()]
        per_name = counts.tolist()
        durs = np.bincount(np.searchsorted(ids, names), weights=kt.dur_ns[ksel].astype(float))
        by_name: dict[str, list[float]] = {}
        for i, c, d in zip(ids.tolist(), counts.tolist(), durs.tolist(), strict=True):
            short = nm.short_kernel_name(index.trace.names[int(i)])
            acc = by_name.setdefault(short, [0.0, 0.0])
            acc[0] += c
            acc[1] += d
        for name, (c, d) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[: th.idle_top_ops]:
            top.append(
                OptimizerKernel(
                    name=name, count_per_step=c / n_steps, us_per_step=d / 1000.0 / n_steps
                )
            )
    mode = optimizer_mode(distinct, count / n_ranges if n_ranges else 0.0, per_name)
    cost_ns = idle_ns + busy_ns
    return OptimizerStepCost(
        ranges_per_step=n_ranges / n_steps,
        host_us=host_ns / 1000.0,
        idle_us=idle_ns / 1000.0,
        busy_us=busy_ns / 1000.0,
        cost_us=cost_ns / 1000.0,
        cost_fraction_of_step_time=cost_ns / total_ns if total_ns else 0.0,
        idle_fraction_of_step_time=idle_ns / total_ns if total_ns else 0.0,
        kernels_per_step=count / n_steps,
        mode=mode,
        top_kernels=top,
        launch_bound_idle_us=launch_bound_idle_ns / 1000.0,
        launch_bound_kernel_us=lb_kernel_ns / 1000.0,
    )


def _cpu_ops_top(
    index: TraceIndex,
    parts: list[tuple[tuple[int, int], iv.Intervals]],
    total_ns: int,
    k: int,
) -> list[OpIdle]:
    """The ops holding the ``cpu_ops`` idle: per launching thread, its idle attributed to
    ``cpu_ops`` (``parts``) is split over the thread's *outermost* CPU ops (a ``cpu_op``
    range not inside another one of that thread: ``aten::conv2d``, not the
    ``aten::cudnn_convolution`` inside it), summed by op name, the ``k`` largest."""
    t = index.trace.tables[m.CPU_OP]
    hit_names: list[np.ndarray] = []  # per thread, in order: name ids of the ops hit
    hit_ns: list[np.ndarray] = []  # and their idle (ns)
    for thread, part in parts:
        if part[0].size == 0:
            continue
        rows = np.nonzero((t.pid == thread[0]) & (t.tid == thread[1]))[0]
        if rows.size == 0:
            continue
        st = t.start_ns[rows]
        en = st + t.dur_ns[rows]
        order = np.lexsort((-en, st))
        st, en, nid = st[order], en[order], t.name[rows][order]
        prev_max = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], en[:-1]]))
        top = st >= prev_max
        ov = iv.overlap_per_window(part, st[top], en[top])
        hit = ov > 0
        hit_names.append(nid[top][hit])
        hit_ns.append(ov[hit])
    if not hit_names:
        return []
    ids, first, inverse = np.unique(
        np.concatenate(hit_names), return_index=True, return_inverse=True
    )
    sums = int_sums(inverse.ravel(), np.concatenate(hit_ns).astype(np.int64), ids.size)
    # the most idle first; a tie: the name hit first (threads in ``parts``' order)
    order = np.lexsort((first, -sums))[:k]
    best = list(zip(ids[order].tolist(), sums[order].tolist(), strict=True))
    return [
        OpIdle(
            name=index.trace.names[i],
            us=ns / 1000.0,
            fraction_of_step_time=ns / total_ns if total_ns else 0.0,
        )
        for i, ns in best
    ]


def idle_summary(
    index: TraceIndex,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    pieces: dict[int, IdlePieces] | None = None,
) -> IdlePanel:
    """``summary.idle`` (:class:`~tb_kineto_insights.schema.idle.IdlePanel`): per device,
    busy fraction, idle per step, idle by cause, gap histogram and the largest gaps.
    Denominator of every ``_fraction`` of step time: the summed step-window time; of
    ``fraction_of_idle``: the device's summed idle time.

    Top-level fields: ``cause_order`` (:data:`CAUSE_NAMES`), ``cause_labels``
    (:data:`CAUSE_WORDS`, cause → words), ``main_device``
    (:attr:`~.trace_index.TraceIndex.main_device`), ``devices``, ``notes``. Per device,
    besides busy/idle totals, ``causes`` (``{us, fraction_of_idle,
    fraction_of_step_time}`` per cause), ``per_step`` (``{number,
    duration_us, idle_us, busy_fraction, causes_us}``), ``gap_histogram`` and
    ``largest_gaps``: ``short_kernels``, the cost of short kernels on this device:

    * ``busy_us``: wall time covered by short compute kernels inside the steps;
    * ``launch_bound_gaps`` / ``launch_bound_idle_us``: the gaps that
      :func:`launch_bound_gaps` counts and their launch-bound idle (µs), with
      ``launch_bound_idle_us_by_cause`` split over :data:`LAUNCH_PATH_CAUSES`;
    * ``launch_bound_kernel_us``: wall time of the short kernels closing those gaps;
    * ``cost_us`` = launch-bound idle + those kernels' time, and
      ``cost_fraction_of_step_time`` = ``cost_us`` / summed step time.

    With Python stacks (``python_stacks``), per device ``python_idle_us`` (idle inside
    any recorded frame) and ``python_frames``: the ``python_frames_listed`` frames
    holding the most idle (:func:`.python_frames.frame_summaries`), and per listed gap
    ``python_frame``; without stacks ``[]``, ``0`` and ``None``.

    ``pieces``: when given, filled per device with the idle time as attributed, as
    intervals (:class:`IdlePieces`): the timeline's idle band (``analysis.timeline``)
    draws exactly the time this panel counts, cause by cause.

    Raises nothing on well-formed input (a :class:`TraceIndex` from ``build_index``).
    """
    steps = index.steps
    total_ns = steps.total_ns
    notes: list[str] = []
    if not index.devices:
        notes.append(gpu_lost_note(index) or "no GPU activity in this trace: nothing to be idle")
    if not steps.has_markers:
        notes.append("no ProfilerStep markers: the whole trace is one pseudo-step")
    activity = _ThreadActivity(index)
    windows = iv.union(steps.start_ns, steps.end_ns)
    host_steps = iv.union(steps.cpu_start_ns, steps.cpu_end_ns) if steps.has_markers else iv.empty()
    step_thread = step_thread_of(index)
    tol_ns = int(thresholds.sync_return_tolerance_us * 1000)
    short_ns = float(thresholds.short_kernel_us) * 1000.0
    untraced_col = CAUSE_NAMES.index("host_untraced")
    sync_col = CAUSE_NAMES.index("host_sync")
    frames = pf.FrameIndex(index.trace)
    has_stacks = len(frames) > 0
    devices: list[IdleDevice] = []
    for dev in index.devices:
        busy = index.gpu_busy[dev]
        gaps = iv.split_at(iv.subtract(windows, busy), steps.start_ns)
        gs, ge = gaps
        glen = ge - gs
        step_of = steps.step_of(gs)
        events = _gpu_events(index, dev, short_ns)
        threads = _launch_threads(index, events, gs, ge)
        amounts = np.zeros((gs.size, len(CAUSE_NAMES)), dtype=np.int64)
        sync_opened = np.zeros(gs.size, dtype=np.bool_)
        cpu_parts: list[tuple[tuple[int, int], iv.Intervals]] = []
        alloc_opened = np.zeros(gs.size, dtype=np.bool_)
        alloc_col = CAUSE_NAMES.index("allocator")
        piece_parts: list[pf.IdlePieces] = []
        collected: list[tuple[iv.Intervals, int]] = []
        for thread, idx in _by_thread(threads):
            sync_opened[idx] = _opened_by_sync(activity, thread, gs[idx], ge[idx], tol_ns)
            alloc_opened[idx] = ~sync_opened[idx] & _inside(
                activity.sets(thread)["allocator"], gs[idx]
            )
            # this thread's idle intervals by cause, for the Python frames
            labelled: list[tuple[np.ndarray, np.ndarray, int]] = []
            opened = idx[sync_opened[idx]]
            labelled.append((gs[opened], ge[opened], sync_col))
            in_alloc = idx[alloc_opened[idx]]
            labelled.append((gs[in_alloc], ge[in_alloc], alloc_col))
            rest = idx[~sync_opened[idx] & ~alloc_opened[idx]]
            if rest.size:
                remaining = (gs[rest], ge[rest])  # disjoint and sorted already
                sets = activity.sets(thread)
                for c, cause in enumerate(TRACED_NAMES):
                    part = iv.intersect(remaining, sets[cause])
                    amounts[rest, c] = iv.overlap_per_window(part, gs[rest], ge[rest])
                    remaining = iv.subtract(remaining, sets[cause])
                    labelled.append((part[0], part[1], c))
                    if pieces is not None:
                        collected.append((part, c))
                    if cause == "cpu_ops":
                        cpu_parts.append((thread, part))
                # nothing traced on the launching thread: untraced host work when inside a
                # host ProfilerStep range and the step thread is not in a traced op either
                untraced = iv.intersect(remaining, host_steps)
                if thread != step_thread:
                    untraced = iv.subtract(untraced, activity.traced(step_thread))
                amounts[rest, untraced_col] = iv.overlap_per_window(untraced, gs[rest], ge[rest])
                amounts[rest, -1] = glen[rest] - amounts[rest, :-1].sum(axis=1)
                labelled.append((untraced[0], untraced[1], untraced_col))
                nothing = iv.subtract(remaining, untraced)
                labelled.append((nothing[0], nothing[1], len(CAUSE_NAMES) - 1))
                if pieces is not None:
                    collected.append((untraced, untraced_col))
                    collected.append((nothing, len(CAUSE_NAMES) - 1))
            if has_stacks:
                piece_parts.append(
                    pf.thread_pieces(
                        frames,
                        thread,
                        np.concatenate([p[0] for p in labelled]),
                        np.concatenate([p[1] for p in labelled]),
                        np.concatenate(
                            [np.full(p[0].size, p[2], dtype=np.int64) for p in labelled]
                        ),
                        gs,
                        ge,
                        idx,
                        sync_opened,
                    )
                )
        frame_pieces = pf.IdlePieces.concat(piece_parts)
        amounts[sync_opened] = 0
        amounts[sync_opened, CAUSE_NAMES.index("host_sync")] = glen[sync_opened]
        amounts[alloc_opened] = 0
        amounts[alloc_opened, CAUSE_NAMES.index("allocator")] = glen[alloc_opened]
        if pieces is not None:
            collected.append(((gs[sync_opened], ge[sync_opened]), CAUSE_NAMES.index("host_sync")))
            collected.append(((gs[alloc_opened], ge[alloc_opened]), alloc_col))
            pieces[dev] = _pieces(collected, steps.start_ns)
        launch_bound, closing = launch_bound_gaps(
            index, events, gaps, amounts, sync_opened, thresholds.launch_bound_max_gap_us * 1000
        )
        short_busy_ns = _busy_in(events, events.short_kernel, windows)
        closing_ev = np.zeros(events.start_ns.size, dtype=np.bool_)
        closing_ev[closing[closing >= 0]] = True
        closing_busy_ns = _busy_in(events, closing_ev, windows)
        launch_bound_ns = int(launch_bound.sum())
        cost_ns = launch_bound_ns + closing_busy_ns
        idle_ns = int(glen.sum())
        per_cause = amounts.sum(axis=0)
        busy_in = int(iv.total(iv.intersect(busy, windows)))
        in_step = step_of >= 0
        idle_per_step = int_sums(step_of[in_step], glen[in_step], len(steps))
        cause_per_step = int_sums_2d(step_of[in_step], amounts[in_step], len(steps))
        dominant = np.argmax(amounts, axis=1) if gs.size else np.zeros(0, dtype=np.int64)
        largest = _longest_first(glen, thresholds.largest_gaps)
        largest_gaps = []
        thread_rows: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        for g in largest:
            thread = (int(threads[g, 0]), int(threads[g, 1]))
            outer, inner = _op_at(index, thread, int(gs[g] + glen[g] // 2), thread_rows)
            s_i = int(step_of[g])
            largest_gaps.append(
                IdleGap(
                    step=int(steps.number[s_i]) if s_i >= 0 else None,
                    offset_us=(int(gs[g]) - int(steps.start_ns[s_i])) / 1000.0
                    if s_i >= 0
                    else None,
                    start_us=(int(gs[g]) - index.origin_ns) / 1000.0,
                    length_us=int(glen[g]) / 1000.0,
                    cause=CAUSE_NAMES[int(dominant[g])],
                    opened_by_sync=bool(sync_opened[g]),
                    causes_us={
                        c: int(amounts[g, i]) / 1000.0
                        for i, c in enumerate(CAUSE_NAMES)
                        if amounts[g, i]
                    },
                    op=outer,
                    innermost_op=inner,
                    thread=HostThread(pid=thread[0], tid=thread[1]),
                    python_frame=pf.gap_frame(frames, frame_pieces, int(g)) if has_stacks else None,
                )
            )
        devices.append(
            IdleDevice(
                device=dev,
                busy_us=busy_in / 1000.0,
                busy_fraction=busy_in / total_ns if total_ns else None,
                idle_us=idle_ns / 1000.0,
                idle_fraction=idle_ns / total_ns if total_ns else None,
                idle_us_per_step=idle_ns / 1000.0 / len(steps) if len(steps) else None,
                gap_count=int(gs.size),
                causes={
                    cause: IdleCause(
                        us=int(per_cause[i]) / 1000.0,
                        fraction_of_idle=int(per_cause[i]) / idle_ns if idle_ns else 0.0,
                        fraction_of_step_time=int(per_cause[i]) / total_ns if total_ns else 0.0,
                    )
                    for i, cause in enumerate(CAUSE_NAMES)
                },
                sync_opened_gaps=int(sync_opened.sum()),
                optimizer=_optimizer_cost(
                    index,
                    activity,
                    dev,
                    events,
                    windows,
                    closing_ev,
                    int(per_cause[CAUSE_NAMES.index("optimizer_step")]),
                    int(amounts[closing >= 0, CAUSE_NAMES.index("optimizer_step")].sum()),
                    thresholds,
                ),
                cpu_ops_top=_cpu_ops_top(index, cpu_parts, total_ns, thresholds.idle_top_ops),
                short_kernels=ShortKernelCost(
                    busy_us=short_busy_ns / 1000.0,
                    launch_bound_gaps=int((closing >= 0).sum()),
                    launch_bound_idle_us=launch_bound_ns / 1000.0,
                    launch_bound_idle_us_by_cause={
                        c: int(amounts[closing >= 0, CAUSE_NAMES.index(c)].sum()) / 1000.0
                        for c in LAUNCH_PATH_CAUSES
                    },
                    launch_bound_kernel_us=closing_busy_ns / 1000.0,
                    cost_us=cost_ns / 1000.0,
                    cost_fraction_of_step_time=cost_ns / total_ns if total_ns else 0.0,
                ),
                per_step=[
                    IdleStep(
                        number=int(steps.number[i]),
                        duration_us=int(steps.dur_ns[i]) / 1000.0,
                        idle_us=int(idle_per_step[i]) / 1000.0,
                        busy_fraction=1.0 - int(idle_per_step[i]) / int(steps.dur_ns[i])
                        if int(steps.dur_ns[i])
                        else None,
                        causes_us={
                            c: int(cause_per_step[i, k]) / 1000.0 for k, c in enumerate(CAUSE_NAMES)
                        },
                    )
                    for i in range(len(steps))
                ],
                gap_histogram=_histogram(glen),
                largest_gaps=largest_gaps,
                python_idle_us=int(frame_pieces.dur_ns.sum()) / 1000.0,
                python_frames=pf.frame_summaries(
                    frames,
                    frame_pieces,
                    step_of,
                    len(steps),
                    CAUSE_NAMES,
                    idle_ns,
                    total_ns,
                    thresholds.python_frames_listed,
                    thresholds.python_callers_listed,
                ),
            )
        )
    return IdlePanel(
        cause_order=list(CAUSE_NAMES),
        cause_labels=dict(CAUSE_WORDS),
        main_device=index.main_device,
        devices=devices,
        python_stacks=has_stacks,
        notes=notes,
    )
