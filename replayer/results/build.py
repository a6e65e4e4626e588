"""Building a :class:`~.result.ReplayResult` from a finished simulation (figures defined in :mod:`.result`).

Times are rounded to integer ns once (:func:`round_schedule`), before any figure is computed.
"""

from __future__ import annotations

import itertools

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from tracekit.gc_pause import paused_gc
from tracekit.model import CollectiveType
from tracekit.replayer.results.result import (
    CollectiveRow,
    CriticalPath,
    PathStep,
    Provenance,
    RankSchedule,
    RankStats,
    ReplayResult,
    bus_factor,
    nccl_tests_size,
)
from tracekit.replayer.simulation.program import K_COLL, K_TIMED, RankLayout, ReplayProgram
from tracekit.wire.sharing import columns_key

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.engine import Schedule
    from tracekit.sets.traceset import TraceSet

__all__ = ["build_result", "provenance", "round_schedule", "schedule_names", "union_length"]


def union_length(starts: npt.NDArray[np.float64], ends: npt.NDArray[np.float64]) -> float:
    """Total length covered by intervals ``[starts[i], ends[i])`` (empty ones ignored), ns."""
    keep = ends > starts
    if not keep.any():
        return 0.0
    s, e = starts[keep], ends[keep]
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    heads = np.flatnonzero(new)
    block_end = np.maximum.reduceat(e, heads)
    return float(np.sum(block_end - s[heads]))


def round_schedule(sched: "Schedule", *, in_place: bool = False) -> "Schedule":
    """The schedule with every time rounded to the nearest integer ns (NaN stays NaN).

    Results are reported in integer ns (module doc); rounding once, before any
    figure is computed, keeps the per-rank partition exact.  ``in_place``:
    round ``sched``'s own arrays and return it (no copy of 16 bytes a node).
    """
    from dataclasses import replace

    if in_place:
        for a in (sched.start_ns, sched.end_ns, sched.xfer_start_ns, sched.xfer_end_ns):
            np.rint(a, out=a)
        return sched
    return replace(
        sched,
        start_ns=np.rint(sched.start_ns),
        end_ns=np.rint(sched.end_ns),
        xfer_start_ns=np.rint(sched.xfer_start_ns),
        xfer_end_ns=np.rint(sched.xfer_end_ns),
    )


def _rank_stats(
    lay: RankLayout, sched: "Schedule", program: ReplayProgram, xfer_start_of_node: npt.NDArray[np.float64]
) -> RankStats:
    """One rank's partition of ``[0, iteration)`` from a rounded schedule (:func:`round_schedule`)."""
    lo, hi = lay.offset, lay.offset + lay.n
    start, end = sched.start_ns[lo:hi], sched.end_ns[lo:hi]
    kind = lay.kind
    iteration = float(end.max()) if lay.n else 0.0
    timed = kind == K_TIMED
    comm = (kind >= K_COLL) & ~np.isnan(xfer_start_of_node[lo:hi])
    cs, ce = start[timed], end[timed]
    ks, ke = xfer_start_of_node[lo:hi][comm], end[comm]
    ws, we = start[comm], xfer_start_of_node[lo:hi][comm]
    compute = int(union_length(cs, ce))
    comm_t = int(union_length(ks, ke))
    busy = int(union_length(np.concatenate([cs, ks]), np.concatenate([ce, ke])))
    everything = int(union_length(np.concatenate([cs, ks, ws]), np.concatenate([ce, ke, we])))
    it = int(iteration)
    return RankStats(
        rank=lay.rank,
        iteration_time_ns=it,
        compute_ns=compute,
        comm_ns=comm_t,
        exposed_comm_ns=busy - compute,
        comm_wait_ns=everything - busy,
        other_idle_ns=it - everything,
        nodes=lay.n,
    )


