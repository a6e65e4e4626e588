"""Sub-world communicator groups as ASTRA-sim master (518bd51) runs them: the configured algorithm.

ASTRA-sim c459ab6 runs a collective of a communicator group smaller than the network as one ring over the sorted
members whatever the system config names (:meth:`.astra_model.AstraModel._comm_group_ns`); 518bd51 runs the
configured algorithm over the members.  The rules below reproduce, per rank and to the ns, every sub-world group
case 518bd51 completed in ``shared/reference/astra-sim`` (``grp-*``: groups ``{0-3},{4-7}``, ``{0,2,4,6},
{1,3,5,7}``, ``{0-5},{6,7}`` and row/column groups on Ring, Switch and FullyConnected networks of 8 NPUs):

- ring: as c459ab6 (the recorded ring cases of both builds are equal);
- halving-doubling (member count a power of two): the whole-network halving-doubling chunk over the members, the
  partner of member ``i`` at distance ``d`` being member ``i XOR d`` (ranks ``0,1,2,3`` of a ring of 8 pair
  ``0-1``, ``2-3`` then ``0-2``, ``1-3``: 32,833 ns recorded for 1 MiB, where cyclic pairs would cross 3 hops);
  every member ends together; a member count that is not a power of two is refused (518bd51 finishes only some
  ranks: ``grp-uneven-halvingDoubling-*``);
- direct all-reduce, per member ``k`` (one chunk, members starting at ``s``): member ``j`` has reduced its piece
  at ``t_j = max_i(s_i + e + X(i->j)) + e + R(C/p)``; member ``k`` ends at ``max_j(t_j + X(j->k)) + e`` plus
  ``R(C/p)`` again when ``p > 2`` (recorded: 11,772 ns for 4 members of a FullyConnected network, 8,194 for 6,
  21,541 for 2, 1 MiB); ``X`` uses the physical hops between the two members, so members end apart on a ring
  (13,772 and 13,272 ns for ranks 0 and 1 of ``{0-3}`` on a ring of 8);
- the double binary tree is refused (518bd51 segfaults on it in every sub-world group), and so is a direct
  reduce-scatter, all-gather or all-to-all (no recorded case to confirm a rule).

Chunks are pipelined as for every collective (:func:`~.astra_algorithms.ranks_pipeline_ns`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from tracekit.errors import SpecError

from tracekit.replayer.simulation.astra_algorithms import RankPhase, hd_messages, is_power_of_two, ranks_pipeline_ns

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.astra_model import AstraModel

#: ``send_ns(u, v, m)``: time of an ``m``-byte message from member ``u`` to member ``v``, ns
SendNs = Callable[[int, int, int], int]


def group_refusal(kind: str, algorithm: str, p: int) -> str | None:
    """Why tracekit does not run ``algorithm`` for ``kind`` in a sub-world group of ``p`` members as 518bd51 does."""
    if algorithm == "double_binary_tree":
        return "ASTRA-sim 518bd51 crashes (SIGSEGV) on a double binary tree in a sub-world communicator group"
    if algorithm == "halving_doubling" and kind == "all_to_all":
        return "ASTRA-sim's halving-doubling has no all-to-all (the simulator exits: unknown communication type)"
    if algorithm == "halving_doubling" and not is_power_of_two(p):
        return (
            f"ASTRA-sim 518bd51's halving-doubling in a group of {p} members (not a power of two) finishes only "
            f"some ranks"
        )
    if algorithm == "direct" and kind != "all_reduce":
        return (
            f"no recorded ASTRA-sim 518bd51 case confirms a direct {kind} in a sub-world group; set "
            f"[astra] build = 'c459ab6' (a ring) or choose the ring algorithm"
        )
    return None


def direct_all_reduce_times(starts: list[int], *, piece: int, send_ns: SendNs, e: int, r: int) -> list[tuple[int, int]]:
    """Per member ``(finish, scheduled at)`` of one direct all-reduce chunk in a group (module doc), ns."""
    p = len(starts)
    reduced = [max(starts[i] + e + send_ns(i, j, piece) for i in range(p) if i != j) + e + r for j in range(p)]
    last_r = r if p > 2 else 0
    out = []
    for k in range(p):
        ready = max(reduced[j] + send_ns(j, k, piece) for j in range(p) if j != k) + e
        out.append((ready + last_r, ready if last_r else ready - e))
    return out


def halving_doubling_ns(
    kind: str, c: int, p: int, *, send_ns: SendNs, e: int, reduction_ns: Callable[[int], int]
) -> int:
    """One halving-doubling chunk of ``c`` bytes over ``p`` members paired by XOR (module doc), ns."""
    total = e
    for msg in hd_messages(kind, c, p):
        total += max(send_ns(i, i ^ msg.distance, msg.msg_bytes) for i in range(p)) + e
        if msg.reduced:
            total += reduction_ns(msg.msg_bytes)
    return total


def master_group_ns(
    model: "AstraModel", kind: str, algorithm: str, members: list[int], send_ns: SendNs, chunk: int, chunks: int
) -> list[int]:
    """Finish (ns from the start) of each of the sorted ``members`` of a 518bd51 sub-world group collective.

    Raises:
        SpecError: a case :func:`group_refusal` names.
    """
    p = len(members)
    reason = group_refusal(kind, algorithm, p)
    if reason:
        raise SpecError(f"[astra] build = '518bd51': {reason}", path=model.spec.path)
    e = model.settings.endpoint_delay_ns
    if algorithm == "halving_doubling":
        duration = halving_doubling_ns(kind, chunk, p, send_ns=send_ns, e=e, reduction_ns=model.reduction_ns)
        last = hd_messages(kind, chunk, p)[-1]
        phase = RankPhase(0, duration, last_delay_ns=model.reduction_ns(last.msg_bytes) if last.reduced else e)
    else:
        r = model.reduction_ns(chunk // p)

        def direct(starts: list[int], _root_max: bool) -> list[tuple[int, int]]:
            """Per-member ``(finish, scheduled at)`` of one direct chunk whose members start at ``starts`` (ns)."""
            return direct_all_reduce_times(starts, piece=chunk // p, send_ns=send_ns, e=e, r=r)

        phase = RankPhase(0, 0, direct)
    return ranks_pipeline_ns((p,), [phase], chunks, model.settings.active_chunks_per_dimension)
