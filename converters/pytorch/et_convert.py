"""Building one rank's Chakra graph from a PyTorch ET (and its linked Kineto trace).

Node kinds emitted:

* one METADATA node ``process_group:init`` declaring the process groups
  (from ``## process_group:init ##``, else Kineto ``distributedInfo``);
* one COMP host node per ET operator (``is_cpu_op`` true), with the measured
  *exclusive* duration in ns (own time minus linked children's time on the
  same thread) when Kineto is linked, else 0;
* one COMM node per communication operation (see :mod:`.collectives`); the
  ET ops folded into it (``record_param_comms``, ``nccl:*``, ``gloo:*``) emit
  nothing else;
* one COMP device node per linked kernel / memcpy / memset (``is_cpu_op``
  false, ``stream`` attribute); an NCCL kernel launched by a communication op
  is that op's COMM node instead (placed on the kernel's stream).

Dependencies (``data_deps``):

* host ops on one thread keep their start order (ET ``rf_id`` order); an
  asynchronous collective (NCCL, or ``async_op=True``) branches off its thread
  instead of blocking it, and is joined by the op that waits for it (a
  ``record_param_comms`` "wait" with its sequence number) or, failing that, by
  the first later op reading one of its tensors' storage; for a collective on a
  GPU the join is a stream wait (the joiner's next device op waits), and the
  thread's time in the call is an ``issue:<op>`` host node (issue 27);
* across threads only where the trace shows a hand-over: when consecutive ops
  in global start order run on different threads and (with Kineto times) the
  first's outermost work ended while the second's thread sat idle, the second
  being top-level work on its thread;
* a device op follows its launching host op and the previous device op on
  its stream; host waits (``cudaDeviceSynchronize`` ...) and stream waits
  from :mod:`.device_graph` become edges into the waiting host op / device op.

``ctrl_deps`` holds the ET parent (the call-stack parent; folded ops map to
their COMM node).  Every node has an order key (host: global start position;
device: its launcher's position, then time), and an edge is kept only when it
goes from a smaller to a larger key, so the graph is acyclic by construction;
edges that would not be are counted in :attr:`RankConversion.dropped_edges`.

This module builds the host and COMM nodes, their timing and the step markers, and returns the rank's trace;
:mod:`.et_graph` holds the graph under construction and its edge rule, :mod:`.et_host_deps` the host-side
dependencies and :mod:`.et_device` the device nodes and synchronization edges.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

import orjson

from tracekit.errors import ConversionError
from tracekit.model.groups import pg_init_node
from tracekit.converters.pytorch.kineto_memory import trace_memory_attrs
from tracekit.model import Attr, ExecutionTrace, IOInfo, Metadata, NodeDraft, NodeType
from tracekit.model.uneven import RECV_SPLIT_BYTES, SEND_SPLIT_BYTES

from tracekit.converters.pytorch.costs import CostStats, attach_costs, capture_device, device_attr
from tracekit.converters.pytorch.collectives import CommOp, plan_comms, read_process_groups
from tracekit.converters.pytorch.et_reader import EtIO, EtOp, EtTrace
from tracekit.converters.pytorch.host_timing import HostSpan, latency_leads, thread_timing
from tracekit.converters.pytorch.kineto_reader import KinetoTrace
from tracekit.converters.pytorch.et_device import DeviceSide
from tracekit.converters.pytorch.et_host_deps import HostDeps
from tracekit.converters.pytorch.linker import LinkReport, Linkage, is_et_root
from tracekit.converters.pytorch.log_groups import LogLine

CHAKRA_VERSION = "0.0.4"
#: Linked Kineto categories that are ranges (annotations), see :mod:`.host_timing`.
RANGE_CATEGORIES = frozenset({"user_annotation"})
_STEP = re.compile(r"ProfilerStep#\d+$")
log = logging.getLogger(__name__)


@dataclass
class RankConversion:
    """One converted rank and what the conversion found.

    Attributes:
        trace: the Chakra trace.
        comm_counts: COMM nodes per kind name (``ALL_REDUCE``, ``SEND`` ...).
        link: the link report, or None without Kineto.
        dropped_edges: dependencies not emitted because they would point backward.
        node_counts: nodes per NodeType name.
        costs: what :func:`.costs.attach_costs` priced (FLOPs, bytes), or None.
        log: the converter's log records of this rank when collected (:mod:`.log_groups`; emitted by the job).
    """

    trace: ExecutionTrace
    comm_counts: dict[str, int]
    link: LinkReport | None = None
    dropped_edges: int = 0
    node_counts: dict[str, int] = field(default_factory=dict)
    costs: CostStats | None = None
    log: list[LogLine] = field(default_factory=list)


def _io(io: EtIO) -> IOInfo | None:
    if not io.values and not io.shapes and not io.types:
        return None
    return IOInfo(
        values=orjson.dumps(io.values).decode(),
        shapes=orjson.dumps(io.shapes).decode(),
        types=orjson.dumps(io.types).decode(),
    )


class _Builder(HostDeps, DeviceSide):
    """Builds the nodes of one rank (host, COMM, step markers) and orders the graph (module docstring)."""

    # ------------------------------------------------------------------ build
    def build(self) -> list[NodeDraft]:
        """All nodes of the rank (groups, host/COMM in ET order, device) with the module's dependency rules."""
        et, plan = self.et, self.plan
        comms = {c.node_id: c for c in plan.comms}
        ops = [op for op in et.ops if not is_et_root(op)]
        position = {op.id: i for i, op in enumerate(ops)}
        kids = et.children()

        # process groups
        out: list[NodeDraft] = []
        if self.groups:
            pg_id = next((op.id for op in et.ops if "process_group:init" in op.name), None)
            node_id = pg_id if pg_id is not None else self.fresh_id()
            node = NodeDraft.from_node(pg_init_node(node_id, self.groups, world_size=self.world_size))
            out.append(node)

        # host and comm nodes
        self.host_timing()
        for op in ops:
            owner = plan.member_of.get(op.id)
            if owner is not None and owner != op.id:
                continue
            parent = op.parent
            while parent in plan.member_of and plan.member_of[parent] != parent:
                parent = plan.member_of[parent]
            ctrl = [] if parent not in et.by_id or is_et_root(et.by_id[parent]) else [parent]
            comm = comms.get(op.id)
            node = self.comm_node(op, comm, ctrl) if comm is not None else self.host_node(op, ctrl, kids)
            if comm is not None and comm.device and not comm.device.startswith("cpu"):
                self.issue_node(op, comm, ctrl, position, out)
            self.nodes[node.id] = node
            self.order[node.id] = (position[op.id], 0, 0, 0)
            out.append(node)

        self.thread_chains(ops, comms)
        self.cross_thread(ops, comms)
        self.joins(ops, comms, position)
        self.kineto_step_markers(ops, out, position)
        if self.link is not None:
            out.extend(self.device_nodes(comms, position))
            self.device_joins(position)
            self.split_issue_nodes(out)
            self.host_latency()
        return out

    def host_latency(self) -> None:
        """:func:`.host_timing.latency_leads` on the top-level host nodes (an issue node stands for its op)."""
        link = self.link
        assert link is not None
        host_of = {issue: op_id for op_id, issue in self.issue_of.items()}
        issue_end = {
            issue: max(link.host[m].end_ns for m in self.plan_members(op_id) if m in link.host)
            for issue, op_id in host_of.items()
        }

        def end_ns(nid: int) -> int | None:
            n = self.nodes.get(nid)
            if n is None or n.get_attr("range_duration_ns") is not None:
                return None
            if n.is_cpu_op:
                e = link.host.get(nid)
                return issue_end.get(nid, e.end_ns if e is not None else None)
            return n.start_time_ns + n.duration_ns if n.start_time_ns else None

        nodes, uncovered, lead = [], {}, {}
        for nid, n in self.nodes.items():
            key = host_of.get(nid, nid)
            if key not in self.uncovered_ns or not n.is_cpu_op or n.get_attr("range_duration_ns") is not None:
                continue
            nodes.append(n)
            uncovered[nid] = self.uncovered_ns[key]
            lead[nid] = self.lead_gap_ns.get(key, 0)
        latency_leads(nodes, uncovered, lead, end_ns)

    def split_issue_nodes(self, out: list[NodeDraft]) -> None:
        """Cut each issue node at its kernel's launch: the COMM node starts after the part before it.

        The NCCL kernel can start once ``cudaLaunchKernel`` returned, while the thread goes on in the call
        (stream waits, bookkeeping); the part after the launch becomes a second host node (same name,
        ``comm_issue_part`` = 2) that the thread's next op follows, so the COMM node does not wait for it.
        """
        for op_id, issue in list(self.issue_of.items()):
            launch_end = self.comm_launch_end.get(op_id)
            a = self.nodes[issue]
            if launch_end is None:
                continue
            after = min(a.duration_ns, max(0, a.start_time_ns + a.duration_ns - launch_end))
            if after <= 0:
                continue
            nid = self.fresh_id()
            b = NodeDraft(
                id=nid,
                name=a.name,
                type=NodeType.COMP_NODE,
                ctrl_deps=list(a.ctrl_deps),
                start_time_ns=launch_end,
                duration_ns=after,
                attrs=[
                    Attr("tid", a.get_attr("tid")),
                    Attr("is_cpu_op", True, "bool_val"),
                    Attr("comm_issue_of", op_id),
                    Attr("comm_issue_part", 2, "int64_val"),
                ],
            )
            a.duration_ns -= after
            for n in self.nodes.values():
                if n.id != op_id and issue in n.data_deps:
                    n.data_deps[n.data_deps.index(issue)] = nid
            self.nodes[nid] = b
            self.order[nid] = self.order[issue] + (1,)
            b.data_deps.append(issue)
            out.insert(out.index(a) + 1, b)

    def plan_members(self, op_id: int) -> tuple[int, ...]:
        """ET ids folded into the COMM op ``op_id``."""
        return next(c.members for c in self.plan.comms if c.node_id == op_id)

    def host_timing(self) -> None:
        """Durations of linked host ops by :mod:`.host_timing`, one Kineto thread at a time."""
        self.duration_ns: dict[int, int] = {}
        self.gap_ns: dict[int, int] = {}
        self.lead_gap_ns: dict[int, int] = {}
        self.uncovered_ns: dict[int, int] = {}
        self.work_top: dict = {}
        self.range_ns: dict[int, int] = {}
        self.partial_overlaps = 0
        if self.link is None:
            return
        lanes: dict[tuple, list[HostSpan]] = {}
        for et_id, e in self.link.host.items():
            is_range = e.category in RANGE_CATEGORIES and et_id not in self.plan.member_of
            if is_range:
                self.range_ns[et_id] = e.duration_ns
            lanes.setdefault((e.pid, e.tid), []).append(HostSpan(et_id, e.start_ns, e.end_ns, is_range))
        if self.kineto is not None and not any(_STEP.match(op.name) for op in self.et.ops):
            for e in self.kineto.events:  # steps only Kineto has (see kineto_step_markers) are ranges too
                if e.category in RANGE_CATEGORIES and _STEP.match(e.name) and (e.pid, e.tid) in lanes:
                    lanes[(e.pid, e.tid)].append(HostSpan(("kineto", e.index), e.start_ns, e.end_ns, True))
        for spans in lanes.values():
            timing = thread_timing(spans)
            range_of = {sp.key: sp.is_range for sp in spans}
            for sp in spans:  # outermost enclosing work event (itself when top-level work)
                top, p = sp.key, timing.parent.get(sp.key)
                while p is not None:
                    if not range_of[p]:
                        top = p
                    p = timing.parent.get(p)
                self.work_top[sp.key] = top
            self.duration_ns.update(timing.duration_ns)
            self.gap_ns.update(timing.gap_ns)
            self.lead_gap_ns.update(timing.lead_gap_ns)
            self.uncovered_ns.update(timing.uncovered_lead_ns)
            self.partial_overlaps += timing.partial_overlaps
        if self.partial_overlaps:
            log.warning(
                "%s: %d host op(s) overlap an enclosing op without nesting; clamped to its end",
                self.et.path or "ET",
                self.partial_overlaps,
            )

    def kineto_step_markers(self, ops: list[EtOp], out: list[NodeDraft], position: dict[int, int]) -> None:
        """Steps from Kineto when the ET has none: a zero-duration ``ProfilerStep#N`` node per Kineto step.

        Placed just before the first linked op of the step's Kineto thread (in file order and in that ET
        thread's chain), with the step's measured span in ``range_duration_ns``.
        """
        if self.link is None or self.kineto is None or any(_STEP.match(op.name) for op in ops):
            return
        steps = sorted(
            (e for e in self.kineto.events if e.category in RANGE_CATEGORIES and _STEP.match(e.name)),
            key=lambda e: e.start_ns,
        )
        linked = [(op, self.link.host[op.id]) for op in ops if op.id in self.nodes and op.id in self.link.host]
        for m in steps:
            first = next(
                (op for op, e in linked if (e.pid, e.tid) == (m.pid, m.tid) and e.start_ns >= m.start_ns), None
            )
            if first is None:
                continue
            prev = None
            for op in ops:
                if op.id == first.id:
                    break
                if op.tid == first.tid and op.id in self.nodes:
                    prev = op.id
            nid = self.fresh_id()
            self.nodes[nid] = NodeDraft(
                id=nid,
                name=m.name,
                type=NodeType.COMP_NODE,
                start_time_ns=m.start_ns,
                duration_ns=0,
                attrs=[
                    Attr("tid", first.tid),
                    Attr("is_cpu_op", True, "bool_val"),
                    Attr("range_duration_ns", m.duration_ns, "int64_val"),
                    Attr("step_source", "kineto", "string_val"),
                ],
            )
            self.order[nid] = (position[first.id], -1, 0, 0)
            if prev is not None:
                self.add_dep(nid, prev)
            self.add_dep(first.id, nid)
            at = next(i for i, n in enumerate(out) if n.id == first.id)
            out.insert(at, self.nodes[nid])

    def host_node(self, op: EtOp, ctrl: list[int], kids: dict[int, list[EtOp]]) -> NodeDraft:
        """``op``'s COMP host node: linked start and exclusive duration (ns; 0 unlinked), ET ids as attributes."""
        times = self.host_times(op)
        start = dur = 0
        if times is not None:
            start = times[0]
            dur = self.duration_ns.get(op.id, 0)
        attrs = [
            Attr("rf_id", op.rf_id),
            Attr("fw_parent", op.fw_parent),
            Attr("seq_id", op.seq_id),
            Attr("scope", op.scope),
            Attr("tid", op.tid),
            Attr("fw_tid", op.fw_tid),
            Attr("is_cpu_op", True, "bool_val"),
        ]
        if op.id in self.range_ns:
            attrs.append(Attr("range_duration_ns", self.range_ns[op.id], "int64_val"))
        elif self.gap_ns.get(op.id):
            attrs.append(Attr("host_gap_ns", self.gap_ns[op.id], "int64_val"))
        if op.op_schema:
            attrs.append(Attr("op_schema", op.op_schema, "string_val"))
        return NodeDraft(
            id=op.id,
            name=op.name,
            type=NodeType.COMP_NODE,
            ctrl_deps=ctrl,
            start_time_ns=start,
            duration_ns=dur,
            inputs=_io(op.inputs),
            outputs=_io(op.outputs),
            attrs=attrs,
        )

    def issue_node(
        self, op: EtOp, comm: CommOp, ctrl: list[int], position: dict[int, int], out: list[NodeDraft]
    ) -> None:
        """The host time of issuing an asynchronous collective: a COMP host node on the issuing thread.

        The COMM node of a collective on a GPU (NCCL) runs on its stream, beside its thread; the time the thread spent
        in the call (``c10d::*``, ``record_param_comms``, ``nccl:*`` on the host, launch and stream waits) is
        the members' measured exclusive host time, as the Kineto-only path keeps it in the c10d op's node.
        Only with a linkage whose host events cover a member; the node stands in the thread chain in the
        collective's place (:mod:`.et_host_deps`) and the COMM node depends on it.
        """
        if self.link is None or not any(m in self.link.host for m in comm.members):
            return
        start = min(self.link.host[m].start_ns for m in comm.members if m in self.link.host)
        dur = sum(self.duration_ns.get(m, 0) for m in comm.members)
        gap = sum(self.gap_ns.get(m, 0) for m in comm.members)
        nid = self.fresh_id()
        attrs = [Attr("tid", op.tid), Attr("is_cpu_op", True, "bool_val"), Attr("comm_issue_of", op.id)]
        if gap:
            attrs.append(Attr("host_gap_ns", gap, "int64_val"))
        self.nodes[nid] = NodeDraft(
            id=nid,
            name=f"issue:{op.name}",
            type=NodeType.COMP_NODE,
            ctrl_deps=list(ctrl),
            start_time_ns=start,
            duration_ns=dur,
            attrs=attrs,
        )
        self.order[nid] = (position[op.id], 0, 0, -1)
        self.issue_of[op.id] = nid
        out.append(self.nodes[nid])

    def comm_node(self, op: EtOp, comm: CommOp, ctrl: list[int]) -> NodeDraft:
        """``comm``'s COMM node: ``comm_size`` in bytes, times (ns) spanning its linked backend ops (0 unlinked)."""
        start = dur = 0
        if self.link is not None:
            spans = [self.link.host[i] for i in comm.backend_ops if i in self.link.host]
            if not spans and op.id in self.link.host:
                spans = [self.link.host[op.id]]
            if spans:
                start = min(e.start_ns for e in spans)
                dur = max(e.end_ns for e in spans) - start
        attrs = []
        if comm.comm_type is not None:
            attrs.append(Attr("comm_type", int(comm.comm_type)))
        attrs += [Attr("comm_size", comm.comm_bytes), Attr("pg_name", comm.pg_name, "string_val")]
        if comm.comm_src is not None:
            attrs += [
                Attr("comm_src", comm.comm_src, "int32_val"),
                Attr("comm_dst", comm.comm_dst, "int32_val"),
                Attr("comm_tag", comm.comm_tag or 0, "int32_val"),
            ]
        for name, split in ((SEND_SPLIT_BYTES, comm.send_split_bytes), (RECV_SPLIT_BYTES, comm.recv_split_bytes)):
            if split:
                attrs.append(Attr(name, list(split), "int64_list"))
        attrs += [Attr("is_cpu_op", False, "bool_val"), Attr("rf_id", op.rf_id), Attr("tid", op.tid)]
        if comm.seq is not None:
            attrs.append(Attr("seq_id", comm.seq))
        return NodeDraft(
            id=op.id,
            name=op.name,
            type=comm.node_type,
            ctrl_deps=ctrl,
            start_time_ns=start,
            duration_ns=dur,
            inputs=_io(op.inputs),
            outputs=_io(op.outputs),
            attrs=attrs,
        )


