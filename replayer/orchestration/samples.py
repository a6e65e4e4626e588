"""N seeded perturbed replays of one job: the step-time distribution and the ranks it waited on (issue 30.3).

:func:`sample_replays` reads and compiles the job once per worker, then simulates it once per seed with
:func:`~tracekit.replayer.simulation.perturb.apply_perturbation` (seed ``perturb.seed + i`` for sample ``i``), so
a sample costs one simulation, not a replay.  Samples are split into one chunk per worker and run in this process,
a local process pool or Ray (:func:`tracekit.parallel.parallel_map`; workers re-read the job from its files, so
those two need a path, not a trace set in memory).  The result is the same whatever the executor.

Per sample: the step time (the last node's end, ns) and, per communication with at least two members, the member
that arrived last when it arrived strictly after another one (the one the others waited on).  Percentiles are
numpy's linear interpolation (``numpy.percentile``, method "linear").
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.perturb import Perturbation
    from tracekit.replayer.simulation.program import ReplayOptions, ReplayProgram

__all__ = ["SampleSummary", "sample_replays"]


@dataclass(frozen=True)
class SampleSummary:
    """The distribution of N perturbed replays.

    Attributes:
        step_ns: per sample (in seed order), the step (iteration) time, ns.
        waited_on: ``((rank, communications it arrived last at), ...)``, most first, summed over the samples.
        communications: communications with >= 2 members per sample.
        seconds: wall time of :func:`sample_replays`.
    """

    step_ns: tuple[float, ...]
    waited_on: tuple[tuple[int, int], ...]
    communications: int
    seconds: float

    def percentile_ns(self, q: float) -> float:
        """The ``q``-th percentile (0-100) of the step times, ns (linear interpolation)."""
        return float(np.percentile(np.asarray(self.step_ns), q))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: samples, median/p90/p99/min/max ns, per-sample steps, waited-on ranks."""
        return {
            "samples": len(self.step_ns),
            "median_ns": self.percentile_ns(50),
            "p90_ns": self.percentile_ns(90),
            "p99_ns": self.percentile_ns(99),
            "min_ns": min(self.step_ns),
            "max_ns": max(self.step_ns),
            "step_ns": list(self.step_ns),
            "communications_per_sample": self.communications,
            "waited_on": [{"rank": r, "count": c} for r, c in self.waited_on],
            "seconds": self.seconds,
        }


def _load(source: Any):
    """The whole job: a TraceSet as it is, a class set expanded, else rank files read."""
    from tracekit.sets.classset import ClassSet, find_class_set
    from tracekit.io import read_traceset
    from tracekit.sets.traceset import TraceSet

    if isinstance(source, TraceSet):
        return source
    classes = source if isinstance(source, ClassSet) else find_class_set(source)
    return classes.to_traceset() if classes is not None else read_traceset(source)


def _waited_on(program: "ReplayProgram", start_ns: np.ndarray, last: np.ndarray, counts: Counter) -> int:
    """Add each communication's last arrival (when someone waited for it) to ``counts``; the communications seen."""
    seen = 0
    for i, inst in enumerate(program.instances):
        nodes = inst.nodes
        if len(nodes) < 2 or last[i] < 0 or min(nodes) < 0:
            continue
        seen += 1
        arrivals = start_ns[nodes]
        if arrivals.max() > arrivals.min():
            counts[program.rank_of(int(last[i]))] += 1
    return seen


def _chunk(args: tuple) -> tuple[list[float], dict[int, int], int]:
    """One worker: compile the job once, simulate it for each seed (module doc)."""
    from tracekit.replayer.simulation.interference import simulate_with_interference
    from tracekit.replayer.simulation.perturb import apply_perturbation
    from tracekit.replayer.simulation.program import compile_program
    from tracekit.replayer.simulation.run import checked_spec

    source, spec, options, perturb, seeds = args
    ts = _load(source)
    program = compile_program(ts, checked_spec(ts, spec, options), options)
    steps: list[float] = []
    counts: Counter = Counter()
    seen = 0
    for seed in seeds:
        perturbed = apply_perturbation(program, perturb.with_seed(seed))
        perturbed, sched = simulate_with_interference(perturbed, None, options.collective_model)
        steps.append(float(np.max(sched.end_ns)) if len(sched.end_ns) else 0.0)
        seen = _waited_on(perturbed, sched.start_ns, sched.last_arrival, counts)
    return steps, dict(counts), seen


def sample_replays(
    source: Any,
    spec: Any,
    perturb: "Perturbation",
    samples: int,
    *,
    options: "ReplayOptions | None" = None,
    executor: str = "serial",
    workers: int | None = None,
    address: str | None = None,
) -> SampleSummary:
    """``samples`` replays of ``source`` on ``spec`` under ``perturb`` with seeds ``perturb.seed + 0 .. samples-1``.

    Args:
        source: a TraceSet (serial only), rank files or a class set (a path, as :func:`tracekit.replayer.replay`).
        spec: a HardwareSpec, preset name or TOML path.
        executor: ``serial``, ``process`` or ``ray`` (:func:`tracekit.parallel.parallel_map`).

    Raises:
        ConfigError: ``samples`` < 1, or a trace set in memory with another executor than serial.
        as :func:`tracekit.replayer.replay` (checks, spec, deadlock).
    """
    from tracekit.parallel import default_workers, parallel_map
    from tracekit.replayer.simulation.hardware import HardwareSpec
    from tracekit.replayer.simulation.specs import load_spec
    from tracekit.replayer.simulation.program import ReplayOptions
    from tracekit.sets.traceset import TraceSet

    if samples < 1:
        raise ConfigError(f"--samples needs at least 1 sample, got {samples}")
    if isinstance(source, TraceSet) and executor != "serial":
        raise ConfigError("samples of a trace set in memory run serially; give rank files for a pool or Ray")
    t0 = time.perf_counter()
    options = options or ReplayOptions()
    spec = spec if isinstance(spec, HardwareSpec) else load_spec(spec)
    seeds = [perturb.seed + i for i in range(samples)]
    n_chunks = 1 if executor == "serial" else min(samples, workers or default_workers())
    chunks = [seeds[k::n_chunks] for k in range(n_chunks)]
    parts = parallel_map(
        _chunk,
        [(source, spec, options, perturb, c) for c in chunks],
        executor=executor,
        max_workers=workers,
        ray_address=address,
    )
    by_seed: dict[int, float] = {}
    counts: Counter = Counter()
    seen = 0
    for c, (steps, part_counts, part_seen) in zip(chunks, parts):
        by_seed.update(zip(c, steps))
        counts.update(part_counts)
        seen = max(seen, part_seen)
    waited = tuple(sorted(counts.items(), key=lambda rc: (-rc[1], rc[0])))
    return SampleSummary(tuple(by_seed[s] for s in seeds), waited, seen, time.perf_counter() - t0)
