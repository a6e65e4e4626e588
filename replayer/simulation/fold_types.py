"""What a fold proof reads of a rank and produces, and how it refuses (:mod:`.folding`), shared with :mod:`.fold_p2p` and :mod:`.scan_tables`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FoldedInstance:
    """One instance of the folded program: nodes ``(representative rank, position)``."""

    kind: str
    comm_type: int | None
    comm_bytes: int
    pg_name: str
    ranks: tuple[int, ...]
    nodes: list[tuple[int, int]]
    seq: int
    link_ranks: tuple[int, ...]


class NotFoldable(Exception):
    """Folding cannot be proven; ``args[0]`` says why."""


@dataclass
class RankScan:
    """What folding needs of one rank (small; the trace itself may be dropped).

    Attributes:
        rank, path, n: the rank, its file and node count.
        digest: hash of everything rank-local the replay reads (module doc, point 1).
        ids: uint64[n] node ids (kept only for communication nodes' rows: see ``comm_ids``).
        coll: per group name, int64 positions of its collectives in topological order.
        coll_attr: position -> (comm_type, comm_size) of collectives.
        sends, recvs: (peer, tag) -> positions in topological order.
        p2p_attr: position -> (comm_size, pg_name) of sends/recvs.
        comm_count: communication nodes in the rank.
        comm_ids: position -> node id of communication nodes.
    """

    rank: int
    path: str | None
    n: int
    digest: bytes
    coll: dict[str, list[int]]
    coll_attr: dict[int, tuple[int, int]]
    sends: dict[tuple[int, int], list[int]]
    recvs: dict[tuple[int, int], list[int]]
    p2p_attr: dict[int, tuple[int, str]]
    comm_count: int
    comm_ids: dict[int, int]
    uneven: bool = False  # an all-to-all carries per-peer sizes (tracekit.model.uneven): its cost needs every member
    splits: dict[int, Any] = field(default_factory=dict)  # position -> those sizes (fold_uneven.SplitAttrs)
