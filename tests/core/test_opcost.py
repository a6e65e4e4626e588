"""Op cost model: FLOPs equal textbook formulas for random shapes; bytes, classes and dtypes by hand."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.model import IOInfo
from tracekit.costs.opcost import aten_cost, op_class_of
from tracekit.costs.opflops import einsum_flops, matmul_flops

F = "Tensor(float)"
H = "Tensor(c10::BFloat16)"
dim = st.integers(min_value=1, max_value=512)
small = st.integers(min_value=1, max_value=16)


def io(shapes, types, values=None):
    values = values if values is not None else [None] * len(shapes)
    return IOInfo(orjson.dumps(values).decode(), orjson.dumps(shapes).decode(), orjson.dumps(types).decode())


def cost(name, in_shapes, in_types, out_shapes=(), out_types=(), values=None):
    return aten_cost(name, io(list(in_shapes), list(in_types), values), io(list(out_shapes), list(out_types)))


# ----------------------------------------------------------------------------- GEMMs: 2 m k n (multiply-add = 2)
@settings(max_examples=40, deadline=None)
@given(m=dim, k=dim, n=dim)
def test_mm_addmm_linear_are_2mkn(m, k, n):
    assert cost("aten::mm", [[m, k], [k, n]], [F, F]).flops == 2 * m * k * n
    # addmm(bias, mat1, mat2): the bias add is not counted (torch.utils.flop_counter.addmm_flop)
    assert cost("aten::addmm", [[n], [m, k], [k, n], [], []], [F, F, F, "Int", "Int"]).flops == 2 * m * k * n
    # linear(x [.., k], W [n, k])
    assert cost("aten::linear", [[m, k], [n, k], [n]], [F, F, F]).flops == 2 * m * k * n
    c = cost("aten::mm", [[m, k], [k, n]], [F, F], [[m, n]], [F])
    assert c.bytes == 4 * (m * k + k * n + m * n) and c.op_class == "gemm" and c.dtype == "fp32"


@settings(max_examples=40, deadline=None)
@given(b=small, m=dim, k=dim, n=dim)
def test_bmm_baddbmm_matmul_are_2bmkn(b, m, k, n):
    want = 2 * b * m * k * n
    assert cost("aten::bmm", [[b, m, k], [b, k, n]], [H, H]).flops == want
    assert cost("aten::baddbmm", [[b, m, n], [b, m, k], [b, k, n]], [H, H, H]).flops == want
    assert cost("aten::matmul", [[b, m, k], [k, n]], [H, H]).flops == want  # broadcast
    assert cost("aten::bmm", [[b, m, k], [b, k, n]], [H, H]).dtype == "bf16"
    assert (
        cost(
            "aten::einsum",
            [[], [[b, m, k], [b, k, n]]],
            ["String", f"GenericList[{H},{H}]"],
            values=["bmk,bkn->bmn", None],
        ).flops
        == want
    )


# ----------------------------------------------------------------------------- convolution
conv_case = st.tuples(
    small,
    st.integers(1, 8),
    st.integers(1, 8),
    st.integers(1, 32),
    st.integers(1, 5),
    st.integers(1, 5),
    st.sampled_from([1, 2]),
)


@settings(max_examples=40, deadline=None)
@given(case=conv_case)
def test_conv2d_forward_and_both_gradients(case):
    n, c_in, c_out, hw, kh, kw, stride = case
    oh, ow = (hw + 2 - kh) // stride + 1, (hw + 2 - kw) // stride + 1
    if oh < 1 or ow < 1:
        return
    # textbook: each output element is a dot product of length c_in kh kw -> 2 c_in kh kw FLOPs
    fwd = 2 * n * c_out * oh * ow * c_in * kh * kw
    x, w, y = [n, c_in, hw, hw], [c_out, c_in, kh, kw], [n, c_out, oh, ow]
    lists = "GenericList[Int,Int]"
    c = cost(
        "aten::conv2d",
        [x, w, [], [[], []], [[], []], [[], []], []],
        [F, F, "None", lists, lists, lists, "Int"],
        [y],
        [F],
        values=[None, None, None, [stride, stride], [1, 1], [1, 1], 1],
    )
    assert c.flops == fwd and c.op_class == "conv"
    # convolution_backward(grad_out, input, weight, bias_sizes, stride, padding, dilation, transposed,
    #                      output_padding, groups, output_mask): grad input and grad weight each = forward
    args = [y, x, w, [[]], [[], []], [[], []], [[], []], [], [[], []], [], [[], [], []]]
    types = [F, F, F, "GenericList[Int]", lists, lists, lists, "Bool", lists, "Int", "GenericList[Bool,Bool,Bool]"]
    vals = [None, None, None, [0], [stride] * 2, [1, 1], [1, 1], False, [0, 0], 1]
    both = cost("aten::convolution_backward", args, types, [x, w], [F, F], values=vals + [[True, True, False]])
    only_w = cost("aten::convolution_backward", args, types, [w], [F], values=vals + [[False, True, False]])
    assert both.flops == 2 * fwd
    assert only_w.flops == fwd


def test_cudnn_convolution_with_allow_tf32_is_priced_as_tf32():
    # param-resnet's first convolution: aten::cudnn_convolution(self, weight, padding, stride, dilation, groups,
    # benchmark, deterministic, allow_tf32) with out [32, 64, 112, 112]
    c = cost(
        "aten::cudnn_convolution",
        [[32, 3, 224, 224], [64, 3, 7, 7], [[], []], [[], []], [[], []], [], [], [], []],
        [F, F, "GenericList[Int,Int]", "GenericList[Int,Int]", "GenericList[Int,Int]", "Int", "Bool", "Bool", "Bool"],
        [[32, 64, 112, 112]],
        [F],
        values=[None, None, [3, 3], [2, 2], [1, 1], 1, True, False, True],
    )
    assert c.flops == 2 * 32 * 64 * 112 * 112 * 3 * 7 * 7
    assert c.dtype == "tf32"  # the benchmark flag (True) at index 6 is not mistaken for "transposed"


# ----------------------------------------------------------------------------- attention
@settings(max_examples=40, deadline=None)
@given(b=small, h=small, lq=dim, s=dim, e=st.sampled_from([16, 32, 64, 128]))
def test_sdpa_forward_and_backward(b, h, lq, s, e):
    q, k, v = [b, h, lq, e], [b, h, s, e], [b, h, s, e]
    # forward: Q K^T (2 b h lq s e) + P V (2 b h lq s e)
    fwd = 4 * b * h * lq * s * e
    for name in (
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::scaled_dot_product_attention",
    ):
        assert cost(name, [q, k, v], [H, H, H]).flops == fwd
    # backward: recomputed scores + dP, dV, dQ, dK: five matmuls of 2 b h lq s e each = 2.5 x forward
    bwd = cost("aten::_scaled_dot_product_flash_attention_backward", [[b, h, lq, e], q, k, v], [H] * 4)
    assert bwd.flops == 10 * b * h * lq * s * e
    # flash kernels take [B, S, H, D]
    assert cost("aten::_flash_attention_forward", [[b, lq, h, e], [b, s, h, e], [b, s, h, e]], [H] * 3).flops == fwd
    assert (
        cost(
            "aten::_flash_attention_backward", [[b, lq, h, e], [b, lq, h, e], [b, s, h, e], [b, s, h, e]], [H] * 4
        ).flops
        == 10 * b * h * lq * s * e
    )


# ----------------------------------------------------------------------------- memory-bound classes and bytes
def test_memory_bound_ops_by_hand():
    x = [8, 1024]
    assert cost("aten::add", [x, x, []], [F, F, "Int"], [x], [F]).flops == 8 * 1024
    assert cost("aten::add", [x, x, []], [F, F, "Int"], [x], [F]).bytes == 3 * 8 * 1024 * 4
    # in place, no recorded output: the first argument is also written back
    assert cost("aten::add_", [x, x, []], [F, F, "Int"]).bytes == 3 * 8 * 1024 * 4
    assert cost("aten::_softmax", [x, [], []], [F, "Int", "Bool"], [x], [F]).flops == 5 * 8 * 1024
    ln = cost(
        "aten::native_layer_norm",
        [x, [[]], [1024], [1024], []],
        [F, "GenericList[Int]", F, F, "Double"],
        [x, [8, 1], [8, 1]],
        [F, F, F],
    )
    assert ln.op_class == "norm" and ln.flops == 5 * 8 * 1024
    emb = cost(
        "aten::embedding", [[50257, 768], [4, 512], [], []], [F, "Tensor(long)", "Int", "Bool"], [[4, 512, 768]], [F]
    )
    # reads only the gathered rows and the indices, writes the output
    assert emb.flops == 0 and emb.bytes == 2 * 4 * 512 * 768 * 4 + 4 * 512 * 8
    view = cost("aten::view", [x, [[]]], [F, "GenericList[Int]"], [[8192]], [F])
    assert view.op_class == "view" and view.flops == 0 and view.bytes == 0
    assert cost("aten::copy_", [x, x, []], [H, F, "Bool"], [x], [H]).bytes == 8 * 1024 * (2 + 4 + 2)


def test_optimizer_steps_per_parameter_element():
    params = [[1024, 1024], [1024]]
    lst = "GenericList[Tensor(float),Tensor(float)]"
    n = 1024 * 1024 + 1024
    sgd = cost("aten::_foreach_add_", [params, params, []], [lst, lst, "Double"])
    assert sgd.op_class == "optimizer" and sgd.flops == n and sgd.bytes == 3 * 4 * n
    adam = cost("aten::_fused_adam_", [params] * 5, [lst] * 5)
    assert adam.flops == 12 * n and adam.bytes == 6 * 4 * n


def test_unknown_and_malformed_ops_have_no_cost():
    assert cost("aten::mm", [[3, 4], [5, 6]], [F, F]) is None  # inner sizes disagree
    assert cost("aten::frobnicate", [[3]], [F]) is None
    assert aten_cost("AddmmBackward0", None, None) is None  # autograd wrappers: children carry the work
    assert op_class_of("aten::addmm") == "gemm" and op_class_of("aten::_foreach_mul_") == "optimizer"
    with pytest.raises(ValueError):
        matmul_flops((3, 4), (5, 6))
    with pytest.raises(ValueError):
        einsum_flops("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)])
