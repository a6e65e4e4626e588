"""Compaction on columns (issue 17): the rewrites of :mod:`tracekit.transforms.compact` without Node objects.

Same results as the per-node implementation (``tests/transforms/test_columnar_equal.py``
compares digests of both on sample, real and generated traces); the work is done on
arrays of one rank's dependency lists (CSR over node positions):

* transitive reduction: nodes with fewer than two distinct dependencies are
  skipped at once (a single dependency is never redundant in a DAG); above
  :data:`~tracekit.transforms.compact.FULL_REDUCTION_LIMIT` nodes the one-step
  rule is one vectorized membership test over the two-hop pairs (O(e + sum of
  in-degrees of dependencies)); below it the exact reduction is a compiled, pruned
  reachability search per node with two or more dependencies
  (:func:`~tracekit.transforms._deplists.redundant_by_search`: linear for chains and
  windowed graphs, no ancestor bitsets);
* chain merging: resources, the serial test and the dependant counts are column
  operations; the chain walk visits only the candidate edges; merged heads are
  the only nodes decoded.

Output: a trace of re-spliced encoded records (:mod:`tracekit.wire.records`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tracekit.model.attrs import IS_CPU_OP, NUM_OPS, STREAM, TENSOR_SIZE, TID
from tracekit.errors import TracekitError, ValidationError
from tracekit.model.graph import DepGraph, NodeColumns
from tracekit.model import NodeType
from tracekit.transforms._deplists import (
    _EMPTY_I,
    DepLists,
    _first_occurrences,
    _lists,
    _Lookup,
    _unique,
    member,
    redundant_by_search,
)
from tracekit.wire.records import Edit, Records, packed_fields, rewrite

FIELD_CTRL_DEPS = 4
FIELD_DATA_DEPS = 5


@dataclass(frozen=True)
class CompactStats:
    """Sizes before and after compaction of one trace (nodes, data dependencies)."""

    nodes_before: int
    nodes_after: int
    deps_before: int
    deps_after: int

    @property
    def node_factor(self) -> float:
        """``nodes_before / nodes_after`` (inf when nothing is left)."""
        return self.nodes_before / self.nodes_after if self.nodes_after else float("inf")

    @property
    def dep_factor(self) -> float:
        """``deps_before / deps_after`` data dependencies (inf when none is left)."""
        return self.deps_before / self.deps_after if self.deps_after else float("inf")


def _graph(ids: np.ndarray, data: DepLists, names_fn: Callable[[], list[str]] = list) -> DepGraph:
    n = len(ids)
    z = np.zeros(n, dtype=np.int64)
    cols = NodeColumns(
        ids,
        np.zeros(n, np.int16),
        z,
        z,
        data.ptr,
        data.ids,
        np.zeros(n + 1, np.int64),
        np.zeros(0, np.uint64),
        names_fn=names_fn,
    )
    return DepGraph(cols)


def reduce_lists(
    ids: np.ndarray, data: DepLists, limit: int, names_fn: Callable[[], list[str]] = list
) -> tuple[DepLists, np.ndarray]:
    """Transitive reduction of ``data`` (rule of :func:`tracekit.transforms.compact.reduce_dependencies`).

    Args:
        ids: uint64[n] node ids (unique); data: their data-dependency lists by id.
        limit: node count up to which the reduction is exact.
        names_fn: the node names, for the message of a cycle.

    Returns:
        ``(new lists, changed bool[n])``: a changed node's list is its kept dependencies
        (distinct, existing, first-occurrence order); other lists are as given.

    Raises:
        ValidationError: a dependency cycle.
    """
    n = len(ids)
    owner = data.owners()
    pos, found = _Lookup(ids)(data.ids, owner - 1)  # most dependencies are on the node just before
    e_own, e_pos = (owner, pos) if found.all() else (owner[found], pos[found])
    if len(e_own) > 1 and not bool(np.all(e_own[1:] != e_own[:-1])):  # some list has two: drop repeats
        first = _first_occurrences(e_own, e_pos)
        e_own, e_pos = e_own[first], e_pos[first]  # distinct existing deps, first-occurrence order per owner
    if bool(np.all(e_pos < e_own)):  # every dependency points back: file order is topological
        order = np.arange(n, dtype=np.int64)
    else:
        order = _graph(ids, data, names_fn).topological_order()  # raises on a cycle, as the node path does
    deg = np.bincount(e_own, minlength=n)
    redundant = None  # a single dependency is never redundant
    if (deg >= 2).any():
        if n <= limit:
            redundant = _redundant_exact(n, e_own, e_pos, deg, order)
        else:
            redundant = _redundant_one_step(n, e_own, e_pos, deg)
    kept_n = deg if redundant is None else np.bincount(e_own[~redundant], minlength=n)
    changed = kept_n != data.lens()
    rows = np.flatnonzero(changed)
    if not len(rows):
        return data, changed
    sel = changed[e_own] if redundant is None else ~redundant & changed[e_own]
    new = _lists(np.searchsorted(rows, e_own[sel]), ids[e_pos[sel]], len(rows))
    return data.replaced(rows, new), changed


def _redundant_one_step(n: int, e_own: np.ndarray, e_pos: np.ndarray, deg: np.ndarray) -> np.ndarray:
    """bool[E]: dependency ``d`` of ``v`` is also a dependency of another dependency of ``v``."""
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(deg, out=ptr[1:])  # e_own is sorted: CSR of the distinct deps
    multi = deg[e_own] >= 2
    v, w = e_own[multi], e_pos[multi]
    cnt = deg[w]
    start = np.repeat(ptr[w] - (np.cumsum(cnt) - cnt), cnt) + np.arange(int(cnt.sum()), dtype=np.int64)
    two_hop = np.repeat(v, cnt) * n + e_pos[start]
    return member(e_own * n + e_pos, _unique(two_hop))


def _redundant_exact(n: int, e_own: np.ndarray, e_pos: np.ndarray, deg: np.ndarray, order: np.ndarray) -> np.ndarray:
    """bool[E]: dependency ``d`` of ``v`` is an ancestor of another dependency of ``v``
    (:func:`~tracekit.transforms._deplists.redundant_by_search`; ``e_own`` sorted)."""
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(deg, out=ptr[1:])
    return redundant_by_search(ptr, e_pos.astype(np.int64), np.asarray(order, dtype=np.int64))


# ----------------------------------------------------------------------------- chain merging
def resources(cols: NodeColumns) -> tuple[np.ndarray, np.ndarray]:
    """Resource of every node as ``(kind int8[N], value int64[N])``: kind 0 none (not COMP), 1 host ``tid``, 2 ``stream``.

    Raises:
        ValidationError: a ``tid``/``stream``/``is_cpu_op`` value that is not a number (the node path compares
            such values as they are; callers fall back to it).
    """
    comp = cols.types == int(NodeType.COMP_NODE)
    cpu_present, cpu_v = IS_CPU_OP.column(cols)
    cpu = cpu_present & cpu_v
    _, tid = TID.column(cols)
    _, stream = STREAM.column(cols)
    kind = np.where(comp, np.where(cpu, 1, 2), 0).astype(np.int8)
    return kind, np.where(cpu, tid, stream)


def _single_comp_deps(ids: np.ndarray, types: np.ndarray, data: DepLists, lookup: _Lookup) -> tuple[np.ndarray, ...]:
    """``(i, j)``: COMP nodes ``j`` whose only data dependency is the COMP node ``i`` (positions, ``j``
    ascending); no chain can merge elsewhere, and no attribute is read to find them."""
    comp = types == int(NodeType.COMP_NODE)
    j = np.flatnonzero(comp & (data.lens() == 1))
    i, found = lookup(data.ids[data.ptr[j]], j - 1)
    keep = found & comp[i]
    return i[keep], j[keep]


def merge_candidates(ids: np.ndarray, data: DepLists, cols: NodeColumns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidate merges ``(i, j, work)`` (``i``, ``j`` int64[K], ``j`` ascending): ``j`` may join ``i``'s chain;
    ``work`` bool[N]: the node has FLOPs or bytes.

    ``j`` is a COMP node on a serial resource with exactly one data dependency ``i`` on the same
    resource, ``i`` has no other dependant, and neither has FLOPs or bytes (rules of
    :func:`tracekit.transforms.compact.merge_chains`).
    The resource attributes are read (in one pass) only when some COMP node's only dependency is a COMP node.

    Raises:
        ValidationError: a ``tid``/``stream``/``is_cpu_op``/``num_ops``/``tensor_size`` value that is not a number.
    """
    n = len(ids)
    lookup = _Lookup(ids)
    i, j = _single_comp_deps(ids, cols.types, data, lookup)
    if not len(j):
        return _EMPTY_I, _EMPTY_I, np.zeros(n, dtype=bool)
    cols.prefetch_attrs([IS_CPU_OP, TID, STREAM, NUM_OPS, TENSOR_SIZE])
    kind, value = resources(cols)
    work = (NUM_OPS.column(cols)[1] > 0) | (TENSOR_SIZE.column(cols)[1] > 0)
    owner = data.owners()
    pos, found = lookup(data.ids, owner - 1)
    edge_keys = _unique(owner[found] * n + pos[found])
    rid = np.full(n, -1, dtype=np.int64)
    on = np.flatnonzero(kind > 0)
    srt = on[np.lexsort((value[on], kind[on]))]
    new_group = np.ones(len(srt), dtype=bool)
    new_group[1:] = (kind[srt][1:] != kind[srt][:-1]) | (value[srt][1:] != value[srt][:-1])
    rid[srt] = np.cumsum(new_group) - 1
    # serial resources: every node on one (file order) lists the previous node of its resource as a dependency
    order = on[np.lexsort((on, rid[on]))]
    same = rid[order][1:] == rid[order][:-1]
    nxt, prev = order[1:][same], order[:-1][same]
    broken = _unique(rid[nxt[~member(nxt * n + prev, edge_keys)]])
    serial = (rid >= 0) & ~member(rid, broken)
    succ = np.bincount(edge_keys % n, minlength=n)
    keep = serial[j] & (rid[i] == rid[j]) & (succ[i] == 1) & ~work[i] & ~work[j]
    return i[keep], j[keep], work


