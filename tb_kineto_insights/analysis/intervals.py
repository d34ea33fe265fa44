"""Interval arithmetic on numpy arrays — the one place the analysis does set algebra.

An *interval set* is a pair ``(starts, ends)`` of equal-length ``int64`` arrays (ns),
half-open ``[start, end)``. Functions that return a set return it *normalised*: sorted,
non-overlapping, non-touching, no empty intervals. Inputs may be unsorted and
overlapping unless a function says otherwise. Every function is O(n log n) or better
and loops in numpy, never per interval in Python.

Cost (the idle panel calls ``intersect``/``subtract`` about 20 times per device on sets
of up to a few 100k intervals): on two normalised sets both are a pairwise overlap found
with two ``searchsorted`` calls and no sort (:func:`_pairwise_intersect`); ``subtract``
intersects with the complement. ``union`` skips its sort when the starts are sorted
already (event tables are start-sorted). ``split_at`` only sorts the cut points. Sorting
the four boundary runs and testing every elementary segment for membership would make
the idle panel of a large trace several times slower (figures in
``benchmarks/RESULTS.md``). The results are the same arrays: a normalised set has one
representation.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

#: The int64 bounds (``np.iinfo`` builds an object at each call: 73 calls per small file).
_INT64_MIN, _INT64_MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)

I64 = npt.NDArray[np.int64]
Intervals = tuple[I64, I64]


def empty() -> Intervals:
    """The empty interval set."""
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)


def union(starts: npt.ArrayLike, ends: npt.ArrayLike) -> Intervals:
    """Normalised union of intervals ``[starts[i], ends[i])``; empty ones are dropped."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return empty()
    # event tables are start-sorted already: a linear check skips the O(n log n) sort
    # (a stable sort of sorted input is the identity, so the result is the same)
    if s.size > 1 and not bool((s[1:] >= s[:-1]).all()):
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    running_end = np.maximum.accumulate(e)
    # a new interval starts where the start is beyond every end seen so far
    new = np.empty(s.size, dtype=np.bool_)
    new[0] = True
    new[1:] = s[1:] > running_end[:-1]
    first = np.nonzero(new)[0]
    last = np.append(first[1:], s.size) - 1
    return s[first], running_end[last]


def union_disjoint(a: Intervals, b: Intervals) -> Intervals:
    """Normalised ``a ∪ b`` for normalised ``a`` and ``b`` that do not overlap each other
    (they may touch): a merge of two sorted runs at ``searchsorted`` positions instead of
    :func:`union`'s sort; equal to ``union`` of the concatenation.
    """
    if a[0].size == 0:
        return b
    if b[0].size == 0:
        return a
    # b's interval j lands before a's interval at[j]: at index at[j] + j of the merge
    at = np.searchsorted(a[0], b[0])
    from_b = np.zeros(a[0].size + b[0].size, dtype=np.bool_)
    from_b[at + np.arange(b[0].size)] = True
    starts = np.empty(from_b.size, dtype=np.int64)
    ends = np.empty(from_b.size, dtype=np.int64)
    starts[from_b], ends[from_b] = b
    starts[~from_b], ends[~from_b] = a
    return _merge_touching(starts, ends)


