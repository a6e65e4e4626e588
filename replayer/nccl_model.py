"""NCCL-like collective model: latency + bytes / bandwidth per (algorithm, protocol), fastest wins.

The shape follows NCCL's tuner (``src/graph/tuning.cc``, ``ncclTopoTuneModel``
and ``ncclTopoGetAlgoTime``; NVIDIA/nccl, 2.8-era, commit 01afd20a).  For a
collective of ``n`` bytes on ``nRanks`` ranks over ``nNodes`` nodes (a node =
one coordinate on the dimensions outside dimension 0), for each enabled
algorithm ``a`` (``ring``; ``tree`` for all-reduce) and protocol ``p``
(``LL``, ``LL128``, ``Simple``)::

    time_ns = latency_us(a, p) * 1000 + n / algBw(a, p)          (algBw in GB/s = B/ns)

- ``busBw`` = the per-rank bandwidth of the slowest dimension the group spans
  (NCCL: channels x per-channel speed of its topology search), then
  ring LL x 1/4 (x 1/3 for a single-node all-gather, reduce-scatter or
  broadcast), ring LL128 x 0.92 (x 0.7 with one rank per node), tree
  ``min(0.9 busBw, tree_max_bw)``, tree LL x 1/3.8, tree LL128 x 7/9 (one
  node) or x 0.915;
- ``algBw = busBw * nRanks / nsteps`` for ring (``nsteps`` = 2(nRanks-1) for
  all-reduce, nRanks-1 for reduce-scatter and all-gather, nRanks otherwise),
  ``busBw / 2`` for tree; tree bandwidth is multiplied by NCCL's
  ``treeCorrectionFactor[p][log2(n/64)]`` below 256 MiB;
- ``latency_us = baseLat(a, p)`` plus, for ring all-reduce / reduce-scatter /
  all-gather, ``(nsteps - nInterSteps) * intraLat + nInterSteps * interLat``;
  for ring broadcast / reduce one hop latency; for tree
  ``2 * ((nRanks/nNodes - 1) * intraLat + log2(nNodes) * interLat)``.
  ``intraLat`` = ``hwLat`` of dimension 0's ``nccl_link`` (x 1.8 for LL with
  several nodes), ``interLat`` = ``hwLat`` of the outermost spanned
  dimension's link; ring Simple all-reduce over several nodes with ``n >=
  nRanks/16 * 64 KiB`` has its latency x 1.9 (NCCL's "plateau effect").

Deviations, on purpose: the bus bandwidth is the slowest spanned dimension's
(NCCL uses the intra-node speed up to 2 nodes), and NCCL's per-channel LL128
caps and the compute-capability-8.0 235 GB/s cap are left out (they need
channel counts the spec does not have).  The latency tables and tree caps
come from the spec's ``[nccl]`` table (defaults: NCCL's values).

All-to-all, gather and scatter run as NCCL point-to-point operations:
``baseLat(ring, Simple) + hwLat(link, ring, Simple)`` plus the bytes each
rank sends ((p-1)/p n for all-to-all; (p-1) n at the root for gather and
scatter) at the slowest dimension's bandwidth.  Barrier costs as an
all-reduce of ``comm_bytes``.  Point-to-point send/recv: as the alpha-beta
model (``latency_ns`` + n / B).

The bytes go on the slowest spanned dimension: ``wire_bytes = n / algBw * B_dim``
so that ``time_alone_ns`` equals the formula above.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.model import CollectiveType

from tracekit.replayer.collectives import CommCost, check_comm_bytes, collective_kind, p2p_alpha_beta
from tracekit.replayer.placement import GroupPlacement, GroupPlacer, rank_coords

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.hardware import HardwareSpec

#: NCCL ``treeCorrectionFactor`` (tuning.cc): per protocol (LL, LL128, Simple), for
#: log2(bytes / 64) = 0 .. 21.
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6, .7, .8, .9),
)
PROTOCOLS = ("LL", "LL128", "Simple")
NCCL_FUNCS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")


def _log2i(n: int) -> int:
    """NCCL's ``log2i``: floor(log2 n), 0 for n <= 1."""
    return max(0, int(n).bit_length() - 1)


