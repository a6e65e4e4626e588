"""Rank placement: where each rank sits in the network, and what a group spans.

Ranks map to coordinates with dimension 0 varying fastest, as ASTRA-sim
numbers NPUs (its ``translate_id_to_address``: npu 47 on 2 x 8 x 4 is
``[1, 7, 2]``)::

    coord[0] = rank % size[0]
    coord[i] = (rank // (size[0] * ... * size[i-1])) % size[i]

A process group (a tuple of ranks) then spans the dimensions on which its
members' coordinates differ.  A group is *regular* when it is the product of
its per-dimension coordinate sets (every combination is a member), so a
hierarchical algorithm can run dimension by dimension; otherwise cost models
treat it as one flat group on the outermost dimension it spans.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tracekit.errors import SpecError


@dataclass(frozen=True)
class GroupPlacement:
    """How a process group lies on the network.

    Attributes:
        ranks: the group's ranks as given.
        dims: indices of the dimensions the group spans (more than one
            distinct coordinate), innermost first.
        sizes: number of distinct coordinates on each of ``dims``.
        coords: per spanned dimension, the sorted distinct coordinates.
        regular: the group is the full product of its coordinate sets.
    """

    ranks: tuple[int, ...]
    dims: tuple[int, ...]
    sizes: tuple[int, ...]
    coords: tuple[tuple[int, ...], ...]
    regular: bool

    @property
    def size(self) -> int:
        """Number of ranks in the group."""
        return len(self.ranks)

    @property
    def outermost_dim(self) -> int | None:
        """Index of the outermost spanned dimension (None: the group sits at one coordinate, e.g. one rank)."""
        return self.dims[-1] if self.dims else None


def rank_coords(rank: int, dim_sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Coordinates of ``rank`` on dimensions of ``dim_sizes`` (dimension 0 fastest).

    Raises:
        SpecError: the rank is outside ``0 .. prod(dim_sizes) - 1``.
    """
    world = math.prod(dim_sizes)
    if not 0 <= rank < world:
        raise SpecError(f"rank {rank} is outside the {world} ranks of the network ({' x '.join(map(str, dim_sizes))})")
    coords = []
    for size in dim_sizes:
        coords.append(rank % size)
        rank //= size
    return tuple(coords)


def place_group(group: tuple[int, ...], dim_sizes: tuple[int, ...]) -> GroupPlacement:
    """The dimensions a group spans and its size on each.

    Example: on 8 x 4 (8 GPUs per node, 4 nodes), group ``(0, 8, 16, 24)``
    spans dimension 1 with size 4; group ``range(32)`` spans (0, 1) with
    sizes (8, 4); group ``(0, 9)`` spans both with sizes (2, 2) and is not
    regular.

    Raises:
        SpecError: a rank is outside the network, or repeated in the group.
    """
    ranks = tuple(int(r) for r in group)
    if len(set(ranks)) != len(ranks):
        raise SpecError(f"process group {list(ranks)} lists a rank twice")
    all_coords = [rank_coords(r, dim_sizes) for r in ranks]
    dims, sizes, coord_sets = [], [], []
    for d in range(len(dim_sizes)):
        values = sorted({c[d] for c in all_coords})
        if len(values) > 1:
            dims.append(d)
            sizes.append(len(values))
            coord_sets.append(tuple(values))
    regular = math.prod(sizes) == len(ranks)
    return GroupPlacement(ranks, tuple(dims), tuple(sizes), tuple(coord_sets), regular)


class GroupPlacer:
    """Caches :func:`place_group` for one network shape (base of the collective cost models)."""

    def __init__(self, dim_sizes: tuple[int, ...]) -> None:
        self._sizes = tuple(dim_sizes)
        self._placements: dict[tuple[int, ...], GroupPlacement] = {}

    def placement(self, group: tuple[int, ...]) -> GroupPlacement:
        """The placement of ``group`` (ranks) on the network's dimensions, cached.

        Raises:
            SpecError: a rank is outside the network, or repeated in the group.
        """
        key = tuple(group)
        found = self._placements.get(key)
        if found is None:
            found = self._placements[key] = place_group(key, self._sizes)
        return found


def p2p_dimension(src: int, dst: int, dim_sizes: tuple[int, ...]) -> int | None:
    """The outermost dimension on which ``src`` and ``dst`` differ (None if equal).

    A message between two ranks is costed on that dimension: it is the
    slowest link the message must cross in a hierarchical network.

    Raises:
        SpecError: ``src`` or ``dst`` is outside ``0 .. prod(dim_sizes) - 1``.
    """
    a, b = rank_coords(src, dim_sizes), rank_coords(dst, dim_sizes)
    differing = [d for d in range(len(dim_sizes)) if a[d] != b[d]]
    return differing[-1] if differing else None


def ring_distance(a: int, b: int, size: int) -> int:
    """Hops between positions ``a`` and ``b`` on a bidirectional ring of ``size``: the shorter way."""
    d = abs(a - b) % size
    return min(d, size - d)


def hops(topology: str, a: int, b: int, size: int) -> int:
    """Hops a message takes between coordinates ``a`` and ``b`` of one dimension.

    ``ring``: the shorter way round; ``fully_connected``: 1; ``switch``: 1
    for our alpha-beta models (``latency_ns`` is end to end through the
    switch; the ASTRA-sim model counts 2, see :mod:`.astra_model`).
    """
    if topology == "ring":
        return ring_distance(a, b, size)
    return 1


def ring_neighbor_hops(topology: str, coords: tuple[int, ...], size: int) -> int:
    """Largest hop count between consecutive members of a logical ring over ``coords``.

    For a contiguous group on a ring topology this is 1; for a strided group
    (every other rank) it is the stride.
    """
    if len(coords) < 2:
        return 0
    pairs = zip(coords, coords[1:] + coords[:1])
    return max(hops(topology, a, b, size) for a, b in pairs)


def farthest_hops(topology: str, coords: tuple[int, ...], size: int) -> int:
    """Largest hop count between any two members (the direct algorithm's slowest peer)."""
    if len(coords) < 2:
        return 0
    return max(hops(topology, a, b, size) for a in coords for b in coords if a != b)
