"""Replay against measurement: predicted vs measured time per rank and per step.

A converted capture carries its measured timeline: every node's ``start_time_ns`` and ``duration_ns`` (the
converter's measured durations), and its iteration markers, ``ProfilerStep#N`` nodes on a host thread with the
measured span of the step in the ``range_duration_ns`` attribute (the converters make markers zero-duration: a step
is a range, not work). :func:`check_replay` replays the set with those durations (compute ``measured``, collectives
``measured``: each member ends the time it measured after the last member entered, or the smallest measured duration
of the members, so time a rank spent waiting for slower ranks inside its collective is not counted twice;
:mod:`.measured_comm`) and compares:

* **per step**: predicted = replayed end of the step's last host node on the
  marker's thread minus the replayed start of the marker; measured = the
  marker's ``range_duration_ns`` (Kineto's ``ProfilerStep#N`` duration);
* **per rank without steps**: predicted = the rank's replayed iteration time;
  measured = the span of the rank's timed nodes (first measured start to last
  measured end).

``error = (predicted - measured) / measured``.  The contributors of a step are
the host nodes whose replayed start moved most relative to the marker,
compared with their measured start (``shift_ns``, positive = later than
measured), i.e. where the replay waited where the run did not, or the reverse.

Errors: :class:`~tracekit.errors.ReplayError` when the set has no
measured durations at all (an ET without Kineto): replaying it would give
0 ns.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.model.attrs import IS_CPU_OP, PG_NAME, TID
from tracekit.errors import ReplayError
from tracekit.fmt import fmt_ms
from tracekit.replayer.results.measured_lacks import lack_notes

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.results.result import ReplayResult
    from tracekit.sets.traceset import TraceSet

__all__ = [
    "Contributor",
    "MeasuredComparison",
    "StepComparison",
    "check_replay",
    "compare",
    "STEP_MARKER",
    "DEFAULT_SPEC",
]

#: Iteration markers written by ``torch.profiler`` (``ProfilerStep#<n>``).
STEP_MARKER = re.compile(r"ProfilerStep#(\d+)$")
#: Measured replays do not depend on the hardware spec's rates; any preset fits.
DEFAULT_SPEC = "dgx-h100"
TOP_CONTRIBUTORS = 5


@dataclass(frozen=True)
class Contributor:
    """A node whose replayed start moved against its measured start (ns, + = later than measured)."""

    node_id: int
    name: str
    shift_ns: float


@dataclass(frozen=True)
class StepComparison:
    """One rank's step (or whole trace when ``step`` is None), predicted vs measured.

    Attributes:
        rank, step: the rank and ``N`` of ``ProfilerStep#N`` (None: the whole trace).
        measured_ns, predicted_ns: ns.
        source: where the measured value comes from.
        contributors: the largest replay-vs-measured start shifts inside the step.
    """

    rank: int
    step: int | None
    measured_ns: float
    predicted_ns: float
    source: str
    contributors: tuple[Contributor, ...] = ()
    replay_start_ns: float = field(default=math.nan, compare=False)
    replay_end_ns: float = field(default=math.nan, compare=False)

    @property
    def error(self) -> float:
        """Relative error ``(predicted - measured) / measured`` (NaN when nothing was measured)."""
        return (self.predicted_ns - self.measured_ns) / self.measured_ns if self.measured_ns > 0 else math.nan

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON-ready values: ``measured_ns``/``predicted_ns`` (ns), relative ``error``, contributors' ``shift_ns`` (ns)."""
        return {
            "rank": self.rank,
            "step": self.step,
            "measured_ns": self.measured_ns,
            "predicted_ns": self.predicted_ns,
            "error": self.error,
            "source": self.source,
            "contributors": [{"node_id": c.node_id, "name": c.name, "shift_ns": c.shift_ns} for c in self.contributors],
        }


