"""Parameter counts of a decoder-only transformer, per rank, and the padded vocabulary.

A model is cut into *units*: ``-1`` the embedding, ``0 .. L-1`` the
transformer layers, ``L`` the output head (final norm and output layer).
Counts are elements (multiply by the dtype size of :mod:`.units` for bytes).

Per-rank rules (Shoeybi et al. 2019, "Megatron-LM", section 3): the
column-parallel QKV and first FFN GEMMs split their weights and biases over
``tp``; the row-parallel projection and second FFN GEMMs split their weights,
their biases are replicated; norms are replicated; the word embedding and the
output layer are split over the padded vocabulary.  A GPT layer (biases,
LayerNorm, ``4h`` GELU FFN) holds ``(12 h^2 + 7 h) / tp + 6 h`` elements; the
whole GPT model ``12 L h^2 + 13 L h + (V + s) h`` plus the final norm's
``2 h`` (Narayanan et al. 2021, SC21, section 5.1 formula, which leaves out the
final norm).  Megatron-LM pads the vocabulary to a multiple of
``make_vocab_size_divisible_by * tp`` (default 128; ``megatron/training/tokenizer``'s
``_vocab_size_with_padding``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.workloads.config import ModelSpec

#: Megatron-LM's ``make_vocab_size_divisible_by`` default
VOCAB_DIVISOR = 128
EMBEDDING = -1


def padded_vocab_size(vocab_size: int, tp: int, divisor: int = VOCAB_DIVISOR) -> int:
    """``vocab_size`` rounded up to a multiple of ``divisor * tp`` (51,200 stays 51,200 at tp 8; 50,257 -> 51,200).

    Raises:
        ZeroDivisionError: ``divisor * tp`` is 0.
    """
    multiple = divisor * tp
    return -(-vocab_size // multiple) * multiple


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one unit held by one rank (elements).

    Attributes:
        dense: reduced over the data-parallel (x context-parallel) group.
        expert: expert weights, reduced over the expert-data-parallel group.
        norm: the part of ``dense`` in norms (all-reduced over tp under sequence parallelism).
    """

    dense: int
    expert: int = 0
    norm: int = 0


def norm_params(model: "ModelSpec") -> int:
    """Elements of one norm: ``2 h`` for LayerNorm (weight and bias), ``h`` for RMSNorm."""
    return 2 * model.hidden_size if model.layernorm else model.hidden_size


def layer_params(model: "ModelSpec", tp: int, ep: int = 1) -> LayerParams:
    """One transformer layer on one rank of ``tp`` tensor-parallel (``ep`` expert-parallel) ranks.

    GPT: ``(12 h^2 + 7 h) / tp + 6 h`` dense elements, of which ``4 h`` in the two LayerNorms.  A
    mixture-of-experts layer holds the router (``h x experts``, dense) and ``experts / ep`` expert FFNs
    (expert elements).
    """
    h = model.hidden_size
    qkv, ffn_in = model.qkv_size, model.ffn_in_size
    norm = 2 * norm_params(model)
    attn = h * qkv // tp + h * h // tp + ((qkv // tp + h) if model.bias else 0)
    ffn = h * ffn_in // tp + model.ffn_size // tp * h + ((ffn_in // tp + h) if model.bias else 0)
    if model.is_moe:
        return LayerParams(dense=attn + norm + h * model.num_experts, expert=model.num_experts // ep * ffn, norm=norm)
    return LayerParams(dense=attn + ffn + norm, norm=norm)


def embedding_params(model: "ModelSpec", tp: int) -> int:
    """Word embedding rows of one rank (``V_pad / tp x h``) plus learned positions (``s x h``)."""
    pos = model.seq_length * model.hidden_size if model.learned_position_embeddings else 0
    return padded_vocab_size(model.vocab_size, tp) // tp * model.hidden_size + pos


def head_params(model: "ModelSpec", tp: int, pp: int) -> LayerParams:
    """Final norm plus the output layer on one rank (``V_pad / tp x h``; with tied embeddings a copy of the
    embedding when ``pp > 1``, none when ``pp == 1``: the embedding itself is reused)."""
    norm = norm_params(model)
    output = padded_vocab_size(model.vocab_size, tp) // tp * model.hidden_size
    if model.tied_embeddings and pp == 1:
        output = 0
    return LayerParams(dense=norm + output, norm=norm)


def unit_params(model: "ModelSpec", unit: int, tp: int, pp: int, ep: int = 1) -> LayerParams:
    """Parameters of unit ``unit`` (``-1`` embedding, ``L`` head, else a layer) on one rank."""
    if unit == EMBEDDING:
        return LayerParams(dense=embedding_params(model, tp))
    if unit == model.num_layers:
        return head_params(model, tp, pp)
    return layer_params(model, tp, ep)


def model_params(model: "ModelSpec") -> int:
    """Every parameter of the model, unsharded (tp = pp = 1, padded vocabulary at tp 1, all experts).

    GPT-3 175B (96 layers, h 12288, V 51200, s 2048): 174,615,846,912.
    """
    layer = layer_params(model, 1)
    return model.num_layers * (layer.dense + layer.expert) + embedding_params(model, 1) + head_params(model, 1, 1).dense


__all__ = [
    "EMBEDDING",
    "VOCAB_DIVISOR",
    "LayerParams",
    "embedding_params",
    "head_params",
    "layer_params",
    "model_params",
    "norm_params",
    "padded_vocab_size",
    "unit_params",
]
