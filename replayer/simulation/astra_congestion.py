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

The algorithms, as ``Ring.cc`` and ``AllToAll.cc`` run them (one state machine per rank and chunk,
:class:`_Phase`): a chunk starts with ``parallel_reduce`` packets handed to memory (endpoint delay ``e``; 10 ns
for a communicator group's ring, a ``Local`` dimension); each hand-off back (``e``, plus the reduction ``R(m)``
when the packet is reduced) frees a slot, and a free slot with a packet queued sends the next message to the
rank's receiver and posts the recv from its sender; every received message queues a packet.  Ring:
``parallel_reduce`` 1, ``2(p-1)`` messages of ``C/p`` for all-reduce (the first ``p-1`` after a reduction),
``p-1`` of ``C/p`` (reduced) for reduce-scatter, ``p-1`` of ``C`` for all-gather, ``p(p-1)/2`` of ``C/p`` for
all-to-all.  Direct: ``parallel_reduce = p-1`` messages at once to the ranks ``+1, +2, ...`` away; an all-reduce
sends its all-gather half only after all ``p-1`` reduce-scatter messages arrived.  With equal links and no
queueing this is the congestion-unaware model with ``X(m)`` replaced by ``hops x floor(latency + m / B)``.

A rank runs ``active-chunks-per-dimension`` chunks of a collective at once, the next when one ends
(``Sys::SchedulerUnit``); it ends the collective when its last chunk ends.  Each collective is simulated on an
otherwise idle network (members may arrive apart: :func:`engine_hook`); collectives that overlap in time do not
queue behind each other's messages here.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections import deque
from typing import TYPE_CHECKING, Callable, Sequence

from tracekit.errors import SpecError
from tracekit.model import CollectiveType

from tracekit.replayer.simulation.astra_model import (
    ASTRA_COLLECTIVES,
    AstraModel,
    _GROUP_HANDOFF_NS,
    bytes_per_ns,
)
from tracekit.replayer.simulation.collectives import (
    CommCost,
    UnsupportedCollectiveError,
    check_comm_bytes,
    collective_kind,
)

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.hardware import HardwareSpec

log = logging.getLogger(__name__)
MAX_PASSES = 50
NETWORK_BACKENDS = ("congestion_unaware", "congestion_aware")
AWARE_ALGORITHMS = ("ring", "direct")


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


class _Queue:
    """The simulator's one event queue: time, then scheduling order (ASTRA-sim's ``EventQueue``)."""

    __slots__ = ("heap", "seq", "now")

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, Callable, tuple]] = []
        self.seq = 0
        self.now = 0

    def at(self, t: int, fn: Callable, *args) -> None:
        """Run ``fn(*args)`` at ``t`` ns (after everything scheduled earlier for ``t``)."""
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, fn, args))

    def run(self) -> None:
        """Process events until none is left."""
        heap = self.heap
        while heap:
            t, _, fn, args = heapq.heappop(heap)
            self.now = t
            fn(*args)


class _Network:
    """FIFO links and routes of one 1-D topology (see module doc); delivers messages through ``on_arrival``."""

    def __init__(self, q: _Queue, topology: str, npus: int, bw_bytes_per_ns: float, latency_ns: float) -> None:
        self.q = q
        self.topology = topology
        self.npus = npus
        self.bw = bw_bytes_per_ns
        self.latency = latency_ns
        self.busy: dict[tuple[int, int], bool] = {}
        self.waiting: dict[tuple[int, int], deque] = {}

    def route(self, src: int, dst: int) -> list[int]:
        """Devices from ``src`` to ``dst`` inclusive (the switch is device ``npus``)."""
        if self.topology == "switch":
            return [src, self.npus, dst]
        if self.topology == "fully_connected":
            return [src, dst]
        n = self.npus
        clockwise = (dst - src) % n
        step = -1 if n - clockwise < clockwise else 1
        out = [src]
        while out[-1] != dst:
            out.append((out[-1] + step) % n)
        return out

    def send(self, src: int, dst: int, m: int, on_arrival: Callable[[], None]) -> None:
        """Start an ``m``-byte message from ``src`` to ``dst`` now; ``on_arrival()`` runs when it is delivered."""
        self._enter(self.route(src, dst), 0, m, on_arrival)

    def _enter(self, route: list[int], hop: int, m: int, on_arrival: Callable[[], None]) -> None:
        link = (route[hop], route[hop + 1])
        if self.busy.get(link):
            self.waiting.setdefault(link, deque()).append((route, hop, m, on_arrival))
        else:
            self._transmit(link, route, hop, m, on_arrival)

    def _transmit(self, link: tuple[int, int], route: list[int], hop: int, m: int, on_arrival) -> None:
        q = self.q
        self.busy[link] = True
        serial = m / self.bw
        q.at(q.now + int(self.latency + serial), self._hop_done, route, hop, m, on_arrival)
        q.at(q.now + int(serial), self._link_free, link)

    def _hop_done(self, route: list[int], hop: int, m: int, on_arrival) -> None:
        if hop + 2 == len(route):
            on_arrival()
        else:
            self._enter(route, hop + 1, m, on_arrival)

    def _link_free(self, link: tuple[int, int]) -> None:
        self.busy[link] = False
        waiting = self.waiting.get(link)
        if waiting:
            self._transmit(link, *waiting.popleft())

    def empty_route_ns(self, src: int, dst: int, m: int) -> int:
        """Time of one ``m``-byte message alone on the network: ``hops x floor(latency + m / B)``."""
        return (len(self.route(src, dst)) - 1) * int(self.latency + m / self.bw)


