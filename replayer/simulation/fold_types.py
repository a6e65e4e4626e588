"""What a fold proof produces and how it refuses (:mod:`.folding`), shared with :mod:`.fold_p2p`."""

from __future__ import annotations

from dataclasses import dataclass


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
