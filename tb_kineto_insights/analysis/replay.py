"""Replay a :class:`~.step_graph.StepGraph`, changed or not: list scheduling over the
same host chain, streams and dependencies, and the step windows that come out.

The schedule (times in ns from the graph's origin):

* a chain event starts when the one before it ended plus its ``gap``, and ends ``own``
  later; an event that awaits a GPU operation ends ``own`` after the later of its start
  and that operation's end;
* a GPU operation starts at the latest of: the previous operation on its stream's end
  plus ``op_gap``; its launch call's start plus ``op_lat``; the end of the operation it
  waits for on another stream plus ``op_dep_gap``; an operation launched from outside
  the chain (``op_fixed``) no earlier than it did. It runs ``op_dur``.
* a step window runs from the later of its ``ProfilerStep`` start and the previous
  window's end, to the later of its ``ProfilerStep`` end and the end of the last GPU
  operation it launched: the windows of :mod:`.step_windows`, so a replayed step time
  is measured as the trace's is.

Between two waits of the host the chain is a running sum (one cumulative sum, offset
at each wait), and each stretch of a stream up to a cross-stream wait a running maximum
(``e_g = W_g + max(free, max_{j<=g}(y_j + d_j - W_j))``, ``W`` the running sum of gap
plus duration, ``y`` the other start bounds): numpy passes for long stretches, a Python
step per operation of a short one (a launch-bound step's stretches are one operation,
and numpy's cost per call would dominate them: ``benchmarks/RESULTS.md``). Linear in
events.

A :class:`Change` says what a fix does to the graph (less host time of a class, a wait
removed, operations shorter, launch costs gone); :func:`replay` applies one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tb_kineto_insights.analysis.step_graph import GAP_CLASSES, StepGraph

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Change:
    """What a fix does to the graph. Every part is optional; :meth:`plus` applies two
    fixes together.

    Attributes:
        label: what the fix is, in words (``"bf16 autocast: matmuls at the tensor-core
            rate"``).
        gap_keep: per gap class (:data:`~.step_graph.GAP_CLASSES`), the share of that
            host time that stays (0: all of it removed).
        gap_removed_ns: per chain event, host time (ns) removed from its gap (a Python
            function's time, say), on top of ``gap_keep``.
        own_keep: per chain event, the share of its own time that stays (launch calls
            whose kernels are fused away: 0).
        waits_removed: per chain event, whether its wait for the GPU goes (the host
            keeps launching).
        op_keep: per GPU operation, the share of its duration that stays.
        op_launch_free: per GPU operation, whether its launch costs go (its stream gap
            and launch latency: the work is kept, issued from one launch).
    """

    label: str = ""
    gap_keep: dict[str, float] = field(default_factory=dict)
    gap_removed_ns: I64 | None = None
    own_keep: F64 | None = None
    waits_removed: Mask | None = None
    op_keep: F64 | None = None
    op_launch_free: Mask | None = None

    def plus(self, other: Change) -> Change:
        """Both changes at once: shares multiply, removals add, masks join."""

        def mul(a: F64 | None, b: F64 | None) -> F64 | None:
            return b if a is None else a if b is None else a * b

        def add(a: I64 | None, b: I64 | None) -> I64 | None:
            return b if a is None else a if b is None else a + b

        def either(a: Mask | None, b: Mask | None) -> Mask | None:
            return b if a is None else a if b is None else a | b

        keep = dict(self.gap_keep)
        for k, v in other.gap_keep.items():
            keep[k] = keep.get(k, 1.0) * v
        return Change(
            label=" + ".join(x for x in (self.label, other.label) if x),
            gap_keep=keep,
            gap_removed_ns=add(self.gap_removed_ns, other.gap_removed_ns),
            own_keep=mul(self.own_keep, other.own_keep),
            waits_removed=either(self.waits_removed, other.waits_removed),
            op_keep=mul(self.op_keep, other.op_keep),
            op_launch_free=either(self.op_launch_free, other.op_launch_free),
        )


@dataclass
class Replay:
    """A replayed schedule: per chain event and per GPU operation its start and end,
    per steady step its window (ns from the graph's origin), and what bound each
    start (for the critical path): ``host_waited`` (the event's end waited for its
    awaited operation), ``op_bound`` (0 stream, 1 launch, 2 another stream, 3 its
    measured time)."""

    host_start: I64
    host_end: I64
    op_start: I64
    op_end: I64
    op_dur: I64
    op_bound: npt.NDArray[np.int8]
    host_waited: Mask
    awaited: I64
    gap: I64
    own: I64
    window_start: I64
    window_end: I64

    @property
    def mean_step_ns(self) -> float:
        """The mean replayed step time (the windows tile: last end - first start, / n)."""
        n = self.window_start.size
        return float(self.window_end[-1] - self.window_start[0]) / n if n else 0.0


STREAM, LAUNCHED, OTHER_STREAM, FIXED = 0, 1, 2, 3


def replay(graph: StepGraph, change: Change | None = None) -> Replay:
    """The schedule of ``graph`` with ``change`` applied (none: the trace as measured,
    to the ns where every bound was read from it). Linear in events (module docstring).
    """
    c = change or Change()
    gap = _gaps(graph, c)
    own = graph.own
    if c.own_keep is not None:
        own = np.round(own * c.own_keep).astype(np.int64)
    awaited = graph.awaited
    if c.waits_removed is not None:
        awaited = np.where(c.waits_removed, -1, awaited)
    dur = graph.op_end - graph.op_start
    if c.op_keep is not None:
        dur = np.round(dur * c.op_keep).astype(np.int64)
    op_gap, op_lat = graph.op_gap, graph.op_lat
    if c.op_launch_free is not None:
        op_gap = np.where(c.op_launch_free, 0, op_gap)
        op_lat = np.where(c.op_launch_free, 0, op_lat)
    return _schedule(graph, gap, own, awaited, dur, op_gap, op_lat)


def _gaps(graph: StepGraph, c: Change) -> I64:
    gap = graph.gap
    if c.gap_keep:
        removed = np.zeros(gap.size, dtype=np.float64)
        for klass in GAP_CLASSES:
            keep = c.gap_keep.get(klass, 1.0)
            if keep != 1.0:
                removed += graph.gap_class[klass] * (1.0 - keep)
        gap = gap - np.round(removed).astype(np.int64)
    if c.gap_removed_ns is not None:
        gap = gap - c.gap_removed_ns
    return np.maximum(gap, 0)


@dataclass(frozen=True)
class _Order:
    """The order a replay schedules the GPU operations in (it depends only on which
    host events wait: every replay without ``waits_removed`` shares one). Positions
    (``pos``) index the operations sorted by segment, stream and stream order; a *run*
    is a stretch of one stream in one segment up to the next operation that waits for
    another stream; runs go by segment, then by their first operation's measured start
    (a valid order: the work waited for ended before the wait)."""

    seg_last: I64  # per segment, its last chain event
    event_seg: I64  # per chain event, its segment
    op_pos: I64  # per position, the operation
    pos_of: I64  # per operation, its position
    pos_seg: I64  # per position, the segment
    head: Mask  # per position, whether a run starts there
    run_first: list[int]  # per run, its first position ...
    run_end: list[int]  # ... and the position after its last
    run_sid: list[int]  # per run, its stream
    run_dep: list[int]  # per run, the position of the operation its head waits for, or -1
    run_dep_gap: list[int]
    seg_runs: list[list[int]]  # per segment, its runs in the order they are scheduled
    seg_first_event: list[int]
    short_runs: bool  # whether any run is shorter than _NUMPY_RUN


def _order(graph: StepGraph, awaited: I64) -> _Order:
    n_ev = awaited.size
    n_op = graph.op_start.size
    seg_last = np.unique(np.append(np.flatnonzero(awaited >= 0), n_ev - 1))
    op_seg = _op_segments(graph, seg_last)
    op_pos = np.lexsort((np.arange(n_op), graph.op_stream, op_seg))
    pos_of = np.empty(n_op, dtype=np.int64)
    pos_of[op_pos] = np.arange(n_op)
    stream = graph.op_stream[op_pos]
    pos_seg = op_seg[op_pos]
    dep = graph.op_dep[op_pos]
    head = np.ones(n_op, dtype=np.bool_)
    head[1:] = (stream[1:] != stream[:-1]) | (pos_seg[1:] != pos_seg[:-1]) | (dep[1:] >= 0)
    first = np.flatnonzero(head)
    run_seg = pos_seg[first]
    run_order = np.lexsort((graph.op_start[op_pos[first]], run_seg))
    bounds = np.searchsorted(run_seg[run_order], np.arange(seg_last.size + 1), side="left")
    ordered = run_order.tolist()
    cuts = bounds.tolist()
    head_dep = dep[first]
    run_end = np.append(first[1:], n_op)
    return _Order(
        seg_last=seg_last,
        event_seg=np.searchsorted(seg_last, np.arange(n_ev), side="left"),
        op_pos=op_pos,
        pos_of=pos_of,
        pos_seg=pos_seg,
        head=head,
        run_first=first.tolist(),
        run_end=run_end.tolist(),
        run_sid=stream[first].tolist(),
        run_dep=np.where(head_dep >= 0, pos_of[np.maximum(head_dep, 0)], -1).tolist(),
        run_dep_gap=graph.op_dep_gap[op_pos[first]].tolist(),
        seg_runs=[ordered[cuts[k] : cuts[k + 1]] for k in range(seg_last.size)],
        seg_first_event=np.concatenate([[0], seg_last[:-1] + 1]).tolist(),
        short_runs=bool(((run_end - first) < _NUMPY_RUN).any()),
    )


def _shared_order(graph: StepGraph) -> _Order:
    """The order of every replay that keeps the graph's waits (computed once)."""
    o = graph.replay_cache.get("order")
    if not isinstance(o, _Order):
        o = graph.replay_cache["order"] = _order(graph, graph.awaited)
    return o


#: Runs of at least this many operations are scheduled with numpy (a running maximum),
#: shorter ones one operation at a time.
_NUMPY_RUN = 32


def _schedule(
    graph: StepGraph,
    gap: I64,
    own: I64,
    awaited: I64,
    dur: I64,
    op_gap: I64,
    op_lat: I64,
) -> Replay:
    """The schedule (module docstring): the host chain as a running sum whose offset is
    set at each host wait; per segment its runs, each a running maximum over its stream
    (a Python step per short run: most runs of a launch-bound step are one operation)."""
    o = _shared_order(graph) if awaited is graph.awaited else _order(graph, awaited)
    n_op = dur.size
    chain = np.cumsum(gap + own)
    chain_l = chain.tolist()
    own_l = own.tolist()
    awaited_l = awaited.tolist()
    pos = o.op_pos
    fixed = graph.op_fixed[pos]
    launcher = np.maximum(graph.op_launcher[pos], 0)
    # a launched operation's earliest start, less its segment's chain offset
    ready0 = np.where(fixed, graph.op_start[pos], chain[launcher] - own[launcher] + op_lat[pos])
    d_p, g_p = dur[pos], op_gap[pos]
    s_p = np.zeros(n_op, dtype=np.int64)
    e_p = np.zeros(n_op, dtype=np.int64)
    if o.short_runs:  # their inputs as Python numbers
        ready_l, fixed_l, d_l, g_l = ready0.tolist(), fixed.tolist(), d_p.tolist(), g_p.tolist()
    head_free = [0] * len(o.run_first)
    free = graph.stream_free.tolist()
    offsets = [0] * len(o.seg_runs)
    waited_at: list[int] = []
    waited_end: list[int] = []
    t = int(graph.chain_start)
    for k, runs in enumerate(o.seg_runs):
        a = o.seg_first_event[k]
        off = t - (chain_l[a - 1] if a else 0)
        offsets[k] = off
        for r in runs:
            lo, hi, sid = o.run_first[r], o.run_end[r], o.run_sid[r]
            f = free[sid]
            head_free[r] = f
            dp = o.run_dep[r]
            if hi - lo >= _NUMPY_RUN:
                ys = np.where(fixed[lo:hi], ready0[lo:hi], ready0[lo:hi] + off)
                if dp >= 0:
                    ys[0] = max(int(ys[0]), int(e_p[dp]) + o.run_dep_gap[r])
                w = np.cumsum(g_p[lo:hi] + d_p[lo:hi])
                e = w + np.maximum(f, np.maximum.accumulate(ys + d_p[lo:hi] - w))
                e_p[lo:hi] = e
                s_p[lo:hi] = e - d_p[lo:hi]
                free[sid] = int(e[-1])
                continue
            y = ready_l[lo] if fixed_l[lo] else ready_l[lo] + off
            if dp >= 0:
                y = max(y, int(e_p[dp]) + o.run_dep_gap[r])
            starts = []
            for p in range(lo, hi):
                if p > lo:
                    y = ready_l[p] if fixed_l[p] else ready_l[p] + off
                start = f + g_l[p]
                if y > start:
                    start = y
                starts.append(start)
                f = start + d_l[p]
            if hi - lo == 1:
                s_p[lo] = start
                e_p[lo] = f
            else:
                s_p[lo:hi] = starts
                e_p[lo:hi] = np.asarray(starts, dtype=np.int64) + d_p[lo:hi]
            free[sid] = f
        b = int(o.seg_last[k])
        t = chain_l[b] + off
        w_op = awaited_l[b]
        if w_op >= 0:
            done = int(e_p[o.pos_of[w_op]])
            if done > t - own_l[b]:
                t = done + own_l[b]
                waited_at.append(b)
                waited_end.append(t)
    # back to arrays: the host chain, the operations (by position, then by operation)
    he = chain + np.asarray(offsets, dtype=np.int64)[o.event_seg]
    hs = he - own
    he[waited_at] = waited_end
    waited = np.zeros(gap.size, dtype=np.bool_)
    waited[waited_at] = True
    ready = np.where(fixed, ready0, ready0 + np.asarray(offsets, dtype=np.int64)[o.pos_seg])
    run_of = np.cumsum(o.head) - 1
    prev_end = np.where(o.head, np.asarray(head_free, dtype=np.int64)[run_of], np.roll(e_p, 1))
    dep = graph.op_dep[pos]
    b_p = np.full(n_op, STREAM, dtype=np.int8)
    not_stream = s_p > prev_end + g_p
    from_launch = not_stream & (s_p == ready)
    b_p[from_launch] = np.where(fixed[from_launch], FIXED, LAUNCHED)
    b_p[not_stream & (dep >= 0) & (s_p > ready)] = OTHER_STREAM
    os_ = np.empty(n_op, dtype=np.int64)
    oe = np.empty(n_op, dtype=np.int64)
    bound = np.empty(n_op, dtype=np.int8)
    os_[pos], oe[pos], bound[pos] = s_p, e_p, b_p
    w_start, w_end = _windows(graph, hs, he, oe)
    return Replay(hs, he, os_, oe, dur, bound, waited, awaited, gap, own, w_start, w_end)


def _op_segments(graph: StepGraph, seg_last: I64) -> I64:
    """Per GPU operation, the chain segment it belongs to: its launch call's; an
    operation launched from outside the chain, that of the operation before it on its
    stream (it runs in the stream's order), else of the one after it, else the segment
    its measured start falls in."""
    launcher = graph.op_launcher
    seg = np.searchsorted(seg_last, np.maximum(launcher, 0), side="left").astype(np.int64)
    fixed = launcher < 0
    if not fixed.any():
        return seg
    n = seg.size
    pos = np.arange(n)
    stream = graph.op_stream
    starts_stream = np.ones(n, dtype=np.bool_)
    starts_stream[1:] = stream[1:] != stream[:-1]
    # the last chain-launched operation at or before each position, in its stream
    last_own = np.maximum.accumulate(np.where(~fixed | starts_stream, pos, 0))
    before = (~fixed[last_own]) & (stream[last_own] == stream)
    # the first chain-launched operation at or after each position, in its stream
    ends_stream = np.ones(n, dtype=np.bool_)
    ends_stream[:-1] = stream[:-1] != stream[1:]
    next_own = np.minimum.accumulate(np.where(~fixed | ends_stream, pos, n - 1)[::-1])[::-1]
    after = (~fixed[next_own]) & (stream[next_own] == stream)
    by_time = np.searchsorted(graph.host_start, graph.op_start, side="right") - 1
    by_time = np.searchsorted(seg_last, np.maximum(by_time, 0), side="left")
    return np.where(
        ~fixed, seg, np.where(before, seg[last_own], np.where(after, seg[next_own], by_time))
    ).astype(np.int64)


def _windows(graph: StepGraph, hs: I64, he: I64, oe: I64) -> tuple[I64, I64]:
    """The replayed step windows (:mod:`.step_windows`' rule)."""
    n = graph.n_steps
    cpu_start = he[graph.marker_start]
    cpu_end = he[graph.marker_end]
    gpu_end = cpu_end.copy()
    mine = (~graph.op_fixed) & (graph.op_step >= 0)
    np.maximum.at(gpu_end, graph.op_step[mine], oe[mine])
    start = cpu_start.copy()
    end = gpu_end
    if n:
        start[0] = max(int(start[0]), int(graph.first_window_floor))
        end[0] = max(int(end[0]), int(start[0]))
    for i in range(1, n):
        start[i] = max(int(start[i]), int(end[i - 1]))
        end[i] = max(int(end[i]), int(start[i]))
    return start, end


def identity_error(graph: StepGraph, measured: Replay | None = None) -> float:
    """|replayed - measured| / measured mean step time of the unchanged replay: how
    closely the graph holds the trace (0.0 without steps)."""
    r = measured or replay(graph)
    n = graph.n_steps
    if not n:
        return 0.0
    actual = float(graph.window_end[-1] - graph.window_start[0]) / n
    return abs(r.mean_step_ns - actual) / actual if actual > 0 else 0.0


__all__ = ["Change", "Replay", "identity_error", "replay"]
