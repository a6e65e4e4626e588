"""One rank compiled on its own (offset 0), reusable by every rank with the same nodes (issue 34).

:func:`compile_rank` runs :mod:`.rank_compile`'s passes (kinds, resources, durations, graph, chains) on one
trace; :class:`.program._RankParts` places the result at each rank's offset, so byte-identical rank files (which
share one columns object, :func:`tracekit.wire.sharing.share_identical_columns`) are compiled once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tracekit.errors import ValidationError
from tracekit.model import NodeType
from tracekit.replayer.simulation.rank_compile import (
    K_TIMED,
    chain_next,
    classify,
    compute_durations,
    resources,
)

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace
    from tracekit.replayer.simulation.compute import ComputeModel


@dataclass(frozen=True)
class RankArrays:
    """What compiling one rank's nodes gives, relative to the rank (offset 0): a function of its columns only.

    Attributes:
        kind: int8[n] node kinds; resource: int32[n] local resource index (-1: none); resource_names: by index.
        duration_ns: float64[n] replay durations; counts: per compute method, the nodes it costed.
        pred_count: int64[n] data predecessors; succ_ptr: int64[n] start of each node's successors in
            ``succ_pos`` (positions in the rank); chain: int64[n] same-resource chain delta (0: none).
    """

    kind: np.ndarray
    resource: np.ndarray
    resource_names: tuple[str, ...]
    duration_ns: np.ndarray
    counts: dict[str, int]
    pred_count: np.ndarray
    succ_ptr: np.ndarray
    succ_pos: np.ndarray
    chain: np.ndarray


def compile_rank(
    trace: "ExecutionTrace", rank: int, streams: str, model_name: str, compute: "ComputeModel"
) -> RankArrays:
    """Compile the nodes of ``trace``, the set's rank ``rank`` (kinds, resources, durations, graph, chains); see
    :class:`RankArrays`.

    Raises:
        ValidationError: duplicate node ids or a dependency cycle (names file, rank, node), a bad attribute.
        ReplayError, SpecError: as :func:`compute_durations`.
    """
    cols = trace.columns()
    graph = trace.graph()
    if len(graph.duplicate_ids):
        dup = int(graph.duplicate_ids[0])
        raise ValidationError(f"duplicate node id {dup}", path=trace.path, rank=rank, node_id=dup)
    graph.topological_order()  # raises ValidationError naming a cycle
    kind, cls, sub = classify(cols, streams, astra=model_name == "astra")
    res, names = resources(cls, sub)
    counts: dict[str, int] = {}
    dur = compute_durations(cols, kind, compute, trace, counts)
    if model_name == "astra":  # a broadcast-like collective of no runtime: 1 ns (Workload::issue_comm)
        dur[(kind == K_TIMED) & (cols.types == NodeType.COMM_COLL_NODE) & (dur == 0)] = 1
    chain = chain_next(kind, res, graph)
    return RankArrays(
        kind,
        res,
        names,
        dur,
        counts,
        np.diff(graph.pred_ptr),
        graph.succ_ptr[:-1],
        graph.succ_pos,
        np.where(chain >= 0, chain - np.arange(len(kind)), 0),
    )
