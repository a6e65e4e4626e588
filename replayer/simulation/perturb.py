"""Perturbations of a replay: slow ranks, delayed nodes, degraded or removed links, seeded jitter (issue 30.3).

A :class:`Perturbation` is applied to a compiled :class:`~.program.ReplayProgram` (:func:`apply_perturbation`),
which it does not change: the result is a new program sharing every array but the perturbed ones, so N seeded
samples compile once (:mod:`.samples`).  What each part does:

- ``slow``: ``(rank, factor)``: the rank's compute (timed nodes on a compute stream or the memory resource, not
  host-thread CPU ops) takes ``factor`` times as long: a slow GPU.
- ``node_delay_ns``: ``(node, delay)``: every rank of machine ``node`` (``rank // size of dimension 0``, as the
  NCCL model counts nodes) starts ``delay`` ns late (its nodes without dependencies are ready at ``delay``).
- ``links``: :class:`LinkFault` ``(rank, dimension, bandwidth_factor)``: the rank's link into that network
  dimension (both directions) runs at ``factor`` x its bandwidth: in the fluid sharing rule
  (replayer/NOTES.md, engine section) it counts as ``1 / factor`` transfers, so a transfer alone on it takes
  ``1 / factor`` as long in its data phase, and a ring collective through it moves at the pace of its slowest
  link.  ``factor`` 0 removes the link; the traffic is rerouted where the topology has another path: on an outer
  dimension of a node with several ranks (one NIC per GPU), through a node peer's NIC over dimension 0 (NCCL's
  PXN), which the rank then shares with that peer (factor 0.5); on a ``ring`` dimension the other way round the
  ring, whose links then carry both directions (factor 0.5).  A ``switch`` or ``fully_connected`` dimension
  with one link per rank and no such peer has no other path: :class:`~tracekit.errors.SpecError`.
- ``compute_jitter`` / ``comm_jitter``: each compute node's duration / each communication's cost (latency and
  data) is multiplied by ``exp(sigma x z)``, ``z`` standard normal from ``numpy.random.default_rng(seed)`` in
  node / instance order (median factor 1, ``sigma`` the standard deviation of its logarithm).

Models without a data phase (``astra``: ``shares_bandwidth`` False) ignore link faults, as they ignore sharing.
Slow ranks and delayed nodes fold: a perturbed rank leaves its class (:func:`split_classes`), the rest fold as
before.  Link faults and jitter are replayed unfolded (every rank simulated; a class set expanded).
"""

from __future__ import annotations

from copy import copy
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from tracekit.errors import ConfigError, SpecError

from tracekit.replayer.simulation.collectives import CommCost
from tracekit.replayer.simulation.rank_compile import K_TIMED

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.program import ReplayProgram

__all__ = ["LinkFault", "Perturbation", "apply_perturbation", "compute_mask", "link_slowdowns", "split_classes"]

#: bandwidth factor of a removed link whose traffic shares one other link
REROUTED_FACTOR = 0.5


@dataclass(frozen=True)
class LinkFault:
    """A rank's link into network dimension ``dimension`` at ``bandwidth_factor`` x its bandwidth (0 = removed)."""

    rank: int
    dimension: int
    bandwidth_factor: float

    def __post_init__(self) -> None:
        if self.rank < 0 or self.dimension < 0:
            raise ConfigError(f"a link fault needs a rank and a dimension >= 0, got {self.rank}/{self.dimension}")
        if not 0.0 <= self.bandwidth_factor <= 1.0:
            raise ConfigError(f"a link's bandwidth factor must be in [0, 1] (0 = removed), got {self.bandwidth_factor}")


#: Largest slowdown of a rank: 10^6 turns 1 us of compute into 1 s (a factor of 1e308 overflowed every time to inf).
MAX_SLOW_FACTOR = 1e6
#: Largest start delay of a node: 2^53 ns (tracekit.model.node.MAX_DURATION_NS, 104 days), the longest duration a trace holds.
MAX_DELAY_NS = 2**53


