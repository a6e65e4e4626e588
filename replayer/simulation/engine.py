"""The replay engine: an event-driven simulation of every rank of a job at once.

Semantics (docs/design.md section 4):

- A node may start when all its data dependencies have finished and its
  resource (host thread, compute stream, comm stream, memory; see
  :mod:`._program`) is free.  When several nodes wait for one resource, the
  one earliest in its rank's file goes first.  METADATA nodes take no time
  and no resource.
- A collective occupies each member's comm stream from the moment that
  member reaches it (its *arrival*); its transfer starts when the last member
  has arrived and ends on all members together.  A send and its matching recv
  likewise, except that sends and recvs do not hold their stream: each is
  posted as soon as its dependencies are done.  With the ASTRA-sim-compatible
  model send/recv follow ASTRA-sim instead (astra-sim c459ab6, network
  frontend ``CommonNetworkApi``): the send holds its rank's comm stream and
  transmits at once, whether or not the recv is posted, ending ``fixed_ns``
  later; the recv ends at that arrival or, when posted later, the moment it is
  posted.  A transfer first spends its cost's ``fixed_ns``, then its data
  phase, during which transfers on the same network link share the link's
  bandwidth (fluid model, rates recomputed whenever a data phase starts or
  ends; the rule is in replayer/NOTES.md).  Costs with
  ``shares_bandwidth=False`` have no data phase; when their ``member_ns`` is set, each member ends at its
  own time (ASTRA-sim's double binary tree), the transfer with the last.
- Events are processed in the order (time, event kind, node or instance
  index); everything is computed in float64 nanoseconds with a fixed order of
  operations, so the same inputs give the same result to the bit.
- When nothing can run but work is left the replay stops with a
  :class:`~tracekit.errors.DeadlockError` (see :mod:`.deadlock`).

Speed: when a node starts, the run of nodes behind it on the same resource
(each the only successor of the previous one, and waiting for nothing else
any more) is started at once and costs one heap event; a node that becomes
ready on that resource with an earlier file position cuts the run at the
next node boundary, exactly where the node-by-node rule would have let it in.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from heapq import heappop, heappush
from typing import Callable

import numpy as np
import numpy.typing as npt

from tracekit.jit import bound
from tracekit.replayer.simulation._chains import cut_run, extend_run
from tracekit.replayer.simulation._flows import EV_LATENCY, EV_MEMBER, EV_NODE, _Flows
from tracekit.replayer.simulation.program import K_COLL, K_SEND, K_TIMED, K_ZERO, ReplayProgram


__all__ = ["Schedule", "simulate"]


@dataclass
class Schedule:
    """What the simulation produced (arrays over global node / instance indices).

    Attributes:
        start_ns, end_ns: float64[N] node start (arrival, for comm nodes) and end; NaN if never run.
        reason: int64[N] the node whose end let this node start (a data
            dependency, the previous node on its resource, or for comm nodes
            the dependency/resource event of its own arrival); -1 at time 0.
        xfer_start_ns, xfer_end_ns: float64[I] transfer start and end per instance.
        last_arrival: int64[I] the member node that arrived last (the transfer's cause).
    """

    start_ns: npt.NDArray[np.float64]
    end_ns: npt.NDArray[np.float64]
    reason: npt.NDArray[np.int64]
    xfer_start_ns: npt.NDArray[np.float64]
    xfer_end_ns: npt.NDArray[np.float64]
    last_arrival: npt.NDArray[np.int64]


class _Engine:
    """One simulation run: the program's arrays, the per-node / per-resource / per-instance state, the event heap.

    Node state (global node index ``g``): ``start``/``end``/``reason`` (the
    :class:`Schedule` arrays), ``remaining`` (data dependencies not yet done).
    Resource state (global resource index ``r``): ``busy``, ``ready`` (a heap
    of waiting nodes in file order), ``last_on`` (the node that ran last), and
    the chain run on it (``seg_head``/``seg_last``/``seg_max``, ``seg_ver``
    invalidating the run's heap event when it is cut).  Instance state:
    ``arrived``/``needed`` members, ``last_arrival``, transfer times,
    ``delivered`` (ASTRA-sim send whose recv was not yet posted) and
    ``pending`` (members still running of a skewed collective).  ``cur`` is
    the event being processed as ``(time, kind, key)``: a run may only be cut
    after it.  Hot methods copy attributes to locals first (attribute loads
    cost more than local ones in CPython); ``extend``/``cut``: the walks, bound once (:func:`tracekit.jit.bound`).
    """

    __slots__ = (
        "program",
        "kind",
        "dur",
        "res",
        "remaining",
        "succ_ptr",
        "succ",
        "chain_delta",
        "instance_of",
        "instances",
        "n",
        "start",
        "end",
        "reason",
        "busy",
        "ready",
        "last_on",
        "seg_head",
        "seg_last",
        "seg_max",
        "seg_ver",
        "arrived",
        "needed",
        "last_arrival",
        "xfer_start",
        "xfer_end",
        "flows",
        "eager",
        "delivered",
        "member_ends",
        "pending",
        "events",
        "cur",
        "shared",
        "dur_np",
        "delta_np",
        "extend",
        "cut",
    )

    def __init__(self, program: ReplayProgram) -> None:
        n = program.n
        nan = math.nan
        self.program = program
        self.n = n
        self.kind = program.kind
        self.dur = program.duration_ns
        self.res = program.resource
        self.remaining = program.pred_count[:]  # array("i"): a copy, 4 bytes a node
        self.succ_ptr = program.succ_ptr
        self.succ = program.succ
        self.chain_delta = program.chain_delta
        self.instance_of = program.instance_of
        self.instances = instances = program.instances
        # array.array: list-speed item access, and numpy views of them cost nothing at the end
        self.start = array("d", [nan]) * n
        self.end = array("d", [nan]) * n
        self.reason = array("q", [-1]) * n
        n_res = program.n_resources
        self.busy = [False] * n_res
        self.ready: list[list[int]] = [[] for _ in range(n_res)]
        self.last_on = [-1] * n_res
        self.seg_head = [-1] * n_res
        self.seg_last = [-1] * n_res
        self.seg_max = [-1] * n_res
        self.seg_ver = [0] * n_res
        n_inst = len(instances)
        self.arrived = [0] * n_inst
        self.needed = [len(inst.nodes) for inst in instances]
        self.last_arrival = [-1] * n_inst
        self.xfer_start = [nan] * n_inst
        self.xfer_end = [nan] * n_inst
        self.flows = _Flows(program)
        self.eager = program.model_name == "astra"  # ASTRA-sim's send/recv (module doc)
        self.delivered = [False] * n_inst
        self.member_ends = program.member_ends  # ASTRA-sim: members that arrive apart end apart (astra_skew)
        self.pending = [0] * n_inst
        self.events: list[tuple[float, int, int, int]] = []
        self.cur = (0.0, -1, -1)
        # numpy views of the same buffers, for the compiled chain kernels (_chains): no copies
        self.shared: tuple[
            npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64], npt.NDArray[np.int32]
        ] = (
            np.frombuffer(self.start, dtype=np.float64),
            np.frombuffer(self.end, dtype=np.float64),
            np.frombuffer(self.reason, dtype=np.int64),
            np.frombuffer(self.remaining, dtype=np.int32),  # array("i"), see ReplayProgram.pred_count
        )
        self.dur_np: npt.NDArray[np.float64] = np.frombuffer(self.dur, dtype=np.float64)
        self.delta_np: npt.NDArray[np.int32] = np.frombuffer(self.chain_delta, dtype=np.int32)
        self.extend = bound(extend_run, *self.shared, self.dur_np, self.delta_np, 0, 0.0, 0)
        self.cut = bound(cut_run, *self.shared, self.delta_np, 0, 0, 0, 0.0, 0, 0, 0)

    # ----- starting nodes

    def run_segment(self, r: int, h: int, t: float, by: int) -> None:
        """Start timed node ``h`` on free resource ``r`` and the chain run behind it (:func:`extend_run`)."""
        self.busy[r] = True
        heap = self.ready[r]
        limit = heap[0] if heap else self.n
        self.start[h] = t
        self.reason[h] = by
        e = t + self.dur[h]
        self.end[h] = e
        m, top = h, -1
        nx = h + self.chain_delta[h]
        if nx != h and nx < limit and self.remaining[nx] == 1:  # a run follows: walk it compiled
            m, top, e = self.extend(*self.shared, self.dur_np, self.delta_np, h, e, limit)
        self.seg_head[r] = h
        self.seg_last[r] = m
        self.seg_max[r] = top
        v = self.seg_ver[r] + 1
        self.seg_ver[r] = v
        heappush(self.events, (e, EV_NODE, m, v))

    def truncate(self, r: int, h: int) -> None:
        """Node ``h`` joined the queue of ``r`` while a run is on it: cut the run where ``h`` gets in."""
        now, what, key = self.cur
        head, m = self.cut(*self.shared, self.delta_np, self.seg_head[r], self.seg_last[r], h, now, what, key, EV_NODE)
        self.seg_head[r] = head
        if m >= 0:
            self.seg_last[r] = m  # seg_max stays: an upper bound is enough for the pre-check
            v = self.seg_ver[r] + 1
            self.seg_ver[r] = v
            heappush(self.events, (self.end[m], EV_NODE, m, v))

    def arrive(self, r: int, h: int, t: float, by: int) -> None:
        """Communication node ``h`` reaches its transfer at ``t``; the last member starts the transfer."""
        k = self.kind[h]
        eager = self.eager
        if k == K_COLL or (eager and k == K_SEND):
            self.busy[r] = True  # send/recv streams are not exclusive (see _program)
        self.start[h] = t
        self.reason[h] = by
        i = self.instance_of[h]
        if i < 0:
            return  # matches nothing: holds its stream; reported if the replay stalls
        a = self.arrived[i] + 1
        self.arrived[i] = a
        if eager and k != K_COLL:
            if k == K_SEND:
                self.last_arrival[i] = h
                self.xfer_start[i] = t
                cost = self.instances[i].cost
                assert cost is not None  # a p2p instance has both members, so compile_program costed it
                # the hook may time the message itself (ASTRA-sim's congestion-aware network: links are shared)
                ends = self.member_ends(self.instances[i], [t]) if self.member_ends else None
                heappush(self.events, (t + cost.fixed_ns if ends is None else float(ends[0]), EV_LATENCY, i, 0))
            elif self.delivered[i]:  # the data is there: the recv ends as it is posted
                self.end[h] = t
                self.release(h, t)
            return
        self.last_arrival[i] = h
        if a == self.needed[i]:
            self.start_transfer(i, t)

    def start_transfer(self, i: int, t: float) -> None:
        """Every member of instance ``i`` has arrived at ``t``: schedule its ends."""
        self.xfer_start[i] = t
        inst = self.instances[i]
        events = self.events
        member_ends = self.member_ends
        ends = member_ends(inst, [self.start[g] for g in inst.nodes]) if member_ends else None
        if ends is not None:  # members arrived apart (astra_skew): each ends at its own time
            self.pending[i] = len(ends)
            for g, e_t in zip(inst.nodes, ends):
                heappush(events, (float(e_t), EV_MEMBER, g, i + 1))
            return
        cost = inst.cost
        assert cost is not None  # every member arrived, so none is missing and compile_program costed it
        heappush(events, (t + cost.fixed_ns, EV_LATENCY, i, 0))
        for g, off in zip(inst.nodes, cost.member_ns):
            if off < cost.fixed_ns:
                heappush(events, (t + off, EV_MEMBER, g, 0))  # finishes before the transfer ends

    def make_ready(self, h: int, t: float, by: int) -> None:
        """Node ``h`` has no dependencies left at ``t``: start it, or queue it behind its busy resource."""
        r = self.res[h]
        if self.busy[r]:
            heappush(self.ready[r], h)
            if self.seg_head[r] >= 0 and h < self.seg_max[r]:
                self.truncate(r, h)
        elif self.kind[h] == K_TIMED:
            self.run_segment(r, h, t, by)
        else:
            self.arrive(r, h, t, by)

    def release(self, g: int, t: float) -> None:
        """``g`` ended at ``t``: unblock its successors (zero-time ones complete at once)."""
        succ_ptr, succ, remaining, kind = self.succ_ptr, self.succ, self.remaining, self.kind
        stack = [g]
        while stack:
            u = stack.pop()
            for k in range(succ_ptr[u], succ_ptr[u + 1]):
                h = succ[k]
                c = remaining[h] - 1
                remaining[h] = c
                if c == 0:
                    if kind[h] == K_ZERO:
                        self.start[h] = t
                        self.end[h] = t
                        self.reason[h] = u
                        stack.append(h)
                    else:
                        self.make_ready(h, t, u)

    def dispatch(self, r: int, t: float) -> None:
        """Resource ``r`` is free at ``t``: start the first node waiting for it."""
        self.busy[r] = False
        heap = self.ready[r]
        if heap:
            h = heappop(heap)
            if self.kind[h] == K_TIMED:
                self.run_segment(r, h, t, self.last_on[r])
            else:
                self.arrive(r, h, t, self.last_on[r])

    # ----- ending nodes and transfers

    def node_done(self, key: int, ver: int, t: float) -> None:
        """Event: the run on ``key``'s resource ended with ``key`` at ``t`` (ignored when the run was cut)."""
        r = self.res[key]
        if ver != self.seg_ver[r]:
            return
        self.cur = (t, EV_NODE, key)
        self.seg_head[r] = -1
        self.last_on[r] = key
        succ, remaining, kind, res = self.succ, self.remaining, self.kind, self.res
        # unblock the successors; one that runs on this resource next starts without a queue round trip
        own = -1
        for k in range(self.succ_ptr[key], self.succ_ptr[key + 1]):
            h = succ[k]
            c = remaining[h] - 1
            remaining[h] = c
            if c == 0:
                if own < 0 and res[h] == r and kind[h] == K_TIMED:
                    own = h
                elif kind[h] == K_ZERO:
                    self.start[h] = t
                    self.end[h] = t
                    self.reason[h] = key
                    self.release(h, t)
                else:
                    self.make_ready(h, t, key)
        if own >= 0:
            heap = self.ready[r]
            if not heap or own < heap[0]:
                self.run_segment(r, own, t, key)
                return
            heappush(heap, own)
        self.dispatch(r, t)

    def finish_send(self, i: int, t: float) -> None:
        """ASTRA-sim send/recv: the send's data arrived at ``t`` (see module doc)."""
        self.xfer_end[i] = t
        s, rv = self.instances[i].nodes
        end, start = self.end, self.start
        end[s] = t
        self.last_on[self.res[s]] = s
        posted = rv >= 0 and start[rv] == start[rv]  # not NaN: the recv is posted
        if posted:
            end[rv] = t
        else:
            self.delivered[i] = True
        self.release(s, t)
        if posted:
            self.release(rv, t)
        self.dispatch(self.res[s], t)

    def finish_member(self, g: int, i: int, t: float) -> None:
        """Member node ``g`` of a transfer whose members finish at different times ends at ``t``.

        ``i`` is the instance + 1 when it is a skewed one (it ends with its last member), else 0.
        """
        self.end[g] = t
        self.last_on[self.res[g]] = g
        self.release(g, t)
        self.dispatch(self.res[g], t)
        if i:
            self.pending[i - 1] -= 1
            if self.pending[i - 1] == 0:
                self.xfer_end[i - 1] = t

    def finish_transfer(self, i: int, t: float) -> None:
        """Instance ``i``'s transfer ended at ``t`` on every member still in it."""
        self.xfer_end[i] = t
        nodes = self.instances[i].nodes
        end, last_on, res = self.end, self.last_on, self.res
        cost = self.instances[i].cost
        assert cost is not None  # its transfer started (start_transfer)
        if cost.member_ns:
            nodes = [g for g in nodes if math.isnan(end[g])]  # the others finished earlier
        for g in nodes:
            end[g] = t
            last_on[res[g]] = g
        for g in nodes:
            self.release(g, t)
        for g in nodes:
            self.dispatch(res[g], t)

    def latency_done(self, i: int, t: float) -> None:
        """Event: instance ``i``'s fixed (latency) part ended at ``t``: its data phase starts, or it ends."""
        self.cur = (t, EV_LATENCY, i)
        flows = self.flows
        if self.eager and self.instances[i].kind == "p2p":
            self.finish_send(i, t)
        elif flows.data_time(self.program, i) > 0.0:
            flows.start(i, t, self.events)
        else:
            self.finish_transfer(i, t)

    # ----- the run

    def run(self, progress: Callable[[int], None] | None = None) -> Schedule:
        """Process events until none are left; the :class:`Schedule` (or DeadlockError, see :func:`simulate`).

        ``progress(events done)`` is called every :data:`PROGRESS_EVERY` events.
        """
        kind = self.kind
        # nodes with no dependencies are ready at time 0 (a delayed rank's later: perturb.py), in global order
        delays = self.program.start_delay_ns
        for g in self.program.roots:
            t0 = delays.get(self.program.rank_of(g), 0.0) if delays else 0.0
            if kind[g] == K_ZERO:
                self.start[g] = t0
                self.end[g] = t0
                self.release(g, t0)
            else:
                self.make_ready(g, t0, -1)
        events, flows = self.events, self.flows
        node_done = self.node_done
        now = 0.0
        done, tick = 0, PROGRESS_EVERY if progress is not None else -1
        while events or flows.dirty:
            if flows.dirty and (not events or events[0][0] > now):
                flows.recompute(now, events)
                continue
            t, what, key, ver = heappop(events)
            now = t
            done += 1
            if done == tick and progress is not None:
                progress(done)
                tick += PROGRESS_EVERY
            if what == EV_NODE:
                node_done(key, ver, t)
            elif what == EV_MEMBER:
                self.cur = (t, what, key)
                self.finish_member(key, ver, t)
            elif what == EV_LATENCY:
                self.latency_done(key, t)
            elif ver == flows.version.get(key, -1) and key in flows.active:
                self.cur = (t, what, key)
                flows.end(key, t, events)
                self.finish_transfer(key, t)
        return self.schedule()

    def schedule(self) -> Schedule:
        """The state as a :class:`Schedule`; raises DeadlockError when some node never ended."""
        end_arr = np.frombuffer(self.end, dtype=np.float64)
        schedule = Schedule(
            start_ns=np.frombuffer(self.start, dtype=np.float64),
            end_ns=end_arr,
            reason=np.frombuffer(self.reason, dtype=np.int64),
            xfer_start_ns=np.asarray(self.xfer_start, dtype=np.float64),
            xfer_end_ns=np.asarray(self.xfer_end, dtype=np.float64),
            last_arrival=np.asarray(self.last_arrival, dtype=np.int64),
        )
        if self.n and np.isnan(end_arr).any():
            from tracekit.replayer.simulation.deadlock import diagnose

            raise diagnose(self.program, schedule, self.remaining, self.arrived)
        return schedule


#: events between two calls of :func:`simulate`'s ``progress``
PROGRESS_EVERY = 1 << 14


def events_progress(say: Callable[..., None] | None) -> Callable[[int], None] | None:
    """A ``progress(events done)`` for :func:`simulate` reporting to ``say(stage, done, total)``, or None."""
    if say is None:
        return None
    say("simulating events", 0, None)
    return lambda done: say("simulating events", done, None)


def simulate(program: ReplayProgram, progress: Callable[[int], None] | None = None) -> Schedule:
    """Run the simulation (one :class:`_Engine`); ``progress(events done)`` now and then (optional).

    Returns:
        the :class:`Schedule`.

    A ``member_ends`` hook with a ``replan()`` method (ASTRA-sim's congestion-aware network,
    :mod:`.astra_congestion`: collectives that overlap in time share links) is asked after each run whether the
    ends it gave were its final ones; while not, the simulation runs again with what it learned.

    Raises:
        DeadlockError: the replay stalled (per rank: the blocked node and what it waits for).
    """
    schedule = _Engine(program).run(progress)
    replan = getattr(program.member_ends, "replan", None)
    while replan is not None and replan():
        schedule = _Engine(program).run(progress)
    return schedule
