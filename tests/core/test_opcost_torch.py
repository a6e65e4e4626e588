"""The op cost model against PyTorch's own FLOP counter (torch.utils.flop_counter) on the same shapes."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.model import IOInfo
from tracekit.costs.opcost import aten_cost

torch = pytest.importorskip("torch", reason="needs PyTorch (pip install torch) for torch.utils.flop_counter")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

F = "Tensor(float)"


def _io(shapes, types, values=None):
    values = values if values is not None else [None] * len(shapes)
    return IOInfo(orjson.dumps(values).decode(), orjson.dumps(shapes).decode(), orjson.dumps(types).decode())


def _torch_flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@settings(max_examples=8, deadline=None)
@given(m=st.integers(1, 64), k=st.integers(1, 64), n=st.integers(1, 64), b=st.integers(1, 4))
def test_matmuls_match_flop_counter(m, k, n, b):
    a, w, x = torch.randn(m, k), torch.randn(k, n), torch.randn(b, m, k)
    ours = aten_cost("aten::mm", _io([[m, k], [k, n]], [F, F]), None).flops
    assert ours == _torch_flops(lambda: torch.mm(a, w))
    ours = aten_cost("aten::addmm", _io([[n], [m, k], [k, n]], [F, F, F]), None).flops
    assert ours == _torch_flops(lambda: torch.addmm(torch.randn(n), a, w))
    ours = aten_cost("aten::bmm", _io([[b, m, k], [b, k, n]], [F, F]), None).flops
    assert ours == _torch_flops(lambda: torch.bmm(x, torch.randn(b, k, n)))


@settings(max_examples=6, deadline=None)
@given(
    n=st.integers(1, 3), c_in=st.integers(1, 6), c_out=st.integers(1, 6), hw=st.integers(4, 12), kk=st.integers(1, 3)
)
def test_conv2d_forward_and_backward_match_flop_counter(n, c_in, c_out, hw, kk):
    x = torch.randn(n, c_in, hw, hw, requires_grad=True)
    w = torch.randn(c_out, c_in, kk, kk, requires_grad=True)
    y_shape = [n, c_out, hw - kk + 1, hw - kk + 1]
    fwd = aten_cost(
        "aten::convolution",
        _io(
            [[n, c_in, hw, hw], [c_out, c_in, kk, kk]],
            [F, F],
            [None, None, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1],
        ),
        _io([y_shape], [F]),
    ).flops
    lists = "GenericList[Int,Int]"
    bwd = aten_cost(
        "aten::convolution_backward",
        _io(
            [
                y_shape,
                [n, c_in, hw, hw],
                [c_out, c_in, kk, kk],
                [[]],
                [[], []],
                [[], []],
                [[], []],
                [],
                [[], []],
                [],
                [[], [], []],
            ],
            [F, F, F, "GenericList[Int]", lists, lists, lists, "Bool", lists, "Int", "GenericList[Bool]"],
            [None, None, None, [0], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, False]],
        ),
        None,
    ).flops

    def step():
        y = torch.nn.functional.conv2d(x, w)
        y.backward(torch.ones_like(y))

    assert fwd + bwd == _torch_flops(step)


@settings(max_examples=20, deadline=None)
@given(
    b=st.integers(1, 4),
    h=st.integers(1, 8),
    lq=st.integers(1, 512),
    s=st.integers(1, 512),
    e=st.sampled_from([8, 16, 64, 128]),
    ev=st.sampled_from([8, 64, 128]),
)
def test_sdpa_forward_and_backward_match_flop_counter_formulas(b, h, lq, s, e, ev):
    # the CPU build dispatches SDPA to a kernel the counter does not register, so compare with its formula
    # functions (the ones FlopCounterMode registers for the CUDA flash / efficient / cudnn kernels)
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    q, k, v = [b, h, lq, e], [b, h, s, e], [b, h, s, ev]
    fwd = aten_cost("aten::_scaled_dot_product_efficient_attention", _io([q, k, v], [F] * 3), None).flops
    bwd = aten_cost(
        "aten::_scaled_dot_product_flash_attention_backward", _io([[b, h, lq, ev], q, k, v], [F] * 4), None
    ).flops
    assert fwd == sdpa_flop_count(q, k, v)
    assert bwd == sdpa_backward_flop_count([b, h, lq, ev], q, k, v)