def _collective_rows(program: ReplayProgram, sched: "Schedule") -> tuple[CollectiveRow, ...]:
    """One row per instance; every member's node id found in one gather over the layouts' ids (not one bisect per
    member), the per-kind names and bus factors once per distinct value."""
    instances = program.instances
    if not instances:
        return ()
    lens = np.fromiter((len(inst.nodes) for inst in instances), dtype=np.int64, count=len(instances))
    flat = np.fromiter(itertools.chain.from_iterable(inst.nodes for inst in instances), np.int64, int(lens.sum()))
    all_ids = np.concatenate([lay.ids for lay in program.layouts]) if program.layouts else np.zeros(0, np.uint64)
    # the replay ended (else simulate raised DeadlockError): every member exists and the instance is costed
    ids = all_ids[flat].tolist()
    ends = np.cumsum(lens).tolist()
    starts_ns = sched.xfer_start_ns[: len(instances)].astype(np.int64).tolist()
    ends_ns = sched.xfer_end_ns[: len(instances)].astype(np.int64).tolist()
    names: dict[int | None, str] = {}
    factors: dict[tuple[str, int], float] = {}
    rows = []
    lo = 0
    for i, inst in enumerate(instances):
        kind = names.get(inst.comm_type)
        if kind is None:
            # a collective's comm_type is set (rendezvous: a missing one reads as ALL_REDUCE); a p2p's is None
            kind = "SEND_RECV" if inst.comm_type is None else CollectiveType(inst.comm_type).name
            names[inst.comm_type] = kind
        assert inst.cost is not None
        s, e = starts_ns[i], ends_ns[i]
        t = e - s
        p = len(inst.ranks)
        alg_bw = nccl_tests_size(kind, inst.comm_bytes, p) / t if t > 0 else None
        bus = factors.get((kind, p))
        if bus is None:
            bus = factors[(kind, p)] = bus_factor(kind, p)
        rows.append(
            CollectiveRow(
                index=i,
                kind=kind,
                comm_bytes=inst.comm_bytes,
                pg_name=inst.pg_name,
                ranks=inst.ranks,
                node_ids=tuple(ids[lo : ends[i]]),
                algorithm=inst.cost.algorithm,
                start_ns=s,
                end_ns=e,
                time_ns=t,
                algbw_gbps=alg_bw,
                busbw_gbps=alg_bw * bus if alg_bw is not None else None,
            )
        )
        lo = ends[i]
    return tuple(rows)


def _last_arrival(nodes: list[int], sched: "Schedule", i: int) -> int:
    """The member whose arrival started transfer ``i``: of those arriving last, the first in member order.

    (Not the engine's ``last_arrival``, which among same-time arrivals is the
    one processed last: member order makes the path the same whether the
    replay was folded or not, see :mod:`tracekit.replayer.simulation.folding`.)
    """
    t = sched.xfer_start_ns[i]
    for g in nodes:
        if g >= 0 and sched.start_ns[g] == t:
            return g
    return int(sched.last_arrival[i])


def _path_walk(program: ReplayProgram, sched: "Schedule") -> list[tuple[int, bool, int, int]]:
    """The critical path's ``(node, is_comm, start_ns, end_ns)`` in execution order (rounded schedule, ints).

    Walks ``reason`` back from the node that ends last; a communication step is
    its instance's transfer, entered through the member that arrived last
    (:func:`_last_arrival`).  Times are read through memoryviews (Python numbers
    per item, no numpy scalars and no per-node list; replay memory, issue 17).
    """
    kind, instance_of, instances = program.kind, program.instance_of, program.instances
    reason = sched.reason.data  # memoryviews of the arrays (ndarray.data)
    start, end = sched.start_ns.data, sched.end_ns.data
    xfer_start = sched.xfer_start_ns
    raw: list[tuple[int, bool, int, int]] = []
    g = int(np.argmax(sched.end_ns))
    while g >= 0:
        k = kind[g]
        if k >= K_COLL and instance_of[g] >= 0:
            i = instance_of[g]
            h = _last_arrival(instances[i].nodes, sched, i)
            # the member's own end: members may finish at different times (CommCost.member_ns)
            raw.append((h, True, int(xfer_start[i]), int(end[g])))
            g = reason[h]
        else:
            if k == K_TIMED:
                raw.append((g, False, int(start[g]), int(end[g])))
            g = reason[g]
    raw.reverse()
    return raw


def _critical_path(program: ReplayProgram, sched: "Schedule", traceset: "TraceSet") -> CriticalPath:
    if program.n == 0:
        return CriticalPath((), 0, 0, 0)
    raw = _path_walk(program, sched)
    # rank, node id and name of every step at once (one searchsorted, not one per step)
    nodes = np.fromiter((step[0] for step in raw), dtype=np.int64, count=len(raw))
    offsets = np.array([lay.offset for lay in program.layouts], dtype=np.int64)
    which = np.searchsorted(offsets, nodes, side="right") - 1
    pos = nodes - offsets[which]
    ids = np.zeros(len(raw), dtype=np.uint64)
    names: dict[int, list[str]] = {}
    for li in np.flatnonzero(np.bincount(which, minlength=len(offsets))).tolist():  # np.unique imports numpy.ma
        lay = program.layouts[li]
        sel = which == li
        ids[sel] = lay.ids[pos[sel]]
        names[li] = traceset[lay.rank].columns().names
    ranks = [lay.rank for lay in program.layouts]
    steps = []
    compute = comm = 0
    for (_, is_comm, s, e), li, p, node_id in zip(raw, which.tolist(), pos.tolist(), ids.tolist()):
        steps.append(PathStep(ranks[li], node_id, names[li][p], "comm" if is_comm else "compute", s, e))
        if is_comm:
            comm += e - s
        else:
            compute += e - s
    return CriticalPath(tuple(steps), compute + comm, compute, comm)


