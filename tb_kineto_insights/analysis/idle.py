"""``summary.idle``: where each GPU waits inside the step windows, and why.

An idle gap is a maximal interval inside a step window where the device runs no kernel,
memcpy or memset (gaps are cut at step boundaries). Its cause is read from the *launching
host thread*: the thread that launched the GPU work that ends the gap (else the work
before it, else the thread of the ProfilerStep markers).

Attribution (DESIGN.md, Metric definitions):

1. A gap that opens as a host synchronization on that thread returns (the sync call
   started before the gap and returned within ``sync_return_tolerance_us`` of its start)
   belongs wholly to ``host_sync``: the host drained the queue instead of running ahead.
2. Otherwise each idle microsecond goes to what the thread was doing then, first match
   in :data:`CAUSES` order: ``data_loading`` (``enumerate(DataLoader)#…``),
   ``host_sync`` (``*Synchronize``, synchronous copies, ``aten::item``,
   ``aten::_local_scalar_dense``), ``optimizer_step`` (``Optimizer.step#…``),
   ``launching`` (any runtime call), ``cpu_ops`` (any other op), ``nothing_recorded``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.context import GPU_WORK_KINDS, TraceIndex
from tb_kineto_insights.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tb_kineto_insights.trace import model as m

CAUSES: tuple[str, ...] = (
    "data_loading",
    "host_sync",
    "optimizer_step",
    "launching",
    "cpu_ops",
    "nothing_recorded",
)
#: Gap-length histogram edges in µs (last bin open-ended).
GAP_EDGES_US: tuple[float, ...] = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)

_NO_THREAD = (-(2**62), -(2**62))


def _not_step_marker(name: str) -> bool:
    return not name.startswith("ProfilerStep#")


class _ThreadActivity:
    """Per (pid, tid): normalised interval sets of each cause, plus raw ranges for naming."""

    def __init__(self, index: TraceIndex) -> None:
        self.index = index
        trace = index.trace
        self.rt = trace.runtime
        parts: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = {
            c: [] for c in CAUSES[:-1]
        }

        def add(cause: str, kind: str, mask: np.ndarray) -> None:
            t = trace.tables[kind]
            parts[cause].append((t.pid[mask], t.tid[mask], t.start_ns[mask], t.end_ns[mask]))

        for kind in (m.CPU_OP, m.USER_ANNOTATION):
            add("data_loading", kind, index.rows_where(kind, nm.is_dataloader))
            add("host_sync", kind, index.rows_where(kind, nm.is_sync))
            add("optimizer_step", kind, index.rows_where(kind, nm.is_optimizer))
            add("cpu_ops", kind, index.rows_where(kind, _not_step_marker))
        add("host_sync", m.RUNTIME, index.rows_where(m.RUNTIME, nm.is_sync))
        add("launching", m.RUNTIME, np.ones(len(self.rt), dtype=np.bool_))
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

    def sync_calls(self, thread: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """Sync ranges on the thread sorted by end: (starts, ends)."""
        pid, tid, s, e = self.parts["host_sync"]
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


def _gpu_events(index: TraceIndex, device: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start, end and launching runtime row of every GPU event on ``device``, by start."""
    starts, ends, rows = [], [], []
    for kind in GPU_WORK_KINDS:
        t = index.trace.tables[kind]
        sel = t.device == device
        starts.append(t.start_ns[sel])
        ends.append(t.end_ns[sel])
        rows.append(index.launch_row[kind][sel])
    s, e, r = np.concatenate(starts), np.concatenate(ends), np.concatenate(rows)
    order = np.argsort(s, kind="stable")
    return s[order], e[order], r[order]


def _step_thread(index: TraceIndex) -> tuple[int, int]:
    t = index.trace.tables[m.USER_ANNOTATION]
    marks = index.rows_where(m.USER_ANNOTATION, lambda n: n.startswith("ProfilerStep#"))
    if marks.any():
        r = int(np.nonzero(marks)[0][0])
        return int(t.pid[r]), int(t.tid[r])
    rt = index.trace.runtime
    if len(rt):
        pairs, counts = np.unique(np.stack([rt.pid, rt.tid], axis=1), axis=0, return_counts=True)
        best = pairs[int(np.argmax(counts))]
        return int(best[0]), int(best[1])
    return _NO_THREAD


