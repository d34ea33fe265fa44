"""``summary.tables``: per-name aggregates with per-step values, for the diff.

Kernels are grouped by short name (template arguments folded), CPU ops by name. For
each group: count and summed duration over the step windows, and the same per step, so
that a diff can judge a change against the step-to-step noise of that very kernel or op.
"""

from __future__ import annotations

import numpy as np

from tb_kineto_insights.analysis import names as nm
from tb_kineto_insights.analysis.group_sums import distinct_inverse, int_sums
from tb_kineto_insights.analysis.names import short_kernel_name
from tb_kineto_insights.analysis.trace_index import Mask, TraceIndex, step_threads
from tb_kineto_insights.schema.tables import Table, TableRow, TablesPanel
from tb_kineto_insights.trace import model as m

#: Rows kept per table (by summed time); the rest is summed into ``other_time_us``.
MAX_ROWS = 300


def _table(
    index: TraceIndex, kind: str, fold: bool, max_rows: int, only: Mask | None = None
) -> Table:
    """Per name of table ``kind`` (kernel names folded when ``fold``): count and summed
    duration inside the step windows, per step; only the rows where ``only`` (bool per
    row of the table) when given. GPU events count in the step windows, host events in
    the host windows (:meth:`~.step_windows.StepWindows.host_windows`: a host that runs
    ahead issues a step long before its GPU window)."""
    trace = index.trace
    t = trace.tables[kind]
    steps = index.steps
    n_steps = len(steps)
    if len(t) == 0 or n_steps == 0:
        return Table(rows=[], other_time_us=0.0, steps=n_steps)
    step = steps.step_of(t.start_ns) if kind in m.GPU_KINDS else steps.host_step_of(t.start_ns)
    inside = step >= 0
    if only is not None:
        inside &= only
    name_ids = t.name[inside]
    # group by label through the (few) distinct name ids, never per row as strings
    ids, id_group_of_row = distinct_inverse(name_ids)
    labels = [short_kernel_name(trace.names[i]) if fold else trace.names[i] for i in ids]
    group_of_label: dict[str, int] = {}
    group_of_id = np.array(
        [group_of_label.setdefault(label, len(group_of_label)) for label in labels],
        dtype=np.int64,
    )
    group = group_of_id[id_group_of_row]
    uniq = list(group_of_label)
    dur = t.dur_ns[inside]
    s = step[inside]
    n_groups = len(uniq)
    cell = group * n_steps + s  # (group, step) flattened
    count = np.bincount(cell, minlength=n_groups * n_steps).reshape(n_groups, n_steps)
    time = int_sums(cell, dur, n_groups * n_steps).reshape(n_groups, n_steps)
    total_time = time.sum(axis=1)
    order = np.argsort(-total_time, kind="stable")
    keep = order[:max_rows]
    rows = [
        TableRow(
            name=str(uniq[g]),
            count=int(count[g].sum()),
            time_us=int(total_time[g]) / 1000.0,
            per_step_count=count[g].tolist(),
            per_step_time_us=(time[g] / 1000.0).tolist(),
        )
        for g in keep
    ]
    return Table(
        rows=rows,
        other_time_us=int(total_time[order[max_rows:]].sum()) / 1000.0,
        steps=n_steps,
    )


def _dataloader_iterators(index: TraceIndex) -> list[str]:
    """Distinct names of the trace's ``enumerate(DataLoader)#…`` ranges (CPU ops and
    user annotations), sorted: ``…#_SingleProcessDataLoaderIter.__next__`` loads in the
    traced process, ``…#_MultiProcessingDataLoaderIter.__next__`` in worker processes
    the profiler does not trace (``num_workers > 0``)."""
    trace = index.trace
    found: set[str] = set()
    for kind in (m.CPU_OP, m.USER_ANNOTATION):
        t = trace.tables[kind]
        rows = index.rows_where(kind, nm.is_dataloader)
        found.update(trace.names[int(i)] for i in np.unique(t.name[rows]))
    return sorted(found)


def _off_step_threads(index: TraceIndex) -> Mask:
    """Per CPU-op row: on a thread other than the step's
    (:func:`~tb_kineto_insights.analysis.trace_index.step_threads`); all false without
    ``ProfilerStep`` markers."""
    ops = index.trace.tables[m.CPU_OP]
    threads = step_threads(index.trace)
    if not threads or len(ops) == 0:
        return np.zeros(len(ops), dtype=np.bool_)
    pairs = np.asarray(sorted(threads), dtype=np.int64)
    on = np.zeros(len(ops), dtype=np.bool_)
    for pid, tid in pairs.tolist():
        on |= (ops.pid == pid) & (ops.tid == tid)
    return ~on


def tables_summary(index: TraceIndex, max_rows: int = MAX_ROWS) -> TablesPanel:
    """:class:`~tb_kineto_insights.schema.tables.TablesPanel`: ``kernels`` and ``ops``
    tables and ``dataloader_iterators`` (str); a :class:`~tb_kineto_insights.schema.tables.Table`
    has ``rows`` (``name, count, time_us, per_step_count, per_step_time_us``),
    ``other_time_us`` and ``steps``, with rows sorted by summed time (µs; summed durations,
    nested ops each count in full); ``dataloader_iterators``: see
    :func:`_dataloader_iterators` (the diff tells CPU ops that moved into DataLoader
    workers by it); ``ops_elsewhere``: the same as ``ops`` for the CPU ops on threads
    other than the step's (:func:`_off_step_threads`; empty in most traces), which the
    diff reads to tell work moved off the step's threads."""
    return TablesPanel(
        kernels=_table(index, m.KERNEL, True, max_rows),
        ops=_table(index, m.CPU_OP, False, max_rows),
        ops_elsewhere=_table(index, m.CPU_OP, False, max_rows, _off_step_threads(index)),
        dataloader_iterators=_dataloader_iterators(index),
    )
