"""Timing one layout by simulation: generate it as a rank-class set, replay it folded, keep the slowest rank.

:func:`simulate_layout` is the worker of ``tracekit plan``: it writes the layout's job with the LLM generator
exactly as ``tracekit generate llm --hw SPEC --classes`` does (calibrated durations; one trace per pipeline
stage in a temporary folder, removed afterwards), then runs the folded replay of a class set as ``tracekit
replay`` does (:func:`~tracekit.replayer.simulation.gather.gather_class_set`, the folding proof,
:func:`~tracekit.replayer.simulation.program.compile_program`,
:func:`~tracekit.replayer.simulation.interference.simulate_with_interference`) and stops there: a planner needs
the representatives' figures, not the per-rank result tables that :func:`~tracekit.replayer.simulation.
fold_expand.expand_result` builds for every rank (more than half of a GPT-3 175B replay's time).  Every member
of a rank class runs its representative's timeline, so the slowest representative is the slowest rank.

The up-front trace checks are skipped (``ReplayOptions(check=False)``): the generator's output is checked by its
own tests.  When folding cannot be proven the job is replayed whole (:func:`~tracekit.replayer.replay_with_traces`).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.results.result import RankStats
    from tracekit.replayer.simulation.hardware import HardwareSpec
    from tracekit.workloads.config import LLMConfig


@dataclass(frozen=True)
class Simulated:
    """The replayed figures of one layout (ns; the slowest rank's breakdown).

    Attributes:
        step_ns: iteration time.
        compute_ns, comm_ns, exposed_comm_ns: the slowest rank's compute, communication (overlapped or not) and
            communication while no compute runs.
        idle_ns: its time waiting for peers or idle (pipeline bubble, waits for late collectives).
        slowest_rank: that rank.
        simulated_ranks: ranks simulated (the class representatives when folded).
        world_size: ranks of the job.
        wall_s: wall time of generation plus replay in the worker, seconds (not compared).
    """

    step_ns: int
    compute_ns: int
    comm_ns: int
    exposed_comm_ns: int
    idle_ns: int
    slowest_rank: int
    simulated_ranks: int
    world_size: int
    wall_s: float = 0.0


def _figures(stats: "list[RankStats]", simulated: int, world: int, wall_s: float) -> Simulated:
    from tracekit.replayer.results.result import slowest_rank

    slow = slowest_rank(stats)
    return Simulated(
        slow.iteration_time_ns,
        slow.compute_ns,
        slow.comm_ns,
        slow.exposed_comm_ns,
        slow.comm_wait_ns + slow.other_idle_ns,
        slow.rank,
        simulated,
        world,
        wall_s,
    )


def replay_class_set_figures(prefix: str, spec: "HardwareSpec") -> tuple[list["RankStats"], int, int]:
    """``(figures of the simulated ranks, ranks simulated, world size)`` of a class set's folded replay.

    Raises:
        as :func:`tracekit.replayer.replay` (spec too small for the job, deadlock ...).
    """
    from tracekit.sets.classset import find_class_set
    from tracekit.model.groups import resolve_groups
    from tracekit.replayer import replay_with_traces
    from tracekit.replayer.simulation.gather import gather_class_set
    from tracekit.replayer.simulation.folding import NotFoldable, bulk_objects, plan_folding
    from tracekit.replayer.simulation.program import ReplayOptions, compile_program, effective_spec
    from tracekit.sets.traceset import TraceSet

    options = ReplayOptions(check=False)
    classes = find_class_set(prefix)
    if classes is None:
        from tracekit.errors import TraceFormatError

        raise TraceFormatError(f"{prefix}: no rank-class set (its .classes.json) was written")
    try:
        with bulk_objects():
            g = gather_class_set(classes, options, lambda *_: None)
            fitted = effective_spec(spec, options, g.world)
            plan = plan_folding(g.scans, resolve_groups(g.declared, g.world), fitted, options)
            kept = dict(g.kept)
            kept.update({r: g.derive(r) for r in plan.reps if r not in kept and g.derive is not None})
            program = compile_program(TraceSet(kept, process_groups=g.declared), fitted, options, plan=plan)
            return _representative_stats(program), len(plan.reps), g.world
    except NotFoldable:
        result, _ = replay_with_traces(prefix, spec, options=options)
        return list(result.ranks), len(result.ranks), len(result.ranks)


def _representative_stats(program: Any) -> list["RankStats"]:
    """Simulate a compiled (folded) program; each simulated rank's :class:`RankStats`."""
    import numpy as np

    from tracekit.replayer.results.build import _rank_stats, round_schedule
    from tracekit.replayer.simulation.interference import simulate_with_interference

    program, schedule = simulate_with_interference(program, None, None)
    schedule = round_schedule(schedule)
    instance = np.asarray(program.instance_of, dtype=np.int64)
    transfer_start = np.full(program.n, np.nan)
    if len(schedule.xfer_start_ns):
        transfer_start[instance >= 0] = schedule.xfer_start_ns[instance[instance >= 0]]
    return [_rank_stats(lay, schedule, program, transfer_start) for lay in program.layouts]


def simulate_layout(task: tuple[Callable[..., None], "LLMConfig", "HardwareSpec"]) -> Simulated:
    """Worker entry point: ``write(config, spec, prefix)`` writes the job as a class set
    (:func:`tracekit.converters.generators.llm_plan.write_calibrated_classes`), then it is replayed folded
    (module doc).

    Raises:
        ConfigError: the generator refuses the job. TracekitError: the replay fails.
    """
    write, config, spec = task
    t0 = time.perf_counter()
    folder = tempfile.mkdtemp(prefix="tracekit-plan-")
    try:
        prefix = f"{folder}/job"
        write(config, spec, prefix)
        stats, simulated, world = replay_class_set_figures(prefix, spec)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return _figures(stats, simulated, world, time.perf_counter() - t0)


__all__ = ["Simulated", "replay_class_set_figures", "simulate_layout"]
