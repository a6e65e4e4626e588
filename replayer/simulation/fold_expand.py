"""Expanding a folded simulation to the unfolded job's :class:`~tracekit.replayer.results.result.ReplayResult`.

Per rank: the representative's figures and schedule (node ids equal by the digest, :mod:`.folding`); collective
rows: one per unfolded instance with the times of its folded image; the critical path walked on the folded
schedule as the unfolded walk would go.
"""

from __future__ import annotations

from dataclasses import fields
from dataclasses import replace as dc_replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tracekit.replayer.results.build import _rank_stats, provenance, rank_schedule, round_schedule, schedule_names
from tracekit.replayer.results.result import (
    CollectiveRow,
    CriticalPath,
    FoldInfo,
    PathStep,
    RankSchedule,
    ReplayResult,
    bus_factor,
    nccl_tests_size,
)
from tracekit.replayer.simulation.compute import METHODS
from tracekit.replayer.simulation.folding import FoldPlan, log  # log: replay_folded's messages keep their logger
from tracekit.replayer.simulation.program import K_COLL, K_TIMED
from tracekit.replayer.simulation.fold_summary import instance_algorithms, kind_name

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.hardware import HardwareSpec
    from tracekit.replayer.simulation.program import ReplayOptions
    from tracekit.replayer.simulation.engine import Schedule
    from tracekit.replayer.simulation.program import ReplayProgram
    from tracekit.sets.traceset import TraceSet

__all__ = ["expand_result"]

_GET = dict.__getitem__  # map(_GET, tables, positions): node ids at C speed

_ROW_FIELDS = (
    "index",
    "kind",
    "comm_bytes",
    "pg_name",
    "ranks",
    "node_ids",
    "algorithm",
    "start_ns",
    "end_ns",
    "time_ns",
    "algbw_gbps",
    "busbw_gbps",
)  # CollectiveRow's fields, in order


def expand_result(
    program: "ReplayProgram",
    sched: "Schedule",
    traceset: "TraceSet",
    plan: FoldPlan,
    *,
    world_paths: tuple[str | None, ...] | None = None,
    summary: bool = False,
) -> ReplayResult:
    """The unfolded job's :class:`~tracekit.replayer.results.result.ReplayResult` from the folded simulation.

    Per rank: the representative's figures and schedule (node ids equal by the
    digest; ``instance`` renumbered to the unfolded collective table).
    Collective rows: one per unfolded instance, its transfer times those of
    its folded image.  Critical path: the folded one (a valid path of the
    unfolded job: a representative's timeline is each member's).  ``summary``: no per-instance rows and no
    schedules, the table's summary rows in ``collective_rows`` instead (:mod:`.fold_summary`).
    """
    sched = round_schedule(sched)
    world = len(plan.rep_of)
    inst = np.asarray(program.instance_of, dtype=np.int64)
    xfer_start_of_node = np.full(program.n, np.nan)
    has = inst >= 0
    if len(sched.xfer_start_ns):
        xfer_start_of_node[has] = sched.xfer_start_ns[inst[has]]
    lay_of = {lay.rank: lay for lay in program.layouts}
    rep_stats = {r: _rank_stats(lay_of[r], sched, program, xfer_start_of_node) for r in plan.reps}
    rep = plan.rep_of.tolist()
    ranks = tuple(dc_replace(rep_stats[rep[m]], rank=m) for m in range(world))
    member_inst = dict(enumerate(plan.member_u))
    if summary:
        from tracekit.replayer.simulation.fold_summary import summary_rows

        rows, table = [], summary_rows(program, sched, plan)
    else:
        rows, table = _unfolded_rows(program, sched, plan), None
    counts: dict[str, int] = {}
    for m in range(world):
        for name, c in program.rank_compute_methods.get(rep[m], {}).items():
            counts[name] = counts.get(name, 0) + c
    scans = plan.scans
    paths = world_paths if world_paths is not None else tuple(scans[m].path for m in range(world))
    return ReplayResult(
        iteration_time_ns=max((r.iteration_time_ns for r in ranks), default=0),
        ranks=ranks,
        collectives=tuple(rows),
        critical_path=_folded_critical_path(program, sched, traceset, plan, member_inst),
        provenance=provenance(program, paths, world),
        compute_methods=tuple((k, counts[k]) for k in METHODS if k in counts),
        node_count=sum(scans[m].n for m in range(world)),
        schedule=None
        if summary
        else _member_schedules(program, sched, traceset, plan, xfer_start_of_node, member_inst),
        folding=FoldInfo(len(plan.reps), world, None),
        collective_rows=table,
    )


