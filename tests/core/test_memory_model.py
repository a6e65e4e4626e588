"""The memory model against its sources' closed forms, by hand.

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", Table 2 (activation
bytes per layer) and sections 4.3-4.4 (pipeline in-flight factor, embedding and output layer); Rajbhandari et
al. 2020, "ZeRO", Figure 1 (model-state bytes per stage, Psi = 7.5B on 64 GPUs).
"""

from __future__ import annotations

import pytest

from tracekit.errors import ConfigError
from tracekit.workloads.activations import layer_activations, peak_in_flight
from tracekit.workloads.config import LLMConfig, ParallelSpec, preset
from tracekit.workloads.memory import (
    ALLOCATOR_MARGIN,
    RUNTIME_RESERVED_BYTES,
    fit_memory,
    job_memory,
    memory_report,
    stage_memory,
    zero_model_states,
)
from tracekit.workloads.params import model_params

GPT3, _ = preset("gpt3-175b")
S, B, H, A, T = 2048, 1, 12288, 96, 8
SBH = S * B * H


def _gpt3(**parallel) -> LLMConfig:
    batch = parallel.pop("batch", 64)
    return LLMConfig(GPT3, ParallelSpec(**parallel), global_batch_size=batch)


@pytest.mark.parametrize(
    "recompute, sp, per_layer",
    [
        # Table 2, the paper's rows, for s 2048, b 1, h 12288, a 96, t 8 (5as/(ht) = 10)
        ("none", False, SBH * (10 + 24 / T + 5 * A * S / (H * T))),  # tensor parallel (baseline): 23 sbh
        ("none", True, SBH / T * (34 + 5 * A * S / H)),  # tensor + sequence parallel: 14.25 sbh
        ("selective", False, SBH * (10 + 24 / T)),  # tensor parallel + selective recompute: 13 sbh
        ("selective", True, SBH * 34 / T),  # tensor + sequence parallel + selective: 4.25 sbh
        ("full", False, SBH * 2),  # full activation recompute: 2 sbh
        ("full", True, SBH * 2 / T),  # ... the checkpointed input is sequence-sharded under sequence parallelism
    ],
)
def test_korthikanti_table2_for_a_gpt3_175b_layer_at_tp8(recompute, sp, per_layer):
    config = _gpt3(tp=T, pp=8, recompute=recompute, sequence_parallel=sp)
    assert layer_activations(config).stored_bytes(recompute) == per_layer
    assert per_layer in (23 * SBH, 14.25 * SBH, 13 * SBH, 4.25 * SBH, 2 * SBH, 0.25 * SBH)  # 578,813,952 B ...


def test_no_parallelism_is_34sbh_plus_5as2b():
    config = _gpt3(tp=1, pp=1, batch=1)
    assert layer_activations(config).full_bytes == 34 * SBH + 5 * A * S**2 * B


def test_first_stage_holds_sbhl_times_the_interleaving_factor():
    # section 4.3: 1F1B keeps p micro-batches of L/p layers on the first stage (L layers' worth), interleaving
    # multiplies by 1 + (p - 1)/(p m); the 175B layout of Table 5 (pp 8, 3 virtual stages, 64 micro-batches)
    plain = peak_in_flight(_gpt3(tp=8, pp=8, recompute="selective", sequence_parallel=True), 0)
    assert plain.micro_batches_in_flight == 8
    inter = _gpt3(tp=8, pp=8, schedule="interleaved", virtual_stages=3, recompute="selective", sequence_parallel=True)
    first = peak_in_flight(inter, 0)
    assert first.micro_batches_in_flight == pytest.approx(8 * (1 + 7 / (8 * 3)))  # 31 chunks of 4 layers
    layer = 34 * SBH // T
    # section 4.4: the embedding keeps a dropout mask sbh/t per chunk-0 pass in flight; at the peak (31 chunk
    # passes after forward 31 and backward 0) these are forwards 0-7 and 24-31 of the order: 16 of them
    embedding_mask = SBH // T
    assert first.stored_bytes == 31 * 4 * layer + 16 * embedding_mask
    # every later stage holds fewer: min(p - stage, m) under 1F1B
    for stage in range(8):
        assert peak_in_flight(_gpt3(tp=8, pp=8), stage).micro_batches_in_flight == 8 - stage


def test_embedding_and_output_layer_at_pp1_follow_section_4_4():
    # p = 1: the paper's total sbhL/t (34 + 5as/h) + sbh/t (embedding dropout mask) + 4sbh/t (1 + v/h)
    config = _gpt3(tp=T, pp=1, sequence_parallel=True, batch=1)
    total = peak_in_flight(config, 0).stored_bytes
    v = 51200
    expected = SBH * 96 / T * (34 + 5 * A * S / H) + SBH / T + 4 * SBH / T * (1 + v / H)
    assert total == expected


