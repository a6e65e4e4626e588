"""ASTRA-sim's collective algorithms, timed as its analytical congestion-unaware backend times them.

Rules measured by running ASTRA-sim (analytical backend, commit c459ab61; its outputs on 1,081 cases of it and of
518bd51 are recorded in ``../shared/reference/astra-sim``) and read as facts from its
source (``astra-sim/system/astraccl/native_collectives``, ``Sys.cc``); the derivations and the measurements that
confirmed each rule are in replayer/NOTES.md ("ASTRA-sim algorithms").  Everything is integer ns.

Terms (per dimension): ``X(m, h) = floor(h * latency + m / B)`` one message of ``m`` bytes over ``h`` hops,
``R(m) = 3 * floor(m / local_mem_bw)`` the local reduction of a received message, ``e`` the endpoint delay
(every hand-off between the NPU and the memory side costs ``e``; ASTRA-sim's ``MemBus`` with the ``Usual``
transmission, which every analytical dimension uses).

- Halving-doubling (``HalvingDoubling.cc``) on ``p = 2^L`` ranks, chunk ``C``: a list of messages
  ``(bytes, partner distance, reduced)``; reduce-scatter sends ``C//2, C//4, ...`` (``L`` messages) to the
  partners at distance ``1, 2, 4, ...``, all-gather sends ``C, 2C, 4C, ...`` to distances ``p/2, ..., 1``,
  all-reduce is the reduce-scatter then the all-gather (the message after the turn is twice the last one).
  The first message of each half is not reduced; the others of a reduce-scatter half are.  Time
  ``e + sum(X(m, h(d)) + e + [reduced] R(m))``.
- Double binary tree (``DoubleBinaryTreeAllReduce.cc``, ``BinaryTree.cc``): ASTRA-sim runs it as an all-reduce of
  the whole chunk whatever the collective type; ranks finish at different times (see :func:`dbt_finish_ns`).
- Chunks (``Sys::generate_collective``): ``C = D // S`` (at least the number of NPUs except for all-gather), ``ceil(D
  / C)`` chunks of ``C`` bytes; each chunk runs its phases (one per dimension) in order, a dimension's queue runs at
  most ``A = active-chunks-per-dimension`` chunks at once, first come first served (:func:`pipeline_ns`).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass(frozen=True)
class HDMessage:
    """One halving-doubling step: ``msg_bytes`` to the partner ``distance`` ranks away; ``reduced``: R applies."""

    msg_bytes: int
    distance: int
    reduced: bool


def is_power_of_two(p: int) -> bool:
    """True for 1, 2, 4, 8, ...: the group sizes ASTRA-sim's halving-doubling and double binary tree can run."""
    return p >= 1 and p & (p - 1) == 0


def hd_messages(kind: str, c: int, p: int) -> list[HDMessage]:
    """Halving-doubling messages of one chunk of ``c`` bytes on ``p`` (a power of two) ranks, in order.

    ``kind`` is ``all_reduce``, ``reduce_scatter`` or ``all_gather`` (ASTRA-sim exits on an all-to-all).
    Sizes are ASTRA-sim's ``uint64`` arithmetic: halving truncates.
    """
    steps = int(math.log2(p))
    if kind == "all_gather":
        return [HDMessage(c << k, p >> (k + 1), False) for k in range(steps)]
    down, size = [], c // 2
    for k in range(steps):
        down.append(HDMessage(size, 1 << k, k > 0))
        size //= 2
    if kind == "reduce_scatter":
        return down
    # all-reduce: after the last halving ASTRA-sim doubles the halved size back (size // 2 * 2)
    up, size = [], size * 2
    for k in range(steps):
        up.append(HDMessage(size, p >> (k + 1), False))
        size *= 2
    return down + up


def hd_final_bytes(kind: str, c: int, p: int) -> int:
    """What one rank holds after a halving-doubling phase (the next phase's chunk)."""
    if kind == "reduce_scatter":
        return c // p
    if kind == "all_gather":
        return c * p
    return c


# --- the chunk pipeline over dimensions ---


