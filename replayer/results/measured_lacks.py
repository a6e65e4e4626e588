"""What a capture lacks that its measured replay needed (issue 27): one note per row outside 5 %.

A measured replay reproduces what the file recorded.  When a row misses its measured time by more than
:data:`LACK_THRESHOLD`, :func:`lack_notes` says, for that rank and step, which of these the file shows:

* **unrecorded time**: parts of the measured window that no node covers (no event on any host thread,
  stream or collective: the program ran something the profiler did not record, e.g. Python without
  operators, a sleep, an uninstrumented library); the union of the nodes' measured ``[start, start +
  duration)`` is subtracted from the window;
* **no step marker**: no ``ProfilerStep#N`` range, so the measured value is the span of the nodes and
  host time between operators outside any range is idle by the host rule (:mod:`...converters.pytorch.host_timing`
  is not imported here; the rule is stated in docs);
* **unlaunched device ops**: device nodes with no launching host node (``ctrl_deps`` empty: Kineto flows
  or correlation ids missing), which start in the replay as soon as their stream allows.

Pure function of the trace set and the rows; raises nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from tracekit.fmt import fmt_ms

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.sets.traceset import TraceSet

#: rows whose |error| is above this get a note.
LACK_THRESHOLD = 0.05


def _uncovered_ns(intervals: list[tuple[int, int]], lo: int, hi: int) -> int:
    covered, cursor = 0, lo
    for s, e in sorted(intervals):
        s, e = max(s, cursor), min(e, hi)
        if e > s:
            covered += e - s
            cursor = e
    return (hi - lo) - covered


def lack_notes(traceset: "TraceSet", rows: Sequence[Any]) -> list[str]:
    """One note per row (rank >= 0) with ``|error| > LACK_THRESHOLD``: what its window lacks (module doc).

    Args:
        traceset: the replayed set (measured times on its nodes).
        rows: :class:`~.measured.StepComparison` rows (``rank``, ``step``, ``measured_ns``, ``error``).
    """
    out = []
    for row in rows:
        if row.rank < 0 or row.rank not in traceset.ranks or row.measured_ns <= 0:
            continue
        if abs(row.error) <= LACK_THRESHOLD:
            continue
        trace = traceset[row.rank]
        timed = [(n.start_time_ns, n.start_time_ns + n.duration_ns) for n in trace.nodes if n.start_time_ns > 0]
        window = _window(trace, row.step, timed)
        if window is None:
            continue
        lo, hi = window
        lacks = []
        gap = _uncovered_ns([iv for iv in timed if iv[1] > iv[0]], lo, hi)
        if gap > 0:
            lacks.append(f"{fmt_ms(gap)} of it covered by no recorded event (unrecorded time)")
        if row.step is None:
            lacks.append("no ProfilerStep range (host time between operators outside ranges is idle)")
        unlaunched = sum(
            1 for n in trace.nodes if n.is_cpu_op is False and n.type.name == "COMP_NODE" and not n.ctrl_deps
        )
        if unlaunched:
            lacks.append(f"{unlaunched} device op(s) without a launching host op (flows missing)")
        if lacks:
            step = f"step {row.step}" if row.step is not None else "whole trace"
            out.append(
                f"rank {row.rank} {step}: {100 * row.error:+.1f} % against {fmt_ms(row.measured_ns)} measured; "
                f"the file lacks what the replay needed: {'; '.join(lacks)}"
            )
    return out


def _window(trace: Any, step: int | None, timed: list[tuple[int, int]]) -> tuple[int, int] | None:
    if step is None:
        ends = [iv for iv in timed if iv[1] > iv[0]]
        return (min(s for s, _ in ends), max(e for _, e in ends)) if ends else None
    for n in trace.nodes:
        if n.name == f"ProfilerStep#{step}" and n.get_attr("range_duration_ns") is not None:
            return n.start_time_ns, n.start_time_ns + int(n.get_attr("range_duration_ns"))
    return None