def test_zero_paper_figure1_model_states():
    # Psi = 7.5B, N_d = 64, K = 12: baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.9 GB
    psi = 7_500_000_000
    got = [zero_model_states(psi, 64, stage).total_bytes / 1e9 for stage in range(4)]
    assert got == pytest.approx([120.0, 31.4, 16.6, 1.9], abs=0.05)
    assert got[0] == (2 + 2 + 12) * psi / 1e9
    assert got[1] == pytest.approx((2 * psi + 2 * psi + 12 * psi / 64) / 1e9)
    assert got[2] == pytest.approx((2 * psi + 14 * psi / 64) / 1e9)
    assert got[3] == pytest.approx(16 * psi / 64 / 1e9)
    with pytest.raises(ConfigError):
        zero_model_states(psi, 64, 4)


def test_megatron_distributed_optimizer_bytes_per_parameter():
    # Megatron-LM docs/source/distrib_optimizer.md: bf16 parameters with fp32 gradients take 6 + 12/d bytes
    # per parameter with the distributed optimizer (ZeRO-1), 18 without
    psi, d = 10**9, 16
    assert zero_model_states(psi, d, 1, param_bytes=2, grad_bytes=4).total_bytes == psi * (6 + 12 / d)
    assert zero_model_states(psi, d, 0, param_bytes=2, grad_bytes=4).total_bytes == 18 * psi


def test_stage_model_states_follow_the_rank_parameters_and_sharding():
    config = _gpt3(tp=8, pp=8, dp=4, batch=64, zero_stage=1)
    stages = job_memory(config)
    layer = (12 * H * H + 7 * H) // 8 + 6 * H  # params.py's GPT layer per tp rank
    middle = stages[3]
    assert middle.layers == 12 and middle.params_bytes == 2 * 12 * layer
    assert middle.grads_bytes == 2 * 12 * layer and middle.optimizer_bytes == 12 * -(-12 * layer // 4)
    # pp > 1 with tied embeddings: the first stage holds the word and position embeddings, the last the copy
    vocab_rows = 51200 // 8 * H
    assert stages[0].params_bytes == 2 * (12 * layer + vocab_rows + S * H)
    assert stages[-1].params_bytes == 2 * (12 * layer + vocab_rows + 2 * H)
    # the whole model over every stage, at tp 1 pp 1 (no copies): model_params
    single = stage_memory(_gpt3(batch=1), 0)
    assert single.params_bytes == 2 * model_params(GPT3)


def test_gpt3_175b_on_one_a100_is_oom_by_the_model_states_and_more():
    stage = stage_memory(_gpt3(batch=1), 0)
    states = 16 * model_params(GPT3)  # 2 + 2 + 12 bytes per parameter, nothing sharded
    assert stage.params_bytes + stage.grads_bytes + stage.optimizer_bytes == states
    (fit,) = fit_memory([stage], 80 << 30)
    assert not fit.fits
    expected = stage.peak_allocated_bytes * (1 + ALLOCATOR_MARGIN) + RUNTIME_RESERVED_BYTES - (80 << 30)
    assert -fit.headroom_bytes == pytest.approx(expected, abs=1)
    assert -fit.headroom_bytes > states - (80 << 30) > 2_500 << 30  # 2.79e12 B of states alone: 2,522 GiB short


def test_zero3_shards_parameters_and_adds_gathered_units():
    base = _gpt3(tp=8, pp=1, dp=8, batch=8)
    z3 = base.with_parallel(zero_stage=3)
    a, b = stage_memory(base, 0), stage_memory(z3, 0)
    assert b.params_bytes == pytest.approx(a.params_bytes / 8, rel=1e-6)
    assert b.optimizer_bytes == pytest.approx(a.optimizer_bytes / 8, rel=1e-6)
    layer = (12 * H * H + 7 * H) // 8 + 6 * H
    vocab = 51200 // 8 * H + S * H
    # two gathered units (running + prefetched) and one unit's gradients, the largest unit a layer here
    assert layer > vocab and b.comm_buffer_bytes == 2 * 2 * layer + 2 * layer


def test_rope_models_without_dropout_keep_no_masks():
    llama, _ = preset("llama3-8b")
    config = LLMConfig(llama, ParallelSpec(tp=1), global_batch_size=1)
    act = layer_activations(config)
    s, h, ffn, kv = 8192, 4096, 14336, 8 * 128
    # LN inputs, QKV and FFN inputs (2 bytes each); Q, K, V (GQA), projection input; SwiGLU's gate+up and
    # the down projection's input; the softmax output only (no dropout)
    assert act.replicated_bytes == 4 * s * h * 2
    assert act.sharded_bytes == 2 * s * (h + 2 * kv + h) + 2 * s * (2 * ffn + ffn)
    assert act.core_bytes == 2 * 32 * s * s


def test_memory_report_rows_and_fit():
    config = _gpt3(tp=8, pp=8, sequence_parallel=True, recompute="selective")
    report = memory_report(config, 80 << 30)
    assert [r["stage"] for r in report["classes"]] == list(range(8))
    assert all(r["ranks"] == 8 for r in report["classes"])
    first = report["classes"][0]
    assert first["device_bytes"] == sum(first["terms"].values())
    assert report["fits"] is True and first["headroom_bytes"] == (80 << 30) - first["device_bytes"]
    assert memory_report(config)["fits"] is None
