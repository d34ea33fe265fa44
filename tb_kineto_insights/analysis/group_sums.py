"""Exact per-group sums of int64 columns: ``out[g] = sum(values[group == g])``; and the
distinct values of a small-range int column (ids, pids, tids, devices) without a sort,
and the distinct pairs of two such columns.

``np.add.at`` does this exactly but slowly (hundreds of ns per element with int64;
figures in ``benchmarks/RESULTS.md``). ``np.bincount(group, weights=values)`` is more
than an order of magnitude faster but sums in float64; that is still exact (bit for bit
the integer sum) when every partial sum stays below 2**53, which holds when
``len(values) * max(|values|) < 2**53`` (with ns durations: 10**6 events of up to 104
days each). That bound is checked on every call; beyond it, the
sums fall back to ``np.add.at``. Integer addition is associative, so the result does
not depend on the order of summation either way.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]

#: Largest magnitude float64 holds every integer up to.
_EXACT_FLOAT_INT = 2**53


def int_sums(group: npt.NDArray[np.integer], values: I64, size: int) -> I64:
    """Exact int64 sums of ``values`` per ``group`` id, ids in ``0..size-1``.

    Args:
        group: (n,) non-negative int ids, each < ``size``.
        values: (n,) int64 values (ns, bytes, counts).
        size: number of groups; the result has this length.

    Returns:
        (size,) int64: the sum per group, 0 for a group with no element.
    """
    if group.size == 0:
        return np.zeros(size, dtype=np.int64)
    v = np.asarray(values, dtype=np.int64)
    bound = max(int(v.max()), -int(v.min())) * int(v.size)
    if bound < _EXACT_FLOAT_INT:
        sums = np.bincount(group, weights=v, minlength=size)
        return sums.astype(np.int64)
    out = np.zeros(size, dtype=np.int64)
    np.add.at(out, group, v)
    return out


def int_sums_2d(group: npt.NDArray[np.integer], values: I64, size: int) -> I64:
    """Exact int64 sums of the rows of ``values`` (n, k) per ``group`` id: (size, k)."""
    out = np.zeros((size, values.shape[1]), dtype=np.int64)
    for col in range(values.shape[1]):
        out[:, col] = int_sums(group, values[:, col], size)
    return out


#: Widest value range (max - min) that :func:`distinct` counts in a table (32 MiB of
#: int64 counts at most) instead of calling ``np.unique``.
DISTINCT_RANGE_MAX = 1 << 22


def distinct(values: npt.NDArray[np.integer]) -> npt.NDArray[np.integer]:
    """Sorted distinct values of an int array, as ``np.unique(values)`` returns them.

    When the values span fewer than :data:`DISTINCT_RANGE_MAX` integers (interned name
    ids, pids, tids, device ids), one ``np.bincount`` over ``values - min`` marks the
    present ones in O(n); else ``np.unique`` (hash, then sort of the distinct values).
    On a large table this is much faster than ``np.unique`` (see
    ``benchmarks/RESULTS.md``)."""
    if values.size == 0:
        return np.unique(values)
    lo, hi = int(values.min()), int(values.max())
    if hi - lo >= DISTINCT_RANGE_MAX:
        return np.unique(values)
    present = np.flatnonzero(np.bincount(values - lo if lo else values)) + lo
    return present.astype(values.dtype)


def distinct_inverse(
    values: npt.NDArray[np.integer],
) -> tuple[npt.NDArray[np.integer], npt.NDArray[np.intp]]:
    """``np.unique(values, return_inverse=True)`` for a 1-D int array: the sorted distinct
    values and, per element, the index of its value among them. Small value ranges (see
    :func:`distinct`) go through a lookup table in O(n) instead of a sort."""
    if values.size == 0:
        return np.unique(values, return_inverse=True)
    lo, hi = int(values.min()), int(values.max())
    if hi - lo >= DISTINCT_RANGE_MAX:
        return np.unique(values, return_inverse=True)
    shifted = values - lo if lo else values
    present = np.bincount(shifted) > 0
    lookup = np.cumsum(present, dtype=np.intp) - 1
    uniq = (np.flatnonzero(present) + lo).astype(values.dtype)
    return uniq, lookup[shifted]


def distinct_pairs(a: I64, b: I64) -> list[tuple[int, int]]:
    """Distinct ``(a[i], b[i])`` pairs of two equal-length int64 arrays, sorted, as
    Python ints (cheaper than ``np.unique(axis=0)``)."""
    out: list[tuple[int, int]] = []
    for x in distinct(a).tolist():
        out.extend((int(x), int(y)) for y in distinct(b[a == x]).tolist())
    return out


__all__ = [
    "int_sums",
    "int_sums_2d",
    "distinct",
    "distinct_inverse",
    "distinct_pairs",
    "DISTINCT_RANGE_MAX",
]
