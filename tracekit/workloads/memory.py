"""Device memory of one rank of a transformer training job: the peak per rank class and whether it fits.

Per pipeline stage (the generator's rank classes: ranks of one stage hold the same sizes) the peak is

``model states + activations at the schedule's peak + communication buffers``, then an allocator margin.

* **Model states** (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
  Parameter Models", section 3 and Figure 1): with ``Psi`` parameters, mixed-precision Adam keeps 16-bit
  parameters (``2 Psi``), 16-bit gradients (``2 Psi``) and ``K Psi`` of optimizer state (fp32 master
  weights, momentum and variance: ``K = 12``).  ZeRO-1 (``P_os``, Megatron-LM's distributed optimizer)
  divides the optimizer state by the ``N_d`` data-parallel ranks: ``2 Psi + 2 Psi + K Psi / N_d``; ZeRO-2
  (``P_os+g``) also the gradients: ``2 Psi + (2 + K) Psi / N_d``; ZeRO-3 (``P_os+g+p``, FSDP's full
  sharding) also the parameters: ``(2 + 2 + K) Psi / N_d``.  The paper's example, ``Psi`` = 7.5B on
  ``N_d`` = 64: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB.  Here the parameter bytes are the training dtype's,
  gradients are kept in the dtype they are reduced in (``grad_reduce_dtype``; Megatron-LM's bf16 runs
  accumulate fp32 ``main_grad``: 18 bytes per parameter, Megatron-LM ``docs/source/distrib_optimizer.md``),
  ``K`` is 12 for 16-bit training and 8 for fp32 (no master copy).  ``Psi`` is the stage's parameters per
  rank (:mod:`.params`: tensor-parallel shards, embedding on the first stage, output layer on the last);
  dense parameters shard over the ``dp x cp`` gradient group, expert parameters over ``dp x cp / ep``.
* **Activations**: :mod:`.activations` (Korthikanti et al. 2022), at the peak of the stage's schedule.
* **Communication buffers** (stated estimates, not from a paper): with ``pp > 1`` the forward and backward
  receive buffers of one micro-batch (``2 t h``); ZeRO-2 one gradient bucket before its reduce-scatter
  (``grad_bucket_bytes``); ZeRO-3 the gathered parameters of two units (the one running and the one
  prefetched) and one unit's unsharded gradients.
* **Allocator margin** (:data:`ALLOCATOR_MARGIN`): PyTorch's caching allocator reserves more than it
  hands out (block rounding and fragmentation); 5 % of the peak, an assumption within the 2-10 % range of
  reserved over allocated memory typically reported for large-model training.  The CUDA context and
  library workspaces (:data:`RUNTIME_RESERVED_BYTES`, 1 GiB, assumed) are outside the allocator.

The peak compared with the device memory (``memory_bytes`` in ``tracekit/costs/devices.toml``) is
``peak_allocated x (1 + margin) + runtime``; :class:`StageMemory` keeps every term so reports can say what
holds the memory.  Measured peaks (a capture's ``[memory]`` events) compare with ``peak_allocated_bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from tracekit.errors import ConfigError
from tracekit.workloads.activations import MASK_BYTES, activation_bytes_per_element, peak_in_flight
from tracekit.workloads.params import unit_params

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.workloads.config import LLMConfig

#: Fraction added to the allocated peak for the caching allocator's rounding and fragmentation (assumed).
ALLOCATOR_MARGIN = 0.05
#: Device memory outside the allocator: CUDA context, cuBLAS / NCCL workspaces (assumed, bytes).
RUNTIME_RESERVED_BYTES = 1 << 30
#: Optimizer state bytes per parameter of mixed-precision Adam (ZeRO paper's ``K``): fp32 master, momentum,
#: variance.
ADAM_K_MIXED = 12
#: Without a master copy (fp32 training): momentum and variance.
ADAM_K_FP32 = 8
GIB = 1 << 30


@dataclass(frozen=True)
class ModelStates:
    """Parameter, gradient and optimizer bytes of one rank (ZeRO paper, section 3)."""

    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int

    @property
    def total_bytes(self) -> int:
        """The three together."""
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes


def zero_model_states(
    num_params: int,
    dp: int,
    zero_stage: int,
    *,
    param_bytes: int = 2,
    grad_bytes: int = 2,
    optimizer_bytes_per_param: int = ADAM_K_MIXED,
) -> ModelStates:
    """Model-state bytes per rank of ``num_params`` parameters on ``dp`` data-parallel ranks at a ZeRO stage.

    ``(2 + 2 + K) Psi`` unsharded; stage 1 divides ``K Psi``, stage 2 also the gradients, stage 3 also the
    parameters by ``N_d = dp`` (Rajbhandari et al. 2020, Figure 1; shards rounded up).

    Raises:
        ConfigError: a stage outside 0-3 or a non-positive ``dp``.
    """
    if zero_stage not in (0, 1, 2, 3) or dp < 1:
        raise ConfigError(f"ZeRO stage must be 0-3 and dp positive, got stage {zero_stage!r}, dp {dp!r}")
    shard = -(-num_params // dp)
    return ModelStates(
        params_bytes=param_bytes * (shard if zero_stage >= 3 else num_params),
        grads_bytes=grad_bytes * (shard if zero_stage >= 2 else num_params),
        optimizer_bytes=optimizer_bytes_per_param * (shard if zero_stage >= 1 else num_params),
    )


@dataclass(frozen=True)
class StageMemory:
    """Peak device memory of the ranks of one pipeline stage (one rank class), bytes.

    Attributes:
        stage: pipeline rank.
        params_bytes, grads_bytes, optimizer_bytes: model states (ZeRO sharding applied).
        activations_bytes: stored activations at the schedule's peak.
        working_bytes: the recomputed layer's tensors at that moment.
        comm_buffer_bytes: pipeline receive buffers, ZeRO buckets and gathered parameters.
        micro_batches_in_flight: passes held at the peak (whole-stage units).
        layers: transformer layers on this stage.
    """

    stage: int
    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    working_bytes: int
    comm_buffer_bytes: int
    micro_batches_in_flight: float
    layers: int

    @property
    def peak_allocated_bytes(self) -> int:
        """Model states + activations + working + buffers: the allocator's peak (``max_memory_allocated``)."""
        return (
            self.params_bytes
            + self.grads_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.working_bytes
            + self.comm_buffer_bytes
        )

    @property
    def margin_bytes(self) -> int:
        """The allocator margin on the peak (:data:`ALLOCATOR_MARGIN`)."""
        return int(self.peak_allocated_bytes * ALLOCATOR_MARGIN)

    @property
    def device_bytes(self) -> int:
        """What the device must hold: allocated peak + margin + :data:`RUNTIME_RESERVED_BYTES`."""
        return self.peak_allocated_bytes + self.margin_bytes + RUNTIME_RESERVED_BYTES

    def terms(self) -> dict[str, int]:
        """Every term by name (bytes), in a fixed order, for tables and JSON."""
        return {
            "params": self.params_bytes,
            "grads": self.grads_bytes,
            "optimizer": self.optimizer_bytes,
            "activations": self.activations_bytes,
            "working": self.working_bytes,
            "comm_buffers": self.comm_buffer_bytes,
            "allocator_margin": self.margin_bytes,
            "runtime": RUNTIME_RESERVED_BYTES,
        }