def total(iv: Intervals) -> int:
    """Summed length (ns) of a normalised set."""
    return int((iv[1] - iv[0]).sum())


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Normalised ``a ∩ b`` for normalised ``a`` and ``b`` (sorted and disjoint; touching
    intervals are tolerated and merged in the result)."""
    if a[0].size == 0 or b[0].size == 0:
        return empty()
    return _pairwise_intersect(a, b)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """Normalised ``a \\ b`` for normalised ``a`` and ``b``: ``a`` intersected with the
    complement of ``b`` (the gaps between ``b``'s intervals, and both open ends)."""
    if a[0].size == 0:
        return empty()
    if b[0].size == 0:
        return _merge_touching(a[0], a[1])
    lo, hi = _INT64_MIN, _INT64_MAX
    comp_s = np.concatenate([[lo], b[1]])
    comp_e = np.concatenate([b[0], [hi]])
    keep = comp_e > comp_s  # only a b interval starting at int64 min leaves one empty
    return _pairwise_intersect(a, (comp_s[keep], comp_e[keep]))


def _pairwise_intersect(a: Intervals, b: Intervals) -> Intervals:
    """``a ∩ b`` for sorted, disjoint ``a`` and ``b``, without sorting: interval ``i`` of
    ``a`` overlaps the ``b`` intervals ``[lo_i, hi_i)`` (``lo_i``: the first ending after
    it starts; ``hi_i``: the first starting at or after it ends), and each overlapping
    pair gives the piece ``[max(starts), min(ends))``. Pieces come out sorted; pairs
    overlap strictly, so none is empty. O((n + m) log m + k) for ``k`` pieces (at most
    ``n + m``). Several times faster than sorting the four boundary runs and testing each
    elementary segment (see ``benchmarks/RESULTS.md``)."""
    a_s, a_e = a
    b_s, b_e = b
    lo = np.searchsorted(b_e, a_s, side="right")
    hi = np.searchsorted(b_s, a_e, side="left")
    n = np.maximum(hi - lo, 0)
    total_pairs = int(n.sum())
    if total_pairs == 0:
        return empty()
    ia = np.repeat(np.arange(a_s.size), n)
    # index into b of each pair: lo of its a interval plus its rank within that run
    run_start = np.cumsum(n) - n
    ib = np.arange(total_pairs) - np.repeat(run_start - lo, n)
    s = np.maximum(a_s[ia], b_s[ib])
    e = np.minimum(a_e[ia], b_e[ib])
    keep = e > s  # only an empty input interval gives an empty piece
    if not keep.all():
        s, e = s[keep], e[keep]
    return _merge_touching(s, e)


def _merge_touching(s: I64, e: I64) -> Intervals:
    """Sorted, disjoint intervals with touching neighbours merged (normalised)."""
    if s.size < 2:
        return s, e
    new = np.empty(s.size, dtype=np.bool_)
    new[0] = True
    np.greater(s[1:], e[:-1], out=new[1:])
    if new.all():
        return s, e
    first = np.nonzero(new)[0]
    last = np.append(first[1:], s.size) - 1
    return s[first], e[last]


def clip(iv: Intervals, lo: int, hi: int) -> Intervals:
    """Normalised set restricted to ``[lo, hi)``."""
    s = np.clip(iv[0], lo, hi)
    e = np.clip(iv[1], lo, hi)
    keep = e > s
    return s[keep], e[keep]


def overlap_per_window(iv: Intervals, win_starts: I64, win_ends: I64) -> I64:
    """Length (ns) of a normalised set inside each window ``[win_starts[i], win_ends[i])``.

    Windows may overlap each other. Uses prefix sums of the covered length, so the cost
    is O((n + w) log n).
    """
    if iv[0].size == 0 or win_starts.size == 0:
        return np.zeros(win_starts.size, dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(iv[1] - iv[0])])  # once for both ends
    return _covered_before(iv, win_ends, cum) - _covered_before(iv, win_starts, cum)


def _covered_before(iv: Intervals, t: I64, cum: I64) -> I64:
    """Covered length of a normalised set in ``(-inf, t)`` for each ``t``; ``cum``: the
    set's lengths summed before each interval (``[0, cumsum(lengths)]``)."""
    s, e = iv
    k = np.searchsorted(s, t, side="right")  # intervals starting at or before t
    full = cum[np.maximum(k - 1, 0)]  # intervals entirely before the k-1th
    last_s = s[np.maximum(k - 1, 0)]
    last_e = e[np.maximum(k - 1, 0)]
    partial = np.clip(np.minimum(t, last_e) - last_s, 0, None)
    return np.where(k > 0, full + partial, 0).astype(np.int64)


def window_index(points: I64, win_starts: I64, win_ends: I64) -> I64:
    """Index of the window containing each point, -1 where none does.

    Windows must be sorted by start and non-overlapping.
    """
    idx = np.searchsorted(win_starts, points, side="right") - 1
    ok = idx >= 0
    inside = np.zeros(points.size, dtype=np.bool_)
    inside[ok] = points[ok] < win_ends[idx[ok]]
    return np.where(inside, idx, -1).astype(np.int64)


def split_at(iv: Intervals, points: npt.ArrayLike) -> Intervals:
    """A normalised set cut at ``points``: same coverage, but no interval crosses a point
    (touching pieces are kept apart, so the result is sorted and disjoint but may touch).

    The points strictly inside some interval become both an end and a start; sorting the
    starts and the ends apart pairs them again, as the pieces are disjoint."""
    p = np.asarray(points, dtype=np.int64)
    if iv[0].size == 0:
        return empty()
    s, e = iv
    p = np.unique(p)
    idx = np.searchsorted(s, p, side="right") - 1
    ok = idx >= 0
    inside = np.zeros(p.size, dtype=np.bool_)
    inside[ok] = (p[ok] > s[idx[ok]]) & (p[ok] < e[idx[ok]])
    cut = p[inside]
    if cut.size == 0:
        return s, e
    return np.sort(np.concatenate([s, cut])), np.sort(np.concatenate([e, cut]))
