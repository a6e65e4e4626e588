"""ASTRA-sim's congestion-aware analytical network, as a collective model: messages hop by hop over FIFO links.

``[astra] network_backend = "congestion_aware"`` selects it under ``collectives.model = "astra"``.  The system
layer (chunks, the per-rank stream queue, the ring and direct algorithms, endpoint hand-offs, local reductions)
is the one of the congestion-unaware model (:mod:`.astra_model`); what changes is how a message travels.  Facts
from ASTRA-sim's source (astra-sim 518bd51, ``network_frontend/analytical``; astra-network-analytical 599a047,
``congestion_aware/``), read, not copied:

- Topologies (one dimension only: ``construct_topology`` exits with ``only support 1-dim topology``
  otherwise): ``Ring`` links every NPU with both neighbours, one link per direction (a Ring of 2 NPUs would link
  the same pair twice: ``Device::connect`` asserts ``!connected(id)``), and routes the shorter way round, clockwise
  on a tie; ``Switch`` adds one device (id ``npus``) linked both ways with every NPU, routes ``src -> switch ->
  dst``; ``FullyConnected`` links every ordered pair, routes directly.
- A link (``Link::send``) serves the messages given to it first come first served: while it is busy a message
  waits in its FIFO; a message that starts on it at ``t`` frees it at ``t + floor(m / B)`` (serialization) and
  reaches the link's far end at ``t + floor(latency + m / B)``, where it is handed to the next link of its route
  at once (store and forward) or, at its destination, delivered.  ``B = bw * 2^30 / 1e9`` bytes/ns.
- Delivery (``CommonNetworkApi::process_chunk_arrival``): a posted recv runs its handler at the arrival; a recv
  posted later runs it through an event at the moment it is posted.
- Every simulator event lives in one queue ordered by time, then by the order it was scheduled; a rank's system
  events of one tick are batched (``Sys::try_register_event``): the first schedules one queue event that runs
  every event registered for that rank and tick, in registration order.

The algorithms run message by message (:mod:`.astra_aware_algorithms`: ring, direct, halving-doubling, double
binary tree, as ASTRA-sim's state machines run them; the network and event machinery in :mod:`.astra_links`).
With equal links and no queueing this is the congestion-unaware model with ``X(m)`` replaced by
``hops x floor(latency + m / B)``.  A rank runs ``active-chunks-per-dimension`` chunks of a collective at once,
the next when one ends (``Sys::SchedulerUnit``); it ends the collective when its last chunk ends.

In a replay, collectives and point-to-point messages that overlap in time queue behind each other on the links
they share: the engine hook (:class:`_ReplanningHook`) first times each alone from its members' own arrivals
(ASTRA-sim's ranks start eagerly), then plans the overlapping ones together and has the engine run again until
the ends it gave are the planned ones.  Folding is refused under this network (``run._plan_folding``).

Checked per rank to the ns against ASTRA-sim 518bd51's congestion-aware binary on the recorded cases of
``../shared/reference/astra-sim`` (tests/replayer/test_astra_congestion.py; replayer/NOTES.md has the counts).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Sequence

from tracekit.errors import SpecError
from tracekit.model import CollectiveType

from tracekit.replayer.simulation.astra_aware_algorithms import _Job
from tracekit.replayer.simulation.astra_links import EventQueue, LinkNetwork, RankEvents
from tracekit.replayer.simulation.hardware import AstraSettings
from tracekit.replayer.simulation.astra_model import (
    ASTRA_COLLECTIVES,
    AstraModel,
    _GROUP_HANDOFF_NS,
    astra_refusal,
    bytes_per_ns,
)
from tracekit.replayer.simulation.collectives import (
    CommCost,
    check_comm_bytes,
    collective_kind,
)

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.hardware import HardwareSpec

NETWORK_BACKENDS = AstraSettings.NETWORK_BACKENDS

log = logging.getLogger(__name__)
MAX_PASSES = 50
AWARE_ALGORITHMS = ("ring", "direct", "halving_doubling", "double_binary_tree")


def aware_refusal(spec: "HardwareSpec") -> str | None:
    """Why ASTRA-sim's congestion-aware backend cannot run ``spec``'s network (None if it can), one line."""
    if len(spec.network) != 1:
        return (
            f"ASTRA-sim's congestion-aware backend supports 1-dim topologies only (it exits: only support "
            f"1-dim topology); the network has {len(spec.network)} dimensions"
        )
    dim = spec.network[0]
    if dim.topology == "ring" and dim.size == 2:
        return (
            "ASTRA-sim's congestion-aware backend cannot build a Ring of 2 NPUs (both ring directions are the "
            "same neighbour: it aborts on Device.cpp's assertion '!connected(id)')"
        )
    return None


class AstraCongestionModel(AstraModel):
    """ASTRA-sim's congestion-aware analytical backend (module doc); the system layer of :class:`AstraModel`.

    Raises (at construction):
        SpecError: a network ASTRA-sim's congestion-aware backend refuses (:func:`aware_refusal`), or what
            :class:`AstraModel` refuses.
    """

    def __init__(self, spec: "HardwareSpec") -> None:
        AstraModel.__init__(self, spec)
        reason = aware_refusal(spec)
        if reason:
            raise SpecError(f"key astra.network_backend: {reason}", path=spec.path)
        dim = spec.network[0]
        self._topology, self._npus, self._latency = dim.topology, dim.size, dim.latency_ns
        self._alone: dict[tuple, list[int]] = {}  # (kind, bytes, group, arrivals from the first) -> ends from it
        self._bw_bpns = bytes_per_ns(dim.bandwidth_gbps, spec.astra.bandwidth_convention)  # type: ignore[union-attr]

    def _network(self, q: EventQueue) -> LinkNetwork:
        return LinkNetwork(q, self._topology, self._npus, self._bw_bpns, self._latency)

    def _algorithm(self, kind: str, group: tuple[int, ...]) -> str:
        """The algorithm ``kind`` runs with on ``group`` (the dimension's; a smaller group runs it on its own ring).

        Raises:
            SpecError: what ASTRA-sim cannot run (:func:`~.astra_model.astra_refusal`; in a group smaller than
                the network, 518bd51 crashes on the double binary tree and halving-doubling needs a power of two).
        """
        alg = self.spec.network[0].algorithm(kind)
        size = len(group) if len(group) < self._npus else self._npus
        reason = astra_refusal(kind, alg, 1, size)
        if reason is None and alg == "double_binary_tree" and size < self._npus:
            reason = "ASTRA-sim 518bd51 crashes (segfault) on a double binary tree in a communicator group"
        if reason:
            where = f"group {list(group)}: " if size < self._npus else ""
            raise SpecError(f"key network[0].algorithms.{kind}: {where}{reason}", path=self.spec.path)
        return alg

    def _job(self, ranks: RankEvents, tag: int, kind: str, comm_bytes: int, group: tuple[int, ...]) -> _Job:
        members = sorted(group)
        subgroup = len(members) < math.prod(self._sizes)
        chunk, chunks = self.chunking(kind, comm_bytes)
        return _Job(
            ranks,
            tag,
            kind,
            self._algorithm(kind, group),
            members,
            chunk,
            (chunks, self.settings.active_chunks_per_dimension),
            (_GROUP_HANDOFF_NS if subgroup else self.settings.endpoint_delay_ns, subgroup),
            self.reduction_ns,
        )

    def jobs_ends_ns(self, jobs: Sequence[tuple[str, int, tuple[int, ...], Sequence[int]]]) -> list[list[int]]:
        """Members' ends (ns, each group's order) of collectives ``(kind, comm_bytes, group, arrivals_ns)`` that
        share one network: their messages queue behind each other on the links they share.

        Members that reach their collectives at the same time start them in rank order, then in ``jobs``
        order (ASTRA-sim fires rank 0's workload first).

        Raises:
            SpecError: an algorithm the congestion-aware model does not run (:data:`AWARE_ALGORITHMS`).
        """
        q = EventQueue()
        ranks = RankEvents(q, self._network(q))
        built: list[_Job | None] = []
        starts: list[tuple[int, int, int, int]] = []  # (time, rank, job, member position; -1: a message)
        messages: dict[int, list[int]] = {}
        for tag, (kind, comm_bytes, group, arrivals) in enumerate(jobs):
            if kind == "p2p" or len(group) <= 1:  # a message; or a collective of one rank: nothing to send
                messages[tag] = [int(a) for a in arrivals]
                built.append(None)
                if kind == "p2p":
                    starts.append((int(arrivals[0]), group[0], tag, -1))
                continue
            job = self._job(ranks, tag, kind, comm_bytes, group)
            built.append(job)
            by_rank = dict(zip(group, arrivals))
            starts += [(int(by_rank[r]), r, tag, pos) for pos, r in enumerate(job.members)]
        for t, _, tag, pos in sorted(starts):
            started = built[tag]
            if started is None:
                _, _, pair, _ = jobs[tag]
                q.at(t, self._message, ranks, pair, jobs[tag][1], messages[tag])
            else:
                q.at(t, started.arrive, pos)
        q.run()
        out = []
        for tag, (ran, (_, _, group, _)) in enumerate(zip(built, jobs)):
            if ran is None:
                out.append(messages[tag])
                continue
            ends = dict(zip(ran.members, ran.end_ns))
            out.append([ends[r] for r in group])
        return out

    @staticmethod
    def _message(ranks: RankEvents, pair: tuple[int, int], comm_bytes: int, out: list[int]) -> None:
        """Send a point-to-point message now; ``out[0]`` becomes its delivery time (ns)."""
        src, dst = pair
        if src == dst:
            return

        def delivered() -> None:
            out[0] = ranks.q.now

        ranks.net.send(src, dst, comm_bytes, delivered)

    def member_ends_ns(
        self, kind: str, comm_bytes: int, group: tuple[int, ...], arrivals_ns: Sequence[int]
    ) -> list[int]:
        """Each member's end (ns, ``group`` order) of one collective alone on the network, members arriving at
        ``arrivals_ns``.

        Raises:
            SpecError: an algorithm the congestion-aware model does not run (:data:`AWARE_ALGORITHMS`).
        """
        if not arrivals_ns:
            return []
        t0 = min(int(a) for a in arrivals_ns)
        key = (kind, comm_bytes, tuple(group), tuple(int(a) - t0 for a in arrivals_ns))
        rel = self._alone.get(key)
        if rel is None:
            rel = self._alone[key] = self.jobs_ends_ns([key])[0]
        return [t0 + x for x in rel]

    def collective_cost(self, comm_type: CollectiveType, comm_bytes: int, group: tuple[int, ...]) -> CommCost:
        """ASTRA-sim congestion-aware time of one collective whose members arrive together (``fixed_ns``).

        Raises:
            UnsupportedCollectiveError: a type ASTRA-sim does not simulate (broadcast, reduce, gather, ...), as
                :meth:`.AstraModel.collective_cost` says.
            SpecError: a rank outside the spec; an algorithm ASTRA-sim cannot run there.
            ReplayError: negative ``comm_bytes``.
        """
        kind = collective_kind(comm_type)
        if kind not in ASTRA_COLLECTIVES:
            return AstraModel.collective_cost(self, comm_type, comm_bytes, group)  # raises, with its reason
        n = check_comm_bytes(comm_bytes)
        self.placement(group)
        members = self.member_ends_ns(kind, n, group, [0] * len(group))
        spread = tuple(float(t) for t in members) if len(set(members)) > 1 else ()
        label = "astra-aware:" + self.spec.network[0].algorithm(kind) + ("(group)" if len(group) < self._npus else "")
        return CommCost(float(max(members, default=0)), (), label, shares_bandwidth=False, member_ns=spread)

    def p2p_cost(self, comm_bytes: int, src: int, dst: int) -> CommCost:
        """One message alone on the network, hop by hop: ``hops x floor(latency + m / B)`` ns.

        Raises:
            SpecError: a rank outside the spec.
            ReplayError: negative ``comm_bytes``.
        """
        n = check_comm_bytes(comm_bytes)
        self.placement((src, dst) if src != dst else (src,))
        if src == dst:
            return CommCost(0.0, (), "astra-aware:local", shares_bandwidth=False)
        ns = self._network(EventQueue()).empty_route_ns(src, dst, n)
        return CommCost(float(ns), (), "astra-aware:p2p", shares_bandwidth=False)


class _ReplanningHook:
    """The engine's ``member_ends(instance, arrivals_ns)`` for the congestion-aware model, with ``replan()``.

    A first run gives each collective its ends alone on the network, from its members' own arrivals (ASTRA-sim's
    ranks start their chunks eagerly).  ``replan()`` then simulates every collective of that run on one network
    from the arrivals seen: when some collective's ends change (it shared links with another one), the engine
    runs again and collectives whose arrivals are as planned get the planned ends.  It stops when the ends given
    are the planned ones, or after :data:`MAX_PASSES` runs (logged as a warning: the replay then keeps the
    last run's times).
    """

    def __init__(self, model: AstraCongestionModel) -> None:
        self.model = model
        self.plan: dict[int, tuple[tuple[int, ...], list[int]]] = {}
        self.seen: dict[int, tuple[str, int, tuple[int, ...], tuple[int, ...]]] = {}
        self.given: dict[int, list[int]] = {}
        self.passes = 0

    def __call__(self, inst, arrivals: list[float]) -> list[int] | None:
        """Members' ends (ns) of collective ``inst`` whose members arrive at ``arrivals`` (ns), or None."""
        if inst.link_ranks is not None or inst.cost is None or not inst.cost.algorithm.startswith("astra-aware:"):
            return None
        if inst.kind == "p2p":  # the send's message: ``arrivals`` is the send's start
            kind = "p2p"
        elif inst.kind == "collective" and len(inst.nodes) == len(inst.ranks):
            kind = collective_kind(CollectiveType(inst.comm_type))
        else:
            return None
        arr = tuple(int(a) for a in arrivals)
        key = inst.nodes[0]
        self.seen[key] = (kind, inst.comm_bytes, inst.ranks, arr)
        planned = self.plan.get(key)
        if planned is not None and planned[0] == arr:
            ends = planned[1]
        else:
            ends = self.model.member_ends_ns(kind, inst.comm_bytes, inst.ranks, arr)
        self.given[key] = ends
        return ends

    def replan(self) -> bool:
        """Plan the communications of the last run that overlap in time on one network; True when the engine
        must run again (some planned end differs from the one given)."""
        changed = False
        plan: dict[int, tuple[tuple[int, ...], list[int]]] = {}
        for keys in _overlapping(self.seen, self.given):
            ends_of = self.model.jobs_ends_ns([self.seen[k] for k in keys]) if len(keys) > 1 else [self.given[keys[0]]]
            for k, ends in zip(keys, ends_of):
                plan[k] = (self.seen[k][3], ends)
                changed = changed or self.given[k] != ends
        self.plan, self.seen, self.given = plan, {}, {}
        self.passes += 1
        if changed and self.passes >= MAX_PASSES:
            log.warning(
                "congestion-aware ASTRA-sim model: collectives sharing links did not settle after %d runs; "
                "the replay keeps the last run's times",
                self.passes,
            )
            return False
        return changed


def _overlapping(seen: dict[int, tuple], given: dict[int, list[int]]) -> list[list[int]]:
    """Keys of ``seen`` in clusters whose time spans (first arrival to last end, ns) overlap or touch.

    A communication's messages are all on the links within its span (every message is received by a member
    before that member ends), so communications of different clusters cannot queue behind each other.
    """
    spans = sorted((min(seen[k][3]), max(given[k]), k) for k in seen)
    clusters: list[list[int]] = []
    reach = None
    for start, end, k in spans:
        if reach is None or start > reach:
            clusters.append([k])
            reach = end
        else:
            clusters[-1].append(k)
            reach = max(reach, end)
    return clusters


def engine_hook(model: AstraCongestionModel) -> _ReplanningHook:
    """The engine's ``member_ends`` hook for the congestion-aware model (:class:`_ReplanningHook`)."""
    return _ReplanningHook(model)


def astra_engine_hook(model):
    """The engine's ``member_ends`` hook for an ASTRA-sim model: the congestion-aware one's
    (:class:`_ReplanningHook`), the congestion-unaware one's (:func:`.astra_skew.engine_hook`), or None for
    another model."""
    from tracekit.replayer.simulation.astra_skew import engine_hook as unaware_hook

    if isinstance(model, AstraCongestionModel):
        return _ReplanningHook(model)
    return unaware_hook(model) if isinstance(model, AstraModel) else None
