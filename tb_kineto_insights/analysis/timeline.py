"""Per-step timelines: what the GPU streams, the launching host threads and the
data-loading threads did in each step window, and the GPU's idle time by cause.

Built from the :class:`~.trace_index.TraceIndex` the summary is built from (same read, no
second pass over the file) and from the idle panel's attributed intervals
(:class:`~.idle.IdlePieces`), so the idle band of a step is, cause by cause and to the
ns, ``summary.idle.devices[].per_step[].causes_us``.

Per step window ``[start, end)`` (the windows every per-step figure uses):

* ``gpu_stream`` lanes, one per (device, stream): the kernels, memcpys and memsets whose
  start lies in the window (the kernels ``kernels.per_step[].count`` counts), class
  ``compute``, ``communication`` (NCCL/RCCL), ``memcpy`` or ``memset``, with their
  correlation id;
* ``host_thread`` lanes, one per thread that launched GPU work in the trace (else the
  thread of the ProfilerStep markers): the CPU ops and annotations overlapping the
  window at nesting depth 0 and 1 (ProfilerStep markers left out), and every runtime
  call (depth 2), each classed by its host-activity cause (the first that matches it,
  :func:`.host_activity.first_cause`);
* ``dataloader_thread`` lanes: other threads that run ``enumerate(DataLoader)#…``;
* ``idle`` lanes, one per device: the idle intervals as attributed, class = cause;
* ``python_frames`` lanes, one per ``host_thread`` lane whose thread has
  ``python_function`` events (a trace recorded with ``with_stack=True``): the thread's
  innermost user frame over time, by :mod:`.python_frames`' folding rule (library
  frames folded into the nearest user frame around them), consecutive pieces of one
  frame merged into one run; class ``python_frame``, name the frame as Kineto names it
  (``record_stacks.py(57): log_metrics``). Only threads that launch GPU work get one,
  so the store stays small.

Level of detail: in a lane of more than ``Thresholds.timeline_lod_min_events`` events,
each run of two or more consecutive events, each shorter than
``Thresholds.timeline_block_us`` and separated by less than that, is one block
(``count`` = the events it stands for), so the total of ``count`` over a GPU lane is
still its number of events.

Nesting depth: with the ranges of one thread sorted by start (longer first on a tie), a
range's depth is the number of earlier ranges still open at its start (for properly
nested ranges, its number of ancestors); computed with two ``searchsorted`` calls, no
per-event Python loop.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import msgspec
import numpy as np
import numpy.typing as npt

from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis import python_frames as pf
from tb_kineto_insights.analysis.critical_path import PathIntervals
from tb_kineto_insights.analysis.host_activity import (
    CAUSE_NAMES,
    first_cause,
    step_thread_of,
)
from tb_kineto_insights.analysis.idle import IdlePieces
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.analysis.timeline_format import (
    GAP_CODED,
    GPU_CLASSES,
    HOST_CLASSES,
    HOST_QUANTUM_NS,
    IDLE_BASE,
    NAME_SHIFT,
    PACK,
    PATH_BASE,
    PYTHON_CLASS,
    UNPACK,
    ZLIB_LEVEL,
    PackedLane,
    PackedStep,
    correlation_code,
    narrow,
    previous_end,
    store_names,
    store_shapes,
    unpack_step,
)
from tb_kineto_insights.analysis.trace_index import GPU_WORK_KINDS, TraceIndex
from tb_kineto_insights.schema.timeline import TimelineStep, TimelineStore
from tb_kineto_insights.trace import model as m

I64 = npt.NDArray[np.int64]


@dataclass
class _Lane:
    """A lane's columns over the whole trace (ns), sorted by start."""

    kind: str
    label: str
    ident: dict[str, int]
    name: npt.NDArray[np.int32]
    start_ns: I64
    end_ns: I64
    event_class: I64
    correlation: I64
    depth: I64
    merge: bool = False
    #: host lanes: running maximum of ``end_ns`` (finds ranges still open at a time)
    max_end: I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: host lanes: per event, 1 + its index in the store's shapes (0: none)
    shape: I64 | None = None


