"""Tensor arguments of one operator recorded in a PyTorch Execution Trace, parsed for the op cost model.

An ET node's ``inputs``/``outputs`` carry ``shapes``, ``types`` and ``values`` as JSON lists, one entry per
argument (``Tensor(float)`` with its shape, ``GenericList[Tensor(float),...]`` with a list of shapes, or a
scalar). :func:`parse_args` turns them into :class:`OpArgs` (tensors with canonical dtype and element size);
:mod:`tracekit.costs.opcost` prices ops from them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import orjson

from tracekit.workloads.units import DTYPE_BYTES, torch_dtype

__all__ = ["OpArgs", "Tensor", "parse_args"]


@dataclass(frozen=True)
class Tensor:
    """One tensor argument: ``shape`` (tuple of ints), canonical ``dtype`` and ``elem_bytes``."""

    shape: tuple[int, ...]
    dtype: str
    elem_bytes: int

    @property
    def numel(self) -> int:
        """Number of elements, the product of ``shape`` (1 for a scalar ``()``)."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Size in bytes, ``numel * elem_bytes``."""
        return self.numel * self.elem_bytes


@dataclass(frozen=True)
class OpArgs:
    """Parsed arguments of one op: ``inputs``/``outputs`` are per-argument lists of tensors (a tensor
    list argument gives several; a non-tensor none), ``values`` the raw input values."""

    inputs: tuple[tuple[Tensor, ...], ...]
    outputs: tuple[tuple[Tensor, ...], ...]
    values: tuple[Any, ...]

    def t(self, i: int) -> Tensor:
        """The i-th *tensor-valued* input argument (first tensor of a list). IndexError if absent."""
        return [a for a in self.inputs if a][i][0]

    def shapes(self) -> list[tuple[int, ...]]:
        """Shape of the first tensor of every tensor-valued input argument, in argument order."""
        return [a[0].shape for a in self.inputs if a]


def _loads(text: Any) -> Any:
    if text is None or text == "":
        return None
    if not isinstance(text, (str, bytes)):
        return text
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def _dtype(type_name: str) -> tuple[str, int] | None:
    dtype = torch_dtype(type_name)
    return None if dtype is None else (dtype, DTYPE_BYTES[dtype])


def _is_shape(s: Any) -> bool:
    return isinstance(s, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in s)


def _arg_tensors(shape: Any, typ: Any) -> tuple[Tensor, ...]:
    if not isinstance(typ, str):
        return ()
    if typ.startswith("Tensor(") and typ.endswith(")"):
        dt = _dtype(typ[7:-1])
        if dt is None or not _is_shape(shape):
            return ()
        return (Tensor(tuple(shape), dt[0], dt[1]),)
    if typ.startswith("GenericList[") and "Tensor(" in typ and isinstance(shape, list):
        names = re.findall(r"Tensor\(([^()]*)\)", typ)
        out = []
        for s, name in zip(shape, names):
            dt = _dtype(name)
            if dt is not None and _is_shape(s):
                out.append(Tensor(tuple(s), dt[0], dt[1]))
        return tuple(out)
    return ()


def _side(shapes: Any, types: Any) -> tuple[tuple[Tensor, ...], ...]:
    if not isinstance(shapes, list) or not isinstance(types, list):
        return ()
    return tuple(_arg_tensors(s, t) for s, t in zip(shapes, types))


def parse_args(inputs: Any, outputs: Any) -> OpArgs:
    """:class:`OpArgs` of an op from its ``IOInfo``-like inputs/outputs (``shapes``/``types``/``values``
    JSON strings or already-parsed lists); missing parts give empty tuples.

    Text that is not JSON counts as missing (no error is raised).
    """

    def part(io: Any, name: str) -> Any:
        """Field ``name`` (``shapes``/``types``/``values``) of ``io`` parsed from JSON, None when absent or not JSON."""
        return _loads(getattr(io, name, None)) if io is not None else None

    values = part(inputs, "values")
    return OpArgs(
        _side(part(inputs, "shapes"), part(inputs, "types")),
        _side(part(outputs, "shapes"), part(outputs, "types")),
        tuple(values) if isinstance(values, list) else (),
    )
