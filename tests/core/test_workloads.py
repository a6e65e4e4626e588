"""tracekit.workloads: the model knowledge generators and rewrites share, checked against closed forms.

Sources: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC21): section 5.1 (GPT parameters ``12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h))``, iteration FLOPs
``72 B s l h^2 (1 + s/(6h) + V/(12 l h))``, 96 with recompute), Table 1 (model sizes), section 3.3 (rank order);
Megatron-LM's ``parallel_state.initialize_model_parallel`` docstring (16 GPUs, tp 2, pp 4 group example) and
``_vocab_size_with_padding`` (multiple of 128 x tp); Touvron et al. 2023, "Llama 2" (7B: 6,738,415,616 parameters
in the released checkpoint, 32 layers, h 4096, FFN 11008, V 32000, untied output).
"""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction

import pytest

from tracekit.errors import ConfigError
from tracekit.workloads.buckets import bucket_limit_elems, pack_buckets
from tracekit.workloads.config import LLMConfig, ModelSpec, ParallelSpec, preset
from tracekit.workloads.flops import gemm_elements, gemm_flops, gpt_iteration_flops
from tracekit.workloads.grid import GROUP_KINDS, Grid
from tracekit.workloads.params import (
    embedding_params,
    head_params,
    layer_params,
    model_params,
    padded_vocab_size,
    unit_params,
)
from tracekit.workloads.units import DTYPE_BYTES, TRAINING_DTYPES, dtype_bytes, torch_dtype, torch_dtype_bytes


# ----- dtypes -------------------------------------------------------------------------------------------------
def test_dtype_sizes():
    assert [dtype_bytes(d) for d in TRAINING_DTYPES] == [4, 4, 2, 2, 1]
    assert DTYPE_BYTES["fp64"] == DTYPE_BYTES["int64"] == DTYPE_BYTES["complex64"] == 8
    # PyTorch's names as ET tensor types and c10::ScalarType names record them
    assert torch_dtype("c10::BFloat16") == "bf16" and torch_dtype_bytes("c10::BFloat16") == 2
    assert torch_dtype_bytes("long int") == 8 and torch_dtype_bytes("Float") == 4
    assert torch_dtype_bytes("c10::complex<double>") == 16 and torch_dtype_bytes("Byte") == 1
    assert torch_dtype_bytes("quaternion") is None


# ----- parameter counts ---------------------------------------------------------------------------------------
def _gpt(layers: int, hidden: int, heads: int) -> ModelSpec:
    return ModelSpec("gpt", num_layers=layers, hidden_size=hidden, num_heads=heads, seq_length=2048, vocab_size=51200)


def test_gpt3_175b_parameter_count():
    model, _ = preset("gpt3-175b")
    l, h, V, s = 96, 12288, 51200, 2048
    narayanan = 12 * l * h * h + 13 * l * h + (V + s) * h  # the paper's formula leaves out the final norm
    assert model_params(model) == narayanan + 2 * h == 174_615_846_912
    assert round(model_params(model) / 1e8) == 1746  # "174.6e9"


@pytest.mark.parametrize(
    "layers,hidden,heads,billions",
    [(24, 2304, 24, 1.7), (40, 6144, 48, 18.4), (80, 12288, 96, 145.6), (128, 25600, 160, 1008.0)],
)
def test_megatron_table1_model_sizes(layers, hidden, heads, billions):
    # Narayanan et al. 2021, Table 1, "number of parameters (billion)", one decimal
    assert round(model_params(_gpt(layers, hidden, heads)) / 1e9, 1) == billions


def test_llama2_7b_parameter_count():
    model, _ = preset("llama2-7b")
    h, ffn, L, V = 4096, 11008, 32, 32000
    layer = 4 * h * h + 3 * h * ffn + 2 * h  # q, k, v, o; gate, up, down (SwiGLU); two RMSNorm weights
    assert layer_params(model, 1).dense == layer
    assert model_params(model) == L * layer + 2 * V * h + h == 6_738_415_616


def test_per_rank_gpt_layer_follows_megatron_split():
    # column-parallel QKV / fc1 weights and biases split, row-parallel biases and LayerNorms replicated:
    # (12 h^2 + 7 h) / tp + 6 h, of which 4 h in norms
    model, h = _gpt(4, 1024, 16), 1024
    for tp in (1, 2, 8):
        p = layer_params(model, tp)
        assert p.dense == (12 * h * h + 7 * h) // tp + 6 * h and p.norm == 4 * h and p.expert == 0
    assert unit_params(model, 2, 2, 4) == layer_params(model, 2)


def test_embedding_and_head_per_rank():
    model, h = _gpt(4, 1024, 16), 1024
    assert embedding_params(model, 4) == 51200 // 4 * h + 2048 * h
    assert unit_params(model, -1, 4, 2).dense == embedding_params(model, 4)
    assert head_params(model, 4, 1).dense == 2 * h  # tied: the embedding is the output layer
    assert head_params(model, 4, 2).dense == 2 * h + 51200 // 4 * h  # tied over stages: a copy on the last