def nesting_depth(start_ns: I64, end_ns: I64) -> I64:
    """Depth of each range among ranges of one thread: the number of other ranges open
    at its start that began before it (start order, longer first on equal starts).

    Args:
        start_ns, end_ns: int64 arrays of equal length, any order.

    Returns:
        int64 array, same order as the input; 0 for a top-level range. For properly
        nested ranges this is the number of ancestors; a range partially overlapping an
        earlier one counts it too.
    """
    n = start_ns.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    # start order, longer first on equal starts; a stable sort of nearly sorted starts
    # (a thread's ops come in start order) is close to linear, a lexsort is not
    order = np.argsort(start_ns, kind="stable")
    s = start_ns[order]
    tie = s[1:] == s[:-1]
    if tie.any():
        order = np.lexsort((-(end_ns - start_ns), start_ns))
        s = start_ns[order]
    e = end_ns[order]
    k = np.arange(n)
    # ranges ending at or before s[k]: all come before k in this order, except the
    # zero-length ranges at s[k] from k on (they sort last among equal starts)
    ended = np.searchsorted(np.sort(e, kind="stable"), s, side="right")
    zero = np.concatenate([[0], np.cumsum(e == s)])
    group_end = np.searchsorted(s, s, side="right")
    zeros_from_k = zero[group_end] - zero[k]
    out = np.empty(n, dtype=np.int64)
    out[order] = np.maximum(k - ended + zeros_from_k, 0)
    return out


def merge_narrow_runs(start_ns: I64, end_ns: I64, block_ns: int) -> tuple[I64, I64, I64]:
    """Runs of narrow events merged into blocks (level of detail).

    Args:
        start_ns, end_ns: int64 arrays of one lane, sorted by start.
        block_ns: an event narrower than this (ns) is narrow; two narrow neighbours
            separated by less than it join one run.

    Returns:
        ``(first, last, count)`` per output item: the index of its first and last event
        and how many events it stands for (1: a single event kept as is); the items in
        start order. Every event belongs to exactly one item.
    """
    n = start_ns.size
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z.copy(), z.copy()
    narrow = (end_ns - start_ns) < block_ns
    link = np.zeros(n, dtype=np.bool_)  # link[i]: event i joins event i - 1
    if n > 1:
        running_end = np.maximum.accumulate(end_ns)
        link[1:] = narrow[1:] & narrow[:-1] & ((start_ns[1:] - running_end[:-1]) < block_ns)
    first = np.flatnonzero(~link)
    last = np.append(first[1:], n) - 1
    return first.astype(np.int64), last.astype(np.int64), (last - first + 1).astype(np.int64)


def _gpu_lanes(index: TraceIndex) -> list[_Lane]:
    trace = index.trace
    comm = index.name_class(nm.is_communication_kernel)
    lanes: list[_Lane] = []
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("name", "s", "e", "c", "corr", "d", "st")}
    for kind in GPU_WORK_KINDS:
        t = trace.tables[kind]
        if not len(t):
            continue
        if kind == m.KERNEL:
            cls = np.where(comm[t.name], 1, 0)
        else:
            cls = np.full(len(t), GPU_CLASSES.index(kind), dtype=np.int64)
        for key, col in (
            ("name", t.name),
            ("s", t.start_ns),
            ("e", t.end_ns),
            ("c", cls),
            ("corr", t.correlation),
            ("d", t.device),
            ("st", t.stream),
        ):
            cols[key].append(col)
    if not cols["s"]:
        return lanes
    name, s, e, c, corr, d, st = (np.concatenate(cols[k]) for k in cols)
    order = np.lexsort((s, st, d))
    name, s, e, c, corr, d, st = (a[order] for a in (name, s, e, c, corr, d, st))
    change = np.ones(s.size, dtype=np.bool_)
    change[1:] = (d[1:] != d[:-1]) | (st[1:] != st[:-1])
    lo = np.flatnonzero(change)
    hi = np.append(lo[1:], s.size)
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        dev, stream = int(d[a]), int(st[a])
        lanes.append(
            _Lane(
                kind="gpu_stream",
                label=f"GPU {dev} stream {stream}",
                ident={"device": dev, "stream": stream},
                name=name[a:b],
                start_ns=s[a:b],
                end_ns=e[a:b],
                event_class=c[a:b].astype(np.int64),
                correlation=corr[a:b],
                depth=np.zeros(b - a, dtype=np.int64),
                merge=True,
            )
        )
    return lanes


