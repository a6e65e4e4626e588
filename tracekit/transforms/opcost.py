"""FLOPs and bytes of a compute node for transforms: its ``num_ops``/``tensor_size`` attributes, or the
core op cost model (:mod:`tracekit.costs.opcost`) applied to its aten shapes."""

from __future__ import annotations

from dataclasses import dataclass

from tracekit.model import Node
from tracekit.costs.opcost import MATRIX_CLASSES, aten_cost


@dataclass(frozen=True)
class OpCost:
    """FLOPs and bytes of one node and where they came from (``attrs`` or ``shapes``)."""

    flops: int
    bytes: int
    source: str


def shape_flops(node: Node) -> int | None:
    """FLOPs of an aten GEMM / convolution / attention node from its shapes, or None."""
    c = aten_cost(node.name, node.inputs, node.outputs)
    return c.flops if c is not None and c.op_class in MATRIX_CLASSES else None


def shape_bytes(node: Node) -> int | None:
    """Bytes moved by an aten op the cost model knows, from its shapes, or None."""
    c = aten_cost(node.name, node.inputs, node.outputs)
    return c.bytes if c is not None else None


def op_cost(node: Node) -> OpCost | None:
    """``num_ops``/``tensor_size`` when either is positive, else shape-derived for aten GEMM / convolution
    / attention ops, else None."""
    flops, nbytes = node.num_ops or 0, node.tensor_bytes or 0
    if flops > 0 or nbytes > 0:
        return OpCost(flops, nbytes, "attrs")
    c = aten_cost(node.name, node.inputs, node.outputs)
    if c is None or c.op_class not in MATRIX_CLASSES:
        return None
    return OpCost(c.flops, c.bytes, "shapes")
