"""The send/recv proof's sorting helpers (simulation/fold_arrays.py) give numpy's general routines' arrays exactly."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.replayer.simulation.fold_arrays import (
    dense_unique,
    few_codes,
    key_order,
    sorted_unique,
    stable_order_by_rank,
)


def _rows(rng, n, world, tags):
    """Distinct ``(src, dst, tag)`` rows in random order."""
    flat = rng.choice(world * world * tags, size=n, replace=False)
    src, rest = np.divmod(flat, world * tags)
    dst, tag = np.divmod(rest, tags)
    return src.astype(np.int64), dst.astype(np.int64), (tag * 3 + 5).astype(np.int64)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_key_order_is_lexsort_order(seed):
    rng = np.random.default_rng(seed)
    src, dst, tag = _rows(rng, 5_000, 64, 200)
    np.testing.assert_array_equal(key_order(src, dst, tag), np.lexsort((tag, dst, src)))


def test_key_order_falls_back_on_equal_rows_huge_tags_and_negative_peers():
    src = np.array([3, 1, 3, 1, 0], dtype=np.int64)
    dst = np.array([0, 2, 0, 2, 1], dtype=np.int64)
    tag = np.array([7, 7, 7, 7, 9], dtype=np.int64)  # two pairs of equal rows: the stable lexsort's order
    np.testing.assert_array_equal(key_order(src, dst, tag), [4, 1, 3, 0, 2])
    big = np.array([2**62, 0, 5, 2**61, 1], dtype=np.int64)  # the combined key would overflow
    np.testing.assert_array_equal(key_order(src, dst, big), np.lexsort((big, dst, src)))
    neg = np.array([3, -1, 3, 1, 0], dtype=np.int64)  # a missing peer reads as -1
    np.testing.assert_array_equal(key_order(neg, dst, tag), np.lexsort((tag, dst, neg)))


@pytest.mark.parametrize("size", [1, 7, 1000])
def test_dense_unique_is_numpys_unique(size):
    rng = np.random.default_rng(size)
    values = rng.integers(0, size, 3_000).astype(np.int64)
    found = dense_unique(values, size)
    assert found is not None
    want = np.unique(values, return_index=True, return_inverse=True)
    for got, expected in zip(found, want):
        np.testing.assert_array_equal(got, expected.reshape(-1))


def test_dense_unique_declines_out_of_range_and_huge_ranges():
    values = np.array([0, 5, 9], dtype=np.int64)
    assert dense_unique(values, 9) is None  # 9 is outside 0..8
    assert dense_unique(values - 1, 10) is None
    assert dense_unique(values, (1 << 20) + 1) is None
    assert dense_unique(values[:0], 10) is None


@pytest.mark.parametrize("sort_first", [True, False])
def test_sorted_unique_is_numpys_unique(sort_first):
    rng = np.random.default_rng(7)
    values = rng.integers(-50, 50, 2_000).astype(np.int64)
    if sort_first:
        values.sort()
    distinct, inverse = sorted_unique(values)
    want, want_inverse = np.unique(values, return_inverse=True)
    np.testing.assert_array_equal(distinct, want)
    np.testing.assert_array_equal(inverse, want_inverse.reshape(-1))


@pytest.mark.parametrize("count", [1, 3, 16, 17, 40])
def test_few_codes_is_numpys_unique(count):
    rng = np.random.default_rng(count)
    values = rng.choice(rng.integers(0, 1 << 40, count), 5_000).astype(np.int64)
    distinct, codes = few_codes(values)
    want, want_codes = np.unique(values, return_inverse=True)
    np.testing.assert_array_equal(distinct, want)
    np.testing.assert_array_equal(codes, want_codes.reshape(-1))


@pytest.mark.parametrize("world", [300, 70_000])
def test_stable_order_by_rank_is_a_stable_argsort(world):
    ranks = np.random.default_rng(world).integers(0, world, 20_000).astype(np.int64)
    np.testing.assert_array_equal(stable_order_by_rank(ranks, world), np.argsort(ranks, kind="stable"))
