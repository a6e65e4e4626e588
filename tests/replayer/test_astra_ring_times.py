"""``astra_algorithms.ring_times``: one ring chunk per member, message by message, whose members start apart.

The reference is the step recurrence of ASTRA-sim's eager ring written out literally (``ring_times``' docstring,
``astra_skew``'s module doc): member ``i`` sends message 0 at ``a_i + e``; step ``k`` completes at
``max(previous member's step-k message arrived, own step k - 1 done) + e (+ R in a reducing step)``.  The
function under test takes a closed form for equal starts and links and a (max, +) form for large rings; both must
give the recurrence's integers exactly.
"""

from __future__ import annotations

import random

import pytest

from tracekit.replayer.simulation.astra_algorithms import ring_times

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")


def recurrence(kind, c, starts, link_ns, e, reduction_ns):
    """The step recurrence, one member and one step at a time: ``(finish, scheduled at)`` per member."""
    p = len(starts)
    piece = c // p
    steps = {
        "all_reduce": [(piece, True)] * (p - 1) + [(piece, False)] * (p - 1),
        "reduce_scatter": [(piece, True)] * (p - 1),
        "all_gather": [(c, False)] * (p - 1),
        "all_to_all": [(piece, False)] * (p * (p - 1) // 2),
    }[kind]
    sent = [a + e for a in starts]
    done = list(sent)
    last = [0] * p
    for m, reduced in steps:
        r = reduction_ns(m) if reduced else 0
        arrived = [sent[(i - 1) % p] + link_ns((i - 1) % p, i, m) for i in range(p)]
        for i in range(p):
            ready = max(arrived[i], done[i]) + e
            done[i] = ready + r
            last[i] = ready if reduced else ready - e
        sent = list(done)
    return list(zip(done, last))


def test_one_late_member_on_a_32_ring_by_hand():
    """All-gather of 32 members, every link 100 ns, e = 10, member 5 starts 1 ms late (the (max, +) path).

    31 plain steps, each adding e: a member's end is ``max(latest start + links from there, 31 links) + e + 31 e``;
    member ``i`` is ``(i - 5) mod 32`` links downstream of the late member, so it ends at
    ``1,000,000 + 100 ((i - 5) mod 32) + 320`` and its last event was scheduled ``e`` earlier.
    """
    starts = [0] * 32
    starts[5] = 1_000_000
    got = ring_times("all_gather", 4096, starts, send_ns=lambda u, v, m: 100, e=10, reduction_ns=lambda m: 0)
    want = [1_000_000 + 100 * ((i - 5) % 32) + 320 for i in range(32)]
    assert got == [(t, t - 10) for t in want]


def test_equal_starts_and_links_are_the_ring_formula():
    """8 members start together, links 1,000 ns, R = 3 ns per message, e = 10: all-reduce of 14 steps ends at
    ``e + 14 (X + e) + 7 R`` = 10 + 14 x 1,010 + 21 = 14,171 on every member; the last step is plain (``- e``)."""
    got = ring_times("all_reduce", 8_000, [0] * 8, send_ns=lambda u, v, m: 1000, e=10, reduction_ns=lambda m: 3)
    assert got == [(14_171, 14_161)] * 8


@pytest.mark.parametrize("kind", KINDS)
def test_ring_times_equals_the_step_recurrence(kind):
    """Seeded random rings (2-64 members, equal or unequal links and starts, reduction per size): every member's
    (finish, scheduled at) equals the recurrence's, on the formula, step and (max, +) paths alike."""
    rng = random.Random(34)
    for _ in range(60):
        p = rng.choice([2, 3, 4, 5, 8, 13, 16, 32, 64])
        c = rng.choice([1, 999, 65_536, 1 << 20, 123_457])
        latency = [500] * p if rng.random() < 0.4 else [rng.randint(0, 3_000) for _ in range(p)]
        bw = rng.choice([53.6870912, 10.0, 0.7])
        spread = rng.choice([0, 15, 10**6])
        starts = [rng.randint(0, spread) for _ in range(p)]
        e = rng.choice([0, 10, 77])

        def link(u, v, m, latency=latency, bw=bw):
            return int(latency[v] + m / bw)

        def reduction(m):
            return 3 * int(m / 1600.0)

        want = recurrence(kind, c, starts, link, e, reduction)
        assert ring_times(kind, c, starts, send_ns=link, e=e, reduction_ns=reduction) == want, (p, c, starts)
