"""The collective calls of one trace: its communication kernels grouped into calls, each
with its kind, message size, group size, process group, ``Seq`` and step, for the
communication panel (:mod:`.communication`) and, through its ``sequence``, the view
across ranks.

Definitions (DESIGN.md, Metric definitions):

- a *collective* is one call: the communication kernels
  (:func:`.collectives.is_communication_kernel`) launched from inside one collective op
  (``nccl:*`` / ``record_param_comms`` / ``c10d::*``, or any op with collective args,
  on the launching host thread: the innermost op enclosing the kernel's runtime launch
  call, else the op with the kernel's ``External id``); a kernel without such an op is
  a collective of its own. Its start and end are the earliest start and the latest end
  of its kernels.
- kind (:mod:`.collectives`): the kernel's ``Collective name`` argument, else the
  launching op's (``Collective name`` of ``record_param_comms``, then ``nccl:*`` /
  ``c10d::*`` names), else the kernel name (:data:`KIND_FROM`). (``all_to_all`` is run
  by NCCL's SendRecv kernels, so the op knows better than the kernel name.)
- ``bytes``: ``In msg size`` when present, else ``In msg nelems`` × dtype size, from the
  kernel's args, else from the launching op's (found through the kernel's launch call
  and the collective ops enclosing it on that thread, else through ``External id``);
  the output message likewise from ``Out msg nelems``; the nccl-tests size is the
  larger of the two.
- group size: ``Group size``, else the length of ``Process Group Ranks``, else
  ``distributedInfo.world_size``; process group: ``Process Group Name``, else ``"0"``;
  ``Seq`` where the args give it.
- step: the number of the step window the call starts in (:mod:`.trace_index`), -1
  outside every window.
- host-side collective calls (:func:`collective_op_count`): the ``nccl:*``-style ops,
  else the ``record_param_comms`` ops with a collective name other than ``wait``.

Cost: numpy throughout; the enclosing op of every launch is found per host thread with
``searchsorted``, looking at most :data:`_ENCLOSING_DEPTH` ops outward.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tb_kineto_insights.analysis import collectives as co
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.trace import model as m

I64 = npt.NDArray[np.int64]

#: How many enclosing candidates (innermost first) are examined per launch.
_ENCLOSING_DEPTH = 8
_NO_KIND = -1


@dataclass
class _Ops:
    """Collective ops (``record_param_comms``, ``nccl:*``, ``c10d::*``, any op with
    collective args) from the CPU-op and user-annotation tables, sorted by start."""

    pid: I64
    tid: I64
    start_ns: I64
    end_ns: I64
    external_id: I64
    kind: I64  # index into co.KINDS, -1 where the op does not say
    args: list[m.CommArgs | None]
    sized: npt.NDArray[np.bool_]  # args carry a message size

    def __len__(self) -> int:
        return int(self.start_ns.size)


def _is_collective_op_name(name: str) -> bool:
    return name == "record_param_comms" or co.collective_kind(name) is not None


def _kind_code(kind: str | None) -> int:
    return co.KINDS.index(kind) if kind is not None else _NO_KIND


def _has_sizes(a: m.CommArgs | None) -> bool:
    return a is not None and (a.in_msg_nelems is not None or a.in_msg_size_bytes is not None)


def _name_kind_codes(names: list[str], name_ids: npt.NDArray[np.integer[Any]]) -> I64:
    """Kind code per row from its name alone (classified once per distinct name)."""
    if name_ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    uniq, inverse = np.unique(name_ids, return_inverse=True)
    codes = np.array([_kind_code(co.collective_kind(names[n])) for n in uniq.tolist()])
    return codes.astype(np.int64)[inverse.reshape(-1)]


def _collective_ops(index: TraceIndex) -> _Ops:
    trace = index.trace
    cols: dict[str, list[I64]] = {"pid": [], "tid": [], "start": [], "end": [], "ext": []}
    kinds: list[I64] = []
    sized: list[npt.NDArray[np.bool_]] = []
    args: list[m.CommArgs | None] = []
    for kind in (m.CPU_OP, m.USER_ANNOTATION):
        t = trace.tables[kind]
        mask = index.rows_where(kind, _is_collective_op_name)
        keys = np.fromiter(t.comm.keys(), dtype=np.int64, count=len(t.comm))
        if keys.size:
            mask = mask.copy()
            mask[keys] = True
        rows = np.nonzero(mask)[0]
        codes = _name_kind_codes(trace.names, t.name[rows])
        part: list[m.CommArgs | None] = [None] * rows.size
        has = np.zeros(rows.size, dtype=np.bool_)
        if keys.size:
            values = list(t.comm.values())
            positions = np.searchsorted(rows, keys)
            for pos, a in zip(positions.tolist(), values, strict=True):
                part[pos] = a
            has[positions] = [_has_sizes(a) for a in values]
            cache: dict[tuple[int, str], int] = {}
            named = [
                (pos, nid, a.collective_name)
                for pos, nid, a in zip(
                    positions.tolist(), t.name[keys].tolist(), values, strict=True
                )
                if a.collective_name
            ]
            for pos, nid, cname in named:
                code = cache.get((nid, cname))
                if code is None:
                    code = _kind_code(co.collective_kind(trace.names[nid], cname))
                    cache[(nid, cname)] = code
                codes[pos] = code
        cols["pid"].append(t.pid[rows])
        cols["tid"].append(t.tid[rows])
        cols["start"].append(t.start_ns[rows])
        cols["end"].append(t.end_ns[rows])
        cols["ext"].append(t.external_id[rows])
        kinds.append(codes)
        sized.append(has)
        args.extend(part)
    start = np.concatenate(cols["start"])
    order = np.argsort(start, kind="stable")
    return _Ops(
        pid=np.concatenate(cols["pid"])[order],
        tid=np.concatenate(cols["tid"])[order],
        start_ns=start[order],
        end_ns=np.concatenate(cols["end"])[order],
        external_id=np.concatenate(cols["ext"])[order],
        kind=np.concatenate(kinds)[order],
        args=[args[i] for i in order.tolist()],
        sized=np.concatenate(sized)[order],
    )


def _enclosing(ops: _Ops, pid: I64, tid: I64, t: I64) -> tuple[I64, I64, I64]:
    """For launch points ``(pid, tid, t)``: the innermost enclosing collective op, the
    innermost one that names a kind, and the innermost one with sizes (-1 if none)."""
    n = t.size
    inner = np.full(n, -1, dtype=np.int64)
    with_kind = np.full(n, -1, dtype=np.int64)
    with_args = np.full(n, -1, dtype=np.int64)
    if n == 0 or len(ops) == 0:
        return inner, with_kind, with_args
    # one integer per (pid, tid) thread of the ops; launches on other threads get -1
    pids, tids = np.unique(ops.pid), np.unique(ops.tid)

    def thread_key(p: I64, t_: I64) -> I64:
        pi = np.minimum(np.searchsorted(pids, p), pids.size - 1)
        ti = np.minimum(np.searchsorted(tids, t_), tids.size - 1)
        ok = (pids[pi] == p) & (tids[ti] == t_)
        return np.where(ok, pi * tids.size + ti, -1).astype(np.int64)

    op_key = thread_key(ops.pid, ops.tid)
    by_thread = np.argsort(op_key, kind="stable")  # stays start-sorted within a thread
    sorted_keys = op_key[by_thread]
    q_key = thread_key(pid, tid)
    q_order = np.argsort(q_key, kind="stable")
    q_sorted = q_key[q_order]
    for c in np.unique(q_key).tolist():
        if c < 0:
            continue
        lo, hi = np.searchsorted(sorted_keys, [c, c + 1])
        cand = by_thread[lo:hi]
        qlo, qhi = np.searchsorted(q_sorted, [c, c + 1])
        q = q_order[qlo:qhi]
        if cand.size == 0 or q.size == 0:
            continue
        tq = t[q]
        pos = np.searchsorted(ops.start_ns[cand], tq, side="right") - 1
        for depth in range(_ENCLOSING_DEPTH):
            j = pos - depth
            ok = j >= 0
            if not ok.any():
                break
            g = np.where(ok, cand[np.maximum(j, 0)], 0)
            contains = ok & (ops.end_ns[g] > tq)
            fill = contains & (inner[q] < 0)
            inner[q[fill]] = g[fill]
            fill = contains & (with_kind[q] < 0) & (ops.kind[g] >= 0)
            with_kind[q[fill]] = g[fill]
            fill = contains & (with_args[q] < 0) & ops.sized[g]
            with_args[q[fill]] = g[fill]
    return inner, with_kind, with_args


def _by_external_id(ops: _Ops, ext: I64) -> I64:
    """The collective op with the same ``External id`` (one with sizes preferred)."""
    out = np.full(ext.size, -1, dtype=np.int64)
    valid = np.nonzero(ops.external_id >= 0)[0]
    if valid.size == 0 or ext.size == 0:
        return out
    # sort by (external id, sized first) and take the first of each id
    order = valid[np.lexsort((~ops.sized[valid], ops.external_id[valid]))]
    ids = ops.external_id[order]
    pos = np.clip(np.searchsorted(ids, ext), 0, ids.size - 1)
    hit = (ids[pos] == ext) & (ext >= 0)
    out[hit] = order[pos[hit]]
    return out


_RANKS_COUNT: dict[str, int] = {}


def _ranks_count(ranks: str | None) -> int:
    """Number of ranks in ``Process Group Ranks`` (``"[0, 1]"``), -1 if unknown."""
    if not ranks:
        return -1
    cached = _RANKS_COUNT.get(ranks)
    if cached is None:
        try:
            value = json.loads(ranks)
        except ValueError:
            value = None
        cached = len(value) if isinstance(value, list) and value else -1
        if len(_RANKS_COUNT) < 4096:
            _RANKS_COUNT[ranks] = cached
    return cached


@dataclass
class _ArgCols:
    """Collective args as columns (-1 / ``None`` where the args do not say)."""

    in_nelems: I64
    out_nelems: I64
    in_size: I64
    dtype_bytes: I64
    group: I64
    seq: I64
    has_seq: npt.NDArray[np.bool_]
    pg: list[str | None]

    @staticmethod
    def of(args: list[m.CommArgs | None]) -> _ArgCols:
        def col(values: list[int | None]) -> I64:
            return np.array([-1 if v is None else v for v in values], dtype=np.int64).reshape(-1)

        present = [a for a in args if a is not None]
        idx = [i for i, a in enumerate(args) if a is not None]
        n = len(args)

        def full(values: list[int | None]) -> I64:
            out = np.full(n, -1, dtype=np.int64)
            if idx:
                out[idx] = col(values)
            return out

        group = full([a.group_size for a in present])
        ranks = full([_ranks_count(a.process_group_ranks) for a in present])
        seq = full([a.seq for a in present])
        has_seq = np.zeros(n, dtype=np.bool_)
        if idx:
            has_seq[idx] = [a.seq is not None for a in present]
        pg: list[str | None] = [None] * n
        for i, a in zip(idx, present, strict=True):
            pg[i] = a.process_group_name or None
        return _ArgCols(
            in_nelems=full([a.in_msg_nelems for a in present]),
            out_nelems=full([a.out_msg_nelems for a in present]),
            in_size=full([a.in_msg_size_bytes for a in present]),
            dtype_bytes=full([co.dtype_size_bytes(a.dtype) if a.dtype else None for a in present]),
            group=np.where(group > 0, group, ranks),
            seq=seq,
            has_seq=has_seq,
            pg=pg,
        )

    def merged(self, other: _ArgCols) -> _ArgCols:
        """Field-wise: this where it says, else ``other``."""

        def pick(a: I64, b: I64) -> I64:
            return np.where(a >= 0, a, b)

        return _ArgCols(
            in_nelems=pick(self.in_nelems, other.in_nelems),
            out_nelems=pick(self.out_nelems, other.out_nelems),
            in_size=pick(self.in_size, other.in_size),
            dtype_bytes=pick(self.dtype_bytes, other.dtype_bytes),
            group=pick(self.group, other.group),
            seq=np.where(self.has_seq, self.seq, other.seq),
            has_seq=self.has_seq | other.has_seq,
            pg=[a if a is not None else b for a, b in zip(self.pg, other.pg, strict=True)],
        )


#: Where a collective's kind came from.
KIND_FROM: tuple[str, ...] = ("kernel_args", "op", "kernel_name")


@dataclass
class Collectives:
    """One entry per collective call (:func:`group_collectives`), sorted by start: equal
    length arrays, times in ns on the trace's clock, sizes in bytes; -1 where unknown."""

    start_ns: I64
    end_ns: I64
    kernels: I64
    kind: I64  # index into co.KINDS
    kind_from: I64  # index into KIND_FROM
    name_kind: I64  # the kind the kernel name alone says
    in_bytes: I64
    out_bytes: I64
    group: I64
    group_from_args: npt.NDArray[np.bool_]
    pg: list[str]
    seq: I64
    has_seq: npt.NDArray[np.bool_]
    step: I64  # step number, -1 outside every step window
    in_step: npt.NDArray[np.bool_]

    def __len__(self) -> int:
        return int(self.start_ns.size)

    @property
    def dur_ns(self) -> I64:
        return self.end_ns - self.start_ns

    @property
    def size_bytes(self) -> I64:
        """The nccl-tests message size: the larger of input and output (-1 unknown)."""
        return np.maximum(self.in_bytes, self.out_bytes)


