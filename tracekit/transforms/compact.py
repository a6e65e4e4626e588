"""Compaction: fewer nodes and dependencies, same replay.

Two rewrites, both exact for the replayer's semantics (docs/design.md section 4;
a node starts when its data dependencies are done and its resource is free,
the resource taking waiting nodes in file order):

1. **Transitive reduction of data dependencies.**  A dependency ``u -> v`` is
   dropped when ``v`` also depends on some ``w`` that (transitively) depends
   on ``u``: ``w`` cannot finish before ``u`` has, so ``v``'s start time is
   unchanged.  Exact for graphs up to :data:`FULL_REDUCTION_LIMIT` nodes (a
   pruned reachability search per node with two or more dependencies,
   :func:`tracekit.transforms._deplists.redundant_by_search`); above it only
   deps implied through one intermediate dependency are dropped.
2. **Chain merging.**  COMP nodes ``a -> b`` where ``b``'s only data
   dependency is ``a``, ``a``'s only dependant is ``b``, both run on the same
   resource (host thread ``tid`` for ``is_cpu_op`` nodes, else compute
   ``stream``), and that resource is *serial* (every node on it, in file
   order, directly depends on the previous one: then nodes on it run in file
   order and ``a``, ``b`` run back to back) become one node with the summed
   ``duration_ns``.  Only nodes without FLOPs or bytes (``num_ops``,
   ``tensor_size``) merge: every later timing of a node with a cost (roofline,
   ``replay --compute projected|auto``, ``transform --retarget``) is a
   nonlinear function of that cost and its op class (a roofline of summed
   FLOPs and bytes is not the sum of rooflines; a CPU -> GPU projection
   replaces a priced node's measured time by its model time, so a priced node
   merged with unpriced ones lost their measured time: the gloo ``single``
   capture replayed on dgx-h100 with ``--compute auto`` took 2.988 ms before
   and 0.542 ms after compaction, issue 27), so a node with a cost stays as it
   is and any replay of the compacted set equals the replay before.  The merged node
   keeps the first node's id, name and attributes and gets ``merged_nodes``
   (int64, how many nodes it stands for) and ``merged_node_ids`` (int64 list,
   the ids of the input nodes it stands for, in order: the provenance map
   that ``tracekit diff`` uses to compare a compacted replay with the original).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence, cast

from tracekit.model.attrs import NUM_OPS, TENSOR_SIZE, TID
from tracekit.errors import ConfigError
from tracekit.model import ExecutionTrace, Node, NodeType
from tracekit.transforms.base import Transform, map_traces
from tracekit.transforms.colcompact import CompactStats

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from tracekit.sets.traceset import TraceSet

FULL_REDUCTION_LIMIT = 40_000


def _topo_positions(nodes: Sequence[Node]) -> list[int]:
    """Positions in a topological order (file order when deps point backwards)."""
    from tracekit.model.graph import NodeColumns, DepGraph

    g = DepGraph(NodeColumns.from_nodes(nodes))
    order: list[int] = g.topological_order().tolist()
    return order


def reduce_dependencies(nodes: Sequence[Node]) -> list[Node]:
    """Nodes with transitively redundant data deps dropped (see module docstring); others shared."""
    n = len(nodes)
    pos_of = {node.id: i for i, node in enumerate(nodes)}
    deps = [[pos_of[d] for d in dict.fromkeys(node.data_deps) if d in pos_of] for node in nodes]
    order = _topo_positions(nodes)
    keep: list[list[int] | None] = [None] * n
    if n <= FULL_REDUCTION_LIMIT:
        import numpy as np

        from tracekit.transforms._deplists import redundant_by_search as _search

        # the compiled kernel is unannotated (numba's subset); its signature, from its docstring:
        redundant_by_search = cast("Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]", _search)
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum([len(ds) for ds in deps], out=ptr[1:])
        flat = np.fromiter((d for ds in deps for d in ds), dtype=np.int64, count=int(ptr[-1]))
        red = redundant_by_search(ptr, flat, np.asarray(order, dtype=np.int64)).tolist()
        ptr_l = ptr.tolist()
        for v in range(n):
            keep[v] = [d for k, d in enumerate(deps[v]) if not red[ptr_l[v] + k]]
    else:
        for v in order:
            ds = deps[v]
            via = set()
            for d in ds:
                via.update(deps[d])
            keep[v] = [d for d in ds if d not in via]
    out = []
    for i, node in enumerate(nodes):
        kept = keep[i]
        if kept is not None and len(kept) != len(node.data_deps):
            ids = {nodes[d].id for d in kept}
            out.append(node.replace(data_deps=[d for d in dict.fromkeys(node.data_deps) if d in ids]))
        else:
            out.append(node)
    return out


def _resource(node: Node) -> tuple[Any, ...] | None:
    if node.type != NodeType.COMP_NODE:
        return None
    if node.is_cpu_op:
        return ("host", TID.of(node) or 0)
    return ("stream", node.stream or 0)


def _has_work(node: Node) -> bool:
    return bool((node.num_ops or 0) > 0 or (node.tensor_bytes or 0) > 0)


def merge_chains(nodes: Sequence[Node]) -> Sequence[Node]:
    """Nodes with mergeable COMP chains merged (see module docstring)."""
    n = len(nodes)
    pos_of = {node.id: i for i, node in enumerate(nodes)}
    res = [_resource(node) for node in nodes]
    # serial resources: each node depends directly on the previous node of its resource
    last: dict[Any, int] = {}
    serial: dict[Any, bool] = {}
    for i, node in enumerate(nodes):
        r = res[i]
        if r is None:
            continue
        if r in last:
            prev_id = nodes[last[r]].id
            if prev_id not in node.data_deps:
                serial[r] = False
        serial.setdefault(r, True)
        last[r] = i
    succ_count = [0] * n
    for node in nodes:
        for d in set(node.data_deps):
            p = pos_of.get(d)
            if p is not None:
                succ_count[p] += 1
    head_of = list(range(n))  # position -> position of the chain head it merges into
    merged_into: dict[int, list[int]] = {}
    work = [_has_work(node) for node in nodes]
    for j, node in enumerate(nodes):
        r = res[j]
        if r is None or not serial.get(r) or len(node.data_deps) != 1:
            continue
        prev_pos = pos_of.get(node.data_deps[0])
        if prev_pos is None or res[prev_pos] != r or succ_count[prev_pos] != 1:
            continue
        if work[j] or work[prev_pos]:
            continue
        h = head_of[prev_pos]
        merged_into.setdefault(h, [h]).append(j)
        head_of[j] = h
    if not merged_into:
        return nodes
    absorbed = {j: h for h, group in merged_into.items() for j in group[1:]}
    id_of_head = {nodes[j].id: nodes[h].id for j, h in absorbed.items()}
    out: list[Node] = []
    for i, node in enumerate(nodes):
        if i in absorbed:
            continue
        if i in merged_into:
            group = [nodes[m] for m in merged_into[i]]
            c = node.replace(duration_ns=sum(m.duration_ns for m in group))
            for key in (NUM_OPS, TENSOR_SIZE):
                nums = [v for v in (key.of(m) for m in group) if v is not None]
                if nums:
                    c = c.with_attr(key, sum(nums))
            c = c.with_attr("merged_nodes", len(group), "int64_val")
            sources = [s for m in group for s in (m.get_attr("merged_node_ids") or [m.id])]
            c = c.with_attr("merged_node_ids", [int(s) for s in sources], "int64_list")
            ctrl: dict[int, None] = dict.fromkeys(c.ctrl_deps)
            for m in group[1:]:
                ctrl.update(dict.fromkeys(m.ctrl_deps))
            node = c.replace(ctrl_deps=[d for d in dict.fromkeys(id_of_head.get(d, d) for d in ctrl) if d != c.id])
        if any(d in id_of_head for d in node.data_deps) or any(d in id_of_head for d in node.ctrl_deps):
            node = node.replace(
                data_deps=list(dict.fromkeys(id_of_head.get(d, d) for d in node.data_deps)),
                ctrl_deps=list(
                    dict.fromkeys(id_of_head.get(d, d) for d in node.ctrl_deps if id_of_head.get(d, d) != node.id)
                ),
            )
        out.append(node)
    return out


def compact_trace(
    trace: ExecutionTrace, *, merge: bool = True, reduce: bool = True
) -> tuple[ExecutionTrace, CompactStats]:
    """One rank compacted, with its before/after sizes.

    A trace holding encoded records (read from a file, or written by another columnar
    transform) is compacted on columns (:func:`tracekit.transforms.colcompact.compact_encoded`);
    a trace built in memory node by node.

    Raises:
        ValidationError: a dependency cycle.
    """
    from tracekit.transforms.colcompact import compact_encoded
    from tracekit.transforms.colscale import is_encoded

    if is_encoded(trace):
        done = compact_encoded(trace, merge=merge, reduce=reduce, limit=FULL_REDUCTION_LIMIT)
        if done is not None:
            return done
    nodes = trace.nodes
    deps_before = sum(len(n.data_deps) for n in nodes)
    out: Sequence[Node] = nodes
    if reduce:
        out = reduce_dependencies(out)
    if merge:
        out = merge_chains(out)
        if reduce:
            out = reduce_dependencies(out)
    stats = CompactStats(len(nodes), len(out), deps_before, sum(len(n.data_deps) for n in out))
    if out is nodes:
        return trace, stats
    return trace.with_nodes(out), stats


@dataclass(frozen=True)
class Compact(Transform):
    """Merge COMP chains and drop transitively redundant data dependencies (module docstring).

    Args:
        merge: merge chains (default True).
        reduce: transitive reduction (default True).

    Raises:
        ConfigError: both disabled.
    """

    merge: bool = True
    reduce: bool = True

    def __post_init__(self) -> None:
        if not (self.merge or self.reduce):
            raise ConfigError("Compact with merge=False and reduce=False does nothing")

    def apply(self, traceset: TraceSet) -> TraceSet:
        """Every rank compacted (:func:`compact_trace`): fewer nodes and data dependencies, same ranks and groups.

        Raises:
            ValidationError: a rank's data dependencies have a cycle (names the nodes), or a merged node's
                ``num_ops``/``tensor_size`` breaks the integer rule.
        """
        return map_traces(traceset, lambda t: compact_trace(t, merge=self.merge, reduce=self.reduce)[0])

    def apply_with_stats(self, traceset: TraceSet) -> tuple[TraceSet, dict[int, CompactStats]]:
        """``(new trace set, {rank: CompactStats})``."""
        stats: dict[int, CompactStats] = {}
        out: dict[int, ExecutionTrace] = {}
        for rank, trace in traceset.items():
            out[rank], stats[rank] = compact_trace(trace, merge=self.merge, reduce=self.reduce)
        return traceset.with_traces(out, traceset.process_groups), stats


__all__ = ["Compact", "CompactStats", "compact_trace", "merge_chains", "reduce_dependencies"]