def test_moe_layer_splits_experts_over_ep():
    model = ModelSpec(
        "moe",
        num_layers=2,
        hidden_size=64,
        num_heads=4,
        seq_length=32,
        vocab_size=256,
        ffn_hidden_size=128,
        activation="swiglu",
        bias=False,
        norm="rmsnorm",
        num_experts=8,
    )
    expert_ffn = 64 * 256 + 128 * 64  # fc1 (gate and up) and fc2 of one expert
    p = layer_params(model, 1, ep=4)
    assert p.expert == 2 * expert_ffn
    assert p.dense == 4 * 64 * 64 + 2 * 64 + 64 * 8  # attention, two RMSNorms, router


def test_padded_vocab_follows_megatron():
    assert padded_vocab_size(50257, 1) == 50304  # GPT-2's vocabulary, padded to a multiple of 128
    assert padded_vocab_size(50257, 8) == 51200
    assert padded_vocab_size(32000, 8) == 32768 and padded_vocab_size(51200, 8) == 51200


# ----- rank grid ----------------------------------------------------------------------------------------------
def test_megatron_parallel_state_example():
    # 16 GPUs, tp 2, pp 4 -> dp 2: tensor groups [g0, g1] ..., pipeline groups [g0, g4, g8, g12] ...,
    # data-parallel groups [g0, g2], [g1, g3], [g4, g6] ...
    g = Grid(tp=2, dp=2, pp=4)
    assert g.world_size == 16 and all(g.rank(g.coords(r)) == r for r in range(16))
    assert g.members("tp", g.coords(5)) == [4, 5]
    assert g.members("pp", g.coords(0)) == [0, 4, 8, 12] and g.members("pp", g.coords(13)) == [1, 5, 9, 13]
    assert g.members("dp", g.coords(4)) == [4, 6] and g.members("grad", g.coords(1)) == [1, 3]
    assert g.members("emb", g.coords(4)) == [0, 12]
    assert g.pipeline_peers(g.coords(0)) == (12, 4)


def test_grid_context_and_expert_groups():
    g = Grid(tp=2, cp=2, dp=4)
    assert g.coords(13) == (1, 0, 3, 0) and g.members("cp", (1, 0, 3, 0)) == [13, 15]
    assert g.members("grad", (0, 0, 0, 0)) == [0, 2, 4, 6, 8, 10, 12, 14]  # dp x cp
    assert g.members("ep", g.coords(12), ep=2) == [8, 12] and g.members("edp", g.coords(12), ep=2) == [4, 12]
    with pytest.raises(ValueError, match="unknown group kind 'xp'"):
        g.members("xp", (0, 0, 0, 0))
    assert len(GROUP_KINDS) == 8


def test_grid_resize_refuses_too_many_ranks():
    with pytest.raises(ConfigError, match="ranks"):
        Grid(dp=2).with_(dp=1 << 21)


# ----- buckets ------------------------------------------------------------------------------------------------
def test_buckets_close_before_overflow():
    sizes = {10: 3, 11: 3, 12: 5, 13: 0, 14: 9}
    assert pack_buckets([10, 11, 12, 13, 14], sizes.__getitem__, 6) == [([10, 11], 6), ([12], 5), ([14], 9)]
    assert bucket_limit_elems(40_000_000 * 4, 2) == 80_000_000 and bucket_limit_elems(1, 4) == 1


# ----- FLOPs --------------------------------------------------------------------------------------------------
def test_gemm_counts():
    assert gemm_flops(2, 3, 4) == 48 and gemm_flops(2, 3, 4, batch=5) == 240
    assert gemm_elements(2, 3, 4) == 6 + 12 + 8


def test_gpt_iteration_flops():
    B, s, L, h, V = 1536, 2048, 96, 12288, 51200
    exact = Fraction(72 * B * s * L * h * h) * (1 + Fraction(s, 6 * h) + Fraction(V, 12 * L * h))
    assert gpt_iteration_flops(B, s, L, h, V) == pytest.approx(float(exact), rel=1e-12)
    recompute = Fraction(96 * B * s * L * h * h) * (1 + Fraction(s, 6 * h) + Fraction(V, 16 * L * h))
    assert gpt_iteration_flops(B, s, L, h, V, full_recompute=True) == pytest.approx(float(recompute), rel=1e-12)


# ----- configuration from trace metadata ----------------------------------------------------------------------
def test_config_round_trips_through_metadata_json():
    model, _ = preset("llama3-8b")
    c = LLMConfig(model, ParallelSpec(tp=2, pp=2, dp=2, sequence_parallel=True), global_batch_size=8)
    assert LLMConfig.from_dict(json.loads(json.dumps(dataclasses.asdict(c)))) == c
    with pytest.raises(ConfigError, match="tp=3 does not divide the 32 attention heads"):
        LLMConfig.from_dict({**dataclasses.asdict(c), "parallel": {"tp": 3}})
    with pytest.raises(ConfigError, match="ModelSpec"):
        LLMConfig.from_dict({"model": {"name": "x"}})