def _host_class(index: TraceIndex, kind: str) -> I64:
    """Per row of a host table, its class (index into :data:`CLASSES`): its host
    activity cause (:func:`.host_activity.first_cause`; the traced causes are the host
    classes, in the same order); a row no cause matches (a step marker, never in a
    lane) as ``cpu_ops``."""
    cause = first_cause(index, kind)
    cause[cause < 0] = HOST_CLASSES.index("cpu_ops")
    return len(GPU_CLASSES) + cause


def _op_shapes(
    index: TraceIndex, rows: I64, ids: dict[bytes | None, int], texts_out: list[bytes]
) -> I64:
    """The ``Input Dims`` of CPU-op rows ``rows`` (``record_shapes=True``) interned in
    ``ids`` (text → its id: 0 for none or only empty lists, else 1 + its index in
    ``texts_out``, where a new one is appended): per row its id."""
    dims = index.trace.cpu_ops.input_dims
    if not len(dims) or rows.size == 0:
        return np.zeros(rows.size, dtype=np.int64)
    texts_of = getattr(dims, "texts", None)
    if texts_of is not None:
        texts = texts_of(rows)
    else:
        texts = [msgspec.json.encode(dims[r]) if r in dims else None for r in rows.tolist()]
    for text in [t for t in dict.fromkeys(texts) if t not in ids]:  # each new text once, in order
        if not text or text.strip(b"[], ") == b"":
            ids[text] = 0
        else:
            texts_out.append(text)
            ids[text] = len(texts_out)
    return np.fromiter(map(ids.__getitem__, texts), dtype=np.int64, count=len(texts))


