"""Calibrated op durations for the LLM generator: every timing assumption in one place, with its source.

The generator (:mod:`.llm_ops`) knows each op's shape; this module turns a shape into nanoseconds on one
device (a :class:`tracekit.costs.devices.DeviceModel`, usually found from a replayer hardware spec):

* **GEMMs** ``[m, k] @ [k, n]`` (``batch`` copies): ``2 m n k batch / (peak(dtype) x
  gemm_efficiency(m, n, k, dtype, device, batch))`` -- the compute model's curve (tile and wave
  quantization, :func:`tracekit.costs.devices.gemm_efficiency`), or the memory time if that is longer.
* **Attention** as Megatron-LM ran it in 2021 (no fused attention kernel): ``Q K^T`` and ``P V`` are
  batched GEMMs over ``b x heads`` (priced as GEMMs above), softmax is one fused scale-mask-softmax
  kernel and attention dropout a separate elementwise kernel that also writes a one-byte mask
  (:data:`ATTENTION_DROPOUT`).
* **Elementwise / memory-bound** ops: ``max(F / vector peak, B / (bandwidth x memory_efficiency(B)))``
  (:func:`tracekit.costs.devices.memory_efficiency`).
* **Short reduction dimensions**: GEMM efficiency times ``k / (k + GEMM_K_FILL)`` (:data:`GEMM_K_FILL`).
* **Kernel launch and framework overhead**: :data:`KERNEL_OVERHEAD_NS` per generated compute node.
* **Optimizer step**: Adam's bytes per parameter (see :mod:`.llm`) plus the passes Megatron-LM's
  mixed-precision optimizer makes over the gradients (:data:`OPTIMIZER_EXTRA_BYTES_PER_PARAM`).
* **Data-parallel gradient reduction**: not overlapped with the backward in Megatron-LM as of the paper
  (:data:`MEGATRON_2021_OVERLAP_GRAD_REDUCE`); pipeline bubbles are not a parameter: they come out of
  replaying the schedule (:mod:`.schedules`).

:data:`ASSUMPTIONS` lists every constant with its unit and source (printed by the Table-1 benchmark and
checked by ``tests/converters/test_megatron_table1.py``).  The constants fitted to measurements say so:
they were fitted on the Megatron-LM Table-1 rows named there, and the other rows are the check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tracekit.errors import ConfigError

#: Fixed cost per generated compute node (ns): the GPU-side gap between back-to-back dependent kernels
#: (launch latency not hidden behind the previous kernel), one per node although a node may stand for 1-3
#: kernels. Assumed (a few microseconds is the commonly measured order on A100/H100 with CUDA 11-12); not
#: fitted: the Table-1 rows move by < 2 % between 0 and 5 us.
KERNEL_OVERHEAD_NS = 2_000.0
#: Main-loop fill of a tensor-core GEMM (elements of ``k``): efficiency is scaled by ``k / (k + K_FILL)``
#: -- the prologue (first tiles loaded) and epilogue (output written) do not overlap the main loop, so a
#: short reduction dimension (attention's head dim 64-128, ``h / tp`` in row-parallel GEMMs) runs below
#: the device's large-GEMM efficiency, which the compute model's curve (tile and wave quantization only)
#: does not see. Source: fitted to Narayanan et al. 2021, Table 1, rows 1.7B and 18.4B while the tp
#: input-gradient reduction was still overlapped (128 left them +18 % and +10 % fast, 256 +10 % and +6 %,
#: 384 +2.5 % and +3 %); with it serialized as below, 384 gives +2.5 % and -5.8 %. Not refitted since; the
#: other rows are the check (benchmarks/bench_megatron.py).
GEMM_K_FILL = 384.0
#: Megatron-LM 2021 runs attention unfused: scaled-masked softmax as one fused kernel
#: (megatron/model/fused_softmax.py) and dropout (p = 0.1) on the probabilities as a separate kernel
#: writing a one-byte mask (megatron/model/transformer.py, ParallelAttention). Source: Megatron-LM
#: repository, v2.x (2021), the code the paper measured.
ATTENTION_DROPOUT = True
#: Extra bytes per parameter the mixed-precision optimizer moves besides Adam's own update: unscaling
#: the fp32 main gradients with the inf/NaN check (read + write 4 B) and the gradient-norm clipping pass
#: (read 4 B). Source: Megatron-LM megatron/optimizer/optimizer.py (``_unscale_main_grads_and_check_for_nan``,
#: ``clip_grad_norm_fp32``), v2.x (2021).
OPTIMIZER_EXTRA_BYTES_PER_PARAM = 12
#: Megatron-LM 2021 all-reduces a column-parallel layer's input gradient over tp after the layer's whole
#: backward (``_CopyToModelParallelRegion.backward`` on the compute stream), not overlapped with the
#: weight-gradient GEMM; the asynchronous all-reduce (``LinearWithGradAccumulationAndAsyncAllreduce``)
#: came after the paper. Source: Megatron-LM megatron/mpu/mappings.py and layers.py, v2.x.
MEGATRON_2021_TP_DGRAD_OVERLAP = False
#: Megatron-LM 2021's data-parallel gradient all-reduce runs after the last micro-batch's backward
#: (``model.allreduce_gradients()`` in ``train_step``), not overlapped with it; overlap arrived with
#: ``--overlap-grad-reduce`` in Megatron-Core (2023). Source: Megatron-LM megatron/training.py, v2.x.
MEGATRON_2021_OVERLAP_GRAD_REDUCE = False
#: Fraction of the device curve's tensor-core rate (GEMMs and fused attention) an H100 SXM sustains through
#: a whole training step: the curve's maxima (devices.toml: 0.80 of peak for GEMMs from short MAMF runs, 0.75
#: for FlashAttention-3's best forward) are best-case kernel figures. A likely cause, not measured here: a
#: training step holds the GPU at its 700 W limit, where the tensor-core clock can sit below the 1.83 GHz the
#: 989 TFLOP/s peak is quoted at (G. Lockwood, "Peak FLOPS": 528 tensor cores x 1024 FLOP/clock x 1.83 GHz).
#: Source of the value: fitted to ONE row,
#: NVIDIA/dgxc-benchmarking 1b9bb6b llama3.1/README_8b.md (Llama 3.1 8B, 8 GPUs, 12.78 s per step: no tp,
#: no pp, compute-bound); the Llama 3.1 70B, Nemotron-4 15B and GPT-3 175B rows are the check
#: (benchmarks/bench_stacks.py). A100 keeps 1.0: its Table-1 rows are fitted by GEMM_K_FILL.
SUSTAINED_TENSOR_FRACTION = {"h100-sxm": 0.79}
#: FP8 GEMMs reach a smaller fraction of the FP8 peak than BF16 GEMMs of theirs: the device curve
#: (``gemm_efficiency``, set from BF16 measurements) is scaled by this for FP8 linear layers. ASSUMED, not
#: measured here and not fitted: about 0.66 of the dense FP8 peak against 0.80 of the BF16 peak for large
#: GEMMs on H100 SXM (0.66 / 0.80 = 0.82). The GPT-3 175B BF16/FP8 ratio of the NeMo recipe is the check.
FP8_GEMM_EFFICIENCY = 0.82

#: ``(name, value, unit, source)`` of every assumption above, for reports and tests.
ASSUMPTIONS: tuple[tuple[str, Any, str, str], ...] = (
    (
        "gemm_efficiency",
        "tracekit.costs.devices.gemm_efficiency",
        "fraction of peak",
        "compute model (issue 15): tile and wave quantization x device max (devices.toml)",
    ),
    (
        "memory_efficiency",
        "tracekit.costs.devices.memory_efficiency",
        "fraction of bandwidth",
        "compute model (issue 15): Little's law curve x device max (devices.toml)",
    ),
    ("gemm_k_fill", GEMM_K_FILL, "elements of k", "fitted: Narayanan et al. 2021 Table 1 rows 1.7B and 18.4B"),
    ("kernel_overhead_ns", KERNEL_OVERHEAD_NS, "ns per compute node", "assumed: back-to-back kernel gap"),
    ("attention_dropout", ATTENTION_DROPOUT, "flag", "Megatron-LM v2.x ParallelAttention (unfused attention)"),
    (
        "optimizer_extra_bytes_per_param",
        OPTIMIZER_EXTRA_BYTES_PER_PARAM,
        "bytes",
        "Megatron-LM v2.x optimizer.py: unscale + inf check, grad-norm clipping",
    ),
    ("tp_dgrad_overlap", MEGATRON_2021_TP_DGRAD_OVERLAP, "flag", "Megatron-LM v2.x mpu/mappings.py, layers.py"),
    ("overlap_grad_reduce", MEGATRON_2021_OVERLAP_GRAD_REDUCE, "flag", "Megatron-LM v2.x training.py"),
    (
        "sustained_tensor_fraction",
        SUSTAINED_TENSOR_FRACTION,
        "fraction of the tensor-core curve",
        "fitted: NVIDIA/dgxc-benchmarking 1b9bb6b Llama 3.1 8B row (H100); A100 1.0",
    ),
    (
        "fp8_gemm_efficiency",
        FP8_GEMM_EFFICIENCY,
        "fraction of the BF16 curve",
        "assumed: cuBLASLt FP8 vs BF16 large-GEMM fraction of peak on H100 SXM",
    ),
)


@dataclass(frozen=True)
class CalibratedCost:
    """Shape-aware op durations on one device (module doc).

    Attributes:
        device: the :class:`tracekit.costs.devices.DeviceModel` (peaks, bandwidth, efficiency curves).
        dtype: the dtype whose peak prices GEMMs (``bf16``, ``fp16`` ...).
        kernel_overhead_ns: fixed ns added to every compute node.
        attention_dropout: price a dropout kernel on the attention probabilities.
        optimizer_extra_bytes_per_param: bytes the optimizer moves per parameter besides Adam's.
        gemm_k_fill: the ``K_FILL`` of ``k / (k + K_FILL)`` (elements).
        tp_dgrad_overlap: the generator overlaps the tp reduction of an input gradient with the
            weight-gradient GEMM (False: it runs before, as Megatron-LM 2021); a stack's
            ``tp_dgrad_overlap`` (:mod:`tracekit.workloads.stacks`) wins over it.
        tensor_fraction: sustained fraction of the tensor-core curve (None: :data:`SUSTAINED_TENSOR_FRACTION`
            of the device, else 1).
        gemm_dtype: dtype of the transformer's linear-layer GEMMs (``fp8`` under Transformer Engine's
            recipe: :func:`cost_for`); None = :attr:`dtype`.

    Raises:
        ConfigError: a negative overhead, or a device that is not one (see
            :func:`tracekit.costs.devices.device_model`).
    """

    device: Any
    dtype: str = "bf16"
    kernel_overhead_ns: float = KERNEL_OVERHEAD_NS
    attention_dropout: bool = ATTENTION_DROPOUT
    optimizer_extra_bytes_per_param: int = OPTIMIZER_EXTRA_BYTES_PER_PARAM
    gemm_k_fill: float = GEMM_K_FILL
    tp_dgrad_overlap: bool = MEGATRON_2021_TP_DGRAD_OVERLAP
    gemm_dtype: str | None = None
    tensor_fraction: float | None = None

    def __post_init__(self) -> None:
        from tracekit.costs.devices import device_model

        object.__setattr__(self, "device", device_model(self.device))
        if self.tensor_fraction is None:
            object.__setattr__(self, "tensor_fraction", SUSTAINED_TENSOR_FRACTION.get(self.device.key, 1.0))
        if not self.kernel_overhead_ns >= 0 or math.isinf(self.kernel_overhead_ns):
            raise ConfigError(f"kernel overhead must be >= 0 ns, got {self.kernel_overhead_ns!r}")

    @property
    def peak_flops_per_s(self) -> float:
        """Peak FLOP/s of the device for :attr:`dtype` (the device table's value, :meth:`DeviceModel.peak`
        falls back tf32 -> fp32 -> the default dtype); no efficiency applied.

        Raises:
            ConfigError: the device lists no peak for any of those dtypes.
        """
        return self.device.peak(self.dtype)[0]

    @property
    def _sustained(self) -> float:
        """:attr:`tensor_fraction` as set by ``__post_init__`` (never None after it)."""
        return 1.0 if self.tensor_fraction is None else self.tensor_fraction

    @property
    def mem_bandwidth_bytes_per_s(self) -> float:
        """Peak memory bandwidth of the device, bytes/s (the device table's value, no efficiency applied)."""
        return self.device.mem_bandwidth_bytes_per_s

    def _memory_s(self, tensor_bytes: float) -> float:
        from tracekit.costs.devices import memory_efficiency

        if tensor_bytes <= 0:
            return 0.0
        return tensor_bytes / (self.mem_bandwidth_bytes_per_s * memory_efficiency(tensor_bytes, self.device))

    def duration_ns(self, num_ops: int, tensor_bytes: int) -> int:
        """A memory-bound (elementwise) node: vector FLOPs or bytes, whichever is slower, plus overhead."""
        seconds = max(num_ops / self.device.vector_flops_per_s, self._memory_s(tensor_bytes))
        return math.ceil(seconds * 1e9 + self.kernel_overhead_ns)

    def gemm_ns(
        self, m: int, k: int, n: int, tensor_bytes: int, batch: int = 1, linear: bool = False, comm_sms: int = 0
    ) -> int:
        """``batch`` GEMMs ``[m, k] @ [k, n]`` moving ``tensor_bytes``: the compute model's efficiency at
        this shape, or the memory time if longer, plus overhead; a ``linear`` layer's GEMM runs in
        :attr:`gemm_dtype` (FP8 at the device's FP8 peak times :data:`FP8_GEMM_EFFICIENCY`).  ``comm_sms``: SMs a
        communication kernel keeps while the GEMM runs (Transformer Engine's ``set_sm_margin``): the GEMM runs
        on the others, at their share of the peak and with their wave quantization.

        Raises:
            ConfigError: ``comm_sms`` leaves the GEMM no SM (at least the device's count).
        """
        import dataclasses

        from tracekit.costs.devices import gemm_efficiency

        dtype = (self.gemm_dtype or self.dtype) if linear else self.dtype
        device, share = self.device, 1.0
        if comm_sms >= device.compute_units > 0:
            raise ConfigError(
                f"--stack-knob tp_overlap_comm_sms={comm_sms}: the {device.name} has {device.compute_units} SMs and "
                f"the overlapped GEMMs need at least one (give at most {device.compute_units - 1})"
            )
        if 0 < comm_sms < device.compute_units:
            share = (device.compute_units - comm_sms) / device.compute_units
            device = dataclasses.replace(device, compute_units=device.compute_units - comm_sms)
        eff = gemm_efficiency(m, n, k, dtype, device, batch) * k / (k + self.gemm_k_fill) * self._sustained
        if dtype == "fp8":
            eff *= FP8_GEMM_EFFICIENCY
        flops = 2 * m * n * k * batch
        compute_s = flops / (self.device.peak(dtype)[0] * share * eff) if eff > 0 else 0.0
        return math.ceil(max(compute_s, self._memory_s(tensor_bytes)) * 1e9 + self.kernel_overhead_ns)

    def optimizer_ns(self, num_ops: int, tensor_bytes: int, params: int) -> int:
        """The optimizer step over ``params`` parameters: Adam's bytes plus the extra gradient passes."""
        return self.duration_ns(num_ops, tensor_bytes + self.optimizer_extra_bytes_per_param * params)

    def attention_ns(self, num_ops: int, tensor_bytes: int, batch_heads: int, q_len: int) -> int:
        """One fused attention kernel executing ``num_ops`` FLOPs over ``batch_heads`` (b x heads) and
        ``q_len`` query rows: ``F / (peak(dtype) x attention_efficiency)`` or the memory time if longer,
        plus overhead (:func:`tracekit.costs.devices.attention_efficiency`: FlashAttention's wave quantization
        of ``b h ceil(q / T)`` query tiles times the device's fused-attention efficiency).  Attention runs in
        :attr:`dtype` (BF16 under Transformer Engine's FP8 recipe)."""
        from tracekit.costs.devices import attention_efficiency

        eff = attention_efficiency(batch_heads, q_len, self.device) * self._sustained
        compute_s = num_ops / (self.peak_flops_per_s * eff) if eff > 0 else 0.0
        return math.ceil(max(compute_s, self._memory_s(tensor_bytes)) * 1e9 + self.kernel_overhead_ns)


def cost_for(hardware: Any, config: Any) -> CalibratedCost:
    """The :class:`CalibratedCost` for an :class:`~tracekit.workloads.config.LLMConfig` on ``hardware``:
    ``dtype="fp8"`` under Transformer Engine's recipe prices linear GEMMs in FP8 and the rest in BF16
    (:mod:`tracekit.workloads.stacks`); else everything in the config's dtype.

    Raises:
        ConfigError: as :func:`calibrated_cost`.
    """
    from tracekit.workloads.stacks import fp8_gemms_only

    if fp8_gemms_only(config):
        return CalibratedCost(hardware, "bf16", gemm_dtype="fp8")
    return CalibratedCost(hardware, config.dtype)


def calibrated_cost(hardware: Any, dtype: str = "bf16") -> CalibratedCost:
    """A :class:`CalibratedCost` for a replayer :class:`HardwareSpec` (its device's preset curves with the
    spec's peaks), a device preset name of ``tracekit/costs/devices.toml`` (``a100-80gb``) or a DeviceModel.
    Spec names (``dgx-a100``) are the caller's to load (``load_spec``): converters do not import the
    replayer.

    Raises:
        ConfigError: an unknown device name or a device without peaks.
    """
    return CalibratedCost(hardware, dtype)


# ----------------------------------------------------------------------------- the reference measurements
@dataclass(frozen=True)
class Table1Row:
    """One row of Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters
    Using Megatron-LM", SC'21), Table 1: GPT models on A100 80 GB (Selene), sequence 2048, vocabulary
    51,200, mixed precision, activation recompute; achieved TFLOP/s per GPU end to end.

    Attributes:
        name: model size as the paper writes it (``1.7B`` ... ``1T``).
        heads, hidden, layers: attention heads, hidden size, transformer layers.
        tp, pp, gpus: tensor- and pipeline-parallel sizes and GPUs (dp = gpus / (tp pp)).
        batch_size: global batch (sequences).
        tflops_per_gpu: the measured TFLOP/s per GPU.
    """

    name: str
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    batch_size: int
    tflops_per_gpu: float


#: Rows of Table 1 used as references (the 1T row's 163 TFLOP/s on 3,072 GPUs is also in the abstract:
#: 502 PFLOP/s aggregate).
TABLE1 = (
    Table1Row("1.7B", 24, 2304, 24, 1, 1, 32, 512, 137.0),
    Table1Row("3.6B", 32, 3072, 30, 2, 1, 64, 512, 138.0),
    Table1Row("7.5B", 32, 4096, 36, 4, 1, 128, 512, 142.0),
    Table1Row("18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135.0),
    Table1Row("39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138.0),
    Table1Row("76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140.0),
    Table1Row("145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148.0),
    Table1Row("310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155.0),
    Table1Row("529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163.0),
    Table1Row("1T", 160, 25600, 128, 8, 64, 3072, 3072, 163.0),
)
#: What Table 1 does not state, assumed here: micro-batch 1, the non-interleaved 1F1B schedule, fp16/bf16
#: (2-byte) activations and gradients, no sequence parallelism (2022), full activation recompute.
TABLE1_MICRO_BATCH = 1
TABLE1_SEQ_LENGTH = 2048
TABLE1_VOCAB = 51200


def table1_row(name: str) -> Table1Row:
    """The :data:`TABLE1` row named ``name`` (``1.7B`` ... ``1T``). Raises ConfigError when unknown."""
    for row in TABLE1:
        if row.name == name:
            return row
    raise ConfigError(f"no Table-1 row {name!r}; rows: {', '.join(r.name for r in TABLE1)}")


def paper_gpt(name: str, row: Any, seq_length: int, vocab_size: int, source: str):
    """The :class:`~tracekit.workloads.config.ModelSpec` of a GPT row of a Megatron paper table: ``row``'s
    ``layers``, ``hidden`` and ``heads`` on the ``gpt3-1.3b`` preset's shape (learned positions, tied embeddings,
    GELU, LayerNorm, biases, FFN 4h), with the paper's sequence length and vocabulary."""
    from dataclasses import replace

    from tracekit.workloads.config import preset

    shape = dict(num_layers=row.layers, hidden_size=row.hidden, num_heads=row.heads, ffn_hidden_size=None)
    return replace(
        preset("gpt3-1.3b")[0], name=name, seq_length=seq_length, vocab_size=vocab_size, source=source, **shape
    )


def table1_config(row: Table1Row):
    """The :class:`~.llm_config.LLMConfig` of a Table-1 row with the assumptions above (GPT shape of the
    ``gpt3-1.3b`` preset: learned positions, tied embeddings, GELU, LayerNorm, biases), run by the
    ``megatron-2021`` stack."""
    from tracekit.workloads.config import LLMConfig, ParallelSpec
    from tracekit.workloads.stacks import apply_stack

    model = paper_gpt(f"megatron-{row.name}", row, TABLE1_SEQ_LENGTH, TABLE1_VOCAB, "Narayanan et al. 2021, Table 1")
    parallel = ParallelSpec(
        dp=row.gpus // (row.tp * row.pp),
        tp=row.tp,
        pp=row.pp,
        recompute="full",
        overlap_grad_reduce=MEGATRON_2021_OVERLAP_GRAD_REDUCE,
    )
    config = LLMConfig(model, parallel, global_batch_size=row.batch_size, micro_batch_size=TABLE1_MICRO_BATCH)
    return apply_stack(config, "megatron-2021")  # what the paper ran (tracekit.workloads.stacks)


def table1_tflops_per_gpu(row: Table1Row, iteration_s: float) -> float:
    """TFLOP/s per GPU by the paper's formula (section 5.1, with recompute):
    ``96 B s L h^2 (1 + s / (6 h) + V / (16 L h)) / (iteration_s x GPUs) / 1e12``."""
    from tracekit.workloads.flops import gpt_iteration_flops

    flops = gpt_iteration_flops(
        row.batch_size, TABLE1_SEQ_LENGTH, row.layers, row.hidden, TABLE1_VOCAB, full_recompute=True
    )
    return flops / (iteration_s * row.gpus) / 1e12


__all__ = [
    "ASSUMPTIONS",
    "ATTENTION_DROPOUT",
    "GEMM_K_FILL",
    "KERNEL_OVERHEAD_NS",
    "MEGATRON_2021_OVERLAP_GRAD_REDUCE",
    "MEGATRON_2021_TP_DGRAD_OVERLAP",
    "OPTIMIZER_EXTRA_BYTES_PER_PARAM",
    "TABLE1",
    "FP8_GEMM_EFFICIENCY",
    "CalibratedCost",
    "Table1Row",
    "calibrated_cost",
    "cost_for",
    "table1_config",
    "table1_row",
    "table1_tflops_per_gpu",
]
