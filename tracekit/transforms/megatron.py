"""Megatron-LM facts the parallelism rewrites need: per-rank parameters, vocabulary padding, TP split rules.

Read from a generated trace's ``llm_config`` metadata (model shape, batch,
dtype).  Sources: Shoeybi et al. 2019, "Megatron-LM" (column-parallel QKV and
first FFN GEMMs, row-parallel projection and second FFN GEMMs: their weights
and the column-parallel biases are split over ``tp``, the row-parallel biases
and the norms are replicated; attention heads are split over ``tp``);
Megatron-LM's ``make_vocab_size_divisible_by`` (default 128) pads the
vocabulary to a multiple of ``128 * tp``; Korthikanti et al. 2022 (sequence
parallelism splits the norm/dropout/residual tokens over ``tp``).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
VOCAB_DIVISOR = 128

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


@dataclass(frozen=True)
class Shape:
    """The model and batch fields of ``llm_config`` the rewrites use.

    Attributes:
        num_layers, hidden_size (h), num_heads, kv_heads, ffn_size: the transformer's shape (sizes in elements).
        swiglu: the FFN has gate and up projections (first GEMM twice as wide).
        seq_length (s), vocab_size: tokens per sequence, vocabulary entries.
        tied_embeddings, learned_position_embeddings, layernorm, bias: Megatron-LM options.
        micro_batch_size (b): sequences per micro-batch.
        dtype_bytes: bytes per element of weights and activations (:data:`DTYPE_BYTES`).
        grad_bytes: bytes per element of the gradients the data-parallel reduction moves.
    """


    num_layers: int
    hidden_size: int
    num_heads: int
    kv_heads: int
    ffn_size: int
    swiglu: bool
    seq_length: int
    vocab_size: int
    tied_embeddings: bool
    learned_position_embeddings: bool
    layernorm: bool
    bias: bool
    micro_batch_size: int
    dtype_bytes: int
    grad_bytes: int

    @classmethod
    def of(cls, cfg: dict[str, Any]) -> "Shape":
        """The shape fields of an ``llm_config`` metadata dict (as written by the LLM generator).

        Defaults follow Megatron-LM: ``ffn_hidden_size`` 4h, ``num_kv_heads`` = ``num_heads``, tied
        embeddings, learned position embeddings, layernorm with bias; dtype bf16.

        Raises:
            KeyError: a required field (``model``, ``hidden_size``, ``num_heads``, ``num_layers``, ``seq_length``,
                ``vocab_size``, ``micro_batch_size``) is missing or the dtype is not in :data:`DTYPE_BYTES`.
        """
        m = cfg["model"]
        h = int(m["hidden_size"])
        kv = m.get("num_kv_heads") or m["num_heads"]
        return cls(int(m["num_layers"]), h, int(m["num_heads"]), int(kv), int(m.get("ffn_hidden_size") or 4 * h),
                   m.get("activation") == "swiglu", int(m["seq_length"]), int(m["vocab_size"]),
                   bool(m.get("tied_embeddings", True)), bool(m.get("learned_position_embeddings", True)),
                   m.get("norm", "layernorm") == "layernorm", bool(m.get("bias", True)),
                   int(cfg["micro_batch_size"]), DTYPE_BYTES[cfg.get("dtype", "bf16")],
                   DTYPE_BYTES[cfg.get("grad_reduce_dtype") or cfg.get("dtype", "bf16")])

    @property
    def head_dim(self) -> int:
        """Elements per attention head, ``h / num_heads``."""
        return self.hidden_size // self.num_heads

    @property
    def qkv_size(self) -> int:
        """Output width of the fused QKV GEMM, ``h + 2 * kv_heads * head_dim`` (grouped-query attention)."""
        return self.hidden_size + 2 * self.kv_heads * self.head_dim

    @property
    def ffn_in(self) -> int:
        """Output width of the first FFN GEMM: ``ffn_size``, doubled for SwiGLU (gate and up projections)."""
        return self.ffn_size * (2 if self.swiglu else 1)

    def padded_vocab(self, tp: int) -> int:
        """Vocabulary padded to a multiple of ``128 * tp`` (Megatron-LM ``make_vocab_size_divisible_by``).

        Args:
            tp: tensor-parallel degree.
        """
        multiple = VOCAB_DIVISOR * tp
        return -(-self.vocab_size // multiple) * multiple

    def tokens(self, cp: int) -> int:
        """Tokens per rank per micro-batch ``t = b s / cp``."""
        return self.micro_batch_size * self.seq_length // cp

    # ----- parameters per rank (elements) ---------------------------------------------------
    def norm_params(self) -> int:
        """Parameters of a layer's two norms, elements: ``2 * 2h`` (layernorm weight and bias) or ``2 * h`` (RMSNorm)."""
        return 2 * (2 * self.hidden_size if self.layernorm else self.hidden_size)

    def layer_params(self, tp: int) -> int:
        """Parameters of one transformer layer on one tensor-parallel rank, elements.

        QKV and FFN-in GEMM weights and biases are split column-wise over ``tp``, projection and FFN-out weights
        row-wise (their biases and the norms are replicated) as in Shoeybi et al. 2019, Megatron-LM.

        Args:
            tp: tensor-parallel degree.
        """
        h = self.hidden_size
        attn = h * self.qkv_size // tp + h * h // tp + ((self.qkv_size // tp + h) if self.bias else 0)
        ffn = h * self.ffn_in // tp + self.ffn_size // tp * h + ((self.ffn_in // tp + h) if self.bias else 0)
        return attn + ffn + self.norm_params()

    def embedding_params(self, tp: int) -> int:
        """Parameters of the embedding on one tensor-parallel rank, elements.

        The padded vocabulary is split over ``tp``; learned position embeddings (``s x h``) are replicated.

        Args:
            tp: tensor-parallel degree.
        """
        pos = self.seq_length * self.hidden_size if self.learned_position_embeddings else 0
        return self.padded_vocab(tp) // tp * self.hidden_size + pos

    def head_params(self, tp: int, pp: int) -> int:
        """Parameters of the final norm and output layer on one rank, elements.

        The output weight (padded vocabulary split over ``tp``) counts only when it is not tied to the embedding
        or the embedding sits on another pipeline stage (``pp > 1``).

        Args:
            tp: tensor-parallel degree.
            pp: pipeline-parallel degree.
        """
        norm = 2 * self.hidden_size if self.layernorm else self.hidden_size
        output = self.padded_vocab(tp) // tp * self.hidden_size
        if self.tied_embeddings and pp == 1:
            output = 0
        return norm + output

    def unit_params(self, unit: int, tp: int, pp: int) -> int:
        """Parameters of a unit (-1 embedding, L head, else a layer) on one rank."""
        if unit == -1:
            return self.embedding_params(tp)
        if unit == self.num_layers:
            return self.head_params(tp, pp)
        return self.layer_params(tp)

    # ----- TP split of one node -------------------------------------------------------------
    def tp_factors(self, tp_old: int, tp_new: int) -> tuple[Fraction, Fraction]:
        """``(f, f_vocab)``: per-rank share of split work and of the padded vocabulary, new / old.

        ``f = tp_old / tp_new``; ``f_vocab`` is the ratio of per-rank padded vocabularies (the padding to a
        multiple of ``128 * tp`` changes with ``tp``).
        """
        f = Fraction(tp_old, tp_new)
        fv = Fraction(self.padded_vocab(tp_new) // tp_new, self.padded_vocab(tp_old) // tp_old)
        return f, fv