def _host_lanes(index: TraceIndex, shapes: list[str] | None = None) -> list[_Lane]:
    """The host-thread and data-loading lanes; ``shapes``: filled with the interned
    input shapes the lanes' ``shape`` columns refer to."""
    trace = index.trace
    rt = trace.runtime
    # text → 1 + index in the shapes (0: empty; None → 0 too)
    shape_ids: dict[bytes | None, int] = {None: 0}
    shape_texts: list[bytes] = []
    launch_threads: set[tuple[int, int]] = set()
    launched = np.zeros(len(rt), dtype=np.bool_)
    for kind in GPU_WORK_KINDS:
        rows = index.launch_row[kind]
        launched[rows[rows >= 0]] = True
    if launched.any():  # few threads: a 1-D unique per pid, no sort of pairs
        pids = rt.pid[launched]
        tids = rt.tid[launched]
        for p in np.unique(pids).tolist():
            launch_threads.update((int(p), int(t)) for t in np.unique(tids[pids == p]).tolist())
    if not launch_threads:
        step_thread = step_thread_of(index)
        if step_thread[0] != -(2**62):
            launch_threads.add(step_thread)
    loader_threads: set[tuple[int, int]] = set()
    for kind in (m.CPU_OP, m.USER_ANNOTATION):
        t = trace.tables[kind]
        sel = index.rows_where(kind, nm.is_dataloader)
        loader_threads.update(zip(t.pid[sel].tolist(), t.tid[sel].tolist(), strict=True))
    loader_threads -= launch_threads
    not_marker = {
        kind: index.rows_where(kind, nm.is_not_step_marker)
        for kind in (m.CPU_OP, m.USER_ANNOTATION)
    }
    classes = {kind: _host_class(index, kind) for kind in (m.CPU_OP, m.USER_ANNOTATION, m.RUNTIME)}
    lanes = []
    for kind_label, threads in (
        ("host_thread", sorted(launch_threads)),
        ("dataloader_thread", sorted(loader_threads)),
    ):
        for pid, tid in threads:
            parts: list[tuple[np.ndarray, ...]] = []
            for kind in (m.CPU_OP, m.USER_ANNOTATION):
                t = trace.tables[kind]
                sel = (t.pid == pid) & (t.tid == tid) & not_marker[kind]
                # CPU-op rows (for their shapes), -1 for annotations
                row = np.flatnonzero(sel) if kind == m.CPU_OP else np.full(int(sel.sum()), -1)
                parts.append(
                    (
                        t.name[sel],
                        t.start_ns[sel],
                        t.end_ns[sel],
                        classes[kind][sel],
                        t.correlation[sel],
                        row,
                    )
                )
            name = np.concatenate([p[0] for p in parts]).astype(np.int32)
            s: I64 = np.concatenate([p[1] for p in parts])
            e: I64 = np.concatenate([p[2] for p in parts])
            c: I64 = np.concatenate([p[3] for p in parts])
            corr: I64 = np.concatenate([p[4] for p in parts])
            op_row: I64 = np.concatenate([p[5] for p in parts]).astype(np.int64)
            depth = nesting_depth(s, e)
            keep = depth <= 1
            name = name[keep]
            s, e, c, corr, depth = s[keep], e[keep], c[keep], corr[keep], depth[keep]
            op_row = op_row[keep]
            shape = np.zeros(op_row.size, dtype=np.int64)
            if shapes is not None:
                has = op_row >= 0
                shape[has] = _op_shapes(index, op_row[has], shape_ids, shape_texts)
            if kind_label == "host_thread":
                sel = (rt.pid == pid) & (rt.tid == tid)
                name = np.concatenate([name, rt.name[sel]]).astype(np.int32)
                s = np.concatenate([s, rt.start_ns[sel]])
                e = np.concatenate([e, rt.end_ns[sel]])
                c = np.concatenate([c, classes[m.RUNTIME][sel]])
                corr = np.concatenate([corr, rt.correlation[sel]])
                depth = np.concatenate([depth, np.full(int(sel.sum()), 2, dtype=np.int64)])
                shape = np.concatenate([shape, np.zeros(int(sel.sum()), dtype=np.int64)])
            if s.size == 0:
                continue
            order = np.argsort(s, kind="stable")
            thread_name = trace.thread_names.get((pid, tid))
            label = thread_name or f"thread {tid}"  # Kineto's names say "thread N (...)"
            lanes.append(
                _Lane(
                    kind=kind_label,
                    label=label,
                    ident={"pid": pid, "tid": tid},
                    name=name[order],
                    start_ns=s[order],
                    end_ns=e[order],
                    event_class=c[order].astype(np.int64),
                    correlation=corr[order],
                    depth=depth[order],
                    max_end=np.maximum.accumulate(e[order]),
                    shape=shape[order],
                )
            )
    if shapes is not None:
        shapes.extend(t.decode("utf-8", "replace") for t in shape_texts)
    return lanes


