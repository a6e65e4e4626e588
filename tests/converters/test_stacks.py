"""Training stacks (issue 28): the knobs, fused attention, ring context parallelism, userbuffers overlap, FP8 as
Transformer Engine runs it, overlapped parameter gathers, uneven pipelines and the CLI options.

Closed forms are written out per test; sources are in tracekit/workloads/stacks.py and
converters/generators/llm_attention.py.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from tests.converters._llm_helpers import TINY_GPT, column_sums, gpt_config, nodes_by
from tracekit.converters.generators import MATMUL_ROLES, generate_llm
from tracekit.converters.generators import calibration as cal
from tracekit.converters.generators.llm import build_rank_trace
from tracekit.errors import ConfigError
from tracekit.workloads.config import LLMConfig, ModelSpec, ParallelSpec
from tracekit.workloads.pipeline_split import chunk_layers
from tracekit.workloads.stacks import STACKS, StackSpec, apply_stack, knob_names, stack


def _nemo(config: LLMConfig, **knobs) -> LLMConfig:
    return apply_stack(config, "nemo", **knobs)


# ----------------------------------------------------------------------------- the stacks and their knobs
def test_every_stack_sources_every_knob_and_megatron_2021_is_the_default():
    for name, preset in STACKS.items():
        assert preset.spec.name == name
        assert {k for k, _ in preset.sources} == set(knob_names()) - {"fp8_recipe"}, name
        assert all(len(src) > 20 for _, src in preset.sources)
    assert StackSpec() == STACKS["megatron-2021"].spec
    assert LLMConfig(TINY_GPT).stack == StackSpec()


def test_a_knob_is_settable_alone_and_bad_ones_are_one_line_errors():
    spec, grad = stack("nemo", tp_comm_overlap=False, overlap_grad_reduce=False)
    assert (spec.tp_comm_overlap, spec.fused_attention, grad) == (False, True, False)
    spec, grad = stack("megatron-2021", fused_attention=True)
    assert spec.fused_attention and not grad and spec.cp_comm == "allgather"
    for call, message in (
        (lambda: stack("megatron-9"), "unknown stack 'megatron-9'"),
        (lambda: stack("nemo", fused=True), "unknown stack knob"),
        (
            lambda: replace(gpt_config(cp=2), stack=stack("nemo", fused_attention=False)[0]),
            "cp=2: ring context parallelism needs fused attention",
        ),
        (lambda: stack("nemo", cp_comm="tree"), "context-parallel communication must be one of ring, allgather"),
    ):
        with pytest.raises(ConfigError, match=message):
            call()


def test_the_stack_round_trips_through_llm_config_metadata():
    c = _nemo(gpt_config(2, 2, 1, sequence_parallel=True))
    back = LLMConfig.from_dict(json.loads(generate_llm(c)[0].metadata.get_attr("llm_config")))
    assert back == c and back.stack.name == "nemo"


# ----------------------------------------------------------------------------- fused attention
def test_fused_attention_is_one_node_per_pass_with_the_same_model_flops():
    c = gpt_config(1, 2, 1)
    fused = _nemo(c)
    trace = generate_llm(fused)[0]
    per_pass = nodes_by(trace, op_role="flash_attention", layer=0, micro_batch=0)
    assert [n.get_attr("phase") for n in per_pass] == ["fwd", "bwd"]
    assert not nodes_by(trace, op_role="softmax") and not nodes_by(trace, op_role="attn_score")
    # model FLOPs (full s x s scores) are the stack's invariant: the matmul total equals the unfused one
    assert column_sums(generate_llm(fused), "op_role", MATMUL_ROLES, "num_ops") == column_sums(
        generate_llm(c), "op_role", MATMUL_ROLES, "num_ops"
    )
    # forward: 4 b a s^2 d / tp = 4 x 1 x 4 x 32^2 x 8 = 131,072 FLOPs per rank
    assert per_pass[0].num_ops == 4 * (8 // 2) * 32 * 32 * 8


def test_fused_attention_duration_is_the_causal_flops_at_the_attention_efficiency():
    from tracekit.costs.devices import attention_efficiency
    from tracekit.replayer.simulation.specs import load_spec

    model = ModelSpec("a", num_layers=2, hidden_size=4096, num_heads=32, seq_length=8192, vocab_size=1024)
    c = _nemo(LLMConfig(model, ParallelSpec(), global_batch_size=1))
    cost = cal.cost_for(load_spec("dgx-h100"), c)
    node = nodes_by(build_rank_trace(c, 0, cost), op_role="flash_attention", layer=0, phase="fwd")[0]
    flops = 4 * 32 * 8192 * 8192 * 128
    eff = attention_efficiency(32, 8192, cost.device) * 0.79  # 0.75 x wave quantization x sustained fraction
    assert node.num_ops == flops
    assert node.duration_ns == math.ceil(flops / 2 / (989.4e12 * eff) * 1e9 + 2000)  # causal: half executed
    bwd = nodes_by(build_rank_trace(c, 0, cost), op_role="flash_attention", layer=0, phase="bwd")[0]
    assert bwd.duration_ns == math.ceil(flops / 2 * 2.5 / (989.4e12 * eff) * 1e9 + 2000)  # 5 products vs 2


# ----------------------------------------------------------------------------- ring context parallelism
def test_ring_cp_sends_kv_to_the_next_rank_and_receives_from_the_previous_per_step():
    from tracekit.converters.generators.llm_attention import CP_RING_TAG
    from tracekit.model import NodeType

    c = gpt_config(1, 1, 1, cp=4, B=2)
    ring = generate_llm(_nemo(c))[1]  # cp rank 1 of 4: next rank 2, previous rank 0
    kv = (32 // 4) * 2 * 8 * 8 * 2  # t = s / cp = 8 tokens, K and V of 8 heads x 8, bf16: 2,048 bytes
    fwd = nodes_by(ring, op_role="cp_kv_ring", layer=0, micro_batch=0)
    sends = [n for n in fwd if n.type == NodeType.COMM_SEND_NODE]
    recvs = [n for n in fwd if n.type == NodeType.COMM_RECV_NODE]
    assert len(sends) == len(recvs) == 3 and {n.comm_bytes for n in fwd} == {kv}  # cp - 1 exchanges of K/V
    assert {(n.get_attr("comm_src"), n.get_attr("comm_dst")) for n in sends} == {(1, 2)}
    assert {(n.get_attr("comm_src"), n.get_attr("comm_dst")) for n in recvs} == {(0, 1)}
    assert {n.get_attr("comm_tag") for n in sends} == {CP_RING_TAG + 3 * 1}  # the sender's cp rank in the tag
    assert {n.get_attr("comm_tag") for n in recvs} == {CP_RING_TAG + 3 * 0}
    steps = nodes_by(ring, op_role="flash_attention", layer=0, micro_batch=0, phase="fwd")
    assert len(steps) == 4
    for i in range(1, 4):  # step i computes on the chunk receive i-1 brought ...
        assert recvs[i - 1].id in steps[i].data_deps
    for i in range(1, 3):  # ... while the chunk in hand goes on and the next one comes: posted with it, not after
        assert list(sends[i].data_deps) == list(recvs[i].data_deps) == [recvs[i - 1].id]
        assert steps[i].id not in sends[i].data_deps
    bwd = nodes_by(ring, op_role="cp_dkv_ring", layer=0, micro_batch=0)
    assert sorted(n.comm_bytes for n in bwd) == [2 * kv] * 6  # K/V with dK/dV: 3 sends, 3 receives
    home = nodes_by(ring, op_role="cp_dkv_home", layer=0, micro_batch=0)
    assert [(n.type, n.comm_bytes) for n in home] == [(NodeType.COMM_SEND_NODE, kv), (NodeType.COMM_RECV_NODE, kv)]
    last_bwd = nodes_by(ring, op_role="flash_attention", layer=0, micro_batch=0, phase="bwd")[-1]
    assert list(home[0].data_deps) == [last_bwd.id]
    assert any(home[1].id in n.data_deps for n in ring.nodes)  # the backward waits for its dK/dV to come home
    gathered = generate_llm(_nemo(c, cp_comm="allgather"))[0]
    assert [n.comm_bytes for n in nodes_by(gathered, op_role="cp_kv_allgather", layer=0, micro_batch=0)] == [kv]
    assert len(nodes_by(gathered, op_role="flash_attention", layer=0, micro_batch=0, phase="fwd")) == 1


def test_a_ring_cp_job_replays_folded_with_one_class_per_stage_and_cp_rank(tmp_path):
    from tracekit.converters.generators.llm import iter_rank_classes
    from tracekit.replayer import ReplayOptions, replay

    c = _nemo(gpt_config(2, 2, 2, cp=2, B=4, sequence_parallel=True))
    classes = list(iter_rank_classes(c))
    assert [[r for r, _ in members] for _, _, members in classes] == [
        [0, 1, 4, 5],
        [2, 3, 6, 7],
        [8, 9, 12, 13],
        [10, 11, 14, 15],
    ]
    ts = generate_llm(c, (100e12, 1e12))
    folded = replay(ts, "dgx-h100")
    assert folded.folding is not None and folded.folding.reason is None and folded.folding.classes == 4
    unfolded = replay(ts, "dgx-h100", options=ReplayOptions(fold=False))
    assert folded.iteration_time_ns == unfolded.iteration_time_ns > 0


# ----------------------------------------------------------------------------- userbuffers tp overlap
def test_tp_comm_overlap_runs_the_sp_collectives_with_their_gemms():
    c = gpt_config(1, 2, 1, sequence_parallel=True)
    on = generate_llm(_nemo(c))[0]
    off = generate_llm(_nemo(c, tp_comm_overlap=False))[0]

    def first(trace, role, phase="fwd"):
        return nodes_by(trace, op_role=role, layer=0, micro_batch=0, phase=phase)[0]

    for trace, overlapped in ((on, True), (off, False)):
        gather, qkv = first(trace, "tp_allgather"), first(trace, "qkv_gemm")
        assert (gather.id in qkv.data_deps) is not overlapped
        proj, rs = first(trace, "proj_gemm"), first(trace, "tp_reducescatter")
        assert (proj.id in rs.data_deps) is not overlapped
        residual = first(trace, "attn_residual_norm")
        assert rs.id in residual.data_deps  # the next op waits for the reduce-scatter either way


# ----------------------------------------------------------------------------- FP8 as Transformer Engine
def test_fp8_keeps_bf16_bytes_and_adds_cast_transpose_kernels():
    c = replace(gpt_config(1, 1, 1), dtype="fp8")
    te, legacy = _nemo(c), _nemo(c, fp8_recipe="all")
    assert (te.dtype_bytes, te.grad_bytes, legacy.dtype_bytes) == (2, 2, 1)
    trace = generate_llm(te)[0]
    casts = nodes_by(trace, op_role="fp8_cast_transpose", layer=0, micro_batch=0)
    # forward: the projection's input; backward: the output gradient of proj, qkv, fc1, fc2 (not the logits)
    assert sorted(n.get_attr("phase") for n in casts) == ["bwd"] * 4 + ["fwd"]
    assert not nodes_by(trace, op_role="fp8_cast_transpose", layer=TINY_GPT.num_layers)
    # t h elements of the attention output, read 2 B and written as FP8 and its transpose (1 + 1 B)
    assert [n.tensor_bytes for n in casts if n.get_attr("phase") == "fwd"] == [32 * 64 * 4]
    assert not nodes_by(generate_llm(legacy)[0], op_role="fp8_cast_transpose")


# ----------------------------------------------------------------------------- overlapped parameter gathers
def test_overlapped_param_gathers_are_issued_first_and_block_nothing():
    c = gpt_config(2, 1, 1, zero_stage=1)
    for overlap in (True, False):
        trace = generate_llm(apply_stack(c, "nemo", overlap_param_gather=overlap))[0]
        gathers = nodes_by(trace, op_role="dp_param_allgather")
        assert gathers and sum(g.comm_bytes for g in gathers) > 0
        first_ids = {n.id for n in trace.nodes[: len(gathers) + 1]}
        assert all(g.id in first_ids for g in gathers) is overlap
        assert all(not g.data_deps for g in gathers) is overlap
        users = {d for n in trace.nodes for d in n.data_deps}
        assert not users & {g.id for g in gathers}


# ----------------------------------------------------------------------------- uneven pipelines
def test_chunk_layers_rules():
    # Llama 3 405B: 126 layers on 16 stages, the first and last one layer fewer (embedding and head count as one)
    assert [len(r) for r in chunk_layers(126, 16)] == [7] + [8] * 14 + [7]
    assert [len(r) for r in chunk_layers(70, 12)] == [5] + [6] * 10 + [5]  # BLOOM-176B
    assert [len(r) for r in chunk_layers(10, 4)] == [2, 3, 3, 2]  # extra layers on the middle chunks
    assert [len(r) for r in chunk_layers(9, 2, 2)] == [2, 3, 2, 2]  # 9 + 2 = 11: neither rule; middle first
    assert [len(r) for r in chunk_layers(96, 8, 12)] == [1] * 96
    for layers, pp, v in ((126, 16, 1), (70, 12, 1), (13, 3, 2)):
        ranges = chunk_layers(layers, pp, v)
        assert [i for r in ranges for i in r] == list(range(layers))
    with pytest.raises(ConfigError, match="8 layers cannot fill pp=4 x virtual stages 3 = 12 chunks"):
        chunk_layers(8, 4, 3)


LLAMA3_405B = ModelSpec(
    "llama3-405b",
    num_layers=126,
    hidden_size=16384,
    num_heads=128,
    num_kv_heads=8,
    seq_length=8192,
    vocab_size=128256,
    ffn_hidden_size=53248,
    activation="swiglu",
    tied_embeddings=False,
    learned_position_embeddings=False,
    norm="rmsnorm",
    bias=False,
    source="Dubey et al. 2024, 'The Llama 3 Herd of Models', Table 3 (126 layers, 16,384 wide, 128 heads, 8 KV)",
)


def test_llama3_405b_generates_on_8192_gpus_at_tp8_pp16_with_its_126_layers():
    parallel = ParallelSpec(dp=64, tp=8, pp=16, sequence_parallel=True, zero_stage=1)
    c = _nemo(LLMConfig(LLAMA3_405B, parallel, global_batch_size=1024))
    assert c.world_size == 8192 and c.model.num_layers == 126 and c.num_micro_batches == 16
    from tracekit.converters.generators.llm_layout import layout
    from tracekit.converters.generators.llm_rank import Plan

    cache = (Plan.of(c), *layout(c))
    seen = {}
    for stage in (0, 1, 15):
        trace = build_rank_trace(c, stage * 512, _cache=cache)  # the stage's first rank (tp x dp = 512 per stage)
        seen[stage] = sorted({n.get_attr("layer") for n in trace.nodes if n.get_attr("phase") == "fwd"})
    assert seen[0] == [-1, *range(0, 7)]  # embedding + 7 layers
    assert seen[1] == list(range(7, 15))
    assert seen[15] == [*range(119, 126), 126]  # 7 layers + the output head
    assert [i for r in c.chunk_layers for i in r] == list(range(126))


def test_an_uneven_interleaved_pipeline_replays_with_its_bubble(tmp_path):
    from tracekit.replayer import replay

    model = replace(TINY_GPT, num_layers=10)
    even = LLMConfig(TINY_GPT, ParallelSpec(pp=4, schedule="interleaved", virtual_stages=2), global_batch_size=8)
    uneven = LLMConfig(model, ParallelSpec(pp=4, schedule="interleaved", virtual_stages=2), global_batch_size=8)
    assert [len(r) for r in uneven.chunk_layers] == [1, 2, 2, 1, 1, 1, 1, 1]
    times = {}
    for name, config in (("even", even), ("uneven", uneven)):
        result = replay(generate_llm(config, (100e12, 1e12)), "dgx-a100")
        times[name] = result.iteration_time_ns
    assert times["uneven"] > times["even"]  # two more layers on two chunks: the pipeline waits on them


# ----------------------------------------------------------------------------- the CLI
def test_cli_stack_and_knobs_reach_the_trace(tmp_path):
    from click.testing import CliRunner

    from tracekit.cli import cli

    args = ["generate", "llm", "--model", "gpt3-1.3b", "--layers", "2", "--tp", "2", "--sp", "--cp", "2"]
    args += ["--global-batch", "2", "--seq", "256", "-o", str(tmp_path / "a")]
    res = CliRunner().invoke(cli, [*args, "--stack", "nemo", "--stack-knob", "tp_comm_overlap=false"])
    assert res.exit_code == 0, res.output
    from tracekit.io import read_traceset

    cfg = json.loads(read_traceset(tmp_path / "a")[0].metadata.get_attr("llm_config"))
    assert cfg["stack"]["name"] == "nemo" and cfg["stack"]["tp_comm_overlap"] is False
    assert cfg["stack"]["cp_comm"] == "ring" and cfg["parallel"]["overlap_grad_reduce"] is True
    res = CliRunner().invoke(cli, [*args, "--stack-knob", "cp_comm=ring"])
    assert res.exit_code == 1 and "ring context parallelism needs fused attention" in res.output
    res = CliRunner().invoke(cli, [*args, "--stack-knob", "fused_attention=maybe"])
    assert res.exit_code == 1 and "fused_attention=maybe: expected true or false" in res.output
