"""Peak device memory per rank class of a replayed job, from the memory model (issue 33).

A generated job carries its configuration (``llm_config`` metadata, :mod:`tracekit.workloads.config`); the
memory model (:func:`tracekit.workloads.memory.memory_report`: model states by ZeRO stage, Korthikanti et
al. 2022 activations at the schedule's peak, buffers, allocator margin) gives each pipeline stage's peak,
checked against the memory of the spec's device (``memory_bytes`` of its ``tracekit/costs/devices.toml`` entry).
A trace without ``llm_config`` (a capture) has no model: its measured peak is ``tracekit analyze``'s.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.results.result import ReplayResult
    from tracekit.sets.traceset import TraceSet

SOURCE = "memory model (tracekit.workloads.memory) of the traces' llm_config"


def job_memory(traceset: "TraceSet", spec: Any) -> dict[str, Any] | None:
    """:func:`~tracekit.workloads.memory.memory_report` of the job the traces' ``llm_config`` describes, on
    ``spec``'s device, with ``device`` (its key, None when it records no memory) and ``source``; None for traces
    without a configuration or one whose world size is not the trace set's (a rewrite it no longer describes).

    Raises:
        TransformError: an ``llm_config`` that is not JSON. ConfigError: one that is not a valid configuration.
    """
    from tracekit.costs.devices import device_model
    from tracekit.transforms.layout import llm_config_of
    from tracekit.workloads.config import LLMConfig
    from tracekit.workloads.memory import memory_report

    if not len(traceset):
        return None
    raw = llm_config_of(traceset)
    if raw is None:
        return None
    config = LLMConfig.from_dict(raw)
    if config.world_size != traceset.world_size:
        return None
    # an ASTRA-sim spec's NPU has no peaks and no memory size: the peak is reported without a verdict
    npu = getattr(spec, "device", None)  # a spec; a preset key or device name has none
    device = None if npu is not None and not getattr(npu, "peak_flops_per_s", None) else device_model(spec)
    memory = (device.memory_bytes or None) if device is not None else None
    report = memory_report(config, memory)
    report["device"] = device.key if device is not None and memory else None
    report["source"] = SOURCE
    return report


def with_memory(result: "ReplayResult", traceset: "TraceSet", spec: Any) -> "ReplayResult":
    """``result`` with :attr:`~tracekit.replayer.results.result.ReplayResult.memory` set from :func:`job_memory`
    (``spec``: a HardwareSpec or what :func:`~tracekit.replayer.simulation.specs.load_spec` reads)."""
    from tracekit.replayer.simulation.hardware import HardwareSpec
    from tracekit.replayer.simulation.specs import load_spec

    if not isinstance(spec, HardwareSpec):
        spec = load_spec(spec)
    return replace(result, memory=job_memory(traceset, spec))


__all__ = ["SOURCE", "job_memory", "with_memory"]
