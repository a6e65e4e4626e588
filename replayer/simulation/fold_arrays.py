"""Sorting and distinct values for the send/recv folding proof (:mod:`.fold_p2p`) in linear or one-key time.

The proof of a pipeline-parallel job handles a few million send/recv pairs (3.1 M for GPT-3 175B with 12 virtual
stages and 64 micro-batches on 2,048 ranks).  ``np.lexsort`` over three keys and ``np.unique(...,
return_index=True, return_inverse=True)`` (a stable merge sort) were most of its time; the helpers here give the
very same arrays from one ``int64`` key sorted once (:func:`key_order`), from counting over a small range
(:func:`dense_unique`) or from a run that is already sorted (:func:`sorted_unique`), and fall back to numpy's
general routines where those do not apply.  tests/replayer/test_fold_arrays.py compares each with numpy's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from typing import TypeAlias

    import numpy.typing as npt

    Ints: TypeAlias = npt.NDArray[np.int64]

__all__ = ["as_buffer", "dense_unique", "few_codes", "key_order", "sorted_unique", "stable_order_by_rank"]

#: counting needs an array of the value range: used up to this many values (8 MB of int64)
DENSE_MAX = 1 << 20

_ARANGE = object()  # key_order's default: rows in order give np.arange

#: one combined key must stay below this (int64, with room for the arithmetic)
_KEY_MAX = 1 << 62


def key_order(
    src: "Ints",
    dst: "Ints",
    tag: "Ints",
    identity: Any = _ARANGE,
) -> Any:
    """``np.lexsort((tag, dst, src))``: the rows' order by ``(src, dst, tag)``.

    When the three fit one ``int64`` key and the rows are distinct (a send or receive table has one row per key),
    any order in which that key strictly increases is lexsort's.  Tried in turn: the rows as they are (sends
    gathered rank by rank, each rank's sorted by peer and tag), a stable radix sort by ``src`` alone (receives
    gathered that way: sorted by destination, then peer and tag), one sort of the key; else the lexicographic sort.
    Rows in order already give ``identity`` when one is passed (None: the caller need not copy them).
    """
    n = len(src)
    if n > 1 and min(int(src.min()), int(dst.min())) >= 0:
        ranks = max(int(src.max()), int(dst.max())) + 1
        low = int(tag.min())
        tags = int(tag.max()) - low + 1
        if ranks * ranks * tags < _KEY_MAX:
            key = src * ranks  # in place from here: one array of the rows' size
            key += dst
            key *= tags
            key += tag
            key -= low
            if _increasing(key):
                return np.arange(n, dtype=np.int64) if identity is _ARANGE else identity
            if ranks <= 1 << 16:
                order = stable_order_by_rank(src, ranks)
                if _increasing(key[order]):
                    return order
            order = np.argsort(key)
            if _increasing(key[order]):  # all distinct: any sort gives lexsort's order
                return order
    return np.lexsort((tag, dst, src))


def _increasing(values: "Ints") -> bool:
    """Whether ``values`` strictly increase."""
    return bool((values[1:] > values[:-1]).all())


def dense_unique(values: "Ints", size: int) -> "tuple[Ints, Ints, Ints] | None":
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


def sorted_unique(values: "Ints") -> "tuple[Ints, Ints]":
    """``np.unique(values, return_inverse=True)`` (distinct values, each value's index among them); in one pass
    when ``values`` do not decrease."""
    if len(values) > 1 and (values[1:] >= values[:-1]).all():
        starts = np.empty(len(values), dtype=bool)
        starts[0] = True
        np.not_equal(values[1:], values[:-1], out=starts[1:])
        return values[starts], np.cumsum(starts, dtype=np.int64) - 1
    distinct, inverse = np.unique(values, return_inverse=True)
    return distinct, inverse.reshape(-1)


def few_codes(values: "Ints", limit: int = 16) -> "tuple[Ints, Ints]":
    """``np.unique(values, return_inverse=True)`` by one comparison pass per distinct value when there are at most
    ``limit`` of them (message sizes of a pipeline: a handful), else by numpy's sort."""
    if len(values):
        distinct: list[int] = []
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


def stable_order_by_rank(ranks: "Ints", world: int) -> "Ints":
    """``np.argsort(ranks, kind="stable")`` for ranks ``0 <= r < world``: a radix sort on 16-bit values when the
    world fits them (numpy sorts integers of 16 bits or less by radix when asked for a stable sort)."""
    if world <= 1 << 16:
        return np.argsort(ranks.astype(np.uint16), kind="stable")
    return np.argsort(ranks, kind="stable")


def as_buffer(values: "npt.ArrayLike", dtype: "npt.DTypeLike" = np.int64) -> memoryview:
    """``values`` as a flat byte view for ``array.frombytes`` (which takes no numpy array): no ``tobytes`` copy
    when they are a contiguous array of ``dtype`` already."""
    return np.ascontiguousarray(values, dtype=dtype).data.cast("B")
