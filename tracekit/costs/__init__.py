"""What work costs: device models, op FLOPs and bytes, compute projection between devices.

Devices and their peaks (:mod:`tracekit.costs.devices`, data in ``devices.toml``), the aten op cost model
(:mod:`tracekit.costs.opcost` with :mod:`~tracekit.costs.opargs`, :mod:`~tracekit.costs.opflops`,
:mod:`~tracekit.costs.opnames`), kernel classes by name (:mod:`tracekit.costs.kernels`) and projection of measured
durations to another device (:mod:`tracekit.costs.projection`). Uses :mod:`tracekit.model` and
:mod:`tracekit.workloads` (units, FLOP formulas).
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracekit.costs.devices import (
        attention_efficiency,
        device_model,
        device_presets,
        find_device,
        gemm_efficiency,
        memory_efficiency,
        op_seconds,
        tf32_classes,
    )
    from tracekit.costs.kernels import CLASSES, kernel_class
    from tracekit.costs.opcost import MATRIX_CLASSES, OP_CLASSES, OpCost, aten_cost, op_class_of
    from tracekit.costs.opflops import einsum_flops, matmul_flops
    from tracekit.costs.projection import (
        ProjectionReport,
        cpu_to_gpu,
        new_report,
        project_node,
        projected_duration,
        tf32_policy,
    )

__all__ = [
    "CLASSES",
    "MATRIX_CLASSES",
    "OP_CLASSES",
    "OpCost",
    "ProjectionReport",
    "aten_cost",
    "attention_efficiency",
    "cpu_to_gpu",
    "device_model",
    "device_presets",
    "einsum_flops",
    "find_device",
    "gemm_efficiency",
    "kernel_class",
    "matmul_flops",
    "memory_efficiency",
    "new_report",
    "op_class_of",
    "op_seconds",
    "project_node",
    "projected_duration",
    "tf32_classes",
    "tf32_policy",
]

# name -> the module defining it, imported on first use (PEP 562): importing the package imports no module
_FACE = {
    "CLASSES": "tracekit.costs.kernels",
    "MATRIX_CLASSES": "tracekit.costs.opcost",
    "OP_CLASSES": "tracekit.costs.opcost",
    "OpCost": "tracekit.costs.opcost",
    "ProjectionReport": "tracekit.costs.projection",
    "aten_cost": "tracekit.costs.opcost",
    "attention_efficiency": "tracekit.costs.devices",
    "cpu_to_gpu": "tracekit.costs.projection",
    "device_model": "tracekit.costs.devices",
    "device_presets": "tracekit.costs.devices",
    "einsum_flops": "tracekit.costs.opflops",
    "find_device": "tracekit.costs.devices",
    "gemm_efficiency": "tracekit.costs.devices",
    "kernel_class": "tracekit.costs.kernels",
    "matmul_flops": "tracekit.costs.opflops",
    "memory_efficiency": "tracekit.costs.devices",
    "new_report": "tracekit.costs.projection",
    "op_class_of": "tracekit.costs.opcost",
    "op_seconds": "tracekit.costs.devices",
    "project_node": "tracekit.costs.projection",
    "projected_duration": "tracekit.costs.projection",
    "tf32_classes": "tracekit.costs.devices",
    "tf32_policy": "tracekit.costs.projection",
}


def __getattr__(name: str) -> object:
    """A name of the face, from its defining module on first use; ``AttributeError`` for any other name."""
    if name not in _FACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_FACE[name]), name)
