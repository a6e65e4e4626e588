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

import numpy as np

from tracekit.replayer.simulation.program import K_COLL, K_RECV, K_SEND, K_TIMED, K_ZERO, ReplayProgram

EV_NODE, EV_LATENCY, EV_DATA, EV_MEMBER = 0, 1, 2, 3
_OUT, _IN = 0, 1

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

    start_ns: np.ndarray
    end_ns: np.ndarray
    reason: np.ndarray
    xfer_start_ns: np.ndarray
    xfer_end_ns: np.ndarray
    last_arrival: np.ndarray


class _Flows:
    """Fluid bandwidth sharing among the data phases of transfers."""

    def __init__(self, program: ReplayProgram) -> None:
        spec = program.spec
        self.ndim = len(spec.network)
        self.bw = [d.bandwidth_bytes_per_ns for d in spec.network]
        self.link_n: dict[int, int] = {}
        self.active: dict[int, None] = {}
        self.total: dict[int, float] = {}
        self.parts: dict[int, list[tuple[float, list[int]]]] = {}
        self.rate: dict[int, float] = {}
        self.left: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.version: dict[int, int] = {}
        self.dirty = False

    def _link(self, rank: int, d: int, direction: int) -> int:
        return (rank * self.ndim + d) * 2 + direction

    def data_time(self, program: ReplayProgram, i: int) -> float:
        """Time alone of instance ``i``'s data phase (0 when it has none); prepares its links."""
        inst = program.instances[i]
        cost = inst.cost
        if not cost.shares_bandwidth or not cost.wire_bytes:
            return 0.0
        parts = []
        total = 0.0
        for d, nbytes in cost.wire_bytes:
            t_d = nbytes / self.bw[d]
            if t_d <= 0.0:
                continue
            ranks = inst.link_ranks if inst.link_ranks is not None else inst.ranks
            if inst.kind == "p2p":
                links = [self._link(ranks[0], d, _OUT), self._link(ranks[1], d, _IN)]
            else:
                links = [self._link(r, d, x) for r in dict.fromkeys(ranks) for x in (_OUT, _IN)]
            parts.append((t_d, links))
            total += t_d
        if total <= 0.0:
            return 0.0
        self.parts[i] = parts
        self.total[i] = total
        return total

    def start(self, i: int, t: float, events: list) -> None:
        link_n = self.link_n
        for _, links in self.parts[i]:
            for link in links:
                link_n[link] = link_n.get(link, 0) + 1
        self.active[i] = None
        self.left[i] = self.total[i]
        self.last[i] = t
        self.rate[i] = 0.0
        self.version[i] = 0
        self.dirty = True

    def end(self, i: int, t: float, events: list) -> None:
        link_n = self.link_n
        for _, links in self.parts.pop(i):
            for link in links:
                link_n[link] -= 1
        del self.active[i]
        for table in (self.total, self.rate, self.left, self.last):
            table.pop(i)
        self.dirty = True

    def recompute(self, t: float, events: list) -> None:
        """New rates for every active data phase, once all events of instant ``t`` are processed.

        Deferring the recomputation to the end of an instant makes the rates
        independent of the order in which same-time starts and ends were
        processed (which rank fold relies on: see :mod:`.folding`).
        """
        self.dirty = False
        link_n = self.link_n
        for j in self.active:
            weighted = 0.0
            for t_d, links in self.parts[j]:
                weighted += t_d * max(link_n[link] for link in links)
            rate = self.total[j] / weighted
            old = self.rate[j]
            if rate == old:
                continue
            if old > 0.0:
                self.left[j] = max(self.left[j] - (t - self.last[j]) * old, 0.0)
            self.last[j] = t
            self.rate[j] = rate
            self.version[j] += 1
            heappush(events, (t + self.left[j] / rate, EV_DATA, j, self.version[j]))


