"""Generation speed of the synthetic workloads (issue 5).

Workloads:
  - GPT-3 175B (Brown et al. 2020 shape, V = 51,200), tp 8 x pp 16 x dp 8 =
    1,024 ranks, global batch 1,536, micro-batch 1 (192 micro-batches per
    pipeline), 1F1B, roofline durations for an A100 (312 TFLOP/s bf16, 2,039
    GB/s), written with ``write_llm`` to a temporary directory (target: under
    a minute);
  - validation of what was written: ``validate_trace`` on one rank of every
    pipeline stage; with ``BENCH_GENERATE_VALIDATE=ranks`` on every rank file,
    one at a time (about 0.25 s per rank).  ``validate_traceset`` on the full
    job (36,000 nodes x 1,024 ranks) does not fit in 23 GB of memory, so the
    cross-rank checks run on the same 1,024-rank layout with a global batch of
    16 (2 micro-batches per pipeline), generated in memory;
  - DLRM (MLPerf Criteo shape) on 64 ranks, in memory.

Environment: ``BENCH_GENERATE_VALIDATE`` = ``stages`` (default) or ``ranks``;
``BENCH_GENERATE_DIR`` to write somewhere else than the system temp dir.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from tracekit.converters.generators import (
    LLMConfig,
    ParallelSpec,
    Roofline,
    dlrm_preset,
    generate_dlrm,
    generate_llm,
    llm_preset,
    write_llm,
)
from tracekit.io import read_trace
from tracekit.checks.validate import validate_trace, validate_traceset

A100 = Roofline(312e12, 2039e9)


def bench_gpt3(out_dir: Path) -> dict:
    model, batch = llm_preset("gpt3-175b")
    config = LLMConfig(model, ParallelSpec(dp=8, tp=8, pp=16), global_batch_size=batch, micro_batch_size=1)
    t0 = time.perf_counter()
    paths = write_llm(config, out_dir / "gpt3", A100)
    write_s = time.perf_counter() - t0
    total_bytes = sum(p.stat().st_size for p in paths)
    per_stage = config.world_size // config.parallel.pp
    t0 = time.perf_counter()
    nodes = 0
    for stage in range(config.parallel.pp):
        trace = read_trace(paths[stage * per_stage])
        report = validate_trace(trace)
        if not report.ok:
            raise SystemExit(f"rank {stage * per_stage} does not validate: {report.errors[0]}")
        nodes += len(trace)
    stages_s = time.perf_counter() - t0
    out = {
        "gpt3_175b_ranks": len(paths),
        "gpt3_175b_write_s": round(write_s, 2),
        "gpt3_175b_bytes_gb": round(total_bytes / 1e9, 2),
        "gpt3_175b_nodes_per_rank_mean": round(nodes / config.parallel.pp),
        "gpt3_175b_micro_batches": config.num_micro_batches,
        "gpt3_175b_validate_stage_reps_s": round(stages_s, 2),
    }
    if os.environ.get("BENCH_GENERATE_VALIDATE", "stages") == "ranks":
        t0 = time.perf_counter()
        bad = [p for p in paths if not validate_trace(read_trace(p)).ok]
        if bad:
            raise SystemExit(f"{len(bad)} rank files do not validate, first {bad[0]}")
        out["gpt3_175b_validate_every_rank_s"] = round(time.perf_counter() - t0, 1)
    return out


def bench_gpt3_cross_rank() -> dict:
    """validate_traceset (per-rank and cross-rank checks) on the 1,024-rank layout, 2 micro-batches."""
    model, _ = llm_preset("gpt3-175b")
    config = LLMConfig(model, ParallelSpec(dp=8, tp=8, pp=16), global_batch_size=16, micro_batch_size=1)
    t0 = time.perf_counter()
    ts = generate_llm(config, A100)
    gen_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    report = validate_traceset(ts)
    if not report.ok:
        raise SystemExit(f"GPT-3 layout does not validate: {report.errors[0]}")
    return {
        "gpt3_layout_b16_generate_s": round(gen_s, 2),
        "gpt3_layout_b16_validate_traceset_s": round(time.perf_counter() - t0, 1),
        "gpt3_layout_b16_nodes": report.checked_nodes,
    }


def bench_dlrm() -> dict:
    config = dlrm_preset("dlrm-mlperf", 64)
    t0 = time.perf_counter()
    ts = generate_dlrm(config, A100)
    return {"dlrm_mlperf_64_ranks_s": round(time.perf_counter() - t0, 3), "dlrm_nodes_rank0": len(ts[0])}


def main() -> dict:
    base = os.environ.get("BENCH_GENERATE_DIR")
    out_dir = Path(tempfile.mkdtemp(prefix="bench_generate_", dir=base))
    try:
        figures = bench_gpt3(out_dir)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    figures.update(bench_gpt3_cross_rank())
    figures.update(bench_dlrm())
    return figures


if __name__ == "__main__":
    for key, value in main().items():
        print(f"{key}: {value}")