class NcclModel(GroupPlacer):
    """NCCL-tuner-shaped costs (see module doc)."""

    def __init__(self, spec: "HardwareSpec") -> None:
        self.spec = spec
        self.consts = spec.nccl
        GroupPlacer.__init__(self, spec.dim_sizes)

    def _link(self, d: int) -> str:
        return self.spec.network[d].nccl_link or ("nvlink" if d == 0 else "net")

    def candidates(self, kind: str, n: int, pl: GroupPlacement) -> list[tuple[float, float, str, str]]:
        """Every enabled ``(latency_ns, algBw bytes/ns, algorithm, protocol)`` for this collective."""
        net = self.spec.network
        n_ranks = pl.size
        n_nodes = len({rank_coords(r, self._sizes)[1:] for r in pl.ranks})
        ppn = n_ranks / n_nodes
        bottleneck = min(pl.dims, key=lambda d: (net[d].bandwidth_gbps, -d))
        bus_bw0 = net[bottleneck].bandwidth_gbps
        intra_link = self._link(0)
        inter_link = self._link(pl.dims[-1])
        if kind == "all_reduce":
            nsteps, n_inter = 2 * (n_ranks - 1), 2 * (n_nodes - 1)
        elif kind in ("reduce_scatter", "all_gather"):
            nsteps, n_inter = n_ranks - 1, n_nodes - 1
        else:
            nsteps, n_inter = n_ranks, n_nodes
        out = []
        for algorithm in ("tree", "ring"):
            if algorithm not in self.consts.algorithms or (algorithm == "tree" and kind != "all_reduce"):
                continue
            for pi, protocol in enumerate(PROTOCOLS):
                if protocol not in self.consts.protocols:
                    continue
                bw = bus_bw0
                if algorithm == "ring" and protocol == "LL":
                    bw *= 1 / 4 if (n_nodes > 1 or kind in ("all_reduce", "reduce")) else 1 / 3
                if algorithm == "ring" and protocol == "LL128":
                    bw *= 0.7 if ppn < 2 else 0.92
                if algorithm == "tree":
                    cap = self.consts.tree_max_bw_gbps[0 if n_nodes <= 2 else 1]
                    bw = min(bw * 0.9, cap)
                    if protocol == "LL":
                        bw *= 1 / 3.8
                    elif protocol == "LL128":
                        bw *= 7 / 9 if n_nodes == 1 else 0.915
                alg_bw = bw * (n_ranks / nsteps if algorithm == "ring" else 0.5)
                log_size = _log2i(n >> 6)
                if algorithm == "tree" and log_size < 22:
                    alg_bw *= TREE_CORRECTION[pi][log_size]
                if alg_bw <= 0:
                    continue
                lat = self.consts.base_latency(algorithm, protocol)
                intra = self.consts.hw_latency(intra_link, algorithm, protocol)
                inter = self.consts.hw_latency(inter_link, algorithm, protocol)
                if n_nodes > 1 and protocol == "LL":
                    intra *= 1.8
                if algorithm == "ring":
                    if kind in ("broadcast", "reduce"):
                        lat += inter if n_nodes > 1 else intra
                    else:
                        lat += (nsteps - n_inter) * intra + n_inter * inter
                    if (protocol == "Simple" and n_nodes > 1 and kind == "all_reduce"
                            and n >= n_ranks / 16.0 * 65536):
                        lat *= 1.9
                else:
                    lat += 2 * ((n_ranks / n_nodes - 1) * intra + _log2i(n_nodes) * inter)
                out.append((lat * 1000.0, alg_bw, algorithm, protocol))
        return out

    def collective_cost(self, comm_type: CollectiveType, comm_bytes: int,
                        group: tuple[int, ...]) -> CommCost:
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
        net = self.spec.network
        bottleneck = min(pl.dims, key=lambda d: (net[d].bandwidth_gbps, -d))
        dim_bw = net[bottleneck].bandwidth_bytes_per_ns
        if kind == "barrier":
            kind = "all_reduce"
        if kind not in NCCL_FUNCS:
            p = pl.size
            lat_us = (self.consts.base_latency("ring", "Simple")
                      + self.consts.hw_latency(self._link(pl.dims[-1]), "ring", "Simple"))
            nbytes = (p - 1) / p * n if kind == "all_to_all" else (p - 1) * n
            return CommCost(lat_us * 1000.0, ((bottleneck, float(nbytes)),), "nccl:p2p")
        best = None
        for lat_ns, alg_bw, algorithm, protocol in self.candidates(kind, n, pl):
            t = lat_ns + n / alg_bw
            if best is None or t < best[0]:
                best = (t, lat_ns, alg_bw, algorithm, protocol)
        _, lat_ns, alg_bw, algorithm, protocol = best
        wire = n / alg_bw * dim_bw
        return CommCost(lat_ns, ((bottleneck, wire),), f"nccl:{algorithm}/{protocol}")

    def p2p_cost(self, comm_bytes: int, src: int, dst: int) -> CommCost:
        """``latency_ns + n / B`` on the outermost dimension where src and dst differ."""
        cost = p2p_alpha_beta(self.spec, comm_bytes, src, dst)
        return CommCost(cost.fixed_ns, cost.wire_bytes, "nccl:" + cost.algorithm)