@dataclass(frozen=True)
class Perturbation:
    """What to perturb (module doc); every part optional.

    Attributes:
        slow: ``((rank, compute factor > 0), ...)``.
        node_delay_ns: ``((node, delay ns >= 0), ...)``.
        links: link faults.
        compute_jitter, comm_jitter: sigma of the log-normal jitter factors (0 = none).
        seed: the jitter's seed.
    """

    slow: tuple[tuple[int, float], ...] = ()
    node_delay_ns: tuple[tuple[int, float], ...] = ()
    links: tuple[LinkFault, ...] = ()
    compute_jitter: float = 0.0
    comm_jitter: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for rank, factor in self.slow:
            if rank < 0 or not (0 < factor <= MAX_SLOW_FACTOR):
                raise ConfigError(
                    f"slow rank {rank}: needs a rank >= 0 and a factor in (0, {MAX_SLOW_FACTOR:,.0f}], got {factor!r}"
                )
        for node, delay in self.node_delay_ns:
            if node < 0 or not (0 <= delay <= MAX_DELAY_NS):
                raise ConfigError(
                    f"delayed node {node}: needs a node >= 0 and a delay of 0 to {MAX_DELAY_NS:,} ns, got {delay!r}"
                )
        for name in ("compute_jitter", "comm_jitter"):
            sigma = getattr(self, name)
            if not (0.0 <= sigma < 10.0):
                raise ConfigError(f"{name} must be in [0, 10), got {sigma!r}")

    @property
    def active(self) -> bool:
        """Whether anything is perturbed."""
        return bool(self.slow or self.node_delay_ns or self.links or self.compute_jitter or self.comm_jitter)

    @property
    def random(self) -> bool:
        """Whether the perturbation depends on the seed (jitter)."""
        return self.compute_jitter > 0 or self.comm_jitter > 0

    @property
    def foldable(self) -> bool:
        """Whether a folded replay stays exact: only slow ranks and delayed nodes (per-rank and deterministic)."""
        return not (self.links or self.random)

    def with_seed(self, seed: int) -> "Perturbation":
        """The same perturbation with another jitter seed."""
        return replace(self, seed=seed)


