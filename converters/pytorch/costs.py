"""Attach FLOPs and bytes to converted PyTorch compute nodes (one pass after the graph is built).

Rules (the cost of an op comes from :func:`tracekit.costs.opcost.aten_cost`):

* a host COMP node (``is_cpu_op``) whose aten op has a cost carries it
  (``num_ops`` FLOPs, ``tensor_size`` bytes, ``op_class``, ``compute_dtype``)
  only when no node below it in the ET call stack (``ctrl_deps`` parent links)
  has a cost of a working class: ``aten::linear`` leaves its FLOPs to the
  ``aten::addmm`` it calls, so one iteration's total counts every FLOP once;
  a node below without FLOPs (a copy) takes the cost only of an op without
  FLOPs: the CPU ``aten::addmm`` that copies its bias with ``aten::copy_``
  keeps its GEMM;
  view ops below an op (``aten::empty``, ``aten::view``) do not take its cost;
* device COMP nodes (kernels, memcpy, memset; ``is_cpu_op`` false) whose
  launching host node (their ``ctrl_deps`` parent) carries a cost inherit it,
  split across the op's device nodes in proportion to their measured
  durations (equally when none has one), with integer remainders given so the
  parts sum to the op's totals; the host node then keeps ``op_class`` and
  ``compute_dtype`` but drops ``num_ops``/``tensor_size`` (its time is launch
  overhead on the CPU, the work runs on the device);
* a host op of a capture with device nodes that has neither kernels nor a measured duration (it did not
  link to Kineto) keeps only ``op_class``/``compute_dtype``: FLOPs on a zero-duration host node would be
  timed by roofline on the host thread; counted as ``unmeasured``;
* every other node keeps no cost, and is counted in :class:`CostStats`.

The pass reads only the trace model (names, inputs/outputs, ``is_cpu_op``,
``ctrl_deps``), so it works on any converter's output that keeps those.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from tracekit.model import Attr, NodeDraft, NodeType
from tracekit.costs.opcost import OP_CLASSES, OpCost, aten_cost

_WORKING = frozenset(OP_CLASSES) - {"view"}  # op classes that do work (a view moves no data)


@dataclass(frozen=True)
class CostStats:
    """What :func:`attach_costs` did.

    Attributes:
        host_costed, device_costed: COMP nodes given a cost (op class), host and device.
        host_nodes, device_nodes: COMP nodes on each side.
        composite: host ops with a cost left to the ops they call.
        total_flops, total_bytes: sums of ``num_ops`` / ``tensor_size`` written.
        unknown: names of host aten ops the table does not price, with counts.
        unmeasured: host ops of a device capture with a cost but neither a duration nor kernels (not
            linked to Kineto): they keep their op class only (their FLOPs are not in ``total_flops``).
    """

    host_nodes: int = 0
    host_costed: int = 0
    device_nodes: int = 0
    device_costed: int = 0
    composite: int = 0
    total_flops: int = 0
    total_bytes: int = 0
    unknown: tuple[tuple[str, int], ...] = field(default=())
    unmeasured: int = 0


def _split(total: int, weights: list[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (equal when all 0), integer parts summing to ``total``."""
    if not any(w > 0 for w in weights):
        weights = [1] * len(weights)
    wsum = sum(weights)
    parts = [total * w // wsum for w in weights]
    rest = total - sum(parts)
    order = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % wsum), i))
    for i in order[:rest]:
        parts[i] += 1
    return parts


def _set_cost(node: NodeDraft, flops: int | None, nbytes: int | None, cost: OpCost) -> None:
    if flops is not None:
        node.set_attr("num_ops", int(flops))
        node.set_attr("tensor_size", int(nbytes or 0), "uint64_val")
    node.set_attr("op_class", cost.op_class, "string_val")
    if cost.dtype:
        node.set_attr("compute_dtype", cost.dtype, "string_val")


def _price_host(host: list[NodeDraft]) -> tuple[dict[int, OpCost], Counter[str]]:
    """``(node id -> aten cost, count of unpriced aten names)`` of the host nodes that carry no cost yet."""
    costs: dict[int, OpCost] = {}
    unknown: Counter[str] = Counter()
    for n in host:
        if (n.num_ops or 0) > 0 or (n.tensor_bytes or 0) > 0:
            continue
        c = aten_cost(n.name, n.inputs, n.outputs)
        if c is not None:
            costs[n.id] = c
        elif n.name.startswith("aten::"):
            unknown[n.name] += 1
    return costs, unknown


