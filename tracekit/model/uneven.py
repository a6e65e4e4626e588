"""Uneven collectives: per-peer sizes of an all-to-all-v (issue 27), and the one timing rule every model shares.

Chakra's ``comm_size`` holds one number per collective (each rank's input buffer, bytes), which cannot say that an
``all_to_allv`` sends 1,664 floats to one peer and 96 to another (Chakra issue #209; MoE expert parallelism is made
of such all-to-alls).  A node may carry two extra attributes, int64 lists in the group's member order (ascending
global ranks), which Chakra readers ignore like any attribute they do not know:

* :data:`SEND_SPLIT_BYTES` (``comm_send_split_bytes``): bytes this rank sends to each member (itself included);
* :data:`RECV_SPLIT_BYTES` (``comm_recv_split_bytes``): bytes it receives from each member.

**Timing rule** (:func:`uniform_equivalent_bytes`).  In an all-to-all each rank exchanges a message with every
other member; the collective ends when the busiest member has pushed out all it sends and taken in all it receives.
Member ``r`` moves ``w_r = max(sum_j send_r[j], sum_j recv_r[j])`` bytes over the network (``j != r``; the
self-part stays local).  A uniform all-to-all of ``comm_size = C`` moves ``C (p - 1) / p`` per member, so an uneven
one costs what a uniform one of ``C_eq = ceil(max_r w_r * p / (p - 1))`` costs in any model whose all-to-all time
is a function of the per-member wire bytes (alpha-beta, NCCL-like, ASTRA-sim's ``e + p(p-1)/2 (X(C/p) + e)``
all grow with it; the latency terms, one message per peer, are the same).  The replayer costs every all-to-all
instance with the largest ``C_eq`` of its members (:func:`instance_bytes`), so each collective model times the
per-peer sizes without knowing about them.  A file without split attributes is costed exactly as before.

ASTRA-sim runs one size per collective: the export writes ``comm_size`` (the rank's input bytes) and warns with
:func:`imbalance_text` when the splits are uneven.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

__all__ = [
    "RECV_SPLIT_BYTES",
    "SEND_SPLIT_BYTES",
    "has_split_alltoall",
    "imbalance_text",
    "instance_bytes",
    "member_wire_bytes",
    "uneven_warnings",
    "uniform_equivalent_bytes",
]

SEND_SPLIT_BYTES = "comm_send_split_bytes"
RECV_SPLIT_BYTES = "comm_recv_split_bytes"


def member_wire_bytes(send: Sequence[int], recv: Sequence[int], index: int | None) -> int:
    """Bytes member ``index`` of the group moves over the network: ``max(sent to others, received from others)``.

    Args:
        send, recv: the member's per-peer bytes (group order); either may be empty (unknown: the other decides).
        index: the member's position in the group, or None when unknown (its self-part is then counted).
    """

    def others(v: Sequence[int]) -> int:
        total = sum(int(x) for x in v)
        return total - int(v[index]) if index is not None and 0 <= index < len(v) else total

    return max(others(send) if send else 0, others(recv) if recv else 0)


def uniform_equivalent_bytes(wire_bytes: int, group_size: int) -> int:
    """``comm_size`` of the uniform all-to-all whose members each move ``wire_bytes`` (module doc), bytes.

    ``ceil(wire_bytes * p / (p - 1))``; for ``p <= 1`` nothing crosses the network and ``wire_bytes`` is returned.
    """
    if group_size <= 1:
        return int(wire_bytes)
    return math.ceil(wire_bytes * group_size / (group_size - 1))


def _splits(node: Any) -> tuple[list[int], list[int]] | None:
    send, recv = node.get_attr(SEND_SPLIT_BYTES), node.get_attr(RECV_SPLIT_BYTES)
    if not send and not recv:
        return None
    return [int(x) for x in send or []], [int(x) for x in recv or []]


def instance_bytes(members: Sequence[tuple[int, Any]], group: Sequence[int], comm_bytes: int) -> int:
    """The size an all-to-all instance is costed with: the largest member's :func:`uniform_equivalent_bytes`.

    Args:
        members: ``(global rank, node)`` of the members present (nodes with ``get_attr``).
        group: the group's ranks, ascending (the split lists' order).
        comm_bytes: the instance's ``comm_size`` (used when no member carries splits).

    Returns:
        ``comm_bytes`` when no member carries split attributes, else the largest equivalent size, bytes.
    """
    index = {r: i for i, r in enumerate(group)}
    best = None
    for rank, node in members:
        found = _splits(node)
        if found is None:
            continue
        eq = uniform_equivalent_bytes(member_wire_bytes(*found, index.get(rank)), len(group))
        best = eq if best is None else max(best, eq)
    return comm_bytes if best is None else best


def imbalance_text(send: Sequence[int], recv: Sequence[int]) -> str | None:
    """A phrase naming the imbalance of one node's splits (smallest and largest per-peer bytes), or None if even."""
    parts = []
    for label, v in (("sends", send), ("receives", recv)):
        if v and min(v) != max(v):
            parts.append(f"{label} {min(v):,} to {max(v):,} bytes per peer")
    return "; ".join(parts) or None


