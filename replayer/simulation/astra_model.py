"""ASTRA-sim-compatible collective model: the analytical congestion-unaware backend, to the ns.

Reproduces the times ASTRA-sim's analytical (congestion-unaware) network
backend gives for single collectives, from the formulas measured in
docs/design.md section 4 and the backend's source (``BasicTopology::
compute_communication_delay`` in astra-sim's analytical network).  Time unit
1 ns.  Per dimension ``d`` with link bandwidth ``bw`` (the spec's
``bandwidth_gbps``) and link latency ``lat``:

- bytes per ns ``B = bw * 2^30 / 1e9`` (``[astra] bandwidth_convention =
  "gib"``: the backend's ``bw_GBps_to_Bpns`` reads "GB/s" as GiB/s) or ``B =
  bw`` (``"si"``, as later ASTRA-sim versions do);
- hops ``h``: ring topology = the shorter way round (1 between ring
  neighbours), fully connected = 1, switch = 2;
- one message of ``m`` bytes: ``X(m) = floor(h * lat + m / B)``;
- local reduction of a received message: ``R(m) = 3 * floor(m / local_mem_bw)``
  (``local-mem-bw`` in GB/s = B/ns); ``e`` = ``endpoint-delay`` in ns.

One chunk of ``C`` bytes on ``p`` ranks of one dimension:

- ring all-reduce ``e + (p-1)(X(C/p) + e + R(C/p)) + (p-1)(X(C/p) + e)``
- ring reduce-scatter ``e + (p-1)(X(C/p) + e + R(C/p))``
- ring all-gather (``C`` per rank in) ``e + (p-1)(X(C) + e)``
- ring all-to-all ``e + p(p-1)/2 (X(C/p) + e)``
- direct all-reduce ``e + (Xmax(C/p) + e + R(C/p)) + (Xmax(C/p) + e)``, ``Xmax``
  with the farthest member's hops.

Direct reduce-scatter ``e + (Xmax(C/p) + e + R(C/p))``, direct all-gather
``e + (Xmax(C) + e)``, direct all-to-all ``e + (Xmax(C/p) + e)`` (first by
analogy, now confirmed by the binary matrix below).  ``R`` is computed in
ASTRA-sim's double arithmetic (see :meth:`AstraModel.reduction_ns`).

Halving-doubling (all-reduce, reduce-scatter, all-gather; p a power of two)
and the double binary tree (every collective runs as a tree all-reduce of the
chunk; members finish at different times, ``CommCost.member_ns``) are in
:mod:`.astra_algorithms`, with the chunking (``ceil(D / (D // S))`` chunks of
``D // S``) and the pipeline of chunks through per-dimension queues running
``active-chunks-per-dimension`` chunks at once.

Several dimensions (``collective-optimization = localBWAware``): reduce-
scatter on the inner dimensions, all-reduce on the outermost, all-gather back
(``baseline``: all-reduce on every dimension with the full chunk); all-gather
runs outermost dimension first, reduce-scatter and all-to-all inner first.

Every rule is confirmed against what the binaries printed (c459ab6 and 518bd51, recorded in
``../shared/reference/astra-sim``), per rank to the ns: tests/interop/test_astra_reference_collectives.py (the
480-case matrix of collective x algorithm x topology x p x splits, 112 multi-dimension and 40 random configs;
tests/astra_expectations.py lists the few differences and why); what ASTRA-sim cannot run is refused with the
reason (:func:`astra_refusal`).
Derivations and measurements: replayer/NOTES.md, "ASTRA-sim algorithms".

The congestion-unaware backend never slows concurrent messages, so costs
have ``shares_bandwidth = False`` and the whole time in ``fixed_ns``.
Broadcast, reduce, gather, scatter and barrier raise
:class:`~.collectives.UnsupportedCollectiveError` (ASTRA-sim's workload layer
replays a broadcast with its measured duration, ``duration_micros * 1000`` ns
or 1 ns when zero).  Point-to-point: ``X(m)`` on the outermost dimension where
source and destination differ (measured on one ring dimension in
tests/interop/test_send_recv_semantics.py; how the engine times sends and
recvs around it, and members of one collective that end apart, is in
replayer/simulation/engine.py and replayer/simulation/astra_skew.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tracekit.errors import SpecError
from tracekit.model import CollectiveType

from tracekit.replayer.simulation.astra_algorithms import (
    RankPhase,
    dbt_chunks_ns,
    dbt_times,
    hd_final_bytes,
    hd_messages,
    is_power_of_two,
    pipeline_ns,
    ranks_pipeline_ns,
    ring_times,
)
from tracekit.replayer.simulation.astra_groups import master_group_ns
from tracekit.replayer.simulation.collectives import (
    CommCost,
    UnsupportedCollectiveError,
    check_comm_bytes,
    collective_kind,
)
from tracekit.replayer.simulation.placement import (
    GroupPlacement,
    GroupPlacer,
    p2p_dimension,
    rank_coords,
    ring_distance,
)

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.hardware import HardwareSpec, NetworkDim


ASTRA_COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")
ASTRA_ALGORITHMS = ("ring", "direct", "halving_doubling", "double_binary_tree")
_GROUP_HANDOFF_NS = 10  # MemBus "Fast" transmission: a communicator group's ring (CommunicatorGroup.cc)


def astra_refusal(kind: str, algorithm: str, n_dims: int, size: int) -> str | None:
    """Why ASTRA-sim cannot run ``algorithm`` for ``kind`` on a dimension of ``size`` NPUs (None if it can).

    Measured with the binary (replayer/NOTES.md): halving-doubling exits on an all-to-all ("unknown
    communication type"); halving-doubling and double binary tree need a power-of-two dimension (3 NPUs:
    halving-doubling never finishes, the tree crashes).  ``n_dims`` is kept for rules that depend on the
    network's shape.
    """
    if algorithm not in ASTRA_ALGORITHMS:
        return f"ASTRA-sim has no algorithm {algorithm!r}"
    if algorithm == "halving_doubling" and kind == "all_to_all":
        return "ASTRA-sim's halving-doubling has no all-to-all (the simulator exits: unknown communication type)"
    if algorithm in ("halving_doubling", "double_binary_tree") and not is_power_of_two(size):
        return (
            f"ASTRA-sim's {algorithm} needs a power-of-two number of NPUs per dimension, got {size} "
            f"(the simulator never finishes or crashes)"
        )
    return None


def bytes_per_ns(bandwidth_gbps: float, convention: str) -> float:
    """Link bandwidth in bytes/ns as ASTRA-sim computes it (``bw * (1 << 30) / 1e9`` for ``gib``)."""
    if convention == "gib":
        return bandwidth_gbps * (1 << 30) / 1_000_000_000
    return bandwidth_gbps


def astra_hops(topology: str, a: int, b: int, size: int) -> int:
    """Hops between coordinates ``a`` and ``b``: ring shorter way, fully connected 1, switch 2."""
    if topology == "ring":
        return ring_distance(a, b, size)
    if topology == "switch":
        return 2
    return 1


class AstraModel(GroupPlacer):
    """ASTRA-sim analytical congestion-unaware collective costs (see module doc).

    Raises (at construction):
        SpecError: the spec has no ``[astra]`` table, or a dimension names an
            algorithm other than ring/direct for an ASTRA-sim collective.
    """

    def __init__(self, spec: "HardwareSpec") -> None:
        if spec.astra is None:
            raise SpecError(
                "key astra: is required for collectives.model = 'astra' (ASTRA-sim's endpoint delay, dataset "
                "splits, ...): import an ASTRA-sim config with `tracekit hw import-astra`, or choose another "
                "--collective-model (alpha_beta, nccl)",
                path=spec.path,
            )
        self.spec = spec
        self.settings = spec.astra
        GroupPlacer.__init__(self, spec.dim_sizes)
        self._bw = tuple(bytes_per_ns(d.bandwidth_gbps, spec.astra.bandwidth_convention) for d in spec.network)
        for i, dim in enumerate(spec.network):
            for key in ASTRA_COLLECTIVES:
                reason = astra_refusal(key, dim.algorithm(key), len(spec.network), dim.size)
                if reason and not (key == "all_to_all" and dim.algorithm(key) == "halving_doubling"):
                    raise SpecError(f"key network[{i}].algorithms.{key}: {reason}", path=spec.path)

    # --- the per-message terms ---

    def message_ns(self, d: int, m: int, h: int) -> int:
        """``X(m) = floor(h * latency + m / B)`` on dimension ``d``, ns.

        Args:
            d: dimension index.
            m: message size, bytes.
            h: hops (see :func:`astra_hops`).

        Source: ASTRA-sim's analytical backend, ``BasicTopology::compute_communication_delay``.
        """
        return int(h * self.spec.network[d].latency_ns + m / self._bw[d])

    def reduction_ns(self, m: int) -> int:
        """``R(m) = 3 * floor(m / local_mem_bw)``, ns, for a received message of ``m`` bytes.

        Computed in ASTRA-sim's double arithmetic (``PacketBundle::call``:
        ``uint64(m / (local_mem_bw * 1e9) * 1e9)``, which is one less than the exact quotient for some sizes,
        e.g. 600,000 B at 5,000 GB/s gives 119, not 120).
        """
        return 3 * int(m / (self.settings.local_mem_bw_gbps * 1e9) * 1e9)

    # --- one chunk on one dimension ---

    def chunk_ns(self, kind: str, algorithm: str, d: int, c: int, p: int, coords: tuple[int, ...]) -> int:
        """Time of one chunk of ``c`` bytes of ``kind`` on ``p`` ranks of dimension ``d``.

        ``coords`` are the members' distinct coordinates on ``d`` (for the hop counts).  The double binary
        tree is timed per rank by :meth:`member_finish_ns`; here it is its last rank's time.
        """
        if p <= 1:
            return 0
        dim: NetworkDim = self.spec.network[d]
        e = self.settings.endpoint_delay_ns
        if algorithm == "halving_doubling":
            total = e
            for msg in hd_messages(kind, c, p):
                h = max(astra_hops(dim.topology, coords[i], coords[(i + msg.distance) % p], dim.size) for i in range(p))
                total += self.message_ns(d, msg.msg_bytes, h) + e
                if msg.reduced:
                    total += self.reduction_ns(msg.msg_bytes)
            return total
        if algorithm == "double_binary_tree":
            return max(self._dbt_ns(d, c, coords, 1, 1))
        piece = c // p
        if algorithm == "ring":
            pairs = zip(coords, coords[1:] + coords[:1])
            h = max(astra_hops(dim.topology, a, b, dim.size) for a, b in pairs)
        else:
            h = max(astra_hops(dim.topology, a, b, dim.size) for a in coords for b in coords if a != b)
        x_piece = self.message_ns(d, piece, h)
        reduce_step = x_piece + e + self.reduction_ns(piece)
        gather_step = x_piece + e
        steps = p - 1 if algorithm == "ring" else 1
        if kind == "all_reduce":
            return e + steps * reduce_step + steps * gather_step
        if kind == "reduce_scatter":
            return e + steps * reduce_step
        if kind == "all_gather":
            return e + steps * (self.message_ns(d, c, h) + e)
        # all_to_all
        if algorithm == "ring":
            return e + p * (p - 1) // 2 * gather_step
        return e + gather_step

    def _dbt_ns(self, d: int, c: int, coords: tuple[int, ...], chunks: int, active: int) -> list[int]:
        """Per-member finish times (member order = ``coords`` order) of ``chunks`` tree chunks of ``c`` bytes."""
        dim = self.spec.network[d]

        def send_ns(u: int, v: int) -> int:
            """Message time (ns) of one ``c``-byte chunk between tree members ``u`` and ``v`` (indices into ``coords``)."""
            return self.message_ns(d, c, astra_hops(dim.topology, coords[u], coords[v], dim.size))

        return dbt_chunks_ns(
            len(coords), chunks, active, send_ns=send_ns, e=self.settings.endpoint_delay_ns, r=self.reduction_ns(c)
        )

    # --- the model interface ---

    def phases(self, kind: str, chunk: int, pl: GroupPlacement) -> list[tuple]:
        """``(dimension, phase kind, chunk bytes, ranks, member coordinates, algorithm)`` in order, for one chunk.

        Every phase runs the collective's own algorithm of its dimension (an all-reduce's reduce-scatter and
        all-gather phases use ``all-reduce-implementation``: measured, 2-D ring all-reduce with halving-doubling
        reduce-scatter configured still 40,994 ns).

        As ``Sys::generate_collective``: all-reduce (``localBWAware``) reduce-scatters on the inner dimensions,
        all-reduces on the outermost and all-gathers back; all-gather runs outermost dimension first; the others
        inner first.  Each phase's chunk is what the previous phase left (a tree phase leaves its chunk whole).
        A group that is not regular runs flat on its outermost dimension with ``p = len(group)``.
        """
        if not pl.regular:
            d = pl.dims[-1]
            return [(d, kind, chunk, pl.size, pl.coords[-1], self.spec.network[d].algorithm(kind))]
        dims = list(zip(pl.dims, pl.sizes, pl.coords))
        if kind == "all_gather":
            dims.reverse()
        if kind == "all_reduce" and self.settings.collective_optimization == "localBWAware":
            plan = (
                [(d, "reduce_scatter", p, c) for d, p, c in dims[:-1]]
                + [(*dims[-1][:1], "all_reduce", *dims[-1][1:])]
                + [(d, "all_gather", p, c) for d, p, c in reversed(dims[:-1])]
            )
        else:
            plan = [(d, kind, p, c) for d, p, c in dims]
        out, size = [], chunk
        for d, phase_kind, p, c in plan:
            alg = self.spec.network[d].algorithm(kind)
            out.append((d, phase_kind, size, p, c, alg))
            if alg == "double_binary_tree" or phase_kind in ("all_reduce", "all_to_all"):
                continue
            size = hd_final_bytes(phase_kind, size, p)
        return out

    def chunking(self, kind: str, comm_bytes: int) -> tuple[int, int]:
        """``(chunk bytes, number of chunks)`` as ``Sys::determine_chunk_size`` and ``generate_collective``.

        ``C = D // S``, raised to the number of NPUs (except for all-gather); ``ceil(D / C)`` chunks of ``C``.
        """
        s = self.settings.preferred_dataset_splits
        chunk = comm_bytes // s
        world = math.prod(self._sizes)
        if kind != "all_gather" and chunk < world:
            return world, s
        if chunk == 0:
            return 0, 0
        return chunk, -(-comm_bytes // chunk)

    def member_finish_ns(self, kind: str, comm_bytes: int, group: tuple[int, ...]) -> tuple[int, ...]:
        """When each member of ``group`` (in ``group`` order) finishes, in ns from the collective's start.

        Equal for every member except under the double binary tree, whose ranks finish as their place in
        the tree makes them (:func:`~.astra_algorithms.dbt_finish_ns`).
        """
        pl = self.placement(group)
        if not pl.dims:
            return (0,) * len(group)
        if len(group) < math.prod(self._sizes):
            return self._comm_group_ns(kind, comm_bytes, group)
        phases = self.phases(kind, self.chunking(kind, comm_bytes)[0], pl)
        d, phase_kind, size, p, coords, alg = phases[0]
        if len(phases) == 1 and alg == "double_binary_tree":
            chunk, chunks = self.chunking(kind, comm_bytes)
            by_coord = dict(
                zip(coords, self._dbt_ns(d, chunk, coords, chunks, self.settings.active_chunks_per_dimension))
            )
            return tuple(by_coord[rank_coords(r, self._sizes)[d]] for r in group)
        if pl.regular and any(ph[5] == "double_binary_tree" for ph in phases):
            return self._tree_pipeline_ns(kind, comm_bytes, pl, group)
        return (self.collective_ns(kind, comm_bytes, group),) * len(group)

    def group_algorithm(self, kind: str, group: tuple[int, ...]) -> str:
        """The algorithm of ``kind`` in a sub-world ``group``: ring in c459ab6, the configured one in 518bd51."""
        if self.settings.build == "c459ab6":
            return "ring"
        pl = self.placement(group)
        return self.spec.network[pl.dims[-1] if pl.dims else 0].algorithm(kind)

    def _comm_group_ns(self, kind: str, comm_bytes: int, group: tuple[int, ...]) -> tuple[int, ...]:
        """A collective of a communicator group smaller than the network, per member (``group`` order).

        ASTRA-sim c459ab6 (``CommunicatorGroup::get_collective_plan``) runs it as one ring over the sorted members,
        whatever algorithms the config names (518bd51: the configured algorithm, :mod:`.astra_groups`), with every NPU/memory hand-off 10 ns (the ring is a ``Local``
        dimension: ``MemBus`` ``Fast`` transmission) instead of ``endpoint-delay``; a message between two
        members crosses the innermost dimension where they differ (measured: ranks 0 and 5 of 4 x 2 cost as
        neighbours on dimension 0).  Chunks as for every collective, in dimension 0's queue.
        """
        members = sorted(group)
        coords = [rank_coords(r, self._sizes) for r in members]

        def send_ns(u: int, v: int, m: int) -> int:
            """Message time (ns) of ``m`` bytes from member ``u`` to ``v``, on the innermost dimension where they differ."""
            d = next(i for i, (a, b) in enumerate(zip(coords[u], coords[v])) if a != b)
            dim = self.spec.network[d]
            return self.message_ns(d, m, astra_hops(dim.topology, coords[u][d], coords[v][d], dim.size))

        chunk, chunks = self.chunking(kind, comm_bytes)
        algorithm = self.group_algorithm(kind, group)
        if algorithm != "ring":  # 518bd51 runs the configured algorithm (astra_groups)
            by_member = dict(zip(members, master_group_ns(self, kind, algorithm, members, send_ns, chunk, chunks)))
            return tuple(by_member[r] for r in group)

        def ring(starts: list[int], _root_max: bool) -> list[tuple[int, int]]:
            """Per-member ``(finish, scheduled at)`` of one ring chunk whose members start at ``starts`` (ns)."""
            return ring_times(kind, chunk, starts, send_ns=send_ns, e=_GROUP_HANDOFF_NS, reduction_ns=self.reduction_ns)

        finish = ranks_pipeline_ns(
            (len(members),), [RankPhase(0, 0, ring)], chunks, self.settings.active_chunks_per_dimension
        )
        by_rank = dict(zip(members, finish))
        return tuple(by_rank[r] for r in group)

    def _last_delay_ns(self, kind: str, algorithm: str, c: int, p: int) -> int:
        """Delay of the last event of a ring/direct/halving-doubling phase: R of its last message when that
        message is reduced (reduce-scatter), else the endpoint delay."""
        if algorithm == "halving_doubling":
            last = hd_messages(kind, c, p)[-1]
            return self.reduction_ns(last.msg_bytes) if last.reduced else self.settings.endpoint_delay_ns
        if kind == "reduce_scatter":
            return self.reduction_ns(c // p)
        return self.settings.endpoint_delay_ns

    def _tree_pipeline_ns(
        self, kind: str, comm_bytes: int, pl: GroupPlacement, group: tuple[int, ...]
    ) -> tuple[int, ...]:
        """Per-member finish of a collective over several dimensions with a tree phase (member order = group)."""
        chunk, chunks = self.chunking(kind, comm_bytes)
        phases = self.phases(kind, chunk, pl)
        e = self.settings.endpoint_delay_ns
        trees_on: dict[int, int] = {}  # dimension -> tree phases on it
        for d, _, _, _, _, alg in phases:
            if alg == "double_binary_tree":
                trees_on[d] = trees_on.get(d, 0) + 1
        seen: dict[int, int] = {}
        specs = []
        for d, phase_kind, size, p, coords, alg in phases:
            axis = pl.dims.index(d)
            if alg != "double_binary_tree":
                specs.append(
                    RankPhase(
                        axis,
                        self.chunk_ns(phase_kind, alg, d, size, p, coords),
                        last_delay_ns=self._last_delay_ns(phase_kind, alg, size, p),
                    )
                )
                continue
            dim = self.spec.network[d]

            def tree(starts, root_max, d=d, size=size, coords=coords, dim=dim):
                """Per-member ``(finish, scheduled at)`` of one tree chunk on dimension ``d`` whose members start at ``starts`` (ns)."""

                def send_ns(u: int, v: int) -> int:
                    """Message time (ns) of one ``size``-byte chunk between line members ``u`` and ``v``."""
                    return self.message_ns(d, size, astra_hops(dim.topology, coords[u], coords[v], dim.size))

                return dbt_times(
                    len(coords), starts, root_max=root_max, send_ns=send_ns, e=e, r=self.reduction_ns(size)
                )

            specs.append(RankPhase(axis, 0, tree, seen.get(d, 0), trees_on[d]))
            seen[d] = seen.get(d, 0) + 1
        finish = ranks_pipeline_ns(pl.sizes, specs, chunks, self.settings.active_chunks_per_dimension)
        out = []
        for r in group:
            c = rank_coords(r, self._sizes)
            i, stride = 0, 1
            for axis, d in enumerate(pl.dims):
                i += pl.coords[axis].index(c[d]) * stride
                stride *= pl.sizes[axis]
            out.append(finish[i])
        return tuple(out)

    def collective_ns(self, kind: str, comm_bytes: int, group: tuple[int, ...]) -> int:
        """Whole-collective time in ns (integer, as ASTRA-sim's cycles): the last member's finish.

        Args:
            kind: collective key (``all_reduce``, ``reduce_scatter``, ``all_gather``, ``all_to_all``).
            comm_bytes: each rank's input buffer, bytes.
            group: the member ranks, ascending.

        Raises:
            SpecError: a rank outside the spec, or repeated in ``group``.
        """
        pl = self.placement(group)
        if not pl.dims:
            return 0
        if len(group) < math.prod(self._sizes):
            return max(self._comm_group_ns(kind, comm_bytes, group))
        chunk, chunks = self.chunking(kind, comm_bytes)
        phases = self.phases(kind, chunk, pl)
        if any(ph[5] == "double_binary_tree" for ph in phases):
            return max(self.member_finish_ns(kind, comm_bytes, group))
        timed = [(d, self.chunk_ns(k, alg, d, size, p, coords)) for d, k, size, p, coords, alg in phases]
        return pipeline_ns(timed, chunks, self.settings.active_chunks_per_dimension)

    def collective_cost(self, comm_type: CollectiveType, comm_bytes: int, group: tuple[int, ...]) -> CommCost:
        """ASTRA-sim's time for one collective, all in ``fixed_ns`` (no bandwidth sharing).

        Raises:
            UnsupportedCollectiveError: broadcast, reduce, gather, scatter, barrier.
            SpecError: a rank outside the spec.
            ReplayError: negative ``comm_bytes``.
        """
        kind = collective_kind(comm_type)
        if kind not in ASTRA_COLLECTIVES:
            raise UnsupportedCollectiveError(
                f"the astra-compatible model has no {kind} (ASTRA-sim simulates all-reduce, "
                f"reduce-scatter, all-gather and all-to-all only; it replays a broadcast with its "
                f"measured duration)"
            )
        n = check_comm_bytes(comm_bytes)
        pl = self.placement(group)
        subgroup = 1 < len(group) < math.prod(self._sizes)
        for d in () if subgroup else pl.dims:
            reason = astra_refusal(
                kind, self.spec.network[d].algorithm(kind), len(self.spec.network), self.spec.network[d].size
            )
            if reason:
                raise SpecError(f"key network[{d}].algorithms.{kind}: {reason}", path=self.spec.path)
        algs = (
            [self.group_algorithm(kind, group) + "(group)"]
            if subgroup
            else sorted({self.spec.network[d].algorithm(kind) for d in pl.dims}) or ["ring"]
        )
        members = self.member_finish_ns(kind, n, group)
        spread = tuple(float(t) for t in members) if len(set(members)) > 1 else ()
        return CommCost(
            float(max(members, default=0)), (), "astra:" + "+".join(algs), shares_bandwidth=False, member_ns=spread
        )

    def p2p_cost(self, comm_bytes: int, src: int, dst: int) -> CommCost:
        """``X(m)`` on the outermost dimension where ``src`` and ``dst`` differ (0 for the same rank).

        Args:
            comm_bytes: message size ``m``, bytes.
            src, dst: sending and receiving ranks.

        Returns:
            a :class:`CommCost` with the whole time (whole ns) in ``fixed_ns``, no bandwidth sharing.

        Raises:
            SpecError: a rank outside the spec.
            ReplayError: negative ``comm_bytes``.
        """
        n = check_comm_bytes(comm_bytes)
        d = p2p_dimension(src, dst, self._sizes)
        if d is None:
            return CommCost(0.0, (), "astra:local", shares_bandwidth=False)
        dim = self.spec.network[d]
        h = astra_hops(dim.topology, rank_coords(src, self._sizes)[d], rank_coords(dst, self._sizes)[d], dim.size)
        return CommCost(float(self.message_ns(d, n, h)), (), "astra:p2p", shares_bandwidth=False)
