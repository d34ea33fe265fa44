"""``np.unique(values)`` and ``np.median(values)`` without importing ``numpy.ma``.

numpy >= 2.3 answers a plain ``np.unique(x)`` (no ``return_*``, no ``axis``) with
``np.ma.is_masked(x)`` first, and ``np.median`` of a float array checks its NaN with
``np.ma.isMaskedArray``; the first such call of a process imports ``numpy.ma``
(``numpy.ma.core`` builds its wrappers with ``inspect.signature``, which tokenizes
docstrings). Measured on the shared 2-core machine (numpy 2.4.6): ``import numpy.ma``
after numpy and msgspec took 22-29 ms (3 runs; 50-55 ms of a ``report`` of
``transformer_eager`` under cProfile), more than the analysis of most panels; a
``report`` needs nothing else from ``numpy.ma``. The calls of ``np.unique`` with
``return_index``, ``return_inverse`` or ``return_counts`` and ``np.median`` of integers
do not import it; ``np.percentile`` does (it calls a plain ``np.unique`` on its
indices): the run view of several workers still pays it (its ``p90_us``).

:func:`sorted_unique` gives the same array, bit for bit, for the integer and boolean
columns the reader and the analysis pass (ids, pids, tids, name ids, timestamps, kinds):

- signed integers whose range (max - min) is below :data:`BINCOUNT_RANGE_MAX`: one
  ``np.bincount`` over ``values - min`` marks the values present (O(n), as
  :func:`~tb_kineto_insights.analysis.group_sums.distinct` does);
- other integers and booleans: ``np.sort`` and a mask of the positions where the
  value changes, numpy's own sort path of ``np.unique`` (``_unique1d``) for a 1-D
  array; integers compare exactly, so numpy's hash path (used for a plain call on
  integers) finds the same distinct values, which it then sorts;
- anything else (floats with their NaN rule, strings, objects): ``np.unique`` itself.

The result is 1-D, sorted ascending, of the input's dtype, as ``np.unique``'s is.

:func:`median` is numpy's own ``_median`` for a flattened float array (``axis=None``):
the same ``np.partition`` at the same indices (the middle one or two, and the last,
where a NaN would sort), the same ``np.mean`` of the middle, NaN when the last is NaN
(without numpy's ``RuntimeWarning``: the callers pass no NaN); other dtypes go to
``np.median``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

#: Widest value range (max - min) counted in a table of ``range + 1`` int64 counts
#: (32 MiB at most) instead of sorting.
BINCOUNT_RANGE_MAX = 1 << 22


def sorted_unique(values: npt.ArrayLike) -> np.ndarray:
    """``np.unique(values)``: the sorted distinct values, flattened, of the input dtype.

    Args:
        values: an array of any shape (flattened first, as ``np.unique`` does).

    Returns:
        (k,) array of ``values``' dtype, ascending, each distinct value once.

    Integer and boolean input never imports ``numpy.ma`` (see the module docstring);
    other dtypes are passed to ``np.unique``.
    """
    flat = np.asarray(values).ravel()
    kind = flat.dtype.kind
    if kind not in "biu":
        return np.unique(flat)
    if flat.size == 0:
        return flat.copy()
    if kind == "i":
        lo, hi = int(flat.min()), int(flat.max())
        if hi - lo < BINCOUNT_RANGE_MAX:
            shifted = flat.astype(np.int64) - lo
            present = np.flatnonzero(np.bincount(shifted)) + lo
            return present.astype(flat.dtype)
    aux = np.sort(flat)
    mask = np.empty(aux.shape, dtype=np.bool_)
    mask[:1] = True
    mask[1:] = aux[1:] != aux[:-1]
    return aux[mask]


def median(values: npt.ArrayLike) -> np.floating:
    """``np.median(values)`` (``axis=None``): the middle value of the sorted, flattened
    input, the mean of the two middle values for an even count.

    Args:
        values: a non-empty array or sequence of numbers, any shape.

    Returns:
        A numpy float scalar (float64 for integer or float64 input); NaN when any value
        is NaN.

    Float input never imports ``numpy.ma`` (see the module docstring); other dtypes and
    an empty input are passed to ``np.median``.
    """
    flat = np.asarray(values).ravel()
    if flat.dtype.kind != "f" or flat.size == 0:
        return np.median(flat)
    half = flat.size // 2
    kth = [half - 1, half] if flat.size % 2 == 0 else [half]
    part = np.partition(flat, [*kth, -1])
    if np.isnan(part[-1]):
        return part[-1]
    return np.mean(part[kth[0] : kth[-1] + 1])


__all__ = ["sorted_unique", "median", "BINCOUNT_RANGE_MAX"]
