"""Op cost model: FLOPs and bytes moved of aten operators from their input/output shapes and dtypes.

This module owns the table that says, for a PyTorch operator recorded in an
Execution Trace (``inputs``/``outputs`` with ``shapes`` and ``types`` JSON
lists, ``values`` for scalar arguments), how many floating-point operations it
performs and how many bytes it moves, and which *op class* it belongs to
(``gemm``, ``conv``, ``attention`` run on matrix units; ``norm``,
``softmax``, ``elementwise``, ``reduction``, ``embedding``, ``copy``,
``optimizer``, ``pool`` are memory-bound; ``view`` ops move no data).

FLOPs (a multiply-add counts 2, the convention of PyTorch's
``torch/utils/flop_counter.py``: ``mm_flop``, ``addmm_flop``, ``bmm_flop``,
``baddbmm_flop``, ``conv_flop_count``, ``conv_backward_flop``,
``sdpa_flop_count``, ``sdpa_backward_flop_count``):

=======================================  =============================================================
operator                                 FLOPs
=======================================  =============================================================
mm [m,k]@[k,n]; addmm (bias, A, B)       ``2 m k n`` (the bias add is not counted, as flop_counter)
bmm / baddbmm [b,m,k]@[b,k,n]            ``2 b m k n``
matmul (broadcast, 1-D as vectors)       ``2 prod(batch) m k n``
linear (x[..,k], W[n,k])                 ``2 prod(x[:-1]) k n``
einsum (2 operands)                      ``2 prod(size of every index)``; 1 operand: ``prod``
convolution (x, W[c_out, c_in/g, *kk])   ``2 N prod(out_spatial) c_out (c_in/g) prod(kk)``
  transposed                             spatial sizes of the *input* instead of the output
convolution_backward (dy, x, W, mask)    grad input (mask[0]) and grad weight (mask[1]) each = forward
SDPA fwd q[B,H,L,E] k[B,H,S,E] v[..,Ev]  ``2 B H L S E + 2 B H L S Ev``  (Q K^T and P V)
SDPA bwd (dO, q, k, v, ...)              ``2 B H L S (3 E + 2 Ev)`` (recomputed scores + 4 matmuls)
=======================================  =============================================================

Memory-bound ops (not counted by flop_counter; our convention, per output or
input element as named): elementwise 1 per output element (``addcmul``,
``addcdiv``, ``lerp`` 2-3); softmax / log_softmax 5 per element (max, subtract,
exp, sum, divide); layer / RMS / batch norm 5 per element forward, 8 backward;
reductions 1 per input element; copies, casts, fills 0; embedding 0 (a gather);
optimizer steps per parameter element: SGD 2 (4 with momentum), Adam/AdamW 12.

Bytes moved: every tensor input and output read or written once (elements x
element size of its dtype).  In-place ops that record no output (``add_``,
``_foreach_*_``, ``_fused_adam_``) also write their first (list) argument back.
``embedding`` reads only the gathered rows (output size) and the indices.
``to``, ``contiguous``, ``type_as``, ``item`` count as views: they return their
input or call ``_to_copy`` / ``clone`` / ``_local_scalar_dense``, which the trace
records below them and which carry the copy.

Backward ops are priced from their own input shapes (``*_backward`` ops carry
the forward shapes among their inputs); autograd wrapper nodes
(``autograd::engine::evaluate_function: ...``, ``...Backward0``) have no cost of
their own: their aten children do the work.

This module holds the op classes, :class:`OpCost`, the table (name -> op class and FLOPs function) and
:func:`aten_cost`; :mod:`tracekit.costs.opargs` parses the recorded arguments, :mod:`tracekit.costs.opflops` holds the
matrix FLOPs formulas and :mod:`tracekit.costs.opnames` the op names of the per-element classes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from tracekit.costs import opnames
from tracekit.costs.opargs import OpArgs, parse_args
from tracekit.costs.opflops import conv_flops, einsum_flops, matmul_flops, sdpa_backward_flops, sdpa_flops
from tracekit.workloads.flops import ADAM_FLOPS_PER_PARAM, SGD_FLOPS_PER_PARAM
from tracekit.workloads.units import FLOAT_DTYPES

#: Op classes whose time is set by matrix units (tensor cores); the rest are memory-bound.
MATRIX_CLASSES = frozenset({"gemm", "conv", "attention"})
OP_CLASSES = (
    "gemm",
    "conv",
    "attention",
    "norm",
    "softmax",
    "elementwise",
    "reduction",
    "embedding",
    "copy",
    "optimizer",
    "pool",
    "view",
)


@dataclass(frozen=True)
class OpCost:
    """FLOPs and bytes of one op.

    Attributes:
        flops: floating-point operations (multiply-add = 2).
        bytes: bytes read + written.
        op_class: one of :data:`OP_CLASSES`.
        dtype: canonical dtype of the first floating input (``fp32``, ``bf16`` ...; ``tf32`` for an fp32
            convolution that allows TF32), or ``""`` when none.
        source: ``attrs`` (from ``num_ops``/``tensor_size``) or ``shapes`` (from this table).
    """

    flops: int
    bytes: int
    op_class: str
    dtype: str = ""
    source: str = "shapes"


# ----------------------------------------------------------------------------- the table
def _mm(a: OpArgs) -> int:
    return matmul_flops(a.t(0).shape, a.t(1).shape)


def _addmm(a: OpArgs) -> int:  # (bias, mat1, mat2) for addmm / baddbmm
    return matmul_flops(a.t(1).shape, a.t(2).shape)


def _linear(a: OpArgs) -> int:
    x, w = a.t(0).shape, a.t(1).shape
    if len(w) != 2 or x[-1] != w[1]:
        raise ValueError("linear weight does not match input")
    return 2 * math.prod(x[:-1]) * w[1] * w[0]


def _conv_with(transposed: Callable[[OpArgs], bool]) -> Callable[[OpArgs], int]:
    def f(a: OpArgs) -> int:
        """FLOPs of a convolution from its input, weight and output shapes (:func:`conv_flops`).

        Raises:
            ValueError: the op recorded no output shape.
            IndexError: fewer than two tensor inputs.
        """
        x, w = a.t(0).shape, a.t(1).shape
        out = a.outputs[0][0].shape if a.outputs and a.outputs[0] else None
        if out is None:
            raise ValueError("convolution without an output shape")
        return conv_flops(x, w, out, transposed(a))

    return f


_conv = _conv_with(lambda a: False)
_conv_t = _conv_with(lambda a: True)
# aten::convolution / _convolution(input, weight, bias, stride, padding, dilation, transposed, ...)
_conv_generic = _conv_with(lambda a: len(a.values) > 6 and a.values[6] is True)


def _conv_backward(a: OpArgs) -> int:
    dy, x, w = a.t(0).shape, a.t(1).shape, a.t(2).shape
    mask = a.values[-1] if a.values and isinstance(a.values[-1], list) else [True, True, False]
    transposed = len(a.values) > 7 and a.values[7] is True
    fwd = conv_flops(x, w, dy, transposed)
    return fwd * (int(bool(mask[0])) + int(bool(mask[1])))


def _sdpa(a: OpArgs) -> int:
    return sdpa_flops(a.t(0).shape, a.t(1).shape, a.t(2).shape)


def _sdpa_bwd(a: OpArgs) -> int:  # (grad_out, q, k, v, ...)
    return sdpa_backward_flops(a.t(1).shape, a.t(2).shape, a.t(3).shape)


def _bhsd(t: tuple[int, ...]) -> tuple[int, ...]:
    """[B, S, H, D] (flash / efficient attention kernels' layout) -> [B, H, S, D]."""
    return (t[0], t[2], t[1], t[3])


def _flash(a: OpArgs) -> int:  # _flash_attention_forward / _efficient_attention_forward: [B, S, H, D]
    return sdpa_flops(_bhsd(a.t(0).shape), _bhsd(a.t(1).shape), _bhsd(a.t(2).shape))


def _flash_bwd(a: OpArgs) -> int:
    return sdpa_backward_flops(_bhsd(a.t(1).shape), _bhsd(a.t(2).shape), _bhsd(a.t(3).shape))


def _einsum(a: OpArgs) -> int:
    eq = a.values[0] if a.values and isinstance(a.values[0], str) else None
    if eq is None:
        raise ValueError("einsum without its equation")
    return einsum_flops(eq, [t.shape for t in (a.inputs[1] if len(a.inputs) > 1 else ())])


def _per_out(k: float) -> Callable[[OpArgs], int]:
    def f(a: OpArgs) -> int:
        """``k`` FLOPs per element of the first output (of the first tensor input when no output is recorded)."""
        outs = [t for arg in a.outputs for t in arg]
        ref = outs[0] if outs else a.t(0)
        return int(k * ref.numel)

    return f


def _per_in(k: float) -> Callable[[OpArgs], int]:
    return lambda a: int(k * a.t(0).numel)


def _per_list(k: float) -> Callable[[OpArgs], int]:
    """k FLOPs per element of the first tensor-list argument (foreach / fused optimizer ops)."""
    return lambda a: int(k * sum(t.numel for t in next(arg for arg in a.inputs if arg)))


_ZERO = lambda a: 0  # noqa: E731

_GEMM = {
    "mm": _mm,
    "addmm": _addmm,
    "bmm": _mm,
    "baddbmm": _addmm,
    "matmul": _mm,
    "linear": _linear,
    "_addmm_activation": _addmm,
    "addbmm": _addmm,
    "dot": _mm,
    "mv": _mm,
    "einsum": _einsum,
    "_scaled_mm": _mm,
}
_CONV = {
    "convolution": _conv_generic,
    "_convolution": _conv_generic,
    "conv1d": _conv,
    "conv2d": _conv,
    "conv3d": _conv,
    "cudnn_convolution": _conv,
    "mkldnn_convolution": _conv,
    "miopen_convolution": _conv,
    "_slow_conv2d_forward": _conv,
    "thnn_conv2d": _conv,
    "conv_transpose1d": _conv_t,
    "conv_transpose2d": _conv_t,
    "conv_transpose3d": _conv_t,
    "cudnn_convolution_transpose": _conv_t,
    "convolution_backward": _conv_backward,
    "_convolution_backward": _conv_backward,
}
_ATTN = {
    "scaled_dot_product_attention": _sdpa,
    "_scaled_dot_product_flash_attention": _sdpa,
    "_scaled_dot_product_efficient_attention": _sdpa,
    "_scaled_dot_product_cudnn_attention": _sdpa,
    "_scaled_dot_product_attention_math": _sdpa,
    "_scaled_dot_product_flash_attention_for_cpu": _sdpa,
    "_scaled_dot_product_flash_attention_backward": _sdpa_bwd,
    "_scaled_dot_product_efficient_attention_backward": _sdpa_bwd,
    "_scaled_dot_product_cudnn_attention_backward": _sdpa_bwd,
    "_scaled_dot_product_flash_attention_for_cpu_backward": _sdpa_bwd,
    "_flash_attention_forward": _flash,
    "_efficient_attention_forward": _flash,
    "_flash_attention_backward": _flash_bwd,
    "_efficient_attention_backward": _flash_bwd,
}
_NORM = {n: _per_in(5) for n in opnames.NORM_FORWARD}
_NORM.update({n: _per_in(8) for n in opnames.NORM_BACKWARD})
_SOFTMAX = {n: _per_in(5) for n in opnames.SOFTMAX}
_OPTIM = {
    "_fused_adam": _per_list(ADAM_FLOPS_PER_PARAM),
    "_fused_adamw": _per_list(ADAM_FLOPS_PER_PARAM),
    "_fused_sgd": _per_list(SGD_FLOPS_PER_PARAM),
    "_foreach_add": _per_list(1),
    "_foreach_mul": _per_list(1),
    "_foreach_div": _per_list(1),
    "_foreach_sub": _per_list(1),
    "_foreach_addcmul": _per_list(2),
    "_foreach_addcdiv": _per_list(2),
    "_foreach_sqrt": _per_list(1),
    "_foreach_lerp": _per_list(3),
    "_foreach_zero": _ZERO,
    "_foreach_copy": _ZERO,
    "_foreach_neg": _per_list(1),
    "_foreach_maximum": _per_list(1),
    "_foreach_clamp_min": _per_list(1),
    "_foreach_clamp_max": _per_list(1),
    "_foreach_reciprocal": _per_list(1),
    "_foreach_pow": _per_list(1),
    "_foreach_abs": _per_list(1),
    "_foreach_sign": _per_list(1),
    "_foreach_exp": _per_list(1),
    "_foreach_rsqrt": _per_list(1),
}

#: aten name (no ``aten::`` prefix, no trailing ``_``) -> (op class, FLOPs function of :class:`OpArgs`).
TABLE: dict[str, tuple[str, Callable[[OpArgs], int]]] = {}
for _cls, _entries in (
    ("gemm", _GEMM),
    ("conv", _CONV),
    ("attention", _ATTN),
    ("norm", _NORM),
    ("softmax", _SOFTMAX),
    ("optimizer", _OPTIM),
):
    TABLE.update({k: (_cls, f) for k, f in _entries.items()})
for _cls, _names, _fn in (
    ("elementwise", opnames.ELEMENTWISE_2, _per_out(2)),
    ("elementwise", opnames.ELEMENTWISE_1, _per_out(1)),
    ("reduction", opnames.REDUCTION, _per_in(1)),
    ("copy", opnames.COPY, _ZERO),
    ("view", opnames.VIEW, _ZERO),
    ("pool", opnames.POOL, _per_in(1)),
):
    for _n in _names:
        TABLE.setdefault(_n, (_cls, _fn))
TABLE["embedding"] = ("embedding", _ZERO)
TABLE["embedding_bag"] = ("embedding", _per_out(1))
TABLE["_embedding_bag"] = ("embedding", _per_out(1))


def table_key(name: str) -> str | None:
    """The :data:`TABLE` key of an op name (``aten::add_`` -> ``add``), or None for non-aten names."""
    if not name.startswith("aten::"):
        return None
    key = name[6:].split(".")[0]
    for cand in (key, key.rstrip("_")):
        if cand in TABLE:
            return cand
    return None


def op_class_of(name: str) -> str | None:
    """The op class of an aten op name, or None when the table does not know it."""
    key = table_key(name)
    return TABLE[key][0] if key is not None else None


def _bytes(key: str, name: str, a: OpArgs, cls: str) -> int:
    if cls == "view":
        return 0
    ins = [t for arg in a.inputs for t in arg]
    outs = [t for arg in a.outputs for t in arg]
    if key == "embedding" and ins:
        return sum(t.nbytes for t in outs) * 2 + sum(t.nbytes for t in ins[1:])
    total = sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs)
    if name.endswith("_") and not outs and a.inputs:
        total += sum(t.nbytes for t in next((arg for arg in a.inputs if arg), ()))
    return total


