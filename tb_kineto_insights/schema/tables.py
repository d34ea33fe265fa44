"""Shape of ``tables``: filled by ``analysis.tables.tables_summary``.

Kept in step with that code: tests round-trip every real summary through it.
"""

from __future__ import annotations

from tb_kineto_insights.schema._base import Out


class TableRow(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.tables.kernels.rows[]``
    (also ``summary.tables.ops.rows[]``)."""

    name: str
    count: int
    time_us: float
    per_step_count: list[int]
    per_step_time_us: list[float]


class Table(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.tables.kernels``
    (also ``summary.tables.ops``)."""

    rows: list[TableRow]
    other_time_us: float
    steps: int


class TablesPanel(Out, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``summary.tables``."""

    kernels: Table
    ops: Table
