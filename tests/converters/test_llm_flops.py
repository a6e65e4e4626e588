"""FLOPs of generated transformer traces against Megatron-LM's closed forms.

Source: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
on GPU Clusters Using Megatron-LM" (SC21), section 5.1 / appendix: one
iteration of a GPT model costs ``72 B s L h^2 (1 + s/(6h) + V/(12 L h))``
FLOPs without activation recompute and ``96 B s L h^2 (1 + s/(6h) +
V/(16 L h))`` with full recompute, counting GEMMs, the attention score and
value products and the logits.  Selective recompute (Korthikanti et al. 2022,
section 5) adds the attention core's forward, ``4 B s^2 h`` per layer.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from tests.converters._llm_helpers import TINY_GPT, column_sums, gpt_config
from tracekit.converters.generators import MATMUL_ROLES, generate_llm
from tracekit.workloads.config import LLMConfig, ParallelSpec, preset


def megatron_flops(B: int, s: int, L: int, h: int, V: int, *, full_recompute: bool = False) -> Fraction:
    """Narayanan et al. 2021 formula, evaluated exactly with fractions."""
    if full_recompute:
        return Fraction(96 * B * s * L * h * h) * (1 + Fraction(s, 6 * h) + Fraction(V, 16 * L * h))
    return Fraction(72 * B * s * L * h * h) * (1 + Fraction(s, 6 * h) + Fraction(V, 12 * L * h))


def matmul_flops(config: LLMConfig) -> int:
    return column_sums(generate_llm(config), "op_role", MATMUL_ROLES, "num_ops")


SPLITS = [(1, 1, 1), (2, 2, 2), (1, 4, 2), (4, 1, 4), (2, 8, 1), (1, 2, 8)]


@pytest.mark.parametrize("dp,tp,pp", SPLITS)
def test_matmul_flops_equal_megatron_formula(dp, tp, pp):
    c = gpt_config(dp, tp, pp, B=16)
    m = TINY_GPT
    expected = megatron_flops(16, m.seq_length, m.num_layers, m.hidden_size, c.padded_vocab_size)
    assert expected.denominator == 1
    assert matmul_flops(c) == expected
    # written out: 72 B s L h^2 + 12 B s^2 L h + 6 B s h V
    #   = 1,207,959,552 + 100,663,296 + 201,326,592 = 1,509,949,440 for B=16, s=32, L=8, h=64, V=1024
    assert expected == 1_509_949_440


@pytest.mark.parametrize("dp,tp,pp", SPLITS)
def test_full_recompute_matches_megatron_formula(dp, tp, pp):
    c = gpt_config(dp, tp, pp, B=16, recompute="full")
    m = TINY_GPT
    assert matmul_flops(c) == megatron_flops(
        16, m.seq_length, m.num_layers, m.hidden_size, c.padded_vocab_size, full_recompute=True
    )


def test_selective_recompute_adds_the_attention_core():
    c = gpt_config(2, 2, 2, B=16, recompute="selective")
    m = TINY_GPT
    base = megatron_flops(16, m.seq_length, m.num_layers, m.hidden_size, c.padded_vocab_size)
    assert matmul_flops(c) == base + 4 * 16 * m.seq_length**2 * m.hidden_size * m.num_layers


@pytest.mark.parametrize(
    "parallel",
    [
        dict(sequence_parallel=True, zero_stage=1),
        dict(schedule="interleaved", virtual_stages=2),
        dict(schedule="gpipe", zero_stage=3),
    ],
)
def test_flops_do_not_depend_on_schedule_sp_or_zero(parallel):
    c = gpt_config(2, 2, 2, B=16, **parallel)
    m = TINY_GPT
    assert matmul_flops(c) == megatron_flops(16, m.seq_length, m.num_layers, m.hidden_size, c.padded_vocab_size)


def test_micro_batch_size_does_not_change_the_total():
    c = gpt_config(2, 2, 2, B=16, b=4)
    assert c.num_micro_batches == 2
    m = TINY_GPT
    assert matmul_flops(c) == megatron_flops(16, m.seq_length, m.num_layers, m.hidden_size, c.padded_vocab_size)


def test_gpt3_175b_shape_on_128_ranks():
    # GPT-3 175B dimensions (Brown et al. 2020, Table 2.1), tp 8 x pp 16, a small global batch of 2.
    model, _ = preset("gpt3-175b")
    c = LLMConfig(model, ParallelSpec(dp=1, tp=8, pp=16), global_batch_size=2, micro_batch_size=1)
    expected = megatron_flops(2, 2048, 96, 12288, 51200)
    assert (
        matmul_flops(c)
        == expected
        == 2 * 2048 * 96 * 12288**2 * 72 + 12 * 2 * 2048**2 * 96 * 12288 + 6 * 2 * 2048 * 12288 * 51200
    )


def test_per_rank_gemm_flops_are_divided_by_tp():
    # One QKV GEMM of micro-batch b on a tp rank: 2 b s h (3h) / tp FLOPs (not MACs).
    c = gpt_config(1, 4, 1, B=2, b=2)
    trace = generate_llm(c)[1]
    qkv = [n for n in trace.nodes if n.get_attr("op_role") == "qkv_gemm" and n.get_attr("phase") == "fwd"]
    assert len(qkv) == 8  # 8 layers x 1 micro-batch
    assert {n.num_ops for n in qkv} == {2 * 2 * 32 * 64 * 192 // 4}
