"""NeMo recipes on DGX H100 at full size, before and after issue 28: predicted vs published step time.

Rows: converters/generators/nemo_recipes.py (NVIDIA/dgxc-benchmarking 1b9bb6b recipe READMEs). Each row is
generated as rank classes and replayed folded on dgx-h100 twice:

* **before**: what tracekit did before issue 28 -- the ``megatron-2021`` stack (unfused attention, K/V
  all-gather, no tp overlap), ``fp8_recipe=all`` (every byte one byte under FP8), data-parallel overlap and
  ZeRO-1 as the recipe runs them, no sustained-clock fraction (``tensor_fraction=1``), alpha-beta
  collectives (the old dgx-h100 default);
* **after**: the ``nemo`` stack with Transformer Engine FP8, the calibrated costs as they are now and the
  preset's nccl collective model.

Prints per row the two predictions, the published time and both errors, and the GPT-3 175B BF16/FP8 ratio.
Run: ``.venv/bin/python benchmarks/bench_stacks.py`` (prints JSON; ``BENCH_STACKS_ROWS=llama3.1-8b`` picks rows;
about 5 minutes on 2 cores). ``BENCH_STACKS_405B=1`` also generates Llama 3 405B (126 layers, uneven split) at
TP 8 PP 16 on 8,192 GPUs as rank classes and replays it (measured once: 10 s to generate, 1 min 44 s and 4.8 GB
to replay, 14.94 s per step at global batch 2,048 with 1F1B).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

ROWS = [r for r in os.environ.get("BENCH_STACKS_ROWS", "").split(",") if r]


def _replay(config, cost, spec) -> tuple[float, float]:
    from tracekit.converters.generators.llm import write_llm
    from tracekit.replayer import replay_with_traces

    base = Path(tempfile.mkdtemp(prefix="stacks-"))
    try:
        t0 = time.perf_counter()
        write_llm(config, base / "job", cost, classes=True)
        result, _ = replay_with_traces(base / "job", spec)
        return result.iteration_time_ns * 1e-9, time.perf_counter() - t0
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _llama3_405b(spec) -> dict:
    """Llama 3 405B (Dubey et al. 2024, Table 3) at TP 8 PP 16 DP 64 on 8,192 GPUs: generate and replay."""
    from dataclasses import replace

    from tracekit.converters.generators import calibration as cal
    from tracekit.workloads.config import LLMConfig, ParallelSpec, preset
    from tracekit.workloads.stacks import apply_stack

    model = replace(preset("llama3-70b")[0], name="llama3-405b", num_layers=126, hidden_size=16384, num_heads=128)
    model = replace(model, ffn_hidden_size=53248)
    parallel = ParallelSpec(dp=64, tp=8, pp=16, sequence_parallel=True, zero_stage=1)
    config = apply_stack(LLMConfig(model, parallel, global_batch_size=2048), "nemo")
    step, wall = _replay(config, cal.cost_for(spec, config), spec)
    print(f"llama3-405b: 8192 GPUs, 126 layers on 16 stages {[len(r) for r in config.chunk_layers]}: {step:.3f} s")
    return {"llama3-405b.step_s": step, "llama3-405b.wall_s": wall, "llama3-405b.gpus": config.world_size}


def main() -> dict:
    from tracekit.converters.generators import calibration as cal
    from tracekit.converters.generators import nemo_recipes as nr
    from tracekit.replayer.simulation.specs import load_spec
    from tracekit.workloads.stacks import apply_stack

    spec = load_spec("dgx-h100")
    old_spec = dataclasses.replace(spec, collective_model="alpha_beta")
    out: dict = {"source": nr.SOURCE, "collective_model_after": spec.collective_model}
    steps: dict[str, float] = {}
    for row in nr.RECIPES:
        if ROWS and row.name not in ROWS:
            continue
        after_cfg = nr.recipe_config(row)
        before_cfg = apply_stack(after_cfg, "megatron-2021", fp8_recipe="all", overlap_grad_reduce=True)
        before_cost = dataclasses.replace(cal.cost_for(spec, before_cfg), tensor_fraction=1.0)
        before, t_before = _replay(before_cfg, before_cost, old_spec)
        after, t_after = _replay(after_cfg, cal.cost_for(spec, after_cfg), spec)
        steps[row.name] = after
        figures = {
            "gpus": row.gpus,
            "published_s": row.step_s,
            "before_s": before,
            "after_s": after,
            "before_error_pct": 100 * (before / row.step_s - 1),
            "after_error_pct": 100 * (after / row.step_s - 1),
            "wall_s": t_before + t_after,
            "load_avg_1m": os.getloadavg()[0],
        }
        print(
            f"{row.name}: published {row.step_s} s; before {before:.3f} s ({figures['before_error_pct']:+.1f} %), "
            f"after {after:.3f} s ({figures['after_error_pct']:+.1f} %)  [{row.readme}]",
            flush=True,
        )
        out.update({f"{row.name}.{k}": v for k, v in figures.items()})
    if os.environ.get("BENCH_STACKS_405B"):
        out.update(_llama3_405b(spec))
    if "gpt3-175b" in steps and "gpt3-175b-fp8" in steps:
        out["gpt3-175b.bf16_over_fp8"] = steps["gpt3-175b"] / steps["gpt3-175b-fp8"]
        print(f"GPT-3 175B BF16/FP8: {out['gpt3-175b.bf16_over_fp8']:.3f} (published {8.309 / 5.626:.3f})")
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