def pipeline_ns(phase_ns: Sequence[tuple[int, int]], chunks: int, active: int) -> int:
    """Time until the last of ``chunks`` identical chunks finishes its last phase.

    ``phase_ns``: ``(queue, duration ns)`` per phase of one chunk, in order (a queue per dimension: ASTRA-sim's
    analytical frontend has one queue per dimension, shared by a chunk's reduce-scatter and all-gather phases of
    that dimension).  A queue runs at most ``active`` chunks at once; a chunk waiting for a queue waits behind the
    chunks that reached it earlier (``Sys::insert_stream``, equal priorities); chunks start in order.  Events at
    equal times are taken in the order they were scheduled, as ASTRA-sim's event queue does.
    """
    if chunks <= 0 or not phase_ns:
        return 0
    waiting: dict[int, list[tuple[int, int]]] = {}
    running: dict[int, int] = {}
    events: list[tuple[int, int, int, int]] = []  # (time, seq, chunk, phase index)
    seq = 0
    end = 0

    def try_start(queue: int, t: int) -> None:
        """Start the chunks waiting for ``queue`` while it has a free slot, at time ``t`` (ns)."""
        nonlocal seq
        lst = waiting.get(queue, [])
        while lst and running.get(queue, 0) < active:
            chunk, ph = lst.pop(0)
            running[queue] = running.get(queue, 0) + 1
            heapq.heappush(events, (t + phase_ns[ph][1], seq, chunk, ph))
            seq += 1

    first = phase_ns[0][0]
    waiting[first] = [(k, 0) for k in range(chunks)]
    try_start(first, 0)
    while events:
        t, _, chunk, ph = heapq.heappop(events)
        queue = phase_ns[ph][0]
        running[queue] -= 1
        if ph + 1 < len(phase_ns):
            nxt = phase_ns[ph + 1][0]
            waiting.setdefault(nxt, []).append((chunk, ph + 1))
            try_start(queue, t)
            try_start(nxt, t)
        else:
            end = max(end, t)
            try_start(queue, t)
    return end


# --- double binary tree ---


def _tree(p: int, root_max: bool) -> dict[int, tuple[int, list[int]]]:
    """``index -> (parent or -1, children)`` of ASTRA-sim's ``BinaryTree`` on ``p = 2^L`` ranks.

    A complete binary tree of ``p - 1`` ranks numbered in order (left subtree, node, right subtree), under a top
    rank with one child: for the RootMax tree the top is the last index (its child is the tree's root), for
    RootMin the first.
    """
    nodes: dict[int, tuple[int, list[int]]] = {}
    counter = [1 if not root_max else 0]

    def build(depth: int, parent: int) -> int:
        """Number a complete subtree of ``depth`` levels in order (left, node, right) under ``parent``; returns its root (-1 when empty)."""
        if depth == 0:
            return -1
        left = build(depth - 1, -2)
        me = counter[0]
        counter[0] += 1
        right = build(depth - 1, -2)
        kids = [k for k in (left, right) if k >= 0]
        nodes[me] = (parent, kids)
        for k in kids:
            nodes[k] = (me, nodes[k][1])
        return me

    top = p - 1 if root_max else 0
    root = build(int(math.log2(p)), top)
    nodes[root] = (top, nodes[root][1])
    nodes[top] = (-1, [root])
    return nodes


def dbt_finish_ns(
    p: int, start_ns: Sequence[int], *, root_max: bool, send_ns: Callable[[int, int], int], e: int, r: int
) -> list[int]:
    """Finish time of one double-binary-tree chunk on each of ``p`` ranks that start it at ``start_ns[i]``.

    ``send_ns(u, v)``: message time from index ``u`` to ``v``; ``e``: endpoint delay; ``r``: R(chunk).  As
    ``DoubleBinaryTreeAllReduce.cc`` runs: a leaf hands its data to memory (``e``), sends it up and waits for the
    result, then ``e``; an inner rank waits for both children, then ``e + r`` and sends up; the top rank waits for
    its child, then ``e + r``, sends down and finishes; an inner rank receiving from its parent takes ``e + r``,
    sends to its children and finishes.  A message received before its receive is posted completes at the post.
    """
    return [f for f, _ in dbt_times(p, start_ns, root_max=root_max, send_ns=send_ns, e=e, r=r)]


