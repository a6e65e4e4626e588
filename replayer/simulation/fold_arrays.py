"""Sorting and distinct values for the send/recv folding proof (:mod:`.fold_p2p`) in linear or one-key time.

The proof of a pipeline-parallel job handles a few million send/recv pairs (3.1 M for GPT-3 175B with 12 virtual
stages and 64 micro-batches on 2,048 ranks).  ``np.lexsort`` over three keys and ``np.unique(...,
return_index=True, return_inverse=True)`` (a stable merge sort) were most of its time; the helpers here give the
very same arrays from one ``int64`` key sorted once (:func:`key_order`), from counting over a small range
(:func:`dense_unique`) or from a run that is already sorted (:func:`sorted_unique`), and fall back to numpy's
general routines where those do not apply.  tests/replayer/test_fold_arrays.py compares each with numpy's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import numpy.typing as npt

__all__ = ["dense_unique", "few_codes", "key_order", "sorted_unique", "stable_order_by_rank"]

_I64 = "npt.NDArray[np.int64]"

#: counting needs an array of the value range: used up to this many values (8 MB of int64)
DENSE_MAX = 1 << 20

#: one combined key must stay below this (int64, with room for the arithmetic)
_KEY_MAX = 1 << 62


def key_order(src: "npt.NDArray[np.int64]", dst: "npt.NDArray[np.int64]", tag: "npt.NDArray[np.int64]") -> _I64:
    """``np.lexsort((tag, dst, src))``: the rows' order by ``(src, dst, tag)``.

    When the three fit one ``int64`` key and no two rows are equal (a send or receive table has one row per key),
    one unstable sort of that key gives the same order; otherwise the lexicographic sort runs.
    """
    n = len(src)
    if n > 1 and min(int(src.min()), int(dst.min())) >= 0:
        ranks = max(int(src.max()), int(dst.max())) + 1
        low = int(tag.min())
        tags = int(tag.max()) - low + 1
        if ranks * ranks * tags < _KEY_MAX:
            key = (src * ranks + dst) * tags + (tag - low)
            order = np.argsort(key)
            ordered = key[order]
            if not (ordered[1:] == ordered[:-1]).any():  # all distinct: any sort gives lexsort's order
                return order
    return np.lexsort((tag, dst, src))


def dense_unique(values: "npt.NDArray[np.int64]", size: int) -> tuple[_I64, _I64, _I64] | None:
    """``np.unique(values, return_index=True, return_inverse=True)`` for ``0 <= values < size`` by counting (the
    distinct values ascending, each one's first index, each value's index among them); None when ``size`` is
    above :data:`DENSE_MAX` or the values leave the range."""
    n = len(values)
    if size > DENSE_MAX or not n or int(values.min()) < 0 or int(values.max()) >= size:
        return None
    present = np.zeros(size, dtype=bool)
    present[values] = True
    distinct = np.flatnonzero(present).astype(np.int64)
    code = np.zeros(size, dtype=np.int64)
    code[distinct] = np.arange(len(distinct), dtype=np.int64)
    inverse = code[values]
    first = np.full(len(distinct), n, dtype=np.int64)
    np.minimum.at(first, inverse, np.arange(n, dtype=np.int64))
    return distinct, first, inverse


def sorted_unique(values: "npt.NDArray[np.int64]") -> tuple[_I64, _I64]:
    """``np.unique(values, return_inverse=True)`` (distinct values, each value's index among them); in one pass
    when ``values`` do not decrease."""
    if len(values) > 1 and (values[1:] >= values[:-1]).all():
        starts = np.empty(len(values), dtype=bool)
        starts[0] = True
        np.not_equal(values[1:], values[:-1], out=starts[1:])
        return values[starts], np.cumsum(starts, dtype=np.int64) - 1
    distinct, inverse = np.unique(values, return_inverse=True)
    return distinct, inverse.reshape(-1)


def few_codes(values: "npt.NDArray[np.int64]", limit: int = 16) -> tuple[_I64, _I64]:
    """``np.unique(values, return_inverse=True)`` by one comparison pass per distinct value when there are at most
    ``limit`` of them (message sizes of a pipeline: a handful), else by numpy's sort."""
    if len(values):
        distinct = []
        left = values
        while len(left) and len(distinct) <= limit:
            distinct.append(int(left[0]))
            left = left[left != left[0]]
        if not len(left):
            ordered = np.asarray(sorted(distinct), dtype=np.int64)
            code = np.zeros(len(values), dtype=np.int64)
            for k, v in enumerate(ordered.tolist()[1:], start=1):
                code[values == v] = k
            return ordered, code
    distinct_all, inverse = np.unique(values, return_inverse=True)
    return distinct_all, inverse.reshape(-1)


def stable_order_by_rank(ranks: "npt.NDArray[np.int64]", world: int) -> _I64:
    """``np.argsort(ranks, kind="stable")`` for ranks ``0 <= r < world``: a radix sort on 16-bit values when the
    world fits them (numpy sorts integers of 16 bits or less by radix when asked for a stable sort)."""
    if world <= 1 << 16:
        return np.argsort(ranks.astype(np.uint16), kind="stable")
    return np.argsort(ranks, kind="stable")
