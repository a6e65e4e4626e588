"""Activation memory of a transformer layer per micro-batch, and how many micro-batches a pipeline stage holds.

Source: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
(MLSys 2023, arXiv:2205.05198), section 4 and Table 2.  The paper counts, per layer and micro-batch of
``b`` sequences of ``s`` tokens, hidden size ``h`` and ``a`` heads, with 16-bit activations and 1-byte
dropout masks, the tensors the backward pass reads:

* attention block ``11 s b h + 5 a s^2 b``: the QKV input (``2sbh``), Q and K (``4sbh``), the softmax
  output (``2as^2b``), its dropout mask (``as^2b``) and output (``2as^2b``), V (``2sbh``), the output
  projection's input (``2sbh``) and its dropout mask (``sbh``);
* MLP ``19 s b h``: the first linear's input (``2sbh``), the GeLU input (``8sbh``), the second linear's
  input (``8sbh``), the dropout mask (``sbh``);
* two LayerNorms ``4 s b h`` (their inputs).

Total ``sbh (34 + 5as/h)``.  Tensor parallelism over ``t`` divides all but ``10 sbh`` of it (Table 2:
``sbh (10 + 24/t + 5as/(ht))``); sequence parallelism divides the rest as well (``sbh/t (34 + 5as/h)``).
Selective recomputation drops the ``5as^2b`` attention core (``sbh (10 + 24/t)``, with sequence
parallelism ``34 sbh / t``); full recomputation keeps each layer's input (``2 sbh``; under sequence
parallelism the input is itself sequence-sharded, ``2 sbh / t``, as Megatron-LM checkpoints it).

This module counts the same tensors from the configuration's own sizes, so other shapes follow the same
inventory: grouped-query attention (K and V of ``kv_heads``), SwiGLU (the activation's input is the gate
and up projections, ``2 x ffn``), context parallelism (``s / cp`` query rows per rank against all ``s``
keys), mixture of experts (the FFN tensors for ``top_k`` routed copies of each token), and models trained
without dropout (Llama, Mixtral, Nemotron: no masks, and the attention-value product reads the softmax
output itself).  For the GPT-3 shape it reduces to the paper's closed forms exactly
(``tests/core/test_memory_model.py``).

Fused attention (the stack knob ``fused_attention``, :mod:`.stacks`): FlashAttention never writes the
``s x s`` scores; its backward recomputes them block by block from Q, K, V, the output and the softmax
statistics the forward saves, fp32 per query row and head (Dao et al. 2022, "FlashAttention", Algorithms
1-2: ``m`` and ``l``; FlashAttention-2, Dao 2023, section 3.1: only the logsumexp ``L = m + log l``).
Dropout runs inside the kernel from a saved RNG state (a few bytes, not counted).  The attention core is
then ``4 a s b / t`` bytes (:data:`SOFTMAX_STAT_BYTES` per row and head) instead of ``5 a s^2 b / t``.

Pipeline (section 4.3; Narayanan et al. 2021 for the schedules): a stage holds the activations of the
micro-batches it has run forward and not yet backward.  :func:`peak_in_flight` walks the stage's own
order (:func:`tracekit.workloads.schedules.stage_order`, the order the generator emits), so 1F1B gives
``min(p - stage, m)`` micro-batches and interleaved 1F1B the paper's ``(1 + (p - 1)/(p v))`` factor on the
first stage.  Section 4.4: the first stage also keeps the embedding dropout mask (``sbh/t`` per
micro-batch under sequence parallelism), the last stage the final norm and output projection inputs
(``4 sbh / t``) and the cross-entropy's fp32 logits (``4 s b V / t``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracekit.workloads.schedules import FORWARD, stage_order
from tracekit.workloads.units import DTYPE_BYTES

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.workloads.config import LLMConfig

#: Bytes of one dropout mask element: fused dropout kernels (Megatron-LM on GPU, PyTorch's ``native_dropout``
#: on CUDA) keep a uint8 / bool mask.
MASK_BYTES = 1
#: PyTorch eager dropout on CPU keeps its scaled noise tensor, in the input's dtype (fp32: 4 bytes), as the
#: mask (``aten/src/ATen/native/Dropout.cpp``, ``_dropout_impl``: the fused kernel is used on CUDA only).
CPU_EAGER_MASK_BYTES = 4
#: Bytes of one logit element in the cross-entropy (Megatron-LM casts logits to fp32 for the loss).
LOGIT_BYTES = 4
#: Bytes fused attention saves per query row and head: the fp32 softmax logsumexp (Dao 2023, FlashAttention-2).
SOFTMAX_STAT_BYTES = 4


def activation_bytes_per_element(config: "LLMConfig") -> int:
    """Bytes of one stored activation element: the training dtype's; for ``fp8`` under Transformer Engine
    (``stack.fp8_recipe="transformer-engine"``, :mod:`.stacks`) 2, BF16 (FP8 recipes run the GEMMs in FP8 but
    keep activations, norms and softmax in 16 bits: Micikevicius et al. 2022, "FP8 Formats for Deep Learning",
    section 4); 1 for the what-if recipe ``all``.

    Assumption: Transformer Engine may also save the FP8 copy of a linear layer's input (its cast/transpose for
    the weight-gradient GEMM) instead of the BF16 one, which would make those inputs 1 byte; that is not
    modelled, so the FP8 figures are the BF16 upper bound.
    """
    if config.dtype == "fp8":
        return 1 if config.stack.fp8_recipe == "all" else 2
    return DTYPE_BYTES[config.dtype]


def has_dropout(config: "LLMConfig") -> bool:
    """True for GPT-style models (learned positions: GPT-2/3 and Megatron-LM's GPT train with dropout 0.1,
    Brown et al. 2020 / Narayanan et al. 2021); False for RoPE models (Llama, Mixtral and Nemotron-4 release
    configs set attention and hidden dropout to 0)."""
    return config.model.learned_position_embeddings


@dataclass(frozen=True)
class LayerActivations:
    """Activation bytes of one transformer layer for one micro-batch on one rank.

    Attributes:
        replicated_bytes: tensors every tensor-parallel rank holds in full (``10 sbh`` for GPT), divided by
            ``tp`` under sequence parallelism.
        sharded_bytes: tensors split over ``tp`` outside the attention core (``24 sbh / t`` for GPT).
        core_bytes: the attention core (softmax output, dropout mask and output: ``5 a s^2 b / t``; under
            fused attention the softmax statistics, ``4 a s b / t``), which selective recomputation does not keep.
        input_bytes: the layer's input, what full recomputation keeps (``2 sbh``, ``/ t`` under sequence
            parallelism).
    """

    replicated_bytes: int
    sharded_bytes: int
    core_bytes: int
    input_bytes: int

    @property
    def full_bytes(self) -> int:
        """Everything, no recomputation: Korthikanti et al. 2022, Table 2, rows 1-3."""
        return self.replicated_bytes + self.sharded_bytes + self.core_bytes

    def stored_bytes(self, recompute: str) -> int:
        """Bytes kept from the forward to the backward under ``recompute`` (``none``, ``selective``, ``full``)."""
        if recompute == "full":
            return self.input_bytes
        if recompute == "selective":
            return self.replicated_bytes + self.sharded_bytes
        return self.full_bytes


def layer_activations(config: "LLMConfig", mask_bytes: int = MASK_BYTES) -> LayerActivations:
    """The tensors one layer keeps for one micro-batch on one rank (module docstring), in bytes; ``mask_bytes``
    per dropout mask element (:data:`MASK_BYTES`, :data:`CPU_EAGER_MASK_BYTES`).  ``config.stack.fused_attention``
    replaces the attention core by the softmax statistics (module docstring)."""
    m, p = config.model, config.parallel
    d, t = activation_bytes_per_element(config), p.tp
    dropout = has_dropout(config)
    tokens = config.micro_batch_size * m.seq_length // p.cp  # tokens of one micro-batch on one rank
    heads, kv_heads = m.num_heads // t, m.kv_heads // t
    scores = config.micro_batch_size * heads * (m.seq_length // p.cp) * m.seq_length
    th = tokens * m.hidden_size
    mask = mask_bytes if dropout else 0
    # LayerNorm inputs (2), QKV input, projection-output mask, first-FFN input, FFN-output mask
    replicated = 4 * th * d + 2 * th * mask
    q = tokens * heads * m.head_dim
    kv = tokens * kv_heads * m.head_dim
    routed = tokens * (m.moe_top_k if m.is_moe else 1)  # token copies the FFN runs on
    ffn_in, ffn = m.ffn_in_size // t, m.ffn_size // t
    sharded = (q + 2 * kv + q) * d + routed * (ffn_in + ffn) * d  # Q, K, V, projection input; FFN tensors
    if m.is_moe:
        sharded += routed * m.hidden_size * d  # the dispatched tokens (expert FFN input)
    core = scores * d + (scores * (mask + d) if dropout else 0)  # softmax output (+ dropout mask and output)
    if config.stack.fused_attention:  # no s x s tensor: the fp32 logsumexp per query row and head
        core = config.micro_batch_size * heads * (m.seq_length // p.cp) * SOFTMAX_STAT_BYTES
    layer_input = th * d
    if p.sequence_parallel:
        replicated //= t
        layer_input //= t
    return LayerActivations(replicated, sharded, core, layer_input)


def embedding_activation_bytes(config: "LLMConfig", mask_bytes: int = MASK_BYTES) -> int:
    """The first stage's embedding dropout mask per micro-batch (section 4.4: ``sbh / t`` under sequence
    parallelism), 0 without dropout."""
    m, p = config.model, config.parallel
    if not has_dropout(config):
        return 0
    nbytes = config.micro_batch_size * m.seq_length // p.cp * m.hidden_size * mask_bytes
    return nbytes // p.tp if p.sequence_parallel else nbytes


def head_activation_bytes(config: "LLMConfig") -> int:
    """The last stage's output layer per micro-batch (section 4.4): final norm and output projection inputs
    (``4 sbh``, ``/ t`` under sequence parallelism) and the fp32 logits the cross-entropy keeps
    (``4 s b V / t``, padded vocabulary)."""
    m, p = config.model, config.parallel
    tokens = config.micro_batch_size * m.seq_length // p.cp
    inputs = 2 * tokens * m.hidden_size * activation_bytes_per_element(config)
    if p.sequence_parallel:
        inputs //= p.tp
    return inputs + tokens * (config.padded_vocab_size // p.tp) * LOGIT_BYTES


@dataclass(frozen=True)
class StageActivations:
    """Peak activation bytes of one pipeline stage over its schedule.

    Attributes:
        stage: pipeline rank.
        stored_bytes: what the stage holds at its peak (stored activations of the passes in flight).
        working_bytes: what the backward running at that moment rebuilds on top (one layer's recomputed
            tensors: the whole layer under full recomputation, the attention core under selective).
        micro_batches_in_flight: forward passes (of one model chunk) not yet backward at the peak, in
            units of whole stages (an interleaved stage's chunk counts ``1 / v``).
    """

    stage: int
    stored_bytes: int
    working_bytes: int
    micro_batches_in_flight: float

    @property
    def peak_bytes(self) -> int:
        """``stored_bytes + working_bytes``."""
        return self.stored_bytes + self.working_bytes


def peak_in_flight(
    config: "LLMConfig", stage: int, layers_per_chunk: int | None = None, mask_bytes: int = MASK_BYTES
) -> StageActivations:
    """Walk ``stage``'s schedule and return its activation peak (module docstring).

    Args:
        config: the job.
        stage: pipeline rank, ``0 .. pp - 1``.
        layers_per_chunk: layers in each model chunk of this stage; default the generator's own split,
            :attr:`~tracekit.workloads.config.LLMConfig.chunk_layers` (uneven for Llama 3 405B: 7 layers on
            the first and last of 16 stages, 8 on the others).
        mask_bytes: bytes per dropout mask element (:data:`MASK_BYTES`).

    Raises:
        ConfigError: a stage outside the pipeline (from :func:`~tracekit.workloads.schedules.stage_order`).
    """
    p = config.parallel
    n_chunks = p.pp * p.virtual_stages
    split = [len(c) for c in config.chunk_layers] if layers_per_chunk is None else [layers_per_chunk] * n_chunks
    layer = layer_activations(config, mask_bytes)
    stored_layer = layer.stored_bytes(p.recompute)
    working = layer.full_bytes - stored_layer
    last_chunk = n_chunks - 1
    embed, head = embedding_activation_bytes(config, mask_bytes), head_activation_bytes(config)
    held = peak = peak_stored = chunks = peak_chunks = 0
    for op in stage_order(p.schedule, p.pp, config.num_micro_batches, stage, p.virtual_stages, p.microbatch_group_size):
        chunk = op.chunk * p.pp + stage
        nbytes = split[chunk] * stored_layer + (embed if chunk == 0 else 0) + (head if chunk == last_chunk else 0)
        if op.kind == FORWARD:
            held, chunks = held + nbytes, chunks + 1
        if held + (0 if op.kind == FORWARD else working) > peak:
            peak, peak_stored, peak_chunks = held + (0 if op.kind == FORWARD else working), held, chunks
        if op.kind != FORWARD:
            held, chunks = held - nbytes, chunks - 1
    return StageActivations(stage, peak_stored, peak - peak_stored, peak_chunks / p.virtual_stages)


__all__ = [
    "CPU_EAGER_MASK_BYTES",
    "LOGIT_BYTES",
    "MASK_BYTES",
    "SOFTMAX_STAT_BYTES",
    "LayerActivations",
    "StageActivations",
    "activation_bytes_per_element",
    "embedding_activation_bytes",
    "has_dropout",
    "head_activation_bytes",
    "layer_activations",
    "peak_in_flight",
]
