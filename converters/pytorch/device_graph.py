"""Device-side semantics of a Kineto trace: launches, stream order and host-device synchronization.

This module owns the rules that turn GPU activity of one rank into dependencies,
the same for the Kineto-only and the ET + Kineto conversion paths.  It works on
Kineto event *indices* (:attr:`KinetoEvent.index`) and returns a
:class:`DeviceGraph`; the callers map indices to their own nodes.

Rules (semantics from the CUDA Runtime API reference, "Stream Management" and
"Event Management"; the ``cuda_sync`` event fields are those CUPTI's
synchronization activity records carry, as written by libkineto):

* **Launch.**  A device op (``kernel``, ``gpu_memcpy``, ``gpu_memset``) is
  attached to the runtime or driver call with the same ``correlation``
  (``cudaLaunchKernel``, ``cuLaunchKernel*``, ``hipLaunchKernel``,
  ``hipExtModuleLaunchKernel``, ``cudaMemcpyAsync``...).  One ``cudaGraphLaunch``
  may launch many device ops, all sharing its correlation.  A device op with no
  ``correlation`` at all (ROCm traces) is matched by ``External id`` to the launch
  calls carrying the same id, k-th op to k-th call in time order.
* **Stream order.**  Device ops on one (device, stream) run in start order.
* **Host waits for device** (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``,
  ``cudaEventSynchronize``, and CUPTI ``Event Sync`` records): the last device op
  launched before the wait, on each stream the wait covers, must finish before
  the host goes on.  The stream comes from the matching ``cuda_sync`` record when
  the trace has one; otherwise a stream or event wait covers the streams whose
  last launched op ended while the call was blocking (kind ``*_inferred``).
* **Stream waits for event** (``cudaStreamWaitEvent`` on an event recorded
  earlier): the last op launched on the recording stream before the
  ``cudaEventRecord`` precedes the first op launched on the waiting stream after
  the wait call.  With a ``cuda_sync`` record the streams and the record call are
  given; without one, the record is the thread's latest ``cudaEventRecord`` before
  the wait, its stream that of the thread's last launch before the record, and
  the waiting stream that of the thread's next launch (kind
  ``stream_wait_event_inferred``; this is PyTorch's pattern for NCCL streams).

Every edge points forward in time: it is kept only if its source sorts before
its target by :func:`time_key` ``(start_ns, -duration_ns, index)``; others are
dropped and counted (:attr:`DeviceGraphStats.backward_edges_dropped`).  Callers
that order all their nodes by the same key therefore get an acyclic graph by
construction.  Host-wait edges end at the waiting *call*; callers attach them to
the first host node at or after that call that starts after the source
(:func:`forward_position`).
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from tracekit.converters.pytorch.kineto_reader import KinetoEvent, KinetoTrace

__all__ = [
    "DeviceEdge",
    "DeviceGraph",
    "DeviceGraphStats",
    "HOST_API_CATEGORIES",
    "build_device_graph",
    "forward_position",
    "time_key",
]

#: Categories of host-side calls into the accelerator runtime/driver.
HOST_API_CATEGORIES = frozenset(
    {"cuda_runtime", "cuda_driver", "privateuse1_runtime", "privateuse1_driver", "xpu_runtime"}
)

_DEVICE_SYNC = frozenset({"cudaDeviceSynchronize", "hipDeviceSynchronize", "cuCtxSynchronize"})
_STREAM_SYNC = frozenset({"cudaStreamSynchronize", "hipStreamSynchronize", "cuStreamSynchronize"})
_EVENT_SYNC = frozenset({"cudaEventSynchronize", "hipEventSynchronize", "cuEventSynchronize"})
_STREAM_WAIT = frozenset({"cudaStreamWaitEvent", "hipStreamWaitEvent", "cuStreamWaitEvent"})
_EVENT_RECORD = frozenset(
    {"cudaEventRecord", "cudaEventRecordWithFlags", "hipEventRecord", "cuEventRecord", "cuEventRecord_ptsz"}
)
# Names of calls that put work on a stream (used only for the External-id fallback).
_LAUNCH_NAME = re.compile(r"Launch|[Mm]emcpy|[Mm]emset")


def time_key(e: KinetoEvent) -> tuple[int, int, int]:
    """The total order every edge must respect: ``(start_ns, -duration_ns, file index)`` (start, longer first)."""
    return (e.start_ns, -e.duration_ns, e.index)


@dataclass(frozen=True, slots=True)
class DeviceEdge:
    """A dependency between two Kineto events (by index): ``dst`` waits for ``src``.

    ``kind`` is one of ``launch``, ``stream_order``, ``device_sync``, ``stream_sync``,
    ``stream_sync_inferred``, ``event_sync``, ``event_sync_inferred``,
    ``stream_wait_event``, ``stream_wait_event_inferred``.  For host waits ``dst``
    is the waiting runtime call.
    """

    src: int
    dst: int
    kind: str


@dataclass(frozen=True, slots=True)
class DeviceGraphStats:
    """Counts describing how the device side was linked (for conversion reports).

    Attributes:
        device_ops: kernels + memcpys + memsets in the trace.
        attached: device ops attached to a launch call.
        attached_by_external_id: of those, attached through the External-id fallback.
        graph_launch_ops: device ops attached to a ``*GraphLaunch`` call.
        sync_edges: host-wait and stream-wait edges kept, by kind.
        unresolved_waits: wait calls whose target could not be determined (no edge emitted).
        backward_edges_dropped: edges that would point backward in time (not emitted).
    """

    device_ops: int = 0
    attached: int = 0
    attached_by_external_id: int = 0
    graph_launch_ops: int = 0
    sync_edges: Mapping[str, int] = field(default_factory=dict)
    unresolved_waits: int = 0
    backward_edges_dropped: int = 0


@dataclass(frozen=True, slots=True, eq=False)
class DeviceGraph:
    """Device-side structure of one rank (all values are Kineto event indices).

    Attributes:
        launch_of: device op -> the runtime/driver call that launched it.
        launched: launch call -> device ops it launched (several for CUDA graphs), in start order.
        streams: (device, stream) -> device ops in execution order.
        edges: launch, stream-order and synchronization edges; all forward in time by :func:`time_key` except
            host waits (``device_sync``, ``stream_sync*``, ``event_sync*``), whose ``dst`` is the waiting call and
            may start before the awaited op ends (see :func:`forward_position`).
        stats: see :class:`DeviceGraphStats`.
    """

    launch_of: Mapping[int, int]
    launched: Mapping[int, tuple[int, ...]]
    streams: Mapping[tuple[int, int], tuple[int, ...]]
    edges: tuple[DeviceEdge, ...]
    stats: DeviceGraphStats


def forward_position(starts: Sequence[int], pos: int, after_ns: int) -> int | None:
    """First position ``j >= pos`` in a thread's node list with ``starts[j] > after_ns``.

    ``starts`` are the nodes' start times in thread order (non-decreasing).
    Returns None when no such node exists (the wait is the thread's last work).
    """
    j = bisect.bisect_right(starts, after_ns, lo=pos)
    return j if j < len(starts) else None


class _Builder:
    def __init__(self, trace: KinetoTrace) -> None:
        self.trace = trace
        self.by_index: dict[int, KinetoEvent] = {}
        self.device_ops: list[KinetoEvent] = []
        self.host_calls: list[KinetoEvent] = []
        self.sync_records: dict[int, KinetoEvent] = {}  # correlation -> cuda_sync event
        for e in trace.events:
            if e.is_device:
                self.device_ops.append(e)
                self.by_index[e.index] = e
            elif e.category in HOST_API_CATEGORIES:
                self.host_calls.append(e)
                self.by_index[e.index] = e
            elif e.category == "cuda_sync" and e.correlation is not None:
                self.sync_records[e.correlation] = e
        self.edges: list[DeviceEdge] = []
        self.kind_counts: dict[str, int] = defaultdict(int)
        self.dropped = 0
        self.dropped_kinds: dict[str, int] = defaultdict(int)
        self.unresolved = 0

    # ---------------------------------------------------------------- edges
    def add(self, src: KinetoEvent, dst: KinetoEvent, kind: str, *, host_wait: bool = False) -> None:
        """Record edge ``src -> dst`` of ``kind`` if it points forward by :func:`time_key` (always when
        ``host_wait``); otherwise count it as dropped.  A self-edge is ignored."""
        if src.index == dst.index:
            return
        if host_wait or time_key(src) < time_key(dst):
            self.edges.append(DeviceEdge(src.index, dst.index, kind))
            if kind not in ("launch", "stream_order"):
                self.kind_counts[kind] += 1
        else:
            self.dropped += 1
            self.dropped_kinds[kind] += 1

    # ---------------------------------------------------------------- launches
    def link_launches(self) -> tuple[dict[int, int], int, int]:
        """Attach device ops to their launch calls: by ``correlation``, else (ROCm) k-th op to k-th launch-like call
        of the same ``External id`` in time order.

        Returns:
            (device op index -> call index, ops attached by External id, ops attached to a ``*GraphLaunch`` call).
        """
        by_corr: dict[int, KinetoEvent] = {}
        for c in self.host_calls:
            if c.correlation is not None:
                by_corr.setdefault(c.correlation, c)
        launch_of: dict[int, int] = {}
        no_corr: dict[int, list[KinetoEvent]] = defaultdict(list)
        for op in self.device_ops:
            if op.correlation is not None:
                call = by_corr.get(op.correlation)
                if call is not None:
                    launch_of[op.index] = call.index
            elif op.external_id is not None:
                no_corr[op.external_id].append(op)
        by_ext = 0
        if no_corr:
            calls_by_ext: dict[int, list[KinetoEvent]] = defaultdict(list)
            for c in self.host_calls:
                if c.external_id in no_corr and _LAUNCH_NAME.search(c.name):
                    calls_by_ext[c.external_id].append(c)
            for ext, ops in no_corr.items():
                calls = sorted(calls_by_ext.get(ext, ()), key=time_key)
                for op, call in zip(sorted(ops, key=time_key), calls):
                    launch_of[op.index] = call.index
                    by_ext += 1
        graph_ops = sum(1 for op_i, call_i in launch_of.items() if "GraphLaunch" in self.by_index[call_i].name)
        return launch_of, by_ext, graph_ops

    # ---------------------------------------------------------------- main
    def build(self) -> DeviceGraph:
        """Run every rule of the module docstring once over the trace and return the :class:`DeviceGraph`."""
        launch_of, by_ext, graph_ops = self.link_launches()
        launched: dict[int, list[int]] = defaultdict(list)
        for op in sorted(self.device_ops, key=time_key):
            call_i = launch_of.get(op.index)
            if call_i is not None:
                launched[call_i].append(op.index)
                self.add(self.by_index[call_i], op, "launch")

        # Per-stream execution order, and launch times used by the "launched before" rule.
        streams: dict[tuple[int, int], list[KinetoEvent]] = defaultdict(list)
        for op in self.device_ops:
            streams[(op.device if op.device is not None else -1, op.stream if op.stream is not None else -1)].append(op)
        self.stream_ops: dict[tuple[int, int], list[KinetoEvent]] = {}
        self.stream_launch_ns: dict[tuple[int, int], list[int]] = {}
        for key, ops in streams.items():
            ops.sort(key=time_key)
            for a, b in zip(ops, ops[1:]):
                self.add(a, b, "stream_order")
            self.stream_ops[key] = ops
            # Launch start per op; kept non-decreasing (a stream executes in launch order).
            launch_ns, running = [], None
            for op in ops:
                call_i = launch_of.get(op.index)
                t = self.by_index[call_i].start_ns if call_i is not None else op.start_ns
                running = t if running is None else max(running, t)
                launch_ns.append(running)
            self.stream_launch_ns[key] = launch_ns
        self.launch_of = launch_of

        self.link_syncs()

        stats = DeviceGraphStats(
            device_ops=len(self.device_ops),
            attached=len(launch_of),
            attached_by_external_id=by_ext,
            graph_launch_ops=graph_ops,
            sync_edges=dict(sorted(self.kind_counts.items())),
            unresolved_waits=self.unresolved,
            backward_edges_dropped=self.dropped,
        )
        return DeviceGraph(
            launch_of=launch_of,
            launched={k: tuple(v) for k, v in launched.items()},
            streams={k: tuple(op.index for op in ops) for k, ops in self.stream_ops.items()},
            edges=tuple(self.edges),
            stats=stats,
        )

    # ---------------------------------------------------------------- syncs
    def last_launched_before(self, stream_key: tuple[int, int], t_ns: int) -> KinetoEvent | None:
        """The last op of ``stream_key`` = (device, stream) whose launch call started before ``t_ns`` (ns), or None."""
        pos = bisect.bisect_left(self.stream_launch_ns[stream_key], t_ns)
        return self.stream_ops[stream_key][pos - 1] if pos > 0 else None

    def first_launched_after(self, stream_key: tuple[int, int], t_ns: int) -> KinetoEvent | None:
        """The first op of ``stream_key`` = (device, stream) whose launch call started after ``t_ns`` (ns), or None."""
        pos = bisect.bisect_right(self.stream_launch_ns[stream_key], t_ns)
        ops = self.stream_ops[stream_key]
        return ops[pos] if pos < len(ops) else None

    def streams_numbered(self, stream: int) -> list[tuple[int, int]]:
        """Every (device, stream) key with stream id ``stream`` (CUPTI sync records name the stream, not the device)."""
        return [k for k in self.stream_ops if k[1] == stream]

    def host_wait(
        self, call: KinetoEvent, keys: Iterable[tuple[int, int]], kind: str, *, ended_by_return: bool
    ) -> bool:
        """Edges from the last op launched before ``call`` on each stream of ``keys``; True if any was added.

        With ``ended_by_return`` an op still running after ``call`` returned (``end_ns`` later) gets no edge.
        """
        found = False
        for key in keys:
            op = self.last_launched_before(key, call.start_ns)
            if op is None:
                continue
            if ended_by_return and op.end_ns > call.end_ns:
                continue
            self.add(op, call, kind, host_wait=True)
            found = True
        return found

    def inferred_wait(self, call: KinetoEvent, kind: str) -> bool:
        """Edges from each stream's last op launched before ``call`` that ended while ``call`` was blocking
        (``call.start_ns <= end_ns <= call.end_ns``); True if any was added."""
        found = False
        for key in self.stream_ops:
            op = self.last_launched_before(key, call.start_ns)
            if op is not None and call.start_ns <= op.end_ns <= call.end_ns:
                self.add(op, call, kind, host_wait=True)
                found = True
        return found

    def link_syncs(self) -> None:
        """Add every synchronization edge: first from CUPTI ``cuda_sync`` records (``cuda_sync_kind`` Context Sync,
        Stream Sync, Event Sync, Stream Wait Event), then inferred for runtime sync calls without one; a wait
        whose target cannot be found adds to ``unresolved``."""
        corr_calls = {c.correlation: c for c in self.host_calls if c.correlation is not None}
        handled: set[int] = set()
        # 1. CUPTI synchronization records (exact streams and events).
        for corr, rec in self.sync_records.items():
            call = corr_calls.get(corr)
            if call is None:
                self.unresolved += 1
                continue
            handled.add(call.index)
            kind = rec.args.get("cuda_sync_kind", rec.name)
            if kind == "Context Sync":
                self.host_wait(call, list(self.stream_ops), "device_sync", ended_by_return=False)
            elif kind == "Stream Sync":
                keys = self.streams_numbered(_int(rec.args.get("stream"), -1))
                if not self.host_wait(call, keys, "stream_sync", ended_by_return=False) and not keys:
                    self.unresolved += 1
            elif kind == "Event Sync":
                if not self.event_wait(call, rec):
                    self.unresolved += 1
            elif kind == "Stream Wait Event":
                if not self.stream_wait(call, rec, corr_calls):
                    self.unresolved += 1
        # 2. Runtime calls without a CUPTI record.
        for call in self.host_calls:
            if call.index in handled:
                continue
            name = call.name
            if name in _DEVICE_SYNC:
                self.host_wait(call, list(self.stream_ops), "device_sync", ended_by_return=False)
            elif name in _STREAM_SYNC:
                self.inferred_wait(call, "stream_sync_inferred")
            elif name in _EVENT_SYNC:
                self.inferred_wait(call, "event_sync_inferred")
        self.infer_stream_waits(handled)

    def event_wait(self, call: KinetoEvent, rec: KinetoEvent) -> bool:
        """``Event Sync`` record ``rec`` of ``call``: edges from the last op launched on ``wait_on_stream`` before the
        event's record call, if it ended before ``call`` returned; True if any was added."""
        record = self.record_call(rec)
        stream = _int(rec.args.get("wait_on_stream"), -1)
        if record is None or stream < 0:
            return False
        found = False
        for key in self.streams_numbered(stream):
            op = self.last_launched_before(key, record.start_ns)
            if op is not None and op.end_ns <= call.end_ns:
                self.add(op, call, "event_sync", host_wait=True)
                found = True
        return found

    def record_call(self, rec: KinetoEvent) -> KinetoEvent | None:
        """The ``cudaEventRecord`` call named by ``rec``'s ``wait_on_cuda_event_record_corr_id``, or None."""
        corr = _int(rec.args.get("wait_on_cuda_event_record_corr_id"), -1)
        if corr < 0:
            return None
        for c in self._calls_by_corr().get(corr, ()):
            return c
        return None

    def _calls_by_corr(self) -> dict[int, list[KinetoEvent]]:
        cache = getattr(self, "_corr_cache", None)
        if cache is None:
            cache = defaultdict(list)
            for c in self.host_calls:
                if c.correlation is not None:
                    cache[c.correlation].append(c)
            self._corr_cache = cache
        return cache

    def stream_wait(self, call: KinetoEvent, rec: KinetoEvent, corr_calls: Mapping[int, KinetoEvent]) -> bool:
        """``Stream Wait Event`` record ``rec`` of ``call``: edges from ``wait_on_stream`` to ``stream``; False when the
        record call or a stream is unknown or the record follows the wait, True when both streams are the same."""
        record = self.record_call(rec)
        src_stream = _int(rec.args.get("wait_on_stream"), -1)
        dst_stream = _int(rec.args.get("stream"), -1)
        if record is None or src_stream < 0 or dst_stream < 0 or record.start_ns > call.start_ns:
            return False
        if src_stream == dst_stream:
            return True  # same stream: already ordered
        return self.stream_wait_edges(record, call, src_stream, dst_stream, "stream_wait_event")

    def stream_wait_edges(
        self, record: KinetoEvent, call: KinetoEvent, src_stream: int, dst_stream: int, kind: str
    ) -> bool:
        """Edges from the last op launched on ``src_stream`` before ``record`` to the first op launched on
        ``dst_stream`` (same device) after ``call``; True if any was added."""
        found = False
        for skey in self.streams_numbered(src_stream):
            src = self.last_launched_before(skey, record.start_ns)
            if src is None:
                continue
            for dkey in self.streams_numbered(dst_stream):
                if dkey[0] != skey[0]:
                    continue
                dst = self.first_launched_after(dkey, call.start_ns)
                if dst is not None:
                    self.add(src, dst, kind)
                    found = True
        return found

    def infer_stream_waits(self, handled: set[int]) -> None:
        """``cudaStreamWaitEvent`` without a CUPTI record: infer streams from the thread's launches."""
        waits = [c for c in self.host_calls if c.name in _STREAM_WAIT and c.index not in handled]
        if not waits:
            return
        by_thread: dict[tuple, list[KinetoEvent]] = defaultdict(list)
        for c in self.host_calls:
            by_thread[(c.pid, c.tid)].append(c)
        launched_stream: dict[int, int] = {}
        for op_i, call_i in self.launch_of.items():
            op = self.by_index[op_i]
            if op.stream is not None:
                launched_stream.setdefault(call_i, op.stream)
        for calls in by_thread.values():
            calls.sort(key=time_key)
            last_launch_stream: int | None = None
            last_record: tuple[KinetoEvent, int | None] | None = None
            pending: list[tuple[KinetoEvent, KinetoEvent, int | None]] = []
            for c in calls:
                stream = launched_stream.get(c.index)
                if stream is not None:
                    for wait, record, src_stream in pending:
                        if src_stream is not None and src_stream != stream:
                            if not self.stream_wait_edges(
                                record, wait, src_stream, stream, "stream_wait_event_inferred"
                            ):
                                self.unresolved += 1
                    pending = []
                    last_launch_stream = stream
                elif c.name in _EVENT_RECORD:
                    last_record = (c, last_launch_stream)
                elif c.name in _STREAM_WAIT and c.index not in handled:
                    if last_record is None or last_record[1] is None:
                        self.unresolved += 1
                    else:
                        pending.append((c, last_record[0], last_record[1]))
            self.unresolved += len(pending)


def _int(value: object, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return value


def build_device_graph(trace: KinetoTrace) -> DeviceGraph:
    """Launch attachment, stream order and synchronization edges of one Kineto trace.

    Returns:
        a :class:`DeviceGraph` over Kineto event indices; every edge but the
        host waits (whose ``dst`` is the waiting runtime call) satisfies
        ``time_key(src) < time_key(dst)``.  Raises nothing: what cannot be
        resolved is counted in :class:`DeviceGraphStats`.
    """
    return _Builder(trace).build()
