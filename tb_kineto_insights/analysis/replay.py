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

Between two waits of the host the chain is a running sum, and each stream a running
maximum (``e_g = W_g + max(free, max_{j<=g}(y_j + d_j - W_j))``, ``W`` the running sum
of gap plus duration, ``y`` the other start bounds), so a segment between two host
waits costs a few numpy passes: linear in events, a Python step per host wait.

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


def _schedule(
    graph: StepGraph,
    gap: I64,
    own: I64,
    awaited: I64,
    dur: I64,
    op_gap: I64,
    op_lat: I64,
) -> Replay:
    n_ev = gap.size
    n_op = dur.size
    hs = np.zeros(n_ev, dtype=np.int64)
    he = np.zeros(n_ev, dtype=np.int64)
    os_ = np.zeros(n_op, dtype=np.int64)
    oe = np.zeros(n_op, dtype=np.int64)
    bound = np.zeros(n_op, dtype=np.int8)
    waited = np.zeros(n_ev, dtype=np.bool_)
    free = graph.stream_free.copy()
    waits = np.flatnonzero(awaited >= 0)
    seg_last = np.unique(np.append(waits, n_ev - 1))
    op_seg = _op_segments(graph, seg_last)
    order = np.lexsort((np.arange(n_op), graph.op_stream, op_seg))
    bounds = np.searchsorted(op_seg[order], np.arange(seg_last.size + 1), side="left")
    t = int(graph.chain_start)
    a = 0
    for k, b in enumerate(seg_last.tolist()):
        step = np.cumsum(gap[a : b + 1] + own[a : b + 1])
        he[a : b + 1] = t + step
        hs[a : b + 1] = he[a : b + 1] - own[a : b + 1]
        ops = order[bounds[k] : bounds[k + 1]]
        if ops.size:
            _streams(graph, ops, hs, dur, op_gap, op_lat, free, os_, oe, bound)
        w = int(awaited[b])
        if w >= 0 and oe[w] > hs[b]:
            he[b] = oe[w] + own[b]
            waited[b] = True
        t = int(he[b])
        a = b + 1
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


def _streams(
    graph: StepGraph,
    ops: I64,
    hs: I64,
    dur: I64,
    op_gap: I64,
    op_lat: I64,
    free: I64,
    os_: I64,
    oe: I64,
    bound: npt.NDArray[np.int8],
) -> None:
    """Schedule one segment's operations (``ops``: sorted by stream, then stream order),
    in place. A stream's operations are cut into runs at each operation that waits for
    another stream; the runs are scheduled in the order the trace ran them (a valid
    order: the work waited for ended before the wait), each as a running maximum."""
    fixed = graph.op_fixed[ops]
    launcher = graph.op_launcher[ops]
    ready = np.where(fixed, graph.op_start[ops], hs[np.maximum(launcher, 0)] + op_lat[ops])
    dep = graph.op_dep[ops]
    d = dur[ops]
    g = op_gap[ops]
    stream = graph.op_stream[ops]
    new_run = np.ones(ops.size, dtype=np.bool_)
    new_run[1:] = (stream[1:] != stream[:-1]) | (dep[1:] >= 0)
    first = np.flatnonzero(new_run)
    last = np.append(first[1:], ops.size)
    run_order = np.argsort(graph.op_start[ops[first]], kind="stable")
    y = ready.copy()
    prev_end = np.zeros(ops.size, dtype=np.int64)
    for k in run_order.tolist():
        lo, hi = int(first[k]), int(last[k])
        sid = int(stream[lo])
        if dep[lo] >= 0:
            y[lo] = max(int(ready[lo]), int(oe[dep[lo]]) + int(graph.op_dep_gap[ops[lo]]))
        if hi - lo == 1:  # most runs of a launch-bound step: one operation
            start = max(int(free[sid]) + int(g[lo]), int(y[lo]))
            prev_end[lo] = free[sid]
            oe[ops[lo]] = start + int(d[lo])
            os_[ops[lo]] = start
            free[sid] = start + int(d[lo])
            continue
        w = np.cumsum(g[lo:hi] + d[lo:hi])
        run = np.maximum.accumulate(y[lo:hi] + d[lo:hi] - w)
        e = w + np.maximum(int(free[sid]), run)
        prev_end[lo] = free[sid]
        prev_end[lo + 1 : hi] = e[:-1]
        oe[ops[lo:hi]] = e
        os_[ops[lo:hi]] = e - d[lo:hi]
        free[sid] = int(e[-1])
    s = os_[ops]
    b = np.full(ops.size, STREAM, dtype=np.int8)
    not_stream = s > prev_end + g
    from_launch = not_stream & (s == ready)
    b[from_launch] = np.where(fixed[from_launch], FIXED, LAUNCHED)
    b[not_stream & (dep >= 0) & (s > ready)] = OTHER_STREAM
    bound[ops] = b


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
