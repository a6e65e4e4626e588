"""What a measured run did: time by kernel class, compute/communication overlap, idle per stream, launch overhead.

The measured counterpart of a replay's breakdown (``tracekit analyze``), read
from the Kineto (PyTorch profiler) trace of each rank, in the spirit of Holistic
Trace Analysis' temporal breakdown, overlap, idle-time and kernel-launch views.

Per rank, the *work* analysed is:

- with GPU activity: the device events (kernels, memcpy, memset), one stream
  per (device, stream);
- without (a CPU-only run, e.g. gloo): the CPU ops (``cpu_op``) plus the
  communication annotations of worker threads (``gloo:*``/``nccl:*``), each
  counted for its *self time* (the time it is the innermost running op of
  its thread, :func:`self_segments`), so nested ops are not counted twice;
  one "stream" per thread.

Each event gets a class (:func:`tracekit.costs.kernels.kernel_class`: gemm,
attention, comm, memory, other); time by class and per kernel name sums the
(self) time of its events, but for comm, whose time by class is ``comm_ns``
(one communication is often timed on two threads or streams at once).  Over the rank's *window* (first start to last
end of its work), with ``|U|`` the length of a union of intervals:

- ``compute_ns = |U non-comm work|``; ``comm_ns = |U comm work|``;
- ``overlap_ns = compute_ns + comm_ns - |U all work|`` (communication hidden
  behind compute);
- ``exposed_comm_ns = |U all| - compute_ns``; ``other_idle_ns = window - |U all|``;
  ``compute_ns + exposed_comm_ns + other_idle_ns = window_ns`` exactly, the
  categories of a replay's per-rank breakdown (a measured trace cannot tell
  waiting for peers from transferring: both are in exposed communication);
- per stream: busy ``|U its work|`` and idle ``window - busy``;
- launch overhead (GPU runs): each device event whose ``correlation`` matches a
  CUDA runtime launch call (``cudaLaunchKernel``, ``cuLaunchKernel``,
  ``cudaMemcpyAsync``, ``cudaMemsetAsync``, ...): the call's CPU time and the
  launch delay = device start - call end (HTA's definition, "cuda kernel
  launch stats" in its documentation).

All times are integer ns (Kineto microseconds converted exactly by
:mod:`.kineto_reader`).  Errors: as :func:`.kineto_reader.read_kineto`.

A converted trace set (``.et`` files with measured ``start_time_ns`` and
``duration_ns``) is analysed the same way (:func:`analyze_traceset`): kernels
are the nodes with a ``stream`` that are not CPU ops, host ops the others,
communication nodes are ``comm``; the launch calls are not in a Chakra trace,
so there is no launch overhead.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable, Sequence

from tracekit.costs.kernels import CLASSES, kernel_class

from tracekit.converters.pytorch.kineto_memory import MemoryPeak, memory_peaks, peaks_from_metadata
from tracekit.converters.pytorch.kineto_reader import KinetoEvent, KinetoTrace, read_kineto

_LAUNCH = re.compile(
    r"^(cuda|cu|hip)(LaunchKernel|LaunchCooperativeKernel|GraphLaunch|Memcpy\w*Async|"
    r"Memset\w*Async)",
    re.I,
)
_COMM_ANNOTATION = re.compile(r"^(gloo|nccl):", re.I)
_COMM_OP = "chakra_comm"  # a Chakra COMM node on the host, as an event of this module (analyze_traceset)


@dataclass(frozen=True)
class StreamIdle:
    """One stream (GPU) or thread (CPU-only run) of a rank: ``name``, events, busy and idle ns."""

    name: str
    events: int
    busy_ns: int
    idle_ns: int


@dataclass(frozen=True)
class KernelStat:
    """One kernel (or op) name: class, count, total and mean (self) time, ns."""

    name: str
    kernel_class: str
    count: int
    total_ns: int

    @property
    def mean_ns(self) -> float:
        """Mean (self) time per event, ns: ``total_ns / count`` (0.0 for no events)."""
        return self.total_ns / self.count if self.count else 0.0


@dataclass(frozen=True)
class LaunchStats:
    """CUDA launch calls matched to device work: count, summed CPU time, launch delays (ns)."""

    launches: int
    cpu_ns: int
    delay_total_ns: int
    delay_max_ns: int

    @property
    def delay_mean_ns(self) -> float:
        """Mean launch delay (device start - call end, HTA's definition), ns: ``delay_total_ns / launches``."""
        return self.delay_total_ns / self.launches if self.launches else 0.0


@dataclass(frozen=True)
class RankAnalysis:
    """One rank's measured breakdown (see module doc); times ns."""

    rank: int
    path: str | None
    device: bool
    window_ns: int
    events: int
    time_by_class_ns: tuple[tuple[str, int], ...]
    compute_ns: int
    comm_ns: int
    overlap_ns: int
    exposed_comm_ns: int
    other_idle_ns: int
    streams: tuple[StreamIdle, ...]
    launch: LaunchStats | None
    top_kernels: tuple[KernelStat, ...]
    memory: tuple[MemoryPeak, ...] = ()  # measured peak per device ([memory] events; .kineto_memory)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: the fields (times in ns), ``time_by_class_ns`` as a dict, derived means added."""
        out = asdict(self)
        out["time_by_class_ns"] = dict(self.time_by_class_ns)
        out["launch"] = (
            None if self.launch is None else {**asdict(self.launch), "delay_mean_ns": self.launch.delay_mean_ns}
        )
        out["top_kernels"] = [{**asdict(k), "mean_ns": k.mean_ns} for k in self.top_kernels]
        return out


@dataclass(frozen=True)
class MeasuredAnalysis:
    """Every rank's :class:`RankAnalysis`, by rank."""

    ranks: tuple[RankAnalysis, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON document ``tracekit.measured_analysis`` version 1: one :meth:`RankAnalysis.to_dict` per rank."""
        return {"format": "tracekit.measured_analysis", "format_version": 1, "ranks": [r.to_dict() for r in self.ranks]}


def union_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """Total length covered by ``[start, end)`` intervals (ns in, ns out; overlaps counted once)."""
    total, reach = 0, None
    for s, e in sorted(intervals):
        if reach is None or s > reach:
            total += e - s
            reach = e
        elif e > reach:
            total += e - reach
            reach = e
    return total


Segment = tuple[int, int, KinetoEvent]


def self_segments(events: Sequence[KinetoEvent]) -> list[Segment]:
    """Each thread's busy time as disjoint ``(start_ns, end_ns, event)`` pieces, each owned by the innermost event
    running then: the one that started last (the shorter on equal starts).  An event's self time is the sum
    of its pieces; for properly nested ops it is its duration minus its children's, and an op that outlives
    the one it started in keeps the time after that one ended.  Pieces of one thread sum to its busy time."""
    import heapq

    by_thread: dict[tuple[Any, Any], list[KinetoEvent]] = {}
    for e in events:
        by_thread.setdefault((e.pid, e.tid), []).append(e)
    out: list[Segment] = []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e.start_ns, e.index))
        points = sorted({e.start_ns for e in evs} | {e.end_ns for e in evs})
        heap: list[tuple[int, int, int, KinetoEvent]] = []
        k = 0
        for a, b in zip(points, points[1:]):
            while k < len(evs) and evs[k].start_ns <= a:
                e = evs[k]
                heapq.heappush(heap, (-e.start_ns, e.duration_ns, e.index, e))
                k += 1
            while heap and heap[0][3].end_ns <= a:
                heapq.heappop(heap)
            if not heap:
                continue
            owner = heap[0][3]
            if out and out[-1][2] is owner and out[-1][1] == a:
                out[-1] = (out[-1][0], b, owner)
            else:
                out.append((a, b, owner))
    return out


def _work(trace: KinetoTrace) -> tuple[bool, list[KinetoEvent], list[Segment]]:
    device = [e for e in trace.events if e.is_device]
    if device:
        return True, device, [(e.start_ns, e.end_ns, e) for e in device]
    work = [
        e
        for e in trace.events
        if e.category in ("cpu_op", _COMM_OP) or (e.category == "user_annotation" and _COMM_ANNOTATION.match(e.name))
    ]
    return False, work, self_segments(work)


def _stream_name(e: KinetoEvent, device: bool) -> str:
    return f"device {e.device} stream {e.stream}" if device else f"thread {e.tid}"


def _launch_stats(trace: KinetoTrace, work: list[KinetoEvent]) -> LaunchStats:
    by_corr = {e.correlation: e for e in work if e.correlation is not None}
    n = cpu = delay_total = delay_max = 0
    for r in trace.events:
        if r.category != "cuda_runtime" or r.correlation is None or not _LAUNCH.match(r.name):
            continue
        k = by_corr.get(r.correlation)
        if k is None:
            continue
        n += 1
        cpu += r.duration_ns
        delay = k.start_ns - r.end_ns
        delay_total += delay
        delay_max = max(delay_max, delay)
    return LaunchStats(n, cpu, delay_total, delay_max)


def analyze_trace(trace: KinetoTrace, *, rank: int | None = None, top: int = 10) -> RankAnalysis:
    """The :class:`RankAnalysis` of one parsed Kineto trace (``top``: kernels listed, by total time).

    ``rank`` defaults to the trace's ``distributedInfo.rank``, else 0.  All results are in ns; raises nothing.
    """
    device, work, segments = _work(trace)
    rank = rank if rank is not None else (trace.rank if trace.rank is not None else 0)
    cls_of = {e.index: "comm" if e.category == _COMM_OP else kernel_class(e.name, e.category) for e in work}
    by_class = dict.fromkeys(CLASSES, 0)
    stats: dict[str, list] = {}
    for e in work:
        s = stats.setdefault(e.name, [cls_of[e.index], 0, 0])
        s[1] += 1
    for lo_ns, hi_ns, e in segments:
        by_class[cls_of[e.index]] += hi_ns - lo_ns
        stats[e.name][2] += hi_ns - lo_ns
    window = max(e.end_ns for e in work) - min(e.start_ns for e in work) if work else 0
    compute = union_ns((a, b) for a, b, e in segments if cls_of[e.index] != "comm")
    comm = union_ns((a, b) for a, b, e in segments if cls_of[e.index] == "comm")
    busy = union_ns((a, b) for a, b, _ in segments)
    # one communication is timed on several threads or streams at once (a CPU run: the c10d op on the main
    # thread and gloo's work on its worker; each its own self time): comm's time is their union, as comm_ns
    # (the sum counted gloo comm twice: 98.7 vs 60.6 ms on rank 1 of the bundled 2-rank capture)
    by_class["comm"] = comm
    per_stream: dict[str, list[KinetoEvent]] = {}
    for e in work:
        per_stream.setdefault(_stream_name(e, device), []).append(e)
    streams = []
    for name in sorted(per_stream):
        b = union_ns((e.start_ns, e.end_ns) for e in per_stream[name])
        streams.append(StreamIdle(name, len(per_stream[name]), b, window - b))
    top_kernels = sorted(
        (KernelStat(n, c, k, t) for n, (c, k, t) in stats.items()), key=lambda s: (-s.total_ns, s.name)
    )[:top]
    return RankAnalysis(
        rank=rank,
        path=trace.path,
        device=device,
        window_ns=window,
        events=len(work),
        time_by_class_ns=tuple(by_class.items()),
        compute_ns=compute,
        comm_ns=comm,
        overlap_ns=compute + comm - busy,
        exposed_comm_ns=busy - compute,
        other_idle_ns=window - busy,
        streams=tuple(streams),
        launch=_launch_stats(trace, work) if device and _has_runtime(trace) else None,
        top_kernels=tuple(top_kernels),
        memory=memory_peaks(trace.memory_events, trace.of_category("cpu_op"), trace.memory_baseline),
    )


def _has_runtime(trace: KinetoTrace) -> bool:
    return any(e.category == "cuda_runtime" for e in trace.events)


def analyze_kineto_files(paths: Sequence[str], *, top: int = 10) -> MeasuredAnalysis:
    """Analyse one Kineto file per rank (rank from ``distributedInfo``, else the file's position).

    Raises:
        TraceFormatError: a file is unreadable or not a Kineto trace (see :func:`.kineto_reader.read_kineto`),
            or two files claim the same rank (names both).
    """
    from tracekit.errors import TraceFormatError

    out: dict[int, RankAnalysis] = {}
    for i, path in enumerate(paths):
        trace = read_kineto(path)
        rank = trace.rank if trace.rank is not None else i
        if rank in out:
            raise TraceFormatError(f"two Kineto files for rank {rank}: {out[rank].path} and {path}", path=path)
        out[rank] = analyze_trace(trace, rank=rank, top=top)
    if not any(r.events for r in out.values()):
        raise TraceFormatError(
            f"nothing to analyze: no kernel, CPU op or communication event with a duration in "
            f"{'the file' if len(paths) == 1 else f'the {len(paths)} files'}",
            path=paths[0] if len(paths) == 1 else None,
        )
    return MeasuredAnalysis(tuple(out[r] for r in sorted(out)))


def trace_events(trace: Any) -> KinetoTrace:
    """One rank of a Chakra trace set as the events this module analyses (nodes with a measured duration).

    Kernels: nodes that are not CPU ops and have a ``stream`` (device 0, that stream); communication nodes
    without a stream: host events of class ``comm``; other nodes: host ops on their ``tid`` thread
    (:data:`tracekit.model.attrs.TID`, integer rule; 0 when absent).
    Times stay the nodes' ns.

    Raises:
        TraceFormatError: a trace read lazily from a file whose nodes fail to decode (on first use).
    """
    from tracekit.model.attrs import TID
    from tracekit.model import COMM_TYPES, NodeType

    events = []
    for i, n in enumerate(trace.nodes):
        if n.duration_ns <= 0 or n.type == NodeType.METADATA_NODE:
            continue
        stream = n.stream
        if stream is not None and not n.is_cpu_op:
            events.append(
                KinetoEvent(
                    i, "kernel", n.name, 0, stream, n.start_time_ns, n.duration_ns, args={"stream": stream, "device": 0}
                )
            )
        else:
            category = _COMM_OP if n.type in COMM_TYPES else "cpu_op"
            events.append(KinetoEvent(i, category, n.name, "host", TID.of(n) or 0, n.start_time_ns, n.duration_ns))
    return KinetoTrace(path=getattr(trace, "path", None), events=tuple(events), rank=trace.rank)


def analyze_traceset(traceset: Any, *, top: int = 10) -> MeasuredAnalysis:
    """:class:`MeasuredAnalysis` of a converted trace set's own measured timing (see module doc).

    Raises:
        TraceFormatError: a trace read lazily from a file whose nodes fail to decode (on first use), or no node
            of any rank has a measured duration (nothing to analyze; names the node counts, no path: the caller
            knows the set's name).
    """
    import numpy as np

    from tracekit.errors import TraceFormatError
    from tracekit.model import NodeType

    analysis = MeasuredAnalysis(
        tuple(
            replace(
                analyze_trace(trace_events(traceset[r]), rank=r, top=top),
                memory=peaks_from_metadata(traceset[r].metadata),
            )
            for r in traceset.ranks
        )
    )
    if any(r.events for r in analysis.ranks):
        return analysis
    types = [np.asarray(traceset[r].columns().types) for r in traceset.ranks]
    nodes, comp = sum(len(t) for t in types), sum(int((t == NodeType.COMP_NODE).sum()) for t in types)
    raise TraceFormatError(
        f"nothing to analyze: none of the {nodes:,} nodes of the {len(types)} rank(s) has a measured duration "
        f"({comp:,} compute nodes); analyze reads the measured times of a converted capture; "
        f"tracekit replay times a trace without them"
    )


__all__ = [
    "KernelStat",
    "LaunchStats",
    "MeasuredAnalysis",
    "RankAnalysis",
    "StreamIdle",
    "analyze_kineto_files",
    "analyze_trace",
    "analyze_traceset",
    "self_segments",
    "trace_events",
    "union_ns",
]
