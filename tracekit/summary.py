"""Summaries of traces: node counts by type and collective, compute time, bytes by collective."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.model import CollectiveType, ExecutionTrace, NodeType

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.traceset import TraceSet


def _type_name(t: int) -> str:
    return NodeType(t).name if t in NodeType._value2member_map_ else f"UNKNOWN_{t}"


def _coll_name(t: Any) -> str:
    if t is None:
        return "MISSING"
    return CollectiveType(t).name if t in CollectiveType._value2member_map_ else f"UNKNOWN_{t}"


@dataclass(frozen=True)
class TraceSummary:
    """Summary of one rank.

    Attributes:
        nodes_by_type: NodeType name -> count.
        collectives: CollectiveType name -> count of COMM_COLL nodes.
        comm_bytes_by_collective: CollectiveType name -> summed comm_size (bytes);
            send/recv under ``SEND``/``RECV``.
        compute_ns: summed duration of COMP nodes, nanoseconds.
        steps: ``ProfilerStep#N`` markers (nodes named so with a ``range_duration_ns``
            attribute, written by the PyTorch converters) -> measured step duration, ns.
    """

    rank: int | None
    path: str | None
    version: str
    nodes: int
    data_deps: int
    ctrl_deps: int
    nodes_by_type: dict[str, int]
    collectives: dict[str, int]
    comm_bytes_by_collective: dict[str, int]
    compute_ns: int
    steps: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class TraceSetSummary:
    ranks: int
    process_groups: dict[str, list[int]]
    per_rank: list[TraceSummary] = field(default_factory=list)

    @property
    def nodes(self) -> int:
        return sum(s.nodes for s in self.per_rank)

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "nodes": self.nodes, "process_groups": self.process_groups,
                "per_rank": [asdict(s) for s in self.per_rank]}


def summarize_trace(trace: ExecutionTrace) -> TraceSummary:
    """Summary of one rank (vectorized over the node columns)."""
    cols = trace.columns()
    types = cols.types
    by_type = {_type_name(int(t)): int(c) for t, c in zip(*np.unique(types, return_counts=True))}
    comm = np.flatnonzero((types >= NodeType.COMM_SEND_NODE) & (types <= NodeType.COMM_COLL_NODE))
    collectives: Counter[str] = Counter()
    comm_bytes: Counter[str] = Counter()
    if len(comm):
        _, ctype = cols.attr("comm_type")
        _, csize = cols.attr("comm_size")
        for p in comm.tolist():
            t = int(types[p])
            key = {NodeType.COMM_SEND_NODE: "SEND", NodeType.COMM_RECV_NODE: "RECV"}.get(t) or _coll_name(ctype[p])
            if t == NodeType.COMM_COLL_NODE:
                collectives[key] += 1
            size = csize[p]
            comm_bytes[key] += int(size) if isinstance(size, (int, float)) else 0
    compute_ns = int(cols.duration_ns[types == NodeType.COMP_NODE].sum())
    steps: dict[str, int] = {}
    ranged, span = cols.attr_int("range_duration_ns")
    if ranged.any():
        names = cols.names
        for p in np.flatnonzero(ranged).tolist():
            if names[p].startswith("ProfilerStep#"):
                steps[names[p]] = int(span[p])
    return TraceSummary(rank=trace.rank, path=trace.path, version=trace.metadata.version, nodes=len(cols),
                        data_deps=len(cols.data_ids), ctrl_deps=len(cols.ctrl_ids), nodes_by_type=by_type,
                        collectives=dict(collectives), comm_bytes_by_collective=dict(comm_bytes),
                        compute_ns=compute_ns, steps=steps)


def summarize_traceset(ts: "TraceSet") -> TraceSetSummary:
    groups = {k: list(v) for k, v in ts.process_groups.items()}
    return TraceSetSummary(ranks=len(ts), process_groups=groups, per_rank=[summarize_trace(t) for t in ts])


def _summarize_file(item: tuple[int, str]) -> tuple[TraceSummary, dict[str, tuple[int, ...]]]:
    from tracekit.io import read_trace

    rank, path = item
    trace = read_trace(path, rank=rank)
    return summarize_trace(trace), trace.process_groups()


def summarize_files(pairs, *, executor: str = "serial", max_workers: int | None = None) -> TraceSetSummary:
    """:func:`summarize_traceset` over rank files, one rank in memory at a time per worker.

    Args:
        pairs: ``(rank, path)`` of every rank file (see :func:`tracekit.io.trace_paths`).

    Raises:
        TraceFormatError: a file cannot be read; ValidationError: groups disagree.
    """
    from tracekit.groups import resolve_groups
    from tracekit.parallel import parallel_map

    results = parallel_map(_summarize_file, [(r, str(p)) for r, p in pairs], executor=executor,
                           max_workers=max_workers)
    declared: dict[str, tuple[int, ...]] = {}
    for _, groups in results:
        declared.update(groups)
    world = max([s.rank or 0 for s, _ in results] + [max(r) for r in declared.values() if r], default=-1) + 1
    groups = {k: list(v) for k, v in resolve_groups(declared, world).items()}
    return TraceSetSummary(ranks=len(results), process_groups=groups, per_rank=[s for s, _ in results])
