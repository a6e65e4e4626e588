"""Configuration of a synthetic transformer-LLM training job: model, parallelism, batch.

Three frozen dataclasses, validated on construction:

* :class:`ModelSpec` -- the network (GPT or Llama style): layers ``L``, hidden size ``h``, attention heads ``a`` and
  key/value heads (grouped-query attention), FFN size, GELU or SwiGLU, sequence length ``s``, vocabulary ``V``,
  optional mixture of experts.
* :class:`ParallelSpec` -- how it is split: ``dp x tp x pp`` (``x cp``), expert parallelism ``ep`` (inside data
  parallelism), sequence parallelism, ZeRO stage, activation recompute, pipeline schedule, gradient buckets.
* :class:`LLMConfig` -- both plus global batch ``B``, micro-batch ``b`` and the data type; derived sizes (micro-
  batches per iteration, layers per stage, padded vocabulary, parameter counts) are properties.

Every impossible combination raises :class:`~tracekit.errors.ConfigError` with a one-line message naming the values
(for example ``tp=3 does not divide the 32 attention heads``).

Named presets (:data:`PRESETS`, :func:`preset`) give published model shapes with their source in ``ModelSpec.source``.

Sources: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"
(SC21) for the parallelism terms, rank order and schedules; Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models" for sequence parallelism and selective recompute; Rajbhandari et al. 2020,
"ZeRO" for the ZeRO stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from tracekit.errors import ConfigError
from tracekit.workloads.params import padded_vocab_size
from tracekit.workloads.pipeline_split import chunk_layers
from tracekit.workloads.schedules import check_group_size
from tracekit.workloads.stacks import StackSpec
from tracekit.workloads.presets_2024 import PRESETS_2024
from tracekit.workloads.units import DTYPE_BYTES, TRAINING_DTYPES

ACTIVATIONS = ("gelu", "swiglu")
NORMS = ("layernorm", "rmsnorm")
RECOMPUTE = ("none", "selective", "full")
SCHEDULES = ("gpipe", "1f1b", "interleaved")
ZERO_STAGES = (0, 1, 2, 3)


def _positive(what: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{what} must be an integer, got {value!r}")
    if value < 1:
        raise ConfigError(f"{what} must be positive, got {value}")


def _choice(what: str, value: Any, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{what} must be one of {', '.join(map(str, choices))}; got {value!r}")


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer.

    Attributes:
        name: label (preset name or user's).
        num_layers: transformer layers ``L``.
        hidden_size: model width ``h``.
        num_heads: attention heads ``a`` (``h`` must be a multiple).
        num_kv_heads: key/value heads (grouped-query attention); None = ``a``.
        ffn_hidden_size: FFN inner size; None = ``4h`` (the GPT choice).
        activation: ``"gelu"`` (two FFN GEMMs) or ``"swiglu"`` (three).
        seq_length: tokens per sequence ``s``.
        vocab_size: vocabulary ``V`` before padding.
        tied_embeddings: output layer shares the input embedding (GPT).
        learned_position_embeddings: a ``s x h`` position table (GPT) rather than RoPE.
        norm: ``"layernorm"`` (weight and bias) or ``"rmsnorm"`` (weight).
        bias: linear layers have biases (GPT) or not (Llama).
        num_experts: experts per MoE layer (0 = dense FFN in every layer).
        moe_top_k: experts each token is routed to.
        source: where the shape comes from.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    seq_length: int
    vocab_size: int
    num_kv_heads: int | None = None
    ffn_hidden_size: int | None = None
    activation: str = "gelu"
    tied_embeddings: bool = True
    learned_position_embeddings: bool = True
    norm: str = "layernorm"
    bias: bool = True
    num_experts: int = 0
    moe_top_k: int = 2
    source: str = ""

    def __post_init__(self) -> None:
        for what in ("num_layers", "hidden_size", "num_heads", "seq_length", "vocab_size"):
            _positive(f"{what.replace('_', ' ')}", getattr(self, what))
        if self.num_kv_heads is not None:
            _positive("kv heads", self.num_kv_heads)
            if self.num_heads % self.num_kv_heads:
                raise ConfigError(f"kv heads {self.num_kv_heads} must divide attention heads {self.num_heads}")
        if self.ffn_hidden_size is not None:
            _positive("ffn hidden size", self.ffn_hidden_size)
        if self.hidden_size % self.num_heads:
            raise ConfigError(f"hidden size {self.hidden_size} is not a multiple of the {self.num_heads} heads")
        _choice("activation", self.activation, ACTIVATIONS)
        _choice("norm", self.norm, NORMS)
        if isinstance(self.num_experts, bool) or not isinstance(self.num_experts, int) or self.num_experts < 0:
            raise ConfigError(f"num experts must be 0 (dense) or positive, got {self.num_experts!r}")
        if self.num_experts:
            _positive("moe top-k", self.moe_top_k)
            if self.moe_top_k > self.num_experts:
                raise ConfigError(f"moe top-k {self.moe_top_k} exceeds the {self.num_experts} experts")

    @property
    def kv_heads(self) -> int:
        """Key/value heads (``num_kv_heads``, or ``a`` without grouped-query attention)."""
        return self.num_kv_heads if self.num_kv_heads is not None else self.num_heads

    @property
    def head_dim(self) -> int:
        """Width of one attention head: ``h / a``."""
        return self.hidden_size // self.num_heads

    @property
    def ffn_size(self) -> int:
        """FFN inner size (``ffn_hidden_size``, or ``4h``)."""
        return self.ffn_hidden_size if self.ffn_hidden_size is not None else 4 * self.hidden_size

    @property
    def qkv_size(self) -> int:
        """Output width of the fused QKV projection: ``h + 2 * kv_heads * head_dim``."""
        return self.hidden_size + 2 * self.kv_heads * self.head_dim

    @property
    def ffn_in_size(self) -> int:
        """Output width of the first FFN GEMM: the FFN size, twice it for SwiGLU (gate and up projections)."""
        return self.ffn_size * (2 if self.activation == "swiglu" else 1)

    @property
    def layernorm(self) -> bool:
        """True for LayerNorm (weight and bias per norm), False for RMSNorm (weight only)."""
        return self.norm == "layernorm"

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model."""
        return self.num_experts > 0