def stage_units(config: "LLMConfig", stage: int, layers_per_stage: Sequence[int] | None = None) -> list[int]:
    """The units (``-1`` embedding, layers, ``L`` head) stage ``stage`` holds, over all its model chunks.

    By default the generator's own split, :attr:`~tracekit.workloads.config.LLMConfig.chunk_layers`
    (:mod:`.pipeline_split`: even, or Llama 3's one layer fewer on the first and last stage), so the memory
    model and the traces hold the same layers.  ``layers_per_stage`` overrides it (one count per stage; with
    virtual stages each chunk gets ``count / v``); it must sum to the model's layers.
    """
    p, n_layers = config.parallel, config.model.num_layers
    if layers_per_stage is None:
        per_chunk = [len(c) for c in config.chunk_layers]
    else:
        counts = list(layers_per_stage)
        per_chunk = [counts[vs % p.pp] // p.virtual_stages for vs in range(p.pp * p.virtual_stages)]
    units: list[int] = []
    start = 0
    for vs in range(p.pp * p.virtual_stages):
        lpc = per_chunk[vs]
        if vs % p.pp == stage:
            units.extend(range(start, start + lpc))
            if vs == 0:
                units.append(-1)
            if vs == p.pp * p.virtual_stages - 1:
                units.append(n_layers)
        start += lpc
    return units


def _comm_buffers(config: "LLMConfig", unit_elems: Sequence[int]) -> int:
    """Receive buffers, ZeRO-2 bucket, ZeRO-3 gathered parameters and gradients (module docstring)."""
    p, m = config.parallel, config.model
    nbytes = 0
    if p.pp > 1:
        tokens = config.micro_batch_size * m.seq_length // p.cp
        if p.sequence_parallel:
            tokens //= p.tp
        nbytes += 2 * tokens * m.hidden_size * activation_bytes_per_element(config)
    if p.zero_stage == 2:
        nbytes += p.grad_bucket_bytes
    if p.zero_stage == 3 and unit_elems:
        biggest = max(unit_elems)
        nbytes += 2 * biggest * config.dtype_bytes + biggest * config.grad_bytes
    return nbytes


def stage_memory(
    config: "LLMConfig",
    stage: int,
    layers_per_stage: Sequence[int] | None = None,
    mask_bytes: int = MASK_BYTES,
) -> StageMemory:
    """The peak memory of the ranks of pipeline stage ``stage`` (module docstring); ``mask_bytes`` per dropout
    mask element (:data:`~.activations.MASK_BYTES` on GPUs, :data:`~.activations.CPU_EAGER_MASK_BYTES` for
    PyTorch eager on CPU).

    Raises:
        ConfigError: a stage outside the pipeline.
    """
    p = config.parallel
    units = stage_units(config, stage, layers_per_stage)
    dense = expert = 0
    sizes = []
    for unit in units:
        params = unit_params(config.model, unit, p.tp, p.pp, p.ep)
        dense, expert = dense + params.dense, expert + params.expert
        sizes.append(params.dense + params.expert)
    k = ADAM_K_FP32 if config.dtype in ("fp32", "tf32") else ADAM_K_MIXED
    kw = {"param_bytes": config.dtype_bytes, "grad_bytes": config.grad_bytes, "optimizer_bytes_per_param": k}
    group = p.dp * p.cp
    states = [zero_model_states(dense, group, p.zero_stage, **kw)]
    if expert:
        states.append(zero_model_states(expert, max(group // p.ep, 1), p.zero_stage, **kw))
    n_layers = sum(1 for u in units if 0 <= u < config.model.num_layers)
    lpc = None if layers_per_stage is None else n_layers // p.virtual_stages  # None: config.chunk_layers
    acts = peak_in_flight(config, stage, lpc, mask_bytes)
    return StageMemory(
        stage=stage,
        params_bytes=sum(s.params_bytes for s in states),
        grads_bytes=sum(s.grads_bytes for s in states),
        optimizer_bytes=sum(s.optimizer_bytes for s in states),
        activations_bytes=acts.stored_bytes,
        working_bytes=acts.working_bytes,
        comm_buffer_bytes=_comm_buffers(config, sizes),
        micro_batches_in_flight=acts.micro_batches_in_flight,
        layers=n_layers,
    )


def job_memory(config: "LLMConfig", layers_per_stage: Sequence[int] | None = None) -> list[StageMemory]:
    """:func:`stage_memory` of every pipeline stage, stage 0 first."""
    return [stage_memory(config, s, layers_per_stage) for s in range(config.parallel.pp)]


@dataclass(frozen=True)
class MemoryFit:
    """One stage's peak against a device's memory.

    Attributes:
        stage: the stage's :class:`StageMemory`.
        device_memory_bytes: the device's memory (``devices.toml``).
    """

    stage: StageMemory
    device_memory_bytes: int

    @property
    def headroom_bytes(self) -> int:
        """Device memory left at the peak (negative: short by that much)."""
        return self.device_memory_bytes - self.stage.device_bytes

    @property
    def fits(self) -> bool:
        """True when the peak, margin and runtime fit in the device's memory."""
        return self.headroom_bytes >= 0


def fit_memory(stages: Sequence[StageMemory], device_memory_bytes: int) -> list[MemoryFit]:
    """Each stage's :class:`MemoryFit` on a device of ``device_memory_bytes``.

    Raises:
        ConfigError: a device memory that is not positive (a device of ``devices.toml`` without ``memory_bytes``).
    """
    if device_memory_bytes <= 0:
        raise ConfigError(f"device memory must be positive, got {device_memory_bytes!r} bytes")
    return [MemoryFit(s, device_memory_bytes) for s in stages]


def memory_report(config: "LLMConfig", device_memory_bytes: int | None = None) -> dict[str, Any]:
    """The per-class memory as a JSON-ready dict: ``{"device_memory_bytes", "classes": [{stage, ranks,
    peak_allocated_bytes, device_bytes, terms, fits, headroom_bytes}], "fits"}`` (``fits`` and
    ``headroom_bytes`` None without a device)."""
    stages = job_memory(config)
    ranks_per_stage = config.world_size // config.parallel.pp
    fits = fit_memory(stages, device_memory_bytes) if device_memory_bytes else [None] * len(stages)
    rows = []
    for s, f in zip(stages, fits):
        rows.append(
            {
                "stage": s.stage,
                "ranks": ranks_per_stage,
                "layers": s.layers,
                "micro_batches_in_flight": s.micro_batches_in_flight,
                "peak_allocated_bytes": s.peak_allocated_bytes,
                "device_bytes": s.device_bytes,
                "terms": s.terms(),
                "fits": None if f is None else f.fits,
                "headroom_bytes": None if f is None else f.headroom_bytes,
            }
        )
    return {
        "device_memory_bytes": device_memory_bytes,
        "allocator_margin": ALLOCATOR_MARGIN,
        "classes": rows,
        "fits": None if not device_memory_bytes else all(r["fits"] for r in rows),
    }


__all__ = [
    "ADAM_K_FP32",
    "ADAM_K_MIXED",
    "ALLOCATOR_MARGIN",
    "GIB",
    "RUNTIME_RESERVED_BYTES",
    "MemoryFit",
    "ModelStates",
    "StageMemory",
    "fit_memory",
    "job_memory",
    "memory_report",
    "stage_memory",
    "stage_units",
    "zero_model_states",
]