def _compute_dtype(key: str, a: OpArgs) -> str:
    for arg in a.inputs:
        for t in arg:
            if t.dtype in FLOAT_DTYPES:
                if (
                    t.dtype == "fp32"
                    and key in ("cudnn_convolution", "cudnn_convolution_transpose")
                    and a.values
                    and a.values[-1] is True
                ):
                    return "tf32"  # cudnn_convolution(..., allow_tf32): cuDNN runs fp32 convs as TF32
                return t.dtype
    return ""


def aten_cost(name: str, inputs: Any, outputs: Any) -> OpCost | None:
    """FLOPs and bytes of aten op ``name`` from its ET inputs/outputs (IOInfo-like), or None when the
    table does not know the op or its arguments do not fit the formula (see module table).

    Returns:
        :class:`OpCost` with ``flops`` (a multiply-add = 2) and ``bytes`` read + written, or None.
        Never raises for malformed arguments: a shape that does not fit gives None.
    """
    key = table_key(name)
    if key is None:
        return None
    cls, fn = TABLE[key]
    if cls == "view":  # no work: skip parsing the arguments
        return OpCost(0, 0, cls, "")
    args = parse_args(inputs, outputs)
    if not any(args.inputs) and not any(args.outputs):
        return None
    try:
        flops = int(fn(args))
    except (ValueError, IndexError, TypeError, StopIteration):
        return None
    return OpCost(flops, _bytes(key, name, args, cls), cls, _compute_dtype(key, args))


__all__ = [
    "MATRIX_CLASSES",
    "OP_CLASSES",
    "OpCost",
    "TABLE",
    "aten_cost",
    "op_class_of",
    "table_key",
]
