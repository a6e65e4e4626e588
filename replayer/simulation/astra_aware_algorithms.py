"""ASTRA-sim's collective algorithms message by message, for the congestion-aware network (:mod:`.astra_congestion`).

One state machine per rank and chunk, as ASTRA-sim's ``Ring.cc``, ``AllToAll.cc`` (direct), ``HalvingDoubling.cc``
and ``DoubleBinaryTreeAllReduce.cc`` run them (astra-sim 518bd51, ``system/astraccl/native_collectives``; facts
read, not copied).  Terms: a *hand-off* between the NPU and its memory side takes the endpoint delay ``e`` (10 ns
in a communicator group smaller than the network: its ring is a ``Local`` dimension, ``MemBus`` ``Fast``); a
reduced packet then takes ``R(m)`` more (``PacketBundle::call``), ``m`` the size of the message it prepares.

- Ring, direct, halving-doubling (:class:`_PacketPhase`): a chunk starts by handing ``parallel_reduce`` packets
  to memory; every hand-off back frees a slot; a free slot with a queued packet sends the packet's message and
  posts the recv of the matching one; every received message queues a packet.  Packets come in batches of
  ``parallel_reduce`` plain ones then ``non_zero`` ones that are reduced for a reduce-scatter, and for an
  all-reduce in odd batches.  Ring: one packet at a time to the next member, ``2(p-1)`` (all-reduce), ``p-1``
  or ``p(p-1)/2`` (all-to-all) messages.  Direct: ``p-1`` at a time to the members ``+1, +2, ...`` away (each
  packet the next peer), ``non_zero = p-1`` (``(p-1)^2`` in a group); an all-reduce sends its second half only
  once all ``p-1`` first-half messages arrived.  Halving-doubling: one packet at a time, the partner
  ``offset`` positions away (forward when ``(position // offset)`` is even, else back), offset and size
  doubling/halving after every packet (an all-reduce turns back at ``offset = p``), ``non_zero = log2(p) - 1``.
- Double binary tree (:class:`_TreePhase`): ASTRA-sim's ``BinaryTree`` (:func:`.astra_algorithms._tree`), the
  tree with the root at the last position for even chunks, the first for odd ones; every collective type runs
  as a tree all-reduce of the chunk.  A leaf hands its data to memory, sends it up, waits for the result and
  hands it back; an inner rank reduces each child's message (``e + R``), sends up after the second, reduces the
  parent's result and sends it to its left then its right child; the top rank reduces its child's message and
  sends the result down.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Callable, Sequence

from tracekit.replayer.simulation.astra_algorithms import _tree
from tracekit.replayer.simulation.astra_links import RankEvents


class _Job:
    """One collective: its members' chunk queues (``active`` chunks at once per rank) and their end times (ns)."""

    def __init__(
        self,
        ranks: RankEvents,
        tag: int,
        kind: str,
        algorithm: str,
        members: Sequence[int],
        chunk_bytes: int,
        chunks: tuple[int, int],
        handoff: tuple[int, bool],
        reduction_ns: Callable[[int], int],
    ) -> None:
        self.ranks, self.tag, self.kind, self.algorithm = ranks, tag, kind, algorithm
        self.members = list(members)
        self.p = len(self.members)
        self.chunk_bytes = chunk_bytes
        self.chunks, self.active = chunks
        self.handoff_ns, self.local = handoff
        self.reduction_ns = reduction_ns
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
        if self.algorithm == "double_binary_tree":
            _TreePhase(self, pos, k).run("init")
        else:
            _PacketPhase(self, pos, k).start()

    def phase_done(self, pos: int) -> None:
        """Member ``pos`` ended one chunk: start its next waiting chunk, or record its end."""
        self.done[pos] += 1
        if self.done[pos] == self.chunks:
            self.end_ns[pos] = self.ranks.q.now
        elif self.next_chunk[pos] < self.chunks:
            self._start_next(pos)

    def send(self, chunk: int, src_pos: int, dst_pos: int, m: int) -> None:
        """Send an ``m``-byte message of ``chunk`` between two members (positions) now."""
        self.ranks.send((self.tag, chunk), self.members[src_pos], self.members[dst_pos], m)

    def recv(self, chunk: int, src_pos: int, dst_pos: int, handler: Callable[[], None]) -> None:
        """Post the recv of ``chunk``'s next message from ``src_pos`` at ``dst_pos``."""
        self.ranks.recv((self.tag, chunk), self.members[src_pos], self.members[dst_pos], handler)

    def handoff(self, pos: int, reduce_bytes: int | None, then: Callable[[], None]) -> None:
        """A hand-off on member ``pos`` (``e``), then the reduction of ``reduce_bytes`` (if given), then ``then()``."""
        rank = self.members[pos]
        if reduce_bytes is None:
            self.ranks.register(rank, self.handoff_ns, then)
            return
        r = self.reduction_ns(reduce_bytes)
        self.ranks.register(rank, self.handoff_ns, lambda: self.ranks.register(rank, r, then))


