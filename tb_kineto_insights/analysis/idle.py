"""``summary.idle``: where each GPU waits inside the step windows, and why.

An idle gap is a maximal interval inside a step window where the device runs no kernel,
memcpy or memset (gaps are cut at step boundaries). Its cause is read from the *launching
host thread*: the thread that launched the GPU work that ends the gap (else the work
before it, else the thread of the ProfilerStep markers, the *step thread*).

Attribution (DESIGN.md, Metric definitions):

0. A gap between two kernels of one CUDA graph replay (the work on each side of it
   launched by the same ``cudaGraphLaunch``: :func:`.idle_activity.inside_graph_replay`)
   belongs wholly to ``graph_replay``: the GPU waits on the graph's own dependencies,
   and no host activity causes it.
1. A gap that opens as a host synchronization on that thread returns belongs wholly to
   ``host_sync`` (unless torch.compile made the sync while compiling: it is then the
   compile's, step 2): the host drained the queue instead of running ahead. Likewise a gap
   that opens while the thread is inside a device-memory allocation call (``cudaFree``,
   ``cudaMalloc``, HIP's: :func:`~tb_kineto_insights.analysis.names.is_allocator_call`)
   belongs wholly to ``allocator``: ``cudaFree`` synchronises the device (the caching
   allocator releasing its cache: ``torch.cuda.empty_cache()``), and what the host does
   until the GPU has work again is the price of that release. "Opens as it
   returns": the sync range returned within ``sync_return_tolerance_us`` of the gap's
   start and started no later than the gap (for a CUDA runtime sync call, no later than
   that tolerance after it: ``x.cpu()`` copies, then synchronizes; see
   :func:`.idle_activity.opened_by_sync`).
2. Otherwise each idle microsecond goes to what the thread was doing then, first match
   in :data:`CAUSE_NAMES` order: ``compiling`` (torch.compile compiling:
   :func:`~tb_kineto_insights.analysis.names.is_compile`), ``data_loading``
   (``enumerate(DataLoader)#…``),
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
``small_kernel_flood``): see :func:`.idle_costs.launch_bound_gaps`.

Cost: numpy throughout; the Python loops run once per launching thread, per cause and
per listed gap, never per gap or event: gaps are grouped by thread with one stable
``lexsort`` (:func:`.idle_activity.by_thread`), the listed largest gaps come from a
partition (:func:`longest_first`), a listed gap's thread rows are selected once
(:func:`_op_at`), and sums per step are exact ``bincount`` sums (:mod:`.group_sums`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import python_frames as pf
from tb_kineto_insights.analysis.group_sums import int_sums, int_sums_2d
from tb_kineto_insights.analysis.host_activity import (
    CAUSE_NAMES,
    CAUSE_WORDS,
    TRACED_NAMES,
    step_thread_of,
)
from tb_kineto_insights.analysis.idle_activity import (
    DeviceEvents,
    ThreadActivity,
    busy_in,
    by_thread,
    gpu_events,
    inside,
    inside_graph_replay,
    launch_threads,
    sync_openers,
)
from tb_kineto_insights.analysis.idle_costs import (
    LAUNCH_PATH_CAUSES,
    cpu_ops_top,
    launch_bound_gaps,
    optimizer_cost,
)
from tb_kineto_insights.analysis.idle_sync import sync_sources
from tb_kineto_insights.analysis.lost import gpu_lost_note
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.trace_index import StepWindows, TraceIndex
from tb_kineto_insights.schema.idle import (
    HostThread,
    IdleCause,
    IdleDevice,
    IdleGap,
    IdlePanel,
    IdleStep,
    ShortKernelCost,
)
from tb_kineto_insights.schema.kernels import HistogramBin
from tb_kineto_insights.trace import model as m

#: Gap-length histogram edges in µs (last bin open-ended).
GAP_EDGES_US: tuple[float, ...] = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


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


def longest_first(lengths: np.ndarray, k: int) -> np.ndarray:
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


@dataclass(frozen=True)
class _Setting:
    """What the attribution of every device reads: the index, the thresholds, the step
    windows as a set (GPU) and the host step ranges (``host_untraced``), the step thread,
    the host activity per thread, the Python frames."""

    index: TraceIndex
    thresholds: Thresholds
    windows: iv.Intervals
    host_steps: iv.Intervals
    step_thread: tuple[int, int]
    activity: ThreadActivity
    frames: pf.FrameIndex

    @property
    def steps(self) -> StepWindows:
        return self.index.steps

    @property
    def has_stacks(self) -> bool:
        return len(self.frames) > 0


@dataclass
class _Gaps:
    """One device's idle gaps (``gs``, ``ge``, ns; cut at step starts), their lengths,
    steps (-1 outside), launching threads and attribution: ``amounts`` (n_gaps,
    len(CAUSE_NAMES)) idle ns per cause, ``sync_opened`` / ``alloc_opened`` (opened as
    a sync returned / inside an allocator call), ``cpu_parts`` (per thread, its idle
    attributed to ``cpu_ops``) and the Python frames' pieces."""

    gs: np.ndarray
    ge: np.ndarray
    glen: np.ndarray
    step_of: np.ndarray
    events: DeviceEvents
    threads: np.ndarray
    amounts: np.ndarray
    sync_opened: np.ndarray
    sync_at: np.ndarray
    alloc_opened: np.ndarray
    in_graph: np.ndarray
    cpu_parts: list[tuple[tuple[int, int], iv.Intervals]]
    frame_pieces: pf.FramePieces


