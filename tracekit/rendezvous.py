"""Collective rendezvous: which communication nodes of different ranks meet. The one matcher of the project.

Validation (:mod:`tracekit.validate`), the replay program (``tracekit.replayer.simulation.program``) and rank
folding (``tracekit.replayer.simulation.folding``) all read a rank's communication nodes with
:func:`comm_table` and pair them with :func:`collective_instances` / :func:`p2p_pairs`, so the three agree by
construction.

The rules (docs/design.md section 4; Chakra's and ASTRA-sim's reading of the same attributes):

- *Issue order* is the rank's data-dependency (topological) order, ties by file position.
- *Collectives*: the k-th collective a rank issues on process group G (``pg_name``, canonical form) is instance
  (G, k) on every member of G. A missing ``comm_type`` reads as ALL_REDUCE (0) and a missing ``comm_size`` as
  0 bytes, as ASTRA-sim's feeder reads them; a value that is not an integer reads as -2 (validation reports it).
- *Send/recv*: the k-th send from ``src`` to ``dst`` with tag ``t`` (in ``src``'s issue order) is paired with the
  k-th recv on ``dst`` from ``src`` with tag ``t``. A missing tag reads as 0, a missing or negative size as 0
  bytes, a missing peer (``comm_dst``/``comm_src``) as -1 (listed in :attr:`CommTable.missing_peer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence, TypeVar

import numpy as np

from tracekit.groups import canonical_pg_name
from tracekit.model import NodeType

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace

__all__ = ["CommTable", "collective_instances", "comm_table", "group_order", "p2p_pairs"]

T = TypeVar("T")

COMM_TYPES = (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)
#: ``comm_type`` / ``comm_size`` values that are present but not integers
NOT_AN_INT = -2


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _int_or(v: Any, default: int) -> int:
    return int(v) if _is_number(v) else default


@dataclass(frozen=True)
class CommTable:
    """One rank's communication nodes, keyed for matching (positions are indices in the rank's file order).

    Attributes:
        order: positions of every communication node, in issue order.
        coll: process group name -> positions of its collectives, in issue order.
        coll_attr: position -> ``(comm_type, comm_size in bytes)`` of each collective (module doc for missing).
        sends: ``(dst, tag)`` -> positions of sends, in issue order.
        recvs: ``(src, tag)`` -> positions of recvs, in issue order.
        p2p_attr: position -> ``(comm_size in bytes >= 0, pg_name)`` of each send/recv.
        tag: position -> tag of each send/recv.
        missing_peer: positions of sends/recvs without an integer peer rank, in issue order.
    """

    order: list[int]
    coll: dict[str, list[int]]
    coll_attr: dict[int, tuple[int, int]]
    sends: dict[tuple[int, int], list[int]]
    recvs: dict[tuple[int, int], list[int]]
    p2p_attr: dict[int, tuple[int, str]]
    tag: dict[int, int]
    missing_peer: list[int]


def comm_table(trace: "ExecutionTrace", positions: "np.ndarray | None" = None) -> CommTable:
    """The :class:`CommTable` of one rank.

    Args:
        trace: the rank's trace; its dependency graph must build (no cycle).
        positions: the communication nodes to read (default: every COMM_COLL/SEND/RECV node); a caller that
            treats some collectives otherwise (the ASTRA-sim model times a broadcast alone) passes its own.

    Raises:
        ValidationError: the trace's graph cannot be built (duplicate ids, a cycle).
    """
    cols = trace.columns()
    types = np.asarray(cols.types)
    comm = np.flatnonzero(np.isin(types, [int(t) for t in COMM_TYPES])) if positions is None else positions
    table = CommTable([], {}, {}, {}, {}, {}, {}, [])
    if not len(comm):
        return table
    order = trace.graph().in_topological_order(comm)
    table.order.extend(int(p) for p in order)
    _, pg_v = cols.attr("pg_name")
    _, ctype = cols.attr("comm_type")
    _, csize = cols.attr("comm_size")
    is_coll = types[np.asarray(order, dtype=np.int64)] == NodeType.COMM_COLL_NODE
    if not is_coll.all():
        _, tag_v = cols.attr("comm_tag")
        _, src_v = cols.attr("comm_src")
        _, dst_v = cols.attr("comm_dst")
    for p, coll in zip(table.order, is_coll.tolist()):
        if coll:
            table.coll.setdefault(canonical_pg_name(pg_v[p]), []).append(p)
            table.coll_attr[p] = (
                0 if ctype[p] is None else _int_or(ctype[p], NOT_AN_INT),
                0 if csize[p] is None else _int_or(csize[p], NOT_AN_INT),
            )
            continue
        tag = table.tag[p] = _int_or(tag_v[p], 0)
        table.p2p_attr[p] = (max(_int_or(csize[p], 0), 0), canonical_pg_name(pg_v[p]))
        send = types[p] == NodeType.COMM_SEND_NODE
        raw = (dst_v if send else src_v)[p]
        if not _is_number(raw):
            table.missing_peer.append(p)
        peer = _int_or(raw, -1)
        (table.sends if send else table.recvs).setdefault((peer, tag), []).append(p)
    return table


def group_order(names: "Sequence[str] | set[str]") -> list[str]:
    """Process group names in matching order: shorter names first, then by text (``"2" < "10"``)."""
    return sorted(names, key=lambda s: (len(s), s))


def collective_instances(lists: Sequence[Sequence[T]]) -> Iterator[tuple[int, tuple[T | None, ...]]]:
    """``(k, (each member's k-th entry or None, ...))`` for k = 0 .. the longest list - 1.

    Args:
        lists: per member of one group (in the group's member order), its collectives on the group in issue order.
    """
    depth = max((len(v) for v in lists), default=0)
    if all(len(v) == depth for v in lists):  # every member issues every one (the usual case): at C speed
        yield from enumerate(zip(*lists))
        return
    for k in range(depth):
        yield k, tuple(v[k] if k < len(v) else None for v in lists)


def p2p_pairs(
    sends: Mapping[tuple[int, int, int], Sequence[T]], recvs: Mapping[tuple[int, int, int], Sequence[T]]
) -> Iterator[tuple[tuple[int, int, int], int, T | None, T | None]]:
    """``((src, dst, tag), k, k-th send or None, k-th recv or None)``, keys ascending, k ascending.

    Args:
        sends: ``(src, dst, tag)`` -> the sends of ``src`` to ``dst`` with that tag, in ``src``'s issue order.
        recvs: ``(src, dst, tag)`` -> the recvs of ``dst`` from ``src`` with that tag, in ``dst``'s issue order.
    """
    for key in sorted(set(sends) | set(recvs)):
        s_list, r_list = sends.get(key, ()), recvs.get(key, ())
        for k in range(max(len(s_list), len(r_list))):
            yield key, k, s_list[k] if k < len(s_list) else None, r_list[k] if k < len(r_list) else None
