"""Interval helpers: exact small cases and random cases against a plain-Python model."""

from __future__ import annotations

import numpy as np

from tb_kineto_insights.analysis import intervals as iv


def _cover(pairs: list[tuple[int, int]], n: int) -> set[int]:
    return {t for s, e in pairs for t in range(max(s, 0), min(e, n))}


def _as_pairs(x: iv.Intervals) -> list[tuple[int, int]]:
    return list(zip(x[0].tolist(), x[1].tolist(), strict=True))


def test_union_exact() -> None:
    u = iv.union([5, 0, 2, 10, 12, 20], [7, 3, 4, 12, 15, 20])
    assert _as_pairs(u) == [(0, 4), (5, 7), (10, 15)]  # touching merges, empty dropped
    assert iv.total(u) == 11


def test_intersect_subtract_exact() -> None:
    a = iv.union([0, 10], [5, 20])
    b = iv.union([3, 12, 18], [11, 14, 30])
    assert _as_pairs(iv.intersect(a, b)) == [(3, 5), (10, 11), (12, 14), (18, 20)]
    assert _as_pairs(iv.subtract(a, b)) == [(0, 3), (11, 12), (14, 18)]
    assert _as_pairs(iv.subtract(a, iv.empty())) == _as_pairs(a)


def test_overlap_per_window_and_window_index() -> None:
    u = iv.union([0, 10], [5, 20])
    ws = np.array([0, 4, 8, 18, 25], dtype=np.int64)
    we = np.array([10, 12, 30, 19, 40], dtype=np.int64)
    assert iv.overlap_per_window(u, ws, we).tolist() == [5, 3, 10, 1, 0]
    idx = iv.window_index(np.array([-1, 0, 9, 10, 11, 50]), np.array([0, 10]), np.array([9, 20]))
    assert idx.tolist() == [-1, 0, -1, 1, 1, -1]


def test_random_against_sets() -> None:
    rng = np.random.default_rng(7)
    n = 60
    for _ in range(200):

        def rand_set() -> tuple[np.ndarray, np.ndarray]:
            k = int(rng.integers(0, 8))
            s = rng.integers(0, n, k)
            return s, s + rng.integers(0, 15, k)

        a_raw, b_raw = rand_set(), rand_set()
        a, b = iv.union(*a_raw), iv.union(*b_raw)
        ca = _cover(list(zip(a_raw[0].tolist(), a_raw[1].tolist(), strict=True)), 10**6)
        cb = _cover(list(zip(b_raw[0].tolist(), b_raw[1].tolist(), strict=True)), 10**6)
        assert _cover(_as_pairs(a), 10**6) == ca
        assert _cover(_as_pairs(iv.intersect(a, b)), 10**6) == ca & cb
        assert _cover(_as_pairs(iv.subtract(a, b)), 10**6) == ca - cb
        lo, hi = sorted(rng.integers(0, n + 10, 2).tolist())
        got = iv.overlap_per_window(a, np.array([lo]), np.array([hi]))[0]
        assert got == len({t for t in ca if lo <= t < hi})


def test_split_at() -> None:
    u = iv.union([0, 10], [8, 30])
    assert _as_pairs(iv.split_at(u, [5, 20, 25, 40])) == [
        (0, 5),
        (5, 8),
        (10, 20),
        (20, 25),
        (25, 30),
    ]


def _runs(points: set[int], cuts: frozenset[int] | set[int] = frozenset()) -> list[tuple[int, int]]:
    """The canonical decomposition of a set of integer moments: maximal runs, also
    broken at ``cuts``."""
    out: list[tuple[int, int]] = []
    for t in sorted(points):
        if out and out[-1][1] == t and t not in cuts:
            out[-1] = (out[-1][0], t + 1)
        else:
            out.append((t, t + 1))
    return out


def _touching(rng: np.random.Generator, n: int, k: int) -> iv.Intervals:
    """Sorted, disjoint intervals of which some touch their neighbour (not normalised)."""
    pts = np.sort(rng.choice(n, 2 * k, replace=False)).astype(np.int64)
    s, e = pts[0::2].copy(), pts[1::2].copy()
    if k > 1:
        s[1:] = np.where(rng.random(k - 1) < 0.4, e[:-1], s[1:])
    return s, e


def test_intersect_subtract_split_exact_pairs_random() -> None:
    """The results are the canonical (normalised) decomposition, pair for pair, also for
    inputs whose intervals touch, and ``split_at`` cuts exactly at the points inside."""
    rng = np.random.default_rng(11)
    n = 80
    for _ in range(400):
        k_a, k_b = int(rng.integers(0, 10)), int(rng.integers(0, 10))
        a = _touching(rng, n, k_a)
        b = _touching(rng, n, k_b) if rng.random() < 0.5 else iv.union(*_touching(rng, n, k_b))
        ca, cb = _cover(_as_pairs(a), n), _cover(_as_pairs(b), n)
        assert _as_pairs(iv.intersect(a, b)) == _runs(ca & cb)
        assert _as_pairs(iv.subtract(a, b)) == _runs(ca - cb)
        cuts = set(rng.integers(-5, n + 5, int(rng.integers(0, 6))).tolist())
        u = iv.union(*a)
        assert _as_pairs(iv.split_at(u, sorted(cuts, reverse=True))) == _runs(ca, cuts)


def test_union_sorted_and_unsorted_input_agree() -> None:
    s = np.array([0, 2, 2, 9, 15, 15], dtype=np.int64)
    e = np.array([3, 5, 4, 15, 15, 18], dtype=np.int64)
    order = np.array([4, 1, 5, 0, 3, 2])
    assert _as_pairs(iv.union(s, e)) == [(0, 5), (9, 18)]
    assert _as_pairs(iv.union(s[order], e[order])) == [(0, 5), (9, 18)]


def test_union_disjoint_equals_union() -> None:
    rng = np.random.default_rng(13)
    for _ in range(300):
        a = iv.union(*_touching(rng, 60, int(rng.integers(0, 8))))
        b = iv.subtract(iv.union(*_touching(rng, 60, int(rng.integers(0, 8)))), a)
        want = iv.union(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))
        assert _as_pairs(iv.union_disjoint(a, b)) == _as_pairs(want)
        assert _as_pairs(iv.union_disjoint(b, a)) == _as_pairs(want)
    a = iv.union([0, 10], [5, 12])
    assert _as_pairs(iv.union_disjoint(a, iv.union([5, 20], [10, 25]))) == [(0, 12), (20, 25)]


def test_longest_gaps_first_equals_the_stable_sort() -> None:
    from tb_kineto_insights.analysis.idle import longest_first

    rng = np.random.default_rng(21)
    for _ in range(500):
        lengths = rng.integers(1, 6, int(rng.integers(0, 40))).astype(np.int64)  # many ties
        k = int(rng.integers(-1, 12))
        want = np.argsort(-lengths, kind="stable")[:k]
        assert longest_first(lengths, k).tolist() == want.tolist()
    assert longest_first(np.array([3, 9, 3, 9, 1]), 3).tolist() == [1, 3, 0]