class _Ranks:
    """Per-rank system events batched per tick (``Sys::try_register_event``), and message matching."""

    def __init__(self, q: _Queue, net: _Network) -> None:
        self.q = q
        self.net = net
        self.batches: dict[tuple[int, int], list[tuple[Callable, tuple]]] = {}
        self.arrived: dict[tuple, int] = {}  # (tag, src, dst) -> messages delivered before their recv
        self.posted: dict[tuple, deque] = {}  # (tag, src, dst) -> recv handlers waiting

    def register(self, rank: int, delay: int, fn: Callable, *args) -> None:
        """Run ``fn(*args)`` on ``rank`` ``delay`` ns from now, batched with the rank's other events of that tick."""
        t = self.q.now + delay
        key = (rank, t)
        batch = self.batches.get(key)
        if batch is None:
            batch = self.batches[key] = []
            self.q.at(t, self._call_events, key)
        batch.append((fn, args))

    def _call_events(self, key: tuple[int, int]) -> None:
        batch = self.batches[key]
        i = 0
        while i < len(batch):  # events registered for this tick while running join the batch
            fn, args = batch[i]
            fn(*args)
            i += 1
        del self.batches[key]

    def send(self, tag: tuple, src: int, dst: int, m: int) -> None:
        """Send a collective message now (the send's own handler does nothing)."""
        self.net.send(src, dst, m, lambda: self._delivered((tag, src, dst)))

    def recv(self, tag: tuple, src: int, dst: int, handler: Callable[[], None]) -> None:
        """Post a recv: ``handler()`` runs at the delivery, or through an event now if it was delivered already."""
        key = (tag, src, dst)
        if self.arrived.get(key, 0) > 0:
            self.arrived[key] -= 1
            self.q.at(self.q.now, handler)
        else:
            self.posted.setdefault(key, deque()).append(handler)

    def _delivered(self, key: tuple) -> None:
        waiting = self.posted.get(key)
        if waiting:
            waiting.popleft()()
        else:
            self.arrived[key] = self.arrived.get(key, 0) + 1


