"""The kernel and CPU-op tables of a diff: per name, time and count per step on each
side, judged, with names only one side has (added, removed) and CPU ops that moved off
the step's threads or into DataLoader worker processes told apart from faster ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tb_kineto_insights.analysis.collectives import is_communication_kernel
from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.compare.diff_rules import TOO_SMALL, judge
from tb_kineto_insights.schema.summary import Summary

__all__ = ["ONE_SIDED_STATUS", "compare_table"]

Side = Sequence[tuple[str, Summary]]


def _table_rows(side: Side, table: str) -> tuple[dict[str, dict[str, list[float]]], int]:
    """name → {"time": per-step µs, "count": per-step count}, pooled over the side's spans
    (a span lacking a name contributes zeros for its steps); and the pooled step count.
    ``table``: ``kernels``, ``ops`` or ``ops_elsewhere`` (a field of ``summary.tables``)."""
    rows: dict[str, dict[str, list[float]]] = {}
    offset = 0
    for _, summary in side:
        t = getattr(summary.tables, table)
        n = int(t.steps or len(summary.steps.steps))
        for row in t.rows:
            entry = rows.setdefault(row.name, {"time": [], "count": []})
            per_step: list[float] | list[int]
            for key, per_step in (("time", row.per_step_time_us), ("count", row.per_step_count)):
                entry[key].extend([0.0] * (offset - len(entry[key])))
                entry[key].extend(float(v) for v in per_step)
        offset += n
    for entry in rows.values():
        for key in ("time", "count"):
            entry[key].extend([0.0] * (offset - len(entry[key])))
    return rows, offset


#: Row status of a name only one side has → what the tab and text call it.
ONE_SIDED_STATUS: dict[str, str] = {
    "added": "added",
    "removed": "removed",
    "moved_out": "moved out",
    "moved_partly": "moved partly",
}


#: CPU op of the main process's iterator when a DataLoader has ``num_workers > 0``
#: (``enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__``).
_MULTIPROCESS_LOADER = "_MultiProcessingDataLoaderIter"


def _loads_in_workers(side: Side) -> bool:
    """Whether the side's DataLoader loads in worker processes (``num_workers > 0``):
    a ``tables.dataloader_iterators`` name of the traced process holds
    ``_MultiProcessingDataLoaderIter``. The profiler traces only the main process, so
    what those workers run is not in it."""
    return any(
        _MULTIPROCESS_LOADER in name
        for _, summary in side
        for name in summary.tables.dataloader_iterators
    )


def _one_sided(row: dict[str, Any], status: str) -> None:
    """A name only one side has: its row says ``added`` / ``removed`` / ``moved_out``
    (``status``; also the ``verdict`` of its time and count, as ``ONE_SIDED_STATUS``
    words it) instead of improved/regressed: a name that appears or disappears is a
    change of what runs, not a faster or slower version of it.

    ``moved_out`` (CPU ops only): a CPU op of base absent from exp while exp's
    DataLoader loads in worker processes and base's did not; the profiler does not
    trace those workers, so the op most likely runs there now (data transforms moved
    into DataLoader workers). It is a likelihood, not a measurement: ``note`` says so."""
    row["status"] = status
    for key in ("time_us_per_step", "count_per_step"):
        row[key]["verdict"] = ONE_SIDED_STATUS[status]
    if status == "moved_out":
        row["note"] = (
            "removed from the traced threads, or moved out of them: exp loads data in "
            "DataLoader worker processes, which the profiler does not trace"
        )


def _moved_off_step_threads(
    both: tuple[dict[str, list[float]], dict[str, list[float]]],
    elsewhere: tuple[dict[str, list[float]] | None, dict[str, list[float]] | None],
    *,
    step_floor_us: float,
    thresholds: Thresholds,
) -> str | None:
    """The note of a CPU op that moved (partly) off the step's threads, else ``None``.

    ``both``: the op's per-step ``time``/``count`` on base and exp (every thread);
    ``elsewhere``: the same on threads other than the step's (``tables.ops_elsewhere``:
    a prefetch thread, a thread pool; ``None``: none there). Moved when its time
    elsewhere grew (judged as a time per step, the step floor applying: ``regressed``)
    while on the step's threads (every thread less elsewhere) its time or its count per
    step fell (``improved``): the work appeared in another place of the process as it
    left the step's threads, so it did not get faster (the count is the steady sign when
    threads compete for cores and times move with the load)."""
    (b, e), (b_else, e_else) = both, elsewhere
    if b_else is None and e_else is None:
        return None

    def part(rows: dict[str, list[float]] | None, key: str, n: int) -> list[float]:
        return rows[key] if rows is not None else [0.0] * n

    nb, ne = len(b["time"]), len(e["time"])
    grew = judge(
        part(b_else, "time", nb),
        part(e_else, "time", ne),
        "lower",
        min_abs_delta=step_floor_us,
        thresholds=thresholds,
    )
    if grew["verdict"] != "regressed":
        return None
    on: dict[str, tuple[list[float], list[float]]] = {}
    for key in ("time", "count"):
        on[key] = (
            [x - y for x, y in zip(b[key], part(b_else, key, nb), strict=True)],
            [x - y for x, y in zip(e[key], part(e_else, key, ne), strict=True)],
        )
    fell_time = judge(*on["time"], "lower", min_abs_delta=step_floor_us, thresholds=thresholds)
    fell_count = judge(*on["count"], "lower", thresholds=thresholds)
    if "improved" not in (fell_time["verdict"], fell_count["verdict"]):
        return None
    return (
        "moved off the step's threads: on them "
        f"{fell_time['base']:.0f} → {fell_time['exp']:.0f} µs/step "
        f"({fell_count['base']:.1f} → {fell_count['exp']:.1f} calls), on other threads of "
        f"the process (a prefetch thread, a thread pool) {grew['base']:.0f} → "
        f"{grew['exp']:.0f} µs/step: part of the work runs there now, it did not get "
        "faster; both are in the row's numbers"
    )


def compare_table(
    base: Side,
    exp: Side,
    table: str,
    *,
    step_floor_us: float,
    thresholds: Thresholds,
    limit: int = 25,
) -> dict[str, Any]:
    """Per name: time and count per step, judged (see :mod:`.diff_rules`). For the
    ``kernels`` table, NCCL/RCCL kernels go to ``communication`` with their time
    ``not judged`` (their time is mostly waiting when ranks arrive apart)."""
    b_rows, b_n = _table_rows(base, table)
    e_rows, e_n = _table_rows(exp, table)
    out: dict[str, Any] = {"changed": [], "added": [], "removed": [], "unchanged_count": 0}
    if table == "kernels":
        out["communication"] = []
    if not b_n or not e_n:
        return out
    changed, added, removed, comm = [], [], [], []
    moved_out = table == "ops" and _loads_in_workers(exp) and not _loads_in_workers(base)
    b_else, _ = _table_rows(base, "ops_elsewhere") if table == "ops" else ({}, b_n)
    e_else, _ = _table_rows(exp, "ops_elsewhere") if table == "ops" else ({}, e_n)
    unchanged = 0
    for name in sorted(set(b_rows) | set(e_rows)):
        b = b_rows.get(name, {"time": [0.0] * b_n, "count": [0.0] * b_n})
        e = e_rows.get(name, {"time": [0.0] * e_n, "count": [0.0] * e_n})
        t = judge(b["time"], e["time"], "lower", min_abs_delta=step_floor_us, thresholds=thresholds)
        c = judge(b["count"], e["count"], "lower", thresholds=thresholds)
        row = {
            "name": name,
            "time_us_per_step": t,
            "count_per_step": c,
            "delta_time_us_per_step": t["delta"],
        }
        if table == "kernels" and is_communication_kernel(name):
            if t["verdict"] not in TOO_SMALL:
                t["verdict"] = "not judged"
            row["status"] = (
                "added" if name not in b_rows else "removed" if name not in e_rows else "both"
            )
            row["note"] = (
                "communication kernel: its time includes waiting for the other ranks; "
                "see the waited/transfer rows"
            )
            comm.append(row)
        elif name not in b_rows:
            _one_sided(row, "added")
            added.append(row)
        elif name not in e_rows:
            _one_sided(row, "moved_out" if moved_out else "removed")
            removed.append(row)
        elif (
            moved := _moved_off_step_threads(
                (b, e),
                (b_else.get(name), e_else.get(name)),
                step_floor_us=step_floor_us,
                thresholds=thresholds,
            )
        ) is not None:
            # the op left the step's threads and appeared on another thread of the
            # process: the work moved there (whatever its total did), not faster
            row["status"] = "moved_partly"
            t["verdict"] = ONE_SIDED_STATUS["moved_partly"]
            row["note"] = moved
            changed.append(row)
        elif moved_out and t["verdict"] == "improved":
            # the op shrank as data loading moved into worker processes the profiler
            # does not trace: most likely part of it runs there now, not faster
            row["status"] = "moved_partly"
            t["verdict"] = ONE_SIDED_STATUS["moved_partly"]
            row["note"] = (
                "shrank while exp's DataLoader moved into worker processes, which the "
                "profiler does not trace: part of it most likely runs there now (not "
                "faster); the model's own calls of it are in both numbers"
            )
            changed.append(row)
        elif t["verdict"] in ("improved", "regressed") or c["verdict"] in ("improved", "regressed"):
            changed.append(row)
        else:
            unchanged += 1

    def by_impact(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(rows, key=lambda r: -abs(r["delta_time_us_per_step"]))[:limit]

    out.update(
        changed=by_impact(changed),
        added=by_impact(added),
        removed=by_impact(removed),
        unchanged_count=unchanged,
    )
    if table == "kernels":
        out["communication"] = by_impact(comm)
    return out
