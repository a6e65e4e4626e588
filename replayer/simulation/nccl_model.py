"""NCCL-like collective model: latency + bytes / bandwidth per (algorithm, protocol), fastest wins.

The shape and the constants follow NCCL's tuner, NVIDIA/nccl release
v2.30.7-1: ``src/graph/tuning.cc`` (``ncclTopoTuneModel``,
``ncclTopoGetAlgoTime``, ``ncclTunerConstantsDefaults``,
``treeCorrectionFactor``), ``src/graph/topo.h`` (NVLink per-link speeds) and
``src/graph/search.cc`` (``speedArrayInter``).  The code is ours; the
constants live in :class:`~tracekit.replayer.simulation.nccl_constants.NcclConstants` (the
spec's ``[nccl]`` table), so a preset can state what it calibrated.

Group shape.  A *node* is one coordinate on the dimensions outside dimension 0;
a group of ``p`` ranks spans ``N`` nodes with ``ppn = p / N`` ranks each.
Bandwidths (GB/s = bytes/ns):

- ``intra = min(link, channels x per_channel_bw_gbps)``: the Simple-protocol
  ring bus bandwidth inside a node (NCCL: ``nChannels x bwIntra``, where the
  topology search fits the channels into the links), ``link`` the innermost
  dimension's ``bandwidth_gbps``;
- ``rails = nics_per_node or ppn`` NICs per node (``min`` with ``ppn``), each
  of bandwidth ``B``, the slowest outer spanned dimension's ``bandwidth_gbps``.
  NCCL's search runs every channel at one speed ``s``, the largest of
  ``nic_speeds_gbps`` not above ``B`` (``speedArrayInter``), and packs channels
  onto a NIC while its bandwidth lasts (``ncclTopoSearchRecNet``: ``net.bw -=
  bw`` per channel), at most ``RING_MAX_CHANNELS`` per node; so a NIC carries
  ``nic = s x min(floor(B / s), RING_MAX_CHANNELS // rails)`` (50 GB/s: one
  channel of 48; 100 GB/s: two, 96) and a node injects ``rails x nic``.  This
  is the per-GPU NIC rail of DGX systems: a 16-rank ring crosses the network on
  8 NICs per node, not one.  ``B`` is first capped by the GPU-NIC PCIe path
  (``pcie_bw_gbps``: NCCL's topology gives Gen4 x16 24, Gen5 x16 48 GB/s,
  ``kvDictPciGen``), and the node's total is multiplied by ``net_efficiency``
  (the measured network ceiling: GPUDirect RDMA, proxy and protocol overheads)
  and by :meth:`NcclModel.fabric_factor` beyond one leaf switch of a
  ``fat_tree`` / ``rail_optimized`` fabric with an ``oversubscription``.
- every candidate also pays ``hbm_bytes_per_byte x n / mem_bandwidth_gbps`` of
  device-memory passes (reading the input, writing the result, reducing), which,
  unlike the link term, does not shrink with more ranks (``_alg_bw``).

Per (algorithm ``a``, protocol ``P``), ``busBw`` and then ``algBw``:

- ring: ``busBw = intra`` in one node, ``min(intra, rails x nic)`` across
  nodes; LL: ``min(ll_max_bw, busBw / 2)``; LL128: ``min(0.92 busBw,
  channels x ll128_per_channel_max_bw)``; ``algBw = busBw x p / nsteps``
  with ``nsteps`` = 2(p-1) for all-reduce, p-1 for reduce-scatter and
  all-gather, p otherwise;
- tree (all-reduce): ``busBw = min(0.92 t, channels x tree_per_channel_max_bw)``
  with ``t = intra`` in one node and ``min(intra, k x rails x nic)`` across
  nodes (``k = tree_net_factor``, NCCL's 2, up to 2 nodes, where each node sends
  each byte once per direction, else 1: NCCL's bwIntra/bwInter switch); LL: ``min(busBw / 3.8,
  ll_max_bw)``; LL128: ``min(busBw x (7/9 one node, else 120/128), channels x
  ll128_per_channel_max_bw)``; ``algBw = busBw / 2 x treeCorrectionFactor[P][log2(n/64)]``;
- nvls (all-reduce, Simple, one node of >= 2 ranks, NVLink SHARP): ``busBw =
  2 x nvls_efficiency x intra``, ``algBw = busBw x p / nsteps``;
- nvls_tree (all-reduce, Simple, several nodes): ``busBw = min(2 x
  nvls_efficiency x intra, k x rails x nic)``, ``algBw = busBw x p / nsteps``.

Latency (us), with ``intraLat`` / ``interLat`` the ``hw_latency_us`` of
dimension 0's ``nccl_link`` and of the outermost spanned dimension's (with one
rank per node the tree's network latency, as NCCL does):

- ring all-reduce / reduce-scatter / all-gather: ``baseLat + (nsteps - nInter) x
  max(intraLat, netOverhead) + nInter x interLat`` with ``nInter`` = 2(N-1) for
  all-reduce, N-1 otherwise, 0 in one node; ``netOverhead = net_overhead_us``
  (x3 for Simple) across nodes, else 0; broadcast / reduce: ``baseLat +
  hwLat(ring)``; ring Simple all-reduce across nodes with ``n / (channels x
  p) >= 64`` is x1.4 (NCCL's "plateau effect", compute capability >= 8.0);
- tree: ``baseLat + 2 x ((ppn - 1) x intraLat + log2(N) x interLat)``;
- nvls: ``intraLat``; nvls_tree: ``baseLat + intraLat + 2 log2(N) x interLat``.

``time = max(latency_floor_us x gpus_per_process, latency + n / algBw)``, the fastest enabled
candidate wins.  All-to-all, gather and scatter run as NCCL point-to-point:
``baseLat(ring, Simple) + hwLat(ring, Simple)`` of the outermost link plus the
bytes each rank sends ((p-1)/p n, (p-1) n at the root) at the slowest spanned
dimension's bandwidth.  Barrier costs as an all-reduce of ``comm_bytes``;
send/recv as the alpha-beta model.  The bytes go on the slowest spanned
dimension: ``wire_bytes = n / algBw x B_dim``, so ``time_alone_ns`` equals the
formula.

Left out on purpose: CollNet (needs SHARP switches the spec does not
describe), PAT, NCCL's per-channel NVLS-tree caps and its topology search
itself (the spec gives channels and speeds instead).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracekit.model import CollectiveType

from tracekit.replayer.simulation.collectives import CommCost, check_comm_bytes, collective_kind, p2p_alpha_beta
from tracekit.replayer.simulation.placement import GroupPlacement, GroupPlacer, rank_coords

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.hardware import HardwareSpec

#: NCCL ``treeCorrectionFactor`` (tuning.cc, v2.30.7-1): per protocol (LL, LL128,
#: Simple), for log2(bytes / 64) = 0 .. 23.
TREE_CORRECTION = (
    (
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.7,
        0.7,
        0.7,
        0.7,
        0.6,
        0.5,
        0.4,
        0.4,
        0.5,
        0.6,
        0.7,
        0.8,
        0.9,
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
    ),
    (
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.8,
        0.8,
        0.7,
        0.6,
        0.6,
        0.6,
        0.6,
        0.6,
        0.6,
        0.8,
        0.9,
        0.9,
        0.9,
        0.9,
        1.0,
        1.0,
        1.0,
    ),
    (
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.8,
        0.7,
        0.6,
        0.6,
        0.5,
        0.5,
        0.5,
        0.5,
        0.6,
        0.7,
        0.8,
        0.7,
        0.7,
        0.8,
        0.9,
        0.9,
        0.9,
    ),
)
PROTOCOLS = ("LL", "LL128", "Simple")
NCCL_FUNCS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")
#: NCCL's LL128 bandwidth factor (tuning.cc: 120/128 rounded to 0.92 for rings).
LL128_RING_FACTOR = 0.92
#: NCCL's tree bandwidth factor for all-reduce.
TREE_FACTOR = 0.92
#: NCCL's ring plateau factor for compute capability >= 8.0.
RING_PLATEAU = 1.4
#: Channels NCCL's ring search may find per node: ``MAXCHANNELS / 2`` (src/init.cc ``ringGraph->maxChannels``;
#: ``MAXCHANNELS`` = 64 in src/include/device.h, v2.30.7-1).
RING_MAX_CHANNELS = 32


def _log2i(n: int) -> int:
    """NCCL's ``log2i``: floor(log2 n), 0 for n <= 1."""
    return max(0, int(n).bit_length() - 1)


