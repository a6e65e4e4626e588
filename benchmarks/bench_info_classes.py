"""`tracekit info` of a 1,048,576-rank rank-class set (issue 32: "a 1,000,000-rank class manifest runs info for
over 6 minutes").

The set: ``generate llm --classes`` of a 64-rank job (gpt3-1.3b, 2 layers, tp 8, pp 2: two classes, one per
pipeline stage), its manifest widened to ``BENCH_INFO_RANKS`` ranks (default 2^20, tracekit's limit), half per
class, each member with its class's first slot values.  ``info`` runs as a user runs it (its own process, the
terminal tables).  Figures: wall and CPU seconds and peak RSS of that process (``os.wait4``), the manifest's
size, and the 1-minute load average before the run (the machine is shared).  Measured on 2026-12-01 (2 cores,
load 12): before (a summary and a table key per rank) 15.1 s CPU, 91.6 s wall, 952 MB; after (one per class,
:mod:`tracekit.checks.member_summaries`) 5.2 s CPU, 31.9 s wall, 911 MB: the rest is reading the 62 MB manifest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRACEKIT = str(Path(sys.executable).with_name("tracekit"))


def _widen(manifest: Path, world: int, out: Path) -> Path:
    """``manifest``'s set with ``world`` ranks, half per class, written beside ``out`` (a prefix)."""
    doc = json.loads(manifest.read_text())
    half = world // len(doc["classes"])
    for k, c in enumerate(doc["classes"]):
        c["ranks"], c["values"] = list(range(k * half, (k + 1) * half)), [c["values"][0]] * half
        target = out.with_name(f"{out.name}.class{k}.et")
        target.write_bytes((manifest.parent / c["file"]).read_bytes())
        c["file"] = target.name
    doc["world_size"] = half * len(doc["classes"])
    path = out.with_name(f"{out.name}.classes.json")
    path.write_text(json.dumps(doc))
    return path


def main() -> dict:
    world = int(os.environ.get("BENCH_INFO_RANKS", str(1 << 20)))
    base = Path(tempfile.mkdtemp(prefix="tracekit-info-"))
    small = base / "small" / "j"
    gen = [TRACEKIT, "-q", "generate", "llm", "--model", "gpt3-1.3b", "--layers", "2", "--tp", "8", "--pp", "2"]
    gen += ["--ranks", "64", "--global-batch", "4", "--classes", "-o", str(small)]
    subprocess.run(gen, check=True, capture_output=True)
    manifest = _widen(small.with_name("j.classes.json"), world, base / "big")
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen([TRACEKIT, "info", str(base / "big")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"info failed: {out[-400:]}")
    figures = {
        "ranks": world,
        "manifest_mb": round(manifest.stat().st_size / 1e6, 1),
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024),
        "load_1min_before": load,
        "lines": len(out.splitlines()),
    }
    return figures


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
