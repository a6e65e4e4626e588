"""ASTRA-sim congestion-aware model on the largest recorded ASTRA-sim cases (issue 26 item 5).

Each case of ``../shared/reference/astra-sim/cases`` below (or ``$TRACEKIT_ASTRA_REFERENCE``) is replayed on the
spec ``hw import-astra --network-backend congestion_aware`` makes of its configs; figures are medians of
``BENCH_RUNS`` runs (default 3): compiling the set (which costs every collective alone on the network), the
simulation (every engine run the congestion-aware hook asks for: ``engine_runs``), and whether the per-rank times equal what ASTRA-sim's congestion-aware binary
printed (``518bd51_aware``).  Target: each case in seconds.
"""

from __future__ import annotations

import json
import os
import statistics
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REFERENCE = Path(os.environ.get("TRACEKIT_ASTRA_REFERENCE", HERE.parent.parent / "shared" / "reference" / "astra-sim"))
RUNS = int(os.environ.get("BENCH_RUNS", 3))
CASES = [
    "real-astra-sim-onecomm-64-FullyConnected",  # 64 NPUs, direct all-reduce, 4 splits: 32k messages
    "mix-chain-direct-Ring-p64-64MiB",  # 64 NPUs, four direct collectives in a chain, multi-hop ring
    "tk-llm-gpt3-1.3b-pp2-dp4-nometa",  # tracekit's LLM export: dp groups and pipeline sends share links
    "tk-llm-gpt3-1.3b-tp2-pp2-sp-nometa",
    "tk-text-Transformer_HybridParallel-p8-nometa",
]


def _traceset(case: Path, inputs: dict, npus: int, scratch: Path):
    from tracekit.io import read_traceset
    from tracekit.sets.traceset import TraceSet

    folder = case
    if inputs.get("workload_archive"):
        with tarfile.open(case / inputs["workload_archive"]) as tar:
            tar.extractall(scratch, filter="data")
        folder = scratch
    ts = read_traceset([str(folder / f"{inputs['workload']}.{k}.et") for k in range(npus)])
    declared = json.loads((case / inputs["groups"]).read_text()) if inputs.get("groups") else {}
    if not declared:
        return ts
    return TraceSet(dict(ts.items()), process_groups={name: tuple(m) for name, m in declared.items()})


def _bench_case(case: Path) -> dict:
    from tracekit.replayer import ReplayOptions
    from tracekit.replayer.results.build import build_result
    from tracekit.replayer.simulation.astra_config import import_astra_config
    from tracekit.replayer.simulation.engine import simulate
    from tracekit.replayer.simulation.program import compile_program, effective_spec

    recorded = json.loads((case / "result.json").read_text())
    inputs = recorded["inputs"]
    spec = import_astra_config(
        case / inputs["system"], case / inputs["network"], network_backend="congestion_aware"
    ).spec
    compile_s, sim_s, runs, exact = [], [], 0, False
    with tempfile.TemporaryDirectory() as tmp:
        ts = _traceset(case, inputs, recorded["ranks"], Path(tmp))
        options = ReplayOptions(check=False, fold=False)
        fitted = effective_spec(spec, options, ts.world_size)
        for _ in range(RUNS):
            t0 = time.perf_counter()
            program = compile_program(ts, fitted, options)
            t1 = time.perf_counter()
            schedule = simulate(program)
            sim_s.append(time.perf_counter() - t1)
            compile_s.append(t1 - t0)
            runs = program.member_ends.passes  # one replan() after every engine run
            result = build_result(program, schedule, ts)
            got = [s.iteration_time_ns for s in sorted(result.ranks, key=lambda s: s.rank)]
            exact = got == recorded["518bd51_aware"]
    return {
        "ranks": recorded["ranks"],
        "nodes": sum(len(t) for t in ts),
        "compile_s_median": statistics.median(compile_s),
        "simulate_s_median": statistics.median(sim_s),
        "simulate_s_range": [min(sim_s), max(sim_s)],
        "engine_runs": runs,
        "exact_vs_518bd51_aware": exact,
    }


def main() -> dict:
    if not (REFERENCE / "cases").is_dir():
        return {"skipped": f"no recorded ASTRA-sim cases at {REFERENCE}"}
    out = {}
    for name in CASES:
        figures = _bench_case(REFERENCE / "cases" / name)
        print(
            f"{name}: compile {figures['compile_s_median']:.2f} s, simulate {figures['simulate_s_median']:.2f} s "
            f"(medians of {RUNS}; {figures['engine_runs']} engine runs), exact {figures['exact_vs_518bd51_aware']}"
        )
        out.update({f"{name}: {key}": value for key, value in figures.items()})
    return out


if __name__ == "__main__":
    main()
