"""Collective cost models: the interface the engine calls, and the alpha-beta model.

The replay engine asks a :class:`CollectiveModel` what one collective (or
one send/recv) costs and gets a :class:`CommCost`: a fixed part (latencies,
endpoint delays, local reductions) plus the bytes each member rank injects
into each network dimension.  The engine shares a dimension's per-rank
bandwidth among the transfers running on it at the same time, so
``time_alone_ns`` (fixed part + bytes / bandwidth) is the time when nothing
else runs.  :func:`make_collective_model` picks the model a spec names:

- ``alpha_beta`` (this module): Hockney's model per algorithm, composed
  hierarchically over network dimensions;
- ``astra`` (:mod:`.astra_model`): ASTRA-sim's analytical congestion-unaware
  backend, to the nanosecond;
- ``nccl`` (:mod:`.nccl_model`): NCCL's tuner (latency + bytes / bandwidth
  per algorithm and protocol, fastest wins).

``comm_bytes`` is Chakra's ``comm_size``: the size of each rank's **input**
buffer.  For all-gather that is one rank's piece (the output is ``p`` times
larger; ASTRA-sim's convention, "C per rank in"); for reduce-scatter the full
buffer (the output is ``1/p`` of it); for all-to-all the whole send buffer
(``n/p`` to each peer); for gather and scatter one rank's piece.

Alpha-beta formulas, one dimension, ``p`` ranks, message latency ``a``,
bandwidth ``B`` (bytes/ns), ``L = ceil(log2 p)``; the second term is
``wire bytes / B``.  Sources: Thakur, Rabenseifner and Gropp, "Optimization
of collective communication operations in MPICH" (IJHPCA 2005); Patarasuk
and Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
workstations" (JPDC 2009); Sanders, Speck and Traeff, "Two-tree algorithms
for full bandwidth broadcast, reduction and scan" (Parallel Computing 2009)
for the double binary tree.

=================  ======================  ==========================  =========================
collective         ring                    direct                      halving_doubling
=================  ======================  ==========================  =========================
all_reduce         2(p-1)a + 2(p-1)/p n/B  2a + 2(p-1)/p n/B           2La + 2(p-1)/p n/B
reduce_scatter     (p-1)a + (p-1)/p n/B    a + (p-1)/p n/B             La + (p-1)/p n/B
all_gather         (p-1)a + (p-1) n/B      a + (p-1) n/B               La + (p-1) n/B
all_to_all         (p-1)a + (p-1)/2 n/B    a + (p-1)/p n/B             La + L/2 n/B  (Bruck)
broadcast, reduce  (p-1)a + n/B  (chain)   a + (p-1) n/B  (root)       2La + 2(p-1)/p n/B
gather, scatter    (p-1)a + (p-1) n/B      a + (p-1) n/B               La + (p-1) n/B
=================  ======================  ==========================  =========================

``double_binary_tree`` (all_reduce, broadcast, reduce): ``2La + n/B`` for
all-reduce (pipelined: reduce up one tree half, broadcast down), ``La + n/B``
for broadcast and reduce.  Barrier: dissemination, ``La``, no bytes.  With
``p`` not a power of two, ``L`` rounds up (an approximation for
halving-doubling).  ``a`` is ``latency_ns`` times the hops of the longest
step: ring neighbours for ``ring``, the farthest member otherwise (both 1 on
switch and fully connected dimensions).

Hierarchical composition over the dimensions a regular group spans
(innermost ``d0`` first, sizes ``p0 .. pk``): all-reduce = reduce-scatter on
``d0 .. d(k-1)`` (each on the previous phase's output), all-reduce on ``dk``
on ``n / (p0 ... p(k-1))`` bytes, all-gather back out from ``d(k-1)`` to
``d0``; reduce-scatter goes inward first, all-gather outermost first (the
slowest link carries the smallest piece), gather inner first, all-to-all,
broadcast, reduce and barrier run once per dimension on the full buffer.
Phases run one after another; each phase uses its dimension's algorithm for
its own collective.  A group that is not regular (see :mod:`.placement`) runs
flat on the outermost dimension it spans with ``p = len(group)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tracekit.errors import ReplayError, SpecError
from tracekit.model import CollectiveType

from tracekit.replayer.simulation.placement import (
    GroupPlacement,
    GroupPlacer,
    farthest_hops,
    hops,
    p2p_dimension,
    rank_coords,
    ring_neighbor_hops,
)

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.hardware import HardwareSpec, NetworkDim


@dataclass(frozen=True)
class CommCost:
    """What one collective or point-to-point transfer costs.

    Attributes:
        fixed_ns: time that does not depend on the bandwidth share: latencies,
            endpoint delays, local reductions, ns.
        wire_bytes: ``((dimension index, bytes), ...)``: bytes each member
            rank injects into that dimension (the busiest member's, for
            rooted collectives).
        algorithm: label, e.g. ``ring``, ``hierarchical(ring,ring)``,
            ``astra:ring``, ``nccl:tree/LL128``.
        shares_bandwidth: False for models whose time is all in ``fixed_ns``
            (ASTRA-sim's congestion-unaware backend); ``wire_bytes`` is then empty.
        member_ns: when members finish at different times (ASTRA-sim's double
            binary tree), each member's finish in ns after the transfer starts, in
            the group's order (ascending ranks), the largest equal to ``fixed_ns``;
            empty: every member finishes at ``time_alone_ns``.  Only with
            ``shares_bandwidth=False``.
    """

    fixed_ns: float
    wire_bytes: tuple[tuple[int, float], ...]
    algorithm: str
    shares_bandwidth: bool = True
    member_ns: tuple[float, ...] = ()

    def time_alone_ns(self, spec: "HardwareSpec") -> float:
        """``fixed_ns + sum(bytes / bandwidth of the dimension)``: the time when nothing else runs, ns.

        Args:
            spec: the spec whose dimensions ``wire_bytes`` index (bandwidth in bytes/ns = GB/s).
        """
        total = self.fixed_ns
        if self.shares_bandwidth:
            for dim, nbytes in self.wire_bytes:
                total += nbytes / spec.network[dim].bandwidth_bytes_per_ns
        return total


ZERO_COST = CommCost(0.0, (), "none")


class UnsupportedCollectiveError(ReplayError):
    """A cost model has no formula for this collective.

    The ASTRA-sim-compatible model raises it for broadcast, reduce, gather,
    scatter and barrier, which ASTRA-sim's system layer does not simulate
    (ASTRA-sim replays them with the node's measured duration instead; an
    engine that wants the same behaviour catches this error and does so).
    """


def check_replayable(
    exc: UnsupportedCollectiveError, comm_type: int | None, comm_bytes: int, durations_ns: list[int], where: dict
) -> None:
    """Refuse a collective the model has no formula for (``exc``) when none of its members has a measured duration
    to replay: ASTRA-sim replays a broadcast for its recorded duration (1 ns when zero, and so does the
    astra-compatible model), but it issues nothing for reduce, gather, scatter and barrier (no rank finishes), so
    such a collective without a duration is refused, never priced at 1 ns (issue 32).

    Raises:
        ReplayError: as above; ``where`` (``path``, ``rank``, ``node_id``) locates the first member.
    """
    kind = CollectiveType(comm_type).name if comm_type is not None else "send/recv"
    if kind != "BROADCAST" and not any(d > 0 for d in durations_ns):
        raise ReplayError(
            f"{exc.message}; this {kind} of {comm_bytes:,} B has no measured duration to replay, so the model "
            "cannot time it: choose --collective-model alpha_beta or nccl",
            **where,
        )


class CollectiveModel(Protocol):
    """What the engine calls to cost communication."""

    def collective_cost(self, comm_type: CollectiveType, comm_bytes: int, group: tuple[int, ...]) -> CommCost:
        """Cost of one collective of ``comm_bytes`` (input bytes per rank) on ``group``.

        Args:
            comm_type: the Chakra collective type.
            comm_bytes: Chakra ``comm_size``, each rank's input buffer, bytes.
            group: the process group's ranks, ascending.

        Returns:
            the :class:`CommCost` (times in ns, wire bytes per dimension).

        Raises:
            SpecError: a rank outside the spec, or an algorithm that cannot run the collective.
            ReplayError: negative ``comm_bytes`` or an unknown collective type.
            UnsupportedCollectiveError: the model has no formula for this collective.
        """

    def p2p_cost(self, comm_bytes: int, src: int, dst: int) -> CommCost:
        """Cost of one message of ``comm_bytes`` from ``src`` to ``dst``.

        Args:
            comm_bytes: message size, bytes.
            src, dst: sending and receiving ranks.

        Returns:
            the :class:`CommCost` (times in ns; zero for ``src == dst``).

        Raises:
            SpecError: a rank outside the spec.
            ReplayError: negative ``comm_bytes``.
        """


def check_comm_bytes(comm_bytes: int) -> int:
    """``comm_bytes`` (bytes) as an int.

    Raises:
        ReplayError: ``comm_bytes`` is negative.
    """
    value = int(comm_bytes)
    if value < 0:
        raise ReplayError(f"communication size must not be negative, got {comm_bytes}")
    return value


def log2_ceil(p: int) -> int:
    """``ceil(log2 p)`` for p >= 1."""
    return (p - 1).bit_length()


@dataclass(frozen=True)
class Phase:
    """One single-dimension step of a (possibly hierarchical) collective.

    Attributes:
        fixed_ns: latency part (``a`` terms of the module table), ns.
        wire_bytes: bytes each member injects into the dimension (the ``n/B`` terms' numerators).
    """

    fixed_ns: float
    wire_bytes: float


def phase_cost(kind: str, algorithm: str, n: float, p: int, alpha_ns: float) -> Phase:
    """Alpha-beta cost of one collective on one dimension (see the module table).

    Args:
        kind: collective key (``all_reduce`` ...) or ``barrier``.
        algorithm: ``ring``, ``direct``, ``halving_doubling`` or ``double_binary_tree``.
        n: input bytes per rank.
        p: ranks taking part on this dimension.
        alpha_ns: latency of one step's message, ns.

    Returns:
        the :class:`Phase` (zero for ``p <= 1``).  Formulas: Thakur, Rabenseifner and Gropp 2005;
        Patarasuk and Yuan 2009; Sanders, Speck and Traeff 2009 (double binary tree).

    Raises:
        SpecError: the algorithm cannot run that collective.
    """
    if p <= 1:
        return Phase(0.0, 0.0)
    L = log2_ceil(p)
    a = alpha_ns
    frac = (p - 1) / p
    if kind == "barrier":
        return Phase(L * a, 0.0)
    table: dict[tuple[str, str], tuple[float, float]] = {
        ("all_reduce", "ring"): (2 * (p - 1) * a, 2 * frac * n),
        ("all_reduce", "direct"): (2 * a, 2 * frac * n),
        ("all_reduce", "halving_doubling"): (2 * L * a, 2 * frac * n),
        ("all_reduce", "double_binary_tree"): (2 * L * a, n),
        ("reduce_scatter", "ring"): ((p - 1) * a, frac * n),
        ("reduce_scatter", "direct"): (a, frac * n),
        ("reduce_scatter", "halving_doubling"): (L * a, frac * n),
        ("all_gather", "ring"): ((p - 1) * a, (p - 1) * n),
        ("all_gather", "direct"): (a, (p - 1) * n),
        ("all_gather", "halving_doubling"): (L * a, (p - 1) * n),
        ("all_to_all", "ring"): ((p - 1) * a, (p - 1) / 2 * n),
        ("all_to_all", "direct"): (a, frac * n),
        ("all_to_all", "halving_doubling"): (L * a, L / 2 * n),
        ("broadcast", "ring"): ((p - 1) * a, n),
        ("broadcast", "direct"): (a, (p - 1) * n),
        ("broadcast", "halving_doubling"): (2 * L * a, 2 * frac * n),
        ("broadcast", "double_binary_tree"): (L * a, n),
        ("gather", "ring"): ((p - 1) * a, (p - 1) * n),
        ("gather", "direct"): (a, (p - 1) * n),
        ("gather", "halving_doubling"): (L * a, (p - 1) * n),
    }
    mirror = {"reduce": "broadcast", "scatter": "gather"}
    key = (mirror.get(kind, kind), algorithm)
    if key not in table:
        raise SpecError(f"algorithm {algorithm!r} cannot run {kind}")
    fixed, nbytes = table[key]
    return Phase(fixed, nbytes)


def _alpha_ns(dim: "NetworkDim", algorithm: str, coords: tuple[int, ...]) -> float:
    if algorithm == "ring":
        h = ring_neighbor_hops(dim.topology, coords, dim.size)
    else:
        h = farthest_hops(dim.topology, coords, dim.size)
    return dim.latency_ns * h


def collective_kind(comm_type: CollectiveType | int) -> str:
    """Spec key of a collective type (``barrier`` for BARRIER).

    Raises:
        ReplayError: not a Chakra collective type.
    """
    from tracekit.replayer.simulation.hardware import collective_key

    try:
        ct = CollectiveType(int(comm_type))
    except ValueError:
        raise ReplayError(f"unknown collective type {comm_type!r}") from None
    return "barrier" if ct == CollectiveType.BARRIER else collective_key(ct)


class AlphaBetaModel(GroupPlacer):
    """Hockney alpha-beta costs per algorithm, hierarchical over dimensions (see module doc)."""

    def __init__(self, spec: "HardwareSpec") -> None:
        super().__init__(spec.dim_sizes)
        self.spec = spec

    def collective_cost(self, comm_type: CollectiveType, comm_bytes: int, group: tuple[int, ...]) -> CommCost:
        """Alpha-beta cost; see the module docstring for the formulas.

        Raises:
            SpecError: a rank outside the spec, or an algorithm that cannot run the collective.
            ReplayError: negative ``comm_bytes`` or unknown collective type.
        """
        kind = collective_kind(comm_type)
        n = float(check_comm_bytes(comm_bytes))
        pl = self.placement(group)
        if not pl.dims:
            return CommCost(0.0, (), "local")
        net = self.spec.network
        if not pl.regular:
            d = pl.dims[-1]
            dim = net[d]
            alg = "ring" if kind == "barrier" else dim.algorithm(kind)
            ph = phase_cost(kind, alg, n, pl.size, _alpha_ns(dim, alg, pl.coords[-1]))
            return CommCost(ph.fixed_ns, ((d, ph.wire_bytes),), f"flat:{alg}")
        steps = hierarchical_steps(kind, n, pl, self.spec)
        fixed = 0.0
        per_dim: dict[int, float] = {}
        for d, step_kind, alg, nbytes, p, coords in steps:
            ph = phase_cost(step_kind, alg, nbytes, p, _alpha_ns(net[d], alg, coords))
            fixed += ph.fixed_ns
            per_dim[d] = per_dim.get(d, 0.0) + ph.wire_bytes
        wire = tuple(sorted((d, b) for d, b in per_dim.items()))
        if len(pl.dims) == 1:
            label = steps[0][2]
        else:
            label = "hierarchical(" + ",".join(_dim_label(kind, d, steps) for d in pl.dims) + ")"
        return CommCost(fixed, wire, label)

    def p2p_cost(self, comm_bytes: int, src: int, dst: int) -> CommCost:
        """``a + n/B`` on the outermost dimension where ``src`` and ``dst`` differ.

        ``a`` is the dimension's ``latency_ns`` times the hops between them
        (ring distance on a ring topology), ``n`` is ``comm_bytes`` (bytes) and
        ``B`` the dimension's bandwidth (bytes/ns).  Same rank: zero cost.

        Raises:
            SpecError: a rank outside the spec.
            ReplayError: negative ``comm_bytes``.
        """
        return p2p_alpha_beta(self.spec, comm_bytes, src, dst)


def p2p_alpha_beta(spec: "HardwareSpec", comm_bytes: int, src: int, dst: int) -> CommCost:
    """Point-to-point cost ``a + n/B`` of ``comm_bytes`` bytes from ``src`` to ``dst`` (see :meth:`AlphaBetaModel.p2p_cost`).

    Raises:
        SpecError: a rank outside the spec.
        ReplayError: negative ``comm_bytes``.
    """
    n = float(check_comm_bytes(comm_bytes))
    sizes = spec.dim_sizes
    d = p2p_dimension(src, dst, sizes)
    if d is None:
        return CommCost(0.0, (), "local")
    dim = spec.network[d]
    h = hops(dim.topology, rank_coords(src, sizes)[d], rank_coords(dst, sizes)[d], dim.size)
    return CommCost(dim.latency_ns * h, ((d, n),), "p2p")


def _dim_label(kind: str, d: int, steps: list) -> str:
    algs = [s[2] for s in steps if s[0] == d]
    return algs[0] if algs else "?"


def hierarchical_steps(kind: str, n: float, pl: GroupPlacement, spec: "HardwareSpec") -> list:
    """The phases of a collective over a regular group's dimensions, in order.

    Args:
        kind: collective key (``all_reduce`` ...) or ``barrier``.
        n: input bytes per rank.
        pl: the group's placement (must be ``regular``).
        spec: the spec whose dimensions' algorithms the phases use.

    Returns:
        list of ``(dimension, phase kind, algorithm, input bytes per rank,
        ranks on the dimension, member coordinates on it)``.

    Raises:
        KeyError: a dimension's ``algorithms`` table has no entry for a phase's collective
            (specs read by :mod:`.spec_toml` always have every key).
    """
    net = spec.network
    dims = list(zip(pl.dims, pl.sizes, pl.coords))

    def alg(d: int, k: str) -> str:
        """The algorithm of collective ``k`` on dimension ``d`` (``ring`` for a barrier)."""
        return "ring" if k == "barrier" else net[d].algorithm(k)

    steps = []
    if kind == "all_reduce":
        size = n
        for d, p, c in dims[:-1]:
            steps.append((d, "reduce_scatter", alg(d, "reduce_scatter"), size, p, c))
            size /= p
        d, p, c = dims[-1]
        steps.append((d, "all_reduce", alg(d, "all_reduce"), size, p, c))
        for d, p, c in reversed(dims[:-1]):
            steps.append((d, "all_gather", alg(d, "all_gather"), size, p, c))
            size *= p
    elif kind == "reduce_scatter":
        size = n
        for d, p, c in dims:
            steps.append((d, kind, alg(d, kind), size, p, c))
            size /= p
    elif kind == "all_gather":
        size = n
        for d, p, c in reversed(dims):
            steps.append((d, kind, alg(d, kind), size, p, c))
            size *= p
    elif kind in ("gather", "scatter"):
        size = n
        for d, p, c in dims:
            steps.append((d, kind, alg(d, kind), size, p, c))
            size *= p
    else:  # all_to_all, broadcast, reduce, barrier: the full buffer on every dimension
        order = reversed(dims) if kind == "broadcast" else dims
        for d, p, c in order:
            steps.append((d, kind, alg(d, kind), n, p, c))
    return steps