def _frame_lanes(index: TraceIndex, host: list[_Lane]) -> list[_Lane]:
    """Per ``host_thread`` lane with ``python_function`` events, its ``python_frames``
    lane (module docstring): the frame pieces of :meth:`.python_frames.FrameIndex.
    timeline` over the step windows, each labelled by its innermost frame's name, and
    runs of touching pieces of one frame merged (a call into a library frame and back
    is one run of the user frame around it)."""
    if not len(index.trace.tables[m.PYTHON]):
        return []
    frames = pf.FrameIndex(index.trace)
    windows = shown_windows(index)
    if not windows:
        return []
    lo = np.array([w.start_ns for w in windows], dtype=np.int64)
    hi = np.array([w.end_ns for w in windows], dtype=np.int64)
    lanes = []
    for lane in host:
        if lane.kind != "host_thread":
            continue
        tl = frames.timeline((lane.ident["pid"], lane.ident["tid"]), lo, hi)
        if tl.start_ns.size == 0:
            continue
        name = frames.frame_array()[tl.stack]
        new_run = np.ones(name.size, dtype=np.bool_)
        new_run[1:] = (name[1:] != name[:-1]) | (tl.start_ns[1:] != tl.end_ns[:-1])
        first = np.flatnonzero(new_run)
        last = np.append(first[1:], name.size) - 1
        s, e = tl.start_ns[first], tl.end_ns[last]
        n = first.size
        lanes.append(
            _Lane(
                kind="python_frames",
                label=f"{lane.label} Python",
                ident=dict(lane.ident),
                name=name[first].astype(np.int32),
                start_ns=s,
                end_ns=e,
                event_class=np.full(n, PYTHON_CLASS, dtype=np.int64),
                correlation=np.full(n, -1, dtype=np.int64),
                depth=np.zeros(n, dtype=np.int64),
                merge=True,
                max_end=np.maximum.accumulate(e),
            )
        )
    return lanes


def _idle_lanes(pieces: dict[int, IdlePieces]) -> list[_Lane]:
    return [
        _Lane(
            kind="idle",
            label=f"GPU {dev} idle",
            ident={"device": dev},
            name=np.full(p.start_ns.size, -2, dtype=np.int32),  # -2: the cause's name
            start_ns=p.start_ns,
            end_ns=p.end_ns,
            event_class=IDLE_BASE + p.cause,
            correlation=np.full(p.start_ns.size, -1, dtype=np.int64),
            depth=np.zeros(p.start_ns.size, dtype=np.int64),
        )
        for dev, p in sorted(pieces.items())
    ]


def _path_lane(path: PathIntervals) -> _Lane:
    """The critical path's lane: its pieces, by class, GPU ones named by their kernel."""
    n = path.start_ns.size
    return _Lane(
        kind="critical_path",
        label="critical path",
        ident={},
        name=path.name,
        start_ns=path.start_ns,
        end_ns=path.end_ns,
        event_class=PATH_BASE + path.klass,
        correlation=np.full(n, -1, dtype=np.int64),
        depth=np.zeros(n, dtype=np.int64),
    )


@dataclass(frozen=True)
class ShownWindow:
    """A window the timeline shows: ``ProfilerStep#number`` from ``start_ns`` to
    ``end_ns`` (trace clock); ``left_out``: why it is not a steady-state step
    (:attr:`~.step_windows.LeftOutStep.reason`), None for a steady-state step."""

    number: int
    start_ns: int
    end_ns: int
    left_out: str | None = None


def shown_windows(index: TraceIndex) -> list[ShownWindow]:
    """Every window the timeline shows, in time order: the steady-state steps and the
    windows left out of them (a backlog, warm-up or cut-off step stays visible, with
    its events, and is marked)."""
    steps = index.steps
    out = [
        ShownWindow(int(n), int(a), int(b))
        for n, a, b in zip(steps.number, steps.start_ns, steps.end_ns, strict=True)
    ]
    out += [ShownWindow(w.number, w.start_ns, w.end_ns, w.reason) for w in index.left_out_steps]
    return sorted(out, key=lambda w: (w.start_ns, w.number))


def _rows_in(lane: _Lane, lo: int, hi: int) -> np.ndarray:
    """Rows of the lane in window ``[lo, hi)``: GPU and idle lanes by start (as the
    per-step counts assign them), host lanes every range overlapping it (from the first
    row whose running maximum end passes ``lo``: no range before it is still open)."""
    b = int(np.searchsorted(lane.start_ns, hi, side="left"))
    if lane.kind in GAP_CODED:
        return np.arange(int(np.searchsorted(lane.start_ns, lo, side="left")), b)
    a = int(np.searchsorted(lane.max_end, lo, side="right"))
    rows = np.arange(a, max(a, b))
    return rows[lane.end_ns[rows] > lo]


