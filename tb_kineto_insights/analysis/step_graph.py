"""The steady-state steps as a dependency graph, in arrays: what the replay schedules.

Built from the trace alone (DESIGN.md, "what if"; the Daydream approach: a CUPTI
dependency graph replayed with a change applied):

* **The host chain.** The threads that run the step (the ``ProfilerStep`` thread and the
  autograd engine's threads, :func:`~.step_windows.step_threads`) are one chain: while
  the autograd thread runs ``backward()``, the thread that called it waits, so their
  work does not overlap. The chain's events are the runtime calls on those threads in
  the steady steps' host windows, in time order (a call nested in another, a driver
  call inside a runtime call, is part of it), and two markers per step (the
  ``ProfilerStep`` range's start and end). Each event has its ``gap``: the host time
  since the previous event ended, split by what covered it (:data:`GAP_CLASSES`: a
  DataLoader fetch, the optimizer step, other CPU ops, nothing traced: Python), and its
  ``own`` time. A call that waited for the GPU (a ``*Synchronize``, a blocking copy, a
  ``cudaFree``; :func:`_syncs`) *awaits* the GPU operation whose end it waited for: its
  ``own`` time is what it spent after that end.
* **The GPU streams.** Every kernel, copy and memset launched by a chain event is an
  operation on its stream, in the stream's order. It starts at the latest of three
  moments, whichever the trace shows was binding: the previous operation's end plus the
  stream's own gap (``op_gap``: it was queued before its stream was free), its launch
  call's start plus the launch latency
  (``op_lat``), and, where it waited for work on another stream (``cudaStreamWaitEvent``:
  a start far from both of the others, right at another stream's end), that
  operation's end (``op_dep``, ``op_dep_gap``). GPU work in the steady windows launched
  from elsewhere (another thread) is kept at its measured time (``op_fixed``).

Replaying this graph unchanged gives back the measured step windows (to the ns where
every constraint is read from the trace; :mod:`.replay` says how close on real traces).
Every time is in ns from ``origin_ns``. Linear in events after one sort.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.group_sums import distinct, distinct_inverse, distinct_pairs
from tb_kineto_insights.analysis.host_activity import step_thread_of
from tb_kineto_insights.analysis.step_windows import GPU_WORK_KINDS, step_threads
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.trace import model as m

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

#: What covered the host time between two chain events, in priority order (the first
#: that covers a moment takes it): a DataLoader fetch, the optimizer step, any other CPU
#: op or annotation, and nothing traced (Python, I/O, sleep).
GAP_CLASSES: tuple[str, ...] = ("data_loading", "optimizer", "cpu_ops", "untraced")
#: Chain event kinds (``kind``).
MARKER, LAUNCH, SYNC, ALLOCATOR, RUNTIME = 0, 1, 2, 3, 4
KIND_NAMES: tuple[str, ...] = ("marker", "launch", "sync", "allocator", "runtime")
#: GPU operation kinds (``op_kind``).
COMPUTE, COMMUNICATION, MEMCPY, MEMSET = 0, 1, 2, 3
OP_KIND_NAMES: tuple[str, ...] = ("compute", "communication", "memcpy", "memset")

#: An operation launched before its stream was free, that starts at most this long
#: after the previous one ended, was waiting for it (consecutive kernels of a queue start
#: 1-10 µs apart on H100/H200).
QUEUE_GAP_MAX_NS = 40_000
#: An operation launched after its stream was free that starts later than this after
#: its launch call started, or a queued one that starts later than ``QUEUE_GAP_MAX_NS``
#: after its stream was free, is looked up as a wait for another stream.
LAUNCH_LATENCY_MAX_NS = 60_000
#: ... on an operation of another stream that ended at most this long before it (an
#: event wait wakes a stream 10-30 µs after the event: the h200x2 DDP runs).
DEPENDENCY_GAP_NS = 40_000
#: A call that ends at most this long after a GPU operation ended waited for it (the
#: host wakes up a few µs after the GPU signals).
SYNC_WAKE_NS = 40_000
#: ... when that operation ended at least this long after the call started.
SYNC_MIN_WAIT_NS = 2_000
#: "Free since always": a stream with no work before the steady steps.
NEVER_BUSY_NS = -(2**60)
#: The launch latency assumed where the trace shows none (an operation that waited for
#: its stream): the median of the measured ones, this when there is none.
DEFAULT_LAUNCH_LATENCY_NS = 5_000


@dataclass
class StepGraph:
    """The graph of the steady-state steps (module docstring). Host arrays have one
    entry per chain event (length ``R``), ``op_*`` arrays one per GPU operation (length
    ``G``, sorted by stream, then start)."""

    origin_ns: int
    #: host chain, in order
    host_start: I64
    host_end: I64
    gap: I64
    gap_class: dict[str, I64]
    own: I64
    kind: npt.NDArray[np.int8]
    awaited: I64
    name: npt.NDArray[np.int32]
    host_step: I64
    chain_start: int
    #: GPU operations
    op_table: npt.NDArray[np.int8]
    op_row: I64
    op_kind: npt.NDArray[np.int8]
    op_start: I64
    op_end: I64
    op_stream: I64
    op_launcher: I64
    op_gap: I64
    op_lat: I64
    op_dep: I64
    op_dep_gap: I64
    op_fixed: Mask
    op_step: I64
    #: per stream (``op_stream`` indexes it): ``(device, stream)`` and when it was last
    #: busy before its first operation here (the work queued before the steady steps)
    streams: list[tuple[int, int]]
    stream_free: I64
    #: steps: the chain events of each step's ``ProfilerStep`` start and end markers, the
    #: measured windows, and the earliest the first window may start (the end of the
    #: window before it, left out or lost)
    step_number: I64
    marker_start: I64
    marker_end: I64
    window_start: I64
    window_end: I64
    first_window_floor: int
    #: per trace name id of a chain call: its index in ``trace.names`` (for labels)
    names: list[str] = field(default_factory=list)
    #: what the replays of this graph share, kept by :mod:`.replay` (derived, not data)
    replay_cache: dict[str, object] = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_steps(self) -> int:
        return int(self.step_number.size)


def build_step_graph(index: TraceIndex) -> StepGraph | None:
    """The graph of ``index``'s steady-state steps; None without steps with markers,
    without GPU work, or without a runtime call on the step's threads."""
    steps = index.steps
    trace = index.trace
    rt = trace.runtime
    if not (steps.has_markers and len(steps) and len(rt)):
        return None
    threads = _chain_threads(index)
    origin = int(steps.start_ns[0])
    on_thread = np.zeros(len(rt), dtype=np.bool_)
    for pid, tid in threads:
        on_thread |= (rt.pid == pid) & (rt.tid == tid)
    host_step = steps.host_step_of(rt.start_ns)
    rows = np.flatnonzero(on_thread & (host_step >= 0))
    if rows.size == 0:
        return None
    rows = _outermost(rt.start_ns[rows], rt.end_ns[rows], rows)
    n = len(steps)
    h_start, h_end = steps.host_windows()
    cpu_start, cpu_end = steps.cpu_start_ns, np.minimum(steps.cpu_end_ns, h_end)
    # chain events: the calls, then a start and an end marker per step, by time (a
    # marker before a call at the same ns: the step starts before its first call)
    t_start = np.concatenate([rt.start_ns[rows], cpu_start, cpu_end])
    t_end = np.concatenate([rt.end_ns[rows], cpu_start, cpu_end])
    is_marker = np.concatenate([np.zeros(rows.size, np.bool_), np.ones(2 * n, np.bool_)])
    src = np.concatenate([rows, -1 - np.arange(2 * n)])  # call row, or -1 - marker
    order = np.lexsort((~is_marker, t_start))
    t_start, t_end, is_marker, src = t_start[order], t_end[order], is_marker[order], src[order]
    chain_start = int(cpu_start[0])
    prev_end = np.maximum.accumulate(np.concatenate([[chain_start], t_end]))[:-1]
    begin = np.maximum(t_start, prev_end)  # a call overlapping the last one waits for it
    gap = begin - prev_end
    end = np.maximum(t_end, begin)
    names = trace.names
    kind = np.full(src.size, RUNTIME, dtype=np.int8)
    kind[is_marker] = MARKER
    call = ~is_marker
    call_rows = src[call]
    name_ids = np.full(src.size, -1, dtype=np.int32)
    name_ids[call] = rt.name[call_rows]
    ids = distinct(rt.name[call_rows])
    for i in ids:
        text = names[int(i)]
        klass = (
            LAUNCH
            if nm.is_launch(text)
            else SYNC
            if nm.is_sync(text)
            else ALLOCATOR
            if nm.is_allocator_call(text)
            else RUNTIME
        )
        kind[call & (name_ids == int(i))] = klass
    marker_pos = np.empty(2 * n, dtype=np.int64)
    marker_pos[-1 - src[is_marker]] = np.flatnonzero(is_marker)
    event_of_row = np.full(len(rt), -1, dtype=np.int64)
    event_of_row[call_rows] = np.flatnonzero(call)
    ops = _operations(index, event_of_row)
    gap_class = _gap_classes(index, threads, prev_end, begin)
    own = end - begin
    frees = np.zeros(src.size, dtype=np.bool_)
    for i in ids:
        if nm.is_allocator_free(names[int(i)]):
            frees |= call & (name_ids == int(i))
    awaited = _syncs(kind, frees, begin, end, ops)
    has_wait = awaited >= 0
    if has_wait.any():
        waited_until = ops.end[awaited[has_wait]]
        own[has_wait] = end[has_wait] - np.maximum(begin[has_wait], waited_until)
    ev_step = np.searchsorted(h_start, begin, side="right") - 1
    op_step = np.where(
        ops.launcher >= 0,
        ev_step[np.maximum(ops.launcher, 0)],
        steps.step_of(ops.start),
    )
    lat, gap_op, dep, dep_gap = _bindings(ops, begin)
    first_floor = int(steps.start_ns[0])
    return StepGraph(
        origin_ns=origin,
        host_start=begin - origin,
        host_end=end - origin,
        gap=gap,
        gap_class=gap_class,
        own=own,
        kind=kind,
        awaited=awaited,
        name=name_ids,
        host_step=np.clip(ev_step, 0, n - 1),
        chain_start=chain_start - origin,
        op_table=ops.table,
        op_row=ops.row,
        op_kind=ops.kind,
        op_start=ops.start - origin,
        op_end=ops.end - origin,
        op_stream=ops.stream,
        op_launcher=ops.launcher,
        op_gap=gap_op,
        op_lat=lat,
        op_dep=dep,
        op_dep_gap=dep_gap,
        op_fixed=ops.launcher < 0,
        op_step=op_step,
        streams=ops.streams,
        stream_free=ops.stream_free - origin,
        step_number=steps.number.copy(),
        marker_start=marker_pos[:n],
        marker_end=marker_pos[n:],
        window_start=steps.start_ns - origin,
        window_end=steps.end_ns - origin,
        first_window_floor=first_floor - origin,
        names=names,
    )