def schedule_names(traceset: "TraceSet", rank: int) -> tuple[tuple[str, ...], dict[int, tuple[int, ...]]]:
    """A rank's node names and merged-node provenance (``merged_node_ids``) for :class:`RankSchedule`."""
    cols = traceset[rank].columns()
    present, values = cols.attr("merged_node_ids")
    merged = {}
    if present.any():
        ids = cols.ids
        for i in np.flatnonzero(present).tolist():
            merged[int(ids[i])] = tuple(int(x) for x in values[i])
    return tuple(cols.names), merged


def rank_schedule(
    rank: int,
    lay: RankLayout,
    sched: "Schedule",
    xfer_start_of_node: npt.NDArray[np.float64],
    instance_of: npt.NDArray[np.int64],
    names: tuple[str, ...],
    merged: dict[int, tuple[int, ...]],
) -> RankSchedule:
    """The :class:`RankSchedule` of ``rank`` from the program layout ``lay`` of the rank it replays as.

    Args:
        rank: the rank reported (a folded member reports its representative's layout).
        lay: the layout (``offset``, ``n``, ``ids``, ``kind``, ``resource``, ``resource_names``).
        sched: the schedule (``start_ns``/``end_ns`` float64[N] of the whole program, ns).
        xfer_start_of_node: float64[N], transfer start of each node (ns).
        instance_of: int64[lay.n], the collective instance of each node (-1: none).
        names, merged: see :func:`schedule_names`.
    """
    lo, hi = lay.offset, lay.offset + lay.n
    return RankSchedule(
        rank,
        lay.ids,
        lay.kind,
        lay.resource,
        lay.resource_names,
        sched.start_ns[lo:hi],
        sched.end_ns[lo:hi],
        xfer_start_of_node[lo:hi],
        instance_of,
        names,
        merged,
    )


def _schedules(
    program: ReplayProgram,
    sched: "Schedule",
    xfer_start_of_node: npt.NDArray[np.float64],
    inst: npt.NDArray[np.int64],
    traceset: "TraceSet",
) -> tuple[RankSchedule, ...]:
    out = []
    named: dict[int, tuple[tuple[str, ...], dict[int, tuple[int, ...]]]] = {}  # by columns: once a program
    for lay in program.layouts:
        lo, hi = lay.offset, lay.offset + lay.n
        key = columns_key(traceset[lay.rank])
        if key not in named:
            named[key] = schedule_names(traceset, lay.rank)
        names, merged = named[key]
        out.append(rank_schedule(lay.rank, lay, sched, xfer_start_of_node, inst[lo:hi], names, merged))
    return tuple(out)


def build_result(
    program: ReplayProgram, sched: "Schedule", traceset: "TraceSet", *, consume: bool = False
) -> ReplayResult:
    """Assemble the :class:`ReplayResult` of a finished simulation.

    ``consume``: the caller does not use ``sched`` afterwards, so its times are rounded in place.
    The cyclic garbage collector is paused meanwhile (:func:`tracekit.gc_pause.paused_gc`): the critical
    path and the collective rows are many small acyclic objects, and the collections their
    allocation triggers would walk every object the caller holds (the traces).
    """
    with paused_gc():
        return _build(program, round_schedule(sched, in_place=consume), traceset)


def _build(program: ReplayProgram, sched: "Schedule", traceset: "TraceSet") -> ReplayResult:
    """:func:`build_result` on a rounded schedule."""
    inst = np.asarray(program.instance_of, dtype=np.int64)
    xfer_start_of_node = np.full(program.n, np.nan)
    has = inst >= 0
    if len(sched.xfer_start_ns):
        xfer_start_of_node[has] = sched.xfer_start_ns[inst[has]]
    ranks = tuple(_rank_stats(lay, sched, program, xfer_start_of_node) for lay in program.layouts)
    prov = provenance(program, tuple(lay.path for lay in program.layouts), len(program.layouts))
    return ReplayResult(
        iteration_time_ns=max((r.iteration_time_ns for r in ranks), default=0),
        ranks=ranks,
        collectives=_collective_rows(program, sched),
        critical_path=_critical_path(program, sched, traceset),
        provenance=prov,
        compute_methods=tuple(program.compute_methods.items()),
        node_count=program.n,
        schedule=_schedules(program, sched, xfer_start_of_node, inst, traceset),
    )


def provenance(program: ReplayProgram, trace_paths: tuple[str | None, ...], world_size: int) -> Provenance:
    """What was replayed and how: the program's spec, models and options, the traces' paths, tracekit's version
    (``tracekit.__version__``, the installed distribution's version: importing ``importlib.metadata`` to ask it
    cost 35-40 ms of a cold ``tracekit replay``)."""
    from tracekit import __version__ as tk_version

    spec = program.spec
    return Provenance(
        trace_paths=trace_paths,
        spec_name=spec.name,
        spec_path=spec.path,
        collective_model=program.model_name,
        compute_mode=spec.compute.mode,
        compute_scale=spec.compute.duration_scale,
        streams=program.options.streams,
        world_size=world_size,
        tracekit_version=tk_version,
    )
