"""The engine's ``measured`` communication model: a collective priced from its members' measured times.

A converted capture gives every member of a collective its measured start ``s_m`` (when the member
entered it) and duration ``d_m`` (ns).  On one host clock the communication could not end for anyone before
the last member entered, ``S = max(s_m)``; what each member measured after ``S``,
``tail_m = s_m + d_m - S``, is the collective's own time on that member, without the waiting for slower
members (that waiting is reproduced by the replay's arrival order, not counted again).  So, when the
members' times are on one clock (every member timed, ``s_m > 0``, and every member ended at or after the
last arrival, ``min(s_m + d_m) >= S``), member ``m`` ends ``tail_m`` after the last member arrives in the
replay; the members that finished early in the run (a ring's first ranks) finish early in the replay too.

Otherwise (members not timed, clocks not comparable, an asynchronous operation that returned before its
peers entered) the collective takes the smallest measured duration of its members, all members ending
together: the member that waited least is the best estimate of the transfer.

With one clock the first rule gives back every member's measured end whenever the replayed arrivals equal
the measured ones (the smallest-duration rule does not: members of a ring that finish apart in the run
would end together).  Measured on torch-cpu-gloo/dist_ws4 (replayer/NOTES.md): ranks 2 and 3 end a 1 KiB
all_gather ~10 ms after ranks 0 and 1.
"""

from __future__ import annotations

from typing import Sequence

from tracekit.replayer.simulation.collectives import CommCost

__all__ = ["measured_comm_cost"]


def measured_comm_cost(starts_ns: Sequence[int], durations_ns: Sequence[int]) -> CommCost:
    """Cost of one collective or send/recv pair from its members' measured times (module doc).

    Args:
        starts_ns, durations_ns: per member (in the instance's member order), ns; at least one member.

    Returns:
        ``CommCost`` with ``shares_bandwidth=False``, algorithm ``measured``; ``fixed_ns`` = the largest tail
        (or the smallest duration), ``member_ns`` = each member's tail when they differ, else empty; all
        in ns (floats).

    Raises:
        ValueError: no members (``max`` of an empty sequence).
    """
    last_arrival = max(starts_ns)
    ends = [s + d for s, d in zip(starts_ns, durations_ns)]
    if min(starts_ns) > 0 and min(ends) >= last_arrival:
        tails = tuple(float(e - last_arrival) for e in ends)
        spread = len(set(tails)) > 1
        return CommCost(max(tails), (), "measured", shares_bandwidth=False, member_ns=tails if spread else ())
    return CommCost(float(min(durations_ns)), (), "measured", shares_bandwidth=False)