#: A thread that launches GPU work joins the host chain when at most this share of its
#: runtime calls' time overlaps the chain's: it takes turns with the step's thread (an
#: autograd thread in a trace too old to name it), it does not run beside it.
CHAIN_OVERLAP_MAX = 0.01


def _chain_threads(index: TraceIndex) -> set[tuple[int, int]]:
    """The threads of the host chain: the step's threads
    (:func:`~.step_windows.step_threads`, old CPU-op markers included, else the thread
    with the most runtime calls), and any other thread that launches GPU work inside the
    steady steps without overlapping them (:data:`CHAIN_OVERLAP_MAX`)."""
    trace = index.trace
    rt = trace.runtime
    threads = step_threads(trace, old_markers=True) or {step_thread_of(index)}
    launch = index.rows_where(m.RUNTIME, nm.is_launch) & (
        index.steps.host_step_of(rt.start_ns) >= 0
    )
    others = set(distinct_pairs(rt.pid[launch], rt.tid[launch]))
    for pid, tid in sorted(others - threads):
        chain = np.zeros(len(rt), dtype=np.bool_)
        for p, t in threads:
            chain |= (rt.pid == p) & (rt.tid == t)
        mine = (rt.pid == pid) & (rt.tid == tid)
        a = iv.union(rt.start_ns[chain], rt.end_ns[chain])
        b = iv.union(rt.start_ns[mine], rt.end_ns[mine])
        total = iv.total(b)
        if total and iv.total(iv.intersect(a, b)) <= CHAIN_OVERLAP_MAX * total:
            threads.add((pid, tid))
    return threads