def _find_gaps(st: _Setting, dev: int) -> tuple[np.ndarray, np.ndarray]:
    """The device's idle gaps: the step windows less its busy time, cut at step starts
    (starts, ends in ns, sorted)."""
    busy = st.index.gpu_busy[dev]
    return iv.split_at(iv.subtract(st.windows, busy), st.steps.start_ns)


def _thread_causes(
    st: _Setting,
    g: _Gaps,
    thread: tuple[int, int],
    idx: np.ndarray,
    collected: list[tuple[iv.Intervals, int]] | None,
) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Attribute the gaps ``idx`` of one launching thread (module docstring): opened by
    a sync or inside an allocator call wholly; else each moment to the first traced
    cause of the thread, then ``host_untraced`` / ``nothing_recorded``. Fills
    ``g.amounts`` and ``g.cpu_parts`` (and ``collected``, the attributed intervals by
    cause, when given); returns the thread's idle intervals with their cause column,
    for the Python frames."""
    gs, ge, glen, amounts = g.gs, g.ge, g.glen, g.amounts
    untraced_col = CAUSE_NAMES.index("host_untraced")
    opener_end = sync_openers(
        st.activity, thread, gs[idx], ge[idx], int(st.thresholds.sync_return_tolerance_us * 1000)
    )
    # a sync or an allocation made by torch.compile while it compiles (constant folding,
    # Triton autotuning) is the compile's: the gap is left to the causes below
    compiling = st.activity.sets(thread)["compiling"]
    opener_end[inside(compiling, np.maximum(opener_end - 1, 0)) & (opener_end >= 0)] = -1
    opener_end[g.in_graph[idx]] = -1  # inside a graph replay: the graph's, wholly
    g.sync_opened[idx] = opener_end >= 0
    g.sync_at[idx] = np.where(opener_end >= 0, opener_end - 1, -1)
    g.alloc_opened[idx] = (
        ~g.sync_opened[idx]
        & inside(st.activity.sets(thread)["allocator"], gs[idx])
        & ~inside(compiling, gs[idx])
        & ~g.in_graph[idx]
    )
    labelled: list[tuple[np.ndarray, np.ndarray, int]] = []
    opened = idx[g.sync_opened[idx]]
    labelled.append((gs[opened], ge[opened], CAUSE_NAMES.index("host_sync")))
    in_alloc = idx[g.alloc_opened[idx]]
    labelled.append((gs[in_alloc], ge[in_alloc], CAUSE_NAMES.index("allocator")))
    in_graph = idx[g.in_graph[idx]]
    labelled.append((gs[in_graph], ge[in_graph], CAUSE_NAMES.index("graph_replay")))
    rest = idx[~g.sync_opened[idx] & ~g.alloc_opened[idx] & ~g.in_graph[idx]]
    if not rest.size:
        return labelled
    remaining = (gs[rest], ge[rest])  # disjoint and sorted already
    sets = st.activity.sets(thread)
    for c, cause in enumerate(TRACED_NAMES):
        part = iv.intersect(remaining, sets[cause])
        amounts[rest, c] = iv.overlap_per_window(part, gs[rest], ge[rest])
        remaining = iv.subtract(remaining, sets[cause])
        labelled.append((part[0], part[1], c))
        if collected is not None:
            collected.append((part, c))
        if cause == "cpu_ops":
            g.cpu_parts.append((thread, part))
    # nothing traced on the launching thread: untraced host work when inside a host
    # ProfilerStep range and the step thread is not in a traced op either
    untraced = iv.intersect(remaining, st.host_steps)
    if thread != st.step_thread:
        untraced = iv.subtract(untraced, st.activity.traced(st.step_thread))
    amounts[rest, untraced_col] = iv.overlap_per_window(untraced, gs[rest], ge[rest])
    amounts[rest, -1] = glen[rest] - amounts[rest, :-1].sum(axis=1)
    labelled.append((untraced[0], untraced[1], untraced_col))
    nothing = iv.subtract(remaining, untraced)
    labelled.append((nothing[0], nothing[1], len(CAUSE_NAMES) - 1))
    if collected is not None:
        collected.append((untraced, untraced_col))
        collected.append((nothing, len(CAUSE_NAMES) - 1))
    return labelled


def _attribute(st: _Setting, dev: int, pieces: dict[int, IdlePieces] | None) -> _Gaps:
    """Find the device's gaps and attribute each to its causes, thread by launching
    thread (:func:`_thread_causes`); the gaps opened by a sync or inside an allocator
    call belong wholly to that cause. ``pieces[dev]``: the attributed intervals."""
    gs, ge = _find_gaps(st, dev)
    events = gpu_events(st.index, dev, float(st.thresholds.short_kernel_us) * 1000.0)
    g = _Gaps(
        gs=gs,
        ge=ge,
        glen=ge - gs,
        step_of=st.steps.step_of(gs),
        events=events,
        threads=launch_threads(st.index, events, gs, ge),
        amounts=np.zeros((gs.size, len(CAUSE_NAMES)), dtype=np.int64),
        sync_opened=np.zeros(gs.size, dtype=np.bool_),
        sync_at=np.full(gs.size, -1, dtype=np.int64),
        alloc_opened=np.zeros(gs.size, dtype=np.bool_),
        in_graph=inside_graph_replay(st.index, events, gs, ge),
        cpu_parts=[],
        frame_pieces=pf.FramePieces.concat([]),
    )
    collected: list[tuple[iv.Intervals, int]] | None = [] if pieces is not None else None
    piece_parts: list[pf.FramePieces] = []
    for thread, idx in by_thread(g.threads):
        labelled = _thread_causes(st, g, thread, idx, collected)
        if st.has_stacks:
            piece_parts.append(
                pf.thread_pieces(
                    st.frames,
                    thread,
                    np.concatenate([p[0] for p in labelled]),
                    np.concatenate([p[1] for p in labelled]),
                    np.concatenate([np.full(p[0].size, p[2], dtype=np.int64) for p in labelled]),
                    gs,
                    ge,
                    idx,
                    g.sync_opened,
                )
            )
    g.frame_pieces = pf.FramePieces.concat(piece_parts)
    sync_col, alloc_col = CAUSE_NAMES.index("host_sync"), CAUSE_NAMES.index("allocator")
    g.amounts[g.sync_opened] = 0
    g.amounts[g.sync_opened, sync_col] = g.glen[g.sync_opened]
    g.amounts[g.alloc_opened] = 0
    g.amounts[g.alloc_opened, alloc_col] = g.glen[g.alloc_opened]
    graph_col = CAUSE_NAMES.index("graph_replay")
    g.amounts[g.in_graph] = 0
    g.amounts[g.in_graph, graph_col] = g.glen[g.in_graph]
    if pieces is not None and collected is not None:
        collected.append(((gs[g.sync_opened], ge[g.sync_opened]), sync_col))
        collected.append(((gs[g.alloc_opened], ge[g.alloc_opened]), alloc_col))
        collected.append(((gs[g.in_graph], ge[g.in_graph]), graph_col))
        pieces[dev] = _pieces(collected, st.steps.start_ns)
    return g


def _largest_gaps(st: _Setting, g: _Gaps) -> list[IdleGap]:
    """The ``largest_gaps`` longest gaps, longest first, each with its step, cause
    split, the ops open on its launching thread and, with stacks, its Python frame."""
    index, steps = st.index, st.steps
    dominant = np.argmax(g.amounts, axis=1) if g.gs.size else np.zeros(0, dtype=np.int64)
    out = []
    thread_rows: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    for k in longest_first(g.glen, st.thresholds.largest_gaps):
        thread = (int(g.threads[k, 0]), int(g.threads[k, 1]))
        # a gap opened by a sync: the ops around that sync, not what the host ran next
        at = int(g.sync_at[k]) if g.sync_at[k] >= 0 else int(g.gs[k] + g.glen[k] // 2)
        outer, inner = _op_at(index, thread, at, thread_rows)
        s_i = int(g.step_of[k])
        out.append(
            IdleGap(
                step=int(steps.number[s_i]) if s_i >= 0 else None,
                offset_us=(int(g.gs[k]) - int(steps.start_ns[s_i])) / 1000.0 if s_i >= 0 else None,
                start_us=(int(g.gs[k]) - index.origin_ns) / 1000.0,
                length_us=int(g.glen[k]) / 1000.0,
                cause=CAUSE_NAMES[int(dominant[k])],
                opened_by_sync=bool(g.sync_opened[k]),
                causes_us={
                    c: int(g.amounts[k, i]) / 1000.0
                    for i, c in enumerate(CAUSE_NAMES)
                    if g.amounts[k, i]
                },
                op=outer,
                innermost_op=inner,
                thread=HostThread(pid=thread[0], tid=thread[1]),
                python_frame=pf.gap_frame(st.frames, g.frame_pieces, int(k))
                if st.has_stacks
                else None,
            )
        )
    return out


def _idle_per_step(st: _Setting, g: _Gaps) -> list[IdleStep]:
    """Per step: its duration, idle time, busy share and idle per cause (exact ns sums
    of the gaps in it)."""
    steps = st.steps
    in_step = g.step_of >= 0
    idle_per_step = int_sums(g.step_of[in_step], g.glen[in_step], len(steps))
    cause_per_step = int_sums_2d(g.step_of[in_step], g.amounts[in_step], len(steps))
    return [
        IdleStep(
            number=int(steps.number[i]),
            duration_us=int(steps.dur_ns[i]) / 1000.0,
            idle_us=int(idle_per_step[i]) / 1000.0,
            busy_fraction=1.0 - int(idle_per_step[i]) / int(steps.dur_ns[i])
            if int(steps.dur_ns[i])
            else None,
            causes_us={c: int(cause_per_step[i, k]) / 1000.0 for k, c in enumerate(CAUSE_NAMES)},
        )
        for i in range(len(steps))
    ]


def _device_panel(st: _Setting, dev: int, g: _Gaps) -> IdleDevice:
    """One device's entry of the panel from its attributed gaps: totals, causes, the
    launch-bound cost of short kernels, the optimizer's cost, the CPU ops holding idle,
    per step, the histogram, the largest gaps and the Python frames."""
    index, steps, th = st.index, st.steps, st.thresholds
    total_ns = steps.total_ns
    launch_bound, closing = launch_bound_gaps(
        index,
        g.events,
        (g.gs, g.ge),
        g.amounts,
        g.sync_opened,
        th.launch_bound_max_gap_us * 1000,
    )
    short_busy_ns = busy_in(g.events, g.events.short_kernel, st.windows)
    closing_ev = np.zeros(g.events.start_ns.size, dtype=np.bool_)
    closing_ev[closing[closing >= 0]] = True
    closing_busy_ns = busy_in(g.events, closing_ev, st.windows)
    launch_bound_ns = int(launch_bound.sum())
    cost_ns = launch_bound_ns + closing_busy_ns
    idle_ns = int(g.glen.sum())
    per_cause = g.amounts.sum(axis=0)
    busy_ns = index.busy_in_steps_ns(dev)
    optimizer_col = CAUSE_NAMES.index("optimizer_step")
    return IdleDevice(
        device=dev,
        busy_us=busy_ns / 1000.0,
        busy_fraction=busy_ns / total_ns if total_ns else None,
        idle_us=idle_ns / 1000.0,
        idle_fraction=idle_ns / total_ns if total_ns else None,
        idle_us_per_step=idle_ns / 1000.0 / len(steps) if len(steps) else None,
        gap_count=int(g.gs.size),
        causes={
            cause: IdleCause(
                us=int(per_cause[i]) / 1000.0,
                fraction_of_idle=int(per_cause[i]) / idle_ns if idle_ns else 0.0,
                fraction_of_step_time=int(per_cause[i]) / total_ns if total_ns else 0.0,
            )
            for i, cause in enumerate(CAUSE_NAMES)
        },
        sync_opened_gaps=int(g.sync_opened.sum()),
        optimizer=optimizer_cost(
            index,
            st.activity,
            dev,
            g.events,
            st.windows,
            closing_ev,
            int(per_cause[optimizer_col]),
            int(g.amounts[closing >= 0, optimizer_col].sum()),
            th,
        ),
        cpu_ops_top=cpu_ops_top(index, g.cpu_parts, total_ns, th.idle_top_ops),
        short_kernels=ShortKernelCost(
            busy_us=short_busy_ns / 1000.0,
            launch_bound_gaps=int((closing >= 0).sum()),
            launch_bound_idle_us=launch_bound_ns / 1000.0,
            launch_bound_idle_us_by_cause={
                c: int(g.amounts[closing >= 0, CAUSE_NAMES.index(c)].sum()) / 1000.0
                for c in LAUNCH_PATH_CAUSES
            },
            launch_bound_kernel_us=closing_busy_ns / 1000.0,
            cost_us=cost_ns / 1000.0,
            cost_fraction_of_step_time=cost_ns / total_ns if total_ns else 0.0,
        ),
        per_step=_idle_per_step(st, g),
        gap_histogram=_histogram(g.glen),
        largest_gaps=_largest_gaps(st, g),
        python_idle_us=int(g.frame_pieces.dur_ns.sum()) / 1000.0,
        sync_sources=sync_sources(
            index,
            st.frames,
            g.threads,
            np.where(g.sync_opened, g.sync_at, -1),
            g.glen,
            th.idle_top_ops,
        ),
        python_frames=pf.frame_summaries(
            st.frames,
            g.frame_pieces,
            g.step_of,
            len(steps),
            CAUSE_NAMES,
            idle_ns,
            total_ns,
            th.python_frames_listed,
            th.python_callers_listed,
        ),
    )


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
      :func:`.idle_costs.launch_bound_gaps` counts and their launch-bound idle (µs), with
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
    notes: list[str] = []
    if not index.devices:
        notes.append(gpu_lost_note(index) or "no GPU activity in this trace: nothing to be idle")
    if not steps.has_markers:
        notes.append("no ProfilerStep markers: the whole trace is one pseudo-step")
    st = _Setting(
        index=index,
        thresholds=thresholds,
        windows=iv.union(steps.start_ns, steps.end_ns),
        host_steps=iv.union(steps.cpu_start_ns, steps.cpu_end_ns)
        if steps.has_markers
        else iv.empty(),
        step_thread=step_thread_of(index),
        activity=ThreadActivity(index),
        frames=pf.FrameIndex(index.trace),
    )
    devices = [_device_panel(st, dev, _attribute(st, dev, pieces)) for dev in index.devices]
    return IdlePanel(
        cause_order=list(CAUSE_NAMES),
        cause_labels=dict(CAUSE_WORDS),
        main_device=index.main_device,
        devices=devices,
        python_stacks=st.has_stacks,
        notes=notes,
    )
