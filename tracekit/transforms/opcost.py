"""FLOPs and bytes of a compute node: from ``num_ops``/``tensor_size``, or derived from aten operator shapes.

Shape-derived counts (PyTorch ET ``inputs``/``outputs``: ``shapes`` and
``types`` JSON lists) follow the conventions of PyTorch's own FLOP counter
(``torch/utils/flop_counter.py``: ``mm_flop``, ``bmm_flop``,
``conv_flop_count``, ``sdpa_flop_count``): a multiply-add counts 2 FLOPs.

================================  =====================================================
operator                          FLOPs
================================  =====================================================
``aten::mm`` [m,k]@[k,n]           ``2 m k n``
``aten::addmm`` (bias, [m,k], [k,n]) ``2 m k n`` (the bias add is not counted)
``aten::bmm`` [b,m,k]@[b,k,n]      ``2 b m k n``
``aten::matmul`` (broadcast)      ``2 * prod(batch) * m k n`` (1-D operands as vectors)
``aten::linear`` (x[..,k], W[n,k])  ``2 * prod(x.shape[:-1]) * k n``
``aten::conv{1,2,3}d``,            ``2 * prod(out.shape) * prod(W.shape[1:])``
``aten::convolution``              (``W`` = [c_out, c_in/groups, *kernel])
``aten::_scaled_dot_product_*``    ``2 B H L S E + 2 B H L S Ev`` for q [B,H,L,E],
(flash/efficient/cudnn attention)  k [B,H,S,E], v [B,H,S,Ev] (``Q K^T`` and ``P V``)
================================  =====================================================

Bytes are the sizes of every tensor input and output (elements x element
size from the type string: ``Tensor(float)`` 4, ``Tensor(c10::Half)`` 2, ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson

from tracekit.model import Node

ELEMENT_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "c10::half": 2, "half": 2, "c10::bfloat16": 2,
    "bfloat16": 2, "long": 8, "int64": 8, "int": 4, "int32": 4, "short": 2, "signed char": 1,
    "unsigned char": 1, "bool": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
}
GEMM_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear",
                      "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution",
                      "aten::_convolution", "aten::cudnn_convolution"})
ATTENTION_PREFIX = "aten::_scaled_dot_product"


@dataclass(frozen=True)
class OpCost:
    """FLOPs and bytes of one node and where they came from (``attrs`` or ``shapes``)."""

    flops: int
    bytes: int
    source: str


def _loads(text: str | None) -> Any:
    if not text:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def _tensors(shapes: Any, types: Any) -> list[tuple[list[int], int]]:
    """``(shape, element bytes)`` of each tensor argument (non-tensors skipped)."""
    out = []
    if not isinstance(shapes, list) or not isinstance(types, list):
        return out
    for shape, typ in zip(shapes, types):
        if not isinstance(typ, str) or not typ.startswith("Tensor(") or not isinstance(shape, list):
            continue
        if not all(isinstance(d, int) for d in shape):
            continue
        elem = ELEMENT_BYTES.get(typ[7:-1].lower())
        if elem is None:
            continue
        out.append((shape, elem))
    return out


def _matmul_flops(a: list[int], b: list[int]) -> int | None:
    if not a or not b:
        return None
    if len(a) == 1:
        a = [1] + a
    if len(b) == 1:
        b = b + [1]
    m, k = a[-2], a[-1]
    k2, n = b[-2], b[-1]
    if k != k2:
        return None
    batch_a, batch_b = a[:-2], b[:-2]
    width = max(len(batch_a), len(batch_b))
    batch_a = [1] * (width - len(batch_a)) + batch_a
    batch_b = [1] * (width - len(batch_b)) + batch_b
    batch = math.prod(max(x, y) for x, y in zip(batch_a, batch_b))
    return 2 * batch * m * k * n


def shape_flops(node: Node) -> int | None:
    """FLOPs of an aten GEMM/conv/attention node from its input/output shapes, or None (see module table)."""
    name = node.name
    if name not in GEMM_OPS and not name.startswith(ATTENTION_PREFIX):
        return None
    if node.inputs is None:
        return None
    ins = _tensors(_loads(node.inputs.shapes), _loads(node.inputs.types))
    shapes = [s for s, _ in ins]
    try:
        if name == "aten::mm" and len(shapes) >= 2 and len(shapes[0]) == 2 and len(shapes[1]) == 2:
            return _matmul_flops(shapes[0], shapes[1])
        if name == "aten::addmm" and len(shapes) >= 3:
            return _matmul_flops(shapes[1], shapes[2])
        if name in ("aten::bmm", "aten::matmul") and len(shapes) >= 2:
            return _matmul_flops(shapes[0], shapes[1])
        if name == "aten::linear" and len(shapes) >= 2 and len(shapes[1]) == 2:
            x, w = shapes[0], shapes[1]
            if x[-1] != w[1]:
                return None
            return 2 * math.prod(x[:-1]) * w[1] * w[0]
        if "conv" in name and len(shapes) >= 2 and node.outputs is not None:
            outs = _tensors(_loads(node.outputs.shapes), _loads(node.outputs.types))
            if not outs:
                return None
            return 2 * math.prod(outs[0][0]) * math.prod(shapes[1][1:])
        if name.startswith(ATTENTION_PREFIX) and len(shapes) >= 3:
            q, k, v = shapes[0], shapes[1], shapes[2]
            if len(q) != 4 or len(k) != 4 or len(v) != 4:
                return None
            b, h, l_q, e = q
            s = k[2]
            return 2 * b * h * l_q * s * e + 2 * b * h * l_q * s * v[3]
    except (TypeError, IndexError):
        return None
    return None


def shape_bytes(node: Node) -> int | None:
    """Bytes of every tensor input and output of a node with shapes, or None."""
    total, found = 0, False
    for io in (node.inputs, node.outputs):
        if io is None:
            continue
        for shape, elem in _tensors(_loads(io.shapes), _loads(io.types)):
            total += math.prod(shape) * elem
            found = True
    return total if found else None


def op_cost(node: Node) -> OpCost | None:
    """FLOPs and bytes of ``node``: its ``num_ops``/``tensor_size`` attributes when either is positive,
    else shape-derived for aten GEMM/conv/attention ops, else None."""
    flops, nbytes = node.num_ops or 0, node.tensor_bytes or 0
    if flops > 0 or nbytes > 0:
        return OpCost(flops, nbytes, "attrs")
    f = shape_flops(node)
    if f is None:
        return None
    return OpCost(f, shape_bytes(node) or 0, "shapes")
