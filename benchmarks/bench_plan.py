"""``tracekit plan`` at full size: GPT-3 175B on 1,024 H100 (issue 29's <= 60 s target) and the Megatron-LM rows.

Default: ``plan --model gpt3-175b --gpus 1024 --hw dgx-h100 --global-batch 1536`` with its default settings
(every knob free, ``--keep 1 --gap 0.05``, process pool of 2), through the library call the command makes;
prints the layouts enumerated, pruned by memory, dominated, pruned by bound and simulated, the chosen layout,
the wall time and the load average before the run (the machine is shared: a load of 10 on 2 cores makes the
same search about 1.5x slower).

``BENCH_PLAN_ROWS=1.7B,18.4B,39.1B,1T,k175B,k530B`` (or ``all``) also runs the full search (every knob free,
``--keep 3 --gap 0``; ``--keep 1`` for 1T and 530B) of Narayanan et al. 2021 Table 1 rows and Korthikanti et al. 2022 Table 5 rows on
dgx-a100 at the paper's GPU count and batch, and prints where the published layout ranks, or whether a layout
predicted at least as fast was found (the published layout replayed on its own when it was not simulated).
Those take minutes each (1T: tens of minutes).

Run: ``.venv/bin/python benchmarks/bench_plan.py`` or ``make bench`` (``benchmarks/run.py plan``).
"""

from __future__ import annotations

import os
import time

ROWS = [r for r in os.environ.get("BENCH_PLAN_ROWS", "").split(",") if r]
PAPER_ROWS = ("1.7B", "18.4B", "39.1B", "1T", "k175B", "k530B")


def _gpt3() -> dict:
    from tracekit.cli.plan import llm_generator
    from tracekit.replayer.orchestration.planning.search import PlanRequest, plan_layouts
    from tracekit.replayer.simulation.specs import load_spec
    from tracekit.workloads.config import LLMConfig, preset

    load = os.getloadavg()[0]
    base = LLMConfig(preset("gpt3-175b")[0], global_batch_size=1536)
    request = PlanRequest(base, "gpt3-175b", 1024, load_spec("dgx-h100"), "dgx-h100")
    cpu0 = _cpu_s()
    t0 = time.perf_counter()
    result = plan_layouts(request, llm_generator(), executor="process", workers=2)
    wall = time.perf_counter() - t0
    cpu = _cpu_s() - cpu0
    counts = result.counts()
    best = result.figures(result.best)
    print(
        f"gpt3-175b on 1024 dgx-h100, batch 1536: {wall:.1f} s wall (target <= 60 s; load {load:.1f}), {cpu:.1f} s "
        "CPU with the workers: "
        f"{counts['enumerated']} enumerated, {counts['memory']} pruned by memory, {counts['dominated']} dominated, "
        f"{counts['bound']} pruned by bound, {counts['simulated']} simulated; best {result.best.layout.label} "
        f"{best['step_s']:.3f} s, {best['tflops_per_gpu']:.1f} TFLOP/s per GPU"
    )
    return {
        "gpt3_175b_1024_h100_wall_s": round(wall, 2),
        "load_average_before": round(load, 2),
        "cpu_s": round(cpu, 2),
        **{f"layouts_{k}": v for k, v in counts.items()},
        "best_layout": result.best.layout.label,
        "best_step_s": round(best["step_s"], 4),
    }


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the pool's workers once shut down)."""
    import resource

    return sum(
        resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )


def _paper_row(name: str) -> dict:
    """The full search of one paper row and the published layout's rank (module doc)."""
    from tracekit.cli.plan import llm_generator, resolve_model
    from tracekit.replayer.orchestration.planning.search import PlanRequest, plan_layouts
    from tracekit.replayer.orchestration.planning.simulate import simulate_layout
    from tracekit.replayer.simulation.specs import load_spec

    from megatron_rows import published_layout

    model_name, gpus, layout = published_layout(name)
    base, command_model = resolve_model(model_name, None, None, None)
    spec = load_spec("dgx-a100")
    t0 = time.perf_counter()
    keep = 1 if name in ("1T", "k530B") else 3  # exact best only: each 1T / 530B layout takes minutes to replay
    request = PlanRequest(base, command_model, gpus, spec, "dgx-a100", keep=keep, gap=0.0)
    result = plan_layouts(request, llm_generator(), workers=2)
    wall = time.perf_counter() - t0
    labels = [c.layout.label for c in result.ranked]
    rank = labels.index(layout.label) + 1 if layout.label in labels else None
    own = next((c.simulated for c in result.ranked if c.layout == layout), None)
    if own is None:
        own = simulate_layout((llm_generator().write, layout.config(base), spec))
    best = result.best.simulated
    assert best is not None
    print(
        f"{name} on {gpus} A100: published {layout.label} rank {rank}, {own.step_ns / 1e9:.3f} s; best "
        f"{result.best.layout.label} {best.step_ns / 1e9:.3f} s; {result.counts()} in {wall:.0f} s"
    )
    return {f"{name}_published_rank": rank, f"{name}_best_vs_published": round(best.step_ns / own.step_ns, 4)}


def main() -> dict:
    """Figures (module doc)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "replayer"))
    out = {} if os.environ.get("BENCH_PLAN_SKIP_GPT3") else _gpt3()
    for name in PAPER_ROWS if ROWS == ["all"] else ROWS:
        out.update(_paper_row(name))
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=1))
