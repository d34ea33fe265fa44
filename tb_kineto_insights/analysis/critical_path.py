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

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tb_kineto_insights.analysis.efficiency import launching_op
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


_INDEX = {c: i for i, c in enumerate(PIECE_CLASSES)}
_LAUNCH = _INDEX["launch"]
_DEPENDENCY = _INDEX["dependency"]
_GAP_INDEX = np.array([_INDEX[c] for c in GAP_CLASSES])
#: per GPU operation kind (``op_kind``), its class's index
_OP_INDEX = np.array([_INDEX[_OP_CLASS[k]] for k in sorted(_OP_CLASS)])
#: per chain event kind (``kind``), its class's index (``runtime`` for other kinds)
_EVENT_INDEX = np.array(
    [_INDEX[_EVENT_CLASS.get(k, "runtime")] for k in range(max(_EVENT_CLASS) + 2)]
)


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
    """Prefix sums for run sums in O(1): ``host[e]`` the time of chain events ``0..e-1``
    by class (gaps by :data:`~.step_graph.GAP_CLASSES`, own time by event class), a row
    per event and a column per :data:`PIECE_CLASSES` entry; ``op[g]`` the same for GPU
    operations (their durations by class), ``op_gap`` their stream gaps."""

    host: npt.NDArray[np.float64]
    op: npt.NDArray[np.float64]
    op_gap: npt.NDArray[np.float64]
    run_head: I64
    waited_before: I64


def _prefix(graph: StepGraph, r: Replay) -> _Prefix:
    # each table is filled in rows 1.. of its prefix array and summed there in place:
    # a row per event and a column per class is the summary's largest array
    n_ev = r.gap.size
    gap_total = r.gap.astype(np.float64)
    raw = np.zeros(n_ev, dtype=np.float64)
    for c in GAP_CLASSES:
        raw += graph.gap_class[c]
    scale = np.divide(gap_total, raw, out=np.zeros_like(gap_total), where=raw > 0)
    host_cum = np.zeros((n_ev + 1, len(PIECE_CLASSES)), dtype=np.float64)
    host = host_cum[1:]
    for c in GAP_CLASSES:
        np.multiply(graph.gap_class[c], scale, out=host[:, _INDEX[c]])
    host[np.arange(n_ev), _EVENT_INDEX[np.minimum(graph.kind, _EVENT_INDEX.size - 1)]] += r.own
    np.cumsum(host, axis=0, out=host)
    n = graph.op_start.size
    op_cum = np.zeros((n + 1, len(PIECE_CLASSES)), dtype=np.float64)
    op = op_cum[1:]
    op[np.arange(n), _OP_INDEX[graph.op_kind]] = r.op_dur
    np.cumsum(op, axis=0, out=op)
    pos = np.arange(n)
    first_of_stream = np.ones(n, dtype=np.bool_)
    first_of_stream[1:] = graph.op_stream[1:] != graph.op_stream[:-1]
    prev_end = np.where(first_of_stream, r.op_start, np.roll(r.op_end, 1))
    op_gap = np.concatenate([[0.0], np.cumsum(np.maximum(r.op_start - prev_end, 0))])
    head = np.maximum.accumulate(np.where((r.op_bound != STREAM) | first_of_stream, pos, 0))
    ev = np.arange(n_ev)
    waited_before = np.maximum.accumulate(np.where(r.host_waited, ev, -1))
    return _Prefix(host_cum, op_cum, op_gap.astype(np.float64), head, waited_before)


