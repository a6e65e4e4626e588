"""The one way in: :func:`replay` of a trace set, rank files or a rank-class set, folded or not.

Steps, for every kind of input (docs/architecture.md, data flow):

1. the spec (a :class:`~.hardware.HardwareSpec`, a preset name or a TOML path) and the options;
2. with folding on (``ReplayOptions.fold``, the default): the job is read as small per-rank scans
   (:mod:`.gather` for files, :func:`.class_replay.gather_class_set` for class sets; an in-memory set is scanned
   as it is), checked, the folding proven (:func:`.folding.plan_folding`) and the representatives simulated
   (:func:`.folding.replay_folded`); the result is the unfolded one to the bit;
3. otherwise, or when folding cannot be proven: the whole job in memory, checked (:mod:`.checks`), compiled
   (:func:`.program.compile_program`), simulated (:func:`.engine.simulate`), the result built
   (:func:`tracekit.replayer.results.build.build_result`). A fallback from a requested folding is reported: a
   logged warning with the reason, and ``ReplayResult.folding.reason``.
"""

from __future__ import annotations

import logging
import os
from contextlib import nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from tracekit.replayer.results.result import FoldInfo
from tracekit.replayer.simulation.folding import NO_TWIN_RANKS, NotFoldable, bulk_objects
from tracekit.replayer.simulation.program import ReplayOptions

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.results.result import ReplayResult
    from tracekit.replayer.simulation.gather import Gathered
    from tracekit.replayer.simulation.hardware import HardwareSpec
    from tracekit.sets.traceset import TraceSet

log = logging.getLogger("tracekit.replayer")

__all__ = ["replay", "replay_with_traces"]


def replay(
    source: Any,
    spec: "HardwareSpec | str | os.PathLike[str]",
    *,
    options: ReplayOptions | None = None,
    status: Callable[..., None] | None = None,
) -> "ReplayResult":
    """Simulate one iteration of a job on ``spec``.

    Args:
        source: a :class:`~tracekit.sets.traceset.TraceSet` (ranks 0..n-1), a :class:`~tracekit.sets.classset.ClassSet`,
            or what names rank files or a class set on disk (a prefix, glob, directory or manifest:
            :func:`tracekit.io.trace_paths`, :func:`tracekit.sets.classset.find_class_set`).
        spec: a :class:`~tracekit.replayer.simulation.hardware.HardwareSpec`, a preset name (``dgx-h100``) or a
            TOML path.
        options: see :class:`~.program.ReplayOptions` (default: the spec's models, the trace's streams, checks
            and folding on).
        status: progress, called as ``status(stage, done=0, total=None)``: a short description of each stage
            and, where it counts, the units done and the total (None: unknown); the CLI draws it on a terminal.

    Returns:
        the :class:`~tracekit.replayer.results.result.ReplayResult`; same inputs, same result to the bit.

    Raises:
        SpecError: unknown preset, bad spec, or a spec that cannot have the job's number of ranks.
        ReplayCheckError: the up-front checks failed (see :mod:`.checks`).
        ValidationError: a trace is structurally broken (with checks off).
        DeadlockError: the replay stalled; per rank, what it is blocked on.
        TraceFormatError: an unreadable file.
    """
    return replay_with_traces(source, spec, options=options, status=status)[0]


def replay_with_traces(
    source: Any,
    spec: "HardwareSpec | str | os.PathLike[str]",
    *,
    options: ReplayOptions | None = None,
    status: Callable[..., None] | None = None,
    perturb: Any = None,
) -> tuple["ReplayResult", "TraceSet"]:
    """:func:`replay`, and the trace set it kept: the whole job, or the representatives only when folded.

    ``perturb``: a :class:`~.perturb.Perturbation` (slow ranks, delays, link faults, jitter); slow ranks and delays
    fold (a perturbed rank leaves its class), link faults and jitter read the job whole and simulate every rank.

    Raises:
        as :func:`replay`.
    """
    from tracekit.sets.classset import ClassSet, find_class_set
    from tracekit.sets.comm_groups import with_comm_groups
    from tracekit.replayer.simulation.hardware import HardwareSpec
    from tracekit.replayer.simulation.specs import load_spec
    from tracekit.sets.traceset import TraceSet

    options = options or ReplayOptions()
    if not isinstance(spec, HardwareSpec):
        spec = load_spec(spec)
    if perturb is not None and not perturb.active:
        perturb = None
    if isinstance(source, TraceSet):
        source = with_comm_groups(source, dict(options.comm_groups), options.comm_groups_path)
        return replay_traceset(source, spec, options, say=status, perturb=perturb), source
    say = status or _silent
    classes = source if isinstance(source, ClassSet) else find_class_set(source)
    if classes is not None:  # stored as rank classes: replayed without deriving every rank
        load_all: Callable[[], TraceSet] = classes.to_traceset
    else:
        load_all = lambda: with_comm_groups(  # noqa: E731
            _read_shared(source), dict(options.comm_groups), options.comm_groups_path
        )
    from tracekit.replayer.simulation.memory_bound import check_unfolded

    if not options.fold or (perturb is not None and not perturb.foldable):
        check_unfolded(classes if classes is not None else source, None, options.memory_bound_gb)
        say("reading every rank")
        ts = load_all()
        return replay_traceset(ts, spec, options, say=say, perturb=perturb), ts
    try:
        with bulk_objects() if classes is not None else nullcontext():
            if classes is not None:
                from tracekit.replayer.simulation.gather import gather_class_set

                gathered = gather_class_set(classes, options, say)
            else:
                from tracekit.replayer.simulation.gather import gather_files

                gathered = gather_files(source, options, say, one_class=_folds_one_class(spec, options))
            return _replay_gathered(gathered, spec, options, say, perturb)
    except NotFoldable as exc:
        reason = str(exc)
    check_unfolded(classes if classes is not None else source, None, options.memory_bound_gb)
    say("reading every rank")
    ts = load_all()
    result = replay_traceset(ts, spec, replace(options, fold=False), say=say, perturb=perturb)
    _report_fallback(reason)
    return replace(result, folding=FoldInfo(len(ts), len(ts), reason)), ts


