"""tracekit.replayer: replay a trace set on a hardware spec.

Example::

    from tracekit.io import read_traceset
    from tracekit.replayer import ReplayOptions, replay

    result = replay(read_traceset("out/job"), "dgx-h100", options=ReplayOptions(compute_scale=0.5))
    print(result.iteration_time_ns, result.critical_path.comm_ns)

``replay`` also takes rank files or a rank-class set by name (``replay("out/job", "dgx-h100")``), reading one
rank at a time when ranks fold (:mod:`.simulation.run`, the one way in).

Subpackages by concern (docs/architecture.md): :mod:`.simulation` (hardware specs, cost models, the program
compiler, the engine, rank folding), :mod:`.results` (what a replay found, as values), :mod:`.reporting` (HTML
reports, plots, Perfetto timelines, diffs) and :mod:`.orchestration` (sweeps, collective benchmarks, replay with
projected compute). Simulation and results never import reporting or orchestration.
"""

from __future__ import annotations

from tracekit.replayer.results.result import ReplayResult
from tracekit.replayer.simulation.program import ReplayOptions
from tracekit.replayer.simulation.run import replay, replay_with_traces

__all__ = ["ReplayOptions", "ReplayResult", "replay", "replay_with_traces"]
