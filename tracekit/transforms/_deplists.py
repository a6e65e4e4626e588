"""Dependency lists as CSR arrays, the vectorized set helpers the columnar transforms share, and the
compiled transitive reduction (issue 17)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit.jit import kernel

_EMPTY_I = np.zeros(0, dtype=np.int64)


@dataclass
class DepLists:
    """Dependency lists of nodes at positions ``0..n-1``: CSR by id (``ptr`` int64[n+1], ``ids`` uint64[E])."""

    ptr: np.ndarray
    ids: np.ndarray

    def owners(self) -> np.ndarray:
        """Row of every entry, int64[E]."""
        return np.repeat(np.arange(len(self.ptr) - 1, dtype=np.int64), np.diff(self.ptr))

    def lens(self) -> np.ndarray:
        """List lengths, int64[n]."""
        return np.diff(self.ptr)

    def take(self, rows: np.ndarray) -> "DepLists":
        """The lists of ``rows`` (int64[K]), as K lists."""
        lens = self.ptr[rows + 1] - self.ptr[rows]
        ptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        idx = np.repeat(self.ptr[rows] - ptr[:-1], lens) + np.arange(int(ptr[-1]), dtype=np.int64)
        return DepLists(ptr, self.ids[idx])

    def replaced(self, rows: np.ndarray, new: "DepLists") -> "DepLists":
        """These lists with rows ``rows`` (int64[K], sorted, distinct) replaced by the K lists of ``new``."""
        lens = self.lens().copy()
        lens[rows] = new.lens()
        ptr = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        out = np.empty(int(ptr[-1]), dtype=np.uint64)
        keep = np.ones(len(lens), dtype=bool)
        keep[rows] = False
        old_rows = np.flatnonzero(keep & (self.lens() > 0))
        _scatter(out, ptr[old_rows], self.take(old_rows))
        _scatter(out, ptr[rows], new)
        return DepLists(ptr, out)


def _scatter(out: np.ndarray, at: np.ndarray, lists: DepLists) -> None:
    """Write list ``k`` of ``lists`` at ``out[at[k]:]``."""
    lens = lists.lens()
    total = int(lens.sum())
    if total:
        out[np.repeat(at - lists.ptr[:-1], lens) + np.arange(total, dtype=np.int64)] = lists.ids


def _unique(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values (by sorting: numpy's hash-based unique is slow on large int arrays)."""
    s = np.sort(x)
    keep = np.ones(len(s), dtype=bool)
    keep[1:] = s[1:] != s[:-1]
    return s[keep]


