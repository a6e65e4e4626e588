"""Communication volumes of generated transformer traces against hand-computed values.

Model: tiny GPT (h=64, s=32, L=8, V=1024 padded to 1024, a=8, bf16 = 2 bytes),
see tests/converters/_llm_helpers.py.  Sources of the rules:
Shoeybi et al. 2019 / Narayanan et al. 2021 (tensor-parallel all-reduces: 2
in the forward and 2 in the backward of each layer, ``b s h`` elements each);
Korthikanti et al. 2022 section 4.2.2 (sequence parallelism: all-gather +
reduce-scatter instead); Rajbhandari et al. 2020 (ZeRO); ASTRA-sim's
``comm_size`` convention (all-gather: per-rank input; reduce-scatter,
all-reduce, all-to-all: full buffer).
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.converters._llm_helpers import comm_sizes, gpt_config, nodes_by
from tracekit.converters.generators import LLMConfig, ModelSpec, ParallelSpec, Roofline, generate_llm
from tracekit.model import NodeType
from tracekit.checks.validate import validate_traceset

H, S, L, V = 64, 32, 8, 1024
BF16 = 2
# Parameters of one GPT layer on one of tp ranks: (12 h^2 + 7 h) / tp + 6 h (row-parallel biases and
# LayerNorms replicated).  For tp = 2: (49152 + 448) / 2 + 384 = 25,184.
LAYER_PARAMS_TP2 = 25_184


def dp_grad_bytes(trace, role="dp_grad_allreduce") -> int:
    return sum(n.comm_bytes for n in trace.nodes if n.get_attr("op_role") == role)


def test_tp_allreduce_per_layer_per_micro_batch():
    c = gpt_config(1, 2, 1, B=4, b=2)  # 2 micro-batches of b=2
    sizes = comm_sizes(generate_llm(c)[0], "tp_allreduce")
    bsh = 2 * S * H * BF16  # b s h x 2 bytes = 8,192
    assert bsh == 8192
    for layer in range(L):
        for mb in range(2):
            assert sizes[(layer, mb, "fwd")] == [bsh, bsh]
            assert sizes[(layer, mb, "bwd")] == [bsh, bsh]
    assert sum(len(v) for k, v in sizes.items() if k[0] >= 0 and k[0] < L) == 4 * L * 2


def test_full_recompute_repeats_the_forward_allreduces():
    c = gpt_config(1, 2, 1, B=2, b=2, recompute="full")
    sizes = comm_sizes(generate_llm(c)[0], "tp_allreduce")
    assert [len(sizes[(3, 0, phase)]) for phase in ("fwd", "recompute", "bwd")] == [2, 2, 2]


def test_sequence_parallel_uses_allgather_and_reducescatter():
    c = gpt_config(1, 2, 1, B=2, b=2, sequence_parallel=True)
    trace = generate_llm(c)[0]
    ag, rs = comm_sizes(trace, "tp_allgather"), comm_sizes(trace, "tp_reducescatter")
    assert comm_sizes(trace, "tp_allreduce") == {}
    full, shard = 2 * S * H * BF16, 2 * S * H * BF16 // 2  # 8,192 and 4,096 bytes
    assert ag[(4, 0, "fwd")] == [shard, shard] and rs[(4, 0, "fwd")] == [full, full]
    # backward: 2 conjugate all-gathers + 2 input re-gathers for the weight gradients; 2 reduce-scatters
    assert ag[(4, 0, "bwd")] == [shard] * 4 and rs[(4, 0, "bwd")] == [full, full]


def test_dp_gradient_bytes_per_stage():
    c = gpt_config(2, 2, 4, B=8)  # 2 layers per stage
    ts = generate_llm(c)
    first, middle, last = ts[0], ts[1 * 4], ts[3 * 4]  # tp*dp = 4 ranks per stage
    # middle stage: 2 layers x 25,184 params x 2 bytes = params / (tp pp) for uniform stages
    assert dp_grad_bytes(middle) == 2 * LAYER_PARAMS_TP2 * BF16 == 100_736
    # first stage adds the word embedding shard (V/tp x h) and learned positions (s x h)
    assert dp_grad_bytes(first) == (2 * LAYER_PARAMS_TP2 + 512 * H + S * H) * BF16 == 170_368
    # last stage adds the final LayerNorm (2h) and its copy of the tied output embedding (V/tp x h)
    assert dp_grad_bytes(last) == (2 * LAYER_PARAMS_TP2 + 2 * H + 512 * H) * BF16 == 166_528
    # tied embeddings: first and last stage all-reduce the word-embedding gradient (Megatron-LM)
    emb = [n.comm_bytes for n in first.nodes if n.get_attr("op_role") == "embedding_grad_allreduce"]
    assert emb == [512 * H * BF16] and not nodes_by(middle, op_role="embedding_grad_allreduce")


def test_dp_gradient_bytes_of_one_replica_are_the_model_parameters():
    # tp = 1: summed over the pp stages of one replica the gradients are Narayanan et al.'s
    # P = 12 L h^2 + 13 L h + (V + s) h, plus the final LayerNorm (2h) and the last stage's copy
    # of the tied embedding (V h).
    c = gpt_config(2, 1, 4, B=8)
    ts = generate_llm(c)
    replica = [ts[stage * 2] for stage in range(4)]
    params = 12 * L * H * H + 13 * L * H + (V + S) * H
    assert sum(dp_grad_bytes(t) for t in replica) == (params + 2 * H + V * H) * BF16


def test_gradient_buckets_split_by_size_and_wait_for_their_layers():
    c = gpt_config(2, 2, 1, B=4, grad_bucket_bytes=2 * LAYER_PARAMS_TP2 * BF16)
    trace = generate_llm(c)[0]
    buckets = nodes_by(trace, op_role="dp_grad_allreduce")
    # 8 layers + head + embedding; two layers fill a bucket
    assert [list(n.get_attr("layers")) for n in buckets][:3] == [[8, 7], [6, 5], [4, 3]]
    by_id = {n.id: n for n in trace.nodes}
    for bucket in buckets:
        assert {by_id[d].get_attr("layer") for d in bucket.data_deps} <= set(bucket.get_attr("layers"))


def test_pp_activation_bytes_and_matching_tags():
    c = gpt_config(1, 2, 4, B=8, b=2)  # 4 micro-batches
    ts = generate_llm(c)
    stage1 = ts[2]
    bsh = 2 * S * H * BF16
    counts = Counter(
        (n.get_attr("op_role"), n.comm_bytes)
        for n in stage1.nodes
        if n.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)
    )
    assert counts == {
        ("pp_recv_activation", bsh): 4,
        ("pp_send_activation", bsh): 4,
        ("pp_recv_grad", bsh): 4,
        ("pp_send_grad", bsh): 4,
    }
    sends = Counter(
        (n.comm_src, n.comm_dst, n.comm_tag, n.comm_bytes)
        for t in ts
        for n in t.nodes
        if n.type == NodeType.COMM_SEND_NODE
    )
    recvs = Counter(
        (n.comm_src, n.comm_dst, n.comm_tag, n.comm_bytes)
        for t in ts
        for n in t.nodes
        if n.type == NodeType.COMM_RECV_NODE
    )
    assert sends == recvs and len(sends) == 2 * 3 * 4 * 2  # tp ranks x stage links x micro-batches x directions


def test_pp_activation_bytes_with_sequence_parallelism():
    c = gpt_config(1, 2, 2, B=2, b=2, sequence_parallel=True)
    sizes = {n.comm_bytes for n in generate_llm(c)[0].nodes if n.type == NodeType.COMM_SEND_NODE}
    assert sizes == {2 * S * H * BF16 // 2}


def test_zero3_gathers_each_layer_twice_per_micro_batch():
    c = gpt_config(2, 2, 4, B=8, b=2, zero_stage=3)  # m = 8 / (2 x 2) = 2 micro-batches, 2 layers per stage
    middle = generate_llm(c)[4]
    gathers = comm_sizes(middle, "zero3_param_allgather")
    shard = LAYER_PARAMS_TP2 // 2 * BF16  # per-rank shard of one layer, 25,184 bytes
    assert {k: v for k, v in gathers.items()} == {
        (layer, mb, phase): [shard] for layer in (2, 3) for mb in (0, 1) for phase in ("fwd", "bwd")
    }
    # all-gather volume per rank per iteration: 2 layers x 2 micro-batches x (fwd + bwd) x shard
    assert sum(sum(v) for v in gathers.values()) == 201_472
    scatters = comm_sizes(middle, "zero3_grad_reducescatter")
    assert sum(sum(v) for v in scatters.values()) == 4 * LAYER_PARAMS_TP2 * BF16
    assert not nodes_by(middle, op_role="dp_grad_allreduce")


def test_zero1_reduce_scatters_gradients_and_gathers_parameters():
    c = gpt_config(2, 2, 4, B=8, zero_stage=1)
    middle = generate_llm(c)[4]
    assert dp_grad_bytes(middle, "dp_grad_reducescatter") == 2 * LAYER_PARAMS_TP2 * BF16
    assert dp_grad_bytes(middle, "dp_param_allgather") == 2 * LAYER_PARAMS_TP2 // 2 * BF16
    assert not nodes_by(middle, op_role="dp_grad_allreduce")


def test_expert_parallel_alltoall_and_expert_gradients():
    model = ModelSpec(
        "tiny-moe", num_layers=4, hidden_size=H, num_heads=8, seq_length=S, vocab_size=V, num_experts=4, moe_top_k=2
    )
    c = LLMConfig(model, ParallelSpec(dp=4, ep=2), global_batch_size=4, micro_batch_size=1)
    ts = generate_llm(c)
    trace = ts[0]
    slots = S * 2 * H * BF16  # t x top-k x h x 2 bytes = 8,192
    for role in ("ep_dispatch_alltoall", "ep_combine_alltoall"):
        sizes = comm_sizes(trace, role)
        assert sizes[(2, 0, "fwd")] == [slots] and sizes[(2, 0, "bwd")] == [slots]
    # each rank holds E/ep = 2 experts of h x 4h + 4h x h weights and 4h + h biases: 66,176 per layer
    assert dp_grad_bytes(trace, "expert_dp_grad_allreduce") == 4 * 2 * (2 * 64 * 256 + 256 + 64) * BF16
    assert validate_traceset(ts).ok


def test_cross_entropy_allreduces_on_the_last_stage():
    c = gpt_config(1, 2, 2, B=2, b=1)
    last = generate_llm(c)[2]
    ce = comm_sizes(last, "ce_tp_allreduce")
    assert ce[(L, 0, "fwd")] == [S * 4] * 3  # three fp32 values per token (Megatron-LM vocab-parallel CE)


def test_roofline_duration():
    c = gpt_config(1, 1, 1, B=1)
    trace = generate_llm(c, Roofline(1e12, 1e11))[0]
    qkv = nodes_by(trace, op_role="qkv_gemm", phase="fwd", layer=0)[0]
    # 2 x 32 x 64 x 192 = 786,432 FLOPs at 1e12/s = 786.4 ns; (32x64 + 64x192 + 32x192) x 2 = 40,960 B
    # at 1e11 B/s = 409.6 ns -> compute-bound, ceil -> 787 ns
    assert (qkv.num_ops, qkv.tensor_bytes, qkv.duration_ns) == (786_432, 40_960, 787)
    norm = nodes_by(trace, op_role="input_norm", phase="fwd", layer=0)[0]
    assert norm.duration_ns == 82  # 2 x 32 x 64 x 2 B = 8,192 B at 1e11 B/s -> memory-bound


@pytest.mark.parametrize(
    "parallel",
    [
        dict(dp=2, tp=2, pp=2),
        dict(dp=2, tp=2, pp=2, sequence_parallel=True, zero_stage=2, schedule="gpipe"),
        dict(dp=2, tp=1, pp=4, schedule="interleaved", virtual_stages=2, zero_stage=3, recompute="full"),
    ],
)
def test_generated_jobs_validate(parallel):
    c = LLMConfig(gpt_config().model, ParallelSpec(**parallel), global_batch_size=16, micro_batch_size=2)
    report = validate_traceset(generate_llm(c))
    assert report.ok, [str(i) for i in report.issues[:5]]
