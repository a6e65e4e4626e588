"""Deadlock diagnosis: why a replay stalled, said per rank.

When the engine runs out of events while nodes are left, every rank gets one
line: the communication node it is blocked in and what that node waits for
(the members that have not arrived at the collective, or never issue it; the
send or recv that would match it), or, for a rank not blocked in
communication, its first node that never ran and the unfinished nodes it
waits for.  The result is one :class:`~tracekit.errors.DeadlockError` whose
``blocked`` maps each stalled rank to its line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tracekit.errors import DeadlockError
from tracekit.fmt import fmt_ns_exact
from tracekit.model import CollectiveType

from tracekit.replayer.simulation.program import K_COLL, K_RECV, ReplayProgram

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.engine import Schedule

MAX_RANKS_IN_MESSAGE = 8
MAX_LISTED = 8
_COLLECTIVE_NAMES: dict[int | None, str] = {t.value: t.name for t in CollectiveType}  # comm_type -> name


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:MAX_LISTED])
    return f"[{shown}{', ...' if len(ranks) > MAX_LISTED else ''}]"


def describe_instance(program: ReplayProgram, i: int) -> str:
    """``ALL_REDUCE of 1048576 bytes on group '0' (#3 of that group)`` or ``send/recv 0->1 tag 5``."""
    inst = program.instances[i]
    if inst.kind == "p2p":
        return f"send/recv of {inst.comm_bytes} bytes {inst.ranks[0]}->{inst.ranks[1]} tag {inst.seq}"
    name = _COLLECTIVE_NAMES.get(inst.comm_type, f"collective type {inst.comm_type}")
    return f"{name} of {inst.comm_bytes} bytes on group {inst.pg_name!r} (#{inst.seq} of that group)"


class _Diagnosis:
    def __init__(
        self, program: ReplayProgram, schedule: "Schedule", remaining: Sequence[int], arrived: Sequence[int]
    ) -> None:
        self.p = program
        self.s = schedule
        self.remaining = remaining
        self.arrived = arrived
        self.unfinished = np.isnan(schedule.end_ns)
        self.started = ~np.isnan(schedule.start_ns)
        self.kind = np.asarray(program.kind, dtype=np.int64)
        self.res = np.asarray(program.resource, dtype=np.int64)
        # predecessor lists (only needed here)
        succ_ptr = np.asarray(program.succ_ptr, dtype=np.int64)
        succ = np.asarray(program.succ, dtype=np.int64)
        owner = np.repeat(np.arange(program.n, dtype=np.int64), np.diff(succ_ptr))
        order = np.argsort(succ, kind="stable")
        self.pred_pos = owner[order]
        self.pred_ptr = np.zeros(program.n + 1, dtype=np.int64)
        np.cumsum(np.bincount(succ, minlength=program.n), out=self.pred_ptr[1:])

    def node(self, g: int) -> str:
        """``node <id>`` of global node index ``g``."""
        lay, pos = self.p.locate(g)
        return f"node {int(lay.ids[pos])}"

    def where(self, g: int) -> str:
        """``rank <r> node <id>`` of global node index ``g``."""
        lay, pos = self.p.locate(g)
        return f"rank {lay.rank} node {int(lay.ids[pos])}"

    def stuck_comm(self, g: int) -> str:
        """What an arrived, unfinished communication node waits for."""
        p = self.p
        i = p.instance_of[g]
        since = fmt_ns_exact(float(self.s.start_ns[g]))
        if i < 0:
            why = p.notes.get(g, "it matches no other node")
            return (
                f"{self.node(g)} (a {('collective', 'send', 'recv')[p.kind[g] - K_COLL]}) waits since {since}, "
                f"but {why}"
            )
        inst = p.instances[i]
        missing_never, missing_late = [], []
        for rank, h in zip(inst.ranks, inst.nodes):
            if h < 0:
                missing_never.append(rank)
            elif not self.started[h]:
                missing_late.append((rank, h))
        parts = []
        if inst.kind == "p2p":
            for _rank, h in missing_late:
                role = "recv" if p.kind[h] == K_RECV else "send"
                parts.append(f"the matching {role} ({self.where(h)}) has not started: {self.blocker(h)}")
            text = "; ".join(parts) or "its peer"
            return f"{self.node(g)} ({describe_instance(p, i)}) waits since {since}: {text}"
        if missing_never:
            counts = []
            for r in missing_never:
                n_issued = sum(
                    1
                    for other in p.instances
                    if other.kind == "collective"
                    and other.pg_name == inst.pg_name
                    and other.nodes[other.ranks.index(r)] >= 0
                )
                counts.append(f"rank {r} issues only {n_issued}")
            parts.append(f"ranks {_ranks(missing_never)} never issue it ({', '.join(counts[:MAX_LISTED])})")
        if missing_late:
            parts.append(f"ranks {_ranks([r for r, _ in missing_late])} have not arrived")
            rank, h = missing_late[0]
            parts.append(f"rank {rank} is at {self.node(h)}: {self.blocker(h)}")
        return (
            f"{self.node(g)} ({describe_instance(p, i)}) waits since {since} for ranks that have not "
            f"arrived: " + "; ".join(parts)
        )

    def _dep(self, u: int) -> str:
        i = self.p.instance_of[u]
        if self.kind[u] >= K_COLL and self.started[u] and i >= 0:
            return f"{self.node(u)} (itself blocked in {describe_instance(self.p, i)})"
        return self.node(u)

    def blocker(self, h: int) -> str:
        """Why node ``h`` (not started) cannot start: unfinished dependencies or a held resource."""
        if self.remaining[h] > 0:
            preds = self.pred_pos[self.pred_ptr[h] : self.pred_ptr[h + 1]]
            waiting = [int(u) for u in preds if self.unfinished[u]]
            names = ", ".join(self._dep(u) for u in waiting[:MAX_LISTED])
            return f"it waits for unfinished dependencies {names}"
        r = self.res[h]
        holders = np.flatnonzero((self.res == r) & self.started & self.unfinished)
        lay, _ = self.p.locate(h)
        rname = lay.resource_names[r - lay.resource_offset] if r >= 0 else "?"
        if len(holders):
            return f"it waits for {rname}, held by {self.node(int(holders[0]))}"
        return f"it waits for {rname}"

    def rank_line(self, lay) -> str | None:
        """What one rank is blocked on (its earliest stuck communication, else its first node that never ran); None when it finished."""
        lo, hi = lay.offset, lay.offset + lay.n
        unf = self.unfinished[lo:hi]
        if not unf.any():
            return None
        comm = (self.kind[lo:hi] >= K_COLL) & unf & self.started[lo:hi]
        stuck = np.flatnonzero(comm)
        if len(stuck):
            first = lo + int(stuck[np.argmin(self.s.start_ns[lo:hi][stuck])])
            line = f"blocked at {self.stuck_comm(first)}"
            if len(stuck) > 1:
                line += f" (and {len(stuck) - 1} more communication nodes blocked)"
            return line
        first = lo + int(np.flatnonzero(unf)[0])
        return f"{self.node(first)} never ran: {self.blocker(first)}"

    def error(self) -> DeadlockError:
        """The :class:`DeadlockError`: when the last node finished, how many nodes never did, and per blocked rank its line."""
        blocked: dict[int, str] = {}
        for lay in self.p.layouts:
            line = self.rank_line(lay)
            if line is not None:
                blocked[lay.rank] = line
        finished = self.s.end_ns[~self.unfinished]
        t = float(finished.max()) if len(finished) else 0.0
        left = int(self.unfinished.sum())
        shown = list(blocked.items())[:MAX_RANKS_IN_MESSAGE]
        text = "; ".join(f"rank {r}: {line}" for r, line in shown)
        if len(blocked) > len(shown):
            text += f"; ... {len(blocked) - len(shown)} more ranks blocked"
        msg = f"replay deadlocked at {fmt_ns_exact(t)}: {left} of {self.p.n} nodes never finished; {text}"
        return DeadlockError(msg, blocked=blocked)


def diagnose(
    program: ReplayProgram, schedule: "Schedule", remaining: Sequence[int], arrived: Sequence[int]
) -> DeadlockError:
    """The :class:`DeadlockError` describing a stalled replay (returned, for the engine to raise)."""
    return _Diagnosis(program, schedule, remaining, arrived).error()


__all__ = ["diagnose", "describe_instance"]
