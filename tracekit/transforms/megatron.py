"""Megatron-LM's tensor-parallel split rules for the parallelism rewrites: which op roles split over tp.

Per-rank parameter counts, the padded vocabulary and the dtype sizes are in
:mod:`tracekit.workloads` (shared with the generators); the configuration is
read back from a generated trace's ``llm_config`` metadata.  Sources: Shoeybi et al. 2019, "Megatron-LM" (column-parallel QKV and
first FFN GEMMs, row-parallel projection and second FFN GEMMs: their weights
and the column-parallel biases are split over ``tp``, the row-parallel biases
and the norms are replicated; attention heads are split over ``tp``);
Megatron-LM's ``make_vocab_size_divisible_by`` (default 128) pads the
vocabulary to a multiple of ``128 * tp``; Korthikanti et al. 2022 (sequence
parallelism splits the norm/dropout/residual tokens over ``tp``).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Mapping

from tracekit.errors import ConfigError, TransformError
from tracekit.workloads.config import LLMConfig
from tracekit.workloads.params import padded_vocab_size

#: op roles whose FLOPs and bytes are all split over tp (attention heads, FFN inner size)
SPLIT_ALL = frozenset({"attn_score", "softmax", "attn_value", "activation"})
#: GEMM roles: FLOPs split over tp; of the bytes, one ``t x h`` activation operand is not split
SPLIT_GEMM = frozenset({"qkv_gemm", "proj_gemm", "fc1_gemm", "fc2_gemm"})
#: roles split over the (padded) vocabulary
SPLIT_VOCAB = frozenset({"cross_entropy"})
VOCAB_GEMM = frozenset({"logits_gemm"})
#: elementwise roles over ``t/tp`` tokens under sequence parallelism (replicated otherwise)
SEQ_ELEMENTWISE = frozenset({"input_norm", "attn_residual_norm", "mlp_residual", "final_norm"})
#: collectives whose per-rank size is split over tp (sequence-parallel all-gather input, context-parallel K/V)
SPLIT_COMM_SP = frozenset({"tp_allgather"})
SPLIT_COMM = frozenset({"cp_kv_allgather", "cp_kv_reducescatter"})


def config_of(cfg: Mapping[str, Any]) -> LLMConfig:
    """The :class:`~tracekit.workloads.config.LLMConfig` of a trace set's ``llm_config`` metadata.

    Raises:
        TransformError: the metadata does not describe a valid configuration (the message says why).
    """
    try:
        return LLMConfig.from_dict(cfg)
    except ConfigError as exc:
        raise TransformError(f"metadata attribute 'llm_config' is not a valid configuration: {exc}") from None


def tokens(config: LLMConfig, cp: int) -> int:
    """Tokens per rank per micro-batch: ``t = b s / cp``."""
    return config.micro_batch_size * config.model.seq_length // cp


def tp_factors(config: LLMConfig, tp_old: int, tp_new: int) -> tuple[Fraction, Fraction]:
    """``(f, f_vocab)``: per-rank share of split work and of the padded vocabulary, new / old.

    ``f = tp_old / tp_new``; ``f_vocab = (V_pad(tp_new) / tp_new) / (V_pad(tp_old) / tp_old)``.
    """
    vocab = config.model.vocab_size
    fv = Fraction(padded_vocab_size(vocab, tp_new) // tp_new, padded_vocab_size(vocab, tp_old) // tp_old)
    return Fraction(tp_old, tp_new), fv


__all__ = [
    "SEQ_ELEMENTWISE",
    "SPLIT_ALL",
    "SPLIT_COMM",
    "SPLIT_COMM_SP",
    "SPLIT_GEMM",
    "SPLIT_VOCAB",
    "VOCAB_GEMM",
    "config_of",
    "tokens",
    "tp_factors",
]