@dataclass(frozen=True)
class GroupShape:
    """How a group sits on the machine, as the NCCL-like model sees it.

    Attributes:
        ranks: group size ``p``.
        nodes: nodes spanned ``N``.
        intra_bw_gbps: ring bus bandwidth inside a node, GB/s.
        net_bw_gbps: what one node injects into the network (rails x NIC speed), GB/s; 0 in one node.
        intra_link, inter_link: NCCL latency classes of dimension 0 and of the outermost spanned dimension.
        bottleneck: index of the slowest spanned dimension (where the bytes are charged).
        inter_extra_us: added to each inter-node step's latency (``net_latency_reference_ns``), us.
    """

    ranks: int
    nodes: int
    intra_bw_gbps: float
    net_bw_gbps: float
    intra_link: str
    inter_link: str
    bottleneck: int
    inter_extra_us: float = 0.0

    @property
    def ppn(self) -> float:
        """Ranks per node, ``ranks / nodes`` (NCCL's ``ppn``; fractional when the group is irregular)."""
        return self.ranks / self.nodes


@dataclass(frozen=True)
class Candidate:
    """One (algorithm, protocol) the tuner may pick: ``latency_us + n / alg_bw_gbps`` (GB/s = B/ns)."""

    algorithm: str
    protocol: str
    latency_us: float
    alg_bw_gbps: float

    def time_ns(self, n: int, floor_us: float = 0.0) -> float:
        """Predicted time of ``n`` bytes, ns: ``max(floor, latency + n / alg_bw)``.

        NCCL's tuner form (``src/graph/tuning.cc``, ``ncclTopoGetAlgoTime``):
        time = latency + bytes / bandwidth; ``alg_bw_gbps`` GB/s equals bytes per ns.

        Args:
            n: message size, bytes.
            floor_us: smallest time any collective takes, us (0 = none).
        """
        return max(floor_us * 1000.0, self.latency_us * 1000.0 + n / self.alg_bw_gbps)