def _launch_threads(
    index: TraceIndex, gap_s: np.ndarray, gap_e: np.ndarray, device: int
) -> np.ndarray:
    """(n, 2) array of (pid, tid) of the launching thread of each gap."""
    ev_s, ev_e, ev_row = _gpu_events(index, device)
    rt = index.trace.runtime
    fallback = _step_thread(index)
    out = np.empty((gap_s.size, 2), dtype=np.int64)
    out[:] = fallback
    if ev_s.size == 0:
        return out
    # the event that starts where the gap ends (first event at or after the gap end)
    nxt = np.searchsorted(ev_s, gap_e, side="left")
    nxt_ok = nxt < ev_s.size
    row = np.full(gap_s.size, -1, dtype=np.int64)
    row[nxt_ok] = ev_row[nxt[nxt_ok]]
    # else the event that ended where the gap starts
    ends_sorted = np.argsort(ev_e, kind="stable")
    prv = np.searchsorted(ev_e[ends_sorted], gap_s, side="right") - 1
    need = (row < 0) & (prv >= 0)
    row[need] = ev_row[ends_sorted[prv[need]]]
    ok = row >= 0
    out[ok, 0] = rt.pid[row[ok]]
    out[ok, 1] = rt.tid[row[ok]]
    return out


def _histogram(lengths_ns: np.ndarray) -> list[dict[str, Any]]:
    edges = np.array(GAP_EDGES_US, dtype=np.float64) * 1000.0
    lengths = lengths_ns.astype(np.float64)
    bins = np.searchsorted(edges, lengths, side="right") - 1
    out = []
    for b, lo in enumerate(GAP_EDGES_US):
        sel = bins == b
        out.append(
            {
                "lo_us": float(lo),
                "hi_us": float(GAP_EDGES_US[b + 1]) if b + 1 < len(GAP_EDGES_US) else None,
                "count": int(sel.sum()),
                "time_us": float(lengths[sel].sum()) / 1000.0,
            }
        )
    return out


def _op_at(index: TraceIndex, thread: tuple[int, int], t_ns: int) -> tuple[str | None, str | None]:
    """(outermost, innermost) CPU range name on ``thread`` containing ``t_ns``."""
    trace = index.trace
    best_outer: tuple[int, str] | None = None
    best_inner: tuple[int, str] | None = None
    for kind in (m.USER_ANNOTATION, m.CPU_OP, m.RUNTIME):
        t = trace.tables[kind]
        sel = (t.pid == thread[0]) & (t.tid == thread[1]) & (t.start_ns <= t_ns) & (t.end_ns > t_ns)
        for r in np.nonzero(sel)[0]:
            name = trace.names[int(t.name[r])]
            if name.startswith("ProfilerStep#"):
                continue
            start = int(t.start_ns[r])
            if best_outer is None or start < best_outer[0]:
                best_outer = (start, name)
            if best_inner is None or start >= best_inner[0]:
                best_inner = (start, name)
    return (
        best_outer[1] if best_outer else None,
        best_inner[1] if best_inner else None,
    )


