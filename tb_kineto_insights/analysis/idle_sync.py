"""Where the host synchronised: the sources of the ``host_sync`` idle (:mod:`.idle`).

A **sync** is a CUDA/HIP runtime call that waits for the GPU
(:func:`~tb_kineto_insights.analysis.names.is_sync` on a runtime row:
``cudaStreamSynchronize``, ``cudaDeviceSynchronize``, a synchronous ``cudaMemcpy``…), on
a thread that launched the device's work, inside a host ``ProfilerStep`` window. A gap
*opened by a sync* (:func:`.idle_activity.sync_openers`) is charged to the sync range
that opened it; its moment ``t`` is the last nanosecond of that range.

The **source** of a sync (a call, or a gap's opening sync, at moment ``t`` on thread
``T``) is named by the ops around it on ``T``:

- ``op``: the outermost CPU op containing ``t`` (``aten::is_nonzero`` for
  ``if torch.isnan(h).any():``, ``aten::item`` for ``loss.item()``, ``aten::to`` for
  ``x.cpu()``); the runtime call itself when no op contains it (a bare
  ``torch.cuda.synchronize()``);
- ``chain``: every op and runtime call containing ``t``, outermost first
  (``aten::is_nonzero > aten::item > aten::_local_scalar_dense >
  cudaStreamSynchronize``);
- ``after``: the outermost CPU op that ended last on ``T`` before ``op`` started: the op
  whose result the sync usually reads (``aten::any`` above), written ``op ← after``;
- ``within``: the innermost user annotation containing ``op`` (``Optimizer.step#…``, a
  ``record_function`` range), ProfilerStep markers excluded;
- ``python_frame``: with stacks, the innermost user Python frame at ``t``
  (:mod:`.python_frames`), the most frequent one over its syncs.

Syncs with the same ``(op, after)`` are one source: ``calls_per_step`` (runtime sync
calls over the steps analysed), ``gaps_opened`` and ``idle_us`` (the gaps it opened and
their idle: the ``host_sync`` cost it explains). Sources are listed by idle, then calls.

Real traces: ``sample_logs/sync_isnan_check`` (``if torch.isnan(h).any():`` after each of
12 layers): one source, 12 syncs per step from ``aten::is_nonzero ← aten::any``;
``stacks_blocking_log``: ``aten::item`` (``loss.item()``).

Cost: one vectorised pass per launching thread (:func:`outermost_ops`, the chain of the
first sync of each source only), no loop over ops.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis import python_frames as pf
from tb_kineto_insights.analysis.enclosing_op import innermost_op
from tb_kineto_insights.analysis.group_sums import distinct_pairs
from tb_kineto_insights.analysis.trace_index import TraceIndex
from tb_kineto_insights.schema.idle import SyncSource
from tb_kineto_insights.trace import model as m

I64 = npt.NDArray[np.int64]


def outermost_ops(ops: m.EventTable, thread: tuple[int, int], ts: I64) -> tuple[I64, I64]:
    """Per moment ``ts`` on ``thread``: the row of ``ops`` of the outermost range
    containing it (``start ≤ t < end``), and the row of the outermost range that ended
    last at or before the start of that one (or of ``t`` where none contains it); -1
    where none. "Outermost": a range that starts at or after the end of every range of
    the thread that started before it (the thread's roots)."""
    out = np.full(ts.size, -1, dtype=np.int64)
    before = np.full(ts.size, -1, dtype=np.int64)
    rows = np.flatnonzero((ops.pid == thread[0]) & (ops.tid == thread[1]))
    if rows.size == 0 or ts.size == 0:
        return out, before
    s, e = ops.start_ns[rows], ops.end_ns[rows]
    order = np.lexsort((-e, s))  # by start, the enclosing (longer) range first
    rows, s, e = rows[order], s[order], e[order]
    prev_end = np.maximum.accumulate(e)
    root = np.ones(rows.size, dtype=np.bool_)
    root[1:] = s[1:] >= prev_end[:-1]
    rows, s, e = rows[root], s[root], e[root]
    k = np.searchsorted(s, ts, side="right") - 1
    inside = k >= 0
    inside[inside] = e[k[inside]] > ts[inside]
    out[inside] = rows[k[inside]]
    # the root before: the one before the containing root, else the last one started
    prior = np.where(inside, k - 1, k)
    ok = prior >= 0
    before[ok] = rows[prior[ok]]
    return out, before


def chain_at(index: TraceIndex, thread: tuple[int, int], t: int) -> list[str]:
    """Every CPU op, user annotation (ProfilerStep markers excluded) and runtime call
    on ``thread`` containing ``t``, outermost first (by start, the longer first)."""
    trace = index.trace
    found: list[tuple[int, int, str]] = []
    for kind in (m.USER_ANNOTATION, m.CPU_OP, m.RUNTIME):
        table = trace.tables[kind]
        sel = (
            (table.pid == thread[0])
            & (table.tid == thread[1])
            & (table.start_ns <= t)
            & (table.end_ns > t)
        )
        for r in np.flatnonzero(sel).tolist():
            name = trace.names[int(table.name[r])]
            if not nm.is_step_marker(name):
                found.append((int(table.start_ns[r]), -int(table.end_ns[r]), name))
    return [name for _, _, name in sorted(found)]


@dataclass
class _Source:
    op: str
    after: str | None
    call: str | None = None
    chain: list[str] = field(default_factory=list)
    within: str | None = None
    calls: int = 0
    gaps: int = 0
    idle_ns: int = 0
    frames: Counter[str] = field(default_factory=Counter)


@dataclass
class _Moments:
    """Moments of syncs on one thread: ``t`` (ns), which are calls (runtime sync calls
    counted per step) and which open gaps (with their idle ns), the call's name."""

    t: list[int] = field(default_factory=list)
    is_call: list[bool] = field(default_factory=list)
    idle_ns: list[int] = field(default_factory=list)
    call: list[str | None] = field(default_factory=list)


def _moments(
    index: TraceIndex,
    threads: list[tuple[int, int]],
    gap_threads: np.ndarray,
    sync_at: I64,
    glen: I64,
) -> dict[tuple[int, int], _Moments]:
    """Per launching thread, its runtime sync calls inside the host step windows and
    the moments of the gaps a sync opened (``sync_at`` ≥ 0, the gap's length)."""
    trace = index.trace
    rt = trace.runtime
    steps = index.steps
    host = steps.host_windows() if steps.has_markers else (steps.start_ns, steps.end_ns)
    calls = index.rows_where(m.RUNTIME, nm.is_sync) if len(rt) else np.zeros(0, np.bool_)
    out: dict[tuple[int, int], _Moments] = {}
    for thread in threads:
        mo = _Moments()
        sel = np.flatnonzero(calls & (rt.pid == thread[0]) & (rt.tid == thread[1]))
        if sel.size:
            last = rt.end_ns[sel] - 1
            inside = iv.window_index(last, host[0], host[1]) >= 0
            for r, t in zip(sel[inside].tolist(), last[inside].tolist(), strict=True):
                mo.t.append(int(t))
                mo.is_call.append(True)
                mo.idle_ns.append(-1)
                mo.call.append(trace.names[int(rt.name[r])])
        gaps = np.flatnonzero(
            (sync_at >= 0) & (gap_threads[:, 0] == thread[0]) & (gap_threads[:, 1] == thread[1])
        )
        for k in gaps.tolist():
            mo.t.append(int(sync_at[k]))
            mo.is_call.append(False)
            mo.idle_ns.append(int(glen[k]))
            mo.call.append(None)
        if mo.t:
            out[thread] = mo
    return out


def sync_sources(
    index: TraceIndex,
    frames: pf.FrameIndex,
    gap_threads: np.ndarray,
    sync_at: I64,
    glen: I64,
    limit: int,
) -> list[SyncSource]:
    """The sync sources of one device (module docstring), at most ``limit``, by idle
    then calls. ``gap_threads``: (n, 2) launching thread of each of its gaps;
    ``sync_at``: per gap, the moment of the sync that opened it (-1: not opened by a
    sync); ``glen``: gap lengths (ns). Empty without syncs."""
    trace = index.trace
    pairs = np.asarray(gap_threads, dtype=np.int64).reshape(-1, 2)
    threads = distinct_pairs(pairs[:, 0], pairs[:, 1])
    moments = _moments(index, threads, gap_threads, sync_at, glen)
    sources: dict[tuple[str, str | None], _Source] = {}
    ops = trace.cpu_ops
    notes = trace.tables[m.USER_ANNOTATION]
    for thread, mo in moments.items():
        ts = np.asarray(mo.t, dtype=np.int64)
        op_row, before = outermost_ops(ops, thread, ts)
        uniq = np.unique(ts)
        tl = frames.timeline(thread, uniq, uniq + 1) if len(frames) else None
        n = ts.size
        within = innermost_op(
            notes,
            np.full(n, thread[0], dtype=np.int64),
            np.full(n, thread[1], dtype=np.int64),
            ts.copy() if len(ops) == 0 else np.where(op_row >= 0, ops.start_ns[op_row], ts),
        )
        for i in range(n):
            call = mo.call[i]
            op = trace.names[int(ops.name[op_row[i]])] if op_row[i] >= 0 else None
            if op is None:
                chain = chain_at(index, thread, int(ts[i]))
                op = chain[0] if chain else (call or "synchronisation")
            after = trace.names[int(ops.name[before[i]])] if before[i] >= 0 else None
            src = sources.get((op, after))
            if src is None:
                src = sources[(op, after)] = _Source(op=op, after=after)
                src.chain = chain_at(index, thread, int(ts[i]))
                w = int(within[i])
                name = trace.names[int(notes.name[w])] if w >= 0 else None
                src.within = name if name and not nm.is_step_marker(name) else None
            if mo.is_call[i]:
                src.calls += 1
                src.call = src.call or call
            else:
                src.gaps += 1
                src.idle_ns += mo.idle_ns[i]
            if tl is not None and tl.start_ns.size:
                k = int(np.searchsorted(tl.start_ns, ts[i], side="right")) - 1
                if k >= 0 and tl.end_ns[k] > ts[i]:
                    frame = trace.names[frames.frame_of_stack[int(tl.stack[k])]]
                    src.frames[frame] += 1
    n_steps = max(len(index.steps), 1)
    ranked = sorted(sources.values(), key=lambda s: (-s.idle_ns, -s.calls, s.op))
    return [
        SyncSource(
            op=s.op,
            after=s.after,
            call=s.call or next((c for c in reversed(s.chain) if nm.is_sync(c)), None),
            chain=s.chain,
            within=s.within,
            calls_per_step=s.calls / n_steps,
            gaps_opened=s.gaps,
            idle_us=s.idle_ns / 1000.0,
            idle_us_per_step=s.idle_ns / 1000.0 / n_steps,
            python_frame=s.frames.most_common(1)[0][0] if s.frames else None,
        )
        for s in ranked[:limit]
    ]