def split_classes(scans: dict, pert: Perturbation, size0: int) -> dict:
    """``scans`` (rank -> :class:`~.folding.RankScan`) with each perturbed rank's digest extended by its compute
    factor and start delay, so a perturbed rank leaves its class (ranks perturbed alike may share one).

    ``size0``: ranks per node (dimension 0's size), to find a rank's node delay.
    """
    slow = dict(pert.slow)
    delay = dict(pert.node_delay_ns)
    out = dict(scans)
    for r, scan in scans.items():
        key = (slow.get(r, 1.0), delay.get(r // size0, 0.0))
        if key != (1.0, 0.0):
            out[r] = replace(scan, digest=scan.digest + repr(key).encode())
    return out


def link_slowdowns(program: "ReplayProgram", links: tuple[LinkFault, ...]) -> dict[tuple[int, int], float]:
    """``{(rank, dimension): slowdown}`` (``1 / bandwidth factor``) of the faults, removed links rerouted.

    Raises:
        SpecError: a rank or dimension outside the spec, or a removed link with no other path (module doc).
    """
    spec = program.spec
    out: dict[tuple[int, int], float] = {}
    for fault in links:
        if fault.dimension >= len(spec.network) or fault.rank >= spec.world_size:
            raise SpecError(
                f"link fault {fault.rank}/{fault.dimension}: the spec has {spec.world_size} ranks and "
                f"{len(spec.network)} network dimension(s)",
                path=spec.path,
            )
        factor = fault.bandwidth_factor
        if factor == 0.0:
            dim = spec.network[fault.dimension]
            peers = fault.dimension > 0 and spec.network[0].size > 1
            if not peers and not (dim.topology == "ring" and dim.size > 2):
                raise SpecError(
                    f"link of rank {fault.rank} into dimension {fault.dimension} ({dim.name}, {dim.topology}) "
                    "removed: the topology has no other path for its traffic",
                    path=spec.path,
                    rank=fault.rank,
                )
            factor = REROUTED_FACTOR
        key = (fault.rank, fault.dimension)
        out[key] = out.get(key, 1.0) / factor
    return out


def check_targets(spec, pert: Perturbation) -> None:
    """Raise ConfigError when a slow rank or a delayed node is not in ``spec``'s job (it would change nothing).

    ``spec``: the :class:`~.hardware.HardwareSpec` fitted to the job (``world_size`` ranks, dimension 0's size
    ranks per node).
    """
    size0 = max(1, spec.network[0].size) if spec.network else 1
    nodes = -(-spec.world_size // size0)
    for rank, _ in pert.slow:
        if rank >= spec.world_size:
            raise ConfigError(f"slow rank {rank}: the job has ranks 0-{spec.world_size - 1} only")
    for node, _ in pert.node_delay_ns:
        if node >= nodes:
            raise ConfigError(f"delayed node {node}: the job has nodes 0-{nodes - 1} only ({size0} ranks per node)")


def compute_mask(program: "ReplayProgram") -> np.ndarray:
    """bool[N]: timed nodes on a compute stream or the memory resource (not host threads)."""
    mask = np.zeros(program.n, dtype=bool)
    for lay in program.layouts:
        on_device = np.array([not name.startswith("host") for name in lay.resource_names] + [False], dtype=bool)
        mask[lay.offset : lay.offset + lay.n] = (lay.kind == K_TIMED) & on_device[lay.resource]
    return mask


def apply_perturbation(program: "ReplayProgram", pert: Perturbation) -> "ReplayProgram":
    """A copy of ``program`` with ``pert`` applied (module doc); ``program`` is unchanged.

    Raises:
        ConfigError: a slow rank or delayed node outside the job (:func:`check_targets`).
        SpecError: see :func:`link_slowdowns`.
    """
    from array import array

    check_targets(program.spec, pert)

    rng = np.random.default_rng(pert.seed)
    dur = np.frombuffer(program.duration_ns, dtype=np.float64).copy()
    mask = compute_mask(program)
    ranks = np.zeros(program.n, dtype=np.int64)
    for lay in program.layouts:
        ranks[lay.offset : lay.offset + lay.n] = lay.rank
    for rank, factor in pert.slow:
        dur[mask & (ranks == rank)] *= factor
    if pert.compute_jitter > 0:
        dur[mask] *= np.exp(pert.compute_jitter * rng.standard_normal(int(mask.sum())))
    instances = program.instances
    if pert.comm_jitter > 0:
        factors = np.exp(pert.comm_jitter * rng.standard_normal(len(instances))).tolist()
        instances = [scaled_instance(inst, f) for inst, f in zip(instances, factors)]
    size0 = program.spec.network[0].size
    delays = {r: d for node, d in pert.node_delay_ns for r in range(node * size0, (node + 1) * size0) if d > 0}
    return replace(
        program,
        duration_ns=array("d", dur.tobytes()),
        instances=instances,
        start_delay_ns=delays,
        link_slowdown=link_slowdowns(program, pert.links),
    )


def scaled_instance(inst, factor: float):
    """A copy of instance ``inst`` whose cost (latency and data) is ``factor`` times as long."""
    cost = inst.cost
    if cost is None:
        return inst
    out = copy(inst)
    out.cost = CommCost(
        cost.fixed_ns * factor,
        tuple((d, b * factor) for d, b in cost.wire_bytes),
        cost.algorithm,
        shares_bandwidth=cost.shares_bandwidth,
        member_ns=tuple(m * factor for m in cost.member_ns),
    )
    return out