def group_collectives(index: TraceIndex, rows: I64) -> Collectives:
    """Group the communication kernels ``rows`` (kernel table rows, int64) into
    collective calls (module docstring), sorted by start then end; empty arrays without
    rows."""
    trace = index.trace
    k = trace.kernels
    rt = trace.runtime
    ops = _collective_ops(index)
    launch = index.launch_row[m.KERNEL][rows]
    none = np.int64(-(2**62))
    if len(rt):
        has_launch = launch >= 0
        lr = np.where(has_launch, launch, 0)
        q_pid = np.where(has_launch, rt.pid[lr], none)
        q_tid = np.where(has_launch, rt.tid[lr], none)
        q_t = np.where(has_launch, rt.start_ns[lr], 0)
    else:
        q_pid = q_tid = np.full(rows.size, none, dtype=np.int64)
        q_t = np.zeros(rows.size, dtype=np.int64)
    inner, with_kind, with_args = _enclosing(ops, q_pid, q_tid, q_t)
    missing = np.nonzero(inner < 0)[0]
    if missing.size:
        hit = _by_external_id(ops, k.external_id[rows[missing]])
        found = hit >= 0
        idx, hit = missing[found], hit[found]
        inner[idx] = hit
        with_kind[idx] = np.where(ops.kind[hit] >= 0, hit, with_kind[idx])
        with_args[idx] = np.where(ops.sized[hit], hit, with_args[idx])
    # kernels launched from one op are one call; a kernel without one stands alone
    key = np.where(inner >= 0, inner, -1 - np.arange(rows.size, dtype=np.int64))
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    starts = np.full(uniq.size, np.iinfo(np.int64).max, dtype=np.int64)
    ends = np.full(uniq.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(starts, inverse, k.start_ns[rows])
    np.maximum.at(ends, inverse, k.end_ns[rows])
    counts = np.bincount(inverse, minlength=uniq.size).astype(np.int64)

    lead = rows[first]  # a kernel of each call: its args and name speak for the call
    k_args = _ArgCols.of([k.comm.get(r) for r in lead.tolist()])
    wa = with_args[first]
    o_args = _ArgCols.of([ops.args[i] if i >= 0 else None for i in wa.tolist()])
    args = k_args.merged(o_args)

    name_kind = _name_kind_codes(trace.names, k.name[lead])
    name_kind = np.where(name_kind >= 0, name_kind, co.KINDS.index(co.OTHER_COLLECTIVE))
    kernel_kind = np.full(uniq.size, _NO_KIND, dtype=np.int64)
    for g, r in enumerate(lead.tolist()):
        a = k.comm.get(r)
        if a is not None and a.collective_name:
            name = trace.names[int(k.name[r])]
            kernel_kind[g] = _kind_code(co.collective_kind(name, a.collective_name))
    wk = with_kind[first]
    op_kind = (
        np.where(wk >= 0, ops.kind[np.maximum(wk, 0)], _NO_KIND)
        if len(ops)
        else np.full(uniq.size, _NO_KIND, dtype=np.int64)
    )
    kind = np.where(kernel_kind >= 0, kernel_kind, np.where(op_kind >= 0, op_kind, name_kind))
    kind_from = np.where(kernel_kind >= 0, 0, np.where(op_kind >= 0, 1, 2))

    in_bytes = np.where(
        args.in_size >= 0,
        args.in_size,
        np.where(
            (args.in_nelems >= 0) & (args.dtype_bytes >= 0), args.in_nelems * args.dtype_bytes, -1
        ),
    )
    scaled = np.where(
        (in_bytes >= 0) & (args.in_nelems > 0) & (args.out_nelems >= 0),
        in_bytes * np.maximum(args.out_nelems, 0) // np.maximum(args.in_nelems, 1),
        -1,
    )
    out_bytes = np.where(
        (args.out_nelems >= 0) & (args.dtype_bytes >= 0),
        args.out_nelems * args.dtype_bytes,
        scaled,
    )
    world = trace.world_size
    group_from_args = args.group >= 0
    group = np.where(group_from_args, args.group, world if world is not None else -1)

    steps = index.steps
    step_idx = steps.step_of(starts)
    in_step = step_idx >= 0
    step = np.where(in_step, steps.number[np.maximum(step_idx, 0)], -1) if len(steps) else step_idx

    order = np.lexsort((ends, starts))
    pg = [args.pg[i] or "0" for i in order.tolist()]
    return Collectives(
        start_ns=starts[order],
        end_ns=ends[order],
        kernels=counts[order],
        kind=kind[order].astype(np.int64),
        kind_from=kind_from[order].astype(np.int64),
        name_kind=name_kind[order].astype(np.int64),
        in_bytes=in_bytes[order],
        out_bytes=out_bytes[order],
        group=group[order].astype(np.int64),
        group_from_args=group_from_args[order],
        pg=pg,
        seq=args.seq[order],
        has_seq=args.has_seq[order],
        step=step[order].astype(np.int64),
        in_step=in_step[order],
    )


def collective_op_count(index: TraceIndex) -> int:
    """Host-side collective calls: ``nccl:*``-style ops, else ``record_param_comms``
    with a collective name other than ``wait``."""
    trace = index.trace
    ann = 0
    for kind in (m.CPU_OP, m.USER_ANNOTATION):
        ann += int(index.rows_where(kind, _is_layer_op).sum())
    if ann:
        return ann
    count = 0
    for kind in (m.CPU_OP, m.USER_ANNOTATION):
        for a in trace.tables[kind].comm.values():
            if a.collective_name and co.collective_kind("", a.collective_name) is not None:
                count += 1
    return count


def _is_layer_op(name: str) -> bool:
    lowered = name.lower()
    return (
        lowered.startswith(("nccl:", "rccl:", "gloo:", "ucc:", "mpi:", "xccl:"))
        and co.collective_kind(name) is not None
    )
