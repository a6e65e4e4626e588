"""Kineto-only conversion: one PyTorch profiler trace (no Execution Trace) -> one rank's ExecutionTrace.

Graph built from the Kineto events alone:

* **Host ops.**  Every ``cpu_op``, ``user_annotation``, runtime/driver call
  (``cuda_runtime``, ``cuda_driver``, ``mtia_runtime``...) and ``python_function`` on a
  host thread is a COMP node, timed by :mod:`.host_timing`: annotations
  (``user_annotation``: ``ProfilerStep#N``, ``## backward ##``, ``record_function``) are
  ranges of 0 ns with their span in ``range_duration_ns``; work gets its own time
  plus the uncovered time of its range (``host_gap_ns``); partial overlaps are
  clamped and counted.  Nodes of one thread form a chain in pre-order (start,
  longer first), each depending on the previous one; ``ctrl_deps`` hold the
  enclosing op.  Synchronizing calls that wait in the replay keep only their time
  after what they wait for (``waited_ns``).
* **Device ops.**  Kernels, memcpys and memsets are COMP nodes (``is_cpu_op``
  false, ``stream`` attribute) depending on their launch call and on the previous
  op of their stream; synchronization adds the edges :mod:`.device_graph` finds.
* **Cross-thread.**  Only where the trace shows one: ``fwdbwd`` flow events
  (forward op -> its backward op), launches, synchronization, gloo worker records,
  and thread hand-off through a range holding no work of its own thread
  (:func:`.host_timing.handoff_edges`).
* **Communication.**  :mod:`.kineto_comms` folds each collective family into one
  COMM_COLL / COMM_SEND / COMM_RECV node (the NCCL kernel, or the host op for
  gloo) with ``comm_type``, ``comm_size`` (bytes), ``pg_name`` and for send/recv
  ``comm_src``/``comm_dst``/``comm_tag``.  Process groups come from
  ``distributedInfo.pg_config`` and ``record_param_comms``; they are declared in a
  ``process_group:init`` METADATA node (id 0).

Node ids are assigned in time order (:func:`.device_graph.time_key`) and every
data dependency points from an earlier to a later node, so the graph is acyclic
by construction; a violation raises :class:`ConversionError` naming both nodes
(it would be a bug here, not bad input).  Times are integer nanoseconds on the
trace's clock.

Errors: :class:`~tracekit.errors.TraceFormatError` from the reader;
:class:`~tracekit.errors.ConversionError` for a trace with nothing to convert
(metadata only, or counters only: launches without any recorded GPU activity),
unknown collective names, undeterminable sizes or groups, duplicate ranks.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from tracekit.converters.pytorch.costs import capture_device, device_attr
from tracekit.converters.pytorch.kineto_costs import attach_kineto_costs
from tracekit.converters.pytorch.device_graph import (
    HOST_API_CATEGORIES,
    DeviceGraphStats,
    build_device_graph,
    time_key,
)
from tracekit.converters.pytorch.host_timing import (
    HostSpan,
    thread_timing,
    trim_waiting_gaps,
)
from tracekit.converters.pytorch.kineto_comms import (
    KinetoComm,
    declared_groups_from_rpc,
    extract_comms,
    is_nccl_kernel,
)
from tracekit.converters.pytorch.kineto_edges import RANGE_CATEGORIES, add_edges
from tracekit.converters.pytorch.kineto_reader import (
    KinetoEvent,
    KinetoTrace,
    iter_events_by_thread,
    paused_gc,
    read_kineto,
)
from tracekit.errors import ConversionError
from tracekit.model.groups import pg_init_node
from tracekit.converters.pytorch.kineto_memory import trace_memory_attrs
from tracekit.model import Attr, ExecutionTrace, Metadata, NodeDraft, NodeType
from tracekit.sets.traceset import TraceSet

__all__ = [
    "HOST_NODE_CATEGORIES",
    "KinetoConversion",
    "KinetoConversionStats",
    "convert_kineto",
    "convert_kineto_rank",
    "convert_kineto_trace",
]

#: Host-side categories that become nodes.
HOST_NODE_CATEGORIES = frozenset({"cpu_op", "user_annotation", "python_function", "mtia_runtime"} | HOST_API_CATEGORIES)
# Categories that carry no work of their own (annotations of other events, counters, spans).
_DECORATION_CATEGORIES = frozenset(
    {"gpu_user_annotation", "cuda_sync", "Trace", "cuda_profiler_range", "cpu_instant_event", "overhead"}
)
log = logging.getLogger(__name__)
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_LAUNCH_CALL = re.compile(r"Launch|[Mm]emcpy|[Mm]emset")


@dataclass(frozen=True, slots=True)
class KinetoConversionStats:
    """What a Kineto-only conversion produced (numbers for reports and tests).

    Attributes:
        rank, rank_source: the rank and where it came from (``argument``, ``distributedInfo``,
            ``file name``, ``default``).
        nodes_by_type: emitted nodes per NodeType name.
        host_ops: host events emitted as nodes.
        device_ops, kernels_attached: device ops in the trace / attached to a launch.
        collectives: COMM nodes per kind (``ALL_REDUCE``..., ``SEND``, ``RECV``).
        comm_kernels_unmatched: NCCL kernels with no host record (size and group unknown), not emitted.
        folded_events: host events represented by a host COMM node (its subtree, gloo worker records).
        skipped_categories: events of categories that are not work, per category.
        flow_edges: cross-thread edges from ``fwdbwd`` flows.
        device: launch/sync statistics from :mod:`.device_graph`.
        pg_sources: how each COMM node's group was found, counted.
    """

    rank: int
    rank_source: str
    nodes_by_type: Mapping[str, int]
    host_ops: int
    device_ops: int
    kernels_attached: int
    collectives: Mapping[str, int]
    comm_kernels_unmatched: int
    folded_events: int
    skipped_categories: Mapping[str, int]
    flow_edges: int
    device: DeviceGraphStats
    pg_sources: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, eq=False)
class KinetoConversion:
    """A converted rank and its statistics.

    Attributes:
        trace: the rank's Chakra trace (times in ns on the Kineto clock).
        stats: what the conversion produced.
        comms: the communication operations found, in issue order (``comm_bytes`` in bytes).
    """

    trace: ExecutionTrace
    stats: KinetoConversionStats
    comms: tuple[KinetoComm, ...]


# ----------------------------------------------------------------------------- public API
def convert_kineto_rank(path: str | os.PathLike[str], rank: int | None = None) -> ExecutionTrace:
    """Convert one Kineto file to one rank's :class:`ExecutionTrace`.

    Args:
        path: ``.json``, ``.json.gz`` or ``.tar.gz`` Kineto trace.
        rank: the rank; default ``distributedInfo.rank``, else a ``rank<N>`` in the file
            name, else 0.

    Raises:
        TraceFormatError: unreadable or malformed file.
        ConversionError: see the module docstring.
    """
    return convert_kineto_trace(read_kineto(path), rank=rank).trace


def convert_kineto(paths: Iterable[str | os.PathLike[str]]) -> TraceSet:
    """Convert one Kineto file per rank into a :class:`TraceSet`.

    Raises:
        ConversionError: two files claim the same rank, or no files given; plus the
            errors of :func:`convert_kineto_rank`.
    """
    traces: dict[int, ExecutionTrace] = {}
    origin: dict[int, str] = {}
    for p in paths:
        p = os.fspath(p)
        trace = convert_kineto_rank(p)
        assert trace.rank is not None  # set by convert_kineto_trace
        if trace.rank in traces:
            raise ConversionError(f"rank {trace.rank} appears twice: {origin[trace.rank]} and {p}", path=p)
        traces[trace.rank] = trace
        origin[trace.rank] = p
    if not traces:
        raise ConversionError("no Kineto files to convert")
    from tracekit.converters.pytorch import world_size_warning

    warning = world_size_warning(traces)
    if warning:
        log.warning(warning)
    return TraceSet(traces)


def convert_kineto_trace(kt: KinetoTrace, *, rank: int | None = None) -> KinetoConversion:
    """Convert a parsed Kineto trace (see :func:`convert_kineto_rank` for ``rank``).

    Returns:
        :class:`KinetoConversion` with the trace, its statistics and its communication operations.

    Raises:
        ConversionError: nothing to convert (metadata or counters only), the errors of
            :func:`.kineto_comms.extract_comms`, or a dependency pointing backward (an internal error);
            naming the file and rank.
    """
    with paused_gc():
        return _Converter(kt, rank).run()


# ----------------------------------------------------------------------------- conversion
def _resolve_rank(kt: KinetoTrace, rank: int | None) -> tuple[int, str]:
    if rank is not None:
        return rank, "argument"
    if kt.rank is not None:
        return kt.rank, "distributedInfo"
    if kt.path:
        m = _RANK_IN_NAME.search(os.path.basename(kt.path))
        if m:
            return int(m.group(1)), "file name"
    return 0, "default"


def _partition(kt: KinetoTrace) -> tuple[list[KinetoEvent], int, Counter[str]]:
    """``(host events that become nodes, number of device events, skipped events per category)``."""
    host: list[KinetoEvent] = []
    skipped: Counter[str] = Counter()
    n_device = 0
    for e in kt.events:
        if e.is_device:
            n_device += 1
        elif e.category in HOST_NODE_CATEGORIES and isinstance(e.pid, int):
            host.append(e)
        else:
            skipped[e.category or "(none)"] += 1
    return host, n_device, skipped


def _metadata(kt: KinetoTrace, rank: int, has_device_ops: bool) -> Metadata:
    """The converted trace's metadata: converter, rank, world size (when known), captured device."""
    md_attrs = [
        Attr("converter", "tracekit.converters.pytorch.kineto_convert", "string_val"),
        Attr("rank", rank, "int64_val"),
    ]
    if kt.world_size is not None:
        md_attrs.append(Attr("world_size", kt.world_size, "int64_val"))
    md_attrs.extend(device_attr(capture_device(kt.device_properties, has_device_ops)))
    md_attrs.extend(trace_memory_attrs(kt))  # measured peak memory, when the capture recorded allocations
    return Metadata(version="0.0.4", attrs=md_attrs)


