"""Full-size jobs stored as rank classes (issue 17): ``generate llm --classes`` then ``replay``, end to end.

Jobs (the issue's "Must show"):

- GPT-3 175B (Brown et al. 2020 shape), tp 8 x pp 16 x dp 8 = 1,024 ranks,
  the preset's global batch 1,536 (192 micro-batches per pipeline);
- the same at dp 32 = 4,096 ranks (48 micro-batches per pipeline);
- Megatron-LM's 18.4B model of Narayanan et al. 2021, Table 1 (hidden 6,144,
  48 heads, 40 layers, tp 8, pp 2, 256 GPUs, batch 1,024; sequence 2,048,
  vocabulary 51,200 as in that paper): dp 16.

Each command runs as the user runs it (``.venv/bin/tracekit``, its own
process), durations from a dgx-h100 roofline, replay on dgx-h100 (summary
only, no ``--json``).  Figures: wall and CPU seconds and peak RSS of each
process (``os.wait4``), the replayed iteration time, the fold classes, the
lines printed, and the 1-minute load average before
each job (the machine is shared).  Each job runs once (this is the scale
test, not a median).  ``BENCH_CLASSES_JOBS`` selects jobs by name
(comma-separated; default all), ``BENCH_CLASSES_DIR`` keeps the outputs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRACEKIT = str(Path(sys.executable).with_name("tracekit"))
JOBS = {
    "gpt3_175b_1024": ["--model", "gpt3-175b", "--tp", "8", "--pp", "16", "--dp", "8"],
    "megatron_18.4b_256": [
        "--model",
        "gpt3-175b",
        "--layers",
        "40",
        "--hidden",
        "6144",
        "--heads",
        "48",
        "--ffn",
        "24576",
        "--seq",
        "2048",
        "--vocab",
        "51200",
        "--tp",
        "8",
        "--pp",
        "2",
        "--dp",
        "16",
        "--global-batch",
        "1024",
    ],
    "gpt3_175b_4096": ["--model", "gpt3-175b", "--tp", "8", "--pp", "16", "--dp", "32"],
}


def _run(args: list[str]) -> tuple[float, float, float, str]:
    """Run a command: ``(wall s, CPU s, peak RSS MB, stdout + stderr)`` of that process alone."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {output[-400:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, output


def main() -> dict:
    chosen = [j for j in os.environ.get("BENCH_CLASSES_JOBS", ",".join(JOBS)).split(",") if j]
    base = Path(os.environ.get("BENCH_CLASSES_DIR") or tempfile.mkdtemp(prefix="tracekit-classes-"))
    out: dict = {"note": "each job once, on a shared 2-core machine (load average given per job)"}
    try:
        for name in chosen:
            prefix = base / name / "job"
            load = os.getloadavg()[0]
            gen_s, gen_cpu, gen_mb, _ = _run(
                [TRACEKIT, "-q", "generate", "llm", *JOBS[name], "--hw", "dgx-h100", "--classes", "-o", str(prefix)]
            )
            rep_s, rep_cpu, rep_mb, text = _run([TRACEKIT, "replay", str(prefix), "--hw", "dgx-h100"])
            iteration = re.search(r"iteration time [^(]*\(([\d,]+) ns\)", text)
            folded = re.search(r"simulated (\d+) of (\d+) ranks", text)
            figures = {
                "load_avg_1m": load,
                "generate_s": gen_s,
                "replay_s": rep_s,
                "total_s": gen_s + rep_s,
                "generate_cpu_s": gen_cpu,
                "replay_cpu_s": rep_cpu,
                "peak_rss_mb": max(gen_mb, rep_mb),
                "generate_rss_mb": gen_mb,
                "replay_rss_mb": rep_mb,
                "iteration_time_ns": int(iteration.group(1).replace(",", "")) if iteration else None,
                "fold_classes": int(folded.group(1)) if folded else None,
                "ranks": int(folded.group(2)) if folded else None,
                "output_lines": len(text.splitlines()),
                "files_mb": sum(f.stat().st_size for f in prefix.parent.glob("job.*")) / 1e6,
            }
            print(name, figures, flush=True)
            out.update({f"{name}.{k}": v for k, v in figures.items()})
            shutil.rmtree(base / name, ignore_errors=True)
    finally:
        if not os.environ.get("BENCH_CLASSES_DIR"):
            shutil.rmtree(base, ignore_errors=True)
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