class NcclModel(GroupPlacer):
    """NCCL-tuner-shaped costs (see module doc)."""

    def __init__(self, spec: "HardwareSpec") -> None:
        self.spec = spec
        self.consts = spec.nccl
        GroupPlacer.__init__(self, spec.dim_sizes)

    def _link(self, d: int) -> str:
        return self.spec.network[d].nccl_link or ("nvlink" if d == 0 else "net")

    def nic_channels(self, bandwidth_gbps: float, rails: int) -> tuple[int, float]:
        """How NCCL's search fills one NIC of ``bandwidth_gbps`` GB/s on a node of ``rails`` NICs (module doc).

        Returns:
            ``(channels, per-channel speed in GB/s)``: the NIC carries ``channels x speed`` GB/s.
        """
        fits = [s for s in self.consts.nic_speeds_gbps if s <= bandwidth_gbps]
        speed = max(fits) if fits else bandwidth_gbps
        return max(1, min(int(bandwidth_gbps // speed), RING_MAX_CHANNELS // max(rails, 1))), speed

    def fabric_factor(self, d: int, nodes: int, pattern: str) -> float:
        """The share of a NIC's bandwidth a group of ``nodes`` nodes keeps on dimension ``d``'s fabric.

        With ``fabric`` set, a leaf (or rail) switch serves ``L = nodes_per_leaf`` nodes and its up-links carry
        ``1 / oversubscription`` (``r``) of its down-links.  A group within one leaf loses nothing.  Beyond it,
        ``pattern`` ``"ring"`` (NCCL rings and trees, which stay on their rail and cross each leaf boundary once
        a channel and direction: one node's worth of a leaf's traffic goes up) keeps ``min(1, L / r)``;
        ``"all_to_all"`` (a fraction ``f = (N - L) / (N - 1)`` of every node's traffic leaves its leaf) keeps
        ``min(1, 1 / (r f))``.  1 without a fabric.
        """
        dim = self.spec.network[d]
        leaf = dim.nodes_per_leaf
        if dim.fabric is None or nodes <= leaf or dim.oversubscription <= 1.0:
            return 1.0
        if pattern == "ring":
            return min(1.0, leaf / dim.oversubscription)
        return min(1.0, 1.0 / (dim.oversubscription * (nodes - leaf) / (nodes - 1)))

    @property
    def floor_us(self) -> float:
        """Smallest time of a call, us: one kernel launch (``latency_floor_us``) per GPU its process drives
        (``gpus_per_process``: one host thread launches them one after another)."""
        return self.consts.latency_floor_us * self.consts.gpus_per_process

    def nic_bw_gbps(self, line_gbps: float) -> float:
        """What one NIC of line rate ``line_gbps`` GB/s can move: ``min(line, pcie_bw_gbps)`` (module doc)."""
        pcie = self.consts.pcie_bw_gbps
        return min(line_gbps, pcie) if pcie > 0 else line_gbps

    def one_rank_ns(self, n: int) -> float:
        """Time of an out-of-place collective on one rank, ns: ``copy_latency_us`` + a copy of ``n`` bytes.

        NCCL runs a one-rank collective as a device-to-device copy of the buffer (nothing in place); the copy
        reads and writes ``n`` bytes at ``mem_bandwidth_gbps x memory_efficiency`` of the spec's device; at least
        ``latency_floor_us``.
        """
        dev, c = self.spec.device, self.consts
        copy_ns = c.copy_latency_us * 1000.0 + 2.0 * n / (dev.mem_bandwidth_gbps * dev.memory_efficiency)
        return max(c.latency_floor_us * 1000.0, copy_ns)

    def dimension_use(self, d: int) -> tuple[float, str]:
        """What the model draws from dimension ``d``'s ``bandwidth_gbps`` for a full node (module doc).

        Dimension 0: the ring bus bandwidth ``min(link, channels x per_channel_bw_gbps)``; an outer dimension:
        one NIC's ``channels x speed`` with the spec's rails (``nics_per_node``, else one per rank of a node).

        Returns:
            ``(GB/s used, how)``: the GB/s may be below the dimension's bandwidth; ``how`` is ``"C x S"``
            (channels x GB/s each) for an outer dimension, ``""`` for dimension 0.
        """
        c, bw = self.consts, self.spec.network[d].bandwidth_gbps
        if d == 0:
            return (min(bw, c.channels * c.per_channel_bw_gbps) if c.per_channel_bw_gbps else bw), ""
        channels, speed = self.nic_channels(self.nic_bw_gbps(bw), self.rails())
        return channels * speed, f"{channels} x {speed:g}"

    def rails(self) -> int:
        """NICs per node: ``nics_per_node``, else one per rank of a node (dimension 0's size)."""
        return self.consts.nics_per_node or self._sizes[0]

    def shape(self, pl: GroupPlacement) -> GroupShape:
        """The :class:`GroupShape` of a placed group (at least one spanned dimension)."""
        net, c = self.spec.network, self.consts
        n_nodes = len({rank_coords(r, self._sizes)[1:] for r in pl.ranks})
        # NCCL's search never runs more channels than the links carry: the ring bus bandwidth is at most the
        # innermost dimension's bandwidth (so a swept NVLink bandwidth moves it below the channels' total)
        intra = min(net[0].bandwidth_gbps, c.channels * (c.per_channel_bw_gbps or net[0].bandwidth_gbps / c.channels))
        bottleneck = min(pl.dims, key=lambda d: (net[d].bandwidth_gbps, -d))
        outer = [d for d in pl.dims if d > 0]
        net_bw = 0.0
        if outer:
            ppn = pl.size // n_nodes
            rails = min(c.nics_per_node, ppn) if c.nics_per_node else ppn
            channels, speed = self.nic_channels(self.nic_bw_gbps(min(net[d].bandwidth_gbps for d in outer)), rails)
            net_bw = rails * channels * speed * c.net_efficiency * self.fabric_factor(pl.dims[-1], n_nodes, "ring")
        ref = c.net_latency_reference_ns
        extra = (net[outer[-1]].latency_ns - ref) / 1000.0 if outer and ref >= 0 else 0.0
        return GroupShape(pl.size, n_nodes, intra, net_bw, self._link(0), self._link(pl.dims[-1]), bottleneck, extra)

    def candidates(self, kind: str, n: int, g: GroupShape) -> list[Candidate]:
        """Every enabled :class:`Candidate` for collective ``kind`` of ``n`` bytes on group shape ``g``.

        Bandwidths (GB/s = bytes/ns) and latencies (us) follow NCCL's ``ncclTopoTuneModel`` (module doc);
        a (algorithm, protocol) with no bandwidth for ``kind`` is left out.
        """
        c = self.consts
        out = []
        for algorithm in c.algorithms:
            for protocol in c.protocols:
                bw = self._bus_bw(kind, algorithm, protocol, g)
                if bw <= 0:
                    continue
                alg_bw = self._alg_bw(kind, algorithm, protocol, n, bw, g)
                out.append(Candidate(algorithm, protocol, self._latency_us(kind, algorithm, protocol, n, g), alg_bw))
        return out

    def _bus_bw(self, kind: str, algorithm: str, protocol: str, g: GroupShape) -> float:
        """NCCL ``busBw`` of one (algorithm, protocol), GB/s; 0 when it does not apply."""
        c = self.consts
        multi = g.nodes > 1
        index2 = min(g.nodes, 3) - 1
        k = c.tree_net_factor if g.nodes <= 2 else 1.0
        intra = g.intra_bw_gbps if g.ppn > 1 else float("inf")
        if algorithm == "ring":
            bw = min(intra, g.net_bw_gbps) if multi else intra
            if protocol == "LL":
                bw = min(c.ll_max_bw_gbps[index2], bw * 0.5)
            elif protocol == "LL128":
                bw = min(bw * LL128_RING_FACTOR, c.channels * c.ll128_per_channel_max_bw_gbps)
            return bw
        if kind != "all_reduce":
            return 0.0
        if algorithm == "tree":
            t = min(intra, k * g.net_bw_gbps) if multi else intra
            bw = min(t * TREE_FACTOR, c.channels * c.tree_per_channel_max_bw_gbps[index2])
            if protocol == "LL":
                bw = min(bw / 3.8, c.ll_max_bw_gbps[index2])
            elif protocol == "LL128":
                bw = min(bw * (7 / 9 if not multi else 120 / 128), c.channels * c.ll128_per_channel_max_bw_gbps)
            return bw
        if protocol != "Simple" or g.ppn < 2:
            return 0.0
        nvls = 2.0 * c.nvls_efficiency * g.intra_bw_gbps
        if algorithm == "nvls":
            return 0.0 if multi else nvls
        if algorithm == "nvls_tree":
            return min(nvls, k * g.net_bw_gbps) if multi else 0.0
        return 0.0

    @staticmethod
    def _nsteps(kind: str, p: int) -> int:
        if kind == "all_reduce":
            return 2 * (p - 1)
        return p - 1 if kind in ("reduce_scatter", "all_gather") else p

    def _alg_bw(self, kind: str, algorithm: str, protocol: str, n: int, bus_bw: float, g: GroupShape) -> float:
        if algorithm == "tree":
            log_size = _log2i(n >> 6)
            factor = TREE_CORRECTION[PROTOCOLS.index(protocol)][log_size] if log_size < 24 else 1.0
            alg_bw = bus_bw * 0.5 * factor
        else:
            alg_bw = bus_bw * g.ranks / self._nsteps(kind, g.ranks)
        hbm = self.consts.hbm_bytes_per_byte
        if hbm > 0:  # the device-memory passes add hbm / mem_bw ns a byte (module doc)
            alg_bw = 1.0 / (1.0 / alg_bw + hbm / self.spec.device.mem_bandwidth_gbps)
        return alg_bw

    def _latency_us(self, kind: str, algorithm: str, protocol: str, n: int, g: GroupShape) -> float:
        c = self.consts
        multi = g.nodes > 1
        intra = c.hw_latency(g.intra_link, algorithm, protocol)
        inter_algo = "tree" if g.ppn == 1 and algorithm == "ring" else algorithm
        inter = max(0.0, c.hw_latency(g.inter_link, inter_algo, protocol) + g.inter_extra_us)
        base = c.base_latency(algorithm, protocol)
        if algorithm == "ring":
            if kind in ("broadcast", "reduce"):
                return base + (inter if multi else intra)
            nsteps = self._nsteps(kind, g.ranks)
            n_inter = 0 if not multi else (2 * (g.nodes - 1) if kind == "all_reduce" else g.nodes - 1)
            overhead = c.net_overhead_us * (3 if protocol == "Simple" else 1) if multi else 0.0
            lat = base + (nsteps - n_inter) * max(intra, overhead) + n_inter * inter
            if protocol == "Simple" and multi and kind == "all_reduce" and n / (c.channels * g.ranks) >= 64:
                lat *= RING_PLATEAU
            return lat
        if algorithm == "tree":
            return base + 2 * ((g.ppn - 1) * intra + _log2i(g.nodes) * inter)
        if algorithm == "nvls":
            return intra + (inter if multi else 0.0)
        return base + intra + 2 * _log2i(g.nodes) * inter

    def best(self, kind: str, n: int, g: GroupShape) -> Candidate:
        """The fastest candidate (NCCL's choice) for ``n`` bytes; ties go to the earlier one.

        Raises:
            ValueError: no enabled (algorithm, protocol) can run ``kind`` (not possible with a ``ring`` algorithm
                enabled, which :mod:`.spec_toml` requires).
        """
        floor = self.floor_us
        return min(self.candidates(kind, n, g), key=lambda cand: cand.time_ns(n, floor))

    def collective_cost(self, comm_type: CollectiveType, comm_bytes: int, group: tuple[int, ...]) -> CommCost:
        """The fastest (algorithm, protocol)'s ``latency + n / algBw``, as a :class:`CommCost`.

        Raises:
            SpecError: a rank outside the spec.
            ReplayError: negative ``comm_bytes`` or unknown collective type.
        """
        kind = collective_kind(comm_type)
        n = check_comm_bytes(comm_bytes)
        pl = self.placement(group)
        if not pl.dims:
            return CommCost(0.0, (), "nccl:local")
        g = self.shape(pl)
        dim_bw = self.spec.network[g.bottleneck].bandwidth_bytes_per_ns
        if kind == "barrier":
            kind = "all_reduce"
        if kind not in NCCL_FUNCS:
            p = pl.size
            lat_us = self.consts.base_latency("ring", "Simple") + self.consts.hw_latency(g.inter_link, "ring", "Simple")
            lat_us += g.inter_extra_us
            nbytes = (p - 1) / p * n if kind == "all_to_all" else (p - 1) * n
            if g.bottleneck > 0:  # through the fabric: oversubscribed up-links carry part of it
                nbytes /= self.fabric_factor(pl.dims[-1], g.nodes, "all_to_all")
            return CommCost(lat_us * 1000.0, ((g.bottleneck, float(nbytes)),), "nccl:p2p")
        if kind == "all_gather":  # Chakra's comm_size is one rank's piece; NCCL's nBytes the gathered output
            n *= pl.size
        cand = self.best(kind, n, g)
        data_ns = n / cand.alg_bw_gbps
        fixed_ns = cand.time_ns(n, self.floor_us) - data_ns
        return CommCost(fixed_ns, ((g.bottleneck, data_ns * dim_bw),), f"nccl:{cand.algorithm}/{cand.protocol}")

    def p2p_cost(self, comm_bytes: int, src: int, dst: int) -> CommCost:
        """``latency_ns + n / B`` on the outermost dimension where src and dst differ (the alpha-beta cost).

        Raises:
            SpecError: a rank outside the spec.
            ReplayError: negative ``comm_bytes``.
        """
        cost = p2p_alpha_beta(self.spec, comm_bytes, src, dst)
        return CommCost(cost.fixed_ns, cost.wire_bytes, "nccl:" + cost.algorithm)
