"""Device side of a rank's graph (:mod:`.et_convert`): kernel / memcpy / memset nodes and synchronization edges.

A device op follows its launching host op and the previous op on its stream; an NCCL kernel launched by a
communication op times that op's COMM node instead of adding a node. Host waits (``cudaDeviceSynchronize`` ...)
and stream waits found by :mod:`.device_graph` become edges into the waiting host op or device op, and the time a
host op spent blocked is trimmed (:func:`.host_timing.trim_sync_waits`).
"""

from __future__ import annotations

from tracekit.model import Attr, NodeDraft, NodeType

from tracekit.converters.pytorch.collectives import CommOp
from tracekit.converters.pytorch.et_graph import GraphDraft
from tracekit.converters.pytorch.host_timing import trim_sync_waits
from tracekit.converters.pytorch.kineto_reader import KinetoEvent

_NCCL_KERNEL = ("nccl", "Nccl")
_SYNC_KINDS = frozenset(
    {
        "device_sync",
        "stream_sync",
        "stream_sync_inferred",
        "event_sync",
        "event_sync_inferred",
        "stream_wait_event",
        "stream_wait_event_inferred",
    }
)


class DeviceSide(GraphDraft):
    """Adds the device nodes and the synchronization edges (needs a linkage)."""

    def device_nodes(self, comms: dict[int, CommOp], position: dict[int, int]) -> list[NodeDraft]:
        """New device COMP nodes after launcher and stream predecessor; NCCL kernels time their COMM node."""
        link = self.link
        assert link is not None
        out: list[NodeDraft] = []
        node_of_event: dict[int, int] = {}
        launcher_of_event: dict[int, int] = {}
        streams: dict[tuple, list[tuple[tuple, int]]] = {}
        comm_of_member = self.plan.member_of
        for et_id, events in link.device.items():
            owner = comm_of_member.get(et_id, None)
            launcher = owner if owner is not None else et_id
            if launcher not in self.nodes:
                continue
            for e in events:
                key = (position.get(launcher, 0), 1, e.start_ns, e.index)
                is_nccl_kernel = e.category == "kernel" and any(s in e.name for s in _NCCL_KERNEL)
                if owner is not None and is_nccl_kernel and self.nodes[owner].stream is None:
                    node = self.nodes[owner]
                    node.set_attr("stream", e.stream if e.stream is not None else -1)
                    node.start_time_ns, node.duration_ns = e.start_ns, e.duration_ns
                    call = link.launch_of.get(e.index)
                    if call is not None:
                        self.comm_launch_end[owner] = call.end_ns
                    node_of_event[e.index] = owner
                    streams.setdefault((e.device, e.stream), []).append((key, owner))
                    continue
                nid = self.fresh_id()
                node = NodeDraft(
                    id=nid,
                    name=e.name,
                    type=NodeType.COMP_NODE,
                    ctrl_deps=[launcher],
                    start_time_ns=e.start_ns,
                    duration_ns=e.duration_ns,
                    attrs=[
                        Attr("is_cpu_op", False, "bool_val"),
                        Attr("stream", e.stream if e.stream is not None else -1),
                        Attr("device_kind", e.category, "string_val"),
                    ],
                )
                self.nodes[nid] = node
                self.order[nid] = key
                node_of_event[e.index] = nid
                launcher_of_event[e.index] = launcher
                self.add_dep(nid, launcher)
                streams.setdefault((e.device, e.stream), []).append((key, nid))
                out.append(node)
        for lane in streams.values():
            lane.sort(key=lambda kv: (kv[0][2], kv[0][3]))
            for (_, a), (_, b) in zip(lane, lane[1:]):
                self.add_dep(b, a)
        self.sync_edges(node_of_event, position)
        return out

    def sync_edges(self, node_of_event: dict[int, int], position: dict[int, int]) -> None:
        """:mod:`.device_graph` wait edges onto nodes (host waits: the enclosing linked op); trims blocked time."""
        link = self.link
        if link is None or link.device_graph is None:
            return
        et_of_host = {e.index: et_id for et_id, e in link.host.items()}
        host_nodes_by_tid: dict[int, list[int]] = {}
        for nid, key in self.order.items():
            if key[1] == 0:
                tid = self.et.by_id[nid].tid if nid in self.et.by_id else self.nodes[nid].get_attr("tid")
                host_nodes_by_tid.setdefault(tid, []).append(nid)
        for lst in host_nodes_by_tid.values():
            lst.sort(key=lambda n: self.order[n])
        waits: dict[tuple[int, int], tuple[KinetoEvent, int]] = {}
        event_at = {e.index: e for e in self.kineto.events} if self.kineto is not None else {}
        for edge in link.device_graph.edges:
            if edge.kind not in _SYNC_KINDS:
                continue
            src = node_of_event.get(edge.src)
            if src is None:
                continue
            dst = node_of_event.get(edge.dst)
            if dst is None:  # a host wait: the runtime call's enclosing linked ET op
                h = link.host_of_call.get(edge.dst)
                hops = 0
                while h is not None and h.index not in et_of_host and hops < 256:
                    h = link.host_parent.get(h.index)
                    hops += 1
                if h is None:
                    continue
                dst = self.plan.member_of.get(et_of_host[h.index], et_of_host[h.index])
                if dst not in self.nodes:
                    continue
                call = event_at.get(edge.dst)
                if (
                    call is not None
                    and self.nodes[dst].type == NodeType.COMP_NODE
                    and self.order[dst] > self.order[src]
                ):
                    s_node = self.nodes[src]
                    key = (dst, call.index)
                    until = s_node.start_time_ns + s_node.duration_ns
                    waits[key] = (call, max(until, waits[key][1]) if key in waits else until)
                if self.order[dst] <= self.order[src]:  # wait inside the launching op: next op on its thread
                    tid = self.et.by_id[dst].tid
                    later = [n for n in host_nodes_by_tid.get(tid, ()) if self.order[n] > self.order[src]]
                    if not later:
                        continue
                    dst = later[0]
            self.add_dep(dst, src)
        trim_sync_waits(
            (self.nodes[nid], call.start_ns, call.end_ns, until) for (nid, _), (call, until) in waits.items()
        )
