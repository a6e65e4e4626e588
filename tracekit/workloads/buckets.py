"""Data-parallel gradient buckets: which units' gradients are reduced together.

Megatron-LM's distributed optimizer and PyTorch DDP both reduce gradients in
buckets of a fixed size, filled in the order gradients become final (reverse
layer order in the backward): a bucket is closed when the next unit would
overflow it, so a unit is never split and a bucket holds at least one unit
(Li et al. 2020, "PyTorch Distributed", section 3.2.3; Megatron-LM's default
bucket is 40M elements, 160 MB of fp32 gradients).
"""

from __future__ import annotations

from typing import Callable, Iterable

#: Megatron-LM's default bucket: 40,000,000 fp32 gradient elements
DEFAULT_BUCKET_BYTES = 40_000_000 * 4


def bucket_limit_elems(bucket_bytes: int, grad_bytes: int) -> int:
    """Elements per bucket: ``bucket_bytes // grad_bytes``, at least 1 (bytes and bytes per element)."""
    return max(1, bucket_bytes // grad_bytes)


def pack_buckets(units: Iterable[int], elems_of: Callable[[int], int], limit_elems: int) -> list[tuple[list[int], int]]:
    """``[(units, elements), ...]``: ``units`` (in the order their gradients become final) packed greedily.

    A unit with no elements is skipped; a unit larger than the limit gets a bucket of its own.
    """
    out: list[tuple[list[int], int]] = []
    current: list[int] = []
    total = 0
    for unit in units:
        elems = elems_of(unit)
        if not elems:
            continue
        if current and total + elems > limit_elems:
            out.append((current, total))
            current, total = [], 0
        current.append(unit)
        total += elems
    if current:
        out.append((current, total))
    return out


__all__ = ["DEFAULT_BUCKET_BYTES", "bucket_limit_elems", "pack_buckets"]