def dbt_times(
    p: int, start_ns: Sequence[int], *, root_max: bool, send_ns: Callable[[int, int], int], e: int, r: int
) -> list[tuple[int, int]]:
    """:func:`dbt_finish_ns` with, per rank, the time ASTRA-sim schedules the finishing event (a leaf: when the
    result arrives; the others: when the reduction starts): ties at equal finish times go in that order."""
    tree = _tree(p, root_max)
    up: dict[int, int] = {}  # time the rank's data arrives at its parent

    def sent_up(i: int) -> int:
        """When rank ``i`` sends its reduced data up the tree (ns); leaves: start + ``e``, inner ranks after both children + ``e + r``."""
        parent, kids = tree[i]
        if not kids:
            t = start_ns[i] + e
        else:
            t = max(max(up_arrival(k), start_ns[i]) for k in kids) + e + r
        up[i] = t
        return t

    def up_arrival(k: int) -> int:
        """When child ``k``'s data reaches its parent (ns): its send plus the message time."""
        return sent_up(k) + send_ns(k, tree[k][0])

    finish = [(0, 0)] * p
    top = next(i for i, (parent, _) in tree.items() if parent < 0)
    (child,) = tree[top][1]
    got = max(up_arrival(child), start_ns[top])
    down = {top: got + e + r}
    finish[top] = (down[top], got + e)
    order = [child]
    while order:
        i = order.pop()
        parent, kids = tree[i]
        got = max(down[parent] + send_ns(parent, i), up[i])
        if kids:
            down[i] = got + e + r
            finish[i] = (down[i], got + e)
            order.extend(kids)
        else:
            finish[i] = (got + e, got)
    return finish


def dbt_chunks_ns(p: int, chunks: int, active: int, *, send_ns: Callable[[int, int], int], e: int, r: int) -> list[int]:
    """Finish time per rank of ``chunks`` double-binary-tree chunks, ``active`` at once per rank.

    Chunk ``k`` runs on the RootMax tree when ``k`` is even, RootMin when odd (``DoubleBinaryTreeTopology``
    alternates per chunk); on each rank chunk ``k`` starts when a slot frees (the ``k - active``-th chunk
    finishes there).  Chunks never exchange messages with each other, so each chunk is :func:`dbt_finish_ns` of
    its per-rank start times.
    """
    finishes: list[list[int]] = []
    for k in range(chunks):
        starts = [0] * p
        if k >= active:
            # the rank's slots free in finish order; chunk k takes the (k - active + 1)-th freed slot
            for i in range(p):
                done = sorted(f[i] for f in finishes)
                starts[i] = done[k - active]
        finishes.append(dbt_finish_ns(p, starts, root_max=(k % 2 == 0), send_ns=send_ns, e=e, r=r))
    return [max(f[i] for f in finishes) for i in range(p)]


# --- several dimensions with a tree phase: per rank ---


@dataclass(frozen=True)
class RankPhase:
    """One phase of a chunk for :func:`ranks_pipeline_ns`.

    Attributes:
        axis: which coordinate of the members the phase runs along (its line: the members equal elsewhere).
        duration_ns: time of the phase when its line's members start it together (ring, direct,
            halving-doubling); it starts when the last member of the line reaches it.
        tree: for a double-binary-tree phase, ``tree(starts, root_max) -> (finish, scheduled at)`` per line
            position (see :func:`dbt_times`); None otherwise.
        tree_index, trees_per_chunk: this phase's place among the tree phases of its axis in one chunk, and
            their number (ASTRA-sim's tree topology of a dimension alternates RootMax/RootMin at every phase
            it builds, chunk after chunk).
        last_delay_ns: for the other phases, the delay of the phase's last event (its last reduction, or ``e``
            when the last message is not reduced): ASTRA-sim takes events of equal time in the order they were
            scheduled, which decides which of two chunks finishing together queues first.
    """

    axis: int
    duration_ns: int
    tree: Callable[[list[int], bool], list[tuple[int, int]]] | None = None
    tree_index: int = 0
    trees_per_chunk: int = 1
    last_delay_ns: int = 0


