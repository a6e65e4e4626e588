"""NVIDIA's public NeMo performance recipes on DGX H100: the reference rows for today's training stacks.

Source: ``NVIDIA/dgxc-benchmarking`` (Apache-2.0) at commit 1b9bb6b, the recipe READMEs' "Expected
Performance" tables (training step time, seconds per step, on the smallest GPU count of each table) and the
recipe YAMLs next to them for what the tables do not state:

* ``llama3.1/README_8b.md``: Llama 3.1 8B BF16, TP 1, PP 1, CP 2, MBS 1, 8 H100, GBS 128: 12.78 s;
  ``llama3.1_8b.yaml``: no sequence parallelism (tp 1), ``ub_tp_comm_overlap: false``;
* ``llama3.1/README_70b.md``: Llama 3.1 70B BF16, TP 4, PP 4, CP 2, VP 5, MBS 1, 64 H100, GBS 128: 14.61 s;
  ``llama3.1_70b.yaml``: ``sequence_parallel: true``, ``ub_tp_comm_overlap: true``;
* ``nemotron/README_15b.md``: Nemotron-4 15B BF16, TP 4, PP 1, MBS 4, 16 H100, GBS 64: 2.812 s;
  ``nemotron4-15b-synth.yaml``: 32 layers, hidden 6144, FFN 24576, 48 heads, 8 query groups, sequence 4096,
  vocabulary 256,000, squared-ReLU, LayerNorm (``layernorm1p``), no biases, RoPE, untied output layer,
  ``sequence_parallel: true``, ``ub_tp_comm_overlap: True``;
* ``nemo_megatron/README_175b.md``: GPT-3 175B, TP 4, PP 8, VP 12, MBS 1, sequence 2048, 128 H100,
  GBS 256: BF16 8.309 s, FP8 5.626 s; ``gpt3_175b_hydra.yaml``: ``sequence_parallel: true``,
  ``ub_tp_comm_overlap: true``.

Every YAML runs the distributed optimizer (``distributed_fused_adam`` / ``mcore_distributed_optim``:
ZeRO-1, gradients reduce-scattered and parameters all-gathered, both overlapped), no activation recompute,
and fused (flash) attention: the ``nemo`` stack (:mod:`tracekit.workloads.stacks`).  Nemotron-4's
squared-ReLU FFN is generated as the two-GEMM ``gelu`` FFN (same GEMMs; one elementwise kernel between).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tracekit.workloads.config import LLMConfig, ModelSpec, ParallelSpec, preset
from tracekit.workloads.stacks import apply_stack

SOURCE = "NVIDIA/dgxc-benchmarking commit 1b9bb6b"

#: Nemotron-4 15B as nemotron/nemotron4-15b-synth.yaml describes it (module doc).
NEMOTRON4_15B = ModelSpec(
    "nemotron4-15b",
    num_layers=32,
    hidden_size=6144,
    num_heads=48,
    num_kv_heads=8,
    seq_length=4096,
    vocab_size=256000,
    ffn_hidden_size=24576,
    activation="gelu",
    tied_embeddings=False,
    learned_position_embeddings=False,
    norm="layernorm",
    bias=False,
    source=f"{SOURCE} nemotron/nemotron4-15b-synth.yaml (squared-ReLU generated as a two-GEMM gelu FFN)",
)


@dataclass(frozen=True)
class RecipeRow:
    """One published step time: the layout, the data type and the seconds per step.

    Attributes:
        name: label.
        readme: the README holding the table (path in the repository).
        model: the preset name, or ``nemotron4-15b`` (:data:`NEMOTRON4_15B`).
        gpus, tp, pp, cp, vp: layout (vp 1 = no interleaving).
        micro_batch, global_batch: sequences.
        sequence_parallel: from the recipe YAML.
        dtype: ``bf16`` or ``fp8``.
        step_s: the published training step time, seconds.
    """

    name: str
    readme: str
    model: str
    gpus: int
    tp: int
    pp: int
    cp: int
    vp: int
    micro_batch: int
    global_batch: int
    sequence_parallel: bool
    dtype: str
    step_s: float


RECIPES = (
    RecipeRow("llama3.1-8b", "llama3.1/README_8b.md", "llama3-8b", 8, 1, 1, 2, 1, 1, 128, False, "bf16", 12.78),
    RecipeRow("llama3.1-70b", "llama3.1/README_70b.md", "llama3-70b", 64, 4, 4, 2, 5, 1, 128, True, "bf16", 14.61),
    RecipeRow("nemotron4-15b", "nemotron/README_15b.md", "nemotron4-15b", 16, 4, 1, 1, 1, 4, 64, True, "bf16", 2.812),
    RecipeRow("gpt3-175b", "nemo_megatron/README_175b.md", "gpt3-175b", 128, 4, 8, 1, 12, 1, 256, True, "bf16", 8.309),
    RecipeRow(
        "gpt3-175b-fp8", "nemo_megatron/README_175b.md", "gpt3-175b", 128, 4, 8, 1, 12, 1, 256, True, "fp8", 5.626
    ),
)


def recipe(name: str) -> RecipeRow:
    """The :data:`RECIPES` row named ``name``.

    Raises:
        ConfigError: unknown name.
    """
    from tracekit.errors import ConfigError

    for row in RECIPES:
        if row.name == name:
            return row
    raise ConfigError(f"no NeMo recipe row {name!r}; rows: {', '.join(r.name for r in RECIPES)}")


def recipe_config(row: RecipeRow, stack: str = "nemo") -> LLMConfig:
    """The :class:`LLMConfig` of a recipe row run by ``stack`` (ZeRO-1: the distributed optimizer).

    Llama 3.1 shares Llama 3's shape (the ``llama3-*`` presets; sequence 8192, vocabulary 128,256).
    """
    model = NEMOTRON4_15B if row.model == "nemotron4-15b" else preset(row.model)[0]
    model = replace(model, source=f"{model.source}; layout: {SOURCE} {row.readme}")
    parallel = ParallelSpec(
        dp=row.gpus // (row.tp * row.pp * row.cp),
        tp=row.tp,
        pp=row.pp,
        cp=row.cp,
        sequence_parallel=row.sequence_parallel,
        zero_stage=1,
        schedule="interleaved" if row.vp > 1 else "1f1b",
        virtual_stages=row.vp,
    )
    config = LLMConfig(
        model, parallel, global_batch_size=row.global_batch, micro_batch_size=row.micro_batch, dtype=row.dtype
    )
    return apply_stack(config, stack)


__all__ = ["NEMOTRON4_15B", "RECIPES", "SOURCE", "RecipeRow", "recipe", "recipe_config"]
