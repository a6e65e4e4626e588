"""Today's training stacks against NVIDIA's published NeMo step times on DGX H100 (issue 28).

Reference: NVIDIA/dgxc-benchmarking at commit 1b9bb6b, the recipe READMEs' "Expected Performance" tables
(seconds per training step; converters/generators/nemo_recipes.py cites the file of each row and the YAML
settings the table does not state).  Each row is generated with the ``nemo`` stack (fused attention, ring
context parallelism, userbuffers tp overlap, distributed optimizer with overlapped gradient reduce-scatter
and parameter all-gather; tracekit/workloads/stacks.py), stored as rank classes, replayed folded on the
dgx-h100 preset (nccl collective model) and asserted within 10 % (the issue's target).  The Llama 3.1 8B row
is the one the H100 sustained tensor fraction was fitted on (calibration.SUSTAINED_TENSOR_FRACTION); the
others are checks.  The 64- and 128-GPU rows take about a minute each on 2 cores: marked slow, and
benchmarks/bench_stacks.py prints the whole table with the errors before (megatron-2021 stack) and after.
"""

from __future__ import annotations

import pytest

from tracekit.converters.generators import calibration as cal
from tracekit.converters.generators import nemo_recipes as nr
from tracekit.converters.generators.llm import write_llm
from tracekit.replayer.simulation.specs import load_spec
from tracekit.workloads.stacks import fp8_gemms_only

# (row, published seconds per step) -- the READMEs' values, repeated so the test states its reference.
PUBLISHED = {
    "llama3.1-8b": 12.78,
    "llama3.1-70b": 14.61,
    "nemotron4-15b": 2.812,
    "gpt3-175b": 8.309,
    "gpt3-175b-fp8": 5.626,
}


def _step_s(name: str, tmp_path) -> float:
    from tracekit.replayer import replay_with_traces

    row = nr.recipe(name)
    assert row.step_s == PUBLISHED[name]
    config = nr.recipe_config(row)
    assert config.world_size == row.gpus and config.stack.name == "nemo"
    spec = load_spec("dgx-h100")
    assert spec.collective_model == "nccl"
    write_llm(config, tmp_path / name, cal.cost_for(spec, config), classes=True)
    result, _ = replay_with_traces(tmp_path / name, spec)
    assert result.folding is not None and result.folding.ranks == row.gpus
    return result.iteration_time_ns * 1e-9


@pytest.mark.parametrize("name", ["llama3.1-8b", "nemotron4-15b"])
def test_recipe_row_within_10_percent(name, tmp_path):
    got = _step_s(name, tmp_path)
    assert got == pytest.approx(PUBLISHED[name], rel=0.10), f"{name}: {got:.3f} vs {PUBLISHED[name]} s"


@pytest.mark.slow
def test_llama31_70b_tp4_pp4_cp2_vp5_within_10_percent(tmp_path):
    got = _step_s("llama3.1-70b", tmp_path)
    assert got == pytest.approx(14.61, rel=0.10), f"{got:.3f} vs 14.61 s"


@pytest.mark.slow
def test_gpt3_175b_bf16_and_fp8_within_10_percent_and_their_ratio(tmp_path):
    bf16, fp8 = _step_s("gpt3-175b", tmp_path), _step_s("gpt3-175b-fp8", tmp_path)
    assert bf16 == pytest.approx(8.309, rel=0.10), f"BF16 {bf16:.3f} vs 8.309 s"
    assert fp8 == pytest.approx(5.626, rel=0.10), f"FP8 {fp8:.3f} vs 5.626 s"
    assert bf16 / fp8 == pytest.approx(8.309 / 5.626, rel=0.10), f"ratio {bf16 / fp8:.3f} vs 1.477"


def test_recipe_layouts_match_the_readmes():
    # READMEs: "TP=1, PP=1, CP=2, MBS=1, GA=32" on 8 GPUs at GBS 128 -> dp 4, 32 micro-batches;
    # "TP=4, PP=4, CP=2, VP=5, MBS=1, GA=64" on 64 GPUs at GBS 128 -> dp 2, 64 micro-batches, 80 / 20 = 4 layers
    # per chunk; Nemotron "TP=4, PP=1, MBS=4, GA=4" on 16 GPUs at GBS 64 -> dp 4; GPT-3 "TP=4,PP=8, MBS=1, VP=12"
    # on 128 GPUs at GBS 256 -> dp 4, 64 micro-batches, one layer per chunk
    expected = {
        "llama3.1-8b": (4, 32, 32),
        "llama3.1-70b": (2, 64, 4),
        "nemotron4-15b": (4, 4, 32),
        "gpt3-175b": (4, 64, 1),
    }
    for name, (dp, micro_batches, layers_per_chunk) in expected.items():
        c = nr.recipe_config(nr.recipe(name))
        assert (c.parallel.dp, c.num_micro_batches, c.layers_per_chunk) == (dp, micro_batches, layers_per_chunk)
        assert c.parallel.zero_stage == 1 and c.parallel.overlap_grad_reduce
    fp8 = nr.recipe_config(nr.recipe("gpt3-175b-fp8"))
    assert fp8.dtype == "fp8" and fp8_gemms_only(fp8) and fp8.dtype_bytes == 2  # TE: BF16 activations


def test_fp8_prices_linear_gemms_at_the_fp8_peak_and_the_output_layer_at_bf16():
    from tracekit.costs.devices import gemm_efficiency

    cost = cal.cost_for(load_spec("dgx-h100"), nr.recipe_config(nr.recipe("gpt3-175b-fp8")))
    assert (cost.dtype, cost.gemm_dtype, cost.tensor_fraction) == ("bf16", "fp8", 0.79)
    m, k, n = 2048, 12288, 12288
    fill = k / (k + cal.GEMM_K_FILL)
    eff = gemm_efficiency(m, n, k, "fp8", cost.device) * fill * 0.79
    fp8_ns = 2 * m * n * k / (1978.9e12 * eff * cal.FP8_GEMM_EFFICIENCY) * 1e9 + cal.KERNEL_OVERHEAD_NS
    bf16_ns = 2 * m * n * k / (989.4e12 * eff) * 1e9 + cal.KERNEL_OVERHEAD_NS
    assert cost.gemm_ns(m, k, n, 0, linear=True) == pytest.approx(fp8_ns, abs=1)
    assert cost.gemm_ns(m, k, n, 0, linear=False) == pytest.approx(bf16_ns, abs=1)
