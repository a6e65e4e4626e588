"""Megatron-Turing NLG 530B as DeepSpeed and Megatron trained it: the reference rows of the ``deepspeed`` stack.

Source: Smith et al. 2022, "Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B, A Large-Scale
Generative Language Model" (arXiv 2201.11990):

* the model: 105 layers, hidden 20,480, 128 attention heads, sequence 2,048, GPT-2's BPE vocabulary (50,257
  tokens; Megatron pads it to a multiple of 128 x tp = 1,024: 51,200, Table 1's vocabulary);
* the layout: 8-way tensor parallelism inside a DGX A100 node (8 A100 80 GB, NVSwitch; Selene, HDR InfiniBand),
  35-way pipeline parallelism across nodes, one model replica on 280 GPUs, data parallelism over the replicas;
  global batch 1,920 (after the batch ramp-up);
* the measurements (section 2.4): 60.1, 50.2 and 44.4 s per iteration on 280, 350 and 420 nodes, i.e. 126,
  121 and 113 TFLOP/s per GPU (also quoted so in cli99/llm-analysis examples/megatron-turing-nlg/README.md).
  :func:`mtnlg_tflops_per_gpu` (Narayanan et al.'s formula, recompute counted) gives the three from the times,
  so the paper counts recompute: full activation checkpointing is assumed, and micro-batch 1 (not stated;
  as in the project's Table-1 rows).

The same shape ran under Megatron-LM at 163 TFLOP/s per GPU (Narayanan et al. 2021, Table 1, 529.6B row: 2,520
GPUs, batch 2,520); the software, not the shape, makes the difference (issue 28).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tracekit.errors import ConfigError
from tracekit.workloads.config import LLMConfig, ParallelSpec
from tracekit.workloads.stacks import apply_stack

SOURCE = "Smith et al. 2022 (arXiv 2201.11990), section 2.4"
MTNLG_LAYERS, MTNLG_HIDDEN, MTNLG_HEADS = 105, 20480, 128
MTNLG_SEQ_LENGTH, MTNLG_VOCAB = 2048, 51200
MTNLG_TP, MTNLG_PP, MTNLG_GLOBAL_BATCH, MTNLG_MICRO_BATCH = 8, 35, 1920, 1
GPUS_PER_NODE = 8


@dataclass(frozen=True)
class MtnlgRow:
    """One measured MT-NLG 530B configuration (module doc).

    Attributes:
        nodes: DGX A100 nodes (8 GPUs each).
        iteration_s: published time per iteration (global batch 1,920), seconds.
        tflops_per_gpu: published TFLOP/s per GPU.
    """

    nodes: int
    iteration_s: float
    tflops_per_gpu: float

    @property
    def gpus(self) -> int:
        """GPUs: ``nodes x 8``."""
        return self.nodes * GPUS_PER_NODE

    @property
    def dp(self) -> int:
        """Data-parallel replicas: ``gpus / (tp pp)`` (8, 10, 12)."""
        return self.gpus // (MTNLG_TP * MTNLG_PP)


#: Section 2.4 of the paper: (nodes, seconds per iteration, TFLOP/s per GPU).
MTNLG_ROWS = (MtnlgRow(280, 60.1, 126.0), MtnlgRow(350, 50.2, 121.0), MtnlgRow(420, 44.4, 113.0))


def mtnlg_row(nodes: int) -> MtnlgRow:
    """The :data:`MTNLG_ROWS` row of ``nodes`` DGX A100 nodes. Raises ConfigError when there is none."""
    for row in MTNLG_ROWS:
        if row.nodes == nodes:
            return row
    raise ConfigError(f"no MT-NLG row on {nodes} nodes; rows: {', '.join(str(r.nodes) for r in MTNLG_ROWS)}")


def mtnlg_config(row: MtnlgRow, stack: str = "deepspeed", **knobs) -> LLMConfig:
    """The :class:`~tracekit.workloads.config.LLMConfig` of ``row`` (TP 8, PP 35, dp ``row.dp``, batch 1,920,
    micro-batch 1, full recompute, GPT shape of the ``gpt3-1.3b`` preset) run by ``stack`` with ``knobs``.

    Raises:
        ConfigError: an unknown stack or knob (:func:`tracekit.workloads.stacks.apply_stack`).
    """
    from tracekit.converters.generators.calibration import paper_gpt, table1_row

    shape = replace(table1_row("529.6B"), layers=MTNLG_LAYERS, hidden=MTNLG_HIDDEN, heads=MTNLG_HEADS)
    model = paper_gpt("mt-nlg-530b", shape, MTNLG_SEQ_LENGTH, MTNLG_VOCAB, SOURCE)
    parallel = ParallelSpec(dp=row.dp, tp=MTNLG_TP, pp=MTNLG_PP, recompute="full")
    config = LLMConfig(model, parallel, global_batch_size=MTNLG_GLOBAL_BATCH, micro_batch_size=MTNLG_MICRO_BATCH)
    return apply_stack(config, stack, **knobs)


def mtnlg_tflops_per_gpu(row: MtnlgRow, iteration_s: float) -> float:
    """TFLOP/s per GPU by Narayanan et al.'s formula (with recompute) for ``row`` at ``iteration_s`` seconds:
    ``96 B s L h^2 (1 + s / (6 h) + V / (16 L h)) / (iteration_s x GPUs) / 1e12``."""
    from tracekit.workloads.flops import gpt_iteration_flops

    flops = gpt_iteration_flops(
        MTNLG_GLOBAL_BATCH, MTNLG_SEQ_LENGTH, MTNLG_LAYERS, MTNLG_HIDDEN, MTNLG_VOCAB, full_recompute=True
    )
    return flops / (iteration_s * row.gpus) / 1e12


__all__ = [
    "MTNLG_ROWS",
    "SOURCE",
    "MtnlgRow",
    "mtnlg_config",
    "mtnlg_row",
    "mtnlg_tflops_per_gpu",
]
