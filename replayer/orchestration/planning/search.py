"""The layout search of ``tracekit plan``: enumerate, prune by memory, order by bound, simulate, rank.

1. :func:`~.enumerate.enumerate_layouts` lists every layout the divisibility rules allow.
2. Memory (:func:`tracekit.workloads.memory.job_memory`, Korthikanti et al. 2022 activations, ZeRO model
   states): a layout whose largest rank class needs more than ``max_memory_fraction`` of the device's memory
   is pruned before any simulation, with its peak and its largest term.  A ZeRO-2 layout is *dominated* when
   the same layout under ZeRO-1 fits: the generator writes the same trace for both (they differ in memory only).
3. Bounds (:mod:`.bounds`): every remaining layout gets a lower bound on its step time; candidates are
   simulated in bound order (:func:`.simulate.simulate_layout`, ``slots`` at a time on the local process pool
   or Ray) and a candidate whose bound is no better than the ``keep``-th best simulated time is pruned with
   every later one (they cannot enter the top ``keep``).
4. The result (:class:`PlanResult`) ranks the simulated layouts by step time and keeps every pruned one with
   its reason (the page's greyed points).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from tracekit.errors import ConfigError, TracekitError
from tracekit.replayer.orchestration.planning.enumerate import KnobSpace, Layout, enumerate_layouts

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.orchestration.planning.bounds import Bound
    from tracekit.replayer.orchestration.planning.simulate import Simulated
    from tracekit.replayer.simulation.hardware import HardwareSpec
    from tracekit.workloads.config import LLMConfig

GIB = float(1 << 30)
#: Statuses of a candidate, in the order tables list them.
STATUSES = ("simulated", "bound", "memory", "dominated")


@dataclass(frozen=True)
class Candidate:
    """One layout the search looked at.

    Attributes:
        layout: the layout.
        status: ``simulated``, ``bound`` (pruned: its bound cannot beat the kept times), ``memory`` (pruned:
            does not fit) or ``dominated`` (pruned: the same trace with less memory exists).
        reason: why it was pruned ("" when simulated).
        peak_bytes: the largest rank class's device memory (:attr:`~tracekit.workloads.memory.StageMemory.
            device_bytes`), bytes; peak_stage: that class's pipeline stage.
        bound: its :class:`~.bounds.Bound` (None when pruned before bounds).
        simulated: its replayed figures (None unless simulated).
    """

    layout: Layout
    status: str
    reason: str
    peak_bytes: int
    peak_stage: int
    bound: "Bound | None" = None
    simulated: "Simulated | None" = None


@dataclass(frozen=True)
class Generator:
    """The workload generator the search times layouts with (handed in: the replayer does not import the
    converters; the CLI passes :mod:`tracekit.converters.generators.llm_plan`'s functions).

    Attributes:
        blocks: ``(job, spec) -> (Plan, cost model)``: the op blocks with calibrated durations (for bounds).
        write: ``(job, spec, prefix) -> None``: writes the job as a rank-class set (for simulations; a
            picklable module-level function: it runs in the pool's workers).
    """

    blocks: Callable[["LLMConfig", Any], tuple[Any, Any]]
    write: Callable[["LLMConfig", Any, str], None]


@dataclass(frozen=True)
class PlanRequest:
    """What to plan.

    Attributes:
        base: the job (model, global batch, stack, buckets); its parallel layout is ignored.
        model_name: how ``generate llm --model`` names the model (for the command line printed).
        gpus: GPUs of the job.
        spec: the machine; spec_name: how ``--hw`` named it.
        space: candidate values per knob.
        max_memory_fraction: the share of the device memory a rank may use, in (0, 1].
        keep: how many of the fastest layouts the bounds keep (a layout is pruned against the keep-th best time).
        gap: the relative optimality gap of the search, in [0, 1): a layout whose bound is at least ``(1 - gap)``
            times the keep-th best simulated time is pruned, so the chosen layout is within ``gap`` of the
            fastest of all (every pruned layout takes at least its bound); 0 = exact.
        price_per_gpu_hour_usd: the spec's price (``price_per_gpu_hour_usd`` in its TOML file), or None.
    """

    base: "LLMConfig"
    model_name: str
    gpus: int
    spec: "HardwareSpec"
    spec_name: str
    space: KnobSpace = field(default_factory=KnobSpace)
    max_memory_fraction: float = 1.0
    keep: int = 1
    gap: float = 0.05
    price_per_gpu_hour_usd: float | None = None


@dataclass
class PlanResult:
    """The search's outcome (module doc).

    Attributes:
        request: what was planned.
        device: the device's key; device_memory_bytes: its memory; cap_bytes: the share a rank may use.
        peak_flops_per_s: the device's peak in the job's precision (MFU's denominator).
        enumerated: layouts the divisibility rules allowed; rejected: combinations they removed, by reason.
        candidates: every enumerated layout once, simulated ones first by step time, then the pruned ones.
        wall_s: the search's wall time, seconds.
        executor: where the simulations ran.
        best_prefix: the ``-o`` of :meth:`generate_command` (``tracekit plan -o DIR`` sets ``DIR/best``).
    """

    request: PlanRequest
    device: str
    device_memory_bytes: int
    cap_bytes: int
    peak_flops_per_s: float
    enumerated: int
    rejected: dict[str, int]
    candidates: list[Candidate]
    wall_s: float = 0.0
    executor: str = "process"
    best_prefix: str = "plan/best"

    def with_status(self, status: str) -> list[Candidate]:
        """The candidates of one status, in result order."""
        return [c for c in self.candidates if c.status == status]

    @property
    def ranked(self) -> list[Candidate]:
        """The simulated candidates, fastest first."""
        return self.with_status("simulated")

    @property
    def best(self) -> Candidate:
        """The fastest simulated layout."""
        return self.ranked[0]

    def figures(self, c: Candidate) -> dict[str, float]:
        """A simulated candidate's figures: step time (s), tokens/s, TFLOP/s per GPU, MFU, peak memory and
        headroom per rank (GiB), exposed communication and idle time of the slowest rank (s)."""
        sim, bound, base = c.simulated, c.bound, self.request.base
        if sim is None or bound is None:
            raise ConfigError(f"layout {c.layout.label} was not simulated ({c.reason})")
        step_s = sim.step_ns / 1e9
        tflops = bound.model_flops / step_s / self.request.gpus / 1e12
        return {
            "step_s": step_s,
            "tokens_per_s": base.global_batch_size * base.model.seq_length / step_s,
            "tflops_per_gpu": tflops,
            "mfu": tflops * 1e12 / self.peak_flops_per_s,
            "peak_memory_gib": c.peak_bytes / GIB,
            "headroom_gib": (self.cap_bytes - c.peak_bytes) / GIB,
            "exposed_comm_s": sim.exposed_comm_ns / 1e9,
            "bubble_s": sim.idle_ns / 1e9,
            "compute_s": sim.compute_ns / 1e9,
            "bound_s": bound.step_ns / 1e9,
            **self._cost(step_s),
        }

    def _cost(self, step_s: float) -> dict[str, float]:
        """``usd_per_step`` and ``usd_per_million_tokens`` at the spec's price (none without one)."""
        price = self.request.price_per_gpu_hour_usd
        if price is None:
            return {}
        usd = step_s * self.request.gpus * price / 3600
        tokens = self.request.base.global_batch_size * self.request.base.model.seq_length
        return {"usd_per_step": usd, "usd_per_million_tokens": usd / tokens * 1e6}

    def generate_command(self, c: Candidate) -> str:
        """The ``tracekit generate llm`` command line that writes ``c``'s job as a class set."""
        base = self.request.base
        args = ["tracekit", "generate", "llm", "--model", self.request.model_name]
        args += ["--global-batch", str(base.global_batch_size), "--seq", str(base.model.seq_length)]
        args += c.layout.generate_args() + ["--hw", self.request.spec_name, "--classes", "-o", self.best_prefix]
        return " ".join(args)

    def counts(self) -> dict[str, int]:
        """Layouts per status, plus ``enumerated``."""
        out = {"enumerated": self.enumerated}
        out.update({s: len(self.with_status(s)) for s in STATUSES})
        return out


def _states_floor(config: "LLMConfig") -> tuple[int, int]:
    """``(device bytes, stage)`` of the larger of the first and last stage's model states alone (ZeRO
    sharding applied; no activations or buffers) with the allocator margin and runtime: a floor of its peak
    that needs no walk of the schedule (:func:`tracekit.workloads.memory.zero_model_states`)."""
    from tracekit.workloads.memory import (
        ADAM_K_FP32,
        ADAM_K_MIXED,
        ALLOCATOR_MARGIN,
        RUNTIME_RESERVED_BYTES,
        stage_units,
        zero_model_states,
    )
    from tracekit.workloads.params import unit_params

    p = config.parallel
    k = ADAM_K_FP32 if config.dtype in ("fp32", "tf32") else ADAM_K_MIXED
    kw = {"param_bytes": config.dtype_bytes, "grad_bytes": config.grad_bytes, "optimizer_bytes_per_param": k}
    best = (0, 0)
    for stage in sorted({0, p.pp - 1}):
        params = [unit_params(config.model, u, p.tp, p.pp, p.ep) for u in stage_units(config, stage)]
        dense, expert = sum(x.dense for x in params), sum(x.expert for x in params)
        total = zero_model_states(dense, p.dp * p.cp, p.zero_stage, **kw).total_bytes
        if expert:
            total += zero_model_states(expert, max(p.dp * p.cp // p.ep, 1), p.zero_stage, **kw).total_bytes
        best = max(best, (int(total * (1 + ALLOCATOR_MARGIN)) + RUNTIME_RESERVED_BYTES, stage))
    return best


def _memory(config: "LLMConfig", cap: int) -> tuple[int, int, str, int]:
    """``(peak device bytes, its stage, its largest term, that term's bytes)`` of a job; when the model states
    alone exceed ``cap``, their floor (:func:`_states_floor`) and ``model states`` (the schedule is not walked).

    Only the first and the last stage are walked: a middle stage holds no more layers than they do, neither the
    embedding nor the head, no more micro-batches in flight than the first stage (1F1B and interleaved
    schedules hold ``pp - stage`` warm-up passes), and the same buffers, so the job's peak is one of theirs
    (``tests/replayer/test_plan.py`` compares with :func:`~tracekit.workloads.memory.job_memory`).
    """
    from tracekit.workloads.memory import stage_memory

    floor, floor_stage = _states_floor(config)
    if floor > cap:
        return floor, floor_stage, "model states", floor
    stages = {0, config.parallel.pp - 1}
    worst = max((stage_memory(config, s) for s in sorted(stages)), key=lambda m: (m.device_bytes, -m.stage))
    term, size = max(worst.terms().items(), key=lambda kv: kv[1])
    return worst.device_bytes, worst.stage, term, size


def _prune_memory(request: PlanRequest, layouts: list[Layout], cap: int) -> tuple[list[Candidate], list[Candidate]]:
    """``(fitting, pruned)`` candidates (module doc, step 2)."""
    fits: list[Candidate] = []
    pruned: list[Candidate] = []
    fitting: set[Layout] = set()
    for layout in layouts:
        peak, stage, term, size = _memory(layout.config(request.base), cap)
        if peak > cap:
            at_least = "at least " if term == "model states" else ""
            why = (
                f"needs {at_least}{peak / GIB:.1f} GiB on stage {stage} > {cap / GIB:.1f} GiB "
                f"(largest: {term} {size / GIB:.1f})"
            )
            pruned.append(Candidate(layout, "memory", why, peak, stage))
        else:
            fits.append(Candidate(layout, "", "", peak, stage))
            fitting.add(layout)
    kept: list[Candidate] = []
    for c in fits:
        if c.layout.zero == 2 and _replace(c.layout, zero=1) in fitting:
            pruned.append(_with(c, status="dominated", reason="same trace as its ZeRO-1 layout, which fits"))
        else:
            kept.append(c)
    return kept, pruned


def _replace(layout: Layout, **changes: Any) -> Layout:
    import dataclasses

    return dataclasses.replace(layout, **changes)


def _with(c: Candidate, **changes: Any) -> Candidate:
    import dataclasses

    return dataclasses.replace(c, **changes)


def _no_fit_message(request: PlanRequest, pruned: list[Candidate], cap: int, device: str) -> str:
    """The one line for a model that fits in no layout: the smallest peak and its largest term."""
    least = min(pruned, key=lambda c: c.peak_bytes)
    return (
        f"{request.base.model.name} fits in none of the {len(pruned)} layouts of {request.gpus} GPUs on {device} "
        f"({cap / GIB:.1f} GiB per rank): the smallest peak, {least.layout.label}, {least.reason}"
    )


def _device(request: PlanRequest) -> tuple[str, int, float]:
    """``(device key, memory bytes, peak FLOP/s in the job's dtype)``.

    Raises:
        ConfigError: the spec's device records no memory (nothing to prune against).
    """
    from tracekit.costs.devices import device_model

    model = device_model(request.spec)
    if not model.memory_bytes:
        raise ConfigError(
            f"--hw {request.spec_name}: device {request.spec.device.name} records no memory in tracekit/devices.toml"
        )
    names = [n for n, _ in request.spec.device.peak_flops_per_s]
    dtype = request.base.dtype
    return model.key, int(model.memory_bytes), request.spec.device.peak(dtype if dtype in names else None)


def plan_layouts(
    request: PlanRequest,
    generator: Generator,
    *,
    executor: str = "process",
    workers: int | None = None,
    address: str | None = None,
    progress: Callable[[int, int, int], None] | None = None,
    bound_all: bool = False,
) -> PlanResult:
    """Search ``request``'s layouts (module doc).

    Args:
        generator: how layouts are bounded and written (:class:`Generator`).
        executor: ``process`` (default), ``serial`` or ``ray``; workers: simulations at once (default: the CPU
            count, at most 8); address: a running Ray cluster.
        progress: ``progress(simulated, pruned, left)`` after every change.
        bound_all: also bound the layouts pruned by memory or dominated, so a page can draw every layout at a
            time (costs about a millisecond per layout).

    Raises:
        ConfigError: no layout divides the GPUs (names the most frequent rule), no layout fits the memory (names
            the smallest peak and its largest term), a bad memory fraction, or a device without memory.
        TracekitError: a simulation that fails (the layout prepended to its message).
    """
    from tracekit.parallel import default_workers

    t0 = time.perf_counter()
    if not 0 < request.max_memory_fraction <= 1:
        raise ConfigError(f"--max-memory-fraction must be in (0, 1], got {request.max_memory_fraction}")
    if not 0 <= request.gap < 1:
        raise ConfigError(f"--gap must be in [0, 1), got {request.gap}")
    device, memory_bytes, peak = _device(request)
    cap = int(memory_bytes * request.max_memory_fraction)
    per_node = request.spec.network[0].size
    found = enumerate_layouts(request.base, request.gpus, per_node, request.space)
    if not found.layouts:
        raise ConfigError(_no_layout_message(request, found.rejected))
    fits, pruned = _prune_memory(request, found.layouts, cap)
    if not fits:
        raise ConfigError(_no_fit_message(request, [c for c in pruned if c.status == "memory"], cap, device))
    simulated, bound_pruned = _branch_and_bound(
        request, generator, fits, len(pruned), executor, workers or default_workers(), address, progress
    )
    simulated.sort(key=lambda c: (c.simulated.step_ns if c.simulated else 0, c.layout))
    bound_pruned.sort(key=lambda c: (_bound_ns(c), c.layout))
    if bound_all:
        from tracekit.replayer.orchestration.planning.bounds import BoundModel

        model = BoundModel(request.base, request.spec, generator.blocks)
        pruned = [_with(c, bound=model.bound(c.layout)) for c in pruned]
    pruned.sort(key=lambda c: (c.status, c.peak_bytes, c.layout))
    return PlanResult(
        request,
        device,
        memory_bytes,
        cap,
        peak,
        len(found.layouts),
        dict(found.rejected.most_common()),
        simulated + bound_pruned + pruned,
        time.perf_counter() - t0,
        executor,
    )


def _no_layout_message(request: PlanRequest, rejected: Any) -> str:
    """The one line for a GPU count no layout divides."""
    what = f"no layout of {request.base.model.name} with global batch {request.base.global_batch_size}"
    if not rejected:
        return f"{what} on {request.gpus} GPUs matches the fixed knobs"
    reason, count = rejected.most_common(1)[0]
    return f"{what} divides {request.gpus} GPUs: most often ({count} of {sum(rejected.values())}): {reason}"


def _branch_and_bound(
    request: PlanRequest,
    generator: Generator,
    fits: list[Candidate],
    pruned_before: int,
    executor: str,
    workers: int,
    address: str | None,
    progress: Callable[[int, int, int], None] | None,
) -> tuple[list[Candidate], list[Candidate]]:
    """Simulate in bound order, pruning against the ``keep``-th best time; ``(simulated, pruned by bound)``."""
    from tracekit.replayer.orchestration.planning.bounds import BoundModel
    from tracekit.replayer.orchestration.planning.pool import TaskPool
    from tracekit.replayer.orchestration.planning.simulate import simulate_layout

    model = BoundModel(request.base, request.spec, generator.blocks)
    queue = sorted((_with(c, bound=model.bound(c.layout)) for c in fits), key=lambda c: (_bound_ns(c), c.layout))
    queue.reverse()  # pop() takes the smallest bound
    done: list[Candidate] = []
    pruned: list[Candidate] = []
    times: list[int] = []
    keep = max(1, request.keep)

    def tell() -> None:
        if progress is not None:
            progress(len(done), pruned_before + len(pruned), len(queue))

    with TaskPool(simulate_layout, executor, workers, address) as pool:
        tell()
        while queue or pool.busy:
            while queue and pool.free:
                if len(times) >= keep and _bound_ns(queue[-1]) >= (1 - request.gap) * times[keep - 1]:
                    pruned.extend(
                        _with(c, status="bound", reason=_bound_reason(c, request, times[keep - 1])) for c in queue
                    )
                    queue.clear()
                    break
                try:
                    c = queue.pop()
                    pool.submit(c, (generator.write, c.layout.config(request.base), request.spec))
                except TracekitError as exc:  # the serial executor runs it here
                    raise _named(exc, pool.last_key) from None
            tell()
            if not pool.busy:
                break
            try:
                c, sim = pool.next_done()
            except TracekitError as exc:
                raise _named(exc, pool.last_key) from None
            done.append(_with(c, status="simulated", simulated=sim))
            times = sorted([*times, sim.step_ns])
        tell()
    return done, pruned


def _named(exc: TracekitError, c: Any) -> TracekitError:
    """``exc`` with the layout whose simulation raised it named first."""
    label = c.layout.label if isinstance(c, Candidate) else "a layout"
    exc.message = f"plan: simulating {label} failed: {exc.message}"
    return exc


def _bound_ns(c: Candidate) -> float:
    """A candidate's bound, ns (0 before bounds are computed)."""
    return c.bound.step_ns if c.bound is not None else 0.0


def _bound_reason(c: Candidate, request: PlanRequest, kth_ns: int) -> str:
    """Why a layout was pruned by its bound."""
    bound = c.bound.step_ns / 1e9 if c.bound is not None else 0.0
    gap = f"(1 - gap {request.gap:g}) x " if request.gap else ""
    return f"bound {bound:.3f} s >= {gap}the {_ordinal(request.keep)} best simulated {kth_ns / 1e9:.3f} s"


def _ordinal(n: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


__all__ = ["STATUSES", "Candidate", "Generator", "PlanRequest", "PlanResult", "plan_layouts"]
