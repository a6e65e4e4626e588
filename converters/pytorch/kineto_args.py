"""Arguments of Kineto CPU events that describe a collective: element counts, byte sizes, ranks, peers.

Kineto records an op's arguments as ``Input Dims`` (shapes or lists of shapes), ``Input type`` (torch type
names), ``Concrete Inputs`` (scalar values as strings) and, on ``record_param_comms``, named fields such as
``Process Group Ranks``. :mod:`.kineto_comms` reads collectives' sizes, groups and peers through these.
"""

from __future__ import annotations

import math
from typing import Any

from tracekit.converters.pytorch.kineto_reader import KinetoEvent
from tracekit.workloads.units import torch_dtype_bytes

__all__ = ["arg_bytes", "concrete_int", "input_type_bytes", "numel", "parse_ranks"]


def numel(dims: Any) -> int | None:
    """Elements of a shape ``[a, b]`` or of a list of shapes ``[[a], [b, c]]``; None if not a shape."""
    if isinstance(dims, list):
        if all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
            return math.prod(dims)
        total = 0
        for d in dims:
            n = numel(d)
            if n is None:
                return None
            total += n
        return total
    return None


def input_type_bytes(type_name: Any) -> int | None:
    """Element size in bytes of a Kineto ``Input type`` name (``float``, ``c10::BFloat16`` ...), None if unknown."""
    if not isinstance(type_name, str):
        return None
    return torch_dtype_bytes(type_name)


def arg_bytes(e: KinetoEvent, i: int) -> int | None:
    """Bytes of input ``i`` from ``Input Dims``/``Input type``; None when shape or dtype is missing."""
    dims, types = e.args.get("Input Dims"), e.args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list) or i >= len(dims) or i >= len(types):
        return None
    n, size = numel(dims[i]), input_type_bytes(types[i])
    if n is None or size is None or (n == 0 and dims[i] == []):
        return None
    return n * size


def concrete_int(e: KinetoEvent, i: int) -> int | None:
    """Input ``i`` of ``Concrete Inputs`` as an int (a peer or tag of ``c10d::send``), None if absent or not one."""
    vals = e.args.get("Concrete Inputs")
    if not isinstance(vals, list) or i >= len(vals):
        return None
    try:
        return int(vals[i])
    except (TypeError, ValueError):
        return None


def parse_ranks(value: Any) -> tuple[int, ...] | None:
    """A rank list given as a JSON list or a ``"[0, 1]"`` string; None when it cannot be parsed."""
    if isinstance(value, list) and all(isinstance(r, int) for r in value):
        return tuple(value)
    if isinstance(value, str):
        text = value.strip().strip("[]").strip()
        if not text:
            return ()
        try:
            return tuple(int(x) for x in text.split(","))
        except ValueError:
            return None
    return None
