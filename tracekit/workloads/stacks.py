"""Training software stacks: what differs between software generations of LLM training, in one place.

A :class:`StackSpec` holds the mechanisms a framework generation runs that change a step's timeline but not
the model or its parallel layout.  :data:`STACKS` names the generations (``megatron-2021``,
``megatron-core``, ``nemo``, ``deepspeed``), each knob with its source; :func:`stack` looks one up and
applies per-knob overrides, so every knob is also settable alone (``generate llm --stack nemo
--no-tp-comm-overlap``).  The generator (:mod:`tracekit.converters.generators.llm_ops`) reads the knobs
from ``LLMConfig.stack``; the data-parallel gradient overlap lives in ``ParallelSpec.overlap_grad_reduce``
(set by :func:`apply_stack`).

Knobs (all flags unless said):

* ``fused_attention``: one fused attention kernel per pass (FlashAttention-2/3, cuDNN fused attention via
  Transformer Engine): no ``s x s`` score matrix in memory, causal blocks skipped, dropout inside the
  kernel (Dao 2023, "FlashAttention-2"; Shah et al. 2024, "FlashAttention-3").  Unfused: ``Q K^T`` and
  ``P V`` as batched GEMMs, a fused scale-mask-softmax kernel and a dropout kernel (Megatron-LM 2021).
* ``tp_comm_overlap``: Transformer Engine userbuffers (Megatron-LM ``--tp-comm-overlap``, NeMo
  ``ub_tp_comm_overlap``): the sequence-parallel all-gathers and reduce-scatters run pipelined with the
  GEMM they feed or follow (needs sequence parallelism, as Megatron-LM requires).
* ``tp_overlap_comm_sms`` (a count): SMs userbuffers' communication kernels keep while they overlap a GEMM:
  Transformer Engine launches the GEMMs of its ``pipeline`` (attention projection and FC2 forward, with their
  reduce-scatter) and ``bulk`` (QKV and FC1 dgrad / wgrad, with their all-gather / reduce-scatter) overlaps
  on the device's SMs minus ``num_sm`` (``set_sm_margin``), default 16; the ``ring_exchange`` ones use copy
  engines and 1 SM, no margin (transformer_engine/pytorch/module/base.py ``initialize_ub``, default config).
  0 = no margin (every preset: with 16 the NeMo GPT-3 175B row goes from +5.6 % to +13.5 %, see ``_UB_MARGIN``);
  only with ``tp_comm_overlap``.
* ``tp_dgrad_overlap``: the tensor-parallel reduction of a column-parallel layer's input gradient runs
  while its weight-gradient GEMM runs (Megatron-LM ``LinearWithGradAccumulationAndAsyncCommunication``);
  None = the cost model decides (the calibrated Megatron-LM 2021 model serializes it).
* ``cp_comm``: context-parallel K/V exchange, ``ring`` (Megatron-Core ``--cp-comm-type p2p``: ``cp``
  steps, each step's K/V chunk travels to the next rank while attention runs on the current one; causal
  load balancing by 2 cp chunks per sequence) or ``allgather`` (all K/V gathered before attention).
* ``overlap_param_gather``: the distributed optimizer's parameter all-gathers overlap the next forward
  (Megatron-Core ``--overlap-param-gather``, NeMo ``overlap_param_sync``).
* ``fp8_recipe``: what ``dtype="fp8"`` means: ``transformer-engine`` (linear-layer GEMMs in FP8 at the
  device's FP8 rate, with cast/transpose kernels; activations, attention, communication and gradients in
  BF16: Transformer Engine's ``fp8_autocast``, delayed scaling) or ``all`` (every byte one byte; the old
  behaviour, kept for what-if studies).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from tracekit.errors import ConfigError

CP_COMM = ("ring", "allgather")
FP8_RECIPES = ("transformer-engine", "all")


@dataclass(frozen=True)
class StackSpec:
    """The software mechanisms of one training stack (module doc). Defaults = Megatron-LM 2021.

    Raises:
        ConfigError: an unknown ``cp_comm`` or ``fp8_recipe``.  (A ring without fused attention is refused by
            ``LLMConfig`` when cp > 1 only: at cp = 1 there is no context parallelism, as in Megatron-LM, whose
            ``--cp-comm-type`` does nothing then.)
    """

    name: str = "megatron-2021"
    fused_attention: bool = False
    tp_comm_overlap: bool = False
    tp_dgrad_overlap: bool | None = None
    cp_comm: str = "allgather"
    overlap_param_gather: bool = False
    fp8_recipe: str = "transformer-engine"
    tp_overlap_comm_sms: int = 0

    def __post_init__(self) -> None:
        sms = self.tp_overlap_comm_sms
        if isinstance(sms, bool) or not isinstance(sms, int) or sms < 0:
            raise ConfigError(f"tp_overlap_comm_sms must be a non-negative integer, got {sms!r}")
        if self.cp_comm not in CP_COMM:
            raise ConfigError(
                f"context-parallel communication must be one of {', '.join(CP_COMM)}; got {self.cp_comm!r}"
            )
        if self.fp8_recipe not in FP8_RECIPES:
            raise ConfigError(f"fp8 recipe must be one of {', '.join(FP8_RECIPES)}; got {self.fp8_recipe!r}")

    def check_context_parallel(self, cp: int) -> None:
        """Raise ConfigError when a ring (``cp_comm="ring"``) runs at ``cp`` > 1 without fused attention (its online
        softmax merges the ring's steps); at cp = 1 there is no context parallelism, as in Megatron-LM."""
        if cp > 1 and self.cp_comm == "ring" and not self.fused_attention:
            raise ConfigError(
                f"cp={cp}: ring context parallelism needs fused attention (its online softmax merges the steps); "
                f"stack {self.name} runs without it here: add --stack-knob fused_attention=true or cp_comm=allgather"
            )

    def check_ring_chunks(self, cp: int, seq_length: int) -> None:
        """Raise ConfigError when a ring (``cp_comm="ring"``, ``cp`` > 1) gets a sequence that does not split into
        ``2 cp`` equal chunks: causal load balancing gives rank ``i`` chunks ``i`` and ``2 cp - 1 - i`` (Megatron-LM
        ``get_batch_on_this_cp_rank``; Transformer Engine's ring attention works on that layout).  The all-gather
        variant here only needs ``cp`` equal shards (``seq % cp``, checked by the job's configuration)."""
        if cp > 1 and self.cp_comm == "ring" and seq_length % (2 * cp):
            raise ConfigError(
                f"sequence length {seq_length} does not split into 2 x cp = {2 * cp} equal chunks: ring context "
                f"parallelism (cp={cp}, cp_comm=ring) needs seq % (2 cp) == 0 (causal load balancing)"
            )


@dataclass(frozen=True)
class StackPreset:
    """A named stack: its knobs, the gradient-reduction overlap it runs, and the source of each knob."""

    spec: StackSpec
    overlap_grad_reduce: bool
    sources: tuple[tuple[str, str], ...]


_MCORE_SRC = "Megatron-LM core_r0.9 megatron/training/arguments.py"
_NEMO_SRC = "NVIDIA/dgxc-benchmarking 1b9bb6b recipe YAMLs (NeMo 24.12 on Megatron-Core)"
_TE_UB = "Transformer Engine transformer_engine/pytorch/module/base.py initialize_ub"
# Measured on the NeMo rows (dgx-h100), 0 -> 16 SMs: Nemotron-4 15B -2.5 -> +3.1 %, GPT-3 175B BF16 +5.6 -> +13.5 %,
# FP8 +4.9 -> +12.2 %: TE's default margin on every pipeline and bulk GEMM is more than the recipes lose (their tuned
# per-layer userbuffers configs are not modelled), so the presets keep 0 and the knob is a what-if.
_UB_MARGIN = f"0 (what-if knob; {_TE_UB} defaults to num_sm=16 with set_sm_margin for pipeline and bulk overlaps)"

# With pipeline parallelism (MT-NLG, BLOOM) DeepSpeed's PipelineEngine runs the gradient reduction as one
# instruction after the last micro-batch's backward; ZeRO's overlap_comm buckets are the non-pipeline engine's.
_DS_PIPE = (
    "DeepSpeed deepspeed/runtime/pipe/schedule.py TrainSchedule.steps: ReduceTiedGrads, ReduceGrads, OptimizerStep "
    "after the last step's BackwardPass (ZeRO overlap_comm only without pipeline parallelism)"
)

STACKS: dict[str, StackPreset] = {
    "megatron-2021": StackPreset(
        StackSpec("megatron-2021"),
        overlap_grad_reduce=False,
        sources=(
            ("fused_attention", "Megatron-LM v2.x model/transformer.py: unfused attention, fused_softmax.py"),
            ("tp_comm_overlap", "Megatron-LM v2.x: no userbuffers (Transformer Engine 2022)"),
            ("tp_dgrad_overlap", "Megatron-LM v2.x mpu/mappings.py: input-gradient all-reduce after the layer"),
            ("cp_comm", "no context parallelism in 2021; all-gather kept for what-if studies"),
            ("overlap_grad_reduce", "Megatron-LM v2.x training.py: allreduce_gradients() after the backward"),
            ("overlap_param_gather", "no distributed optimizer in v2.x"),
            ("tp_overlap_comm_sms", "no userbuffers: no SM margin"),
        ),
    ),
    "megatron-core": StackPreset(
        StackSpec(
            "megatron-core",
            fused_attention=True,
            tp_comm_overlap=True,
            tp_dgrad_overlap=True,
            cp_comm="ring",
            overlap_param_gather=True,
        ),
        overlap_grad_reduce=True,
        sources=(
            ("fused_attention", f"{_MCORE_SRC}: --attention-backend auto (TE fused / flash attention)"),
            ("tp_overlap_comm_sms", _UB_MARGIN),
            ("tp_comm_overlap", f"{_MCORE_SRC}: --tp-comm-overlap (TE userbuffers; needs --sequence-parallel)"),
            ("tp_dgrad_overlap", "megatron/core/tensor_parallel/layers.py: async input-gradient communication"),
            ("cp_comm", f"{_MCORE_SRC}: --cp-comm-type p2p (ring, the default)"),
            ("overlap_grad_reduce", f"{_MCORE_SRC}: --overlap-grad-reduce"),
            ("overlap_param_gather", f"{_MCORE_SRC}: --overlap-param-gather"),
        ),
    ),
    "nemo": StackPreset(
        StackSpec(
            "nemo",
            fused_attention=True,
            tp_comm_overlap=True,
            tp_dgrad_overlap=True,
            cp_comm="ring",
            overlap_param_gather=True,
        ),
        overlap_grad_reduce=True,
        sources=(
            ("fused_attention", f"{_NEMO_SRC}: use_flash_attention: true"),
            ("tp_overlap_comm_sms", _UB_MARGIN),
            ("tp_comm_overlap", f"{_NEMO_SRC}: ub_tp_comm_overlap: true (Llama 3.1 70B, Nemotron-4 15B, GPT-3 175B)"),
            ("tp_dgrad_overlap", "Megatron-Core tensor_parallel/layers.py (NeMo's backend)"),
            ("cp_comm", "Megatron-Core default cp_comm_type p2p (ring) under NeMo 24.12"),
            ("overlap_grad_reduce", f"{_NEMO_SRC}: optim.overlap_grad_sync: true"),
            ("overlap_param_gather", f"{_NEMO_SRC}: optim.overlap_param_sync: true"),
        ),
    ),
    "deepspeed": StackPreset(
        StackSpec("deepspeed", tp_dgrad_overlap=False),
        overlap_grad_reduce=False,
        sources=(
            ("fused_attention", "Megatron-DeepSpeed (2021-22, MT-NLG, BLOOM): Megatron's unfused attention"),
            ("tp_comm_overlap", "Megatron-DeepSpeed: Megatron-LM v2 tensor parallelism, no userbuffers"),
            ("tp_dgrad_overlap", "Megatron-DeepSpeed mpu/mappings.py: synchronous input-gradient all-reduce"),
            ("cp_comm", "no context parallelism (DeepSpeed-Ulysses is all-to-all; not modelled)"),
            ("overlap_grad_reduce", _DS_PIPE),
            ("overlap_param_gather", "ZeRO-1/2 gather after the step, not overlapped"),
            ("tp_overlap_comm_sms", "Megatron-DeepSpeed: no userbuffers, no SM margin"),
        ),
    ),
}


def knob_names() -> tuple[str, ...]:
    """The settable knobs: the :class:`StackSpec` fields but ``name``, and ``overlap_grad_reduce``."""
    return tuple(f.name for f in fields(StackSpec) if f.name != "name") + ("overlap_grad_reduce",)


def stack(name: str, **overrides: Any) -> tuple[StackSpec, bool]:
    """``(StackSpec, overlap_grad_reduce)`` of the named stack with knobs overridden (None = the stack's).

    Raises:
        ConfigError: unknown stack or knob name, or an invalid combination (see :class:`StackSpec`).
    """
    try:
        preset = STACKS[name]
    except KeyError:
        raise ConfigError(f"unknown stack {name!r}; choose one of {', '.join(STACKS)}") from None
    unknown = set(overrides) - set(knob_names())
    if unknown:
        raise ConfigError(f"unknown stack knob(s) {', '.join(sorted(unknown))}; knobs: {', '.join(knob_names())}")
    given = {k: v for k, v in overrides.items() if v is not None}
    grad = given.pop("overlap_grad_reduce", preset.overlap_grad_reduce)
    return replace(preset.spec, **given), grad


def fp8_gemms_only(config: Any) -> bool:
    """True for an :class:`~tracekit.workloads.config.LLMConfig` of ``dtype="fp8"`` run as Transformer Engine
    does (``fp8_recipe="transformer-engine"``): FP8 linear-layer GEMMs, BF16 elsewhere."""
    return bool(config.dtype == "fp8" and config.stack.fp8_recipe == "transformer-engine")


def apply_stack(config: Any, name: str, **overrides: Any) -> Any:
    """``config`` (an :class:`~tracekit.workloads.config.LLMConfig`) run by the named stack: its ``stack`` and
    ``parallel.overlap_grad_reduce`` set from :func:`stack`.

    Raises:
        ConfigError: as :func:`stack`.
    """
    spec, grad = stack(name, **overrides)
    return replace(config, stack=spec, parallel=replace(config.parallel, overlap_grad_reduce=grad))


__all__ = [
    "CP_COMM",
    "FP8_RECIPES",
    "STACKS",
    "StackPreset",
    "StackSpec",
    "apply_stack",
    "fp8_gemms_only",
    "knob_names",
    "stack",
]