def chain_groups(
    i_of: np.ndarray, j_of: np.ndarray, timed: np.ndarray, work: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Absorbed positions and the head each joins (int64[M] each), from the candidates ``(i, j)``.

    Walks the candidates in file order of ``j`` (as the node path): a chain keeps growing while all
    its members are timed or none has FLOPs/bytes (candidates never have any: :func:`merge_candidates`).  When every dependency points back and that
    rule cannot fail (all involved nodes timed, or none with work), the chains are found by
    pointer doubling instead of the walk.
    """
    involved = np.concatenate((i_of, j_of))
    if bool(np.all(i_of < j_of)) and (bool(timed[involved].all()) or not bool(work[involved].any())):
        parent = np.arange(len(timed), dtype=np.int64)
        parent[j_of] = i_of
        while True:
            nxt = parent[parent]
            if np.array_equal(nxt, parent):
                break
            parent = nxt
        return j_of, parent[j_of]
    head_of: dict[int, int] = {}
    flags: dict[int, tuple[bool, bool]] = {}
    timed_l, work_l = timed.tolist(), work.tolist()
    members, heads = [], []
    for i, j in zip(i_of.tolist(), j_of.tolist()):
        h = head_of.get(i, i)
        all_timed, any_work = flags.get(h) or (timed_l[h], work_l[h])
        all_timed, any_work = all_timed and timed_l[j], any_work or work_l[j]
        if not (all_timed or not any_work):
            continue
        members.append(j)
        heads.append(h)
        flags[h] = (all_timed, any_work)
        head_of[j] = h
    return np.asarray(members, dtype=np.int64), np.asarray(heads, dtype=np.int64)


def _remap(
    lists: DepLists, rows: np.ndarray, old_ids: np.ndarray, head_ids: np.ndarray, self_ids: np.ndarray | None
) -> DepLists:
    """Lists of ``rows`` with absorbed ids mapped to their heads, deduplicated (first occurrence kept);
    with ``self_ids`` (uint64[K]) a row's own id is dropped.  ``old_ids`` sorted uint64."""
    sub = lists.take(rows)
    owner, vals = sub.owners(), sub.ids
    k = np.minimum(np.searchsorted(old_ids, vals), max(len(old_ids) - 1, 0))
    hit = (old_ids[k] == vals) if len(old_ids) else np.zeros(len(vals), bool)
    mapped = np.where(hit, head_ids[k] if len(old_ids) else vals, vals).astype(np.uint64)
    keep = _first_occurrences(owner, mapped)
    owner, mapped = owner[keep], mapped[keep]
    if self_ids is not None:
        own = mapped != self_ids[owner]
        owner, mapped = owner[own], mapped[own]
    return _lists(owner, mapped, len(rows))


def _row(lists: DepLists, i: int) -> list[int]:
    return lists.ids[lists.ptr[i] : lists.ptr[i + 1]].tolist()


def _head_node(
    trace: Any,
    cols: NodeColumns,
    group: np.ndarray,
    data: DepLists,
    ctrl: DepLists,
    id_of_head: dict[int, int],
    cache: dict[str, Any],
) -> Any:
    """The merged node of chain ``group`` (positions, head first), as :func:`~tracekit.transforms.compact.merge_chains`."""
    h = int(group[0])
    node = trace.node_at(h).replace(data_deps=_row(data, h))
    c = node.replace(duration_ns=int(cols.duration_ns[group].sum()))
    for name in (NUM_OPS, TENSOR_SIZE):
        present, values = cache[name]
        if present[group].any():
            c = c.with_attr(name, int(values[group][present[group]].sum()))
    c = c.with_attr("merged_nodes", len(group), "int64_val")
    ids = cols.ids[group].tolist()
    merged_ids = cache["merged_node_ids"]
    if merged_ids is None:
        sources = ids
    else:
        sources = [s for m, mid in zip(group.tolist(), ids) for s in (merged_ids[m] or [mid])]
    c = c.with_attr("merged_node_ids", [int(s) for s in sources], "int64_list")
    ctrl_all: dict[int, None] = dict.fromkeys(c.ctrl_deps)
    ctrl_all.update(dict.fromkeys(ctrl.take(group[1:]).ids.tolist()))
    c = c.replace(ctrl_deps=[d for d in dict.fromkeys(id_of_head.get(d, d) for d in ctrl_all) if d != c.id])
    if any(d in id_of_head for d in c.data_deps) or any(d in id_of_head for d in c.ctrl_deps):
        c = c.replace(
            data_deps=list(dict.fromkeys(id_of_head.get(d, d) for d in c.data_deps)),
            ctrl_deps=list(dict.fromkeys(id_of_head.get(d, d) for d in c.ctrl_deps if id_of_head.get(d, d) != c.id)),
        )
    return c


def _merged_ids_column(cols: NodeColumns) -> list[Any] | None:
    """``merged_node_ids`` of every node (None where absent), or None when no node has it."""
    try:
        present, _ = cols.attr_int("merged_node_ids")
        if not present.any():
            return None
    except ValidationError:
        pass
    return cols.attr("merged_node_ids")[1]


def compact_encoded(trace: Any, *, merge: bool, reduce: bool, limit: int) -> tuple[Any, Any] | None:
    """:func:`tracekit.transforms.compact.compact_trace` on columns: ``(new trace, CompactStats)``.

    Returns None when the columns cannot decide as the node path does (duplicate node ids,
    a non-numeric ``tid``/``stream``/``is_cpu_op``/``num_ops``/``tensor_size``): use the node path then.

    Raises:
        ValidationError: a dependency cycle.
        TracekitError: a merged node that cannot be encoded.
    """

    cols = trace.columns()
    ids, n = cols.ids, len(cols)
    if n > 1 and not bool(np.all(ids[1:] > ids[:-1])) and len(_unique(ids)) != n:
        return None
    data = DepLists(np.asarray(cols.data_ptr, dtype=np.int64), np.asarray(cols.data_ids, dtype=np.uint64))
    ctrl = DepLists(np.asarray(cols.ctrl_ptr, dtype=np.int64), np.asarray(cols.ctrl_ids, dtype=np.uint64))
    deps_before = len(data.ids)
    changed = np.zeros(n, dtype=bool)
    if reduce:
        data, ch = reduce_lists(ids, data, limit, lambda: cols.names)
        changed |= ch
    absorbed = head_pos = _EMPTY_I
    if merge:
        try:
            i, j, work = merge_candidates(ids, data, cols)
        except ValidationError:
            return None
        if len(j):
            absorbed, head_pos = chain_groups(i, j, cols.duration_ns > 0, work)
    alive = np.ones(n, dtype=bool)
    heads: dict[int, Any] = {}
    ctrl_rows = _EMPTY_I
    if len(absorbed):
        data, ctrl, ctrl_rows, heads = _merge(trace, cols, absorbed, head_pos, data, ctrl, alive, changed)
        if reduce:
            data = _reduce_again(ids, data, alive, changed, heads, limit, lambda: cols.names)
    stats = CompactStats(n, int(alive.sum()), deps_before, int(data.lens()[alive].sum()))
    edit = _edit(alive, changed, data, ctrl, ctrl_rows, heads)
    if edit.empty():
        return trace, stats
    return rewrite(Records.of(trace), edit, trace.metadata), stats


def _merge(
    trace: Any,
    cols: NodeColumns,
    absorbed: np.ndarray,
    head_pos: np.ndarray,
    data: DepLists,
    ctrl: DepLists,
    alive: np.ndarray,
    changed: np.ndarray,
) -> tuple[DepLists, DepLists, np.ndarray, dict[int, Any]]:
    """Merge the chains (``absorbed[k]`` joins ``head_pos[k]``): absorbed nodes dead in ``alive``,
    dependencies on them re-pointed, head nodes built."""
    ids, n = cols.ids, len(cols)
    alive[absorbed] = False
    order = np.argsort(ids[absorbed])
    old_ids, head_ids = ids[absorbed][order], ids[head_pos][order]
    id_of_head = dict(zip(ids[absorbed].tolist(), ids[head_pos].tolist()))
    hit = np.zeros(n, dtype=bool)
    hit[data.owners()[member(data.ids, old_ids)]] = True
    hit[ctrl.owners()[member(ctrl.ids, old_ids)]] = True
    is_head = np.zeros(n, dtype=bool)
    is_head[head_pos] = True
    rows = np.flatnonzero(hit & alive & ~is_head)
    cache: dict[str, Any] = {name: name.column(cols) for name in (NUM_OPS, TENSOR_SIZE)}
    cache["merged_node_ids"] = _merged_ids_column(cols)
    by_head = np.lexsort((absorbed, head_pos))
    m_sorted, h_sorted = absorbed[by_head], head_pos[by_head]
    cuts = np.flatnonzero(np.diff(h_sorted)) + 1
    heads = {}
    for lo, hi in zip(np.concatenate(([0], cuts)).tolist(), np.concatenate((cuts, [len(h_sorted)])).tolist()):
        h = int(h_sorted[lo])
        group = np.concatenate(([h], m_sorted[lo:hi]))
        heads[h] = _head_node(trace, cols, group, data, ctrl, id_of_head, cache)
    if len(rows):
        data = data.replaced(rows, _remap(data, rows, old_ids, head_ids, None))
        ctrl = ctrl.replaced(rows, _remap(ctrl, rows, old_ids, head_ids, ids[rows]))
        changed[rows] = True
    hrows = np.asarray(sorted(heads), dtype=np.int64)
    owner = np.repeat(np.arange(len(hrows)), [len(heads[h].data_deps) for h in hrows.tolist()])
    vals = np.asarray([d for h in hrows.tolist() for d in heads[h].data_deps], dtype=np.uint64)
    data = data.replaced(hrows, _lists(owner.astype(np.int64), vals, len(hrows)))
    return data, ctrl, rows, heads


def _reduce_again(
    ids: np.ndarray,
    data: DepLists,
    alive: np.ndarray,
    changed: np.ndarray,
    heads: dict[int, Any],
    limit: int,
    names_fn: Callable[[], list[str]],
) -> DepLists:
    """The reduction of the merged graph (live nodes only), written back into ``data`` and the head nodes."""
    sub = np.flatnonzero(alive)
    new, ch = reduce_lists(ids[sub], data.take(sub), limit, lambda: [names_fn()[i] for i in sub.tolist()])
    rows = np.flatnonzero(ch)
    if not len(rows):
        return data
    data = data.replaced(sub[rows], new.take(rows))
    changed[sub[rows]] = True
    for h in heads:
        heads[h] = heads[h].replace(data_deps=_row(data, h))
    return data


def _edit(
    alive: np.ndarray, changed: np.ndarray, data: DepLists, ctrl: DepLists, ctrl_rows: np.ndarray, heads: dict[int, Any]
) -> Edit:
    """The record edit: dead records dropped, changed dependency fields re-encoded, heads replaced."""
    from tracekit.wire.codec import node_to_pb

    edit = Edit(keep=None if alive.all() else alive)
    is_head = np.zeros(len(alive), dtype=bool)
    is_head[list(heads)] = True
    rows = np.flatnonzero(changed & alive & ~is_head)
    for fnum, lists, r in ((FIELD_DATA_DEPS, data, rows), (FIELD_CTRL_DEPS, ctrl, ctrl_rows)):
        if len(r):
            sub = lists.take(r)
            edit.drops.append((r, fnum))
            edit.inserts.append((r, fnum, packed_fields(fnum, sub.ptr, sub.ids)))
    if heads:
        hrows = sorted(heads)
        bodies = []
        for h in hrows:
            try:
                bodies.append(node_to_pb(heads[h]).SerializeToString())
            except (TypeError, ValueError) as exc:
                raise TracekitError(f"cannot encode merged node: {exc}", node_id=heads[h].id) from None
        edit.replace_record(np.asarray(hrows, dtype=np.int64), bodies)
    return edit
