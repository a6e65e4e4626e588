"""The communication instances of a compiled job: :mod:`tracekit.sets.rendezvous` applied to the program's layouts.

A collective instance is the k-th collective on one process group across its members; a p2p instance is a matched
send/recv pair (rules in :mod:`tracekit.sets.rendezvous`). Nodes that match nothing keep instance -1 and a note saying
why (the deadlock report uses it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tracekit.errors import ReplayError
from tracekit.model import CollectiveType
from tracekit.sets.rendezvous import CommTable, collective_instances, comm_table, group_order, p2p_pairs
from tracekit.model.uneven import instance_bytes
from tracekit.replayer.simulation.instance import Instance
from tracekit.replayer.simulation.rank_compile import K_COLL, K_RECV, K_SEND

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.program import RankLayout
    from tracekit.sets.traceset import TraceSet


def match_instances(
    ts: "TraceSet",
    layouts: dict[int, "RankLayout"],
    notes: dict[int, str],
    instances: list["Instance"],
    instance_of: np.ndarray,
) -> None:
    """Append every collective, then every send/recv instance, to ``instances``; fill ``instance_of``.

    ``layouts[r].kind`` decides which nodes take part: collectives the ASTRA-sim model times alone (kind timed)
    are no instances.

    Raises:
        ReplayError: a send without ``comm_dst`` or a recv without ``comm_src``.
    """
    tables = {}
    for rank, lay in layouts.items():
        comm = np.flatnonzero((lay.kind == K_COLL) | (lay.kind == K_SEND) | (lay.kind == K_RECV))
        tables[rank] = comm_table(ts[rank], comm)
    _match_collectives(ts, layouts, tables, notes, instances, instance_of)
    _match_p2p(ts, layouts, tables, notes, instances, instance_of)


def _match_collectives(
    ts: "TraceSet",
    layouts: dict[int, "RankLayout"],
    tables: dict[int, CommTable],
    notes: dict[int, str],
    instances: list["Instance"],
    instance_of: np.ndarray,
) -> None:
    groups = ts.process_groups
    _outsiders(groups, layouts, tables, notes)
    for name in group_order({g for t in tables.values() for g in t.coll}):
        members = groups.get(name)
        if members is None:
            continue
        lists = [tables[r].coll.get(name, []) if r in layouts else [] for r in members]
        if _whole_group(name, members, lists, layouts, tables, instances, instance_of):
            continue
        for k, positions in collective_instances(lists):
            nodes = [-1 if p is None else layouts[r].offset + p for r, p in zip(members, positions)]
            r0, p0 = next((r, p) for r, p in zip(members, positions) if p is not None)
            ctype, csize = tables[r0].coll_attr[p0]
            _same_collective(ts, layouts, tables, name, k, members, positions, r0, p0)
            if ctype == int(CollectiveType.ALL_TO_ALL):  # per-peer sizes (all_to_allv): tracekit.model.uneven
                present = [(r, ts[r].node_at(p)) for r, p in zip(members, positions) if p is not None]
                csize = instance_bytes(present, tuple(members), max(csize, 0))
            iid = len(instances)
            instances.append(Instance("collective", ctype, max(csize, 0), name, tuple(members), nodes, k))
            for g in nodes:
                if g >= 0:
                    instance_of[g] = iid


def _outsiders(groups, layouts, tables, notes) -> None:  # type: ignore[no-untyped-def]
    """Note every collective on an undeclared group or on a group its rank is not a member of (one pass over the
    ranks' tables, a set per group: not every group against every rank)."""
    member_sets: dict[str, frozenset[int]] = {}
    for rank, table in tables.items():
        for name, positions in table.coll.items():
            members = groups.get(name)
            if members is not None:
                inside = member_sets.get(name)
                if inside is None:
                    inside = member_sets[name] = frozenset(members)
                if rank in inside:
                    continue
            why = (
                f"its process group {name!r} is not declared (declared: {sorted(groups)})"
                if members is None
                else f"rank {rank} is not a member of process group {name!r} {list(members)[:16]}"
            )
            for p in positions:
                notes[layouts[rank].offset + p] = why


def _whole_group(name, members, lists, layouts, tables, instances, instance_of) -> bool:  # type: ignore[no-untyped-def]
    """The instances of group ``name`` by columns when every member issues every one with equal types and sizes
    and none is an all-to-all (the usual case: one comparison of a [members, K] table, not one per instance).

    Returns:
        False (nothing appended) otherwise: the per-instance path reports or sizes what differs.
    """

    depth = len(lists[0]) if lists else 0
    if not depth or any(len(v) != depth for v in lists):
        return False
    pos = np.asarray(lists, dtype=np.int64)  # [M, K] each member's k-th collective on the group
    attrs = [tables[r].coll_attr for r in members]
    ctype = np.asarray([[a[p][0] for p in v] for a, v in zip(attrs, lists)], dtype=np.int64)
    csize = np.asarray([[a[p][1] for p in v] for a, v in zip(attrs, lists)], dtype=np.int64)
    if (ctype != ctype[0]).any() or (csize != csize[0]).any() or (ctype[0] == int(CollectiveType.ALL_TO_ALL)).any():
        return False
    nodes = pos + np.asarray([layouts[r].offset for r in members], dtype=np.int64)[:, None]
    first = len(instances)
    instance_of[nodes] = np.arange(first, first + depth, dtype=np.int64)[None, :]
    ranks = tuple(members)
    instances.extend(
        Instance("collective", t, max(b, 0), name, ranks, list(col), k)
        for k, (t, b, col) in enumerate(zip(ctype[0].tolist(), csize[0].tolist(), nodes.T.tolist()))
    )
    return True


def _same_collective(ts, layouts, tables, name, k, members, positions, r0, p0) -> None:  # type: ignore[no-untyped-def]
    """Refuse a collective whose members issue different types or sizes: the replay would time one member's
    (the lowest rank's) for all. Checked here, in every replay: ``--no-check`` skipped the collective-order check
    and hid such a job behind a plausible time.

    Raises:
        ReplayError: names the group, the collective's index, both ranks, their nodes and values.
    """
    first = tables[r0].coll_attr[p0]
    if len({tables[r].coll_attr[p] for r, p in zip(members, positions) if p is not None}) == 1:
        return  # the common case, one set comprehension per instance
    for r, p in zip(members, positions):
        if p is not None and tables[r].coll_attr[p] != first:
            from tracekit.errors import ReplayError
            from tracekit.model import CollectiveType

            def shown(attr: tuple[int, int]) -> str:
                ctype, size = attr
                kind = CollectiveType(ctype).name if ctype in CollectiveType._value2member_map_ else str(ctype)
                return f"{kind} of {size:,} B"

            raise ReplayError(
                f"collective {k} of process group {name!r} differs across its members: rank {r0} node "
                f"{int(layouts[r0].ids[p0])} is {shown(first)}, rank {r} node {int(layouts[r].ids[p])} is "
                f"{shown(tables[r].coll_attr[p])}; every member must issue the same collective",
                path=ts[r].path,
                rank=r,
            )


def _match_p2p(
    ts: "TraceSet",
    layouts: dict[int, "RankLayout"],
    tables: dict[int, CommTable],
    notes: dict[int, str],
    instances: list["Instance"],
    instance_of: np.ndarray,
) -> None:
    sends: dict[tuple[int, int, int], list[int]] = {}
    recvs: dict[tuple[int, int, int], list[int]] = {}
    attr: dict[int, tuple[int, str]] = {}
    for rank, table in tables.items():
        lay = layouts[rank]
        if table.missing_peer:
            p = table.missing_peer[0]
            what = "COMM_SEND node has no comm_dst" if lay.kind[p] == K_SEND else "COMM_RECV node has no comm_src"
            raise ReplayError(what, path=ts[rank].path, rank=rank, node_id=int(lay.ids[p]))
        for (peer, tag), positions in table.sends.items():
            for p in positions:
                attr[lay.offset + p] = table.p2p_attr[p]
            if peer not in layouts:
                for p in positions:
                    notes[lay.offset + p] = f"it sends to rank {peer}, which is not in the trace set"
                continue
            sends[(rank, peer, tag)] = [lay.offset + p for p in positions]
        for (peer, tag), positions in table.recvs.items():
            if peer not in layouts:
                for p in positions:
                    notes[lay.offset + p] = f"it receives from rank {peer}, which is not in the trace set"
                continue
            recvs[(peer, rank, tag)] = [lay.offset + p for p in positions]
    for (src, dst, tag), k, s, r in p2p_pairs(sends, recvs):
        if s is not None and r is not None:
            iid = len(instances)
            nbytes, pg = attr[s]
            instances.append(Instance("p2p", None, nbytes, pg, (src, dst), [s, r], tag))
            instance_of[s] = instance_of[r] = iid
        elif s is not None:
            n_r = len(recvs.get((src, dst, tag), ()))
            notes[s] = (
                f"send #{k} to rank {dst} with tag {tag} has no matching recv on rank {dst} "
                f"(rank {dst} posts {n_r} recvs from rank {src} with that tag)"
            )
        elif r is not None:
            n_s = len(sends.get((src, dst, tag), ()))
            notes[r] = (
                f"recv #{k} from rank {src} with tag {tag} has no matching send on rank {src} "
                f"(rank {src} posts {n_s} sends to rank {dst} with that tag)"
            )
