"""Issue 34: results sized by what differs, and rescaling as rank-class work, end to end as the user runs them.

Jobs:

- ``llama3_405b_8192``: a Llama 3 405B-like model (126 -> 128 layers so 16 stages divide them, hidden 16,384,
  128 heads, 8 key/value heads, FFN 53,248, sequence 8,192, vocabulary 128,256; Dubey et al. 2024, Table 3) at
  tp 8 x pp 16 x dp 64 = 8,192 ranks, global batch 2,048, written with ``generate llm --classes``, then
  ``replay --hw dgx-h100`` without and with ``-o result.json``: the file's size and the writing cost (issue:
  1.75 GB, 615 s wall with -o vs 41 s without).  Once (``BENCH_RESULT_REPEAT`` for more).
- ``param-{dlrm,resnet}`` at ``--dp`` 1,024 and 4,096: ``convert pytorch`` of the real capture once, then
  ``transform --dp N`` (a rank-class set), ``replay --hw dgx-h100 -o`` (default compute: param-dlrm projects
  V100 -> H100, param-resnet has no durations and uses the roofline) and ``report``; each step's median of
  ``BENCH_RESULT_REPEAT`` (default 3) runs.  Target per step: <= 30 s and <= 2 GB.

Figures: wall and CPU seconds, peak RSS (MB) of each process alone (``os.wait4``), file sizes, iteration times.
``BENCH_RESULT_JOBS`` selects jobs (``llama``, ``capture``; default both).  Needs ``$TRACEKIT_REAL_DATA`` or
../shared/real for the captures (skipped with a note otherwise).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

TRACEKIT = str(Path(sys.executable).with_name("tracekit"))
REAL = Path(os.environ.get("TRACEKIT_REAL_DATA", Path(__file__).resolve().parents[2] / "shared" / "real"))
LLAMA = [
    "--model", "llama3-70b", "--layers", "128", "--hidden", "16384", "--heads", "128", "--kv-heads", "8",
    "--ffn", "53248", "--seq", "8192", "--vocab", "128256", "--tp", "8", "--pp", "16", "--dp", "64",
    "--global-batch", "2048",
]  # fmt: skip


def _run(args: list[str]) -> tuple[float, float, float, str]:
    """Run a command: ``(wall s, CPU s, peak RSS MB, stdout + stderr)`` of that process alone."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {output[-400:]}")
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, output


def _median(args: list[str], repeat: int) -> dict:
    runs = [_run(args) for _ in range(repeat)]
    return {
        "wall_s": statistics.median(r[0] for r in runs),
        "cpu_s": statistics.median(r[1] for r in runs),
        "rss_mb": statistics.median(r[2] for r in runs),
        "output": runs[-1][3],
    }


def _iteration_ns(text: str) -> int | None:
    m = re.search(r"iteration time [^(]*\(([\d,]+) ns\)", text)
    return int(m.group(1).replace(",", "")) if m else None


def _llama(base: Path, repeat: int) -> dict:
    prefix = base / "llama" / "job"
    gen = _median([TRACEKIT, "-q", "generate", "llm", *LLAMA, "--hw", "dgx-h100", "--classes", "-o", str(prefix)], 1)
    plain = _median([TRACEKIT, "replay", str(prefix), "--hw", "dgx-h100"], repeat)
    result = base / "llama" / "result.json"
    with_o = _median([TRACEKIT, "replay", str(prefix), "--hw", "dgx-h100", "-o", str(result)], repeat)
    report = _median([TRACEKIT, "-q", "report", str(result), "-o", str(base / "llama" / "r.html")], repeat)
    return {
        "layout": "llama3-405b-like tp8 pp16 dp64 = 8192 ranks, global batch 2048, dgx-h100",
        "generate_s": gen["wall_s"],
        "replay_s": plain["wall_s"],
        "replay_cpu_s": plain["cpu_s"],
        "replay_rss_mb": plain["rss_mb"],
        "replay_o_s": with_o["wall_s"],
        "replay_o_cpu_s": with_o["cpu_s"],
        "replay_o_rss_mb": with_o["rss_mb"],
        "result_mb": result.stat().st_size / 1e6,
        "report_s": report["wall_s"],
        "report_rss_mb": report["rss_mb"],
        "iteration_time_ns": _iteration_ns(with_o["output"]),
        "same_iteration_time": _iteration_ns(with_o["output"]) == _iteration_ns(plain["output"]),
    }


def _convert(base: Path, name: str) -> Path:
    src = REAL / "pytorch" / name
    prefix = base / name / "job"
    if name == "param-resnet":
        args = ["--et", str(src / "resnet_et.json.gz")]
    else:
        for archive in ("dlrm_pytorch_et.tar.gz", "dlrm_kineto.tar.gz"):
            with tarfile.open(src / archive) as tar:
                tar.extractall(base / name, filter="data")
        et, kin = base / name / "dlrm_pytorch_et" / "dlrm_eg_*.json", base / name / "dlrm_kineto" / "worker*.json"
        args = ["--et", str(et), "--kineto", str(kin)]
    _run([TRACEKIT, "-q", "convert", "pytorch", *args, "-o", str(prefix)])
    return prefix


def _capture(base: Path, name: str, dp: int, repeat: int) -> dict:
    src = _convert(base, name) if not (base / name / "job.0.et").exists() else base / name / "job"
    out, result = base / name / f"dp{dp}" / "job", base / name / f"dp{dp}.json"
    steps = {
        "transform": [TRACEKIT, "-q", "transform", str(src), "--dp", str(dp), "-o", str(out)],
        "replay": [TRACEKIT, "replay", str(out), "--hw", "dgx-h100", "-o", str(result)],
        "report": [TRACEKIT, "-q", "report", str(result), "-o", str(base / name / f"dp{dp}.html")],
    }
    figures: dict = {}
    for step, args in steps.items():
        m = _median(args, repeat)
        figures.update({f"{step}_s": m["wall_s"], f"{step}_cpu_s": m["cpu_s"], f"{step}_rss_mb": m["rss_mb"]})
        if step == "replay":
            figures["iteration_time_ns"] = _iteration_ns(m["output"])
    figures["result_mb"] = result.stat().st_size / 1e6
    return figures


def main() -> dict:
    repeat = int(os.environ.get("BENCH_RESULT_REPEAT", "0") or 0)
    chosen = os.environ.get("BENCH_RESULT_JOBS", "llama,capture").split(",")
    base = Path(tempfile.mkdtemp(prefix="tracekit-result-scale-"))
    out: dict = {"note": "shared 2-core machine; medians of the runs given", "load_avg_1m": os.getloadavg()[0]}
    try:
        if "llama" in chosen:
            out.update({f"llama3_405b_8192.{k}": v for k, v in _llama(base, repeat or 1).items()})
            print(out, flush=True)
        if "capture" in chosen and not REAL.is_dir():
            out["capture.skipped"] = f"{REAL} not found"
        elif "capture" in chosen:
            for name in ("param-dlrm", "param-resnet"):
                for dp in (1024, 4096):
                    figures = _capture(base, name, dp, repeat or 3)
                    print(name, dp, figures, flush=True)
                    out.update({f"{name}_dp{dp}.{k}": v for k, v in figures.items()})
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
