"""``replay --samples 100`` with jitter on a 1,024-rank class set (issue 30, "Must show": <= 60 s, percentiles).

Workload (deterministic generator): GPT-3 1.3B shape cut to ``BENCH_PERTURB_LAYERS`` layers (default 4), pure data
parallel, dp 1,024 (tp 1, pp 1, global batch 1,024, micro-batch 1), written as a rank-class set
(``generate llm --classes``: 1 class, 121 nodes a rank, 123,904 nodes in all), replayed on dgx-a100 with log-normal
jitter sigma 0.05 on compute and on communication, ``BENCH_PERTURB_SAMPLES`` samples (default 100).

Measured: the ``tracekit replay ... --samples N`` command as a fresh process (wall and CPU seconds; the serial
executor, and the local process pool with ``--executor process``), and the percentiles it printed.  Target: wall
<= 60 s.  On a loaded machine the CPU seconds are the better figure (one core's work).

Run: ``.venv/bin/python benchmarks/bench_perturb.py`` (prints JSON).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAYERS = int(os.environ.get("BENCH_PERTURB_LAYERS", 4))
SAMPLES = int(os.environ.get("BENCH_PERTURB_SAMPLES", 100))
TRACEKIT = str(Path(sys.executable).with_name("tracekit"))


def _run(args: list[str]) -> tuple[dict, float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([TRACEKIT, *args], check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(out.stdout), wall, cpu


def main() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "dp")
        subprocess.run(
            [TRACEKIT, "generate", "llm", "--model", "gpt3-1.3b", "--tp", "1", "--pp", "1", "--dp", "1024",
             "--layers", str(LAYERS), "--global-batch", "1024", "--classes", "-o", prefix],
            check=True, capture_output=True,
        )  # fmt: skip
        args = ["replay", prefix, "--hw", "dgx-a100", "--perturb", "jitter=compute:0.05",
                "--perturb", "jitter=comm:0.05", "--samples", str(SAMPLES), "--json"]  # fmt: skip
        out = {"ranks": 1024, "samples": SAMPLES, "target_wall_s": 60.0}
        for executor in ("serial", "process"):
            doc, wall, cpu = _run([*args, "--executor", executor])
            out[executor] = {
                "wall_s": round(wall, 2),
                "cpu_s": round(cpu, 2),
                "median_ms": doc["median_ns"] / 1e6,
                "p90_ms": doc["p90_ns"] / 1e6,
                "p99_ms": doc["p99_ns"] / 1e6,
                "waited_on_top": doc["waited_on"][:3],
            }
        out["load_average"] = os.getloadavg()[0]
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
