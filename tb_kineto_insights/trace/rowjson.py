"""Sparse per-row JSON values kept as their text until asked for (``Input Dims``).

A trace recorded with ``record_shapes=True`` gives most CPU ops an ``Input Dims``
argument, a nested list (``[[2048, 768], [768], []]``). The analysis reads it for a
handful of rows (the memory panel's largest allocations), but building those lists for
every op would be the largest single cost of decoding such a trace, and sending them
back from a decode worker would cost the parent as much again (unpickling). So the reader decodes
``Input Dims`` as its literal JSON text (``msgspec.Raw``), joins the texts of one piece
into one ``bytes`` blob, and keeps ``(row, start, end)`` per value; a value becomes a
Python object (``msgspec.json.decode`` of its text: exactly what a typed decode of the
event makes) only when it is looked up. ``RowJson`` is a read-only ``Mapping[int, Any]``
(row index → value): ``get``, ``[]``, ``in``, ``len``, iteration (rows in increasing
order), ``items()`` and ``==`` with a ``dict`` behave as a ``dict`` of the values would.

Decoding ``Input Dims`` as ``Raw`` takes about half the time of building the lists,
and nested lists are most of the time of unpickling a worker's builder (figures,
on the GPT trace, in ``benchmarks/RESULTS.md``).

Values that reach the reader as Python objects (an event decoded loosely after a field
of an unexpected type) are kept as objects.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np

_I64 = np.int64
#: A value's text as a Python object; a number past float range (``1e400``, which a
#: typed decode refuses, "Number out of range") is ±inf, as the reader's loose decode
#: of such an event makes it (``decode.any_decoder``).
_VALUE_DECODER = msgspec.json.Decoder(float_hook=float)


def plain_numbers(value: Any) -> Any:
    """``value`` with every ``Decimal`` in it (at any depth of lists and dicts) a
    ``float`` (±inf past float range), as ``msgspec.json.decode`` of its text would
    give it. In exact mode a loosely decoded event (a field of an unexpected type) has
    every non-integer number as a ``Decimal`` (the timestamps need their digits); an
    ``Input Dims`` of ``[[1e+300]]`` then reached the analysis as
    ``[[Decimal('1E+300')]]`` and crashed its JSON encoding (``analysis/autotune.py``).
    A value nested past Python's recursion limit is returned as it is (msgspec does not
    nest that deep)."""
    if isinstance(value, Decimal):
        return float(value)
    if not isinstance(value, list | dict):
        return value
    try:
        return _plain(value)
    except RecursionError:
        return value


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class RowJson(Mapping[int, Any]):
    """Row index → JSON value, stored as text (see the module docstring).

    Storage: ``_keys`` (int64, the rows), ``_starts``/``_ends`` (int64, byte range of each
    value in its blob), ``_blob_of`` (int64, index into ``_blobs``), ``_blobs`` (bytes),
    and ``_objects`` (row → Python value, for values that came as objects). A row is in
    at most one of the two stores.
    """

    __slots__ = ("_keys", "_starts", "_ends", "_blob_of", "_blobs", "_objects", "_parts")

    def __init__(self) -> None:
        empty = np.zeros(0, dtype=_I64)
        self._keys = empty
        self._starts = empty
        self._ends = empty
        self._blob_of = empty
        self._blobs: list[bytes] = []
        self._objects: dict[int, Any] = {}
        # appended chunks not yet concatenated: (rows, starts, ends, blob indices)
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    # -- building --------------------------------------------------------------------
    def add_texts(
        self, rows: np.ndarray, starts: np.ndarray, ends: np.ndarray, blob: bytes
    ) -> None:
        """Add values ``blob[starts[i]:ends[i]]`` (JSON text) for ``rows[i]`` (int64
        arrays of one length; rows above every row held)."""
        if not len(rows):
            return
        self._blobs.append(blob)
        blob_of = np.full(len(rows), len(self._blobs) - 1, dtype=_I64)
        self._parts.append((rows.astype(_I64), starts.astype(_I64), ends.astype(_I64), blob_of))

    def add_object(self, row: int, value: Any) -> None:
        """Add one value that is already a Python object, its numbers as a typed decode
        of its text gives them (:func:`plain_numbers`: no ``Decimal``)."""
        self._objects[row] = plain_numbers(value)

    def extend(self, other: RowJson, base: int) -> None:
        """Add ``other``'s values with their rows increased by ``base`` (rows above
        every row held)."""
        other._compact()
        if len(other._keys):
            offset = len(self._blobs)
            self._parts.append(
                (other._keys + base, other._starts, other._ends, other._blob_of + offset)
            )
        self._blobs.extend(other._blobs)
        for row, value in other._objects.items():
            self._objects[base + row] = value

    def _compact(self) -> None:
        if not self._parts:
            return
        parts = self._parts
        self._keys = np.concatenate([self._keys, *(p[0] for p in parts)])
        self._starts = np.concatenate([self._starts, *(p[1] for p in parts)])
        self._ends = np.concatenate([self._ends, *(p[2] for p in parts)])
        self._blob_of = np.concatenate([self._blob_of, *(p[3] for p in parts)])
        self._parts = []
        self._sort()

    def _sort(self) -> None:
        """Keep the values in increasing row order (lookups bisect ``keys``)."""
        k = self._keys
        if not bool(np.all(k[1:] > k[:-1])):
            order = np.argsort(k, kind="stable")
            self._keys, self._starts = k[order], self._starts[order]
            self._ends, self._blob_of = self._ends[order], self._blob_of[order]

    # -- new mappings ------------------------------------------------------------------
    def _with(self, keys: np.ndarray, at: np.ndarray | slice, objects: dict[int, Any]) -> RowJson:
        out = RowJson()
        out._keys = keys
        out._starts = self._starts[at]
        out._ends = self._ends[at]
        out._blob_of = self._blob_of[at]
        out._blobs = self._blobs
        out._objects = objects
        out._sort()
        return out

    def renumbered(self, new_row: np.ndarray, keep: np.ndarray | None = None) -> RowJson:
        """Values moved to ``new_row[row]`` (int64, indexed by old row); with ``keep``
        (bool, indexed by old row), only the rows kept."""
        self._compact()
        at: np.ndarray | slice = slice(None)
        keys = self._keys
        if keep is not None:
            at = np.flatnonzero(keep[keys])
            keys = keys[at]
        items = self._objects.items()
        if keep is not None:
            items = [(r, v) for r, v in items if keep[r]]  # type: ignore[assignment]
        objects = {int(new_row[r]): v for r, v in items}
        return self._with(new_row[keys], at, objects)

    def texts(self, rows: np.ndarray) -> list[bytes | None]:
        """The JSON text of each row in ``rows`` (int64 array), ``None`` where a row has
        no value: one vectorised search instead of a lookup per row, and no decode, for
        callers that group rows by value and decode each distinct text once. A value
        held as an object is given as its msgspec JSON encoding."""
        self._compact()
        rows = np.asarray(rows, dtype=_I64)
        out: list[bytes | None] = [None] * len(rows)
        if len(self._keys) and len(rows):
            at = np.minimum(np.searchsorted(self._keys, rows), len(self._keys) - 1)
            hit = np.flatnonzero(self._keys[at] == rows)
            idx = at[hit]
            blobs = self._blobs
            for j, b, lo, hi in zip(
                hit.tolist(),
                self._blob_of[idx].tolist(),
                self._starts[idx].tolist(),
                self._ends[idx].tolist(),
                strict=True,
            ):
                out[j] = blobs[b][lo:hi]
        if self._objects:
            for j, row in enumerate(rows.tolist()):
                if row in self._objects:
                    out[j] = msgspec.json.encode(self._objects[row])
        return out

    # -- Mapping ---------------------------------------------------------------------
    def _index(self, row: int) -> int:
        self._compact()
        i = int(np.searchsorted(self._keys, row))
        return i if i < len(self._keys) and self._keys[i] == row else -1

    def __getitem__(self, row: int) -> Any:
        if row in self._objects:
            return self._objects[row]
        if not isinstance(row, (int, np.integer)):
            raise KeyError(row)
        i = self._index(int(row))
        if i < 0:
            raise KeyError(row)
        blob = self._blobs[int(self._blob_of[i])]
        return _VALUE_DECODER.decode(blob[int(self._starts[i]) : int(self._ends[i])])

    def __contains__(self, row: object) -> bool:
        if row in self._objects:
            return True
        return isinstance(row, (int, np.integer)) and self._index(int(row)) >= 0

    def __iter__(self) -> Iterator[int]:
        self._compact()
        rows = self._keys.tolist()
        if self._objects:
            rows = sorted([*rows, *self._objects])
        return iter(rows)

    def __len__(self) -> int:
        self._compact()
        return len(self._keys) + len(self._objects)

    def __repr__(self) -> str:
        return f"RowJson({dict(self.items())!r})"


def renumber_rows(
    values: Mapping[int, Any], new_row: np.ndarray, keep: np.ndarray | None = None
) -> Mapping[int, Any]:
    """``values`` (a ``dict`` or a :class:`RowJson`) with rows moved to ``new_row[row]``,
    keeping only rows where ``keep`` (bool, by old row) when given."""
    if isinstance(values, RowJson):
        return values.renumbered(new_row, keep)
    return {int(new_row[r]): v for r, v in values.items() if keep is None or keep[r]}