def _groups_from_kineto(kineto: KinetoTrace | None) -> dict[str, tuple[int, ...]]:
    if kineto is None:
        return {}
    out = {}
    for g in kineto.process_groups:
        out[g.pg_name] = tuple(g.ranks)
    return out


def convert_et(
    et: EtTrace, *, rank: int | None = None, kineto: KinetoTrace | None = None, linkage: Linkage | None = None
) -> RankConversion:
    """Convert one rank's ET (with optional linked Kineto) into an :class:`ExecutionTrace`.

    Args:
        et: the ET.
        rank: global rank (needed for send/recv peers; else taken from Kineto
            ``distributedInfo``).
        kineto: the rank's Kineto trace, if any (for process groups).
        linkage: the result of :func:`.linker.link` for this pair, if any.

    Returns:
        :class:`RankConversion`: times in ns (0 unlinked), COMM sizes in bytes.

    Raises:
        ConversionError: see :func:`.collectives.plan_comms` and :func:`.collectives.read_process_groups`;
            also when the built graph has duplicate ids (a bug, reported with the id).
    """
    if rank is None and kineto is not None:
        rank = kineto.rank
    declared = read_process_groups(et)
    groups = dict(declared.groups) or _groups_from_kineto(kineto)
    plan = plan_comms(et, rank=rank, groups=groups, backend_pg=declared.backend_pg)
    if plan.comms and not groups:
        groups = {"0": ()}
    builder = _Builder(et, plan, rank, linkage, groups, kineto)
    # the default group spans the capture's ranks: the ET's own group_size, else Kineto's distributedInfo
    builder.world_size = declared.world_size or (kineto.world_size if kineto is not None else None)
    nodes = builder.build()
    seen: set[int] = set()
    for n in nodes:
        if n.id in seen:
            raise ConversionError(
                f"duplicate node id {n.id} in the converted graph", path=et.path, rank=rank, node_id=n.id
            )
        seen.add(n.id)
    cost_stats = attach_costs(nodes)
    device = None
    if kineto is not None:
        device = capture_device(kineto.device_properties, any(e.is_device for e in kineto.events))
    md_attrs = [Attr("source_schema", et.schema, "string_val")] + device_attr(device)
    if kineto is not None and kineto.world_size is not None:
        md_attrs.append(Attr("world_size", kineto.world_size, "int64_val"))
    if kineto is not None:
        md_attrs.extend(trace_memory_attrs(kineto))  # measured peak memory, when the capture recorded allocations
    trace = ExecutionTrace(
        [n.build() for n in nodes], Metadata(version=CHAKRA_VERSION, attrs=md_attrs), rank=rank, path=None
    )
    counts: dict[str, int] = {}
    for n in nodes:
        type_name = NodeType(n.type).name
        counts[type_name] = counts.get(type_name, 0) + 1
    return RankConversion(
        trace=trace,
        comm_counts=plan.counts(),
        link=linkage.report if linkage is not None else None,
        dropped_edges=builder.dropped,
        node_counts=counts,
        costs=cost_stats,
    )