def member(x: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """bool[len(x)]: each value of ``x`` is in ``sorted_set`` (sorted ascending; binary search, no hashing)."""
    if not len(sorted_set):
        return np.zeros(len(x), dtype=bool)
    k = np.minimum(np.searchsorted(sorted_set, x), len(sorted_set) - 1)
    return sorted_set[k] == x


class _Lookup:
    """Node id -> position for unique ids (no copy when they ascend)."""

    def __init__(self, ids: np.ndarray) -> None:
        self.n = len(ids)
        if self.n < 2 or bool(np.all(ids[1:] > ids[:-1])):
            self.order, self.sorted = None, ids
        else:
            self.order = np.argsort(ids, kind="stable")
            self.sorted = ids[self.order]

    def __call__(self, ids: np.ndarray, near: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(positions int64[K], found bool[K])`` of ``ids`` (uint64[K]); ``near`` (int64[K]): a position
        to try first for each (e.g. the one before the owner of a dependency), when the ids ascend."""
        if self.n == 0:
            return np.zeros(len(ids), dtype=np.int64), np.zeros(len(ids), dtype=bool)
        if near is not None and self.order is None:
            pos = np.empty(len(ids), dtype=np.int64)
            found = np.empty(len(ids), dtype=bool)
            _find_near(self.sorted, np.asarray(ids, dtype=np.uint64), near, pos, found)
            return pos, found
        k = np.minimum(np.searchsorted(self.sorted, ids), self.n - 1)
        found = self.sorted[k] == ids
        return (k if self.order is None else self.order[k]).astype(np.int64), found


@kernel
def _find_near(sorted_ids, values, near, pos, found):  # pragma: no cover - compiled
    """Position of each of ``values`` in ``sorted_ids`` (ascending uint64[n], n >= 1): ``near[k]`` when it holds
    the value, else by binary search; ``found[k]`` False (and ``pos[k]`` a valid index) when absent."""
    n = len(sorted_ids)
    for k in range(len(values)):
        v = values[k]
        g = near[k]
        if g >= 0 and g < n and sorted_ids[g] == v:
            pos[k] = g
            found[k] = True
            continue
        lo = 0
        hi = n
        while lo < hi:
            mid = (lo + hi) >> 1
            if sorted_ids[mid] < v:
                lo = mid + 1
            else:
                hi = mid
        found[k] = lo < n and sorted_ids[lo] == v
        pos[k] = min(lo, n - 1)


def _lists(owner: np.ndarray, values: np.ndarray, n: int) -> DepLists:
    """CSR of ``values`` grouped by ``owner`` (already in order within each owner)."""
    if len(owner) > 1 and not bool(np.all(owner[1:] >= owner[:-1])):
        order = np.argsort(owner, kind="stable")
        values = values[order]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=n), out=ptr[1:])
    return DepLists(ptr, values.astype(np.uint64))


def _first_occurrences(owner: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Indices of the first ``(owner, value)`` of each pair, in input order (``dict.fromkeys`` per owner)."""
    if not len(owner):
        return _EMPTY_I
    counts = np.bincount(owner)
    multi = np.flatnonzero(counts[owner] >= 2)  # an owner with one entry has no repeat
    if not len(multi):
        return np.arange(len(owner), dtype=np.int64)
    order = multi[np.lexsort((multi, value[multi], owner[multi]))]
    o, v = owner[order], value[order]
    dup = np.zeros(len(o), dtype=bool)
    dup[1:] = (o[1:] == o[:-1]) & (v[1:] == v[:-1])
    keep = np.ones(len(owner), dtype=bool)
    keep[order[dup]] = False
    return np.flatnonzero(keep)


@kernel
def redundant_by_search(ptr, deps, order):  # pragma: no cover - compiled
    """bool[E]: dependency ``deps[k]`` of its owner ``v`` is a strict ancestor of another dependency of ``v``.

    Exact transitive reduction of a DAG, by a pruned reachability search per node with two or more
    dependencies (no ancestor bitsets):

    Args:
        ptr: int64[n+1] CSR of each node's distinct dependencies (positions, ``deps`` int64[E]).
        order: int64[n] the nodes in a topological order (dependencies first).

    Rule: for ``v`` with dependencies ``D``, search backwards from the dependencies of every
    ``w`` in ``D``; a ``d`` in ``D`` reached is redundant (``w`` waits for ``d``, so ``v`` does),
    and nothing else is (the search visits every strict ancestor that could be in ``D``).  It only
    visits nodes whose rank (position in ``order``) is at least ``min(rank[D])``: a node ranked lower
    is not in ``D`` and neither are its ancestors (ranked lower still), so pruning them loses nothing.
    Nodes are done in ``order``, so every ancestor's list is already reduced and the search follows
    kept edges only (a transitive reduction has the reachability of its graph).  Cost: O(n + e)
    for chains and for graphs whose multi-dependency nodes depend on a window of recent nodes
    (the search stays inside the window); the worst case is the size of the window's subgraph per
    such node, O(n e) in general (transitive reduction is as hard as transitive closure).
    """
    n = len(ptr) - 1
    out = np.zeros(len(deps), dtype=np.bool_)
    stamp = np.full(n, -1, dtype=np.int64)
    widest = 0
    for v in range(n):
        widest = max(widest, ptr[v + 1] - ptr[v])
    stack = np.empty(n + widest, dtype=np.int64)  # each node is stamped (pushed) once per search, plus the seeds
    rank = np.empty(n, dtype=np.int64)
    for r in range(n):
        rank[order[r]] = r
    for v in order:
        lo = ptr[v]
        hi = ptr[v + 1]
        if hi - lo < 2:
            continue
        low = rank[deps[lo]]
        for k in range(lo + 1, hi):
            low = min(low, rank[deps[k]])
        top = 0
        for k in range(lo, hi):  # the seeds: v's dependencies, searched from but not reached (not stamped)
            stack[top] = deps[k]
            top += 1
        while top > 0:
            top -= 1
            u = stack[top]
            for j in range(ptr[u], ptr[u + 1]):
                x = deps[j]
                if not out[j] and rank[x] >= low and stamp[x] != v:
                    stamp[x] = v
                    stack[top] = x
                    top += 1
        for k in range(lo, hi):
            out[k] = stamp[deps[k]] == v
    return out