def _unfolded_rows(program: "ReplayProgram", sched: "Schedule", plan: FoldPlan) -> list[CollectiveRow]:
    """The unfolded job's collective table."""
    world = len(plan.rep_of)
    rows = []
    # a communication timed per member (no single transfer: ASTRA-compatible broadcast) has NaN here; its row
    # reports 0 ns and no bandwidth (its members' schedules carry the times)
    xs = np.nan_to_num(sched.xfer_start_ns, nan=0.0).astype(np.int64).tolist()
    xe = np.nan_to_num(sched.xfer_end_ns, nan=0.0).astype(np.int64).tolist()
    algorithms = instance_algorithms(program)
    comm_ids = [plan.scans[m].comm_ids for m in range(world)]
    factors: dict[tuple[str, int | None, int, int], tuple[str, float, float]] = {}
    new_row, set_attr = object.__new__, object.__setattr__
    fast_rows = tuple(f.name for f in fields(CollectiveRow)) == _ROW_FIELDS
    timing: dict[tuple[int, int], tuple] = {}  # (folded instance, members) -> the row's kind, times and bandwidths
    tables_of: dict[int, tuple] = {}
    for u, (kind, ctype, nbytes, pg, members, positions, fid) in enumerate(plan.unfolded):
        p = len(members)
        tk = timing.get((fid, p))
        if tk is None:
            fk = (kind, ctype, nbytes, p)
            found = factors.get(fk)
            if found is None:  # the nccl-tests size and bus factor depend on these only
                name = kind_name(kind, ctype)
                found = factors[fk] = (name, nccl_tests_size(name, nbytes, p), bus_factor(name, p))
            name, size, factor = found
            s, e = xs[fid], xe[fid]
            t = e - s
            alg_bw = size / t if t > 0 else None
            tk = timing[(fid, p)] = (
                name,
                algorithms[fid],
                s,
                e,
                t,
                alg_bw,
                alg_bw * factor if alg_bw is not None else None,
            )
        name, algorithm, s, e, t, alg_bw, bus_bw = tk
        tables = tables_of.get(id(members))  # one members tuple per group: its members' id tables looked up once
        if tables is None or tables[0] is not members:
            tables = tables_of[id(members)] = (members, [comm_ids[m] for m in members])
        node_ids = tuple(map(_GET, tables[1], positions))
        if fast_rows:  # all fields set at once: a frozen __init__ costs one object.__setattr__ per field
            row = new_row(CollectiveRow)
            set_attr(
                row,
                "__dict__",
                {
                    "index": u,
                    "kind": name,
                    "comm_bytes": nbytes,
                    "pg_name": pg,
                    "ranks": members,
                    "node_ids": node_ids,
                    "algorithm": algorithm,
                    "start_ns": s,
                    "end_ns": e,
                    "time_ns": t,
                    "algbw_gbps": alg_bw,
                    "busbw_gbps": bus_bw,
                },
            )
        else:  # pragma: no cover - CollectiveRow changed shape
            row = CollectiveRow(u, name, nbytes, pg, members, node_ids, algorithm, s, e, t, alg_bw, bus_bw)
        rows.append(row)
    return rows


def _member_schedules(
    program: "ReplayProgram",
    sched: "Schedule",
    traceset: "TraceSet",
    plan: FoldPlan,
    xfer_start_of_node: npt.NDArray[np.float64],
    member_inst: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]],
) -> tuple[RankSchedule, ...]:
    """Per-rank schedules: the representative's arrays, the member's instance numbers."""
    lay_of = {lay.rank: lay for lay in program.layouts}
    rep = plan.rep_of.tolist()
    schedules = []
    names_of = {r: schedule_names(traceset, r) for r in plan.reps}
    for m in range(len(rep)):
        lay = lay_of[rep[m]]
        inst_m = np.full(lay.n, -1, dtype=np.int64)
        pairs = member_inst.get(m)
        if pairs is not None:
            inst_m[pairs[0]] = pairs[1]
        schedules.append(rank_schedule(m, lay, sched, xfer_start_of_node, inst_m, *names_of[rep[m]]))
    return tuple(schedules)


