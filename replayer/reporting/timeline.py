"""Timelines in the Chrome trace event format (opens in Perfetto and chrome://tracing).

Two sources:

- :func:`replay_timeline`: a replay's schedule.  One process per rank, one
  thread per resource (host thread, compute stream, comm stream, p2p stream,
  memory), a slice per node.  A communication node is drawn as a ``wait``
  slice (arrived, peers not yet) followed by its transfer slice; flow arrows
  join the member that arrived last to every other member of a collective,
  and a send to its recv.
- :func:`measured_timeline`: a trace set's own measured timing
  (``start_time_ns`` / ``duration_ns``), on the same resources.

Format facts (Chrome "Trace Event Format" document, Google, 2016): a JSON
object with ``traceEvents``; complete events ``ph: "X"`` with ``ts`` and
``dur`` in microseconds (fractions allowed, so nanoseconds survive as three
decimals); metadata events ``ph: "M"`` named ``process_name``,
``thread_name``, ``thread_sort_index``; flow events ``ph: "s"`` / ``"f"``
sharing an ``id``, the ``f`` with ``bp: "e"`` binding to the enclosing slice.
Slices on one thread must nest; where a resource's slices overlap (sends and
recvs posted together; measured slices that overlap without nesting) they are
spread over extra lanes named ``<resource> #2``, ``#3``...  Slices are written
sorted by start within each track (longest first on equal starts), metadata
first and flow events last.  At most :data:`MAX_FLOW_ARROWS` flow arrows are
drawn; ``otherData`` says how many were drawn and dropped.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.errors import ReplayError

from tracekit.replayer.simulation.rank_compile import K_COLL, K_RECV, K_SEND, K_TIMED, classify, resources

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.results.result import ReplayResult
    from tracekit.sets.traceset import TraceSet

MAX_FLOW_ARROWS = 100_000
LANE_STRIDE = 1000  # tid = resource * LANE_STRIDE + lane


def _us(ns: float) -> float:
    return round(ns / 1000.0, 3)


def assign_lanes(starts: np.ndarray, ends: np.ndarray, *, nesting: bool = True) -> np.ndarray:
    """A lane per interval so that intervals within a lane are disjoint or (with ``nesting``) nested.

    Intervals are taken by start (longest first on ties); each goes to the
    first lane whose open intervals it fits in (after closing those that ended).

    Args:
        starts, ends: interval bounds, shape (N,), any one time unit.
        nesting: whether an interval may sit inside an open one of the same lane.

    Returns:
        int64 lane index per interval, shape (N,), lanes numbered from 0.
    """
    n = len(starts)
    lanes = np.zeros(n, dtype=np.int64)
    if n == 0:
        return lanes
    order = np.lexsort((-(ends - starts), starts))
    stacks: list[list[float]] = []
    s_list, e_list = starts.tolist(), ends.tolist()
    for i in order.tolist():
        s, e = s_list[i], e_list[i]
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or (nesting and e <= stack[-1]):
                stack.append(e)
                lanes[i] = lane
                break
        else:
            stacks.append([e])
            lanes[i] = len(stacks) - 1
    return lanes


class _Builder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.named: set[tuple[int, int]] = set()

    def process(self, rank: int) -> None:
        """Name the Chrome-trace process of ``rank`` (``rank N``) and sort it by rank."""
        self.events.append({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank}"}})
        self.events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}})

    def thread(self, rank: int, tid: int, name: str) -> None:
        """Name thread ``tid`` of ``rank`` once (later calls do nothing) and sort it by tid."""
        if (rank, tid) in self.named:
            return
        self.named.add((rank, tid))
        self.events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": name}})
        self.events.append(
            {"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid, "args": {"sort_index": tid}}
        )

    def slice(
        self, rank: int, tid: int, name: str, cat: str, start_ns: float, end_ns: float, args: dict[str, Any]
    ) -> None:
        """Add a complete (``X``) event from ``start_ns`` to ``end_ns`` (ns; written in us, as Chrome traces are)."""
        self.events.append(
            {
                "ph": "X",
                "name": name,
                "cat": cat,
                "pid": rank,
                "tid": tid,
                "ts": _us(start_ns),
                "dur": round(_us(end_ns) - _us(start_ns), 3),
                "args": args,
            }
        )


def _tids(resource: np.ndarray, lanes: np.ndarray) -> np.ndarray:
    return resource.astype(np.int64) * LANE_STRIDE + lanes


def _lane_name(names: tuple[str, ...], tid: int) -> str:
    res, lane = divmod(tid, LANE_STRIDE)
    return names[res] if lane == 0 else f"{names[res]} #{lane + 1}"


def _lanes_per_resource(resource: np.ndarray, starts: np.ndarray, ends: np.ndarray, *, nesting: bool) -> np.ndarray:
    lanes = np.zeros(len(resource), dtype=np.int64)
    for r in np.unique(resource).tolist():
        idx = np.flatnonzero(resource == r)
        lanes[idx] = assign_lanes(starts[idx], ends[idx], nesting=nesting)
    return lanes


def replay_timeline(result: "ReplayResult", traceset: "TraceSet") -> dict[str, Any]:
    """The Chrome trace of a replay (see module doc).

    Raises:
        ReplayError: the result carries no schedule (read back from JSON without one).
    """
    if result.schedule is None:
        raise ReplayError("this replay result has no schedule (it was saved without one); replay again")
    b = _Builder()
    rows = result.collectives
    # where each instance's transfer slice lives: index -> list of (rank, tid, is_last_arrival)
    slots: dict[int, list[tuple[int, int]]] = {}
    # a folded replay keeps only representatives' traces; members share their representative's node-id
    # array (equal names by the fold digest), so names are looked up by that array
    names_of_ids = {
        id(sc.node_ids): traceset[sc.rank].columns().names for sc in result.schedule if sc.rank in traceset.ranks
    }
    for sched in result.schedule:
        rank = sched.rank
        b.process(rank)
        names = names_of_ids.get(id(sched.node_ids)) or [""] * len(sched.node_ids)
        keep = (
            (sched.resource >= 0) & ~np.isnan(sched.end_ns) & ((sched.end_ns > sched.start_ns) | (sched.kind >= K_COLL))
        )
        idx = np.flatnonzero(keep)
        if not len(idx):
            continue
        # replayed nodes never nest (a communication node is drawn as wait + transfer): disjoint lanes
        lanes = _lanes_per_resource(sched.resource[idx], sched.start_ns[idx], sched.end_ns[idx], nesting=False)
        tids = _tids(sched.resource[idx], lanes)
        starts, ends = sched.start_ns[idx].tolist(), sched.end_ns[idx].tolist()
        xfer = sched.xfer_start_ns[idx].tolist()
        kinds, inst = sched.kind[idx].tolist(), sched.instance[idx].tolist()
        ids = sched.node_ids[idx].tolist()
        for j, p in enumerate(idx.tolist()):
            tid = int(tids[j])
            b.thread(rank, tid, _lane_name(sched.resource_names, tid))
            name = names[p] or f"node {ids[j]}"
            args: dict[str, Any] = {"node_id": ids[j]}
            if kinds[j] == K_TIMED:
                b.slice(rank, tid, name, "compute", starts[j], ends[j], args)
                continue
            i = inst[j]
            x = xfer[j]
            if i >= 0 and not math.isnan(x):
                row = rows[i]
                args.update(
                    {
                        "kind": row.kind,
                        "comm_bytes": row.comm_bytes,
                        "pg_name": row.pg_name,
                        "algorithm": row.algorithm,
                        "transfer_ns": row.time_ns,
                    }
                )
                if x > starts[j]:
                    b.slice(rank, tid, f"wait: {name}", "wait", starts[j], x, {"node_id": ids[j]})
                b.slice(rank, tid, name, "comm", x, ends[j], args)
                slots.setdefault(i, []).append((rank, tid))
    drawn, dropped = _flows(b, result, slots)
    return {
        "traceEvents": _ordered(b.events),
        "displayTimeUnit": "ns",
        "otherData": {
            "producer": "tracekit replay",
            "spec": result.provenance.spec_name,
            "collective_model": result.provenance.collective_model,
            "iteration_time_ns": result.iteration_time_ns,
            "flow_arrows": drawn,
            "flow_arrows_dropped": dropped,
            "flow_arrows_cap": MAX_FLOW_ARROWS,
        },
    }


def _ordered(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Metadata, then slices by (process, thread, start, longest first), then flow events."""
    meta = [e for e in events if e["ph"] == "M"]
    slices = sorted((e for e in events if e["ph"] == "X"), key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
    rest = [e for e in events if e["ph"] not in ("M", "X")]
    return meta + slices + rest


def _flows(b: _Builder, result: "ReplayResult", slots: dict[int, list[tuple[int, int]]]) -> tuple[int, int]:
    """Add the flow arrows; ``(drawn, dropped by the cap)``."""
    arrows = dropped = 0
    sched_by_rank = {s.rank: s for s in result.schedule or ()}
    for i, row in enumerate(result.collectives):
        where = dict(slots.get(i, []))
        if len(where) < 2:
            continue
        if row.kind == "SEND_RECV":
            src, dst = row.ranks
            pairs = [(src, dst)]
        else:
            # the member whose arrival started the transfer: latest arrival, lowest rank on ties
            arrivals = []
            for rank, node_id in zip(row.ranks, row.node_ids):
                s = sched_by_rank[rank]
                pos = int(np.flatnonzero(s.node_ids == node_id)[0])
                arrivals.append((-s.start_ns[pos], rank))
            origin = min(arrivals)[1]
            pairs = [(origin, r) for r in row.ranks if r != origin]
        ts = _us(row.start_ns)
        for a, z in pairs:
            if a not in where or z not in where:
                continue
            if arrows >= MAX_FLOW_ARROWS:
                dropped += 1
                continue
            arrows += 1
            cat = "p2p" if row.kind == "SEND_RECV" else "collective"
            b.events.append(
                {"ph": "s", "id": arrows, "name": row.kind, "cat": cat, "pid": a, "tid": where[a], "ts": ts}
            )
            b.events.append(
                {"ph": "f", "bp": "e", "id": arrows, "name": row.kind, "cat": cat, "pid": z, "tid": where[z], "ts": ts}
            )
    return arrows, dropped


def measured_timeline(traceset: "TraceSet") -> dict[str, Any]:
    """The Chrome trace of the trace set's own measured timing (nodes with a duration).

    Times are shown relative to the earliest measured start of the set.
    """
    b = _Builder()
    firsts = []
    per_rank = []
    for rank in traceset.ranks:
        trace = traceset[rank]
        cols = trace.columns()
        kind, cls, sub = classify(cols, "trace")
        res, res_names = resources(cls, sub)
        keep = (res >= 0) & (cols.duration_ns > 0)
        per_rank.append((rank, cols, kind, res, res_names, np.flatnonzero(keep)))
        if keep.any():
            firsts.append(int(cols.start_time_ns[keep].min()))
    origin = min(firsts) if firsts else 0
    for rank, cols, kind, res, rnames, idx in per_rank:
        b.process(rank)
        if not len(idx):
            continue
        starts = (cols.start_time_ns[idx] - origin).astype(np.float64)
        ends = starts + cols.duration_ns[idx]
        lanes = _lanes_per_resource(res[idx], starts, ends, nesting=True)
        tids = _tids(res[idx], lanes)
        names = cols.names
        ids = cols.ids[idx].tolist()
        for j, p in enumerate(idx.tolist()):
            tid = int(tids[j])
            b.thread(rank, tid, _lane_name(rnames, tid))
            cat = "compute" if kind[p] == K_TIMED else ("p2p" if kind[p] in (K_SEND, K_RECV) else "comm")
            b.slice(rank, tid, names[p] or f"node {ids[j]}", cat, float(starts[j]), float(ends[j]), {"node_id": ids[j]})
    return {
        "traceEvents": _ordered(b.events),
        "displayTimeUnit": "ns",
        "otherData": {"producer": "tracekit timeline (measured)", "origin_ns": origin},
    }


def write_chrome_trace(trace: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Write a Chrome trace dict as JSON, atomically.

    Raises:
        TracekitError: ``path`` is an input of the running command, or cannot be written.
        OSError: the folder or temporary file cannot be created.
    """
    import orjson

    from tracekit.io import atomic_output

    with atomic_output(path, "wb") as fh:
        fh.write(orjson.dumps(trace))