def _composites(costs: dict[int, OpCost], parent_of: Mapping[int, int], by_id: Mapping[int, NodeDraft]) -> set[int]:
    """Host ops that leave their cost to priced working descendants.

    A descendant with FLOPs takes the cost of every op above it (``aten::linear`` -> ``aten::addmm``); one
    without FLOPs (a copy, a fill) takes it only from ops without FLOPs of their own: a CPU ``aten::addmm``
    copies its bias into the output with ``aten::copy_`` and keeps its GEMM.
    """
    by_flops: set[int] = set()  # ancestors of a priced descendant with FLOPs
    by_bytes: set[int] = set()  # ancestors of a priced working descendant without FLOPs
    for nid, c in costs.items():
        if c.op_class not in _WORKING:
            continue
        reached = by_flops if c.flops > 0 else by_bytes
        seen = 0
        parent = parent_of.get(nid)
        while parent is not None and parent in by_id and parent not in reached and seen < 10_000:
            reached.add(parent)
            parent = parent_of.get(parent)
            seen += 1
    return by_flops | {p for p in by_bytes if p not in costs or costs[p].flops == 0}


def attach_costs(
    nodes: Iterable[NodeDraft], parent_of: Mapping[int, int] | None = None, launcher_of: Mapping[int, int] | None = None
) -> CostStats:
    """Give COMP nodes their FLOPs/bytes in place (see module rules) and return what was done.

    Args:
        nodes: the converted nodes, as drafts (:class:`~tracekit.model.NodeDraft`) the costs are set on.
        parent_of: host node id -> call-stack parent node id (default: ``ctrl_deps[0]``).
        launcher_of: device node id -> launching host node id (default: ``ctrl_deps[0]``).

    Nodes that already carry ``num_ops`` or ``tensor_size`` are left as they are.

    Returns:
        :class:`CostStats`; ``num_ops`` is in FLOPs (a multiply-add counts 2, formulas of
        :func:`tracekit.costs.opcost.aten_cost`) and ``tensor_size`` in bytes read + written.
        Raises nothing: an op whose arguments do not fit its formula gets no cost.
    """
    nodes = [n for n in nodes if n.type == NodeType.COMP_NODE]
    first = {n.id: n.ctrl_deps[0] for n in nodes if n.ctrl_deps}
    parent_of = first if parent_of is None else parent_of
    launcher_of = first if launcher_of is None else launcher_of
    host = [n for n in nodes if n.is_cpu_op]
    device = [n for n in nodes if not n.is_cpu_op]
    by_id = {n.id: n for n in host}
    costs, unknown = _price_host(host)
    composite = _composites(costs, parent_of, by_id)
    launched: dict[int, list[NodeDraft]] = {}
    for d in device:
        launcher = launcher_of.get(d.id)
        if launcher in costs and launcher not in composite:
            launched.setdefault(launcher, []).append(d)
    host_costed = device_costed = n_composite = flops_total = bytes_total = unmeasured = 0
    for nid, c in costs.items():
        node = by_id[nid]
        if nid in composite:
            n_composite += 1
            continue
        kernels = launched.get(nid)
        if not kernels and device and node.duration_ns <= 0:
            # a host op of a device capture that was not measured (not linked to Kineto): its kernels are
            # not in the trace; a FLOP count on a zero-duration host node would be timed by roofline on the
            # host thread, so it keeps only its class
            _set_cost(node, None, None, c)
            host_costed += 1
            unmeasured += 1
            continue
        if kernels:
            weights = [max(k.duration_ns, 0) for k in kernels]
            for k, f, b in zip(kernels, _split(c.flops, weights), _split(c.bytes, weights)):
                _set_cost(k, f, b, c)
            device_costed += len(kernels)
            _set_cost(node, None, None, c)
        else:
            _set_cost(node, c.flops, c.bytes, c)
        host_costed += 1
        flops_total += c.flops
        bytes_total += c.bytes
    return CostStats(
        len(host),
        host_costed,
        len(device),
        device_costed,
        n_composite,
        flops_total,
        bytes_total,
        tuple(unknown.most_common()),
        unmeasured,
    )


def capture_device(device_properties: Iterable[Mapping[str, Any]], has_device_ops: bool) -> str | None:
    """The capture's compute device: ``"cpu"`` when the trace has no device ops (even on a machine whose
    Kineto lists GPUs), else the ``name`` of the first Kineto ``deviceProperties`` entry, else None."""
    if not has_device_ops:
        return "cpu"
    for p in device_properties:
        name = p.get("name") if hasattr(p, "get") else None
        if isinstance(name, str) and name:
            return name
    return None


def device_attr(name: str | None) -> list[Attr]:
    """Metadata attributes recording the capture device: ``capture_device`` (never changed) and
    ``compute_device`` (the device the durations are for; ``transform --retarget`` moves it). Empty when
    unknown."""
    if not name:
        return []
    return [Attr("capture_device", name, "string_val"), Attr("compute_device", name, "string_val")]
