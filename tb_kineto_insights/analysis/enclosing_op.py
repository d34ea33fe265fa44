"""Which CPU op a host thread was in at a given moment: the innermost op on that thread
(same pid and tid) whose range ``[start, end)`` contains the moment, "innermost" being
the latest-starting one (:func:`innermost_op`). An allocation is charged to this op of
its own event (:mod:`.memory`); a kernel whose ``External id`` names no op, to this op
of its launch call (:mod:`.efficiency`).

Cost: per thread, one ``searchsorted`` and a binary lifting over a sparse table of
range-maximum ends; O((n + q) log n), no Python loop over ops or points.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tb_kineto_insights.analysis.group_sums import distinct_pairs
from tb_kineto_insights.trace import model as m

I64 = npt.NDArray[np.int64]


def innermost_op(ops: m.EventTable, pid: I64, tid: I64, ts: I64) -> I64:
    """Row of ``ops`` (a start-sorted :class:`EventTable`) of the innermost range on the
    same pid/tid containing each point ``ts`` (``start ≤ ts < end``), -1 where none does.

    "Innermost" is the latest-starting containing range. Per thread: ``searchsorted`` the
    last range starting at or before the point, then binary lifting over a sparse table of
    range-maximum ends finds the latest range at or before it that still ends after the
    point. O((n + q) log n), no Python loop over ranges.
    """
    out = np.full(ts.size, -1, dtype=np.int64)
    if ts.size == 0 or len(ops) == 0:
        return out
    rows_all = np.arange(len(ops), dtype=np.int64)
    op_pid, op_tid = ops.pid, ops.tid
    for p, t in distinct_pairs(pid, tid):
        q = np.nonzero((pid == p) & (tid == t))[0]
        rows = rows_all[(op_pid == p) & (op_tid == t)]  # start-sorted (table order)
        if rows.size == 0:
            continue
        starts, ends = ops.start_ns[rows], ops.end_ns[rows]
        # sparse table: table[k][i] = max(ends[max(0, i - 2**k + 1) .. i])
        table = [ends]
        step = 1
        while step < rows.size:
            prev = table[-1]
            nxt = np.empty_like(prev)
            nxt[:step] = prev[:step]
            np.maximum(prev[step:], prev[:-step], out=nxt[step:])
            table.append(nxt)
            step *= 2
        pts = ts[q]
        ptr = np.searchsorted(starts, pts, side="right") - 1
        for k in range(len(table) - 1, -1, -1):
            ok = ptr >= 0
            sub = np.nonzero(ok)[0]
            all_end_before = table[k][ptr[sub]] <= pts[sub]
            jump = sub[all_end_before]
            ptr[jump] = np.maximum(ptr[jump] - (1 << k), -1)
        hit = ptr >= 0
        out[q[hit]] = rows[ptr[hit]]
    return out