class _PacketPhase:
    """One rank's part of one chunk of a ring, direct or halving-doubling collective (module doc)."""

    def __init__(self, job: _Job, pos: int, chunk: int) -> None:
        self.job, self.pos, self.chunk = job, pos, chunk
        p, kind, alg = job.p, job.kind, job.algorithm
        c = job.chunk_bytes
        self.halving = alg == "halving_doubling"
        self.direct = alg == "direct"
        self.parallel = p - 1 if self.direct else 1
        if self.halving:
            steps = int(math.log2(p))
            self.stream_count = 2 * steps if kind == "all_reduce" else steps
            self.non_zero = steps - 1
            self.msg = c if kind == "all_gather" else c // 2
            self.offset = p // 2 if kind == "all_gather" else 1
            self.multiplier = 0.5 if kind == "all_gather" else 2.0
        else:
            if kind == "all_reduce":
                self.stream_count = 2 * (p - 1)
            elif kind == "all_to_all":
                self.stream_count = p - 1 if self.direct else p * (p - 1) // 2
            else:
                self.stream_count = p - 1
            self.msg = c if kind == "all_gather" else c // p
            self.non_zero = (p - 1) * self.parallel if (not self.direct or job.local) else self.parallel
            self.offset = 1
        self.zero_left = self.non_zero_left = 0
        self.toggle = False
        self.free = 0
        self.received = 0
        self.packets: deque[tuple[int, int, int]] = deque()  # (receiver, sender, bytes), positions

    def _peers(self) -> tuple[int, int]:
        """The next packet's receiver and sender (positions); moves on to the following peer."""
        p, pos, d = self.job.p, self.pos, self.offset
        if self.halving:
            partner = (pos + d) % p if d == 0 or (pos // d) % 2 == 0 else (pos - d) % p
            return partner, partner
        if self.direct:
            self.offset = d % (p - 1) + 1
        return (pos + d) % p, (pos - d) % p

    def _next_size(self) -> None:
        """Halving-doubling: offset and message size of the next packet (``HalvingDoubling::process_max_count``)."""
        self.offset = int(self.offset * self.multiplier)
        self.msg = int(self.msg / self.multiplier)
        if self.offset == self.job.p and self.job.kind == "all_reduce":
            self.multiplier = 0.5
            self.offset = int(self.offset * self.multiplier)
            self.msg = int(self.msg / self.multiplier)

    def start(self) -> None:
        """``StreamInit``: hand ``parallel_reduce`` packets to memory."""
        for _ in range(self.parallel):
            self._insert_packet()

    def _insert_packet(self) -> None:
        job = self.job
        if self.zero_left == 0 and self.non_zero_left == 0:
            self.zero_left, self.non_zero_left = self.parallel, self.non_zero
            self.toggle = not self.toggle
        to, frm = self._peers()
        m = self.msg
        self.packets.append((to, frm, m))
        if self.halving:
            self._next_size()
        if self.zero_left > 0:
            self.zero_left -= 1
            job.handoff(self.pos, None, self._general)
            return
        self.non_zero_left -= 1
        reduced = job.kind == "reduce_scatter" or (job.kind == "all_reduce" and self.toggle)
        job.handoff(self.pos, m if reduced else None, self._general)

    def _general(self) -> None:
        self.free += 1
        if self.direct and self.job.kind == "all_reduce" and self.stream_count <= self.job.p - 1:
            if self.received < self.job.p - 1:
                return
            for _ in range(self.parallel):
                if not self._ready():  # nothing changed: the next call would not send either
                    break
        else:
            self._ready()
        if self.stream_count == 0 and self.free == self.parallel:
            self.job.phase_done(self.pos)

    def _ready(self) -> bool:
        """Send the first queued packet's message if a slot is free and messages are left; True if sent."""
        if not self.packets or self.stream_count == 0 or self.free == 0:
            return False
        to, frm, m = self.packets.popleft()
        self.job.send(self.chunk, self.pos, to, m)
        self.job.recv(self.chunk, frm, self.pos, self._received)
        self.stream_count -= 1
        self.free -= 1
        return True

    def _received(self) -> None:
        self.received += 1
        self._insert_packet()


class _TreePhase:
    """One rank's part of one chunk of ASTRA-sim's double binary tree all-reduce (module doc)."""

    def __init__(self, job: _Job, pos: int, chunk: int) -> None:
        self.job, self.pos, self.chunk = job, pos, chunk
        tree = _tree(job.p, chunk % 2 == 0)
        self.parent, self.kids = tree[pos]
        self.role = "root" if self.parent < 0 else ("leaf" if not self.kids else "inner")
        self.state = "begin"
        self.reductions = 0

    def _bundle(self, reduced: bool) -> None:
        c = self.job.chunk_bytes
        self.job.handoff(self.pos, c if reduced else None, lambda: self.run("general"))

    def _recv(self, src: int) -> None:
        self.job.recv(self.chunk, src, self.pos, lambda: self.run("recv"))

    def _send(self, dst: int) -> None:
        self.job.send(self.chunk, self.pos, dst, self.job.chunk_bytes)

    def run(self, event: str) -> None:
        """React to ``init``, ``general`` (a hand-off ended) or ``recv`` (a message arrived)."""
        role, state = self.role, self.state
        if role == "leaf":
            if state == "begin":
                self.state = "up"
                self._bundle(False)
            elif state == "up":
                self.state = "wait_parent"
                self._send(self.parent)
                self._recv(self.parent)
            elif state == "wait_parent":
                self.state = "end"
                self._bundle(False)
            elif state == "end":
                self.job.phase_done(self.pos)
        elif role == "inner":
            self._inner(state, event)
        elif state == "begin":
            self.state = "wait_one"
            self._recv(self.kids[0])
        elif state == "wait_one":
            self.state = "down"
            self._bundle(True)
        elif state == "down":
            self._send(self.kids[0])
            self.job.phase_done(self.pos)

    def _inner(self, state: str, event: str) -> None:
        if state == "begin":
            self.state = "wait_two"
            for k in self.kids:
                self._recv(k)
        elif state == "wait_two" and event == "recv":
            self.state = "wait_one"
            self._bundle(True)
        elif state == "wait_one" and event == "recv":
            self.state = "up"
            self._bundle(True)
        elif self.reductions < 1 and event == "general":
            self.reductions += 1
        elif state == "up":
            self.state = "wait_parent"
            self._send(self.parent)
            self._recv(self.parent)
        elif state == "wait_parent" and event == "recv":
            self.state = "down"
            self._bundle(True)
        elif state == "down":
            for k in self.kids:
                self._send(k)
            self.job.phase_done(self.pos)