@dataclass
class PathParts:
    """The pieces of the critical paths, gathered as the walks go (each hop of a walk
    is numbered): runs of queued GPU operations (``head..last`` of the graph, the first
    one starting no earlier than its ``clip``), each with the GPU's gaps between them
    (``launch``), and single pieces (host runs, launch latencies, waits, by index in
    :data:`PIECE_CLASSES`); :meth:`flat` lays them out as arrays."""

    op_start: I64
    op_end: I64
    run_head: list[int] = field(default_factory=list)
    run_last: list[int] = field(default_factory=list)
    run_clip: list[int] = field(default_factory=list)
    run_hop: list[int] = field(default_factory=list)
    piece_start: list[int] = field(default_factory=list)
    piece_end: list[int] = field(default_factory=list)
    piece_class: list[int] = field(default_factory=list)
    piece_hop: list[int] = field(default_factory=list)
    #: the first hop of each step's walk, and the number of hops
    step_hop: list[int] = field(default_factory=list)
    hops: int = 0

    def piece(self, start: int, end: int, klass: int) -> None:
        self.piece_start.append(start)
        self.piece_end.append(end)
        self.piece_class.append(klass)
        self.piece_hop.append(self.hops)

    def flat(self) -> tuple[I64, I64, I64, I64, I64]:
        """Every piece: ``start_ns, end_ns, klass, op`` (-1 for no GPU operation) and
        its order in the walks (hop, then: the run's operations, its gaps, the piece
        that bound it), in walk order."""
        head = np.asarray(self.run_head, dtype=np.int64)
        length = np.asarray(self.run_last, dtype=np.int64) - head + 1
        run = np.repeat(np.arange(head.size), length)
        offset = np.arange(run.size) - np.repeat(np.cumsum(length) - length, length)
        op = head[run] + offset
        o_start = self.op_start[op].copy()
        o_end = self.op_end[op]
        first = offset == 0
        o_start[first] = np.maximum(o_start[first], np.asarray(self.run_clip, dtype=np.int64))
        hop = np.asarray(self.run_hop, dtype=np.int64)
        inner = offset < length[run] - 1  # the GPU's gaps between queued operations
        at = op[inner]
        gap = self.op_start[at + 1] > self.op_end[at]
        g_at = at[gap]
        g_run = run[inner][gap]
        n_p = len(self.piece_start)
        start = np.concatenate([o_start, self.op_end[g_at], np.asarray(self.piece_start, np.int64)])
        end = np.concatenate([o_end, self.op_start[g_at + 1], np.asarray(self.piece_end, np.int64)])
        klass = np.concatenate(
            [np.full(op.size, -1), np.full(g_at.size, _LAUNCH), np.asarray(self.piece_class)]
        ).astype(np.int64)
        ops = np.concatenate([op, np.full(g_at.size + n_p, -1)]).astype(np.int64)
        sub = np.concatenate([offset, length[g_run] + offset[inner][gap], np.full(n_p, 2**40)])
        hops = np.concatenate([hop[run], hop[g_run], np.asarray(self.piece_hop, np.int64)])
        order = np.lexsort((sub, hops))
        return start[order], end[order], klass[order], ops[order], hops[order]

    def step_pieces(self, graph: StepGraph) -> list[list[PathPiece]]:
        """The pieces of each step's path, in walk order (from the step's end back)."""
        start, end, klass, op, hop = self.flat()
        kind = graph.op_kind
        bounds = np.searchsorted(hop, np.asarray([*self.step_hop, self.hops]), side="left")
        out: list[list[PathPiece]] = []
        for i in range(len(self.step_hop)):
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            out.append(
                [
                    PathPiece(
                        int(start[j]),
                        int(end[j]),
                        _OP_CLASS[int(kind[op[j]])] if op[j] >= 0 else PIECE_CLASSES[klass[j]],
                        int(op[j]),
                    )
                    for j in range(lo, hi)
                ]
            )
        return out


#: Where the walk stands: at an operation's end, at a host event's end, or at a host
#: event's start (the call's own time off the path: a kernel waited for its launch).
AT_OP, AT_EVENT_END, AT_EVENT_START = 0, 1, 2


def walk(
    graph: StepGraph, r: Replay, step: int, pre: _Prefix, parts: PathParts
) -> npt.NDArray[np.float64]:
    """The critical path of steady step ``step`` of a replay: its time by class (ns, by
    index in :data:`PIECE_CLASSES`); its pieces go to ``parts``."""
    lo = int(r.window_start[step])
    by = np.zeros(len(PIECE_CLASSES), dtype=np.float64)
    parts.step_hop.append(parts.hops)
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
            node, where = _op_run(graph, r, pre, node, lo, by, parts)
        else:
            node, where = _host_run(graph, r, pre, node, lo, by, parts, where == AT_EVENT_START)
        parts.hops += 1
    return by


