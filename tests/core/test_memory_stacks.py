"""The memory model with the training stacks of issue 28: the generator's uneven pipeline split and fused attention.

Hand-computed bytes: Llama 3 405B (Dubey et al. 2024, section 3.3: TP 8, PP 16, DP 128, 126 layers, one fewer
on the first and the last stage); Korthikanti et al. 2022 for the layer inventory; Dao 2023 (FlashAttention-2)
for what fused attention keeps (one fp32 logsumexp per query row and head instead of the ``s x s`` core).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tracekit.workloads.activations import SOFTMAX_STAT_BYTES, layer_activations, peak_in_flight
from tracekit.workloads.config import LLMConfig, ParallelSpec, preset
from tracekit.workloads.memory import RUNTIME_RESERVED_BYTES, job_memory, stage_memory, stage_units
from tracekit.workloads.stacks import apply_stack

LLAMA405, _ = preset("llama3-405b")
S, H, T = 8192, 16384, 8


def _405b() -> LLMConfig:
    parallel = ParallelSpec(tp=T, pp=16, dp=128, sequence_parallel=True, recompute="selective", zero_stage=1)
    return LLMConfig(LLAMA405, parallel, global_batch_size=2048)


def test_the_memory_model_holds_the_generators_uneven_split():
    config = _405b()
    assert [len(c) for c in config.chunk_layers] == [7] + [8] * 14 + [7]
    assert [s.layers for s in job_memory(config)] == [7] + [8] * 14 + [7]
    assert stage_units(config, 0) == [*range(7), -1] and stage_units(config, 15) == [*range(119, 126), 126]
    # an explicit split still overrides (the even 128-layer stop-gap's 8 per stage on a 126-layer model)
    assert stage_memory(config, 0, [8] * 16).layers == 8


def test_llama3_405b_stage0_bytes_by_hand():
    # per tp rank, bf16: a layer's q/o 2 h^2 + k/v 2 h (8 x 128) + SwiGLU 3 h ffn, over tp 8, + 2 replicated
    # norms; the embedding's padded vocabulary 129,024 (multiple of 128 x 8) x h / 8
    layer = (2 * H * H + 2 * H * 1024 + 3 * H * 53248) // T + 2 * H
    assert layer == 398_491_648
    psi = 7 * layer + 129_024 * H // T
    assert psi == 3_053_682_688
    # selective + sequence parallel, no dropout: LN, QKV and FFN inputs 4 sbh x 2 B / t; Q, K (1 kv head per
    # rank), V, projection input; gate+up and down inputs (2 x 53248 + 53248) / t; 16 micro-batches x 7 layers
    per_layer = 4 * S * H * 2 // T + 2 * S * (16 * 128 + 2 * 128 + 16 * 128) + 2 * S * 3 * 53248 // T
    assert per_layer == 532_676_608
    stage = stage_memory(_405b(), 0)
    assert (stage.params_bytes, stage.grads_bytes) == (2 * psi, 2 * psi)
    assert stage.optimizer_bytes == 12 * psi // 128
    assert stage.activations_bytes == 16 * 7 * per_layer == 59_659_780_096
    assert stage.working_bytes == 2 * 16 * S * S  # the recomputed softmax of one layer (16 heads per rank)
    assert stage.comm_buffer_bytes == 2 * (S // T) * H * 2  # forward and backward receive buffers
    assert stage.peak_allocated_bytes == 74_375_386_112
    device = 74_375_386_112 + int(74_375_386_112 * 0.05) + RUNTIME_RESERVED_BYTES
    assert stage.device_bytes == device == 79_167_897_241  # 73.73 GiB
    assert (80 << 30) - device == 6_731_448_679  # 6.27 GiB headroom on an 80 GiB H100


def test_fused_attention_keeps_the_logsumexp_not_the_scores():
    gpt3, _ = preset("gpt3-175b")
    s, h, a, t = 2048, 12288, 96, 8
    config = LLMConfig(gpt3, ParallelSpec(tp=t, pp=8, sequence_parallel=True), global_batch_size=64)
    fused = apply_stack(config, "nemo")
    plain, flash = layer_activations(config), layer_activations(fused)
    assert plain.core_bytes == 5 * a * s * s // t  # Korthikanti's 5 a s^2 b / t (b = 1, dropout 0.1)
    assert flash.core_bytes == SOFTMAX_STAT_BYTES * a * s // t == 98_304  # fp32 per query row and head
    assert (flash.replicated_bytes, flash.sharded_bytes) == (plain.replicated_bytes, plain.sharded_bytes)
    # no recompute: Table 2's sbh/t (34 + 5as/h) becomes 34 sbh / t + 4 a s / t
    assert flash.full_bytes == 34 * s * h // t + 4 * a * s // t
    assert flash.stored_bytes("selective") == plain.stored_bytes("selective")
    # ring context parallelism: s / cp query rows per rank
    cp = replace(fused, parallel=replace(fused.parallel, cp=2))
    assert layer_activations(cp).core_bytes == 4 * a * (s // 2) // t


@pytest.mark.parametrize("recipe, nbytes", [("transformer-engine", 2), ("all", 1)])
def test_fp8_activations_follow_the_stacks_recipe(recipe, nbytes):
    llama, _ = preset("llama3-8b")
    config = apply_stack(LLMConfig(llama, ParallelSpec(), global_batch_size=1, dtype="fp8"), "nemo", fp8_recipe=recipe)
    bf16 = apply_stack(LLMConfig(llama, ParallelSpec(), global_batch_size=1), "nemo")
    assert layer_activations(config).sharded_bytes * 2 == layer_activations(bf16).sharded_bytes * nbytes


def test_uneven_interleaved_chunks_are_walked_one_by_one():
    # 10 layers on pp 2 x 2 chunks: (10 + 2) / 4 = 3, so chunks hold 2, 3, 3, 2 (pipeline_split's Llama rule);
    # stage 0 runs chunks 0 (2 layers) and 2 (3 layers), stage 1 chunks 1 (3) and 3 (2 + the head)
    llama, _ = preset("llama3-8b")
    parallel = ParallelSpec(pp=2, schedule="interleaved", virtual_stages=2, recompute="full")
    config = LLMConfig(replace(llama, num_layers=10), parallel, global_batch_size=2)
    assert [len(c) for c in config.chunk_layers] == [2, 3, 3, 2]
    layer = layer_activations(config).input_bytes
    first = peak_in_flight(config, 0)
    # with 2 micro-batches all four forwards of stage 0 run before its first backward: 2 x (2 + 3) layers
    assert first.stored_bytes == 2 * (2 + 3) * layer
    assert stage_memory(config, 0).layers == 5 and stage_memory(config, 1).layers == 5
