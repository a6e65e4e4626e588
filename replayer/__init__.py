"""tracekit.replayer: replay a trace set on a hardware spec.

Example::

    from tracekit.io import read_traceset
    from tracekit.replayer import ReplayOptions, replay

    result = replay(read_traceset("out/job"), "dgx-h100", options=ReplayOptions(compute_scale=0.5))
    print(result.iteration_time_ns, result.critical_path.comm_ns)

Modules: :mod:`.hardware` (specs, presets), :mod:`.placement`,
:mod:`.collectives` / :mod:`.astra_model` / :mod:`.nccl_model` (communication
costs), :mod:`.compute` (compute costs), :mod:`.checks` (up-front checks),
:mod:`._program` (compiling a trace set), :mod:`.engine` (the simulation),
:mod:`.deadlock` (stall reports), :mod:`.results` (what a replay reports),
:mod:`.timeline` (Chrome trace / Perfetto output).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from tracekit.replayer._program import ReplayOptions
from tracekit.replayer.results import ReplayResult

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.hardware import HardwareSpec
    from tracekit.traceset import TraceSet

log = logging.getLogger(__name__)

__all__ = ["ReplayOptions", "ReplayResult", "replay"]


def replay(traceset: "TraceSet", spec: "HardwareSpec | str | os.PathLike[str]", *,
           options: ReplayOptions | None = None) -> ReplayResult:
    """Simulate one iteration of ``traceset`` on ``spec``.

    Args:
        traceset: the job, one trace per rank (ranks 0..n-1).
        spec: a :class:`~tracekit.replayer.hardware.HardwareSpec`, a preset
            name (``dgx-h100``) or a TOML path.
        options: see :class:`ReplayOptions` (default: the spec's models, the
            trace's streams, checks on).

    Returns:
        the :class:`~tracekit.replayer.results.ReplayResult`; same inputs,
        same result to the bit.

    Raises:
        SpecError: unknown preset, bad spec, or a spec that cannot have the
            trace set's number of ranks.
        ReplayCheckError: the up-front checks failed (see :mod:`.checks`).
        ValidationError: a trace is structurally broken (with checks off).
        DeadlockError: the replay stalled; per rank, what it is blocked on.
    """
    from tracekit.replayer._program import compile_program, effective_spec
    from tracekit.replayer.checks import check_complete, check_replay_inputs, check_spec_size
    from tracekit.replayer.engine import simulate
    from tracekit.replayer.hardware import HardwareSpec, load_spec
    from tracekit.replayer.results import build_result

    options = options or ReplayOptions()
    if not isinstance(spec, HardwareSpec):
        spec = load_spec(spec)
    check_complete(traceset.ranks, traceset.world_size)
    if options.check:
        check_replay_inputs(traceset, spec)
    else:
        check_spec_size(traceset, spec)
    fitted = effective_spec(spec, options, traceset.world_size)
    fold_info = None
    if options.fold:
        from tracekit.replayer.folding import FoldInfo, NotFoldable, plan_folding, replay_folded, scan_rank

        try:
            if len(traceset) != traceset.world_size:
                raise NotFoldable("the trace set is not ranks 0..N-1")
            scans = {r: scan_rank(traceset[r]) for r in traceset.ranks}
            plan = plan_folding(scans, traceset.process_groups, fitted, options)
        except NotFoldable as exc:
            fold_info = FoldInfo(len(traceset), len(traceset), str(exc))
            log.info("not folding: %s", exc)
        else:
            return replay_folded(traceset, fitted, options, plan)
    program = compile_program(traceset, fitted, options)
    log.info("replaying %d nodes on %d ranks (%s, %s model)", program.n, len(program.layouts), fitted.name,
             program.model_name)
    schedule = simulate(program)
    result = build_result(program, schedule, traceset, consume=True)
    if fold_info is not None:
        from dataclasses import replace

        result = replace(result, folding=fold_info)
    return result
