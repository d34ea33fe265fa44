"""``summary.critical_path``: what each steady step waited on, end to end.

The critical path of a step window is the chain of work that set its end: walked back
from the window's end through the replayed schedule of :mod:`.replay` (unchanged, so
it is the measured one) to the window's start. At each piece the walk follows what
bound its start:

* a GPU operation that waited for the previous one on its stream → that operation (the
  gap between them is launch overhead on the GPU's side);
* one that waited for its launch call → the launch latency, then the host chain before
  that call;
* one that waited for another stream's operation → that operation (a cross-stream
  wait: ``dependency``);
* a host event that waited for the GPU (a sync) → the part after the wait, then the
  operation it waited for;
* any other host event → its own time, the host time before it, the event before it.

The path's time by class (:data:`CLASSES`; per step, and its mean over the steady
steps) says what a step is made of where it matters: shortening anything off the path
does not shorten the step. Classes: GPU ``compute``, ``communication``, ``copy``
(memcpy and memset); host ``launch`` (launch calls, the launch latency, the GPU's gaps
between queued kernels), ``sync`` (a sync call's own time), ``allocator``
(``cudaMalloc``/``cudaFree``), ``runtime`` (other runtime calls), and the host time
between calls by :data:`~.step_graph.GAP_CLASSES` (``data_loading``, ``optimizer``,
``cpu_ops``, ``untraced``: Python and whatever else the profiler did not record);
``dependency``: waiting for another stream. ``top`` names the largest GPU pieces by the
CPU op that launched them (kernel name where none). Linear in events: the walk jumps
over runs of host events and of queued kernels with prefix sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tb_kineto_insights.analysis.enclosing_op import innermost_op
from tb_kineto_insights.analysis.names import short_kernel_name
from tb_kineto_insights.analysis.replay import LAUNCHED, OTHER_STREAM, STREAM, Replay
from tb_kineto_insights.analysis.step_graph import (
    ALLOCATOR,
    COMMUNICATION,
    COMPUTE,
    GAP_CLASSES,
    LAUNCH,
    MARKER,
    MEMCPY,
    MEMSET,
    SYNC,
    StepGraph,
)
from tb_kineto_insights.analysis.step_windows import GPU_WORK_KINDS
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.schema.what_if import CriticalPathItem, CriticalPathPanel, CriticalPathStep

I64 = npt.NDArray[np.int64]

#: The classes of the path's time, in display order (module docstring).
CLASSES: tuple[str, ...] = (
    "compute",
    "communication",
    "copy",
    "dependency",
    "launch",
    "sync",
    "allocator",
    "runtime",
    *GAP_CLASSES,
)
#: The classes of :class:`PathPiece`: :data:`CLASSES` and ``host`` (a run of host events,
#: its time split by class in the step's ``by_class_us`` only).
PIECE_CLASSES: tuple[str, ...] = (*CLASSES, "host")
_OP_CLASS = {COMPUTE: "compute", COMMUNICATION: "communication", MEMCPY: "copy", MEMSET: "copy"}
_EVENT_CLASS = {MARKER: "runtime", LAUNCH: "launch", SYNC: "sync", ALLOCATOR: "allocator"}
#: GPU pieces named in ``top``.
TOP_ITEMS = 10


@dataclass
class PathPiece:
    """One piece of a critical path: ``[start_ns, end_ns)`` from the graph's origin,
    its class, and for a GPU operation its index in the graph (-1 otherwise)."""

    start_ns: int
    end_ns: int
    klass: str
    op: int = -1


@dataclass
class _Prefix:
    """Prefix sums for run sums in O(1)."""

    gap: dict[str, npt.NDArray[np.float64]]
    own: dict[str, npt.NDArray[np.float64]]
    op_dur: dict[str, npt.NDArray[np.float64]]
    op_gap: npt.NDArray[np.float64]
    run_head: I64
    waited_before: I64


def _prefix(graph: StepGraph, r: Replay) -> _Prefix:
    def cum(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return np.concatenate([[0.0], np.cumsum(x)])

    gap_total = r.gap.astype(np.float64)
    raw = np.zeros(gap_total.size, dtype=np.float64)
    for c in GAP_CLASSES:
        raw += graph.gap_class[c]
    scale = np.divide(gap_total, raw, out=np.zeros_like(gap_total), where=raw > 0)
    gap = {c: cum(graph.gap_class[c].astype(np.float64) * scale) for c in GAP_CLASSES}
    own_f = r.own.astype(np.float64)
    own_kind = {c: np.zeros(r.own.size) for c in ("launch", "sync", "allocator", "runtime")}
    for kind, c in _EVENT_CLASS.items():
        own_kind[c] += np.where(graph.kind == kind, own_f, 0.0)
    other = ~np.isin(graph.kind, list(_EVENT_CLASS))
    own_kind["runtime"] += np.where(other, own_f, 0.0)
    own = {c: cum(v) for c, v in own_kind.items()}
    op_dur = {
        c: cum(np.where(np.isin(graph.op_kind, [k for k, v in _OP_CLASS.items() if v == c]),
                        r.op_dur, 0).astype(np.float64))
        for c in ("compute", "communication", "copy")
    }  # fmt: skip
    n = graph.op_start.size
    pos = np.arange(n)
    first_of_stream = np.ones(n, dtype=np.bool_)
    first_of_stream[1:] = graph.op_stream[1:] != graph.op_stream[:-1]
    prev_end = np.where(first_of_stream, r.op_start, np.roll(r.op_end, 1))
    op_gap = cum(np.maximum(r.op_start - prev_end, 0).astype(np.float64))
    head = np.maximum.accumulate(np.where((r.op_bound != STREAM) | first_of_stream, pos, 0))
    ev = np.arange(r.host_end.size)
    waited_before = np.maximum.accumulate(np.where(r.host_waited, ev, -1))
    return _Prefix(gap, own, op_dur, op_gap, head, waited_before)


#: Where the walk stands: at an operation's end, at a host event's end, or at a host
#: event's start (the call's own time off the path: a kernel waited for its launch).
AT_OP, AT_EVENT_END, AT_EVENT_START = 0, 1, 2


def walk(
    graph: StepGraph, r: Replay, step: int, pre: _Prefix
) -> tuple[dict[str, float], list[PathPiece]]:
    """The critical path of steady step ``step`` of a replay: its time by class (ns) and
    its pieces (GPU operations one by one, host runs as one piece each)."""
    lo = int(r.window_start[step])
    by: dict[str, float] = {c: 0.0 for c in CLASSES}
    pieces: list[PathPiece] = []
    mine = np.flatnonzero((graph.op_step == step) & ~graph.op_fixed)
    end_event = int(graph.marker_end[step])
    if mine.size and int(r.op_end[mine].max()) >= int(r.host_end[end_event]):
        node, where = int(mine[np.argmax(r.op_end[mine])]), AT_OP
    else:
        node, where = end_event, AT_EVENT_END
    for _ in range(graph.gap.size + graph.op_start.size + 1):  # each hop moves back
        if node < 0:
            break
        if where == AT_OP:
            node, where = _op_run(graph, r, pre, node, lo, by, pieces)
        else:
            node, where = _host_run(graph, r, pre, node, lo, by, pieces, where == AT_EVENT_START)
    return by, pieces


def _op_run(
    graph: StepGraph,
    r: Replay,
    pre: _Prefix,
    g: int,
    lo: int,
    by: dict[str, float],
    pieces: list[PathPiece],
) -> tuple[int, int]:
    """The run of queued operations ending at ``g`` (back to the one that did not wait
    for its stream, or to the window's start), then what bound that one's start."""
    head = int(pre.run_head[g])
    cut = int(r.op_start[head]) < lo
    if cut:  # the window starts inside the run: its operations that end after lo
        head += int(np.searchsorted(r.op_end[head : g + 1], lo, side="right"))
        if head > g:
            return -1, AT_OP
    for c, arr in pre.op_dur.items():
        by[c] += float(arr[g + 1] - arr[head])
    by["launch"] += float(pre.op_gap[g + 1] - pre.op_gap[head + 1])
    starts, ends = r.op_start[head : g + 1], r.op_end[head : g + 1]
    pieces.extend(
        PathPiece(a, b, _OP_CLASS[k], op)
        for a, b, k, op in zip(
            starts.tolist(),
            ends.tolist(),
            graph.op_kind[head : g + 1].tolist(),
            range(head, g + 1),
            strict=True,
        )
    )
    # the GPU's gaps between queued operations
    gaps = np.flatnonzero(starts[1:] > ends[:-1])
    pieces.extend(
        PathPiece(a, b, "launch")
        for a, b in zip(ends[gaps].tolist(), starts[gaps + 1].tolist(), strict=True)
    )
    start = int(r.op_start[head])
    if cut or start <= lo:
        over = max(0, lo - start)
        by[_OP_CLASS[int(graph.op_kind[head])]] -= over
        first_op = next(p for p in reversed(pieces) if p.op == head)
        first_op.start_ns = max(start, lo)
        return -1, AT_OP
    bound = int(r.op_bound[head])
    if bound == LAUNCHED:
        launcher = int(graph.op_launcher[head])
        ready_from = max(int(r.host_start[launcher]), lo)
        by["launch"] += max(0, start - ready_from)
        if start > ready_from:  # the launch call and its latency
            pieces.append(PathPiece(ready_from, start, "launch"))
        return (launcher if int(r.host_start[launcher]) > lo else -1), AT_EVENT_START
    if bound == OTHER_STREAM:
        dep = int(graph.op_dep[head])
        dep_end = max(int(r.op_end[dep]), lo)
        by["dependency"] += max(0, start - dep_end)
        if start > dep_end:
            pieces.append(PathPiece(dep_end, start, "dependency"))
        return (dep if int(r.op_end[dep]) > lo else -1), AT_OP
    return -1, AT_OP  # its stream's earlier work, or a fixed time: the path starts here


def _host_run(
    graph: StepGraph,
    r: Replay,
    pre: _Prefix,
    e: int,
    lo: int,
    by: dict[str, float],
    pieces: list[PathPiece],
    before_own: bool,
) -> tuple[int, int]:
    """The host run ending at event ``e`` (at its end, or at its start when
    ``before_own``: a kernel waited for that launch call), back to the last event that
    waited for the GPU, or to the window's start; then that wait's operation."""
    if not before_own and r.host_waited[e]:
        w = int(r.awaited[e])
        tail_from = max(int(r.op_end[w]), lo)
        klass = _event_class(graph, e)
        by[klass] += max(0, int(r.host_end[e]) - tail_from)
        pieces.append(PathPiece(tail_from, int(r.host_end[e]), klass))
        return (w if int(r.op_end[w]) > lo else -1), AT_OP
    stop = int(pre.waited_before[e - 1]) if e > 0 else -1  # the last wait before e
    first = stop + 1
    # events first..e with the host time before each; the window may start inside
    k = int(np.searchsorted(r.host_end[first : e + 1], lo, side="right"))
    a = first + k
    end = int(r.host_start[e]) if before_own else int(r.host_end[e])
    if a > e:
        return -1, AT_EVENT_END
    for c in GAP_CLASSES:
        by[c] += float(pre.gap[c][e + 1] - pre.gap[c][a])
    for c, arr in pre.own.items():
        by[c] += float(arr[e + 1] - arr[a])
    if before_own:
        by[_event_class(graph, e)] -= float(r.own[e])
    run_start = int(r.host_end[a - 1]) if a > 0 else int(graph.chain_start)
    over = lo - run_start
    if over > 0:  # the part of event a before lo: its gap first, then its own time
        gap_a = float(r.gap[a])
        from_gap = min(over, gap_a)
        for c in GAP_CLASSES:
            share = float(pre.gap[c][a + 1] - pre.gap[c][a])
            by[c] -= from_gap * share / gap_a if gap_a > 0 else 0.0
        by[_event_class(graph, a)] -= max(0.0, over - from_gap)
    if end > max(run_start, lo):
        pieces.append(PathPiece(max(run_start, lo), end, "host"))
    if over >= 0 or stop < 0:
        return -1, AT_EVENT_END
    return stop, AT_EVENT_END


def _event_class(graph: StepGraph, e: int) -> str:
    return _EVENT_CLASS.get(int(graph.kind[e]), "runtime")


def critical_path_summary(
    index: TraceIndex, graph: StepGraph | None, actual: Replay | None
) -> tuple[CriticalPathPanel, list[list[PathPiece]]]:
    """``summary.critical_path`` (module docstring) and each steady step's path pieces
    (for the timeline); an empty panel with a note without a graph."""
    if graph is None or actual is None or graph.n_steps == 0:
        return (
            CriticalPathPanel(
                steps=[],
                mean_length_us=None,
                mean_by_class_us={},
                fraction_by_class={},
                top=[],
                notes=["No critical path: the trace has no steps with GPU work launched "
                       "from the step's threads (no ProfilerStep markers or no runtime calls)."],
            ),
            [],
        )  # fmt: skip
    pre = _prefix(graph, actual)
    steps: list[CriticalPathStep] = []
    all_pieces: list[list[PathPiece]] = []
    op_time = np.zeros(graph.op_start.size, dtype=np.float64)
    totals = {c: 0.0 for c in CLASSES}
    for i in range(graph.n_steps):
        by, pieces = walk(graph, actual, i, pre)
        all_pieces.append(pieces)
        for p in pieces:
            if p.op >= 0:
                op_time[p.op] += p.end_ns - p.start_ns
        length = float(actual.window_end[i] - actual.window_start[i])
        steps.append(
            CriticalPathStep(
                number=int(graph.step_number[i]),
                length_us=round(length / 1000.0, 3),
                by_class_us={c: round(v / 1000.0, 3) for c, v in by.items() if v > 0},
            )
        )
        for c, v in by.items():
            totals[c] += v
    n = graph.n_steps
    mean_len = float(actual.window_end[-1] - actual.window_start[0]) / n
    mean_by = {c: v / n / 1000.0 for c, v in totals.items() if v > 0}
    return (
        CriticalPathPanel(
            steps=steps,
            mean_length_us=round(mean_len / 1000.0, 3),
            mean_by_class_us={c: round(v, 3) for c, v in mean_by.items()},
            fraction_by_class={
                c: round(v * 1000.0 / mean_len, 4) for c, v in mean_by.items() if mean_len > 0
            },
            top=_top(index, graph, op_time, n),
            notes=[],
        ),
        all_pieces,
    )


@dataclass
class PathIntervals:
    """Every steady step's critical path on the trace's own clock (ns), sorted by start,
    for the timeline's ``critical_path`` lane: ``klass`` indexes :data:`CLASSES`,
    ``name`` is a GPU operation's trace name id (-1 for host pieces)."""

    start_ns: I64
    end_ns: I64
    klass: I64
    name: npt.NDArray[np.int32]


def path_intervals(
    index: TraceIndex, graph: StepGraph | None, pieces: list[list[PathPiece]]
) -> PathIntervals:
    """The pieces of :func:`critical_path_summary` (from the graph's origin) as
    :class:`PathIntervals` (trace clock), disjoint: a piece that overlaps the ones
    before it (host and GPU clocks a few µs apart) starts at their end; empty ones
    dropped. Their total is the step's path length less such overlaps and less the time
    before a path that starts at its stream's earlier work."""
    flat = [p for step in pieces for p in step if p.end_ns > p.start_ns]
    if graph is None or not flat:
        empty = np.zeros(0, dtype=np.int64)
        return PathIntervals(empty, empty, empty, np.zeros(0, dtype=np.int32))
    start = np.array([p.start_ns for p in flat], dtype=np.int64) + graph.origin_ns
    end = np.array([p.end_ns for p in flat], dtype=np.int64) + graph.origin_ns
    klass = np.array([PIECE_CLASSES.index(p.klass) for p in flat], dtype=np.int64)
    name = np.full(len(flat), -1, dtype=np.int32)
    tables = index.trace.tables
    for j, p in enumerate(flat):
        if p.op >= 0:
            table = tables[GPU_WORK_KINDS[int(graph.op_table[p.op])]]
            name[j] = int(table.name[int(graph.op_row[p.op])])
    order = np.argsort(start, kind="stable")
    start, end, klass, name = start[order], end[order], klass[order], name[order]
    # disjoint on the lane: where the host's and the GPU's clocks disagree by a few µs
    # (a blocking copy's call ending before its copy does), a piece starts where the
    # one before it ended
    before = np.maximum.accumulate(end)
    start[1:] = np.maximum(start[1:], before[:-1])
    keep = end > start
    return PathIntervals(start[keep], end[keep], klass[keep], name[keep])


def _top(
    index: TraceIndex, graph: StepGraph, op_time: npt.NDArray[np.float64], n: int
) -> list[CriticalPathItem]:
    """The largest GPU pieces of the path by the CPU op that launched them (the kernel's
    short name where none), per step."""
    on = np.flatnonzero(op_time > 0)
    if on.size == 0:
        return []
    trace = index.trace
    rt = trace.runtime
    labels: dict[str, float] = {}
    kinds: dict[str, str] = {}
    for t, kind in enumerate(GPU_WORK_KINDS):
        sel = on[graph.op_table[on] == t]
        if sel.size == 0:
            continue
        table = trace.tables[kind]
        rows = graph.op_row[sel]
        launch = index.launch_row[kind][rows]
        ok = launch >= 0
        ops = np.full(sel.size, -1, dtype=np.int64)
        at = launch[ok]
        cpu_ops = trace.cpu_ops
        ops[ok] = innermost_op(cpu_ops, rt.pid[at], rt.tid[at], rt.start_ns[at])
        named = ops >= 0
        for mask, ids, text in (
            (named, cpu_ops.name[ops[named]], lambda k: trace.names[k]),
            (~named, table.name[rows[~named]], lambda k: short_kernel_name(trace.names[k])),
        ):
            if not mask.any():
                continue
            uniq, first, inverse = np.unique(
                np.asarray(ids, dtype=np.int64), return_index=True, return_inverse=True
            )
            sums = np.bincount(inverse.reshape(-1), weights=op_time[sel[mask]], minlength=uniq.size)
            op_kind = graph.op_kind[sel[mask]]
            for k, f, v in zip(uniq.tolist(), first.tolist(), sums.tolist(), strict=True):
                name = text(k)
                labels[name] = labels.get(name, 0.0) + v
                kinds.setdefault(name, _OP_CLASS[int(op_kind[f])])
    best = sorted(labels.items(), key=lambda kv: -kv[1])[:TOP_ITEMS]
    return [
        CriticalPathItem(name=name, klass=kinds[name], us_per_step=round(v / n / 1000.0, 3))
        for name, v in best
    ]