@dataclass(frozen=True)
class MeasuredComparison:
    """The calibration report: every rank's steps, plus the notes the replay needs to state."""

    rows: tuple[StepComparison, ...]
    notes: tuple[str, ...] = ()
    result: Any = field(default=None, compare=False, repr=False)
    overlap: tuple[Any, ...] = ()  #: per rank :class:`~tracekit.replayer.results.overlap.RankOverlap`

    @property
    def worst_error(self) -> float:
        """Largest absolute relative error over the rows (NaN when no row has a measurement)."""
        errs = [abs(r.error) for r in self.rows if not math.isnan(r.error)]
        return max(errs) if errs else math.nan

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values: rows (see :meth:`StepComparison.to_dict`), notes, ``worst_error``, per
        rank ``overlap`` (:meth:`~tracekit.replayer.results.overlap.RankOverlap.to_dict`)."""
        rows, overlap = [r.to_dict() for r in self.rows], [o.to_dict() for o in self.overlap]
        return {"rows": rows, "notes": list(self.notes), "worst_error": self.worst_error, "overlap": overlap}


def check_replay(traceset: "TraceSet", spec: Any = DEFAULT_SPEC, *, fold: bool = False) -> MeasuredComparison:
    """Replay ``traceset`` with its measured durations and compare with the measurement.

    Raises:
        ReplayError: no node of the set has a measured duration.
        plus the errors of :func:`tracekit.replayer.replay`.
    """
    from tracekit.replayer import ReplayOptions, replay
    from tracekit.replayer.results.overlap import rank_overlap, spec_slowdown, with_job_row

    notes, s_c = list(measured_notes(traceset)), spec_slowdown(spec)[1]
    world = _job_world(traceset)
    missing = tuple(r for r in range(world) if r not in traceset.ranks)
    if missing:
        rows: list[StepComparison] = []
        notes.append(
            f"partial job: {len(traceset)} of {world} ranks present (missing "
            f"{_ranks_text(missing)}); each present rank is replayed alone, its communication nodes "
            f"as compute with their measured durations (waiting for the absent ranks included)"
        )
        result, alone_overlap = None, []
        for rank in traceset.ranks:
            alone = local_rank(traceset[rank])
            result = replay(alone, spec, options=ReplayOptions(collective_model="measured", fold=False))
            mine = [replace(row, rank=rank) for row in compare(alone, result).rows]
            rows.extend(mine)
            notes.extend(_empty_step_notes(traceset[rank], rank) + lack_notes(traceset, mine))
            alone_overlap.append(rank_overlap(traceset[rank], rank, (result.schedule or (None,))[0], s_c))
        return MeasuredComparison(tuple(rows), tuple(notes), result, with_job_row(alone_overlap))
    traceset, offset_ns = with_start_offsets(traceset)
    if offset_ns:
        notes.append(
            f"ranks start their first step at its measured offsets (up to {fmt_ms(offset_ns)} "
            f"after the first rank; one host clock assumed), as in the run"
        )
    result = replay(traceset, spec, options=ReplayOptions(collective_model="measured", fold=fold))
    comparison = compare(traceset, result)
    sched = {s.rank: s for s in result.schedule or ()}
    overlap = with_job_row([rank_overlap(traceset[r], r, sched.get(r), s_c) for r in traceset.ranks])
    return MeasuredComparison(comparison.rows, tuple(notes) + comparison.notes, result, overlap)


def with_start_offsets(traceset: "TraceSet") -> tuple["TraceSet", int]:
    """The set with each rank's first step delayed by its measured offset from the earliest rank.

    A rank that entered the step later in the run enters it later in the replay: a node
    ``[measured start offset]`` of that duration (ns) on the marker's thread, on which the marker
    depends.  Offsets are used only when every rank has a first marker and the largest offset is shorter
    than the shortest first step (otherwise the clocks are not comparable and nothing changes).

    Returns:
        (the set, the largest offset in ns; 0 when nothing was added).
    """
    from tracekit.model import Attr, ExecutionTrace, Node, NodeType
    from tracekit.sets.traceset import TraceSet

    if len(traceset) < 2:
        return traceset, 0
    first: dict[int, Any] = {}
    for rank in traceset.ranks:
        for n in traceset[rank].nodes:
            if STEP_MARKER.match(n.name) and n.get_attr("range_duration_ns") is not None:
                if rank not in first or n.start_time_ns < first[rank].start_time_ns:
                    first[rank] = n
    if len(first) != len(traceset):
        return traceset, 0
    t0 = min(n.start_time_ns for n in first.values())
    offsets = {r: n.start_time_ns - t0 for r, n in first.items()}
    largest = max(offsets.values())
    if largest <= 0 or largest >= min(int(n.get_attr("range_duration_ns")) for n in first.values()):
        return traceset, 0
    traces = {}
    for rank in traceset.ranks:
        trace, marker, off = traceset[rank], first[rank], offsets[rank]
        if off <= 0:
            traces[rank] = trace
            continue
        nid = max(n.id for n in trace.nodes) + 1
        pad = Node(
            id=nid,
            name="[measured start offset]",
            type=NodeType.COMP_NODE,
            start_time_ns=marker.start_time_ns - off,
            duration_ns=off,
            attrs=[Attr(IS_CPU_OP, True, "bool_val"), Attr(TID, TID.of(marker) or 0)],
        )
        nodes = []
        for n in trace.nodes:
            if n.id == marker.id:
                nodes.append(pad)
                n = Node(
                    id=n.id,
                    name=n.name,
                    type=n.type,
                    ctrl_deps=list(n.ctrl_deps),
                    data_deps=list(n.data_deps) + [nid],
                    start_time_ns=n.start_time_ns,
                    duration_ns=n.duration_ns,
                    inputs=n.inputs,
                    outputs=n.outputs,
                    attrs=list(n.attrs),
                )
            nodes.append(n)
        traces[rank] = ExecutionTrace(nodes, trace.metadata, rank=rank, path=trace.path)
    return TraceSet(traces), largest


def _ranks_text(ranks: tuple[int, ...]) -> str:
    shown = ", ".join(str(r) for r in ranks[:8])
    return shown + (f" ... ({len(ranks)} ranks)" if len(ranks) > 8 else "")


def _job_world(traceset: "TraceSet") -> int:
    """The job's ranks: the set's world size, or more when a rank's ``process_group:init`` gives its default
    (all-ranks) group more (``group_size``, as PyTorch writes it: rank 0 of a 16-rank capture says 16)."""
    from tracekit.model.groups import default_group_size

    declared = max((default_group_size(traceset[r]) or 0 for r in traceset.ranks), default=0)
    return max(traceset.world_size, declared)


def local_rank(trace: Any) -> "TraceSet":
    """One rank of a partial job as a 1-rank set: COMM nodes become compute nodes of their measured duration.

    The rank is renumbered 0; process-group declarations are dropped (no peer is present).
    """
    from tracekit.model import Attr, ExecutionTrace, Node, NodeType
    from tracekit.sets.traceset import TraceSet

    nodes = []
    for n in trace.nodes:
        if n.type == NodeType.METADATA_NODE and "process_group" in n.name:
            continue
        if n.type.name.startswith("COMM"):
            keep = [a for a in n.attrs if not a.name.startswith("comm_") and a.name not in (PG_NAME, IS_CPU_OP)]
            n = Node(
                id=n.id,
                name=n.name,
                type=NodeType.COMP_NODE,
                ctrl_deps=list(n.ctrl_deps),
                data_deps=list(n.data_deps),
                start_time_ns=n.start_time_ns,
                duration_ns=n.duration_ns,
                inputs=n.inputs,
                outputs=n.outputs,
                attrs=keep + [Attr(IS_CPU_OP, False, "bool_val"), Attr("measured_comm", True, "bool_val")],
            )
        nodes.append(n)
    kept = {n.id for n in nodes}
    nodes = [
        n.replace(data_deps=[d for d in n.data_deps if d in kept], ctrl_deps=[d for d in n.ctrl_deps if d in kept])
        if any(d not in kept for d in n.data_deps) or any(d not in kept for d in n.ctrl_deps)
        else n
        for n in nodes
    ]
    return TraceSet({0: ExecutionTrace(nodes, trace.metadata, rank=0, path=trace.path)})


def measured_notes(traceset: "TraceSet") -> list[str]:
    """What the measured replay must say up front (missing timing, waits inside collectives).

    Raises:
        ReplayError: no node has a measured duration.
    """
    notes: list[str] = []
    timed = comm = 0
    for rank in traceset.ranks:
        for n in traceset[rank].nodes:
            if n.duration_ns > 0:
                timed += 1
                if n.type.name.startswith("COMM"):
                    comm += 1
    if timed == 0:
        raise ReplayError(
            "no measured durations: every node of the trace set has duration 0 (an Execution Trace converted "
            "without its Kineto trace records no times); convert with --kineto, or time compute from FLOPs and "
            "bytes (num_ops/tensor_size) with `tracekit replay --compute roofline`"
        )
    if comm:
        notes.append(
            f"{comm} communication node(s) carry measured durations that include any time a rank "
            f"waited for slower ranks; each member of a collective is replayed with the time it measured "
            f"after the last member arrived (one host clock; else the smallest measured duration of the "
            f"members), so that waiting is not counted twice"
        )
    return notes


def compare(traceset: "TraceSet", result: "ReplayResult") -> MeasuredComparison:
    """Compare a replay (with its schedule) of ``traceset`` against the nodes' measured times.

    Raises:
        ValueError: ``result`` has no schedule (e.g. one read from JSON written without ``include_schedule``).
        ReplayError: a rank of ``traceset`` with a schedule has no statistics in ``result``.
    """
    if result.schedule is None:
        raise ValueError("the replay result has no schedule")
    rows: list[StepComparison] = []
    notes: list[str] = []
    by_rank = {s.rank: s for s in result.schedule}
    for rank in traceset.ranks:
        sched = by_rank.get(rank)
        if sched is None:
            continue
        trace = traceset[rank]
        start = dict(zip(sched.node_ids.tolist(), sched.start_ns.tolist()))
        end = dict(zip(sched.node_ids.tolist(), sched.end_ns.tolist()))
        steps = _step_rows(trace, rank, start, end)
        rows.extend(steps or [_whole_row(trace, rank, result.rank(rank).iteration_time_ns)])
        notes.extend(_empty_step_notes(trace, rank))
    rows.extend(_job_rows(traceset, rows))
    notes.extend(lack_notes(traceset, rows))  # rows outside 5 %: what the file lacks (measured_lacks)
    return MeasuredComparison(tuple(rows), tuple(_waiting_notes(traceset, result) + notes), result)


def _empty_step_notes(trace: Any, rank: int) -> list[str]:
    """One note per ProfilerStep whose thread holds no timed host operator (ranges excluded) inside it.

    Such a step replays to 0 ns; the note says so and counts the nodes that ran inside the range on other
    threads or streams, with the sum of their measured durations (ns) against the step's.
    """
    out = []
    for marker in trace.nodes:
        m = STEP_MARKER.match(marker.name)
        dur = marker.get_attr("range_duration_ns")
        if not m or dur is None:
            continue
        t0, t1, tid = marker.start_time_ns, marker.start_time_ns + int(dur), TID.of(marker)
        inside = [n for n in trace.nodes if n.id != marker.id and t0 <= n.start_time_ns < t1]
        if any(n.is_cpu_op is True and TID.of(n) == tid and (n.duration_ns or 0) > 0 for n in inside):
            continue
        work_ns = sum(n.duration_ns or 0 for n in inside)
        out.append(
            f"rank {rank} ProfilerStep#{m.group(1)} ({fmt_ms(int(dur))} on thread {tid}): no timed "
            f"host operator on its thread inside the step, so it replays to 0; {len(inside)} node(s) on other "
            f"threads/streams start inside it, {fmt_ms(work_ns)} of measured work in all"
        )
    return out


def _waiting_notes(traceset: "TraceSet", result: "ReplayResult") -> list[str]:
    """Per rank: how much of its measured collective time exceeds the replayed transfer (waiting for others).

    For each replayed collective, a member's waiting is ``max(0, measured duration - replayed transfer
    time)`` (ns); the replay counts the transfer once and lets arrival order produce the rest.
    """
    durations = {
        rank: {n.id: n.duration_ns for n in traceset[rank].nodes if n.type.name.startswith("COMM")}
        for rank in traceset.ranks
    }
    waited: dict[int, float] = {}
    count: dict[int, int] = {}
    for row in result.collectives:
        for rank, nid in zip(row.ranks, row.node_ids):
            d = durations.get(rank, {}).get(nid)
            if d is not None and d > row.time_ns:
                waited[rank] = waited.get(rank, 0.0) + d - row.time_ns
                count[rank] = count.get(rank, 0) + 1
    out = []
    for rank in sorted(waited):
        if waited[rank] >= 1e6:
            out.append(
                f"rank {rank}: {fmt_ms(waited[rank])} of its measured time in {count[rank]} "
                f"collective(s) is waiting for slower ranks (beyond the replayed transfer), counted once "
                f"through arrival order, not as transfer time"
            )
    return out


def _job_rows(traceset: "TraceSet", rows: list[StepComparison]) -> list[StepComparison]:
    """Per step of a multi-rank job: measured from the last rank's step start to the last rank's step end.

    On one host clock (ranks of one machine) the job's step is ``max(end) - max(start)`` over ranks, measured
    and replayed alike.  Row rank is -1.
    """
    if len(traceset) < 2:
        return []
    spans: dict[int, list[tuple[int, int]]] = {}
    for rank in traceset.ranks:
        for n in traceset[rank].nodes:
            m = STEP_MARKER.match(n.name)
            if m and n.get_attr("range_duration_ns") is not None:
                spans.setdefault(int(m.group(1)), []).append(
                    (n.start_time_ns, n.start_time_ns + int(n.get_attr("range_duration_ns")))
                )
    out = []
    for step, got in sorted(spans.items()):
        mine = [r for r in rows if r.step == step]
        if len(got) != len(traceset) or not mine:
            continue
        measured = max(e for _, e in got) - max(s for s, _ in got)
        predicted = max(r.replay_end_ns for r in mine) - max(r.replay_start_ns for r in mine)
        out.append(
            StepComparison(
                -1,
                step,
                float(measured),
                float(predicted),
                f"job: last rank's ProfilerStep#{step} start to last rank's end (one host clock)",
            )
        )
    return out


def _whole_row(trace: Any, rank: int, predicted_ns: float) -> StepComparison:
    lo = hi = None
    for n in trace.nodes:
        if n.duration_ns > 0 and n.start_time_ns > 0:
            lo = n.start_time_ns if lo is None else min(lo, n.start_time_ns)
            e = n.start_time_ns + n.duration_ns
            hi = e if hi is None else max(hi, e)
    measured = float(hi - lo) if lo is not None else 0.0
    return StepComparison(
        rank, None, measured, float(predicted_ns), "span of the measured node times (no ProfilerStep marker)"
    )


def _step_rows(trace: Any, rank: int, start: dict, end: dict) -> list[StepComparison]:
    markers = []
    for n in trace.nodes:
        m = STEP_MARKER.match(n.name)
        if m and n.get_attr("range_duration_ns") is not None and n.id in start:
            markers.append((n, int(m.group(1))))
    if not markers:
        return []
    host_by_tid: dict[Any, list[Any]] = {}
    for n in trace.nodes:
        if n.is_cpu_op is True and n.id in start and not math.isnan(start[n.id]):
            host_by_tid.setdefault(TID.of(n), []).append(n)
    rows = []
    for marker, step in markers:
        t0 = marker.start_time_ns
        t1 = t0 + int(marker.get_attr("range_duration_ns"))
        members = [n for n in host_by_tid.get(TID.of(marker), ()) if t0 <= n.start_time_ns < t1 and n.id != marker.id]
        r0 = start[marker.id]
        r1 = max([end[n.id] for n in members], default=r0)
        shifts = [((start[n.id] - r0) - (n.start_time_ns - t0), n) for n in members]
        moved = [Contributor(n.id, n.name, s) for s, n in _deltas(shifts)]
        rows.append(
            StepComparison(
                rank,
                step,
                float(t1 - t0),
                float(r1 - r0),
                f"Kineto ProfilerStep#{step} duration (rank {rank})",
                tuple(moved),
                float(r0),
                float(r1),
            )
        )
    return rows


def _deltas(shifts: list[tuple[float, Any]]) -> list[tuple[float, Any]]:
    """The nodes where the start shift changed most against the previous node in measured order."""
    ordered = sorted(shifts, key=lambda sn: (sn[1].start_time_ns, sn[1].id))
    out = []
    prev = 0.0
    for s, n in ordered:
        out.append((s - prev, n))
        prev = s
    out.sort(key=lambda sn: (-abs(sn[0]), sn[1].id))
    return out[:TOP_CONTRIBUTORS]


def step_table(comparison: MeasuredComparison) -> np.ndarray:
    """Errors of every row as a float64 array (for tests and summaries)."""
    return np.asarray([r.error for r in comparison.rows], dtype=np.float64)