def simulate(program: ReplayProgram) -> Schedule:
    """Run the simulation.

    Returns:
        the :class:`Schedule`.

    Raises:
        DeadlockError: the replay stalled (per rank: the blocked node and what it waits for).
    """
    n = program.n
    kind = program.kind
    dur = program.duration_ns
    res = program.resource
    remaining = list(program.pred_count)
    succ_ptr = program.succ_ptr
    succ = program.succ
    chain_next = program.chain_next
    instance_of = program.instance_of
    instances = program.instances
    nan = math.nan
    # array.array: list-speed item access, and numpy views of them cost nothing at the end
    start = array("d", [nan]) * n
    end = array("d", [nan]) * n
    reason = array("q", [-1]) * n
    n_res = program.n_resources
    busy = [False] * n_res
    ready: list[list[int]] = [[] for _ in range(n_res)]
    last_on = [-1] * n_res
    seg_head = [-1] * n_res
    seg_last = [-1] * n_res
    seg_max = [-1] * n_res
    seg_ver = [0] * n_res
    n_inst = len(instances)
    arrived = [0] * n_inst
    needed = [len(inst.nodes) for inst in instances]
    last_arrival = [-1] * n_inst
    xfer_start = [nan] * n_inst
    xfer_end = [nan] * n_inst
    flows = _Flows(program)
    eager = program.model_name == "astra"  # ASTRA-sim's send/recv (module doc)
    delivered = [False] * n_inst
    member_ends = program.member_ends  # ASTRA-sim: members that arrive apart end apart (astra_skew)
    pending = [0] * n_inst
    events: list[tuple[float, int, int, int]] = []
    cur = (0.0, -1, -1)

    def run_segment(r: int, h: int, t: float, by: int) -> None:
        """Start timed node ``h`` on free resource ``r`` together with the chain run behind it."""
        busy[r] = True
        heap = ready[r]
        limit = heap[0] if heap else n
        start[h] = t
        reason[h] = by
        e = t + dur[h]
        end[h] = e
        m = h
        top = -1
        nx = chain_next[m]
        while nx >= 0 and nx < limit and remaining[nx] == 1:
            remaining[nx] = 0
            start[nx] = e
            reason[nx] = m
            e = e + dur[nx]
            end[nx] = e
            if nx > top:
                top = nx
            m = nx
            nx = chain_next[m]
        seg_head[r] = h
        seg_last[r] = m
        seg_max[r] = top
        v = seg_ver[r] + 1
        seg_ver[r] = v
        heappush(events, (e, EV_NODE, m, v))

    def truncate(r: int, h: int) -> None:
        """Node ``h`` joined the queue of ``r`` while a run is on it: cut the run where ``h`` gets in."""
        m = seg_head[r]
        last = seg_last[r]
        while m != last:
            nx = chain_next[m]
            if h < nx and (end[m], EV_NODE, m) > cur:
                x = nx
                while True:
                    start[x] = end[x] = nan
                    reason[x] = -1
                    remaining[x] = 1
                    if x == last:
                        break
                    x = chain_next[x]
                seg_last[r] = m  # seg_max stays: an upper bound is enough for the pre-check
                v = seg_ver[r] + 1
                seg_ver[r] = v
                heappush(events, (end[m], EV_NODE, m, v))
                return
            if end[m] < cur[0]:
                seg_head[r] = nx  # members wholly in the past can never be cut again
            m = nx

    def arrive(r: int, h: int, t: float, by: int) -> None:
        k = kind[h]
        if k == K_COLL or (eager and k == K_SEND):
            busy[r] = True  # send/recv streams are not exclusive (see _program)
        start[h] = t
        reason[h] = by
        i = instance_of[h]
        if i < 0:
            return  # matches nothing: holds its stream; reported if the replay stalls
        a = arrived[i] + 1
        arrived[i] = a
        if eager and k != K_COLL:
            if k == K_SEND:
                last_arrival[i] = h
                xfer_start[i] = t
                heappush(events, (t + instances[i].cost.fixed_ns, EV_LATENCY, i, 0))
            elif delivered[i]:  # the data is there: the recv ends as it is posted
                end[h] = t
                release(h, t)
            return
        last_arrival[i] = h
        if a == needed[i]:
            xfer_start[i] = t
            ends = member_ends(instances[i], [start[g] for g in instances[i].nodes]) if member_ends else None
            if ends is not None:  # members arrived apart (astra_skew): each ends at its own time
                pending[i] = len(ends)
                for g, e_t in zip(instances[i].nodes, ends):
                    heappush(events, (float(e_t), EV_MEMBER, g, i + 1))
                return
            cost = instances[i].cost
            heappush(events, (t + cost.fixed_ns, EV_LATENCY, i, 0))
            for g, off in zip(instances[i].nodes, cost.member_ns):
                if off < cost.fixed_ns:
                    heappush(events, (t + off, EV_MEMBER, g, 0))  # finishes before the transfer ends

    def make_ready(h: int, t: float, by: int) -> None:
        r = res[h]
        if busy[r]:
            heappush(ready[r], h)
            if seg_head[r] >= 0 and h < seg_max[r]:
                truncate(r, h)
        elif kind[h] == K_TIMED:
            run_segment(r, h, t, by)
        else:
            arrive(r, h, t, by)

    def release(g: int, t: float) -> None:
        """``g`` ended at ``t``: unblock its successors (zero-time ones complete at once)."""
        stack = [g]
        while stack:
            u = stack.pop()
            for k in range(succ_ptr[u], succ_ptr[u + 1]):
                h = succ[k]
                c = remaining[h] - 1
                remaining[h] = c
                if c == 0:
                    if kind[h] == K_ZERO:
                        start[h] = t
                        end[h] = t
                        reason[h] = u
                        stack.append(h)
                    else:
                        make_ready(h, t, u)

    def dispatch(r: int, t: float) -> None:
        busy[r] = False
        heap = ready[r]
        if heap:
            h = heappop(heap)
            if kind[h] == K_TIMED:
                run_segment(r, h, t, last_on[r])
            else:
                arrive(r, h, t, last_on[r])

    def finish_send(i: int, t: float) -> None:
        """ASTRA-sim send/recv: the send's data arrived at ``t`` (see module doc)."""
        xfer_end[i] = t
        s, rv = instances[i].nodes
        end[s] = t
        last_on[res[s]] = s
        posted = rv >= 0 and start[rv] == start[rv]  # not NaN: the recv is posted
        if posted:
            end[rv] = t
        else:
            delivered[i] = True
        release(s, t)
        if posted:
            release(rv, t)
        dispatch(res[s], t)

    def finish_member(g: int, t: float) -> None:
        """Member node ``g`` of a transfer whose members finish at different times ends at ``t``."""
        end[g] = t
        last_on[res[g]] = g
        release(g, t)
        dispatch(res[g], t)

    def finish_transfer(i: int, t: float) -> None:
        xfer_end[i] = t
        nodes = instances[i].nodes
        if instances[i].cost.member_ns:
            nodes = [g for g in nodes if math.isnan(end[g])]  # the others finished earlier
        for g in nodes:
            end[g] = t
            last_on[res[g]] = g
        for g in nodes:
            release(g, t)
        for g in nodes:
            dispatch(res[g], t)

    # nodes with no dependencies are ready at time 0, in global order
    for g in program.roots:
        if kind[g] == K_ZERO:
            start[g] = 0.0
            end[g] = 0.0
            release(g, 0.0)
        else:
            make_ready(g, 0.0, -1)

    now = 0.0
    while events or flows.dirty:
        if flows.dirty and (not events or events[0][0] > now):
            flows.recompute(now, events)
            continue
        ev = heappop(events)
        t, what, key, ver = ev
        now = t
        if what == EV_NODE:
            r = res[key]
            if ver != seg_ver[r]:
                continue
            cur = (t, what, key)
            seg_head[r] = -1
            last_on[r] = key
            # unblock the successors; one that runs on this resource next starts without a queue round trip
            own = -1
            for k in range(succ_ptr[key], succ_ptr[key + 1]):
                h = succ[k]
                c = remaining[h] - 1
                remaining[h] = c
                if c == 0:
                    if own < 0 and res[h] == r and kind[h] == K_TIMED:
                        own = h
                    elif kind[h] == K_ZERO:
                        start[h] = t
                        end[h] = t
                        reason[h] = key
                        release(h, t)
                    else:
                        make_ready(h, t, key)
            if own >= 0:
                heap = ready[r]
                if not heap or own < heap[0]:
                    run_segment(r, own, t, key)
                    continue
                heappush(heap, own)
            dispatch(r, t)
        elif what == EV_MEMBER:
            cur = (t, what, key)
            finish_member(key, t)
            if ver:  # astra_skew: the instance ends with its last member
                pending[ver - 1] -= 1
                if pending[ver - 1] == 0:
                    xfer_end[ver - 1] = t
        elif what == EV_LATENCY:
            cur = (t, what, key)
            if eager and instances[key].kind == "p2p":
                finish_send(key, t)
            elif flows.data_time(program, key) > 0.0:
                flows.start(key, t, events)
            else:
                finish_transfer(key, t)
        else:
            if ver != flows.version.get(key, -1) or key not in flows.active:
                continue
            cur = (t, what, key)
            flows.end(key, t, events)
            finish_transfer(key, t)

    end_arr = np.frombuffer(end, dtype=np.float64)
    schedule = Schedule(
        start_ns=np.frombuffer(start, dtype=np.float64), end_ns=end_arr,
        reason=np.frombuffer(reason, dtype=np.int64),
        xfer_start_ns=np.asarray(xfer_start, dtype=np.float64),
        xfer_end_ns=np.asarray(xfer_end, dtype=np.float64),
        last_arrival=np.asarray(last_arrival, dtype=np.int64),
    )
    if n and np.isnan(end_arr).any():
        from tracekit.replayer.simulation.deadlock import diagnose

        raise diagnose(program, schedule, remaining, arrived)
    return schedule


# kinds re-exported for the results module
COMM_KINDS = (K_COLL, K_SEND, K_RECV)