def _outermost(start: I64, end: I64, rows: I64) -> I64:
    """``rows`` (sorted by ``start``) without those inside an earlier row's range (a
    driver call inside its runtime call)."""
    order = np.argsort(start, kind="stable")
    start, end, rows = start[order], end[order], rows[order]
    if rows.size < 2:
        return rows
    before = np.maximum.accumulate(end)[:-1]
    inside = np.zeros(rows.size, dtype=np.bool_)
    inside[1:] = (start[1:] < before) & (end[1:] <= before)
    return rows[~inside]


@dataclass
class _Ops:
    table: npt.NDArray[np.int8]
    row: I64
    kind: npt.NDArray[np.int8]
    start: I64
    end: I64
    stream: I64
    launcher: I64
    streams: list[tuple[int, int]]
    stream_free: I64


def _operations(index: TraceIndex, event_of_row: I64) -> _Ops:
    """Every GPU operation launched by a chain event, or run inside a steady window,
    sorted by stream then start; and per stream when it was last busy before them."""
    trace = index.trace
    steps = index.steps
    parts = []
    for t, table_kind in enumerate(GPU_WORK_KINDS):
        table = trace.tables[table_kind]
        if not len(table):
            continue
        launch = index.launch_row[table_kind]
        launcher = np.where(launch >= 0, event_of_row[np.maximum(launch, 0)], -1)
        inside = steps.step_of(table.start_ns) >= 0
        keep = (launcher >= 0) | inside
        if table_kind == m.KERNEL:
            comm = index.rows_where(table_kind, nm.is_communication_kernel)
            kinds = np.where(comm, COMMUNICATION, COMPUTE)
        else:
            kinds = np.full(len(table), MEMCPY if table_kind == m.MEMCPY else MEMSET)
        parts.append(
            (
                np.full(len(table), t, np.int8),
                np.arange(len(table), dtype=np.int64),
                kinds.astype(np.int8),
                table.start_ns,
                table.end_ns,
                table.device,
                table.stream,
                launcher,
                keep,
            )
        )
    if not parts:
        z = np.zeros(0, dtype=np.int64)
        return _Ops(np.zeros(0, np.int8), z, np.zeros(0, np.int8), z, z, z, z, [], z)
    cols = [np.concatenate([p[i] for p in parts]) for i in range(9)]
    tab, row, op_kind, start, end, device, stream, launcher, keep = cols
    # the distinct (device, stream) pairs, sorted, and each operation's: what
    # np.unique(axis=0) gives, without its sort of rows (benchmarks/RESULTS.md)
    devices, device_at = distinct_inverse(device)
    stream_ids, stream_at = distinct_inverse(stream)
    pair, stream_id = distinct_inverse(device_at * stream_ids.size + stream_at)
    stream_id = stream_id.astype(np.int64)
    keys = zip(
        devices[pair // stream_ids.size].tolist(),
        stream_ids[pair % stream_ids.size].tolist(),
        strict=True,
    )
    # per stream, all its operations in start order: the one before the first kept one
    # is the work queued ahead of the steady steps
    order_all = np.lexsort((start, stream_id))
    streams = [(int(d), int(s)) for d, s in keys]
    free = np.full(len(streams), NEVER_BUSY_NS, dtype=np.int64)
    kept_all = keep[order_all]
    sid_all = stream_id[order_all]
    end_all = end[order_all]  # a stream runs one operation at a time
    kept_pos = np.flatnonzero(kept_all)
    kept_sid = sid_all[kept_pos]  # sorted: each stream's first kept operation
    first = kept_pos[np.flatnonzero(np.append(True, kept_sid[1:] != kept_sid[:-1]))]
    before = first - 1
    has = (before >= 0) & (sid_all[np.maximum(before, 0)] == sid_all[first])
    free[sid_all[first[has]]] = end_all[before[has]]
    sel = np.flatnonzero(keep)
    order = sel[np.lexsort((start[sel], stream_id[sel]))]
    return _Ops(
        table=tab[order].astype(np.int8),
        row=row[order],
        kind=op_kind[order].astype(np.int8),
        start=start[order],
        end=end[order],
        stream=stream_id[order],
        launcher=launcher[order],
        streams=streams,
        stream_free=free,
    )


def _gap_classes(
    index: TraceIndex, threads: set[tuple[int, int]], gap_start: I64, gap_end: I64
) -> dict[str, I64]:
    """Per chain gap ``[gap_start, gap_end)``: its time by :data:`GAP_CLASSES`, exclusive
    in that order, summing to the gap."""
    trace = index.trace
    covered: dict[str, list[tuple[I64, I64]]] = {c: [] for c in GAP_CLASSES[:-1]}
    for kind in (m.CPU_OP, m.USER_ANNOTATION):
        t = trace.tables[kind]
        if not len(t):
            continue
        mine = np.zeros(len(t), dtype=np.bool_)
        for pid, tid in threads:
            mine |= (t.pid == pid) & (t.tid == tid)
        dl = index.rows_where(kind, nm.is_dataloader) & mine
        opt = index.rows_where(kind, nm.is_optimizer) & mine
        other = index.rows_where(kind, nm.is_not_step_marker) & mine
        for klass, sel in (("data_loading", dl), ("optimizer", opt), ("cpu_ops", other)):
            covered[klass].append((t.start_ns[sel], t.end_ns[sel]))
    windows = gap_end > gap_start
    ws, we = gap_start[windows], gap_end[windows]
    out: dict[str, I64] = {}
    taken = iv.empty()
    left = gap_end - gap_start
    for klass in GAP_CLASSES[:-1]:
        pieces = covered[klass]
        full = (
            iv.union(np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces]))
            if pieces
            else iv.empty()
        )
        own = iv.subtract(full, taken)
        per = np.zeros(gap_start.size, dtype=np.int64)
        per[windows] = iv.overlap_per_window(own, ws, we)
        out[klass] = per
        left = left - per
        taken = iv.union_disjoint(taken, own)
    out["untraced"] = np.maximum(left, 0)
    return out