def _folded_critical_path(
    program: "ReplayProgram",
    sched: "Schedule",
    traceset: "TraceSet",
    plan: FoldPlan,
    member_inst: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]],
) -> CriticalPath:
    """:func:`tracekit.replayer.results.build._critical_path` of the unfolded job, walked on the folded schedule.

    The walk keeps the actual rank it is on; at a communication it moves to
    the first member (in the unfolded instance's member order) that arrived
    last, exactly as the unfolded walk does, and reads that member's times at
    its representative.
    """
    if program.n == 0:
        return CriticalPath((), 0, 0, 0)
    kind = program.kind
    reason = sched.reason.tolist()
    start = sched.start_ns
    instance_of = program.instance_of
    offset = {lay.rank: lay.offset for lay in program.layouts}
    lay_of = {lay.rank: lay for lay in program.layouts}
    rep = plan.rep_of.tolist()
    u_at: dict[int, dict[int, int]] = {}
    g = int(np.argmax(sched.end_ns))
    lay, p = program.locate(g)
    a = lay.rank
    raw: list[tuple[int, int, str, int, int]] = []  # (rank, position, category, start ns, end ns)
    while g >= 0:
        k = kind[g]
        if k >= K_COLL and instance_of[g] >= 0:
            if a not in u_at:
                pos_u = member_inst.get(a)
                u_at[a] = {} if pos_u is None else dict(zip(pos_u[0].tolist(), pos_u[1].tolist()))
            u = u_at[a][p]
            _, _, _, _, members, positions, fid = plan.unfolded[u]
            t = sched.xfer_start_ns[fid]
            for m, q in zip(members, positions):
                if start[offset[rep[m]] + q] == t:
                    break
            else:  # pragma: no cover - the last arrival always matches
                m, q = members[0], positions[0]
            raw.append((m, q, "comm", int(t), int(sched.xfer_end_ns[fid])))
            a, p = m, q
            g = reason[offset[rep[a]] + p]
        else:
            if k == K_TIMED:
                raw.append((a, p, "compute", int(sched.start_ns[g]), int(sched.end_ns[g])))
            g = reason[g]
        if g >= 0:
            p = g - offset[rep[a]]
    raw.reverse()
    names_cache: dict[int, list[str]] = {}
    steps = []
    compute = comm = 0
    for a, p, category, s, e in raw:
        r = rep[a]
        if r not in names_cache:
            names_cache[r] = traceset[r].columns().names
        steps.append(PathStep(a, int(lay_of[r].ids[p]), names_cache[r][p], category, s, e))
        if category == "compute":
            compute += e - s
        else:
            comm += e - s
    return CriticalPath(tuple(steps), compute + comm, compute, comm)


def replay_folded(
    traceset: "TraceSet",
    fitted: "HardwareSpec",
    options: "ReplayOptions",
    plan: FoldPlan,
    *,
    world_paths: tuple[str | None, ...] | None = None,
    say: Any = None,
    perturb: Any = None,
) -> "ReplayResult":
    """Simulate the plan's representatives and expand to every rank.

    ``traceset`` needs the representatives' traces only; ``say``: progress (``say(stage, done, total)``, see
    :func:`.run.replay`); ``perturb``: a foldable :class:`~.perturb.Perturbation` (the plan's classes split by
    :func:`.perturb.split_classes`).  Returns the :class:`~.results.ReplayResult` (with ``folding`` set).
    """
    from tracekit.replayer.simulation.interference import simulate_with_interference
    from tracekit.replayer.simulation.perturb import apply_perturbation
    from tracekit.replayer.simulation.program import compile_program

    program = compile_program(traceset, fitted, options, plan=plan)
    program = program if perturb is None else apply_perturbation(program, perturb)
    n_reps, n_ranks, model = len(program.layouts), len(plan.rep_of), program.model_name
    log.info("replaying %d nodes of %d representative ranks for %d ranks (%s, %s model)", program.n, n_reps, n_ranks,
             fitted.name, model)  # fmt: skip
    program, schedule = simulate_with_interference(program, say, options.collective_model)
    if say is not None:
        say(f"expanding {len(program.layouts)} representative ranks to {len(plan.rep_of)}")
    return expand_result(program, schedule, traceset, plan, world_paths=world_paths, summary=options.summary)