class _Converter:
    def __init__(self, kt: KinetoTrace, rank: int | None) -> None:
        self.kt = kt
        self.path = kt.path
        self.rank, self.rank_source = _resolve_rank(kt, rank)

    def error(self, message: str, **kw: Any) -> ConversionError:
        """A ConversionError for ``message`` naming this file and rank (and ``kw`` context); returned, not raised."""
        return ConversionError(message, path=self.path, rank=self.rank, **kw)

    # ------------------------------------------------------------------ host structure
    def host_structure(self, host: Sequence[KinetoEvent]) -> None:
        """Nesting and durations of host events, one thread at a time (:mod:`.host_timing`)."""
        self.lanes = iter_events_by_thread(host)
        self.parent_of: dict[int, int] = {}
        self.exclusive_ns: dict[int, int] = {}
        self.gap_ns: dict[int, int] = {}
        self.lead_gap_ns: dict[int, int] = {}
        self.partial_overlaps = 0
        for lane in self.lanes.values():
            timing = thread_timing(
                [HostSpan(e.index, e.start_ns, e.end_ns, e.category in RANGE_CATEGORIES) for e in lane]
            )
            self.parent_of.update(timing.parent)
            self.exclusive_ns.update(timing.duration_ns)
            self.gap_ns.update(timing.gap_ns)
            self.lead_gap_ns.update(timing.lead_gap_ns)
            self.partial_overlaps += timing.partial_overlaps
        if self.partial_overlaps:
            log.warning(
                "%s: %d host event(s) overlap an enclosing event without nesting; clamped to its end",
                self.path or "Kineto trace",
                self.partial_overlaps,
            )

    def groups(self, host: Sequence[KinetoEvent]) -> dict[str, tuple[int, ...]]:
        """pg_name -> global ranks: ``distributedInfo.pg_config`` first, then groups ``record_param_comms`` names."""
        groups: dict[str, tuple[int, ...]] = {}
        for pg in self.kt.process_groups:
            groups[pg.pg_name] = pg.ranks
        for name, ranks in declared_groups_from_rpc(host).items():
            groups.setdefault(name, ranks)
        return groups

    # ------------------------------------------------------------------ main
    def run(self) -> KinetoConversion:
        """The whole conversion of the module docstring (see :func:`convert_kineto_trace` for errors)."""
        kt = self.kt
        host, n_device, skipped = _partition(kt)
        self.check_convertible(host, n_device, skipped)

        dgraph = build_device_graph(kt)
        self.host_structure(host)
        by_index = {e.index: e for e in kt.events}
        self.by_index = by_index
        launched_by = {call: [by_index[i] for i in ops] for call, ops in dgraph.launched.items()}
        groups = self.groups(host)
        comms = extract_comms(
            self.lanes,
            self.parent_of,
            launched_by,
            rank=self.rank,
            groups=groups,
            world_size=kt.world_size,
            path=self.path,
        )

        folded = {i for c in comms for i in c.folded}
        comm_at = {c.node_event: c for c in comms}
        claimed = set(comm_at) | {k for c in comms for k in c.extra_kernels}
        device_ops = [e for e in kt.events if e.is_device]
        unmatched = [e for e in device_ops if is_nccl_kernel(e) and e.index not in claimed]
        dropped_device = {e.index for e in unmatched}

        emitted: list[KinetoEvent] = [e for e in host if e.index not in folded]
        emitted += [e for e in device_ops if e.index not in dropped_device]
        emitted.sort(key=time_key)
        node_of: dict[int, NodeDraft] = {}
        nodes: list[NodeDraft] = [NodeDraft.from_node(pg_init_node(0, groups or {"0": ()}, world_size=kt.world_size))]
        for nid, e in enumerate(emitted, start=1):
            node = self.make_node(nid, e, comm_at.get(e.index))
            node_of[e.index] = node
            nodes.append(node)

        flow_edges = add_edges(self.lanes, self.parent_of, kt.flows, node_of, dgraph, by_index)
        trim_waiting_gaps(nodes, {node_of[i].id: g for i, g in self.lead_gap_ns.items() if i in node_of})
        attach_kineto_costs(kt, dgraph.launch_of, node_of)  # op costs (issue 15): a separate pass
        self.check_forward(nodes)

        counts = Counter(NodeType(n.type).name for n in nodes)
        coll: Counter[str] = Counter()
        for c in comms:
            coll[c.comm_type.name if c.comm_type is not None else c.node_type.name.split("_")[1]] += 1
        stats = KinetoConversionStats(
            rank=self.rank,
            rank_source=self.rank_source,
            nodes_by_type=dict(sorted(counts.items())),
            host_ops=sum(1 for e in host if e.index not in folded),
            device_ops=len(device_ops),
            kernels_attached=dgraph.stats.attached,
            collectives=dict(sorted(coll.items())),
            comm_kernels_unmatched=len(unmatched),
            folded_events=len(folded),
            skipped_categories=dict(sorted(skipped.items())),
            flow_edges=flow_edges,
            device=dgraph.stats,
            pg_sources=dict(Counter(c.pg_source for c in comms)),
        )
        metadata = _metadata(kt, self.rank, bool(device_ops))
        trace = ExecutionTrace([n.build() for n in nodes], metadata, rank=self.rank, path=None)
        return KinetoConversion(trace, stats, tuple(comms))

    def check_convertible(self, host: Sequence[KinetoEvent], n_device: int, skipped: Counter[str]) -> None:
        """Raise ConversionError when there is nothing to convert: no host op and no device op, or kernel
        launches without any device activity (a CUPTI range-profiler trace, or no ProfilerActivity.CUDA)."""
        if not host and not n_device:
            found = ", ".join(f"{k} x{v}" for k, v in sorted(skipped.items()))
            raise self.error(
                "nothing to convert: the trace has no host operators and no GPU activity "
                + (f"(only {found})" if found else "(no complete events at all)")
            )
        launches = sum(1 for e in host if e.category in HOST_API_CATEGORIES and "LaunchKernel" in e.name)
        if launches and not n_device:
            hint = (
                " (a CUPTI range-profiler trace: it holds performance counters, not GPU activity)"
                if "cuda_profiler_range" in skipped
                else ""
            )
            raise self.error(
                f"nothing to convert: {launches} kernel launches but no kernel, memcpy or memset "
                f"events{hint}; record with ProfilerActivity.CUDA"
            )

    # ------------------------------------------------------------------ nodes
    def make_node(self, nid: int, e: KinetoEvent, comm: KinetoComm | None) -> NodeDraft:
        """Node ``nid`` for event ``e`` (COMM when ``comm`` is given): device ops keep their duration, host ops
        their exclusive time, ranges 0 with ``range_duration_ns`` (all ns); ``comm_size`` in bytes."""
        attrs: list[Attr] = []
        if e.is_device:
            attrs.append(Attr("is_cpu_op", False, "bool_val"))
            if e.stream is not None:
                attrs.append(Attr("stream", e.stream, "int64_val"))
            if e.device is not None:
                attrs.append(Attr("device", e.device, "int64_val"))
            duration = e.duration_ns
        else:
            attrs.append(Attr("is_cpu_op", True, "bool_val"))
            if isinstance(e.tid, int):
                attrs.append(Attr("tid", e.tid, "int64_val"))
            if e.rf_id is not None:
                attrs.append(Attr("rf_id", e.rf_id, "int64_val"))
            duration = e.duration_ns if comm is not None else self.exclusive_ns[e.index]
            if comm is None and e.category in RANGE_CATEGORIES:
                attrs.append(Attr("range_duration_ns", e.duration_ns, "int64_val"))
            elif comm is None and self.gap_ns.get(e.index):
                attrs.append(Attr("host_gap_ns", self.gap_ns[e.index], "int64_val"))
        if e.external_id is not None:
            attrs.append(Attr("ext_id", e.external_id, "int64_val"))
        if e.correlation is not None:
            attrs.append(Attr("correlation", e.correlation, "int64_val"))
        attrs.append(Attr("kineto_category", e.category, "string_val"))
        ntype = NodeType.COMP_NODE
        if comm is not None:
            ntype = comm.node_type
            if comm.comm_type is not None:
                attrs.append(Attr("comm_type", int(comm.comm_type), "int64_val"))
            attrs.append(Attr("comm_size", comm.comm_bytes, "int64_val"))
            attrs.append(Attr("pg_name", comm.pg_name, "string_val"))
            for name, value in (("comm_src", comm.comm_src), ("comm_dst", comm.comm_dst), ("comm_tag", comm.comm_tag)):
                if value is not None:
                    attrs.append(Attr(name, value, "int32_val"))
        start = e.start_ns
        if comm is not None and not e.is_device:
            start, duration = self.gloo_span(e, comm, duration)
        return NodeDraft(id=nid, name=e.name, type=ntype, start_time_ns=start, duration_ns=duration, attrs=attrs)

    def gloo_span(self, e: KinetoEvent, comm: KinetoComm, duration: int) -> tuple[int, int]:
        """A host COMM node's measured ``(start_ns, duration_ns)``: its gloo worker records' span when it has
        some (the transfer runs there, as in the ET path), else the host op's span."""
        workers = [
            w
            for w in (self.by_index[i] for i in comm.members if i != e.index)
            if w.name.startswith("gloo:") and w.tid != e.tid
        ]
        if not workers:
            return e.start_ns, duration
        start = min(w.start_ns for w in workers)
        return start, max(w.end_ns for w in workers) - start

    def check_forward(self, nodes: Sequence[NodeDraft]) -> None:
        """Raise ConversionError (an internal error) if a data dependency does not go to a larger node id."""
        for node in nodes:
            for d in node.data_deps:
                if d >= node.id:
                    raise self.error(
                        f"internal error: dependency {d} -> {node.id} points backward in time "
                        f"(would allow a cycle through nodes {d} and {node.id})",
                        node_id=node.id,
                    )
