"""Tensors in PyTorch Execution Trace values: bytes of (nested lists of) tensors, devices.

An ET tensor value is ``[tensor id, storage id, offset, numel, element bytes, device]`` with its shape and
its type (``Tensor(float)``, ``GenericList[Tensor(float),...]``) beside it in the op's inputs.
Element sizes come from the one dtype table, :mod:`tracekit.workloads.units`.
Used by :mod:`.collectives` for communication sizes.
"""

from __future__ import annotations

import math
from typing import Any

from tracekit.errors import ConversionError
from tracekit.workloads.units import torch_dtype_bytes

from tracekit.converters.pytorch.et_reader import EtOp

__all__ = ["first_device", "input_arg", "is_tensor_value", "last_bool", "tensor_bytes"]


def is_tensor_value(v: Any) -> bool:
    """An ET tensor value: ``[tensor id, storage id, offset, numel, elem bytes, device]``."""
    return isinstance(v, list) and len(v) >= 5 and all(isinstance(x, int) and not isinstance(x, bool) for x in v[:5])


def _dtype_of(type_name: str) -> str | None:
    if type_name.startswith("Tensor(") and type_name.endswith(")"):
        return type_name[7:-1]
    return None


def tensor_bytes(value: Any, shape: Any, type_name: Any, *, where: str = "") -> int:
    """Bytes of a tensor or (nested) list of tensors given ET value, shape and type.

    Uses shape x dtype size; falls back to the recorded ``numel * elem_bytes``.

    Args:
        value: the ET value: a tensor value, or a (nested) list of them; anything else counts 0 bytes.
        shape: its shape (a list of ints per tensor, nested like ``value``).
        type_name: its ET type (``Tensor(float)``, ``GenericList[Tensor(float),...]``).
        where: prefix for the error message (file and node).

    Returns:
        Bytes (elements x bytes per element of :data:`DTYPE_BYTES`), summed over a list.

    Raises:
        ConversionError: an element type whose size is unknown and not recorded.
    """
    if is_tensor_value(value):
        dtype = _dtype_of(type_name) if isinstance(type_name, str) else None
        size = torch_dtype_bytes(dtype) if dtype else None
        if isinstance(shape, list) and all(isinstance(d, int) for d in shape) and size is not None:
            return math.prod(shape) * size
        numel, elem = value[3], value[4]
        if elem > 0:
            return numel * elem
        if numel == 0:
            return 0
        raise ConversionError(f"{where}unknown element size of tensor type {type_name!r}")
    if isinstance(value, list):
        shapes = shape if isinstance(shape, list) and len(shape) == len(value) else [None] * len(value)
        inner = _list_inner_types(type_name, len(value))
        return sum(tensor_bytes(v, s, t, where=where) for v, s, t in zip(value, shapes, inner))
    return 0


def _list_inner_types(type_name: Any, n: int) -> list[Any]:
    """Element types of ``GenericList[A,B,...]`` (top-level split), padded to ``n``."""
    if not isinstance(type_name, str) or not type_name.startswith("GenericList[") or not type_name.endswith("]"):
        return [type_name] * n
    body = type_name[len("GenericList[") : -1]
    parts: list[Any] = []
    cur: list[str] = []
    depth = 0
    for ch in body:
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        depth += ch in "[(<"
        depth -= ch in "])>"
        cur.append(ch)
    if cur:
        parts.append("".join(cur))
    if len(parts) == 1:
        parts = parts * n
    return (parts + [parts[-1] if parts else None] * n)[:n]


def first_device(value: Any) -> str:
    """Device of the first tensor in a (nested) ET value, ``""`` when none says."""
    if is_tensor_value(value):
        return str(value[5]) if len(value) > 5 else ""
    if isinstance(value, list):
        for v in value:
            d = first_device(v)
            if d:
                return d
    return ""


def input_arg(op: EtOp, i: int) -> tuple[Any, Any, Any]:
    """(value, shape, type) of input ``i`` of ``op`` (None for each one missing)."""
    vals, shapes, types = op.inputs.values, op.inputs.shapes, op.inputs.types
    return (
        vals[i] if i < len(vals) else None,
        shapes[i] if i < len(shapes) else None,
        types[i] if i < len(types) else None,
    )


def last_bool(op: EtOp) -> bool | None:
    """The last ``Bool`` input of ``op`` (c10d's ``async_op``), or None."""
    found = None
    for v, t in zip(op.inputs.values, op.inputs.types):
        if t == "Bool" and isinstance(v, bool):
            found = v
    return found