def idle_summary(index: TraceIndex, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> dict[str, Any]:
    """``summary.idle``: per device, busy fraction, idle per step, idle by cause, gap
    histogram and the largest gaps. Denominator of every ``_fraction`` of step time: the
    summed step-window time; of ``fraction_of_idle``: the device's summed idle time.
    """
    steps = index.steps
    total_ns = steps.total_ns
    notes: list[str] = []
    if not index.devices:
        notes.append("no GPU activity in this trace: nothing to be idle")
    if not steps.has_markers:
        notes.append("no ProfilerStep markers: the whole trace is one pseudo-step")
    activity = _ThreadActivity(index)
    windows = iv.union(steps.start_ns, steps.end_ns)
    tol_ns = int(thresholds.sync_return_tolerance_us * 1000)
    devices: list[dict[str, Any]] = []
    for dev in index.devices:
        busy = index.gpu_busy[dev]
        gaps = iv.split_at(iv.subtract(windows, busy), steps.start_ns)
        gs, ge = gaps
        glen = ge - gs
        step_of = iv.window_index(gs, steps.start_ns, steps.end_ns)
        threads = _launch_threads(index, gs, ge, dev)
        amounts = np.zeros((gs.size, len(CAUSES)), dtype=np.int64)
        sync_opened = np.zeros(gs.size, dtype=np.bool_)
        for a, b in np.unique(threads, axis=0) if gs.size else []:
            thread = (int(a), int(b))
            mine = (threads[:, 0] == thread[0]) & (threads[:, 1] == thread[1])
            idx = np.nonzero(mine)[0]
            sync_s, sync_e = activity.sync_calls(thread)
            if sync_e.size:
                k = np.searchsorted(sync_e, gs[idx], side="left")
                k_ok = k < sync_e.size
                hit = np.zeros(idx.size, dtype=np.bool_)
                kk = k[k_ok]
                hit[k_ok] = (sync_e[kk] <= gs[idx][k_ok] + tol_ns) & (sync_s[kk] <= gs[idx][k_ok])
                sync_opened[idx[hit]] = True
            rest = idx[~sync_opened[idx]]
            if rest.size == 0:
                continue
            remaining = (gs[rest], ge[rest])  # disjoint and sorted already
            sets = activity.sets(thread)
            for c, cause in enumerate(CAUSES[:-1]):
                part = iv.intersect(remaining, sets[cause])
                amounts[rest, c] = iv.overlap_per_window(part, gs[rest], ge[rest])
                remaining = iv.subtract(remaining, sets[cause])
            amounts[rest, -1] = glen[rest] - amounts[rest, :-1].sum(axis=1)
        amounts[sync_opened] = 0
        amounts[sync_opened, CAUSES.index("host_sync")] = glen[sync_opened]
        idle_ns = int(glen.sum())
        per_cause = amounts.sum(axis=0)
        busy_in = int(iv.total(iv.intersect(busy, windows)))
        idle_per_step = np.zeros(len(steps), dtype=np.int64)
        in_step = step_of >= 0
        np.add.at(idle_per_step, step_of[in_step], glen[in_step])
        cause_per_step = np.zeros((len(steps), len(CAUSES)), dtype=np.int64)
        np.add.at(cause_per_step, step_of[in_step], amounts[in_step])
        dominant = np.argmax(amounts, axis=1) if gs.size else np.zeros(0, dtype=np.int64)
        largest = np.argsort(-glen, kind="stable")[: thresholds.largest_gaps]
        largest_gaps = []
        for g in largest:
            thread = (int(threads[g, 0]), int(threads[g, 1]))
            outer, inner = _op_at(index, thread, int(gs[g] + glen[g] // 2))
            s_i = int(step_of[g])
            largest_gaps.append(
                {
                    "step": int(steps.number[s_i]) if s_i >= 0 else None,
                    "offset_us": (int(gs[g]) - int(steps.start_ns[s_i])) / 1000.0
                    if s_i >= 0
                    else None,
                    "start_us": (int(gs[g]) - index.origin_ns) / 1000.0,
                    "length_us": int(glen[g]) / 1000.0,
                    "cause": CAUSES[int(dominant[g])],
                    "opened_by_sync": bool(sync_opened[g]),
                    "causes_us": {
                        c: int(amounts[g, i]) / 1000.0
                        for i, c in enumerate(CAUSES)
                        if amounts[g, i]
                    },
                    "op": outer,
                    "innermost_op": inner,
                    "thread": {"pid": thread[0], "tid": thread[1]},
                }
            )
        devices.append(
            {
                "device": dev,
                "busy_us": busy_in / 1000.0,
                "busy_fraction": busy_in / total_ns if total_ns else None,
                "idle_us": idle_ns / 1000.0,
                "idle_fraction": idle_ns / total_ns if total_ns else None,
                "idle_us_per_step": idle_ns / 1000.0 / len(steps) if len(steps) else None,
                "gap_count": int(gs.size),
                "causes": {
                    cause: {
                        "us": int(per_cause[i]) / 1000.0,
                        "fraction_of_idle": int(per_cause[i]) / idle_ns if idle_ns else 0.0,
                        "fraction_of_step_time": int(per_cause[i]) / total_ns if total_ns else 0.0,
                    }
                    for i, cause in enumerate(CAUSES)
                },
                "sync_opened_gaps": int(sync_opened.sum()),
                "per_step": [
                    {
                        "number": int(steps.number[i]),
                        "idle_us": int(idle_per_step[i]) / 1000.0,
                        "busy_fraction": 1.0 - int(idle_per_step[i]) / int(steps.dur_ns[i])
                        if int(steps.dur_ns[i])
                        else None,
                        "causes_us": {
                            c: int(cause_per_step[i, k]) / 1000.0 for k, c in enumerate(CAUSES)
                        },
                    }
                    for i in range(len(steps))
                ],
                "gap_histogram": _histogram(glen),
                "largest_gaps": largest_gaps,
            }
        )
    main = max(devices, key=lambda d: d["busy_us"], default=None)
    return {
        "cause_order": list(CAUSES),
        "main_device": main["device"] if main else None,
        "devices": devices,
        "notes": notes,
    }