_Collected = tuple[_Lane, I64, I64, I64, I64, I64, I64, I64, I64]


@dataclass
class _StepRows:
    """A step's rows of every lane after level of detail, before packing."""

    lo: int
    hi: int
    kernel_count: int
    idle_ns: dict[str, int]
    merged_any: bool
    collected: list[_Collected]


def _step_rows(lanes: list[_Lane], window: ShownWindow, thresholds: Thresholds) -> _StepRows:
    """A window's rows of every lane, merged for level of detail."""
    block_ns = int(round(thresholds.timeline_block_us * 1000))
    lo, hi = window.start_ns, window.end_ns
    kernel_count = 0
    idle_ns: dict[str, int] = {}
    merged_any = False
    collected: list[_Collected] = []
    for lane in lanes:
        rows = _rows_in(lane, lo, hi)
        if rows.size == 0:
            continue
        s, e = lane.start_ns[rows], lane.end_ns[rows]
        name_ids = lane.name[rows].astype(np.int64)
        cls = lane.event_class[rows]
        corr = lane.correlation[rows]
        depth = lane.depth[rows]
        shape = lane.shape[rows] if lane.shape is not None else np.zeros(rows.size, np.int64)
        count = np.ones(rows.size, dtype=np.int64)
        if lane.kind == "gpu_stream":
            kernel_count += int((cls <= 1).sum())
        if lane.kind == "idle":
            dev = str(lane.ident["device"])
            idle_ns[dev] = idle_ns.get(dev, 0) + int((e - s).sum())
            name_ids = -2 - (cls - IDLE_BASE)  # -2 - cause: the cause's name
        if lane.merge and block_ns > 0 and rows.size > thresholds.timeline_lod_min_events:
            first, _, count = merge_narrow_runs(s, e, block_ns)
            block = count > 1
            if block.any():
                merged_any = True
                ends = np.maximum.reduceat(e, first)
                same_name = np.minimum.reduceat(name_ids, first) == np.maximum.reduceat(
                    name_ids, first
                )
                s, e = s[first], ends
                name_ids = np.where(block & ~same_name, -1, name_ids[first])
                cls = cls[first]  # a block of several classes keeps its first's
                corr = np.where(block, -1, corr[first])
                depth = depth[first]
                shape = np.where(block, 0, shape[first])
        collected.append((lane, s, e, name_ids, cls, count, corr, depth, shape))
    return _StepRows(lo, hi, kernel_count, idle_ns, merged_any, collected)


def _pack_step(
    index: TraceIndex, rows: _StepRows, lookup: I64, thresholds: Thresholds, window: ShownWindow
) -> PackedStep:
    """A step's rows packed; ``lookup``: shifted name id → index in the store's names."""
    block_ns = int(round(thresholds.timeline_block_us * 1000))
    packed = []
    for lane, s, e, name_ids, cls, count, corr, depth, shape in rows.collected:
        quantum = 1
        if lane.kind in GAP_CODED:
            offset = s - rows.lo - np.maximum(previous_end(s, e) - rows.lo, 0)
            offset[0] = s[0] - rows.lo
        else:
            quantum = HOST_QUANTUM_NS
            qs = np.floor_divide(s - rows.lo, quantum)
            qe = -np.floor_divide(-(e - rows.lo), quantum)
            offset = np.diff(qs, prepend=0)
            s, e = qs, qe
        has, code = correlation_code(corr)
        narrowed = [
            narrow(np.asarray(c, dtype=np.int64))
            for c in (
                offset,
                e - s,
                lookup[name_ids + NAME_SHIFT],
                np.zeros_like(cls) if lane.kind == "idle" else cls,
                count - 1,
                has,
                code,
                depth,
                shape,
            )
        ]
        packed.append(
            PackedLane(
                kind=lane.kind,
                label=lane.label,
                device=lane.ident.get("device"),
                stream=lane.ident.get("stream"),
                pid=lane.ident.get("pid"),
                tid=lane.ident.get("tid"),
                n=int(s.size),
                widths=[w for w, _ in narrowed],
                columns=b"".join(data for _, data in narrowed),
                quantum_ns=quantum,
            )
        )
    return PackedStep(
        step=window.number,
        start_ns=rows.lo - index.origin_ns,
        end_ns=rows.hi - index.origin_ns,
        origin_ns=index.origin_ns,
        kernel_count=rows.kernel_count,
        idle_ns=rows.idle_ns,
        block_ns=block_ns if rows.merged_any else 0,
        lanes=packed,
        left_out=window.left_out,
    )