@dataclass(frozen=True)
class ParallelSpec:
    """How the job is split across ranks.

    Ranks are laid out in Megatron's order, tensor-parallel fastest, then
    context, then data, then pipeline (Narayanan et al. 2021, section 3.3):
    ``rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))``.

    Attributes:
        dp, tp, pp, cp: data, tensor, pipeline and context parallel degrees.
        ep: expert-parallel degree, a divisor of ``dp`` (experts are spread
            over consecutive data-parallel ranks, as in Megatron-LM).
        sequence_parallel: Korthikanti et al. 2022 sequence parallelism
            (TP all-reduce becomes reduce-scatter + all-gather).
        zero_stage: 0 (plain data parallel), 1 (optimizer states sharded),
            2 (+ gradients), 3 (+ parameters; FSDP), Rajbhandari et al. 2020.
        recompute: ``"none"``, ``"selective"`` (attention core) or ``"full"``
            (every layer's forward rerun in backward).
        schedule: ``"gpipe"``, ``"1f1b"`` or ``"interleaved"``.
        virtual_stages: model chunks per pipeline rank (``interleaved`` only).
        microbatch_group_size: ``N`` of the interleaved schedule, None = its default
            (:func:`tracekit.workloads.schedules.check_group_size`).
        grad_bucket_bytes: data-parallel gradient bucket size in bytes (default
            160 MB: Megatron-LM's 40M-element bucket of fp32 gradients).
        overlap_grad_reduce: start each bucket's reduction as soon as its
            layers' last weight gradients exist (else after the backward).
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    sequence_parallel: bool = False
    zero_stage: int = 0
    recompute: str = "none"
    schedule: str = "1f1b"
    virtual_stages: int = 1
    grad_bucket_bytes: int = 40_000_000 * 4
    overlap_grad_reduce: bool = True
    microbatch_group_size: int | None = None

    def __post_init__(self) -> None:
        for what in ("dp", "tp", "pp", "cp", "ep", "virtual_stages", "grad_bucket_bytes"):
            _positive(what.replace("_", " "), getattr(self, what))
        _choice("zero stage", self.zero_stage, ZERO_STAGES)
        _choice("recompute", self.recompute, RECOMPUTE)
        _choice("schedule", self.schedule, SCHEDULES)
        if self.dp % self.ep:
            raise ConfigError(f"ep={self.ep} must divide dp={self.dp} (experts are spread over data-parallel ranks)")
        if self.schedule == "interleaved":
            if self.pp < 2:
                raise ConfigError("the interleaved schedule needs pp >= 2")
            if self.virtual_stages < 2:
                raise ConfigError(f"the interleaved schedule needs virtual stages >= 2, got {self.virtual_stages}")
        elif self.virtual_stages != 1:
            raise ConfigError(f"virtual stages {self.virtual_stages} need --schedule interleaved, not {self.schedule}")
        if self.sequence_parallel and self.tp == 1:
            raise ConfigError("sequence parallelism needs tp >= 2")

    @property
    def world_size(self) -> int:
        """Number of ranks: ``dp * tp * pp * cp``."""
        return self.dp * self.tp * self.pp * self.cp


@dataclass(frozen=True)
class LLMConfig:
    """One training iteration of a transformer on a parallel job.

    Attributes:
        model: the network.
        parallel: the split.
        global_batch_size: sequences per iteration ``B``.
        micro_batch_size: sequences per micro-batch ``b``.
        dtype: activations, weights and gradients (``bf16``, ``fp16``, ``fp32``...).
        grad_reduce_dtype: data type of the data-parallel gradient reduction;
            None = ``dtype``.
        stack: the software mechanisms (:mod:`tracekit.workloads.stacks`; default Megatron-LM 2021).

    Raises:
        ConfigError: impossible combinations (see module docstring).
    """

    model: ModelSpec
    parallel: ParallelSpec = field(default_factory=ParallelSpec)
    global_batch_size: int = 1
    micro_batch_size: int = 1
    dtype: str = "bf16"
    grad_reduce_dtype: str | None = None
    stack: StackSpec = field(default_factory=StackSpec)

    def __post_init__(self) -> None:
        m, p = self.model, self.parallel
        _positive("global batch size", self.global_batch_size)
        _positive("micro-batch size", self.micro_batch_size)
        _choice("dtype", self.dtype, TRAINING_DTYPES)
        if self.grad_reduce_dtype is not None:
            _choice("gradient reduce dtype", self.grad_reduce_dtype, TRAINING_DTYPES)
        if self.global_batch_size % (self.micro_batch_size * p.dp):
            raise ConfigError(
                f"global batch {self.global_batch_size} is not divisible by micro-batch "
                f"{self.micro_batch_size} x dp {p.dp}"
            )
        if m.num_heads % p.tp:
            raise ConfigError(f"tp={p.tp} does not divide the {m.num_heads} attention heads")
        if m.kv_heads % p.tp:
            raise ConfigError(f"tp={p.tp} does not divide the {m.kv_heads} key/value heads")
        if m.ffn_size % p.tp:
            raise ConfigError(f"tp={p.tp} does not divide the FFN size {m.ffn_size}")
        chunk_layers(m.num_layers, p.pp, p.virtual_stages)  # uneven splits allowed (pipeline_split)
        if p.sequence_parallel and m.seq_length % (p.tp * p.cp):
            raise ConfigError(
                f"sequence length {m.seq_length} is not divisible by tp {p.tp} x cp {p.cp} "
                "(needed by sequence parallelism)"
            )
        if m.seq_length % p.cp:
            raise ConfigError(f"sequence length {m.seq_length} is not divisible by cp={p.cp}")
        self.stack.check_context_parallel(p.cp)
        self.stack.check_ring_chunks(p.cp, m.seq_length)
        if p.ep > 1 and not m.is_moe:
            raise ConfigError(f"ep={p.ep} needs a mixture-of-experts model (num experts > 0)")
        if m.is_moe and m.num_experts % p.ep:
            raise ConfigError(f"ep={p.ep} does not divide the {m.num_experts} experts")
        from tracekit.model.node import check_node_count

        # each micro-batch runs forward and backward through every layer of the rank's stage (a lower bound)
        check_node_count(
            self.num_micro_batches * 2 * (m.num_layers // p.pp),
            f"--global-batch {self.global_batch_size:,} ({self.num_micro_batches:,} micro-batches of "
            f"{m.num_layers // p.pp} layers per stage)",
        )
        check_group_size(p.microbatch_group_size, p.schedule, self.num_micro_batches)

    # ----- derived sizes ------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        """Number of ranks of the job."""
        return self.parallel.world_size

    @property
    def num_micro_batches(self) -> int:
        """Micro-batches per pipeline per iteration: ``B / (b * dp)``."""
        return self.global_batch_size // (self.micro_batch_size * self.parallel.dp)

    @property
    def dtype_bytes(self) -> int:
        """Bytes per activation, weight and gradient element (bf16's for fp8 under TE: workloads.stacks)."""
        return DTYPE_BYTES["bf16" if self.dtype == "fp8" and self.stack.fp8_recipe != "all" else self.dtype]

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element in the data-parallel reduction."""
        return DTYPE_BYTES[self.grad_reduce_dtype] if self.grad_reduce_dtype else self.dtype_bytes

    @property
    def layers_per_chunk(self) -> int:
        """Layers per model chunk: ``L / (pp * virtual_stages)`` (rounded down: see :attr:`chunk_layers`)."""
        return self.model.num_layers // (self.parallel.pp * self.parallel.virtual_stages)

    @property
    def chunk_layers(self) -> tuple[range, ...]:
        """The layers of each virtual stage (:func:`tracekit.workloads.pipeline_split.chunk_layers`)."""
        return chunk_layers(self.model.num_layers, self.parallel.pp, self.parallel.virtual_stages)

    @property
    def padded_vocab_size(self) -> int:
        """Vocabulary padded to a multiple of ``128 * tp`` (:func:`~tracekit.workloads.params.padded_vocab_size`)."""
        return padded_vocab_size(self.model.vocab_size, self.parallel.tp)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "LLMConfig":
        """The configuration a trace's ``llm_config`` metadata holds (``dataclasses.asdict`` of one, as JSON).

        Keys this version does not know are ignored; missing ones take their defaults.

        Raises:
            ConfigError: missing required fields or impossible values (the message names them).
        """

        def build(kind: type, values: Any) -> Any:
            if not isinstance(values, Mapping):
                raise ConfigError(f"llm_config: {kind.__name__} is not a table: {values!r}")
            names = {f.name for f in fields(kind)}
            try:
                return kind(**{k: v for k, v in values.items() if k in names})
            except TypeError as exc:
                raise ConfigError(f"llm_config: {kind.__name__}: {exc}") from None

        top = {f.name for f in fields(cls)} - {"model", "parallel", "stack"}
        return cls(
            build(ModelSpec, data.get("model")),
            build(ParallelSpec, data.get("parallel", {})),
            **{k: v for k, v in data.items() if k in top},
            stack=build(StackSpec, data.get("stack", {})),
        )

    def with_parallel(self, **changes: Any) -> "LLMConfig":
        """A copy with some :class:`ParallelSpec` fields changed (validated again)."""
        return replace(self, parallel=replace(self.parallel, **changes))


# ----- presets ------------------------------------------------------------------------------
_BROWN = "Brown et al. 2020, 'Language Models are Few-Shot Learners', Table 2.1"
_NARAYANAN_V = "vocabulary 51,200 as in Narayanan et al. 2021, section 5.1"

PRESETS: dict[str, tuple[ModelSpec, int]] = {
    # name: (model, default global batch in sequences)
    "gpt3-175b": (
        ModelSpec(
            "gpt3-175b",
            num_layers=96,
            hidden_size=12288,
            num_heads=96,
            seq_length=2048,
            vocab_size=51200,
            source=f"{_BROWN} (96 layers, d_model 12288, 96 heads, batch 3.2M tokens = 1536 x 2048); {_NARAYANAN_V}",
        ),
        1536,
    ),
    "gpt3-13b": (
        ModelSpec(
            "gpt3-13b",
            num_layers=40,
            hidden_size=5120,
            num_heads=40,
            seq_length=2048,
            vocab_size=51200,
            source=f"{_BROWN} (40 layers, 40 heads of 128, batch 2M tokens = 1024 x 2048; "
            f"the table's d_model 5140 is taken as 40 x 128 = 5120); {_NARAYANAN_V}",
        ),
        1024,
    ),
    "gpt3-1.3b": (
        ModelSpec(
            "gpt3-1.3b",
            num_layers=24,
            hidden_size=2048,
            num_heads=16,
            seq_length=2048,
            vocab_size=51200,
            source=f"{_BROWN} (24 layers, d_model 2048, 16 heads, batch 1M tokens = 512 x 2048); {_NARAYANAN_V}",
        ),
        512,
    ),
    "llama2-7b": (
        ModelSpec(
            "llama2-7b",
            num_layers=32,
            hidden_size=4096,
            num_heads=32,
            seq_length=4096,
            vocab_size=32000,
            ffn_hidden_size=11008,
            activation="swiglu",
            tied_embeddings=False,
            learned_position_embeddings=False,
            norm="rmsnorm",
            bias=False,
            source="Touvron et al. 2023, 'Llama 2', Table 1 and section 2.2 (context 4096, "
            "batch 4M tokens = 1024 x 4096); FFN 11008 from the released config",
        ),
        1024,
    ),
    "llama3-8b": (
        ModelSpec(
            "llama3-8b",
            num_layers=32,
            hidden_size=4096,
            num_heads=32,
            num_kv_heads=8,
            seq_length=8192,
            vocab_size=128256,
            ffn_hidden_size=14336,
            activation="swiglu",
            tied_embeddings=False,
            learned_position_embeddings=False,
            norm="rmsnorm",
            bias=False,
            source="Dubey et al. 2024, 'The Llama 3 Herd of Models', Table 3; global batch "
            "is our default (not published for 8B)",
        ),
        512,
    ),
    "llama3-70b": (
        ModelSpec(
            "llama3-70b",
            num_layers=80,
            hidden_size=8192,
            num_heads=64,
            num_kv_heads=8,
            seq_length=8192,
            vocab_size=128256,
            ffn_hidden_size=28672,
            activation="swiglu",
            tied_embeddings=False,
            learned_position_embeddings=False,
            norm="rmsnorm",
            bias=False,
            source="Dubey et al. 2024, 'The Llama 3 Herd of Models', Table 3; global batch "
            "is our default (not published for 70B)",
        ),
        1024,
    ),
    "mixtral-8x7b": (
        ModelSpec(
            "mixtral-8x7b",
            num_layers=32,
            hidden_size=4096,
            num_heads=32,
            num_kv_heads=8,
            seq_length=4096,
            vocab_size=32000,
            ffn_hidden_size=14336,
            activation="swiglu",
            tied_embeddings=False,
            learned_position_embeddings=False,
            norm="rmsnorm",
            bias=False,
            num_experts=8,
            moe_top_k=2,
            source="Jiang et al. 2024, 'Mixtral of Experts', Table 1 (8 experts, top-2); "
            "sequence length and global batch are our defaults",
        ),
        512,
    ),
}

PRESETS.update({name: (ModelSpec(name, **shape), batch) for name, (shape, batch) in PRESETS_2024.items()})


def preset(name: str) -> tuple[ModelSpec, int]:
    """``(model, default global batch)`` of a named preset (raises ConfigError listing the presets if unknown)."""
    try:
        return PRESETS[name.lower()]
    except KeyError:
        raise ConfigError(f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}") from None


def world_to_dp(world_size: int, *, tp: int, pp: int, cp: int = 1) -> int:
    """Data-parallel degree implied by a world size: ``world / (tp * pp * cp)``.

    Raises:
        ConfigError: the world size is not divisible by ``tp * pp * cp``.
    """
    _positive("number of ranks", world_size)
    if world_size % (tp * pp * cp):
        raise ConfigError(f"{world_size} ranks are not divisible by tp {tp} x pp {pp} x cp {cp}")
    return world_size // (tp * pp * cp)
