"""`make bench`: run every benchmarks/bench_*.py and collect their figures.

Each benchmark module has a ``main() -> dict`` returning its figures (medians
with spreads, throughputs, memory).  This runner executes each module in its
own Python process (so peak memory is that module's alone), records wall time
and the child's peak resident memory (``ru_maxrss``), writes everything to
``benchmarks/results/results.json`` and prints a table.

Usage: ``python benchmarks/run.py [NAME ...]`` (names without ``bench_``).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

CHILD = """
import json, sys, resource
sys.path.insert(0, {here!r})
import importlib
mod = importlib.import_module({name!r})
out = mod.main() or {{}}
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("@@RESULT@@" + json.dumps(out, default=str))
"""


def run_one(name: str) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.format(here=str(HERE), name=name)], capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    sys.stderr.write(proc.stderr)
    for line in proc.stdout.splitlines():
        if line.startswith("@@RESULT@@"):
            result = json.loads(line[len("@@RESULT@@") :])
            break
        print(line)
    else:
        return {"error": f"exit code {proc.returncode}", "wall_s": wall}
    result["wall_s"] = wall
    return result


def main(argv: list[str]) -> int:
    names = [f"bench_{a}" if not a.startswith("bench_") else a for a in argv] or sorted(
        p.stem for p in HERE.glob("bench_*.py")
    )
    results = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "benchmarks": {},
    }
    for name in names:
        print(f"== {name}", flush=True)
        results["benchmarks"][name] = run_one(name)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "results.json"
    if argv and path.exists():  # a partial run updates its benchmarks and keeps the others' figures
        previous = json.loads(path.read_text())
        previous.get("benchmarks", {}).update(results["benchmarks"])
        results["benchmarks"] = previous["benchmarks"]
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    from rich.console import Console
    from rich.table import Table

    table = Table(title="tracekit benchmarks (benchmarks/results/results.json)")
    table.add_column("benchmark")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, figures in results["benchmarks"].items():
        for key, value in figures.items():
            text = f"{value:,.3f}" if isinstance(value, float) else str(value)
            table.add_row(name, key, text)
    Console().print(table)
    failed = [n for n, f in results["benchmarks"].items() if "error" in f]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
