"""Megatron-LM Table 1 at full size: generated, replayed folded, predicted vs the paper (issue 16, part 4).

Rows (Narayanan et al. 2021, SC'21, Table 1; see converters/generators/calibration.py): by default
18.4B (256 GPUs), 39.1B (512 GPUs) and 1T (3,072 GPUs; 163 TFLOP/s per GPU, also in the abstract).
Each row: ``write_llm(..., classes=True)`` with the calibrated costs for dgx-a100 (one trace per pipeline
stage), then :func:`replay_with_traces` on dgx-a100 (its default collective model, folded).  Prints per row the
predicted and the paper's TFLOP/s per GPU (the paper's formula, recompute on), the error, and the wall
time of generation and replay, measured once on the shared machine (load average printed).

Run: ``.venv/bin/python benchmarks/bench_megatron.py`` (prints JSON); ``BENCH_MEGATRON_ROWS=1.7B,3.6B``
picks rows (the 1T row took ~15 min under load on 2 cores and several GB of memory: 5.9 GB RSS seen while generating).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

ROWS = [r for r in os.environ.get("BENCH_MEGATRON_ROWS", "18.4B,39.1B,1T").split(",") if r]


def main() -> dict:
    from tracekit.converters.generators import calibration as cal
    from tracekit.converters.generators.llm import write_llm
    from tracekit.replayer import replay_with_traces
    from tracekit.replayer.simulation.specs import load_spec

    cost = cal.calibrated_cost(load_spec("dgx-a100"))
    out: dict = {"note": "each row once, on a shared 2-core machine (1-minute load average per row)"}
    for name in ROWS:
        row = cal.table1_row(name)
        base = Path(tempfile.mkdtemp(prefix=f"megatron-{name}-"))
        try:
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            write_llm(cal.table1_config(row), base / "job", cost, classes=True)
            t1 = time.perf_counter()
            result, _ = replay_with_traces(base / "job", "dgx-a100")
            t2 = time.perf_counter()
        finally:
            shutil.rmtree(base, ignore_errors=True)
        got = cal.table1_tflops_per_gpu(row, result.iteration_time_ns * 1e-9)
        figures = {
            "gpus": row.gpus,
            "tp": row.tp,
            "pp": row.pp,
            "batch": row.batch_size,
            "iteration_s": result.iteration_time_ns * 1e-9,
            "predicted_tflops_per_gpu": got,
            "paper_tflops_per_gpu": row.tflops_per_gpu,
            "error_pct": 100 * (got / row.tflops_per_gpu - 1),
            "generate_s": t1 - t0,
            "replay_s": t2 - t1,
            "load_avg_1m": load,
            "fold_classes": result.folding.classes if result.folding else None,
        }
        print(
            f"{name}: {got:.1f} vs {row.tflops_per_gpu:g} TFLOP/s per GPU ({figures['error_pct']:+.1f} %), "
            f"{row.gpus} GPUs, generate {t1 - t0:.0f} s, replay {t2 - t1:.0f} s (load {load:.1f})",
            flush=True,
        )
        out.update({f"{name}.{k}": v for k, v in figures.items()})
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
