"""The 4,096-rank GPT-3 175B iteration (issue 7): generate it, then replay it, with time and peak memory.

Workload: GPT-3 175B (Brown et al. 2020 shape), tp 8 x pp 16 x dp 32 = 4,096
ranks, global batch 1,536, micro-batch 1 (48 micro-batches per pipeline),
1F1B, roofline durations for an H100 (989 TFLOP/s bf16 x 0.7, 3,350 GB/s x
0.8, as the dgx-h100 preset), about 8,900 nodes per rank, 36 million nodes.

Stages, each timed once (this is the scale test, not a median):

1. ``write_llm`` to a temporary directory (one rank in memory at a time);
2. replay on dgx-h100 (alpha-beta): with rank folding when the engine has it
   (``ReplayOptions`` field ``fold``); without folding the replay needs the
   whole job in memory (about 170 B/node of encoded trace plus the engine's
   arrays) and is attempted only when ``/proc/meminfo`` MemAvailable covers
   the estimate (``BENCH_SCALE_BYTES_PER_NODE``, default 700) -- otherwise
   the figure says why it was skipped.

Peak memory: the process's ``ru_maxrss`` after each stage (the runner adds the
final one).  Environment: ``BENCH_SCALE_DP`` (default 32) to run a smaller
job, ``BENCH_SCALE_DIR`` for the output directory.
"""

from __future__ import annotations

import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

DP = int(os.environ.get("BENCH_SCALE_DP", 32))
BYTES_PER_NODE = float(os.environ.get("BENCH_SCALE_BYTES_PER_NODE", 700))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _available_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def main() -> dict:
    from dataclasses import fields

    from tracekit.converters.generators import LLMConfig, ParallelSpec, Roofline, llm_preset, write_llm
    from tracekit.io import read_traceset
    from tracekit.replayer import ReplayOptions, replay
    from tracekit.replayer.simulation.specs import load_spec

    spec = load_spec("dgx-h100")
    device = spec.device
    roofline = Roofline(
        device.peak() * device.compute_efficiency, device.mem_bandwidth_bytes_per_s * device.memory_efficiency
    )
    model, _ = llm_preset("gpt3-175b")
    # 48 micro-batches per pipeline at any dp (the preset's batch of 1,536 at dp 32)
    config = LLMConfig(model, ParallelSpec(dp=DP, tp=8, pp=16), global_batch_size=48 * DP, micro_batch_size=1)
    out: dict = {
        "ranks": config.world_size,
        "model": model.name,
        "tp": 8,
        "pp": 16,
        "dp": DP,
        "micro_batches": config.num_micro_batches,
    }
    base = Path(os.environ.get("BENCH_SCALE_DIR") or tempfile.mkdtemp(prefix="tracekit-scale-"))
    try:
        t0 = time.perf_counter()
        paths = write_llm(config, base / "gpt3", roofline)
        out["generate_s"] = time.perf_counter() - t0
        out["bytes_on_disk"] = sum(p.stat().st_size for p in paths)
        out["rss_after_generate_mb"] = _rss_mb()
        print(
            f"generated {len(paths)} ranks, {out['bytes_on_disk'] / 1e9:.2f} GB in {out['generate_s']:.1f} s",
            flush=True,
        )
        fold = next((f.name for f in fields(ReplayOptions) if f.name in ("fold", "fold_ranks")), None)
        from tracekit.io import read_trace

        per_rank = len(read_trace(paths[0]))
        nodes_estimate = per_rank * len(paths)
        out["nodes_estimate"] = nodes_estimate
        if fold is None:
            need = nodes_estimate * BYTES_PER_NODE
            avail = _available_bytes()
            if avail is None or need > avail:
                out["replay"] = {
                    "skipped": f"no rank folding in the engine yet, and an unfolded replay of "
                    f"{nodes_estimate:,} nodes needs about {need / 1e9:.1f} GB "
                    f"(available {(avail or 0) / 1e9:.1f} GB)"
                }
                print(out["replay"]["skipped"], flush=True)
                return out
        options = ReplayOptions(**({fold: True} if fold else {}))
        t0 = time.perf_counter()
        ts = read_traceset(base / "gpt3")
        out["read_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = replay(ts, spec, options=options)
        out["replay_s"] = time.perf_counter() - t0
        out["replay_folded"] = bool(fold)
        out["node_count"] = result.node_count
        out["iteration_time_ns"] = result.iteration_time_ns
        out["rss_after_replay_mb"] = _rss_mb()
        print(
            f"replayed {result.node_count:,} nodes in {out['replay_s']:.1f} s (fold={bool(fold)}): iteration "
            f"{result.iteration_time_ns / 1e9:.3f} s; peak RSS {out['rss_after_replay_mb']:.0f} MB",
            flush=True,
        )
        return out
    finally:
        if not os.environ.get("BENCH_SCALE_DIR"):
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    print(main())