def uneven_warnings(trace: Any, groups: Any = None) -> list[str]:
    """One sentence per rank whose all-to-alls carry uneven splits that a one-size writer (ASTRA-sim) drops.

    Names the file, rank, how many all-to-alls are uneven and the most imbalanced one (node id, its
    :func:`imbalance_text`, the ``comm_size`` written and the uniform size this rank's own traffic equals,
    :func:`uniform_equivalent_bytes`; the collective's cost is its busiest member's, :func:`instance_bytes`).
    Reads only the rank's COMM_COLL nodes.

    Args:
        trace: one rank.
        groups: ``pg_name -> ranks`` of the job (to leave the rank's self-part out), or None.
    """
    import numpy as np

    from tracekit.model.attrs import COMM_SIZE, COMM_TYPE, PG_NAME
    from tracekit.model import CollectiveType, NodeType

    cols = trace.columns()
    _, kinds, ok = COMM_TYPE.column_or(cols, absent=-1, bad=-1)
    # only all-to-alls (and values the node itself must judge) are decoded, each alone: node_at decodes 4,096
    # nodes ahead, every node of the rank for a few collectives (export astra of a class set, issue 34)
    wanted = (np.asarray(cols.types) == int(NodeType.COMM_COLL_NODE)) & (
        ~ok | (kinds == int(CollectiveType.ALL_TO_ALL))
    )
    worst = None
    count = 0
    for pos in np.flatnonzero(wanted).tolist():
        node = trace.nodes[pos : pos + 1][0]
        found = _splits(node) if COMM_TYPE.of(node) == int(CollectiveType.ALL_TO_ALL) else None
        text = imbalance_text(*found) if found else None
        if found is None or text is None:
            continue
        count += 1
        p = max(len(found[0]), len(found[1]))
        ranks = list((groups or {}).get(PG_NAME.of(node) or "0") or range(p))
        index = ranks.index(trace.rank) if trace.rank in ranks else None
        eq = uniform_equivalent_bytes(member_wire_bytes(*found, index), p)
        if worst is None or eq > worst[0]:
            worst = (eq, node, text)
    if worst is None:
        return []
    eq, node, text = worst
    where = f"{trace.path or 'trace'}: rank {trace.rank}"
    return [
        f"{where}: {count} all-to-all(s) with uneven per-peer sizes written with one size (ASTRA-sim runs "
        f"uniform collectives); the most uneven, node {node.id}, {text}: comm_size {COMM_SIZE.of(node) or 0:,} "
        f"bytes written, this rank alone moves as much as in a uniform {eq:,}-byte all-to-all"
    ]


def has_split_alltoall(trace: Any, coll_attr: dict) -> bool:
    """Whether one of ``trace``'s all-to-alls (``coll_attr``: position -> (comm_type, comm_size), as
    :func:`tracekit.sets.rendezvous.comm_table` gives) carries split attributes; rank folding then declines, since
    the collective's cost needs every member's splits (:func:`instance_bytes`)."""
    from tracekit.model import CollectiveType

    a2a = int(CollectiveType.ALL_TO_ALL)
    return any(_splits(trace.node_at(p)) is not None for p, (ctype, _) in coll_attr.items() if ctype == a2a)
