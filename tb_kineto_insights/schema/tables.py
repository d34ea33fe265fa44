"""Shape of ``tables``: filled by ``analysis.tables.tables_summary``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from tb_kineto_insights.schema._base import Out


class TableRow(Out, frozen=True, kw_only=True):
    """One name: total ``count`` and ``time_us``, and per step
    (``per_step_count``, ``per_step_time_us``, one value per step of the table)."""

    name: str
    count: int
    time_us: float
    per_step_count: list[int]
    per_step_time_us: list[float]


class Table(Out, frozen=True, kw_only=True):
    """A name table: ``rows`` (the names kept), ``other_time_us`` (time of the rest)
    and the ``steps`` they cover. (``tables.kernels`` and ``tables.ops``.)"""

    rows: list[TableRow]
    other_time_us: float
    steps: int


class TablesPanel(Out, frozen=True, kw_only=True):
    """``summary.tables`` (``analysis.tables.tables_summary``): per kernel name
    and per op name, count and time per step, for the diff; ``ops_elsewhere``: the ops
    on threads other than the step's (a prefetch thread, a thread pool), already in
    ``ops``."""

    kernels: Table
    ops: Table
    ops_elsewhere: Table
    dataloader_iterators: list[str]
