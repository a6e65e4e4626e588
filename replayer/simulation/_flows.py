"""Fluid bandwidth sharing among the data phases of transfers (the rule: replayer/NOTES.md, engine section).

A transfer's data phase loads links (rank, network dimension, direction);
its rate is ``sum(t_d) / sum(t_d * n_d)`` where ``t_d`` is its time alone on
dimension d and ``n_d`` the most data phases on any of its links of that
dimension.  Rates are recomputed once per instant (:meth:`_Flows.recompute`),
so results do not depend on the order of same-time events.  Split out of
:mod:`.engine`, which owns the event loop.
"""

from __future__ import annotations

from heapq import heappush
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.program import ReplayProgram

#: event kinds, in processing order at equal times: a run of nodes ends, a transfer's fixed part ends,
#: a data phase ends, a member of a skewed transfer ends
EV_NODE, EV_LATENCY, EV_DATA, EV_MEMBER = 0, 1, 2, 3
_OUT, _IN = 0, 1


class _Flows:
    """Fluid bandwidth sharing among the data phases of transfers."""

    def __init__(self, program: ReplayProgram) -> None:
        spec = program.spec
        self.ndim = len(spec.network)
        self.bw = [d.bandwidth_bytes_per_ns for d in spec.network]
        self.link_n: dict[int, float] = {}
        #: a degraded link (perturb.py) counts as ``slowdown`` transfers per transfer on it
        self.link_weight = {self._link(r, d, x): w for (r, d), w in program.link_slowdown.items() for x in (0, 1)}
        self.active: dict[int, None] = {}
        self.total: dict[int, float] = {}
        self.parts: dict[int, list[tuple[float, list[int]]]] = {}
        self.rate: dict[int, float] = {}
        self.left: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.version: dict[int, int] = {}
        self.dirty = False
        #: per link, the active data phases on it; and the links whose counts changed since the last recompute
        self.users: dict[int, dict[int, None]] = {}
        self.touched: set[int] = set()

    def _link(self, rank: int, d: int, direction: int) -> int:
        return (rank * self.ndim + d) * 2 + direction

    def data_time(self, program: ReplayProgram, i: int) -> float:
        """Time alone of instance ``i``'s data phase (0 when it has none); prepares its links."""
        inst = program.instances[i]
        cost = inst.cost
        if cost is None or not cost.shares_bandwidth or not cost.wire_bytes:  # None: never started (not costed)
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
        link_n, weight, users, touched = self.link_n, self.link_weight, self.users, self.touched
        for _, links in self.parts[i]:
            for link in links:
                link_n[link] = link_n.get(link, 0) + weight.get(link, 1)
                users.setdefault(link, {})[i] = None
            touched.update(links)
        self.active[i] = None
        self.left[i] = self.total[i]
        self.last[i] = t
        self.rate[i] = 0.0
        self.version[i] = 0
        self.dirty = True

    def end(self, i: int, t: float, events: list) -> None:
        link_n, weight, users, touched = self.link_n, self.link_weight, self.users, self.touched
        for _, links in self.parts.pop(i):
            for link in links:
                link_n[link] -= weight.get(link, 1)
                users[link].pop(i, None)
            touched.update(links)
        del self.active[i]
        for table in (self.total, self.rate, self.left, self.last):
            table.pop(i)
        self.dirty = True

    def recompute(self, t: float, events: list) -> None:
        """New rates for every active data phase, once all events of instant ``t`` are processed.

        Deferring the recomputation to the end of an instant makes the rates
        independent of the order in which same-time starts and ends were
        processed (which rank fold relies on: see :mod:`.folding`).  Only the phases sharing a link with one
        that started or ended are visited (the others' counts, so their rates, are unchanged): the cost of an
        instant follows what changed in it, not every transfer in flight (issue 34 item 5).
        """
        self.dirty = False
        link_n, users = self.link_n, self.users
        # only the phases on a link whose count changed can change rate (a rate reads its own links' counts);
        # each gets its own event, so the order they are visited in changes nothing
        changed: dict[int, None] = {}
        for link in self.touched:
            changed.update(users[link])
        self.touched.clear()
        for j in changed:
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
