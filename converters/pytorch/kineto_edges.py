"""Dependencies of a Kineto-only conversion (:mod:`.kineto_convert`, module docstring "Dependencies").

Host events on one thread are chained in start order with their call-stack parent as ``ctrl_deps``; device ops
follow their stream and their launch call (or the host COMM node the call was folded into); host waits found by
:mod:`.device_graph` make the first host node after the wait depend on what it waited for, and a call holding
its own wait is trimmed (:func:`.host_timing.trim_sync_waits`); cross-thread hand-overs
(:func:`.host_timing.handoff_edges`) and ``fwdbwd`` flows (forward op -> backward op) add edges across threads.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from tracekit.model import NodeDraft, NodeType

from tracekit.converters.pytorch.device_graph import DeviceGraph, forward_position
from tracekit.converters.pytorch.host_timing import handoff_edges, trim_sync_waits
from tracekit.converters.pytorch.kineto_reader import KinetoEvent

#: Host categories that are ranges (annotations): structure, no time of their own (see :mod:`.host_timing`).
RANGE_CATEGORIES = frozenset({"user_annotation"})

__all__ = ["RANGE_CATEGORIES", "add_edges"]


def add_edges(
    lanes: Mapping[Any, list[KinetoEvent]],
    parent_of: Mapping[int, int],
    flows: Sequence[Any],
    node_of: Mapping[int, NodeDraft],
    dgraph: DeviceGraph,
    by_index: Mapping[int, KinetoEvent],
) -> int:
    """Add every dependency of :mod:`.kineto_convert`'s docstring (chains, ``ctrl_deps`` parents, streams,
    launches, waits, hand-offs, flows) to the nodes in place; returns the number of ``fwdbwd`` flow edges.

    Args:
        lanes: host events per ``(pid, tid)``, in start order.
        parent_of: host event index -> enclosing host event index.
        flows: the trace's flow events (``fwdbwd`` pairs are used).
        node_of: event index -> its node (events not emitted are absent).
        dgraph: the device graph (streams, launch and synchronization edges).
        by_index: event index -> event.
    """

    def dep(src: int, dst: NodeDraft) -> None:
        """Make ``dst`` depend on the node of event index ``src`` (once; no self-edge; no-op if unemitted)."""
        s = node_of.get(src)
        if s is not None and s.id not in dst.data_deps and s.id != dst.id:
            dst.data_deps.append(s.id)

    chains, chain_pos = _host_chains(lanes, parent_of, node_of, dep)
    chain_starts = {key: [e.start_ns for e in chain] for key, chain in chains.items()}

    # Streams: emitted device ops in order.
    for ops in dgraph.streams.values():
        prev = None
        for i in ops:
            if i in node_of:
                if prev is not None:
                    dep(prev, node_of[i])
                prev = i
    # Launch and synchronization edges.
    waited_until: dict[int, int] = {}  # waiting call -> latest measured end of what it waits for
    for edge in dgraph.edges:
        if edge.kind == "stream_order":
            continue
        if edge.kind in ("launch",) or edge.kind.startswith("stream_wait_event"):
            dst = node_of.get(edge.dst)
            if dst is not None:
                _launch_dep(parent_of, edge.src, node_of, dst, dep)
            continue
        # host waits: first host node at/after the call that starts after the source started
        loc = chain_pos.get(edge.dst)
        src = by_index[edge.src]
        if loc is None or edge.src not in node_of:
            continue
        key, pos = loc
        j = forward_position(chain_starts[key], pos, src.start_ns)
        if j is not None:
            dep(edge.src, node_of[chains[key][j].index])
            if j == pos:  # the call itself waits in the replay: its measured wait is not its own time
                waited_until[edge.dst] = max(waited_until.get(edge.dst, 0), src.end_ns)
    # a call holding its own wait keeps only its time after the awaited op (host_timing.trim_sync_waits)
    trim_sync_waits(
        (node_of[c], by_index[c].start_ns, by_index[c].end_ns, until)
        for c, until in waited_until.items()
        if c in node_of and node_of[c].type == NodeType.COMP_NODE
    )

    # fwdbwd flows: forward op -> backward op (cross-thread, shown by the trace).
    handoff_edges(lanes, node_of, dep, RANGE_CATEGORIES)
    return _flow_edges(lanes, flows, node_of, dep)


def _host_chains(
    lanes: Mapping[Any, list[KinetoEvent]], parent_of: Mapping[int, int], node_of: Mapping[int, NodeDraft], dep
) -> tuple[dict[Any, list[KinetoEvent]], dict[int, tuple[Any, int]]]:
    """Chain each thread's emitted host events and give each its nearest emitted call-stack parent as ``ctrl_deps``.

    Returns:
        ``(thread -> emitted events in order, event index -> (thread, position in its chain))``.
    """
    chain_pos: dict[int, tuple[Any, int]] = {}
    chains: dict[Any, list[KinetoEvent]] = {}
    for key, lane in lanes.items():
        chain = [e for e in lane if e.index in node_of]
        chains[key] = chain
        for pos, e in enumerate(chain):
            chain_pos[e.index] = (key, pos)
            node = node_of[e.index]
            if pos:
                dep(chain[pos - 1].index, node)
            p = parent_of.get(e.index)
            while p is not None and p not in node_of:
                p = parent_of.get(p)
            if p is not None:
                node.ctrl_deps.append(node_of[p].id)
    return chains, chain_pos


def _launch_dep(parent_of: Mapping[int, int], src: int, node_of: Mapping[int, NodeDraft], dst: NodeDraft, dep) -> None:
    """``dst`` after its launch call ``src``, or after the host COMM node the call was folded into."""
    if src in node_of:
        dep(src, dst)
        return
    # The launch call was folded into a host COMM node: depend on that node instead.
    p = parent_of.get(src)
    while p is not None and p not in node_of:
        p = parent_of.get(p)
    if p is not None and node_of[p].id < dst.id:
        dep(p, dst)


def _flow_edges(
    lanes: Mapping[Any, list[KinetoEvent]], flows: Sequence[Any], node_of: Mapping[int, NodeDraft], dep
) -> int:
    """``fwdbwd`` flow edges (forward op -> backward op) between emitted host events; returns how many."""
    starts: dict[tuple[Any, Any, int], int] = {}
    for key, lane in lanes.items():
        for e in lane:
            if e.index in node_of:
                starts.setdefault((key[0], key[1], e.start_ns), e.index)
    begin: dict[Any, int] = {}
    ends: list[tuple[Any, int]] = []
    for f in flows:
        if f.category != "fwdbwd":
            continue
        i = starts.get((f.pid, f.tid, f.ts_ns))
        if i is None:
            continue
        if f.phase == "s":
            begin.setdefault(f.flow_id, i)
        elif f.phase == "f":
            ends.append((f.flow_id, i))
    n = 0
    for flow_id, dst_i in ends:
        src_i = begin.get(flow_id)
        if src_i is None:
            continue  # flow end without a start: tolerated
        src, dst = node_of[src_i], node_of[dst_i]
        if src.id < dst.id and src.id not in dst.data_deps:
            dep(src_i, dst)
            n += 1
    return n