def _read_shared(source: Any) -> "TraceSet":
    """The rank files of ``source`` read, identical ones sharing one column table from the start (before the
    comm-group file's merge reads every rank's declared groups), see :mod:`tracekit.wire.sharing`."""
    from tracekit.io import read_traceset
    from tracekit.wire.sharing import share_identical_columns

    ts = read_traceset(source)
    share_identical_columns(ts)
    return ts


def _folds_one_class(spec: "HardwareSpec", options: ReplayOptions) -> bool:
    """True when the collective model folds only a job whose ranks are all one class: ASTRA-sim's (congestion
    unaware) model, where the default group spans every rank (:func:`.folding._astra_foldable`)."""
    return (options.collective_model or spec.collective_model) == "astra"


def _silent(stage: str, done: int = 0, total: int | None = None) -> None:
    """The progress callback when nobody listens."""


def checked_spec(traceset: "TraceSet", spec: "HardwareSpec", options: ReplayOptions) -> "HardwareSpec":
    """Check a whole trace set in memory for a replay on ``spec`` and return the spec fitted to it.

    Raises:
        as :func:`replay` (checks and spec errors).
    """
    from tracekit.replayer.simulation.checks import check_complete, check_replay_inputs, check_spec_size
    from tracekit.replayer.simulation.program import effective_spec
    from tracekit.replayer.simulation.whole_job import check_whole_traceset

    check_complete(
        traceset.ranks, traceset.world_size, file=traceset[traceset.ranks[0]].path if len(traceset) else None
    )
    if options.check:
        check_replay_inputs(traceset, spec)
    else:
        check_spec_size(traceset, spec)
    check_whole_traceset(traceset)
    return effective_spec(spec, options, traceset.world_size)


def replay_traceset(
    traceset: "TraceSet",
    spec: "HardwareSpec",
    options: ReplayOptions,
    *,
    say: Callable[..., None] | None = None,
    perturb: Any = None,
) -> "ReplayResult":
    """:func:`replay` of a trace set in memory on a loaded ``spec`` (``say``: progress, as ``status`` there).

    ``perturb``: a :class:`~.perturb.Perturbation` applied to the compiled program (every rank simulated).

    The cyclic garbage collector is paused meanwhile (:func:`tracekit.gc_pause.paused_gc`): checks, compile and
    simulation allocate millions of acyclic objects, and each full collection their count triggers rescans the
    whole job held in memory, so collections grew faster than the ranks (4,096 ranks of gpt3-1.3b 4 layers tp2
    pp4, unfolded: 8 full collections, 2.4 of 16 CPU s; 256 ranks: one, 0.06 of 1.0 s).
    """
    with bulk_objects():
        return _replay_traceset(traceset, spec, options, say=say, perturb=perturb)


def _replay_traceset(
    traceset: "TraceSet",
    spec: "HardwareSpec",
    options: ReplayOptions,
    *,
    say: Callable[..., None] | None = None,
    perturb: Any = None,
) -> "ReplayResult":
    """:func:`replay_traceset`, the garbage collector paused."""
    from tracekit.replayer.results.build import build_result
    from tracekit.replayer.simulation.fold_expand import replay_folded
    from tracekit.replayer.simulation.folding import scan_rank
    from tracekit.replayer.simulation.attr_pass import kept_attributes
    from tracekit.replayer.simulation.interference import simulate_with_interference
    from tracekit.replayer.simulation.program import compile_program

    plan = None
    with kept_attributes(traceset, spec.compute.mode):  # checks, scans and compile: one attribute search a rank
        fitted = checked_spec(traceset, spec, options)
        reason = None
        if options.fold and (perturb is None or perturb.foldable):
            try:
                if len(traceset) != traceset.world_size:
                    raise NotFoldable("the trace set is not ranks 0..N-1")
                scans = _split({r: scan_rank(traceset[r]) for r in traceset.ranks}, perturb, fitted)
                plan = _plan_folding(scans, traceset.process_groups, fitted, options)
            except NotFoldable as exc:
                reason = str(exc)
        if plan is None:
            program = compile_program(traceset, fitted, options)
    if plan is not None:
        return replay_folded(traceset, fitted, options, plan, say=say, perturb=perturb)
    if perturb is not None:
        from tracekit.replayer.simulation.perturb import apply_perturbation

        program = apply_perturbation(program, perturb)
    log.info(
        "replaying %d nodes on %d ranks (%s, %s model)",
        program.n,
        len(program.layouts),
        fitted.name,
        program.model_name,
    )
    program, schedule = simulate_with_interference(program, say, options.collective_model)
    result = build_result(program, schedule, traceset, consume=True)  # rounded in place (issue 17)
    if reason is None:
        return result
    _report_fallback(reason)
    return replace(result, folding=FoldInfo(len(traceset), len(traceset), reason))


