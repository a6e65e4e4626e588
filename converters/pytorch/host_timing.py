"""One rule for host time: what a host thread's measured time becomes in the graph.

Both PyTorch paths (Kineto-only and ET + Kineto) time host nodes with
:func:`thread_timing`, one host thread at a time:

* **Work and ranges.**  An operator or runtime call is *work*.  An annotation
  (``ProfilerStep#N``, ``## backward ##``, a user ``record_function`` range) is a
  *range*: it gives structure (iterations, labels) and gets no time of its own
  (duration 0).
* **Own time.**  A work node's duration is its span minus the spans of the work
  nested in it (its nearest work descendants on the same thread), so the
  thread's node durations add up to its busy time.
* **Partial overlaps.**  An event that starts inside another one and ends after
  it (no proper nesting; Kineto shows this for asynchronous ranges and clock
  jitter) is clamped to end where the enclosing one ends; they are counted
  (:attr:`ThreadTiming.partial_overlaps`) so the converter can warn.  The time
  cut off is not lost: it becomes uncovered time, handled next.
* **Uncovered time inside a range** (Python between operators of a step, the
  clamped tails) is real host time of that range, not waiting: it is added to
  the next work node in the same range (or, for the tail of a range, to its
  last work node), so a replay of the thread reproduces the range's measured
  span.  Its amount is returned per node (:attr:`ThreadTiming.gap_ns`).
  Uncovered time outside every range is idle (a worker thread waiting for work)
  and is not time of any node: waiting is what dependencies express.  In the
  ET + Kineto path, once dependencies are known, :func:`latency_leads` gives a
  node the uncovered time between its latest dependency's end and its start
  (a hand-over's latency), inside a range or not.
* **Waiting is not work.**  Once the graph's dependencies are known,
  :func:`trim_waiting_gaps` removes from a node's leading uncovered time the
  part before the measured end of a node it depends on that ended inside
  that uncovered time (the thread was
  waiting for that collective, kernel or other thread, which the replay
  already waits for): counting it as work would count the wait twice.

Times are integer ns.  Pure function of the spans; no errors raised.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Mapping, Sequence

__all__ = [
    "HostSpan",
    "ThreadTiming",
    "handoff_edges",
    "latency_leads",
    "thread_timing",
    "trim_sync_waits",
    "trim_waiting_gaps",
]


@dataclass(frozen=True, slots=True)
class HostSpan:
    """One host event on a thread: identity, measured start and end (ns), and whether it is a range."""

    key: Hashable
    start_ns: int
    end_ns: int
    is_range: bool


@dataclass(frozen=True, slots=True)
class ThreadTiming:
    """Durations for one thread's events.

    Attributes:
        duration_ns: key -> node duration (ns): own time plus attributed uncovered time; 0 for ranges.
        gap_ns: key -> the part of ``duration_ns`` that was uncovered time inside a range.
        lead_gap_ns: key -> the part of ``gap_ns`` that came before the event (the rest followed it).
        parent: key -> key of the enclosing event (after clamping), absent for top-level events.
        partial_overlaps: events clamped because they overlapped an enclosing event without nesting.
        uncovered_lead_ns: key of each top-level work event -> the uncovered time just before it on the
            thread (since the previous top-level work ended, less the part a range gave that work as its tail;
            its start for the thread's first work), inside ranges or not (:func:`latency_leads`).
    """

    duration_ns: dict
    gap_ns: dict
    lead_gap_ns: dict
    parent: dict
    partial_overlaps: int
    uncovered_lead_ns: dict = field(default_factory=dict)


def thread_timing(spans: Sequence[HostSpan]) -> ThreadTiming:
    """Apply the module's rule to the events of one host thread (any order).

    Args:
        spans: the thread's events, each with its measured ``[start_ns, end_ns)``; keys must be unique.

    Returns:
        :class:`ThreadTiming` keyed by :attr:`HostSpan.key` (ns); the work durations sum to the thread's busy
        time plus the uncovered time inside ranges.
    """
    order = sorted(spans, key=lambda s: (s.start_ns, -(s.end_ns - s.start_ns), str(s.key)))
    end: dict = {}
    parent: dict = {}
    overlaps = 0
    stack: list[HostSpan] = []
    for s in order:
        e = max(s.end_ns, s.start_ns)
        while stack and end[stack[-1].key] <= s.start_ns:
            stack.pop()
        if stack:
            top = stack[-1]
            parent[s.key] = top.key
            if e > end[top.key]:
                overlaps += 1
                e = end[top.key]
        end[s.key] = e
        stack.append(s)
    # nearest work ancestor and own time
    by_key = {s.key: s for s in order}
    own = {s.key: 0 if s.is_range else end[s.key] - s.start_ns for s in order}
    top_work: list[HostSpan] = []
    for s in order:
        if s.is_range:
            continue
        p = parent.get(s.key)
        while p is not None and by_key[p].is_range:
            p = parent.get(p)
        if p is None:
            top_work.append(s)
        else:
            own[p] -= end[s.key] - s.start_ns
    gap: dict = {}
    lead: dict = {}
    ranges = [s for s in order if s.is_range]
    _attribute_gaps(top_work, ranges, end, own, gap, lead)
    duration = {k: max(0, v) for k, v in own.items()}
    uncovered: dict = {}
    cursor, prev_tail = 0, 0
    for w in top_work:  # the uncovered time before w, less what a range gave the previous work as its tail
        uncovered[w.key] = max(0, w.start_ns - cursor - prev_tail)
        cursor = max(cursor, end[w.key])
        prev_tail = gap.get(w.key, 0) - lead.get(w.key, 0)
    return ThreadTiming(duration, gap, lead, parent, overlaps, uncovered)


def _attribute_gaps(
    top_work: list[HostSpan], ranges: list[HostSpan], end: dict, own: dict, gap: dict, lead: dict
) -> None:
    """Add uncovered time inside ranges to the next work node of the range (else its last one)."""
    if not ranges or not top_work:
        return
    # elementary uncovered intervals between consecutive top-level work events (and before the first)
    bounds: list[tuple[int, int, HostSpan | None, HostSpan | None]] = []
    prev: HostSpan | None = None
    cursor = min(r.start_ns for r in ranges)
    for w in top_work:
        a = max(cursor, end[prev.key]) if prev is not None else cursor
        if w.start_ns > a:
            bounds.append((a, w.start_ns, prev, w))
        prev = w
        cursor = max(cursor, end[w.key])
    last_end = max(end[r.key] for r in ranges)
    if prev is not None and last_end > cursor:
        bounds.append((cursor, last_end, prev, None))
    for a, b, before, after in bounds:
        for lo, hi, rng in _covered(a, b, ranges, end):
            target = None
            if after is not None and after.start_ns < end[rng.key]:
                target = after
            elif before is not None and before.start_ns >= rng.start_ns:
                target = before
            if target is not None:
                own[target.key] += hi - lo
                gap[target.key] = gap.get(target.key, 0) + hi - lo
                if target is after:
                    lead[target.key] = lead.get(target.key, 0) + hi - lo


def _covered(a: int, b: int, ranges: list[HostSpan], end: dict) -> list[tuple[int, int, HostSpan]]:
    """Pieces of [a, b) inside some range, each with its innermost (latest-starting) range."""
    cuts = {a, b}
    inside = [r for r in ranges if r.start_ns < b and end[r.key] > a]
    if not inside:
        return []
    for r in inside:
        cuts.update(x for x in (r.start_ns, end[r.key]) if a < x < b)
    points = sorted(cuts)
    out = []
    for lo, hi in zip(points, points[1:]):
        best = None
        for r in inside:
            if r.start_ns <= lo and end[r.key] >= hi and (best is None or r.start_ns >= best.start_ns):
                best = r
        if best is not None:
            out.append((lo, hi, best))
    return out


def trim_waiting_gaps(nodes: Sequence[Any], lead_gap_ns: Mapping[int, int]) -> int:
    """Remove waiting from leading uncovered time (see the module doc); returns the ns removed.

    Args:
        nodes: the rank's nodes (``id``, ``start_time_ns``, ``duration_ns``, ``data_deps``); durations are
            lowered in place, the ``host_gap_ns`` attribute with them.
        lead_gap_ns: node id -> leading uncovered time included in its duration (ns).
    """
    by_id = {n.id: n for n in nodes}
    removed = 0
    for nid, lead in lead_gap_ns.items():
        node = by_id.get(nid)
        if node is None or lead <= 0:
            continue
        gap_start = node.start_time_ns - lead
        waited_until = gap_start
        for d in node.data_deps:
            src = by_id.get(d)
            if src is None or src.get_attr("host_gap_ns") is not None or src.get_attr("range_duration_ns"):
                continue
            src_end = src.start_time_ns + src.duration_ns
            if src_end <= node.start_time_ns:  # ended in the gap: the thread sat idle until then
                waited_until = max(waited_until, src_end)
        cut = waited_until - gap_start
        if cut > 0:
            node.duration_ns -= cut
            gap = int(node.get_attr("host_gap_ns") or 0) - cut
            if gap > 0:
                node.set_attr("host_gap_ns", gap)
            else:
                node.attrs = [a for a in node.attrs if a.name != "host_gap_ns"]
            removed += cut
    return removed


def latency_leads(
    nodes: Sequence[Any], uncovered_lead_ns: Mapping[int, int], lead_gap_ns: Mapping[int, int], end_ns: Any
) -> int:
    """Give each top-level host work node the uncovered time between its latest dependency's end and its start.

    The rule for leading uncovered time once the graph's dependencies are known (ET + Kineto path): of the
    time the thread sat uncovered before a node, the part before the measured end of the latest node it
    depends on is waiting (the replay waits through the dependency), the part after it is latency of that
    node (a hand-over to another thread, the autograd engine waking, Python between operators) and belongs
    to it, inside a range or not, so a replay with measured durations starts every node when it started.
    This generalizes :func:`trim_waiting_gaps`, which only cuts the range-attributed part. A node none of
    whose dependencies has a measured end keeps its range-attributed lead.

    Args:
        nodes: host nodes to adjust (``id``, ``start_time_ns``, ``duration_ns``, ``data_deps``; durations
            and the ``host_gap_ns`` attribute change in place).
        uncovered_lead_ns: node id -> uncovered time before it on its thread (ns); only these nodes change.
        lead_gap_ns: node id -> the range-attributed lead already in its duration (ns).
        end_ns: ``end_ns(node_id)`` -> measured end (ns) of a dependency, or None when it has none.

    Returns:
        The net ns added (negative when waiting was removed).
    """
    net = 0
    for node in nodes:
        uncovered = uncovered_lead_ns.get(node.id)
        if uncovered is None:
            continue
        ends = [e for e in (end_ns(d) for d in node.data_deps) if e is not None]
        if not ends:
            continue
        have = lead_gap_ns.get(node.id, 0)
        want = max(0, min(uncovered, node.start_time_ns - max(ends)))
        delta = max(want - have, -node.duration_ns)
        if delta == 0:
            continue
        node.duration_ns += delta
        gap = int(node.get_attr("host_gap_ns") or 0) + delta
        if gap > 0:
            node.set_attr("host_gap_ns", gap, "int64_val")
        else:
            node.attrs = [a for a in node.attrs if a.name != "host_gap_ns"]
        net += delta
    return net


def handoff_edges(
    lanes: Mapping[Any, Sequence[Any]], node_of: Mapping[int, Any], dep: Any, range_categories: Any
) -> int:
    """Thread hand-off shown by a range that holds no work of its own thread (``## backward ##`` while the
    autograd thread runs): the range's node -> the first work of each other host thread inside it, and the
    last of that work to end -> the first node of the range's thread after the range.  Returns edges added.

    Args:
        lanes: (pid, tid) -> the thread's Kineto events in start order.
        node_of: event index -> emitted node (ids in time order).
        dep: ``dep(src_event_index, dst_node)`` adds a data dependency.
        range_categories: categories that are ranges.
    """
    work = {
        key: [e for e in lane if e.index in node_of and e.category not in range_categories]
        for key, lane in lanes.items()
    }
    starts = {key: [e.start_ns for e in lane] for key, lane in work.items()}
    added = 0
    for key, lane in lanes.items():
        for r in lane:
            if r.category not in range_categories or r.index not in node_of:
                continue
            own = starts[key]
            i = bisect_left(own, r.start_ns)
            if i < len(own) and own[i] < r.end_ns:
                continue  # the thread worked inside the range itself
            inside = []
            for other, lst in work.items():
                if other == key or other[0] != key[0]:  # other threads of the same process
                    continue
                j = bisect_left(starts[other], r.start_ns)
                k = j
                while k < len(lst) and lst[k].end_ns <= r.end_ns and lst[k].start_ns < r.end_ns:
                    k += 1
                if k > j:
                    inside.append(lst[j:k])
            if not inside:
                continue
            rnode = node_of[r.index]
            for run in inside:
                if rnode.id < node_of[run[0].index].id:
                    dep(r.index, node_of[run[0].index])
                    added += 1
            if i < len(own):
                last = max((run[-1] for run in inside), key=lambda e: (e.end_ns, e.index))
                nxt = node_of[work[key][i].index]
                if node_of[last.index].id < nxt.id:
                    dep(last.index, nxt)
                    added += 1
    return added


def trim_sync_waits(waits: Iterable[tuple[Any, int, int, int]]) -> None:
    """Take a synchronizing call's waiting off the node holding it (both PyTorch paths).

    Args:
        waits: ``(node, call_start_ns, call_end_ns, waited_until_ns)`` for each call that holds its host-wait
            dependency itself (it started after the awaited op did); a node may appear for several calls.
            The part ``max(0, min(call_end, until) - call_start)`` is waiting the replay already has as the
            dependency: it is subtracted from the node's duration (not below 0) and summed in ``waited_ns``.
    """
    per_node: dict[int, tuple[Any, int]] = {}
    for node, start, end, until in waits:
        waited = max(0, min(end, until) - start)
        if waited:
            got = per_node.get(node.id)
            per_node[node.id] = (node, waited + (got[1] if got else 0))
    for node, waited in per_node.values():
        waited = min(waited, node.duration_ns)
        node.duration_ns -= waited
        node.set_attr("waited_ns", waited, "int64_val")
