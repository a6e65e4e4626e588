"""Synthetic trace generators: microbenchmarks, transformer LLMs, DLRM.

Public API (each returns a :class:`~tracekit.sets.traceset.TraceSet`; write it
with :func:`tracekit.io.write_traceset`):

* :func:`generate_llm` (:class:`LLMConfig` = :class:`ModelSpec` +
  :class:`ParallelSpec` + batch) and :func:`write_llm` (streams a big job
  to disk rank by rank); :func:`llm_preset` for published model shapes;
* :func:`generate_dlrm` (:class:`DLRMConfig`, :func:`dlrm_preset`);
* the microbenchmarks :func:`collective_bench`, :func:`send_recv_bench`,
  :func:`chakra_shape`;
* pipeline schedules :func:`stage_order` (GPipe, 1F1B, interleaved).

Hardware for roofline durations is a :class:`Roofline` (or any object with
``peak_flops_per_s`` and ``mem_bandwidth_bytes_per_s``); without it compute
nodes carry ``num_ops`` and ``tensor_size`` and a zero duration.
"""

from tracekit.converters.generators.dlrm import DLRMConfig, dlrm_preset, generate_dlrm
from tracekit.converters.generators.llm import generate_llm, write_llm
from tracekit.workloads.config import LLMConfig, ModelSpec, ParallelSpec
from tracekit.workloads.config import preset as llm_preset
from tracekit.converters.generators.llm_ops import MATMUL_ROLES, Roofline
from tracekit.converters.generators.micro import chakra_shape, collective_bench, send_recv_bench
from tracekit.workloads.schedules import PipelineOp, stage_order

__all__ = [
    "DLRMConfig",
    "LLMConfig",
    "MATMUL_ROLES",
    "ModelSpec",
    "ParallelSpec",
    "PipelineOp",
    "Roofline",
    "chakra_shape",
    "collective_bench",
    "dlrm_preset",
    "generate_dlrm",
    "generate_llm",
    "llm_preset",
    "send_recv_bench",
    "stage_order",
    "write_llm",
]
