"""FLOPs of the matrix operators (matmul, convolution, scaled-dot-product attention, einsum) from shapes.

A multiply-add counts 2, as in PyTorch's ``torch/utils/flop_counter.py`` (``mm_flop``, ``bmm_flop``,
``conv_flop_count``, ``sdpa_flop_count``, ``sdpa_backward_flop_count``); :mod:`tracekit.costs.opcost`'s docstring
has the table of formulas and applies them to recorded ops.
"""

from __future__ import annotations

import math

__all__ = ["conv_flops", "einsum_flops", "matmul_flops", "sdpa_backward_flops", "sdpa_flops"]


def matmul_flops(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """``2 prod(batch) m k n`` for ``torch.matmul`` semantics (1-D operands as vectors, broadcast batch).

    Raises:
        ValueError: inner sizes differ or an operand is 0-D.
    """
    if not a or not b:
        raise ValueError("matmul of a 0-D tensor")
    a = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    m, k, k2, n = a[-2], a[-1], b[-2], b[-1]
    if k != k2:
        raise ValueError(f"inner sizes differ: {k} vs {k2}")
    width = max(len(a), len(b)) - 2
    ba = (1,) * (width - len(a) + 2) + a[:-2]
    bb = (1,) * (width - len(b) + 2) + b[:-2]
    return 2 * math.prod(max(x, y) for x, y in zip(ba, bb)) * m * k * n


def conv_flops(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...], transposed: bool = False) -> int:
    """``2 N prod(spatial) c_out (c_in/groups) prod(kernel)`` (flop_counter ``conv_flop_count``); spatial
    sizes of the output, or of the input for a transposed convolution.  ``w`` = [c_out, c_in/g, *kernel]
    ([c_in, c_out/g, *kernel] when transposed: the product is the same).

    Args:
        x: input shape ``[N, c_in, *spatial]``.
        w: weight shape.
        out: output shape ``[N, c_out, *spatial]``.
        transposed: a transposed convolution.

    Raises:
        IndexError: ``x`` or ``w`` has fewer than 2 dimensions.
    """
    spatial = (x if transposed else out)[2:]
    return 2 * x[0] * math.prod(spatial) * w[0] * w[1] * math.prod(w[2:])


def sdpa_flops(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...]) -> int:
    """Forward attention ``2 B H L S E + 2 B H L S Ev`` for q [B,H,L,E], k [B,H,S,E], v [B,H,S,Ev].

    Source: PyTorch ``torch/utils/flop_counter.py`` ``sdpa_flop_count`` (Q K^T and P V).

    Raises:
        ValueError: ``q`` is not 4-D.
        IndexError: ``k`` or ``v`` has fewer than 4 dimensions.
    """
    b, h, l_q, e = q
    s, ev = k[2], v[3]
    return 2 * b * h * l_q * s * e + 2 * b * h * l_q * s * ev


def sdpa_backward_flops(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...]) -> int:
    """Backward attention ``2 B H L S (3 E + 2 Ev)`` (flop_counter ``sdpa_backward_flop_count``: scores
    recomputed, then dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q).

    Raises:
        ValueError: ``q`` is not 4-D.
        IndexError: ``k`` or ``v`` has fewer than 4 dimensions.
    """
    b, h, l_q, e = q
    s, ev = k[2], v[3]
    return 2 * b * h * l_q * s * (3 * e + 2 * ev)


def einsum_flops(equation: str, shapes: list[tuple[int, ...]]) -> int:
    """FLOPs of ``torch.einsum(equation, *operands)``: ``2 prod(sizes of all indices)`` for two operands
    (each output element sums products over the contracted indices), ``prod`` for one operand.

    Raises:
        ValueError: equation and shapes disagree, or more than two operands.
    """
    lhs = equation.replace(" ", "").split("->")[0]
    terms = lhs.split(",")
    if len(terms) != len(shapes) or len(terms) > 2 or "." in lhs:
        raise ValueError(f"unsupported einsum {equation!r} with {len(shapes)} operand(s)")
    sizes: dict[str, int] = {}
    for term, shape in zip(terms, shapes):
        if len(term) != len(shape):
            raise ValueError(f"einsum term {term!r} does not match shape {shape}")
        for c, d in zip(term, shape):
            sizes[c] = max(sizes.get(c, 1), d)
    return (2 if len(terms) == 2 else 1) * math.prod(sizes.values())