def ranks_pipeline_ns(shape: Sequence[int], phases: Sequence[RankPhase], chunks: int, active: int) -> list[int]:
    """Finish time of each member (coordinates in ``shape``, first axis varying fastest) of a collective.

    As :func:`pipeline_ns` but per member: every member has a queue per axis running ``active`` chunks at once;
    a line's phase starts on each member when it gets a slot there and ends when the phase's rule says (tree:
    per member; others: the line's last start plus the duration).  Used when a tree phase makes members finish
    at different times.
    """
    members: list[tuple[int, ...]] = [()]
    for size in shape:
        members = [m + (c,) for c in range(size) for m in members]
    index = {m: i for i, m in enumerate(members)}
    waiting: dict[tuple[int, int], list[tuple[int, int]]] = {}
    running: dict[tuple[int, int], int] = {}
    pending: dict[tuple[int, int, tuple[int, ...]], dict[int, int]] = {}  # (chunk, phase, line) -> starts
    events: list[tuple[int, int, int, int, int, int]] = []  # (time, scheduled at, seq, member, chunk, phase)
    seq = 0
    finish = [0] * len(members)

    def line_started(chunk: int, j: int, m: tuple[int, ...], t: int) -> None:
        """Record member ``m`` starting phase ``j`` of ``chunk`` at ``t`` (ns); once the whole line has, schedule its members' ends."""
        nonlocal seq
        ph = phases[j]
        key = (chunk, j, m[: ph.axis] + m[ph.axis + 1 :])
        starts = pending.setdefault(key, {})
        starts[m[ph.axis]] = t
        if len(starts) < shape[ph.axis]:
            return
        del pending[key]
        ordered = [starts[c] for c in range(shape[ph.axis])]
        if ph.tree is None:
            end = max(ordered) + ph.duration_ns
            ends = [(end, end - ph.last_delay_ns)] * len(ordered)
        else:
            ends = ph.tree(ordered, (chunk * ph.trees_per_chunk + ph.tree_index) % 2 == 0)
        for c, (end, scheduled) in enumerate(ends):
            other = m[: ph.axis] + (c,) + m[ph.axis + 1 :]
            heapq.heappush(events, (end, scheduled, seq, index[other], chunk, j))
            seq += 1

    def try_start(i: int, axis: int, t: int) -> None:
        """Start the chunks waiting on member ``i``'s queue of ``axis`` while it has a free slot, at time ``t`` (ns)."""
        lst = waiting.get((i, axis), [])
        while lst and running.get((i, axis), 0) < active:
            chunk, j = lst.pop(0)
            running[(i, axis)] = running.get((i, axis), 0) + 1
            line_started(chunk, j, members[i], t)

    for i in range(len(members)):
        waiting[(i, phases[0].axis)] = [(k, 0) for k in range(chunks)]
    for i in range(len(members)):
        try_start(i, phases[0].axis, 0)
    while events:
        t, _, _, i, chunk, j = heapq.heappop(events)
        axis = phases[j].axis
        running[(i, axis)] -= 1
        if j + 1 < len(phases):
            nxt = phases[j + 1].axis
            waiting.setdefault((i, nxt), []).append((chunk, j + 1))
            try_start(i, axis, t)
            try_start(i, nxt, t)
        else:
            finish[i] = max(finish[i], t)
            try_start(i, axis, t)
    return finish


