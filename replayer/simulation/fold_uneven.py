"""Folding jobs whose all-to-alls carry per-peer sizes (:mod:`tracekit.model.uneven`, issue 27), exactly.

The unfolded replay costs such an all-to-all with the largest uniform-equivalent size of its members
(:func:`tracekit.model.uneven.instance_bytes`), each member's computed from its own split lists and its index in the
group.  That size is a property of the instance, not of a rank, so a fold plan can compute it for every unfolded
instance from the members' scans (:func:`instance_size`) and key the folding on it: instances that map onto one
folded instance must have equal sizes and costs (:mod:`.folding`, point 2), and the folded instance is costed with
that size.  Nothing else in a replay reads the split attributes, so ranks whose splits differ still run identical
timelines when the sizes agree.  (Before, any split all-to-all made the job replay unfolded: param-dlrm at
``--dp 1024``, 37 CPU s and 1.6 GB, the same iteration time.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from tracekit.model import CollectiveType
from tracekit.model.uneven import RECV_SPLIT_BYTES, SEND_SPLIT_BYTES, instance_bytes

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace
    from tracekit.replayer.simulation.folding import RankScan

__all__ = ["SplitAttrs", "instance_size", "split_attrs"]

_A2A = int(CollectiveType.ALL_TO_ALL)


class SplitAttrs:
    """A node's two split attributes as :func:`tracekit.model.uneven.instance_bytes` reads them (``get_attr``)."""

    __slots__ = ("send", "recv")

    def __init__(self, send: Any, recv: Any) -> None:
        self.send, self.recv = send, recv

    def get_attr(self, name: str, default: Any = None) -> Any:
        """The attribute's value as the trace node gave it (None when absent)."""
        if name == SEND_SPLIT_BYTES:
            return self.send
        return self.recv if name == RECV_SPLIT_BYTES else default

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, SplitAttrs) and (self.send, self.recv) == (other.send, other.recv)

    __hash__ = None  # type: ignore[assignment]


def split_attrs(trace: "ExecutionTrace", coll_attr: dict[int, tuple[int, int]]) -> dict[int, SplitAttrs]:
    """Position -> split attributes of ``trace``'s all-to-alls that carry them (``coll_attr`` as
    :func:`tracekit.sets.rendezvous.comm_table` gives it)."""
    out = {}
    for p, (ctype, _) in coll_attr.items():
        if ctype == _A2A:
            node = trace.node_at(p)
            send, recv = node.get_attr(SEND_SPLIT_BYTES), node.get_attr(RECV_SPLIT_BYTES)
            if send or recv:
                out[p] = SplitAttrs(send, recv)
    return out


def instance_size(
    scans: dict[int, "RankScan"], ranks: Sequence[int], positions: Sequence[int], ctype: int, comm_bytes: int
) -> int:
    """The size the unfolded replay costs a collective with (:func:`tracekit.model.uneven.instance_bytes` for an
    all-to-all whose members carry splits, else ``comm_bytes``); ``ranks`` the group, ascending."""
    if ctype != _A2A:
        return comm_bytes
    members = [(r, scans[r].splits[p]) for r, p in zip(ranks, positions) if p in scans[r].splits]
    return instance_bytes(members, tuple(ranks), comm_bytes) if members else comm_bytes
