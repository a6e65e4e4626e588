"""Korthikanti et al. 2022, Table 5: iteration times with full and with selective recomputation, the reference.

Source: Korthikanti, Casper, Lym, McAfee, Andersch, Shoeybi, Catanzaro, "Reducing Activation Recomputation
in Large Transformer Models" (MLSys 2023, arXiv:2205.05198).  Table 5 gives the end-to-end iteration time
on A100 80 GB (Selene) of four GPT models with full activation recomputation and with the paper's method
("present work": sequence parallelism and selective recomputation of the attention core); Table 3 gives
the models and layouts (sequence 2048, vocabulary 51,200):

======  =====  ======  ======  ===  ===================  ====  =====  ====================
model   heads  hidden  layers  tp   pp (virtual stages)  gpus  batch  full / selective, s
======  =====  ======  ======  ===  ===================  ====  =====  ====================
22B     64     6144    48      8    1                    8     4      1.42 / 1.10
175B    96     12288   96      8    8 (3)                64    64     18.13 / 13.75
530B    128    20480   105     8    35 (3)               280   280    49.05 / 37.83
1T      160    25600   128     8    64                   512   512    94.42 / 71.49
======  =====  ======  ======  ===  ===================  ====  =====  ====================

Micro-batch 4 for 22B (the whole batch), 1 for the others; data parallelism 1 on every row (``gpus = tp x
pp``).  The generated jobs use the Table-1 calibration unchanged (:mod:`.calibration`: GEMM efficiency by
shape, the one fitted ``GEMM_K_FILL``, kernel and optimizer overheads); "selective" here is what the paper
measured, selective recomputation *with* sequence parallelism.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracekit.errors import ConfigError

#: The paper's sequence length and vocabulary (Table 3).
TABLE5_SEQ_LENGTH = 2048
TABLE5_VOCAB = 51200


@dataclass(frozen=True)
class Table5Row:
    """One row of Korthikanti et al. 2022, Tables 3 and 5 (module docstring).

    Attributes:
        name: model size as the paper writes it.
        heads, hidden, layers: attention heads, hidden size, transformer layers.
        tp, pp, virtual_stages: tensor- and pipeline-parallel sizes, model chunks per pipeline rank.
        gpus: GPUs (``tp x pp``: data parallelism 1).
        batch_size, micro_batch_size: global batch and micro-batch, sequences.
        full_s, selective_s: measured iteration times, seconds, with full recomputation and with sequence
            parallelism + selective recomputation.
    """

    name: str
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    virtual_stages: int
    gpus: int
    batch_size: int
    micro_batch_size: int
    full_s: float
    selective_s: float


TABLE5 = (
    Table5Row("22B", 64, 6144, 48, 8, 1, 1, 8, 4, 4, 1.42, 1.10),
    Table5Row("175B", 96, 12288, 96, 8, 8, 3, 64, 64, 1, 18.13, 13.75),
    Table5Row("530B", 128, 20480, 105, 8, 35, 3, 280, 280, 1, 49.05, 37.83),
    Table5Row("1T", 160, 25600, 128, 8, 64, 1, 512, 512, 1, 94.42, 71.49),
)
#: The two recomputation modes of Table 5 and the ParallelSpec settings each means.
MODES = {"full": ("full", False), "selective": ("selective", True)}


def table5_row(name: str) -> Table5Row:
    """The :data:`TABLE5` row named ``name`` (``22B``, ``175B``, ``530B``, ``1T``).

    Raises:
        ConfigError: no such row.
    """
    for row in TABLE5:
        if row.name == name:
            return row
    raise ConfigError(f"no Table-5 row {name!r}; rows: {', '.join(r.name for r in TABLE5)}")


def table5_config(row: Table5Row, mode: str):
    """The :class:`~tracekit.workloads.config.LLMConfig` of a row in ``mode`` (``full``: full recomputation;
    ``selective``: selective recomputation with sequence parallelism), GPT shape of the ``gpt3-1.3b`` preset
    (learned positions, tied embeddings, GELU, LayerNorm, biases), the interleaved schedule where the row
    has virtual stages, and Megatron-LM's 2021-22 non-overlapped gradient reduction (:mod:`.calibration`).

    Raises:
        ConfigError: an unknown mode.
    """
    from tracekit.converters.generators.calibration import MEGATRON_2021_OVERLAP_GRAD_REDUCE, paper_gpt
    from tracekit.workloads.config import LLMConfig, ParallelSpec

    if mode not in MODES:
        raise ConfigError(f"Table-5 mode must be one of {', '.join(MODES)}, got {mode!r}")
    recompute, sequence_parallel = MODES[mode]
    model = paper_gpt(
        f"korthikanti-{row.name}", row, TABLE5_SEQ_LENGTH, TABLE5_VOCAB, "Korthikanti et al. 2022, Table 3"
    )
    parallel = ParallelSpec(
        dp=row.gpus // (row.tp * row.pp),
        tp=row.tp,
        pp=row.pp,
        recompute=recompute,
        sequence_parallel=sequence_parallel,
        schedule="interleaved" if row.virtual_stages > 1 else "1f1b",
        virtual_stages=row.virtual_stages,
        overlap_grad_reduce=MEGATRON_2021_OVERLAP_GRAD_REDUCE,
    )
    return LLMConfig(model, parallel, global_batch_size=row.batch_size, micro_batch_size=row.micro_batch_size)


def table5_seconds(row: Table5Row, mode: str) -> float:
    """The paper's iteration time of ``row`` in ``mode``, seconds."""
    return row.full_s if mode == "full" else row.selective_s


__all__ = ["MODES", "TABLE5", "Table5Row", "table5_config", "table5_row", "table5_seconds"]
