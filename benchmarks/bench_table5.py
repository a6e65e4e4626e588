"""Korthikanti et al. 2022 Table 5 at full size: full vs selective recomputation, generated and replayed (issue 33).

Every row of ``converters/generators/table5.py`` (22B on 8 GPUs ... 1T on 512 GPUs), in both modes: the job
generated as rank classes with the calibrated A100 costs, replayed folded on dgx-a100, the iteration time
compared with the paper's (target: within 10 %), and the peak memory per rank of the first pipeline stage
from the memory model (A100 80 GB).  Prints one line per row and mode and returns the figures as JSON.

Run: ``.venv/bin/python benchmarks/bench_table5.py``; ``BENCH_TABLE5_ROWS=22B,175B`` picks rows (the 1T pair
took ~20 min on the loaded 2-core machine: ~5 min to generate and ~5 min to replay each mode).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

ROWS = [r for r in os.environ.get("BENCH_TABLE5_ROWS", "22B,175B,530B,1T").split(",") if r]


def _one(row, mode: str, cost) -> dict:
    """Generate, replay and compare one row in one mode."""
    from tracekit.converters.generators import table5
    from tracekit.converters.generators.llm import write_llm
    from tracekit.replayer import replay_with_traces
    from tracekit.workloads.memory import stage_memory

    config = table5.table5_config(row, mode)
    work = Path(tempfile.mkdtemp(prefix=f"table5-{row.name}-{mode}-"))
    try:
        load = os.getloadavg()[0]
        started = time.perf_counter()
        write_llm(config, work / "job", cost, classes=True)
        generated = time.perf_counter()
        result, _ = replay_with_traces(work / "job", "dgx-a100")
        replayed = time.perf_counter()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    seconds, paper = result.iteration_time_ns * 1e-9, table5.table5_seconds(row, mode)
    return {
        "iteration_s": seconds,
        "paper_s": paper,
        "error_pct": 100 * (seconds / paper - 1),
        "first_stage_peak_gib": stage_memory(config, 0).device_bytes / 2**30,
        "generate_s": generated - started,
        "replay_s": replayed - generated,
        "load_avg_1m": load,
    }


def main() -> dict:
    from tracekit.converters.generators import calibration as cal
    from tracekit.converters.generators.table5 import MODES, table5_row
    from tracekit.replayer.simulation.specs import load_spec

    cost = cal.calibrated_cost(load_spec("dgx-a100"))
    out: dict = {"note": "each row and mode once, on a shared 2-core machine (1-minute load average per run)"}
    for name in ROWS:
        row = table5_row(name)
        for mode in MODES:
            fig = _one(row, mode, cost)
            print(
                f"{name} {mode}: {fig['iteration_s']:.2f} s vs {fig['paper_s']:g} s ({fig['error_pct']:+.1f} %), "
                f"stage 0 peak {fig['first_stage_peak_gib']:.1f} GiB, generate {fig['generate_s']:.0f} s, "
                f"replay {fig['replay_s']:.0f} s (load {fig['load_avg_1m']:.1f})",
                flush=True,
            )
            out.update({f"{name}.{mode}.{k}": v for k, v in fig.items()})
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
