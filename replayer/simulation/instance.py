"""One communication instance of a compiled program (:mod:`.program`), found by :mod:`.matching`."""

from __future__ import annotations

from dataclasses import dataclass

from tracekit.replayer.simulation.collectives import CommCost


@dataclass(slots=True)
class Instance:
    """One communication: a collective on a group, or a matched send/recv pair.

    Attributes:
        kind: ``collective`` or ``p2p``.
        comm_type: CollectiveType number (None for p2p).
        comm_bytes: bytes (``comm_size`` of the lowest-ranked member's node).
        pg_name: process group (p2p: the send's ``pg_name`` or ``"0"``).
        ranks: the members, ascending (p2p: ``(src, dst)``).
        nodes: global node index per member (-1: the member never issues it).
        seq: k for collectives (the k-th on its group), the tag for p2p.
        cost: filled in by :meth:`ReplayProgram.cost_of`.
        link_ranks: whose links the data phase loads, when not ``ranks``
            (a folded program: each member's class representative; see :mod:`.folding`).
    """

    kind: str
    comm_type: int | None
    comm_bytes: int
    pg_name: str
    ranks: tuple[int, ...]
    nodes: list[int]
    seq: int
    cost: CommCost | None = None
    link_ranks: tuple[int, ...] | None = None
