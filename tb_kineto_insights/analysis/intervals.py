"""Interval arithmetic on numpy arrays — the one place the analysis does set algebra.

An *interval set* is a pair ``(starts, ends)`` of equal-length ``int64`` arrays (ns),
half-open ``[start, end)``. Functions that return a set return it *normalised*: sorted,
non-overlapping, non-touching, no empty intervals. Inputs may be unsorted and
overlapping unless a function says otherwise. Every function is O(n log n) or better
and loops in numpy, never per interval in Python.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

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


def total(iv: Intervals) -> int:
    """Summed length (ns) of a normalised set."""
    return int((iv[1] - iv[0]).sum())


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Normalised ``a ∩ b`` for normalised ``a`` and ``b``."""
    return _combine(a, b, lambda in_a, in_b: in_a & in_b)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """Normalised ``a \\ b`` for normalised ``a`` and ``b``."""
    return _combine(a, b, lambda in_a, in_b: in_a & ~in_b)


def _combine(a: Intervals, b: Intervals, rule: object) -> Intervals:
    if a[0].size == 0:
        return empty()
    # four sorted runs: a stable (tim)sort merges them in about linear time; repeated
    # points give empty segments, which union() drops
    points = np.sort(np.concatenate([a[0], a[1], b[0], b[1]]), kind="stable")
    left = points[:-1]
    # membership of each elementary segment [points[k], points[k+1])
    in_a = _covers(a, left)
    in_b = _covers(b, left) if b[0].size else np.zeros(left.size, dtype=np.bool_)
    keep = rule(in_a, in_b)  # type: ignore[operator]
    return union(left[keep], points[1:][keep])


def _covers(iv: Intervals, points: I64) -> npt.NDArray[np.bool_]:
    """For a normalised set: is each point inside some interval?"""
    idx = np.searchsorted(iv[0], points, side="right") - 1
    ok = idx >= 0
    out = np.zeros(points.size, dtype=np.bool_)
    out[ok] = points[ok] < iv[1][idx[ok]]
    return out


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
    return _covered_before(iv, win_ends) - _covered_before(iv, win_starts)


def _covered_before(iv: Intervals, t: I64) -> I64:
    """Covered length of a normalised set in ``(-inf, t)`` for each ``t``."""
    s, e = iv
    cum = np.concatenate([[0], np.cumsum(e - s)])
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
    (touching pieces are kept apart, so the result is sorted and disjoint but may touch)."""
    p = np.asarray(points, dtype=np.int64)
    if iv[0].size == 0:
        return empty()
    edges = np.unique(np.concatenate([iv[0], iv[1], p]))
    left, right = edges[:-1], edges[1:]
    inside = _covers(iv, left) & (right > left)
    s, e = left[inside], right[inside]
    # merge elementary pieces again, except across the cut points
    cut = np.isin(s, p)
    new = np.empty(s.size, dtype=np.bool_)
    if s.size:
        new[0] = True
        new[1:] = (s[1:] != e[:-1]) | cut[1:]
    first = np.nonzero(new)[0]
    last = np.append(first[1:], s.size) - 1
    return s[first], e[last]