def ring_times(
    kind: str,
    c: int,
    starts: Sequence[int],
    *,
    send_ns: Callable[[int, int, int], int],
    e: int,
    reduction_ns: Callable[[int], int],
) -> list[tuple[int, int]]:
    """Per member of a ring (member ``i`` sends to ``i + 1``) that starts at ``starts[i]``: ``(finish, scheduled
    at)`` of one chunk of ``c`` bytes, message by message.

    ``send_ns(u, v, m)``: time of an ``m``-byte message from member ``u`` to ``v``.  Member ``i`` sends its first
    message ``e`` after its start; its step ``k`` completes when the previous member's step-``k`` message has
    arrived and its own step ``k - 1`` is done, plus ``e`` and, in a reducing step, ``R``; the next step's message
    leaves then.  All-reduce: ``p - 1`` reducing steps then ``p - 1`` plain ones of ``C // p``; reduce-scatter the
    reducing ones; all-gather ``p - 1`` plain steps of ``C``; all-to-all ``p (p - 1) / 2`` plain steps of
    ``C // p``.  With equal links and starts this is the ring formula of DESIGN.md section 4.
    """
    p = len(starts)
    piece = c // p
    if kind == "all_reduce":
        steps = [(piece, True)] * (p - 1) + [(piece, False)] * (p - 1)
    elif kind == "reduce_scatter":
        steps = [(piece, True)] * (p - 1)
    elif kind == "all_gather":
        steps = [(c, False)] * (p - 1)
    else:
        steps = [(piece, False)] * (p * (p - 1) // 2)
    if not steps:  # a single member: nothing to send
        return [(s + e, 0) for s in starts]
    sizes = {m for m, _ in steps}
    # the link into member i (from i - 1), per message size: once per size, not once per step
    links = {m: [send_ns((i - 1) % p, i, m) for i in range(p)] for m in sizes}
    m_last, reduced_last = steps[-1]
    tail = reduction_ns(m_last) if reduced_last else e  # the last event's delay: done - scheduled at
    if len(set(starts)) == 1 and all(len(set(x)) == 1 for x in links.values()):
        # equal links and starts (the usual case; O(p) instead of O(p x steps)): the ring formula
        t = starts[0] + e
        for m, reduced in steps:
            t += links[m][0] + e + (reduction_ns(m) if reduced else 0)
        return [(t, t - tail)] * p
    if len(sizes) == 1 and p * len(steps) > _STEPWISE_MAX:
        (x,) = links.values()
        done = _ring_maxplus(starts, x, len(steps), e + sum(e + (reduction_ns(m) if r else 0) for m, r in steps))
        return [(t, t - tail) for t in done]
    sent = [s + e for s in starts]  # when each member's current message leaves
    done = list(sent)
    for m, reduced in steps:
        r = reduction_ns(m) if reduced else 0
        x = links[m]
        done = [max(sent[i - 1] + x[i], done[i]) + e + r for i in range(p)]
        sent = done
    return [(t, t - tail) for t in done]


#: above this many member-steps :func:`ring_times` uses the max-plus form (:func:`_ring_maxplus`)
_STEPWISE_MAX = 256


def _ring_maxplus(starts: Sequence[int], link_ns: Sequence[int], steps: int, delays_ns: int) -> list[int]:
    """End of each member of a ring whose steps all send messages of one size, in closed form (ns).

    The step recurrence of :func:`ring_times`, ``done_i(k+1) = max(done_{i-1}(k) + X_i, done_i(k)) + D_k`` with
    ``done_i(0) = a_i + e``, is linear in the (max, +) algebra: after ``M`` steps, ``done_i`` is ``sum(D_k)`` plus
    the largest ``a_q + e + W(q -> i, j)`` over the ``j <= M`` shifts a message chain can take from member ``q``
    to ``i`` (``j = (i - q) mod p`` plus whole laps, ``W`` the link times on the way).  Links are never negative,
    so for each ``q`` the most laps that fit win.  ``delays_ns`` is ``e + sum(D_k)``; ``link_ns[i]`` is ``X_i``.
    Exact in integers; O(p^2) array work instead of O(p x M) Python steps.
    """
    import numpy as np

    p = len(starts)
    a = np.asarray(starts, dtype=np.int64)
    x = np.asarray(link_ns, dtype=np.int64)
    lap = int(x.sum())
    cum = np.concatenate(([0], np.cumsum(x)))  # cum[n] = X_0 + ... + X_{n-1}
    i = np.arange(p)[:, None]
    q = np.arange(p)[None, :]
    j0 = (i - q) % p  # fewest shifts from q to i
    laps = (steps - j0) // p  # whole laps that still fit (negative: q cannot reach i in time)
    partial = cum[i + 1] - cum[q + 1] + np.where(q > i, lap, 0)  # links q+1 .. i, going forward
    reach = np.where(laps >= 0, a[None, :] + laps * lap + partial, np.iinfo(np.int64).min)
    return (reach.max(axis=1) + delays_ns).tolist()
