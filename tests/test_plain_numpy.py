"""``plain_numpy``: ``np.unique`` / ``np.median`` results, bit for bit, without numpy.ma."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tb_kineto_insights.plain_numpy import BINCOUNT_RANGE_MAX, median, sorted_unique


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_sorted_unique_on_a_small_known_array() -> None:
    got = sorted_unique(np.array([5, -3, 5, 0, -3, 7], dtype=np.int64))
    assert got.tolist() == [-3, 0, 5, 7] and got.dtype == np.int64
    assert sorted_unique(np.array([], dtype=np.int32)).dtype == np.int32
    assert sorted_unique([[2, 1], [1, 3]]).tolist() == [1, 2, 3]  # flattened, as np.unique


@pytest.mark.parametrize(
    "dtype", [np.int64, np.int32, np.int8, np.uint8, np.uint64, np.intp, np.bool_]
)
def test_sorted_unique_is_np_unique(dtype: type) -> None:
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype) if dtype is not np.bool_ else None
    for size in (0, 1, 2, 3, 17, 1000):
        for spread in (2, 100, BINCOUNT_RANGE_MAX + 5, None):
            if info is None:
                values = rng.integers(0, 2, size).astype(np.bool_)
            elif spread is None:  # the whole range: the sort path, extremes included
                values = rng.integers(info.min, info.max, size, dtype=dtype, endpoint=True)
            else:
                lo = max(int(info.min), -spread // 2)
                hi = min(int(info.max), lo + spread)
                values = rng.integers(lo, hi, size, endpoint=True).astype(dtype)
            assert _same(sorted_unique(values), np.unique(values)), (dtype, size, spread)


def test_sorted_unique_of_floats_is_np_unique() -> None:
    values = np.array([2.5, np.nan, -0.5, 2.5, np.nan, 1e300])
    assert _same(sorted_unique(values), np.unique(values))


def test_median_is_np_median() -> None:
    rng = np.random.default_rng(11)
    assert median([1.0, 3.0, 2.0, 10.0]) == 2.5
    assert median(np.array([4.0, 1.0, 9.0])) == 4.0
    for size in (1, 2, 3, 4, 5, 10, 11, 1001):
        for values in (
            rng.normal(size=size) * 1e6,
            rng.integers(0, 10, size).astype(np.float64),  # ties
            rng.integers(-(10**6), 10**6, size),  # integers: np.median itself
            rng.normal(size=size).astype(np.float32),
            [float(x) for x in rng.exponential(size=size)],  # a list
        ):
            got, want = median(values), np.median(values)
            assert (
                type(got) is type(want) and np.asarray(got).tobytes() == np.asarray(want).tobytes()
            ), (size, values)
    with_nan = np.array([1.0, np.nan, 3.0])
    assert np.isnan(median(with_nan))


def test_neither_imports_numpy_ma_but_np_unique_does() -> None:
    code = (
        "import sys, numpy as np\n"
        "from tb_kineto_insights.plain_numpy import median, sorted_unique\n"
        "sorted_unique(np.array([3, 1, 3])); sorted_unique(np.array([2**40, 0]))\n"
        "sorted_unique(np.array([True])); median(np.array([1.0, 2.0]))\n"
        "print('numpy.ma' in sys.modules)\n"
        "np.unique(np.array([3, 1, 3]))\n"
        "print('numpy.ma' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    ).stdout.split()
    assert out == ["False", "True"]