def _syncs(kind: npt.NDArray[np.int8], frees: Mask, begin: I64, end: I64, ops: _Ops) -> I64:
    """Per chain event, the GPU operation it waited for (-1: none): a sync call, a
    ``cudaFree`` (``frees``) or a copy's launch call that ended within :data:`SYNC_WAKE_NS` of
    the end of an operation launched before or by it, which ended at least
    :data:`SYNC_MIN_WAIT_NS` after the call began: the latest such operation."""
    out = np.full(kind.size, -1, dtype=np.int64)
    graph = np.flatnonzero(ops.launcher >= 0)
    if graph.size == 0:
        return out
    # a copy's launch call that returned only once its copy was done (pageable memory)
    copies = graph[ops.kind[graph] == MEMCPY]
    by = ops.launcher[copies]
    blocking = (ops.end[copies] <= end[by] + SYNC_WAKE_NS) & (
        ops.end[copies] >= begin[by] + SYNC_MIN_WAIT_NS
    )
    cand = np.union1d(np.flatnonzero((kind == SYNC) | frees), by[blocking])
    if cand.size == 0:
        return out
    by_launch = graph[np.argsort(ops.launcher[graph], kind="stable")]
    launched_by = ops.launcher[by_launch]
    ends = ops.end[by_launch]
    run_max = np.maximum.accumulate(ends)
    run_arg = _running_argmax(ends)
    upto = np.searchsorted(launched_by, cand, side="right")  # ops launched by <= event
    for event, k in zip(cand.tolist(), upto.tolist(), strict=True):
        if k == 0:
            continue
        limit = int(end[event]) + SYNC_WAKE_NS
        if int(run_max[k - 1]) <= limit:
            pos = int(run_arg[k - 1])
        else:  # the last to finish ended after the call: it waited for an earlier one
            fit = np.flatnonzero(ends[:k] <= limit)
            if fit.size == 0:
                continue
            pos = int(fit[np.argmax(ends[fit])])
        op_end = int(ends[pos])
        if op_end < int(begin[event]) + SYNC_MIN_WAIT_NS:
            continue
        if kind[event] == LAUNCH and launched_by[pos] != event:
            continue  # a launch call blocks only for its own copy (pageable memory)
        out[event] = by_launch[pos]
    return out


