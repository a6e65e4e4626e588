"""Op costs for Kineto-only conversions: shapes from ``Input Dims``/``Input type``, call stack and launchers
from the Kineto timeline, then :func:`.costs.attach_costs`.

* A host event's shapes come from its ``args["Input Dims"]`` and ``args["Input type"]`` (recorded with
  ``record_shapes=True``); they become the node's ``inputs`` (ET form: ``Tensor(float)`` types, ``values``
  empty), so the trace keeps them.  ``Scalar`` and empty types are not tensors.
* The call-stack parent of a host event is the innermost host event of the same (pid, tid) whose span
  contains it (Kineto records nesting only by time).
* A device event's launcher is the innermost host op containing its launching runtime call
  (:attr:`.device_graph.DeviceGraph.launch_of`).
"""

from __future__ import annotations

from typing import Mapping

import orjson

from tracekit.model import IOInfo, NodeDraft

from tracekit.converters.pytorch.costs import CostStats, attach_costs
from tracekit.converters.pytorch.kineto_reader import KinetoTrace, iter_events_by_thread

_OP_CATEGORIES = frozenset({"cpu_op", "user_annotation", "python_function"})


def _inputs(args: Mapping) -> IOInfo | None:
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list) or len(dims) != len(types):
        return None
    et_types = [f"Tensor({t})" if isinstance(t, str) and t and t != "Scalar" else (t or "") for t in types]
    return IOInfo("[]", orjson.dumps(dims).decode(), orjson.dumps(et_types).decode())


def _enclosing_ops(kt: KinetoTrace) -> dict[int, int]:
    """Event index -> index of the innermost host op (cpu_op / annotation) containing it on its thread."""
    out: dict[int, int] = {}
    for lane in iter_events_by_thread(e for e in kt.events if not e.is_device).values():
        stack: list = []
        for e in lane:
            while stack and stack[-1].end_ns <= e.start_ns:
                stack.pop()
            if stack:
                out[e.index] = stack[-1].index
            if e.category in _OP_CATEGORIES:
                stack.append(e)
    return out


def attach_kineto_costs(kt: KinetoTrace, launch_of: Mapping[int, int], node_of: Mapping[int, NodeDraft]) -> CostStats:
    """Set ``inputs`` shapes on host nodes and attach costs (see module doc).

    Args:
        kt: the Kineto trace.
        launch_of: device event index -> launching runtime event index (DeviceGraph.launch_of).
        node_of: Kineto event index -> the node made from it.

    Returns:
        :class:`.costs.CostStats` of the pass (``num_ops`` in FLOPs, ``tensor_size`` in bytes, formulas of
        :func:`tracekit.costs.opcost.aten_cost`); nodes are changed in place.  Raises nothing: an event without
        ``Input Dims``/``Input type`` (no ``record_shapes=True``) just gets no shapes and no cost.
    """
    enclosing = _enclosing_ops(kt)
    by_index = {e.index: e for e in kt.events}
    for idx, node in node_of.items():
        e = by_index[idx]
        if not e.is_device and node.inputs is None:
            node.inputs = _inputs(e.args or {})
    parent_of: dict[int, int] = {}
    launcher_of: dict[int, int] = {}
    for idx, node in node_of.items():
        e = by_index[idx]
        if e.is_device:
            call = launch_of.get(idx)
            op = enclosing.get(call) if call is not None else None
            if op is not None and op in node_of:
                launcher_of[node.id] = node_of[op].id
        else:
            p = enclosing.get(idx)
            if p is not None and p in node_of:
                parent_of[node.id] = node_of[p].id
    return attach_costs(node_of.values(), parent_of=parent_of, launcher_of=launcher_of)
