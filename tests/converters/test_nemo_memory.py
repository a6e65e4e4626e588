"""The NeMo recipes' memory with and without fused attention (issue 28 stacks on issue 33's memory model).

The Llama 3.1 8B and 70B recipes (NVIDIA/dgxc-benchmarking, ``converters/generators/nemo_recipes.py``) train
without activation recomputation on H100 80GB: they fit only because fused attention (FlashAttention, Dao
2023) keeps one fp32 logsumexp per query row and head instead of the ``s x s`` softmax (Korthikanti et al.
2022's ``5 a s^2 b`` term; ``2 a s^2 b`` without dropout).
"""

from __future__ import annotations

from converters.generators.nemo_recipes import recipe, recipe_config
from tracekit.workloads.activations import layer_activations
from tracekit.workloads.memory import memory_report
from tracekit.workloads.stacks import apply_stack

H100_BYTES = 80 << 30


def test_llama31_8b_fits_on_h100_only_with_fused_attention():
    fused = recipe_config(recipe("llama3.1-8b"))  # TP 1, PP 1, CP 2, MBS 1, no recompute
    unfused = apply_stack(fused, "nemo", fused_attention=False, cp_comm="allgather")
    s, tokens, heads = 8192, 4096, 32  # 4,096 query rows per rank under cp 2, all 32 heads at tp 1
    assert layer_activations(unfused).core_bytes == 2 * heads * tokens * s == 2_147_483_648  # bf16 softmax output
    assert layer_activations(fused).core_bytes == 4 * heads * tokens == 524_288  # fp32 logsumexp
    # the rest of a layer (LN/QKV/FFN inputs 4 t h x 2 B, Q K V (8 kv heads) and projection input, SwiGLU)
    rest = 4 * tokens * 4096 * 2 + 2 * tokens * (4096 + 2 * 1024 + 4096) + 2 * tokens * 3 * 14336
    assert layer_activations(fused).full_bytes == rest + 524_288 == 570_949_632
    (on, off) = (memory_report(c, H100_BYTES)["classes"][0] for c in (fused, unfused))
    # 32 layers + the head's inputs and fp32 logits (4 t V, V = 128,256) of the one micro-batch in flight
    head = 2 * tokens * 4096 * 2 + 4 * tokens * 128_256
    assert on["terms"]["activations"] == 32 * 570_949_632 + head  # 19.04 GiB
    assert off["terms"]["activations"] - on["terms"]["activations"] == 32 * (2_147_483_648 - 524_288)
    assert on["fits"] and not off["fits"]  # 64.2 GiB vs 131.4 GiB per rank


def test_llama31_70b_fits_on_h100_only_with_fused_attention():
    fused = recipe_config(recipe("llama3.1-70b"))  # TP 4, PP 4, CP 2, VP 5, SP, no recompute
    unfused = apply_stack(fused, "nemo", fused_attention=False, cp_comm="allgather")
    tokens, heads = 4096, 64 // 4
    assert layer_activations(unfused).core_bytes == 2 * heads * tokens * 8192
    assert layer_activations(fused).core_bytes == 4 * heads * tokens == 262_144
    on, off = (memory_report(c, H100_BYTES) for c in (fused, unfused))
    assert on["fits"] and not off["fits"]  # worst stage 57.4 GiB vs 154.0 GiB
    assert [r["layers"] for r in on["classes"]] == [20] * 4