class _Phase:
    """One rank's part of one chunk of a ring or direct collective (ASTRA-sim's ``Ring`` / ``AllToAll``)."""

    def __init__(self, job: "_Job", pos: int, chunk: int) -> None:
        self.job, self.pos, self.chunk = job, pos, chunk
        p, kind = job.p, job.kind
        self.rank = job.members[pos]
        direct = job.algorithm == "direct"
        self.parallel = p - 1 if direct else 1
        if kind == "all_reduce":
            self.stream_count = 2 * (p - 1)
        elif kind == "all_to_all":
            self.stream_count = p - 1 if direct else p * (p - 1) // 2
        else:
            self.stream_count = p - 1
        self.msg = job.chunk_bytes if kind == "all_gather" else job.chunk_bytes // p
        self.non_zero = (p - 1) * self.parallel if (not direct or job.local) else self.parallel
        self.middle = p - 1
        self.zero_left = self.non_zero_left = 0
        self.toggle = False
        self.free = 0
        self.received = 0
        self.packets: deque[tuple[int, int]] = deque()  # (receiver position, sender position)
        self.offset = 1  # direct: the next packet's peer distance

    def _peers(self) -> tuple[int, int]:
        p = self.job.p
        if self.job.algorithm != "direct":
            return (self.pos + 1) % p, (self.pos - 1) % p
        d = self.offset
        self.offset = d % (p - 1) + 1
        return (self.pos + d) % p, (self.pos - d) % p

    def start(self) -> None:
        """``StreamInit``: hand ``parallel_reduce`` packets to memory."""
        for _ in range(self.parallel):
            self._insert_packet()

    def _insert_packet(self) -> None:
        job = self.job
        if self.zero_left == 0 and self.non_zero_left == 0:
            self.zero_left, self.non_zero_left = self.parallel, self.non_zero
            self.toggle = not self.toggle
        self.packets.append(self._peers())
        ranks = job.ranks
        if self.zero_left > 0:
            self.zero_left -= 1
            ranks.register(self.rank, job.handoff_ns, self._general)
            return
        self.non_zero_left -= 1
        reduced = job.kind == "reduce_scatter" or (job.kind == "all_reduce" and self.toggle)
        if reduced:
            ranks.register(self.rank, job.handoff_ns, self._reduce)
        else:
            ranks.register(self.rank, job.handoff_ns, self._general)

    def _reduce(self) -> None:
        self.job.ranks.register(self.rank, self.job.reduction_ns(self.msg), self._general)

    def _general(self) -> None:
        self.free += 1
        if self.job.algorithm == "direct" and self.job.kind == "all_reduce" and self.stream_count <= self.middle:
            if self.received < self.middle:
                return
            for _ in range(self.parallel):
                self._ready()
        else:
            self._ready()
        if self.stream_count == 0 and self.free == self.parallel:
            self.job.phase_done(self)

    def _ready(self) -> None:
        if not self.packets or self.stream_count == 0 or self.free == 0:
            return
        to, frm = self.packets.popleft()
        job = self.job
        tag = (job.tag, self.chunk)
        job.ranks.send(tag, self.rank, job.members[to], self.msg)
        job.ranks.recv(tag, job.members[frm], self.rank, self._received)
        self.stream_count -= 1
        self.free -= 1

    def _received(self) -> None:
        self.received += 1
        self._insert_packet()


