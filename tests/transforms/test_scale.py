"""Scaling: compute by a factor, roofline retargeting, message sizes, bad parameters."""

from __future__ import annotations

import math

import pytest
from _tfhelpers import coll, comp, llm, one_rank, replay_ns

from tracekit.errors import ConfigError
from tracekit.model import CollectiveType, IOInfo, Node, NodeType
from tracekit.transforms import Device, Retarget, ScaleComm, ScaleCompute
from tracekit.transforms.opcost import op_cost, shape_flops


def _diamond():
    # 0 -> {1, 2} -> 3 on two streams: the compute-only critical path is 100 + 300 + 50 = 450 ns
    return one_rank(
        [
            comp(0, (), 100, stream=0),
            comp(1, [0], 300, stream=0),
            comp(2, [0], 200, stream=1),
            comp(3, [1, 2], 50, stream=0),
        ]
    )


@pytest.mark.parametrize("k", [0.5, 2.0, 3.0])
def test_scale_compute_multiplies_compute_only_replay_time(k):
    ts = _diamond()
    out = ScaleCompute(k).apply(ts)
    assert [n.duration_ns for n in out[0].nodes] == [100 * k, 300 * k, 200 * k, 50 * k]
    assert [n.duration_ns for n in ts[0].nodes] == [100, 300, 200, 50]  # input untouched
    assert replay_ns(out) == pytest.approx(k * replay_ns(ts), rel=0, abs=0)
    assert replay_ns(ts) == 450


def test_scale_compute_without_durations_scales_flops_and_bytes():
    ts = one_rank([comp(0, (), 0, num_ops=10**12, tensor_bytes=10**9)])
    n = ScaleCompute(2).apply(ts)[0].nodes[0]
    assert (n.num_ops, n.tensor_bytes, n.duration_ns) == (2 * 10**12, 2 * 10**9, 0)


def test_scale_compute_selects_by_pattern_and_host_device():
    ts = one_rank(
        [
            comp(0, (), 100, name="aten::mm"),
            comp(1, [0], 100, name="aten::relu"),
            comp(2, [1], 100, name="aten::mm", cpu=True),
        ]
    )
    out = ScaleCompute(0.5, name_pattern=r"::mm$", cpu=False).apply(ts)[0]
    assert [n.duration_ns for n in out.nodes] == [50, 100, 100]


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "2", True])
def test_scale_compute_refuses_bad_factor(bad):
    with pytest.raises(ConfigError, match="compute scale factor must be a finite number > 0"):
        ScaleCompute(bad)


def test_scale_comm_per_type_override():
    ts = one_rank([coll(0, (), 1000), coll(1, [0], 1000, CollectiveType.ALL_GATHER), comp(2, [1], 7)])
    out = ScaleComm(2.0, per_type={"all_gather": 0.25}).apply(ts)[0]
    assert [n.comm_bytes for n in out.nodes] == [2000, 250, None]
    assert out.nodes[2] is ts[0].nodes[2]  # untouched nodes are shared
    with pytest.raises(ConfigError, match="unknown collective type 'allgatherv'"):
        ScaleComm(per_type={"allgatherv": 2})
    with pytest.raises(ConfigError, match="message size factor for all_reduce"):
        ScaleComm(per_type={CollectiveType.ALL_REDUCE: 0})


# ----------------------------------------------------------------------------- shape-derived FLOPs
def _aten(name, shapes, types, out_shapes="[]", out_types="[]"):
    return Node(
        1, name, NodeType.COMP_NODE, inputs=IOInfo("[]", shapes, types), outputs=IOInfo("[]", out_shapes, out_types)
    )


