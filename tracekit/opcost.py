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
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

import orjson

from tracekit.workloads.flops import ADAM_FLOPS_PER_PARAM, SGD_FLOPS_PER_PARAM
from tracekit.workloads.units import DTYPE_BYTES, FLOAT_DTYPES, torch_dtype

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


# ----------------------------------------------------------------------------- matrix FLOPs
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


def _bhsd(t: tuple[int, ...]) -> tuple[int, ...]:
    """[B, S, H, D] (flash / efficient attention kernels' layout) -> [B, H, S, D]."""
    return (t[0], t[2], t[1], t[3])


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
_NORM = {
    n: _per_in(5)
    for n in (
        "layer_norm",
        "native_layer_norm",
        "batch_norm",
        "native_batch_norm",
        "_native_batch_norm_legit",
        "_native_batch_norm_legit_no_training",
        "cudnn_batch_norm",
        "miopen_batch_norm",
        "_batch_norm_impl_index",
        "rms_norm",
        "_fused_rms_norm",
        "group_norm",
        "native_group_norm",
        "instance_norm",
        "_batch_norm_with_update",
    )
}
_NORM.update(
    {
        n: _per_in(8)
        for n in (
            "native_layer_norm_backward",
            "native_batch_norm_backward",
            "cudnn_batch_norm_backward",
            "miopen_batch_norm_backward",
            "_fused_rms_norm_backward",
            "native_group_norm_backward",
            "batch_norm_backward",
            "_batch_norm_impl_index_backward",
        )
    }
)
_SOFTMAX = {
    n: _per_in(5)
    for n in (
        "softmax",
        "_softmax",
        "log_softmax",
        "_log_softmax",
        "_softmax_backward_data",
        "_log_softmax_backward_data",
        "cross_entropy_loss",
        "nll_loss",
        "nll_loss_forward",
        "nll_loss2d_forward",
        "nll_loss_nd",
        "nll_loss_backward",
        "nll_loss2d_backward",
    )
}
_ELEMENTWISE_2 = (
    "addcmul",
    "addcdiv",
    "lerp",
    "gelu",
    "gelu_backward",
    "silu",
    "silu_backward",
    "native_dropout",
    "dropout",
    "native_dropout_backward",
    "mse_loss",
    "mse_loss_backward",
    "sigmoid_backward",
    "tanh_backward",
    "hardtanh_backward",
    "leaky_relu_backward",
)
_ELEMENTWISE_1 = (
    "add",
    "sub",
    "mul",
    "div",
    "relu",
    "threshold_backward",
    "threshold",
    "sigmoid",
    "tanh",
    "neg",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "pow",
    "where",
    "masked_fill",
    "clamp",
    "clamp_min",
    "clamp_max",
    "maximum",
    "minimum",
    "abs",
    "sign",
    "reciprocal",
    "hardtanh",
    "leaky_relu",
    "erf",
    "sin",
    "cos",
    "square",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_not",
    "logical_and",
    "logical_or",
    "bitwise_and",
    "bitwise_or",
    "rsub",
    "triu",
    "tril",
    "uniform",
    "normal",
    "bernoulli",
    "rand",
    "randn",
    "randint",
    "arange",
    "scatter",
    "scatter_add",
    "index_add",
    "index_put",
    "gather",
    "index",
    "index_select",
    "masked_select",
    "embedding_bag",
    "_embedding_bag",
    "_embedding_bag_backward",
    "embedding_dense_backward",
    "embedding_backward",
    "cumsum",
    "gelu_",
    "softplus",
    "elu",
    "silu_",
)
_REDUCTION = (
    "sum",
    "mean",
    "amax",
    "amin",
    "max",
    "min",
    "norm",
    "linalg_vector_norm",
    "var",
    "std",
    "var_mean",
    "std_mean",
    "prod",
    "argmax",
    "argmin",
    "all",
    "any",
    "logsumexp",
    "topk",
    "sort",
    "_foreach_norm",
)
_COPY = (
    "copy",
    "_to_copy",
    "clone",
    "fill",
    "zero",
    "zeros",
    "ones",
    "full",
    "zeros_like",
    "ones_like",
    "full_like",
    "cat",
    "stack",
    "_cat",
    "repeat",
    "expand_copy",
    "constant_pad_nd",
    "pad",
    "flip",
    "roll",
    "_copy_from",
    "_copy_from_and_resize",
    "type_as",
    "new_zeros",
    "new_ones",
    "new_full",
    "masked_scatter",
    "_local_scalar_dense",
    "_pin_memory",
    "pin_memory",
    "cudnn_batch_norm_reserve",
    "narrow_copy",
    "slice_backward",
    "select_backward",
    "index_select_backward",
    "as_strided_scatter",
    "slice_scatter",
    "select_scatter",
)
_VIEW = (
    "view",
    "reshape",
    "_reshape_alias",
    "_unsafe_view",
    "t",
    "transpose",
    "permute",
    "expand",
    "expand_as",
    "as_strided",
    "slice",
    "select",
    "narrow",
    "unsqueeze",
    "squeeze",
    "flatten",
    "unflatten",
    "split",
    "split_with_sizes",
    "chunk",
    "unbind",
    "detach",
    "alias",
    "view_as",
    "numpy_T",
    "movedim",
    "unfold",
    "empty",
    "empty_like",
    "empty_strided",
    "resize",
    "set",
    "result_type",
    "lift_fresh_copy",
    "is_nonzero",
    "size",
    "stride",
    "_has_compatible_shallow_copy_type",
    "record_stream",
    "_version",
    "retain_grad",
    "requires_grad",
    "_reshape_copy",
    "diagonal",
    "broadcast_tensors",
    "align_as",
    "real",
    "imag",
    "view_as_real",
    "view_as_complex",
    # these return their input or call a copying op that the trace records below them
    "to",
    "contiguous",
    "type_as",
    "lift_fresh",
    "item",
)
_POOL = (
    "max_pool2d",
    "max_pool2d_with_indices",
    "max_pool2d_with_indices_backward",
    "avg_pool2d",
    "avg_pool2d_backward",
    "adaptive_avg_pool2d",
    "_adaptive_avg_pool2d",
    "_adaptive_avg_pool2d_backward",
    "adaptive_max_pool2d",
    "max_pool1d",
    "max_pool3d",
    "avg_pool1d",
    "avg_pool3d",
    "max_pool3d_with_indices",
    "upsample_nearest2d",
    "upsample_bilinear2d",
    "upsample_nearest2d_backward",
    "upsample_bilinear2d_backward",
)
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
    ("elementwise", _ELEMENTWISE_2, _per_out(2)),
    ("elementwise", _ELEMENTWISE_1, _per_out(1)),
    ("reduction", _REDUCTION, _per_in(1)),
    ("copy", _COPY, _ZERO),
    ("view", _VIEW, _ZERO),
    ("pool", _POOL, _per_in(1)),
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
    "FLOAT_DTYPES",
    "MATRIX_CLASSES",
    "OP_CLASSES",
    "OpArgs",
    "OpCost",
    "TABLE",
    "Tensor",
    "aten_cost",
    "conv_flops",
    "einsum_flops",
    "matmul_flops",
    "op_class_of",
    "parse_args",
    "sdpa_backward_flops",
    "sdpa_flops",
    "table_key",
]
