"""The network and event machinery of ASTRA-sim's congestion-aware analytical backend (see :mod:`.astra_congestion`).

Facts (astra-network-analytical 599a047 ``congestion_aware/``, astra-sim 518bd51 ``network_frontend/analytical``
and ``system/Sys.cc``), read, not copied: one event queue ordered by time then scheduling order; FIFO links
that hold a message ``floor(m / B)`` ns and deliver it ``floor(latency + m / B)`` ns after it started; routes
of Ring (shorter way, clockwise on a tie), Switch (through device ``npus``) and FullyConnected (direct); a
rank's system events of one tick batched behind one queue event; messages matched to recvs by
``(tag, src, dst)`` in order, a recv posted after its message arrived running through an event at once.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Callable


class EventQueue:
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


class _Link:
    """One direction of a link: busy while a message serializes on it; the messages waiting, in order."""

    __slots__ = ("busy", "waiting")

    def __init__(self) -> None:
        self.busy = False
        self.waiting: deque[tuple[tuple, int]] = deque()


class LinkNetwork:
    """FIFO links and routes of one 1-D topology (see module doc); delivers messages through ``on_arrival``."""

    def __init__(self, q: EventQueue, topology: str, npus: int, bw_bytes_per_ns: float, latency_ns: float) -> None:
        self.q = q
        self.topology = topology
        self.npus = npus
        self.bw = bw_bytes_per_ns
        self.latency = latency_ns
        self._links: dict[tuple[int, int], _Link] = {}  # (from device, to device) -> the link
        self._routes: dict[tuple[int, int], tuple[_Link, ...]] = {}  # (src, dst) -> links in order

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

    def send(self, src: int, dst: int, m: int, on_arrival: Callable[..., None], *args) -> None:
        """Start an ``m``-byte message from ``src`` to ``dst`` now; ``on_arrival(*args)`` runs at its delivery."""
        links = self._routes.get((src, dst))
        if links is None:
            hops = self.route(src, dst)
            links = self._routes[(src, dst)] = tuple(self._link(a, b) for a, b in zip(hops, hops[1:]))
        self._enter((links, m, on_arrival, args), 0)

    def _link(self, a: int, b: int) -> _Link:
        link = self._links.get((a, b))
        if link is None:
            link = self._links[(a, b)] = _Link()
        return link

    def _enter(self, msg: tuple, hop: int) -> None:
        link = msg[0][hop]
        if link.busy:
            link.waiting.append((msg, hop))
        else:
            self._transmit(link, msg, hop)

    def _transmit(self, link: _Link, msg: tuple, hop: int) -> None:
        q = self.q
        link.busy = True
        serial = msg[1] / self.bw
        q.at(q.now + int(self.latency + serial), self._hop_done, msg, hop)
        q.at(q.now + int(serial), self._link_free, link)

    def _hop_done(self, msg: tuple, hop: int) -> None:
        if hop + 1 == len(msg[0]):
            msg[2](*msg[3])
        else:
            self._enter(msg, hop + 1)

    def _link_free(self, link: _Link) -> None:
        link.busy = False
        if link.waiting:
            self._transmit(link, *link.waiting.popleft())

    def empty_route_ns(self, src: int, dst: int, m: int) -> int:
        """Time of one ``m``-byte message alone on the network: ``hops x floor(latency + m / B)``."""
        return (len(self.route(src, dst)) - 1) * int(self.latency + m / self.bw)


class RankEvents:
    """Per-rank system events batched per tick (``Sys::try_register_event``), and message matching."""

    def __init__(self, q: EventQueue, net: LinkNetwork) -> None:
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
        self.net.send(src, dst, m, self._delivered, (tag, src, dst))

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