def _op_run(
    graph: StepGraph,
    r: Replay,
    pre: _Prefix,
    g: int,
    lo: int,
    by: npt.NDArray[np.float64],
    parts: PathParts,
) -> tuple[int, int]:
    """The run of queued operations ending at ``g`` (back to the one that did not wait
    for its stream, or to the window's start), then what bound that one's start."""
    head = int(pre.run_head[g])
    cut = int(r.op_start[head]) < lo
    if cut:  # the window starts inside the run: its operations that end after lo
        head += int(np.searchsorted(r.op_end[head : g + 1], lo, side="right"))
        if head > g:
            return -1, AT_OP
    by += pre.op[g + 1] - pre.op[head]
    by[_LAUNCH] += pre.op_gap[g + 1] - pre.op_gap[head + 1]
    start = int(r.op_start[head])
    parts.run_head.append(head)
    parts.run_last.append(g)
    parts.run_clip.append(lo)
    parts.run_hop.append(parts.hops)
    if cut or start <= lo:
        by[_OP_INDEX[graph.op_kind[head]]] -= max(0, lo - start)
        return -1, AT_OP
    bound = int(r.op_bound[head])
    if bound == LAUNCHED:
        launcher = int(graph.op_launcher[head])
        ready_from = max(int(r.host_start[launcher]), lo)
        by[_LAUNCH] += max(0, start - ready_from)
        if start > ready_from:  # the launch call and its latency
            parts.piece(ready_from, start, _LAUNCH)
        return (launcher if int(r.host_start[launcher]) > lo else -1), AT_EVENT_START
    if bound == OTHER_STREAM:
        dep = int(graph.op_dep[head])
        dep_end = max(int(r.op_end[dep]), lo)
        by[_DEPENDENCY] += max(0, start - dep_end)
        if start > dep_end:
            parts.piece(dep_end, start, _DEPENDENCY)
        return (dep if int(r.op_end[dep]) > lo else -1), AT_OP
    return -1, AT_OP  # its stream's earlier work, or a fixed time: the path starts here


def _host_run(
    graph: StepGraph,
    r: Replay,
    pre: _Prefix,
    e: int,
    lo: int,
    by: npt.NDArray[np.float64],
    parts: PathParts,
    before_own: bool,
) -> tuple[int, int]:
    """The host run ending at event ``e`` (at its end, or at its start when
    ``before_own``: a kernel waited for that launch call), back to the last event that
    waited for the GPU, or to the window's start; then that wait's operation."""
    if not before_own and r.host_waited[e]:
        w = int(r.awaited[e])
        tail_from = max(int(r.op_end[w]), lo)
        klass = _event_index(graph, e)
        by[klass] += max(0, int(r.host_end[e]) - tail_from)
        parts.piece(tail_from, int(r.host_end[e]), klass)
        return (w if int(r.op_end[w]) > lo else -1), AT_OP
    stop = int(pre.waited_before[e - 1]) if e > 0 else -1  # the last wait before e
    first = stop + 1
    # events first..e with the host time before each; the window may start inside
    k = int(np.searchsorted(r.host_end[first : e + 1], lo, side="right"))
    a = first + k
    end = int(r.host_start[e]) if before_own else int(r.host_end[e])
    if a > e:
        return -1, AT_EVENT_END
    by += pre.host[e + 1] - pre.host[a]
    if before_own:
        by[_event_index(graph, e)] -= float(r.own[e])
    run_start = int(r.host_end[a - 1]) if a > 0 else int(graph.chain_start)
    over = lo - run_start
    if over > 0:  # the part of event a before lo: its gap first, then its own time
        gap_a = float(r.gap[a])
        from_gap = min(over, gap_a)
        if gap_a > 0:
            share = pre.host[a + 1, _GAP_INDEX] - pre.host[a, _GAP_INDEX]
            by[_GAP_INDEX] -= from_gap * share / gap_a
        by[_event_index(graph, a)] -= max(0.0, over - from_gap)
    if end > max(run_start, lo):
        parts.piece(max(run_start, lo), end, _INDEX["host"])
    if over >= 0 or stop < 0:
        return -1, AT_EVENT_END
    return stop, AT_EVENT_END


