"""What work costs: device models, op FLOPs and bytes, compute projection between devices.

Devices and their peaks (:mod:`tracekit.costs.devices`, data in ``devices.toml``), the aten op cost model
(:mod:`tracekit.costs.opcost` with :mod:`~tracekit.costs.opargs`, :mod:`~tracekit.costs.opflops`,
:mod:`~tracekit.costs.opnames`), kernel classes by name (:mod:`tracekit.costs.kernels`) and projection of measured
durations to another device (:mod:`tracekit.costs.projection`). Uses :mod:`tracekit.model` and
:mod:`tracekit.workloads` (units, FLOP formulas).
"""