def _split(scans: dict, perturb: Any, fitted: "HardwareSpec") -> dict:
    """The scans with perturbed ranks out of their classes (:func:`.perturb.split_classes`); as they are without."""
    from tracekit.replayer.simulation.perturb import split_classes

    return scans if perturb is None else split_classes(scans, perturb, fitted.network[0].size)


def _replay_gathered(
    g: "Gathered", spec: "HardwareSpec", options: ReplayOptions, say: Callable[..., None], perturb: Any = None
) -> tuple["ReplayResult", "TraceSet"]:
    """Check across ranks, prove the folding and simulate the representatives of a gathered job.

    Raises:
        NotFoldable: groups that do not resolve, a member failing its checks, or no proof (the caller replays
            unfolded).
        ReplayCheckError: the cross-rank checks fail. SpecError: the spec cannot have the job's ranks.
    """
    from tracekit.errors import ValidationError
    from tracekit.model.groups import resolve_groups
    from tracekit.replayer.simulation.checks import ReplayCheckError, check_spec_size
    from tracekit.replayer.simulation.fold_expand import replay_folded
    from tracekit.replayer.simulation.program import effective_spec
    from tracekit.sets.traceset import TraceSet
    from tracekit.checks.validate import cross_rank_checks

    try:
        groups = resolve_groups(g.declared, g.world)
    except ValidationError as exc:
        raise NotFoldable(f"the process groups do not resolve ({exc.message})") from None
    if options.check:
        report = cross_rank_checks([f for f in g.findings if f is not None], groups, g.world)
        if report.errors:
            raise ReplayCheckError(list(report.errors))
    ts = TraceSet(g.kept, process_groups=g.declared)
    check_spec_size(ts, spec, world_size=g.world, ranks=g.spec_ranks)  # before folding: all ranks count
    fitted = effective_spec(spec, options, g.world)
    from tracekit.replayer.simulation.memory_bound import check_folded

    comm_nodes = sum(s.comm_count for s in g.scans.values())
    kept_paths = [str(t.path) for t in g.kept.values() if t.path]
    check_folded(kept_paths, comm_nodes, options.memory_bound_gb, expanded=not options.summary)
    say(f"proving rank folding over {g.world} ranks")
    with bulk_objects():
        plan = _plan_folding(_split(g.scans, perturb, fitted), groups, fitted, options)
    missing = [r for r in plan.reps if r not in g.kept]
    if missing:  # a class set derives them; rank files keep each digest's first rank, not a perturbed one's
        from tracekit.io import read_trace

        derive = g.derive or (lambda r: read_trace(str(g.scans[r].path), rank=r))
        ts = TraceSet({**g.kept, **{r: derive(r) for r in missing}}, process_groups=g.declared)
    paths = tuple(g.scans[r].path for r in range(g.world))
    say(f"compiling {len(plan.reps)} representative ranks")
    with bulk_objects():
        return replay_folded(ts, fitted, options, plan, world_paths=paths, say=say, perturb=perturb), ts


def _plan_folding(scans, groups, spec: "HardwareSpec", options: ReplayOptions):
    """:func:`.folding.plan_folding`, refused (NotFoldable) under ASTRA-sim's congestion-aware network, where the
    messages of every rank queue on links they share (:mod:`.astra_congestion`)."""
    from tracekit.replayer.simulation.folding import plan_folding

    if (options.collective_model or spec.collective_model) == "astra" and spec.astra is not None:
        if spec.astra.network_backend == "congestion_aware":
            raise NotFoldable("ASTRA-sim congestion-aware network: messages of every rank queue on shared links")
    return plan_folding(scans, groups, spec, options)


def _report_fallback(reason: str) -> None:
    """Say that a folded replay was asked for and every rank was simulated instead, and why."""
    if reason == NO_TWIN_RANKS:  # nothing to fold: not a fallback worth a warning
        log.info("not folding: %s", reason)
    else:
        log.warning("rank folding not possible, every rank simulated: %s", reason)