def timeline_store(
    index: TraceIndex,
    pieces: dict[int, IdlePieces],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    path: PathIntervals | None = None,
) -> TimelineStore:
    """The timelines of every step window of ``index`` (module docstring), as the cache
    keeps them: the names every step uses, once (msgpack, zlib), and per step a
    :class:`PackedStep`, msgpack then zlib at :data:`ZLIB_LEVEL`.

    Args:
        index: the trace index the summary was built from.
        pieces: per device, the idle intervals ``idle_summary(..., pieces=)`` filled.
        thresholds: ``timeline_block_us``, ``timeline_lod_min_events``.
        path: the steady steps' critical path (:func:`~.critical_path.path_intervals`),
            shown as a ``critical_path`` lane under the GPU streams when it has pieces.
    """
    host: list[_Lane] = []
    shapes: list[str] = []
    for lane in _host_lanes(index, shapes):  # each frames lane right after its thread's lane
        host += [lane, *_frame_lanes(index, [lane])]
    gpu = _gpu_lanes(index)
    on_path = [_path_lane(path)] if path is not None and path.start_ns.size else []
    lanes = gpu + on_path + host + _idle_lanes(pieces)
    windows = shown_windows(index)
    trace = index.trace
    rows = [_step_rows(lanes, w, thresholds) for w in windows]
    # the names, interned once: a shifted name id (see NAME_SHIFT) → its index in the
    # store's names, in id order (the causes' names first)
    used = np.zeros(len(trace.names) + NAME_SHIFT, dtype=np.bool_)
    for step_rows in rows:
        for item in step_rows.collected:
            used[item[3] + NAME_SHIFT] = True
    used[NAME_SHIFT - 1] = False  # -1: no name
    keys = np.flatnonzero(used)
    lookup = np.full(used.size, -1, dtype=np.int64)
    lookup[keys] = np.arange(keys.size)
    names = [
        CAUSE_NAMES[-2 - (k - NAME_SHIFT)] if k < NAME_SHIFT else trace.names[k - NAME_SHIFT]
        for k in keys.tolist()
    ]
    return TimelineStore(
        steps=[w.number for w in windows],
        blobs=[
            zlib.compress(
                PACK.encode(_pack_step(index, step_rows, lookup, thresholds, w)), ZLIB_LEVEL
            )
            for w, step_rows in zip(windows, rows, strict=True)
        ],
        names=zlib.compress(PACK.encode(names), ZLIB_LEVEL) if rows else b"",
        shapes=zlib.compress(PACK.encode(shapes), ZLIB_LEVEL) if shapes and rows else b"",
    )


def step_timelines(
    index: TraceIndex,
    pieces: dict[int, IdlePieces],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    path: PathIntervals | None = None,
) -> list[TimelineStep]:
    """Every step's :class:`~tb_kineto_insights.schema.timeline.TimelineStep`, in window
    order (what :func:`timeline_store` stores, unpacked)."""
    store = timeline_store(index, pieces, thresholds, path)
    names, shapes = store_names(store), store_shapes(store)
    return [
        unpack_step(UNPACK.decode(zlib.decompress(blob)), names, shapes) for blob in store.blobs
    ]
