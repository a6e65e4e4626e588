"""What generators and rewrites both know about training workloads, written once.

Modules (core: they import only core, never converters or the replayer):

* :mod:`.units` -- the dtype table (canonical and PyTorch names -> bytes per element);
* :mod:`.config` -- :class:`LLMConfig` (model, parallelism, batch), the presets, parsing ``llm_config`` metadata;
* :mod:`.grid` -- the Megatron-LM rank grid (rank <-> coordinates, members of each process-group kind);
* :mod:`.params` -- parameters per unit and rank, the padded vocabulary;
* :mod:`.buckets` -- data-parallel gradient buckets;
* :mod:`.flops` -- GEMM, optimizer and whole-iteration FLOP formulas;
* :mod:`.rank_template` -- the `.et` bytes of many similar ranks from one encoded representative.

The LLM generator (:mod:`tracekit.converters.generators.llm`) builds traces from these; the TP/PP/DP
rewrites (:mod:`tracekit.transforms.reparallel`, :mod:`~tracekit.transforms.layout`,
:mod:`~tracekit.transforms.megatron`) read the ``llm_config`` metadata back into an :class:`LLMConfig` and use
the same functions, so a rewritten trace and a generated one agree by construction.
"""

from tracekit.workloads.config import LLMConfig, ModelSpec, ParallelSpec, preset
from tracekit.workloads.grid import Grid

__all__ = ["Grid", "LLMConfig", "ModelSpec", "ParallelSpec", "preset"]