def _running_argmax(values: I64) -> I64:
    """Per position, the index of the largest value up to it (the first among equals)."""
    run = np.maximum.accumulate(values)
    is_new = np.empty(values.size, dtype=np.bool_)
    is_new[0] = True
    is_new[1:] = values[1:] > run[:-1]
    pos = np.where(is_new, np.arange(values.size), 0)
    return np.maximum.accumulate(pos)


def _bindings(ops: _Ops, host_begin: I64) -> tuple[I64, I64, I64, I64]:
    """Per operation: its launch latency, its gap after the previous operation on its
    stream, the operation of another stream it waited for (-1) and how long after that
    one's end it started (module docstring)."""
    g = ops.start.size
    lat = np.zeros(g, dtype=np.int64)
    gap = np.zeros(g, dtype=np.int64)
    dep = np.full(g, -1, dtype=np.int64)
    dep_gap = np.zeros(g, dtype=np.int64)
    if g == 0:
        return lat, gap, dep, dep_gap
    same = np.zeros(g, dtype=np.bool_)
    same[1:] = ops.stream[1:] == ops.stream[:-1]
    prev_end = np.where(same, np.roll(ops.end, 1), ops.stream_free[ops.stream])
    since_prev = ops.start - prev_end
    graph = ops.launcher >= 0
    launch_at = np.where(graph, host_begin[np.maximum(ops.launcher, 0)], ops.start)
    since_launch = ops.start - launch_at
    # queued: launched before its stream was free; then the stream bound its start
    queued = graph & (launch_at <= prev_end) & (since_prev >= 0)
    stream_bound = queued & (since_prev <= QUEUE_GAP_MAX_NS)
    launch_bound = graph & ~queued & (since_launch <= LAUNCH_LATENCY_MAX_NS)
    typical = since_launch[launch_bound & (since_launch >= 0)]
    default = int(np.median(typical)) if typical.size else DEFAULT_LAUNCH_LATENCY_NS
    gap[stream_bound] = since_prev[stream_bound]
    lat[stream_bound] = np.clip(np.minimum(since_launch[stream_bound], default), 0, None)
    lat[launch_bound] = np.clip(since_launch[launch_bound], 0, None)
    # the rest started well after both its stream and its launch allowed: a wait for
    # another stream when one ended just before, else a delay kept as measured
    late = np.flatnonzero(graph & ~stream_bound & ~launch_bound)
    waited = late[queued[late]]
    gap[waited] = since_prev[waited]
    lat[waited] = np.clip(np.minimum(since_launch[waited], default), 0, None)
    fresh = late[~queued[late]]
    lat[fresh] = np.clip(since_launch[fresh], 0, None)
    if late.size:
        by_end = np.argsort(ops.end, kind="stable")
        ends = ops.end[by_end]
        for op in late.tolist():
            s = int(ops.start[op])
            j = int(np.searchsorted(ends, s, side="right")) - 1
            while j >= 0 and s - int(ends[j]) <= DEPENDENCY_GAP_NS:
                other = int(by_end[j])
                # the wait is enqueued after the work it waits for (an event recorded
                # before cudaStreamWaitEvent): launched earlier, or from outside the chain
                earlier = ops.launcher[other] < ops.launcher[op]
                if ops.stream[other] != ops.stream[op] and earlier:
                    dep[op] = other
                    dep_gap[op] = s - int(ends[j])
                    gap[op] = 0
                    lat[op] = min(int(since_launch[op]), default)
                    break
                j -= 1
    return lat, gap, dep, dep_gap
