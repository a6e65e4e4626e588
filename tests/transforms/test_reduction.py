"""Exact transitive reduction on columns (redundant_by_search): a hand-built graph and brute force."""

from __future__ import annotations

import numpy as np

from tracekit.transforms._deplists import DepLists, redundant_by_search
from tracekit.transforms.colcompact import reduce_lists

# position -> data dependencies (positions = ids here); worked by hand below
GRAPH = {
    0: [],
    1: [0],
    2: [0, 1],  # 0 -> 1 -> 2: the 0 is redundant
    3: [1, 2, 0],  # 1 and 0 are ancestors of 2
    4: [3, 0],  # 0 is an ancestor of 3
    5: [2, 4],  # 2 -> 3 -> 4: the 2 is redundant
    6: [0],
    7: [5, 6],  # independent: both stay
    8: [7, 0, 0],  # 0 (listed twice) is an ancestor of 7; a repeat is dropped with it
}
EXPECTED = {2: [1], 3: [2], 4: [3], 5: [4], 8: [7]}


def _lists(graph: dict[int, list[int]], ids: list[int]) -> DepLists:
    lens = [len(graph[p]) for p in range(len(graph))]
    ptr = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
    return DepLists(ptr, np.asarray([ids[d] for p in range(len(graph)) for d in graph[p]], dtype=np.uint64))


def test_hand_built_graph():
    ids = list(range(len(GRAPH)))
    new, changed = reduce_lists(np.asarray(ids, dtype=np.uint64), _lists(GRAPH, ids), limit=10**9)
    assert np.flatnonzero(changed).tolist() == sorted(EXPECTED)
    for p in range(len(GRAPH)):
        assert new.ids[new.ptr[p] : new.ptr[p + 1]].tolist() == EXPECTED.get(p, GRAPH[p]), p


def test_hand_built_graph_not_in_file_order():
    """The same graph with ids decreasing along the edges: the topological order is not the file order."""
    ids = [100 - p for p in range(len(GRAPH))]
    order = np.arange(len(GRAPH))[::-1]  # stored last node first: dependencies now point forward
    inv = {int(p): k for k, p in enumerate(order)}
    graph = {k: [inv[d] for d in GRAPH[int(p)]] for k, p in enumerate(order)}
    ids_k = [ids[int(p)] for p in order]
    new, _ = reduce_lists(np.asarray(ids_k, dtype=np.uint64), _lists(graph, ids_k), limit=10**9)
    for k, p in enumerate(order.tolist()):
        want = [ids[d] for d in EXPECTED.get(p, GRAPH[p])]
        assert new.ids[new.ptr[k] : new.ptr[k + 1]].tolist() == want, p


def _closure_redundant(n: int, ptr: np.ndarray, deps: np.ndarray) -> np.ndarray:
    """Brute force: ancestor matrix by repeated squaring-free propagation in position order."""
    anc = np.zeros((n, n), dtype=bool)
    for v in range(n):
        for d in deps[ptr[v] : ptr[v + 1]]:
            anc[v, d] = True
            anc[v] |= anc[d]
    out = np.zeros(len(deps), dtype=bool)
    for v in range(n):
        ds = deps[ptr[v] : ptr[v + 1]]
        for k, d in enumerate(ds):
            out[ptr[v] + k] = any(anc[w, d] for w in ds if w != d)
    return out


def test_random_dags_match_brute_force():
    rng = np.random.default_rng(7)
    for n in (2, 10, 60, 200):
        lens = rng.integers(0, 5, size=n)
        lens[0] = 0
        deps = [np.unique(rng.integers(max(0, v - 12), v, size=min(lens[v], v))) for v in range(n)]
        deps = [rng.permutation(d) for d in deps]
        ptr = np.concatenate(([0], np.cumsum([len(d) for d in deps]))).astype(np.int64)
        flat = np.concatenate(deps).astype(np.int64)
        got = redundant_by_search(ptr, flat, np.arange(n, dtype=np.int64))  # position order is topological
        assert got.tolist() == _closure_redundant(n, ptr, flat).tolist()
        assert got.any() or n < 10
