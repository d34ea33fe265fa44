"""Exact per-group int64 sums: the fast float path and the np.add.at fallback."""

from __future__ import annotations

import numpy as np

from tb_kineto_insights.analysis.group_sums import int_sums, int_sums_2d


def test_int_sums_exact_small() -> None:
    group = np.array([2, 0, 2, 2, 3], dtype=np.int64)
    values = np.array([5, 7, -1, 10, 0], dtype=np.int64)
    assert int_sums(group, values, 5).tolist() == [7, 0, 14, 0, 0]
    assert int_sums(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 3).tolist() == [
        0,
        0,
        0,
    ]


def test_int_sums_beyond_float_precision_falls_back_exactly() -> None:
    # 2**60 + 1 is not a float64; a float sum would drop the +1s
    big = 2**60 + 1
    group = np.array([0, 0, 1], dtype=np.int64)
    values = np.array([big, big, 3], dtype=np.int64)
    assert int_sums(group, values, 2).tolist() == [2 * big, 3]


def test_int_sums_random_against_python() -> None:
    rng = np.random.default_rng(5)
    for hi in (10**3, 10**12, 2**50):
        group = rng.integers(0, 17, 5000)
        values = rng.integers(-hi, hi, 5000)
        want = [0] * 17
        for g, v in zip(group.tolist(), values.tolist(), strict=True):
            want[g] += v
        assert int_sums(group, values, 17).tolist() == want


def test_int_sums_2d() -> None:
    group = np.array([1, 0, 1], dtype=np.int64)
    values = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.int64)
    assert int_sums_2d(group, values, 3).tolist() == [[3, 4], [6, 8], [0, 0]]


def test_distinct_and_inverse_equal_np_unique() -> None:
    from tb_kineto_insights.analysis.group_sums import (
        DISTINCT_RANGE_MAX,
        distinct,
        distinct_inverse,
    )

    rng = np.random.default_rng(8)
    cases = [
        np.array([5, -3, 5, 7, -3], dtype=np.int64),
        np.array([2, 0, 2], dtype=np.int32),
        np.zeros(0, dtype=np.int64),
        np.array([0, DISTINCT_RANGE_MAX * 4, 3], dtype=np.int64),  # wide range: np.unique
        rng.integers(-50, 50, 1000).astype(np.int64),
    ]
    for x in cases:
        u, inv = np.unique(x, return_inverse=True)
        d, dinv = distinct_inverse(x)
        assert distinct(x).tolist() == u.tolist() and distinct(x).dtype == x.dtype
        assert d.tolist() == u.tolist() and dinv.tolist() == inv.tolist()
    assert distinct(np.array([5, -3, 5, 7, -3])).tolist() == [-3, 5, 7]
    assert distinct_inverse(np.array([5, -3, 5, 7]))[1].tolist() == [1, 0, 1, 2]
