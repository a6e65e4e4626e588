"""Transform throughput (issue 6): DP rescale, TP/PP rewrites, compaction.

Workloads:
  - a generated GPT-style job (8 layers, h 2048, 8 micro-batches) at tp 2 x pp 4
    x dp 8 (64 ranks): Rescale dp 8 -> 64 (512 ranks), ChangeTP 2 -> 4, ChangePP 4 -> 8;
  - the bundled Chakra feeder trace (3,664 nodes, 181,878 data deps): Compact.

Prints wall time (median of 3) and nodes written per second.  Run:
``.venv/bin/python benchmarks/bench_transform.py``.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _time(fn, repeat=3):
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> None:
    from tracekit.converters.generators.llm import generate_llm
    from tracekit.workloads.config import LLMConfig, ModelSpec, ParallelSpec
    from tracekit.io import read_trace
    from tracekit.transforms import ChangePP, ChangeTP, Rescale, compact_trace

    model = ModelSpec("bench", num_layers=8, hidden_size=2048, num_heads=16, seq_length=1024, vocab_size=51200)
    src = generate_llm(LLMConfig(model, ParallelSpec(dp=8, tp=2, pp=4), global_batch_size=64, micro_batch_size=1))
    for name, tr in (("rescale dp 8 -> 64", Rescale(dp=64)), ("change tp 2 -> 4", ChangeTP(4)),
                     ("change pp 4 -> 8", ChangePP(8))):
        secs, out = _time(lambda tr=tr: tr.apply(src))
        nodes = sum(len(t) for t in out)
        print(f"{name:22s} {len(src):4d} -> {len(out):4d} ranks, {nodes:9,d} nodes: {secs:7.3f} s "
              f"({nodes / secs:,.0f} nodes/s)")
    trace = read_trace(ROOT / "sample_traces/chakra/feeder.0.et")
    secs, (out, stats) = _time(lambda: compact_trace(trace))
    print(f"{'compact feeder.0.et':22s} {stats.nodes_before} -> {stats.nodes_after} nodes, {stats.deps_before:,d} -> "
          f"{stats.deps_after:,d} deps (x{stats.dep_factor:.1f}): {secs:7.3f} s")


if __name__ == "__main__":
    main()
