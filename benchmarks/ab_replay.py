"""A/B replay throughput of two commits, robust on a shared machine: alternating subprocess runs, CPU time.

Usage::

    python benchmarks/ab_replay.py OLD [NEW] [--pairs N]

``OLD`` and ``NEW`` (default ``HEAD``) are commits; each is exported with ``git archive`` into a temporary
directory (the repository is not touched) and imported from there: ``tracekit/converters`` and
``tracekit/replayer`` are symlinked into the export as pyproject's ``package-dir`` maps them, and the
child drops the editable-install finder so no module of the working tree leaks into the other side.

Each pair runs the two sides' own ``benchmarks/bench_replay.py`` (same seeded workload; its size from
``BENCH_REPLAY_RANKS`` / ``BENCH_REPLAY_NODES``, ``BENCH_RUNS`` per child, default 3: with 1, compile is the first one, which decodes the columns and imports numba) in fresh processes,
in ABBA order (old-new, new-old, ...) so drifting machine load hits both sides alike.  The child times with
``time.process_time`` in place of ``time.perf_counter``: CPU seconds of the process, so time spent waiting
for a core on a loaded machine is not counted.  Reported per phase: each side's median seconds and the median
new/old ratio over the pairs with its range (below 1 = new is faster), plus simulated and end-to-end nodes/s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PHASES = ("simulate_s_median", "compile_s_median", "results_s_median")

CHILD = """
import json, sys, time
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
time.perf_counter = time.process_time  # CPU seconds of this process (see ab_replay.py)
sys.path.insert(0, {bench!r})
import tracekit
assert tracekit.__file__.startswith({tree!r}), tracekit.__file__
import bench_replay
print("@@RESULT@@" + json.dumps(bench_replay.main()))
"""


def export(commit: str, into: Path) -> Path:
    """``commit``'s tree under ``into``, importable as ``tracekit`` with ``into`` on ``PYTHONPATH``."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    for sub in ("converters", "replayer"):
        (into / "tracekit" / sub).symlink_to(into / sub, target_is_directory=True)
    return into


def run_side(tree: Path) -> dict:
    """One child process of ``tree``'s bench_replay; its figures (seconds are CPU seconds)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.setdefault("BENCH_RUNS", "3")  # the median leaves out the first compile (column decode, numba import)
    code = CHILD.format(bench=str(tree / "benchmarks"), tree=str(tree))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("@@RESULT@@")]
    if proc.returncode or not lines:
        raise SystemExit(f"bench_replay failed in {tree}:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("@@RESULT@@") :])


def summary(old: list[dict], new: list[dict]) -> dict:
    """Per phase: medians of each side and the median/min/max of the pairwise new/old ratio."""
    out: dict = {"pairs": len(old), "nodes": old[0]["nodes"]}
    for phase in (*PHASES, "end_to_end_s"):
        get = (lambda r: sum(r[p] for p in PHASES)) if phase == "end_to_end_s" else (lambda r, p=phase: r[p])
        ratios = [get(n) / get(o) for o, n in zip(old, new)]
        out[phase] = {
            "old_median": statistics.median(map(get, old)),
            "new_median": statistics.median(map(get, new)),
            "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
        }
    for side in ("old", "new"):
        out[f"{side}_simulated_nodes_per_s"] = out["nodes"] / out["simulate_s_median"][f"{side}_median"]
        out[f"{side}_end_to_end_nodes_per_s"] = out["nodes"] / out["end_to_end_s"][f"{side}_median"]
    if any(o["iteration_time_ns"] != n["iteration_time_ns"] for o, n in zip(old, new)):
        out["warning"] = "the two commits replay different iteration times"
    return out


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old")
    parser.add_argument("new", nargs="?", default="HEAD")
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ab_replay_") as tmp:
        trees = {side: export(commit, Path(tmp) / side) for side, commit in (("old", args.old), ("new", args.new))}
        results: dict[str, list[dict]] = {"old": [], "new": []}
        for i in range(args.pairs):
            for side in ("old", "new") if i % 2 == 0 else ("new", "old"):
                results[side].append(run_side(trees[side]))
                print(f"pair {i + 1} {side}: simulate {results[side][-1]['simulate_s_median']:.2f} s CPU", flush=True)
    out = summary(results["old"], results["new"])
    print(f"{out['nodes']:,} nodes, {out['pairs']} pairs, CPU seconds; new/old ratio median (range):")
    for phase in (*PHASES, "end_to_end_s"):
        f = out[phase]
        print(
            f"  {phase:18s} old {f['old_median']:7.2f} s  new {f['new_median']:7.2f} s  "
            f"ratio {f['ratio_median']:.3f} ({f['ratio_min']:.3f}-{f['ratio_max']:.3f})"
        )
    for side in ("old", "new"):
        print(
            f"  {side}: simulate {out[f'{side}_simulated_nodes_per_s']:,.0f} nodes/s, "
            f"end to end {out[f'{side}_end_to_end_nodes_per_s']:,.0f} nodes/s"
        )
    if "warning" in out:
        print("WARNING: " + out["warning"])
    return out


if __name__ == "__main__":
    main()
