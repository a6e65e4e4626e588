"""Rank folding: a 4,096-rank generated LLM job replayed folded and unfolded (issue 7, part 3).

Workload (seeded by construction: the generator is deterministic): GPT-3
1.3B shape cut to ``BENCH_FOLD_LAYERS`` layers (default 8), tp 8 x pp 4 x dp
128 = 4,096 ranks, 4 micro-batches per pipeline (global batch 512,
micro-batch 1), 1F1B, roofline durations for the dgx-h100 preset; small
enough per rank that the unfolded replay still fits in memory.

Measured, each a median over ``BENCH_FOLD_RUNS`` runs (default 3) with
min/max: the replay of the in-memory trace set unfolded
(``ReplayOptions(fold=False, check=False)``) and folded (``fold=True``, the
default; the up-front checks are the same work either way and left out),
plus the folded replay straight from the files (:func:`replay_with_traces`: one
rank file in memory at a time).  The results are checked equal (whole
``ReplayResult``), and the speed-up is unfolded / folded.  Peak memory: each
variant's ``tracemalloc`` peak in a separate run.

Run: ``.venv/bin/python benchmarks/bench_fold.py`` (prints JSON).
Environment: ``BENCH_FOLD_DP`` (default 128), ``BENCH_FOLD_LAYERS``,
``BENCH_FOLD_RUNS``, ``BENCH_FOLD_DIR`` (keep the files there).
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import statistics
import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

DP = int(os.environ.get("BENCH_FOLD_DP", 128))
LAYERS = int(os.environ.get("BENCH_FOLD_LAYERS", 8))
RUNS = int(os.environ.get("BENCH_FOLD_RUNS", 3))


def _timed(fn, runs: int) -> tuple[dict, object]:
    times, out = [], None
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return {
        "s_median": statistics.median(times),
        "s_min": min(times),
        "s_max": max(times),
        "runs": runs,
        "s_all": times,
    }, out


def _peak_mb(fn) -> float:
    gc.collect()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 1e6


def main() -> dict:
    from tracekit.converters.generators import LLMConfig, ParallelSpec, Roofline, llm_preset, write_llm
    from tracekit.io import read_traceset
    from tracekit.replayer import ReplayOptions, replay
    from tracekit.replayer import replay_with_traces
    from tracekit.replayer.simulation.specs import load_spec

    spec = load_spec("dgx-h100")
    device = spec.device
    roofline = Roofline(
        device.peak() * device.compute_efficiency, device.mem_bandwidth_bytes_per_s * device.memory_efficiency
    )
    model, _ = llm_preset("gpt3-1.3b")
    model = replace(model, num_layers=LAYERS)
    config = LLMConfig(model, ParallelSpec(dp=DP, tp=8, pp=4), global_batch_size=4 * DP, micro_batch_size=1)
    base = Path(os.environ.get("BENCH_FOLD_DIR") or tempfile.mkdtemp(prefix="fold_bench_"))
    out: dict = {
        "ranks": config.world_size,
        "model": f"{model.name} ({LAYERS} layers)",
        "tp": 8,
        "pp": 4,
        "dp": DP,
        "micro_batches": config.num_micro_batches,
    }
    try:
        t0 = time.perf_counter()
        write_llm(config, base / "job", roofline)
        out["generate_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ts = read_traceset(base / "job")
        out["read_s"] = time.perf_counter() - t0
        # the up-front checks (validate_traceset on every rank) cost the same folded or not: measured apart
        unfolded, folded = ReplayOptions(fold=False, check=False), ReplayOptions(fold=True, check=False)
        out["folded"], b = _timed(lambda: replay(ts, spec, options=folded), RUNS)
        out["nodes"] = b.node_count
        out["classes"] = b.folding.classes
        print(f"folded: {out['folded']['s_median']:.2f} s median ({b.folding.classes} classes)", flush=True)
        out["unfolded"], a = _timed(lambda: replay(ts, spec, options=unfolded), RUNS)
        print(f"unfolded: {out['unfolded']['s_median']:.2f} s median", flush=True)
        out["equal"] = a == b and a.iteration_time_ns == b.iteration_time_ns
        out["iteration_time_ns"] = a.iteration_time_ns
        out["fold_speedup"] = out["unfolded"]["s_median"] / out["folded"]["s_median"]
        out["unfolded_nodes_per_s"] = b.node_count / out["unfolded"]["s_median"]
        out["folded_nodes_per_s"] = b.node_count / out["folded"]["s_median"]
        out["folded_peak_mb"] = _peak_mb(lambda: replay(ts, spec, options=folded))
        out["unfolded_peak_mb"] = _peak_mb(lambda: replay(ts, spec, options=unfolded))
        del ts, a
        gc.collect()
        out["files_folded"], (c, _) = _timed(lambda: replay_with_traces(base / "job", spec, options=folded), RUNS)
        out["files_folded_checked"], _ = _timed(
            lambda: replay_with_traces(base / "job", spec, options=ReplayOptions(fold=True)), 1
        )
        out["files_equal"] = c == b
        out["files_folded_peak_mb"] = _peak_mb(lambda: replay_with_traces(base / "job", spec, options=folded))
        print(
            f"speed-up {out['fold_speedup']:.1f}x, equal={out['equal']}; from files (read + replay, folded) "
            f"{out['files_folded']['s_median']:.2f} s",
            flush=True,
        )
        return out
    finally:
        if not os.environ.get("BENCH_FOLD_DIR"):
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