def test_shape_flops_follow_pytorch_flop_counter_conventions():
    f = '"Tensor(float)"'
    assert shape_flops(_aten("aten::mm", "[[32,1000],[1000,2048]]", f"[{f},{f}]")) == 2 * 32 * 1000 * 2048
    assert (
        shape_flops(_aten("aten::addmm", "[[1000],[32,2048],[2048,1000]]", f'[{f},{f},{f},"Int"]'))
        == 2 * 32 * 2048 * 1000
    )
    assert (
        shape_flops(_aten("aten::linear", "[[32,2048],[1000,2048],[1000]]", f"[{f},{f},{f}]")) == 2 * 32 * 2048 * 1000
    )
    assert shape_flops(_aten("aten::bmm", "[[4,8,16],[4,16,32]]", f"[{f},{f}]")) == 2 * 4 * 8 * 16 * 32
    # the first ResNet-50 convolution of param-resnet: out [32,64,112,112], weight [64,3,7,7]
    conv = _aten(
        "aten::conv2d",
        "[[32,3,224,224],[64,3,7,7],[],[[],[]],[[],[]],[[],[]],[]]",
        f'[{f},{f},"None","GenericList[Int,Int]","GenericList[Int,Int]","GenericList[Int,Int]","Int"]',
        "[[32,64,112,112]]",
        f"[{f}]",
    )
    assert shape_flops(conv) == 2 * (32 * 64 * 112 * 112) * (3 * 7 * 7)
    h = '"Tensor(c10::BFloat16)"'
    sdpa = _aten(
        "aten::_scaled_dot_product_flash_attention", "[[2,8,128,64],[2,8,256,64],[2,8,256,64]]", f"[{h},{h},{h}]"
    )
    assert shape_flops(sdpa) == 2 * (2 * 2 * 8 * 128 * 256 * 64)
    cost = op_cost(sdpa)
    assert cost.source == "shapes" and cost.bytes == 2 * (2 * 8 * 128 * 64 + 2 * 2 * 8 * 256 * 64)
    assert shape_flops(_aten("aten::mm", "[[3,4],[5,6]]", f"[{f},{f}]")) is None  # inner sizes disagree


# ----------------------------------------------------------------------------- retarget
def test_retarget_single_node_roofline_ratio():
    a100, h100 = Device(312e12, 2.039e12), Device(989e12, 3.35e12)
    gemm = comp(0, (), 1_000_000, num_ops=10**12, tensor_bytes=10**8)  # compute bound on both
    copy = comp(1, [0], 1_000_000, num_ops=10**6, tensor_bytes=10**10)  # memory bound on both
    out = Retarget(a100, h100).apply(one_rank([gemm, copy]))[0]
    assert out.nodes[0].duration_ns == round(1_000_000 * 312 / 989)
    assert out.nodes[1].duration_ns == round(1_000_000 * 2.039 / 3.35)


def test_retarget_accepts_spec_objects_and_refuses_bad_devices():
    class Spec:  # anything with the two attributes
        peak_flops_per_s = 1e12
        mem_bandwidth_bytes_per_s = 1e9

    assert Device.of(Spec()) == Device(1e12, 1e9)
    assert Device.of((2e12, 3e9)) == Device(2e12, 3e9)
    with pytest.raises(ConfigError, match="peak FLOP/s must be a finite number > 0, got 0"):
        Device(0, 1e9)
    with pytest.raises(ConfigError, match="has no peak_flops_per_s"):
        Device.of(object())


def test_retarget_generated_gpt_layer_a100_to_h100_gives_roofline_ratio():
    LLMConfig, ModelSpec, ParallelSpec, generate_llm = llm()
    from tracekit.replayer.simulation.specs import load_spec

    a100, h100 = load_spec("dgx-a100"), load_spec("dgx-h100")
    da, dh = Device.of(a100), Device.of(h100)
    model = ModelSpec("gpt-layer", num_layers=1, hidden_size=4096, num_heads=32, seq_length=2048, vocab_size=51200)
    cfg = LLMConfig(model, ParallelSpec(), global_batch_size=1, micro_batch_size=1)
    on_a100 = generate_llm(cfg, da)
    on_h100 = generate_llm(cfg, dh)
    out = Retarget(a100, h100).apply(on_a100)
    comps = [(n, m) for n, m in zip(out[0].nodes, on_h100[0].nodes) if n.type == NodeType.COMP_NODE]
    # every node: d_A100 * t_H100 / t_A100, within the generator's 1 ns ceiling of each duration
    for n, m in comps:
        assert abs(n.duration_ns - m.duration_ns) <= 1, n.name
    want = sum(math.ceil(dh.seconds(n.num_ops, n.tensor_bytes) * 1e9) for n, _ in comps) / sum(
        math.ceil(da.seconds(n.num_ops, n.tensor_bytes) * 1e9) for n, _ in comps
    )
    # a single rank with no communication: the replay is the sum of the compute chain
    got = replay_ns(out, "dgx-h100") / replay_ns(on_a100, "dgx-a100")
    assert got == pytest.approx(want, rel=1e-4)
    # between the pure compute ratio (bf16 312 -> 989 TFLOP/s) and the bandwidth ratio (2.039 -> 3.35 TB/s)
    assert 312 / 989 < got < 2.039 / 3.35
