"""Collective rendezvous: which communication nodes of different ranks meet. The one matcher of the project.

Validation (:mod:`tracekit.checks.validate`), the replay program (``tracekit.replayer.simulation.program``) and rank
folding (``tracekit.replayer.simulation.folding``) all read a rank's communication nodes with
:func:`comm_table` and pair them with :func:`collective_instances` / :func:`p2p_pairs`, so the three agree by
construction.

The rules (docs/design.md section 4; Chakra's and ASTRA-sim's reading of the same attributes):

- *Issue order* is the rank's data-dependency (topological) order, ties by file position.
- *Collectives*: the k-th collective a rank issues on process group G (``pg_name``, canonical form) is instance
  (G, k) on every member of G. A missing ``comm_type`` reads as ALL_REDUCE (0) and a missing ``comm_size`` as
  0 bytes, as ASTRA-sim's feeder reads them; a value the integer rule (:func:`tracekit.model.attrs.as_int`) rejects
  reads as -2 (validation reports it).  ``pg_name`` is read by the string rule (a bad one raises).
- *Send/recv*: the k-th send from ``src`` to ``dst`` with tag ``t`` (in ``src``'s issue order) is paired with the
  k-th recv on ``dst`` from ``src`` with tag ``t``. A missing (or non-integer) tag reads as 0, a missing or
  negative size as 0 bytes, a missing or non-integer peer (``comm_dst``/``comm_src``) as -1 (listed in
  :attr:`CommTable.missing_peer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence, TypeVar

import numpy as np

from tracekit.model.attrs import COMM_DST, COMM_SIZE, COMM_SRC, COMM_TAG, COMM_TYPE, PG_NAME
from tracekit.model.groups import canonical_pg_name
from tracekit.model import NodeType

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace

__all__ = ["CommTable", "collective_instances", "comm_table", "group_order", "p2p_pairs"]

T = TypeVar("T")

COMM_TYPES = (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)
_SEND, _COLL = int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_COLL_NODE)
assert sorted(int(t) for t in COMM_TYPES) == list(range(_SEND, _COLL + 1))  # one range compare finds them
#: ``comm_type`` / ``comm_size`` values that are present but not integers
NOT_AN_INT = -2


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
        ValidationError: the trace's graph cannot be built (duplicate ids, a cycle), or a ``pg_name`` breaks the
            string rule (names the node).
    """
    cols = trace.columns()
    types = np.asarray(cols.types)
    comm = np.flatnonzero((types >= _SEND) & (types <= _COLL)) if positions is None else positions
    memo = cols.memo  # a dict while a replay keeps the columns' attributes (NodeColumns.keep_attrs)
    if memo is None:
        return _comm_table(trace, cols, types, comm)
    key = ("comm_table", np.asarray(comm, dtype=np.int64).tobytes())
    table: CommTable | None = memo.get(key)
    if table is None:
        table = memo[key] = _comm_table(trace, cols, types, comm)
    return table


def _comm_table(trace: "ExecutionTrace", cols: Any, types: np.ndarray, comm: np.ndarray) -> CommTable:
    """:func:`comm_table` of the communication nodes at positions ``comm``, built."""
    table = CommTable([], {}, {}, {}, {}, {}, {}, [])
    if not len(comm):
        return table
    order = trace.graph().in_topological_order(comm)
    table.order.extend(int(p) for p in order)
    _, pg_v = PG_NAME.column(cols)
    _, ctype, _ = COMM_TYPE.column_or(cols, absent=0, bad=NOT_AN_INT)
    _, csize, _ = COMM_SIZE.column_or(cols, absent=0, bad=NOT_AN_INT)
    is_coll = types[np.asarray(order, dtype=np.int64)] == _COLL
    if not is_coll.all():
        _, tag_v, _ = COMM_TAG.column_or(cols, absent=0, bad=0)
        src_has, src_v, src_ok = COMM_SRC.column_or(cols, absent=-1, bad=-1)
        dst_has, dst_v, dst_ok = COMM_DST.column_or(cols, absent=-1, bad=-1)
        src_ok, dst_ok = src_ok & src_has, dst_ok & dst_has
    order_arr = np.asarray(table.order, dtype=np.int64)
    _collectives(table, order_arr[is_coll], pg_v, ctype, csize)
    p2p = order_arr[~is_coll]
    if not len(p2p):
        return table
    send = types[p2p] == _SEND
    peer_ok = np.where(send, dst_ok[p2p], src_ok[p2p]).tolist()
    peers = np.where(send, dst_v[p2p], src_v[p2p]).tolist()
    names: dict[Any, str] = {}  # raw pg_name -> canonical name
    for p, tag, size, is_send, ok, peer in zip(
        p2p.tolist(), tag_v[p2p].tolist(), csize[p2p].tolist(), send.tolist(), peer_ok, peers
    ):
        table.tag[p] = tag
        raw = pg_v[p]
        name = names.get(raw)
        if name is None:
            name = names[raw] = canonical_pg_name(raw)
        table.p2p_attr[p] = (max(size, 0), name)
        if not ok:
            table.missing_peer.append(p)
        (table.sends if is_send else table.recvs).setdefault((peer, tag), []).append(p)
    return table


def _collectives(table: CommTable, coll: np.ndarray, pg_v: list[Any], ctype: np.ndarray, csize: np.ndarray) -> None:
    """Fill ``table.coll`` / ``coll_attr`` from the collectives' positions ``coll`` (issue order), by columns:
    groups in order of first use, each group's positions in issue order."""
    if not len(coll):
        return
    coll_list = coll.tolist()
    codes: dict[str, int] = {}
    canon: dict[object, int] = {}  # raw pg_name value -> code of its canonical name
    for raw in dict.fromkeys(pg_v[p] for p in coll_list):
        canon[raw] = codes.setdefault(canonical_pg_name(raw), len(codes))  # type: ignore[arg-type]
    if len(codes) == 1:
        table.coll[next(iter(codes))] = coll_list
    else:
        code = np.fromiter((canon[pg_v[p]] for p in coll_list), dtype=np.int64, count=len(coll_list))
        for name, c in codes.items():  # codes were numbered in order of first use
            table.coll[name] = coll[code == c].tolist()
    table.coll_attr.update(zip(coll_list, zip(ctype[coll].tolist(), csize[coll].tolist())))


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
