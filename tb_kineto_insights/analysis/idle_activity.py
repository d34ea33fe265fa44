"""Who launched the GPU work around an idle gap, and what that thread was doing.

The building blocks of the idle panel's attribution (:mod:`.idle`): per host thread, the
interval sets of each traced host-activity cause (:class:`ThreadActivity`, from the one
cause table, :mod:`.host_activity`); per device, its GPU events in start order
(:class:`DeviceEvents`); per gap, its *launching thread* (:func:`launch_threads`: the
thread that launched the work closing the gap, else the work before it, else the step
thread) and whether it opened as a host synchronization returned
(:func:`opened_by_sync`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.host_activity import TRACED, TRACED_NAMES, rows_of, step_thread_of
from tb_kineto_insights.analysis.trace_index import GPU_WORK_KINDS, TraceIndex
from tb_kineto_insights.trace import model as m


class ThreadActivity:
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


class DeviceEvents(NamedTuple):
    """Every GPU event on one device, sorted by start: start/end (ns), the row of the
    runtime call that launched it (-1: unknown), whether it is a *short compute
    kernel* (a kernel, not NCCL/RCCL, shorter than ``Thresholds.short_kernel_us``) and
    whether it is a communication (NCCL/RCCL) kernel."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    launch_row: np.ndarray
    short_kernel: np.ndarray
    communication: np.ndarray


def gpu_events(index: TraceIndex, device: int, short_ns: float) -> DeviceEvents:
    """The GPU events of ``device`` (see :class:`DeviceEvents`)."""
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
    return DeviceEvents(
        s[order],
        e[order],
        r[order],
        np.concatenate(short)[order],
        np.concatenate(comm)[order],
    )


def next_event(ev: DeviceEvents, gap_e: np.ndarray) -> np.ndarray:
    """Per gap, the index in ``ev`` of the event that starts exactly where the gap ends
    (the work that closes it); -1 where the gap ends at a step boundary instead."""
    nxt = np.searchsorted(ev.start_ns, gap_e, side="left")
    ok = nxt < ev.start_ns.size
    ok[ok] = ev.start_ns[nxt[ok]] == gap_e[ok]
    return np.where(ok, nxt, -1)


def launch_threads(
    index: TraceIndex, ev: DeviceEvents, gap_s: np.ndarray, gap_e: np.ndarray
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


def inside_graph_replay(
    index: TraceIndex, ev: DeviceEvents, gap_s: np.ndarray, gap_e: np.ndarray
) -> np.ndarray:
    """Per gap: it lies between two kernels of one CUDA graph replay, the work that ends
    where it starts and the work that starts where it ends launched by the same graph
    launch call (``cudaGraphLaunch``, one correlation id): the GPU waits on the graph's
    own dependencies (another stream's work, an event), not on the host."""
    out = np.zeros(gap_s.size, dtype=np.bool_)
    if ev.start_ns.size == 0 or gap_s.size == 0:
        return out
    graph = index.rows_where(m.RUNTIME, nm.is_graph_launch)
    if not graph.any():
        return out
    nxt = next_event(ev, gap_e)
    by_end = np.argsort(ev.end_ns, kind="stable")
    k = np.searchsorted(ev.end_ns[by_end], gap_s, side="right") - 1
    prv = np.where(k >= 0, by_end[np.maximum(k, 0)], -1)
    ok = (nxt >= 0) & (prv >= 0)
    ok[ok] = ev.end_ns[prv[ok]] == gap_s[ok]
    row_n = np.where(ok, ev.launch_row[np.maximum(nxt, 0)], -1)
    row_p = np.where(ok, ev.launch_row[np.maximum(prv, 0)], -1)
    out = (row_n >= 0) & (row_n == row_p)
    out[out] = graph[row_n[out]]
    return out


def busy_in(events: DeviceEvents, sel: np.ndarray, windows: iv.Intervals) -> int:
    """Wall time (ns) covered by the selected events inside the step windows."""
    return int(iv.total(iv.intersect(iv.union(events.start_ns[sel], events.end_ns[sel]), windows)))


def opened_by_sync(
    activity: ThreadActivity,
    thread: tuple[int, int],
    gap_s: np.ndarray,
    gap_e: np.ndarray,
    tol_ns: int,
) -> np.ndarray:
    """Per gap: it opens as a host synchronization on ``thread`` returns
    (:func:`sync_openers` found its sync range)."""
    return sync_openers(activity, thread, gap_s, gap_e, tol_ns) >= 0


def sync_openers(
    activity: ThreadActivity,
    thread: tuple[int, int],
    gap_s: np.ndarray,
    gap_e: np.ndarray,
    tol_ns: int,
) -> np.ndarray:
    """Per gap, the end (ns) of the host synchronization on ``thread`` that opened it,
    -1 where none did. A gap opens as a sync returns when the first sync range on the
    thread ending at or after the gap start ends within ``tol_ns`` of it and started no
    later than the gap start (the host was blocked when the GPU ran dry). A CUDA runtime
    sync call (which always waits for the GPU) may also start inside the gap, within
    that tolerance of its start: ``x.cpu()`` copies, then calls
    ``cudaStreamSynchronize`` a few µs after the copy drained the GPU. Of the two kinds
    of ranges (any sync range, runtime calls only), the first that opened it."""
    out = np.full(gap_s.size, -1, dtype=np.int64)
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
        hit = (sync_e[kk] <= gs + tol_ns) & started
        where = np.flatnonzero(ok)[hit]
        fresh = out[where] < 0
        out[where[fresh]] = sync_e[kk[hit]][fresh]
    return out


def inside(sets: iv.Intervals, t: np.ndarray) -> np.ndarray:
    """Per point: inside one of the normalised intervals."""
    k = np.searchsorted(sets[0], t, side="right") - 1
    ok = k >= 0
    ok[ok] = t[ok] < sets[1][k[ok]]
    return ok


def by_thread(threads: np.ndarray) -> list[tuple[tuple[int, int], np.ndarray]]:
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
