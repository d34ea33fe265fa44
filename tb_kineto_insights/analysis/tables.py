"""``summary.tables``: per-name aggregates with per-step values, for the diff.

Kernels are grouped by short name (template arguments folded), CPU ops by name. For
each group: count and summed duration over the step windows, and the same per step, so
that a diff can judge a change against the step-to-step noise of that very kernel or op.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tb_kineto_insights.analysis import intervals as iv
from tb_kineto_insights.analysis.context import TraceIndex
from tb_kineto_insights.analysis.names import short_kernel_name
from tb_kineto_insights.trace import model as m

#: Rows kept per table (by summed time); the rest is summed into ``other_time_us``.
MAX_ROWS = 300


def _table(index: TraceIndex, kind: str, fold: bool, max_rows: int) -> dict[str, Any]:
    trace = index.trace
    t = trace.tables[kind]
    steps = index.steps
    n_steps = len(steps)
    if len(t) == 0 or n_steps == 0:
        return {"rows": [], "other_time_us": 0.0, "steps": n_steps}
    step = iv.window_index(t.start_ns, steps.start_ns, steps.end_ns)
    inside = step >= 0
    name_ids = t.name[inside]
    labels = [short_kernel_name(n) for n in trace.names] if fold else list(trace.names)
    label_of_id = np.array(labels, dtype=object)
    uniq, group = np.unique(label_of_id[name_ids].astype(str), return_inverse=True)
    dur = t.dur_ns[inside]
    s = step[inside]
    n_groups = uniq.size
    count = np.zeros((n_groups, n_steps), dtype=np.int64)
    time = np.zeros((n_groups, n_steps), dtype=np.int64)
    np.add.at(count, (group, s), 1)
    np.add.at(time, (group, s), dur)
    total_time = time.sum(axis=1)
    order = np.argsort(-total_time, kind="stable")
    keep = order[:max_rows]
    rows = [
        {
            "name": str(uniq[g]),
            "count": int(count[g].sum()),
            "time_us": int(total_time[g]) / 1000.0,
            "per_step_count": count[g].tolist(),
            "per_step_time_us": (time[g] / 1000.0).tolist(),
        }
        for g in keep
    ]
    return {
        "rows": rows,
        "other_time_us": int(total_time[order[max_rows:]].sum()) / 1000.0,
        "steps": n_steps,
    }


def tables_summary(index: TraceIndex, max_rows: int = MAX_ROWS) -> dict[str, Any]:
    """``{"kernels": table, "ops": table}``; a table is ``{"rows": [{name, count,
    time_us, per_step_count, per_step_time_us}], "other_time_us", "steps"}`` with rows
    sorted by summed time (µs; summed durations, nested ops each count in full)."""
    return {
        "kernels": _table(index, m.KERNEL, True, max_rows),
        "ops": _table(index, m.CPU_OP, False, max_rows),
    }
