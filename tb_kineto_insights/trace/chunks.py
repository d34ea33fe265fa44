"""The columns of one table, gathered as chunks piece by piece, and the table they make.

A :class:`Columns` holds, per column, the chunks added in file order (every chunk of
one :meth:`Columns.add` has the same length: ``rows`` counts them), and the row-keyed
args of its rows (comm args, ``Input Dims`` and the other literal texts), keyed by row
number in that order. :func:`event_table` concatenates them into an
:class:`~tb_kineto_insights.trace.model.EventTable` sorted by start (stable), the
row-keyed args renumbered to follow their rows.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from tb_kineto_insights.trace import model as m
from tb_kineto_insights.trace.rowjson import RowJson


class Columns:
    """Accumulates numpy column chunks for one table."""

    def __init__(self) -> None:
        self.chunks: dict[str, list[np.ndarray]] = defaultdict(list)
        self.rows = 0
        self.comm: dict[int, m.CommArgs] = {}
        self.input_dims = RowJson()
        self.input_types = RowJson()
        self.concrete_inputs = RowJson()
        self.flops = RowJson()

    def add(self, cols: dict[str, np.ndarray]) -> None:
        """Add one chunk per column (``cols``: column → array, all of one length: the
        rows added)."""
        n = 0
        for key, arr in cols.items():
            self.chunks[key].append(arr)
            n = len(arr)
        self.rows += n

    def concat(self, key: str, dtype: Any) -> np.ndarray:
        """Column ``key``: its chunks concatenated, as ``dtype`` (empty without any)."""
        parts = self.chunks.get(key)
        if not parts:
            return np.zeros(0, dtype=dtype)
        return np.concatenate(parts).astype(dtype, copy=False)


def event_table(cols: Columns) -> m.EventTable:
    """Concatenate one kind's chunks and sort the rows by start time (stable)."""
    start = cols.concat("start_ns", np.int64)
    order = np.argsort(start, kind="stable")
    in_order = bool(np.all(order[1:] > order[:-1]))

    def col(key: str, dtype: Any) -> np.ndarray:
        arr = cols.concat(key, dtype)
        return arr if in_order else arr[order]

    comm, dims, types = cols.comm, cols.input_dims, cols.input_types
    concrete, flops = cols.concrete_inputs, cols.flops
    if (comm or dims or types or concrete or flops) and not in_order:
        new_row = np.empty_like(order)
        new_row[order] = np.arange(len(order))
        comm = dict(zip(new_row[list(comm)].tolist(), comm.values(), strict=True))
        dims = dims.renumbered(new_row)
        types = types.renumbered(new_row)
        concrete = concrete.renumbered(new_row)
        flops = flops.renumbered(new_row)
    return m.EventTable(
        name=col("name", np.int32),
        start_ns=start if in_order else start[order],
        dur_ns=col("dur_ns", np.int64),
        pid=col("pid", np.int64),
        tid=col("tid", np.int64),
        device=col("device", np.int64),
        stream=col("stream", np.int64),
        correlation=col("correlation", np.int64),
        external_id=col("external_id", np.int64),
        comm=comm,
        input_dims=dims,
        input_types=types,
        concrete_inputs=concrete,
        flops=flops,
    )