def _event_index(graph: StepGraph, e: int) -> int:
    return int(_EVENT_INDEX[min(int(graph.kind[e]), _EVENT_INDEX.size - 1)])


def critical_path_summary(
    index: TraceIndex, graph: StepGraph | None, actual: Replay | None
) -> tuple[CriticalPathPanel, PathParts | None]:
    """``summary.critical_path`` (module docstring) and the pieces of every steady
    step's path (for the timeline: :func:`path_intervals`); an empty panel with a note
    and no pieces without a graph."""
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
            None,
        )  # fmt: skip
    pre = _prefix(graph, actual)
    parts = PathParts(actual.op_start, actual.op_end)
    steps: list[CriticalPathStep] = []
    totals = np.zeros(len(PIECE_CLASSES), dtype=np.float64)
    for i in range(graph.n_steps):
        by = walk(graph, actual, i, pre, parts)
        length = float(actual.window_end[i] - actual.window_start[i])
        steps.append(
            CriticalPathStep(
                number=int(graph.step_number[i]),
                length_us=round(length / 1000.0, 3),
                by_class_us={c: round(v / 1000.0, 3) for c, v in _by_class(by).items() if v > 0},
            )
        )
        totals += by
    start, end, _, op, _ = parts.flat()
    on = op >= 0
    op_time = np.bincount(op[on], weights=end[on] - start[on], minlength=graph.op_start.size)
    n = graph.n_steps
    mean_len = float(actual.window_end[-1] - actual.window_start[0]) / n
    mean_by = {c: v / n / 1000.0 for c, v in _by_class(totals).items() if v > 0}
    return (
        CriticalPathPanel(
            steps=steps,
            mean_length_us=round(mean_len / 1000.0, 3),
            mean_by_class_us={c: round(v, 3) for c, v in mean_by.items()},
            fraction_by_class={
                c: round(v * 1000.0 / mean_len, 4) for c, v in mean_by.items() if mean_len > 0
            },
            top=_top(index, graph, op_time.astype(np.float64), n),
            notes=[],
        ),
        parts,
    )


def _by_class(by: npt.NDArray[np.float64]) -> dict[str, float]:
    """A class vector (by index in :data:`PIECE_CLASSES`) as ``{class: ns}`` over
    :data:`CLASSES`."""
    values = by.tolist()
    return {c: values[i] for i, c in enumerate(CLASSES)}


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
    index: TraceIndex, graph: StepGraph | None, parts: PathParts | None
) -> PathIntervals:
    """The pieces of :func:`critical_path_summary` (from the graph's origin) as
    :class:`PathIntervals` (trace clock), disjoint: a piece that overlaps the ones
    before it (host and GPU clocks a few µs apart) starts at their end; empty ones
    dropped. Their total is the step's path length less such overlaps and less the time
    before a path that starts at its stream's earlier work."""
    empty = np.zeros(0, dtype=np.int64)
    if graph is None or parts is None:
        return PathIntervals(empty, empty, empty, np.zeros(0, dtype=np.int32))
    start, end, klass, op, _ = parts.flat()
    keep = end > start
    start, end, klass, op = start[keep], end[keep], klass[keep], op[keep]
    if start.size == 0:
        return PathIntervals(empty, empty, empty, np.zeros(0, dtype=np.int32))
    start = start + graph.origin_ns
    end = end + graph.origin_ns
    on = op >= 0
    klass[on] = _OP_INDEX[graph.op_kind[op[on]]]
    name = np.full(start.size, -1, dtype=np.int32)
    tables = index.trace.tables
    for t, kind in enumerate(GPU_WORK_KINDS):
        sel = on.copy()
        sel[on] = graph.op_table[op[on]] == t
        if sel.any():
            name[sel] = tables[kind].name[graph.op_row[op[sel]]]
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
    labels: dict[str, float] = {}
    kinds: dict[str, str] = {}
    for t, kind in enumerate(GPU_WORK_KINDS):
        sel = on[graph.op_table[on] == t]
        if sel.size == 0:
            continue
        table = trace.tables[kind]
        rows = graph.op_row[sel]
        cpu_ops = trace.cpu_ops
        ops = launching_op(index, rows, kind)
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