class _Job:
    """One collective: its members' chunk queues (``active`` chunks at once per rank) and their end times."""

    def __init__(
        self,
        ranks: _Ranks,
        tag: int,
        kind: str,
        algorithm: str,
        members: Sequence[int],
        chunk_bytes: int,
        chunks: int,
        active: int,
        handoff_ns: int,
        local: bool,
        reduction_ns: Callable[[int], int],
    ) -> None:
        self.ranks, self.tag, self.kind, self.algorithm = ranks, tag, kind, algorithm
        self.members = list(members)
        self.p = len(self.members)
        self.chunk_bytes, self.chunks, self.active = chunk_bytes, chunks, active
        self.handoff_ns, self.local, self.reduction_ns = handoff_ns, local, reduction_ns
        self.next_chunk = [0] * self.p
        self.done = [0] * self.p
        self.end_ns = [0] * self.p

    def arrive(self, pos: int) -> None:
        """Member ``pos`` reaches the collective now: start its first ``active`` chunks."""
        if self.chunks == 0:
            self.end_ns[pos] = self.ranks.q.now
            return
        for _ in range(min(self.active, self.chunks)):
            self._start_next(pos)

    def _start_next(self, pos: int) -> None:
        k = self.next_chunk[pos]
        self.next_chunk[pos] = k + 1
        _Phase(self, pos, k).start()

    def phase_done(self, phase: _Phase) -> None:
        """A member ended one chunk: start its next waiting chunk, or record its end."""
        pos = phase.pos
        self.done[pos] += 1
        if self.done[pos] == self.chunks:
            self.end_ns[pos] = self.ranks.q.now
        elif self.next_chunk[pos] < self.chunks:
            self._start_next(pos)


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
        self._bw_bpns = bytes_per_ns(dim.bandwidth_gbps, spec.astra.bandwidth_convention)  # type: ignore[union-attr]

    def _network(self, q: _Queue) -> _Network:
        return _Network(q, self._topology, self._npus, self._bw_bpns, self._latency)

    def _algorithm(self, kind: str, group: tuple[int, ...]) -> str:
        alg = self.spec.network[0].algorithm(kind)
        if alg not in AWARE_ALGORITHMS:
            raise SpecError(
                f"key network[0].algorithms.{kind}: {alg} is not modelled with the congestion-aware backend "
                f"(modelled: {', '.join(AWARE_ALGORITHMS)})",
                path=self.spec.path,
            )
        return alg

    def _job(self, ranks: _Ranks, tag: int, kind: str, comm_bytes: int, group: tuple[int, ...]) -> _Job:
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
            chunks,
            self.settings.active_chunks_per_dimension,
            _GROUP_HANDOFF_NS if subgroup else self.settings.endpoint_delay_ns,
            subgroup,
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
        q = _Queue()
        ranks = _Ranks(q, self._network(q))
        built, starts = [], []
        for tag, (kind, comm_bytes, group, arrivals) in enumerate(jobs):
            job = self._job(ranks, tag, kind, comm_bytes, group)
            built.append(job)
            by_rank = dict(zip(group, arrivals))
            starts += [(int(by_rank[r]), r, tag, pos) for pos, r in enumerate(job.members)]
        for t, _, tag, pos in sorted(starts):
            q.at(t, built[tag].arrive, pos)
        q.run()
        out = []
        for job, (_, _, group, _) in zip(built, jobs):
            ends = dict(zip(job.members, job.end_ns))
            out.append([ends[r] for r in group])
        return out

    def member_ends_ns(self, kind: str, comm_bytes: int, group: tuple[int, ...], arrivals_ns: Sequence[int]) -> list[int]:
        """Each member's end (ns, ``group`` order) of one collective alone on the network, members arriving at
        ``arrivals_ns``.

        Raises:
            SpecError: an algorithm the congestion-aware model does not run (:data:`AWARE_ALGORITHMS`).
        """
        if len(group) <= 1:
            return [int(a) for a in arrivals_ns]
        return self.jobs_ends_ns([(kind, comm_bytes, group, arrivals_ns)])[0]

    def collective_cost(self, comm_type: CollectiveType, comm_bytes: int, group: tuple[int, ...]) -> CommCost:
        """ASTRA-sim congestion-aware time of one collective whose members arrive together (``fixed_ns``).

        Raises:
            UnsupportedCollectiveError: broadcast, reduce, gather, scatter, barrier.
            SpecError: a rank outside the spec; an algorithm not modelled here.
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
        ns = self._network(_Queue()).empty_route_ns(src, dst, n)
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
        self._alone: dict[tuple, list[int]] = {}

    def __call__(self, inst, arrivals: list[float]) -> list[int] | None:
        """Members' ends (ns) of collective ``inst`` whose members arrive at ``arrivals`` (ns), or None."""
        if inst.kind != "collective" or inst.link_ranks is not None or len(inst.nodes) != len(inst.ranks):
            return None
        if inst.cost is None or not inst.cost.algorithm.startswith("astra-aware:"):
            return None
        kind = collective_kind(CollectiveType(inst.comm_type))
        arr = tuple(int(a) for a in arrivals)
        key = inst.nodes[0]
        self.seen[key] = (kind, inst.comm_bytes, inst.ranks, arr)
        planned = self.plan.get(key)
        if planned is not None and planned[0] == arr:
            ends = planned[1]
        else:
            t0 = min(arr)
            alone_key = (kind, inst.comm_bytes, inst.ranks, tuple(a - t0 for a in arr))
            rel = self._alone.get(alone_key)
            if rel is None:
                rel = self._alone[alone_key] = self.model.member_ends_ns(kind, inst.comm_bytes, inst.ranks, alone_key[3])
            ends = [t0 + x for x in rel]
        self.given[key] = ends
        return ends

    def replan(self) -> bool:
        """Plan every collective of the last run on one network; True when the engine must run again."""
        keys = list(self.seen)
        joint = self.model.jobs_ends_ns([self.seen[k] for k in keys]) if len(keys) > 1 else None
        if joint is None:
            return False
        self.plan = {k: (self.seen[k][3], ends) for k, ends in zip(keys, joint)}
        changed = any(self.given[k] != ends for k, ends in zip(keys, joint))
        self.seen, self.given = {}, {}
        self.passes += 1
        if changed and self.passes >= MAX_PASSES:
            log.warning(
                "congestion-aware ASTRA-sim model: collectives sharing links did not settle after %d runs; "
                "the replay keeps the last run's times",
                self.passes,
            )
            return False
        return changed


def engine_hook(model: AstraCongestionModel) -> _ReplanningHook:
    """The engine's ``member_ends`` hook for the congestion-aware model (:class:`_ReplanningHook`)."""
    return _ReplanningHook(model)
