"""Transform throughput (issues 6 and 17): DP rescale, TP/PP rewrites, compaction, columnar transforms.

Workloads:
  - issue 17: ``tracekit transform --scale-compute 2 --compact`` end to end (read + transform + write,
    in-process: ``read_traceset``, ``Pipeline.run``, ``write_traceset``) on a 1,000,000-node rank
    (``BENCH_XF_NODES``) with the realistic mix of ``bench_read_mix`` (half COMP, half COMM_COLL with
    4-6 attributes); the same on a 100,000-node rank through the columnar path and through the
    per-node path (the nodes decoded first: the reference, measured in the same run).  CPU seconds
    (median of ``BENCH_RUNS`` runs, default 3, with min and max; the machine is shared), nodes per
    CPU second, and the medians of the read (with column decoding), transform and write steps;
  - a generated GPT-style job (8 layers, h 2048, 8 micro-batches) at tp 2 x pp 4
    x dp 8 (64 ranks): Rescale dp 8 -> 64 (512 ranks), ChangeTP 2 -> 4, ChangePP 4 -> 8;
  - the bundled Chakra feeder trace (3,664 nodes, 181,878 data deps): Compact.

Prints wall time (median of 3) and nodes written per second.  Run:
``.venv/bin/python benchmarks/bench_transform.py``; ``--columnar`` for the issue-17 figures only;
``--fresh`` for the issue-17 command's in-process CPU with each run in a new process (as a command runs:
the repeated runs of ``--columnar`` reuse memory the run before touched, which hides first-touch costs).

``--process [--runs N] [--file RANK.et]``: instead, the issue-17 command and ``tracekit info`` as a user runs
them, fresh processes with the ahead-of-time kernels and through numba's JIT (:func:`process_runs`).
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


def _e2e(path: Path, out: Path, *, decoded: bool) -> tuple[float, float, tuple[float, float, float]]:
    """CPU and wall seconds of read + ScaleCompute(2) + Compact + write of one rank (``decoded``: node path),
    and the CPU seconds of each of the three steps (reading includes decoding the columns)."""
    from tracekit.io import read_traceset, write_traceset
    from tracekit.transforms import Compact, Pipeline, ScaleCompute

    c0, w0 = time.process_time(), time.perf_counter()
    ts = read_traceset(str(path))
    for t in ts:
        t.nodes if decoded else t.columns()  # noqa: B018 - Node objects: the transforms take the node path
    c1 = time.process_time()
    for f in out.parent.glob(out.name + ".*"):
        f.unlink()
    result = Pipeline([ScaleCompute(2), Compact()]).run(ts, source=str(path))
    c2 = time.process_time()
    write_traceset(result, out)
    c3 = time.process_time()
    return c3 - c0, time.perf_counter() - w0, (c1 - c0, c2 - c1, c3 - c2)


def columnar_e2e() -> dict:
    """The issue-17 end-to-end figures (see the module docstring)."""
    import os
    import sys
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_read_mix import make_file

    runs = int(os.environ.get("BENCH_RUNS", 3))
    big = int(os.environ.get("BENCH_XF_NODES", 1_000_000))
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n, decoded in ((100_000, False), (100_000, True), (big, False)):
            src = Path(tmp) / f"mix{n}.0.et"
            if not src.exists():
                make_file(src, n)
            cpu, wall, steps = [], [], []
            for _ in range(runs if not (decoded and n > 100_000) else 1):
                c, w, parts = _e2e(src, Path(tmp) / "out", decoded=decoded)
                cpu.append(c)
                wall.append(w)
                steps.append(parts)
            med = statistics.median(cpu)
            label = f"e2e_{'nodes' if decoded else 'columnar'}_{n}"
            out[label + "_cpu_s"], out[label + "_cpu_s_range"] = med, [min(cpu), max(cpu)]
            out[label + "_wall_s"] = statistics.median(wall)
            out[label + "_nodes_per_cpu_s"] = n / med
            split = [statistics.median(p[k] for p in steps) for k in range(3)]
            for k, step in enumerate(("read", "transform", "write")):
                out[f"{label}_{step}_cpu_s"] = split[k]
            print(
                f"scale-compute 2 + compact, {'node path' if decoded else 'columnar '} {n:>9,} nodes: "
                f"{med:7.2f} s CPU ({min(cpu):.2f}-{max(cpu):.2f}), wall {statistics.median(wall):.2f} s, "
                f"{n / med:>10,.0f} nodes/CPU s; read {split[0]:.2f} s, transform {split[1]:.2f} s, "
                f"write {split[2]:.2f} s (medians)",
                flush=True,
            )
    return out


def main() -> dict:
    """`make bench`'s entry (benchmarks/run.py): the rewrites below, then the issue-17 figures: the columnar
    transform in process (:func:`columnar_e2e`) and the command as fresh processes (:func:`process_runs`, 7 runs)."""
    rewrites()
    return {**columnar_e2e(), **process_runs()}


def rewrites() -> None:
    """Rescale, ChangeTP, ChangePP of a generated 64-rank job and Compact of the feeder sample (printed)."""
    from tracekit.converters.generators.llm import generate_llm
    from tracekit.workloads.config import LLMConfig, ModelSpec, ParallelSpec
    from tracekit.io import read_trace
    from tracekit.transforms import ChangePP, ChangeTP, Rescale, compact_trace

    model = ModelSpec("bench", num_layers=8, hidden_size=2048, num_heads=16, seq_length=1024, vocab_size=51200)
    src = generate_llm(LLMConfig(model, ParallelSpec(dp=8, tp=2, pp=4), global_batch_size=64, micro_batch_size=1))
    for name, tr in (
        ("rescale dp 8 -> 64", Rescale(dp=64)),
        ("change tp 2 -> 4", ChangeTP(4)),
        ("change pp 4 -> 8", ChangePP(8)),
    ):
        secs, out = _time(lambda tr=tr: tr.apply(src))
        nodes = sum(len(t) for t in out)
        print(
            f"{name:22s} {len(src):4d} -> {len(out):4d} ranks, {nodes:9,d} nodes: {secs:7.3f} s "
            f"({nodes / secs:,.0f} nodes/s)"
        )
    trace = read_trace(ROOT / "sample_traces/chakra/feeder.0.et")
    secs, (out, stats) = _time(lambda: compact_trace(trace))
    print(
        f"{'compact feeder.0.et':22s} {stats.nodes_before} -> {stats.nodes_after} nodes, {stats.deps_before:,d} -> "
        f"{stats.deps_after:,d} deps (x{stats.dep_factor:.1f}): {secs:7.3f} s"
    )


def _child(argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """Wall, user and system seconds of one run of ``argv`` (its output discarded; a failure raises)."""
    import os
    import subprocess

    w0 = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - w0
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {child.returncode}: {child.stderr.read().decode()[-500:]}")
    child.stderr.close()
    return wall, usage.ru_utime, usage.ru_stime


def process_runs(runs: int = 7, path: str | None = None) -> dict:
    """The issue-17 command as a user runs it: ``tracekit transform <1M-node rank> --scale-compute 2 --compact -o
    OUT`` (OUT removed between runs) and ``tracekit info <rank>``, each a fresh process ``runs`` times with the
    ahead-of-time kernels and with ``TRACEKIT_AOT=0`` (numba's JIT, its cache warm), the two alternating so drifting
    load hits both alike. Prints the median and range of wall, user and system seconds of each; the target is
    <= 1.0 s wall for the transform (1 M nodes/s). ``path``: an existing rank file (default: a
    ``BENCH_XF_NODES``-node mix of ``bench_read_mix`` made in a temporary directory)."""
    import os
    import sys
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_read_mix import make_file

    exe = str(Path(sys.executable).with_name("tracekit"))
    base = {k: v for k, v in os.environ.items() if k != "TRACEKIT_AOT"}
    modes = {"aot": base, "jit": dict(base, TRACEKIT_AOT="0")}
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        src = path or str(Path(tmp) / "mix.0.et")
        if path is None:
            make_file(Path(src), int(os.environ.get("BENCH_XF_NODES", 1_000_000)))
        commands = {
            "transform": [exe, "transform", src, "--scale-compute", "2", "--compact", "-o", f"{tmp}/out/x"],
            "info": [exe, "info", src],
        }
        for command, argv in commands.items():
            times: dict[str, list[tuple[float, float, float]]] = {mode: [] for mode in modes}
            for _ in range(runs):
                for mode, env in modes.items():
                    for old in Path(tmp).glob("out/x.*"):
                        old.unlink()
                    times[mode].append(_child(argv, env))
            for mode, samples in times.items():
                line = []
                for k, what in enumerate(("wall", "user", "sys")):
                    values = [t[k] for t in samples]
                    med = statistics.median(values)
                    out[f"process_{command}_{mode}_{what}_s"] = med
                    out[f"process_{command}_{mode}_{what}_s_range"] = [min(values), max(values)]
                    line.append(f"{what} {med:.2f} s ({min(values):.2f}-{max(values):.2f})")
                print(f"tracekit {command:9s} {mode}: " + ", ".join(line) + f"; {runs} runs", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return out


def _cpu() -> tuple[float, float]:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_stime


def _cli_steps(path: Path, out: Path) -> list[float]:
    """CPU seconds of what ``tracekit transform PATH --scale-compute 2 --compact -o OUT`` does in-process
    (``cli/transform.py`` ``_transform_in_memory``): read + duplicate-id check (which decodes the columns),
    the two steps, the write; then the total and its system part."""
    from tracekit.cli._common import warn_duplicate_ids
    from tracekit.io import read_traceset, write_traceset
    from tracekit.transforms import Compact, Pipeline, ScaleCompute

    for f in out.parent.glob(out.name + ".*"):
        f.unlink()
    m = [_cpu()]
    ts = read_traceset(str(path))
    warn_duplicate_ids(ts)
    m.append(_cpu())
    result = Pipeline([ScaleCompute(2), Compact()]).run(ts, source=str(path))
    m.append(_cpu())
    write_traceset(result, out)
    m.append(_cpu())
    return [m[k + 1][0] - m[k][0] for k in range(3)] + [m[3][0] - m[0][0], m[3][1] - m[0][1]]


def fresh_e2e() -> None:
    """The issue-17 command's in-process CPU as a command has it: each run in a new process (its memory
    never touched before, as a command's is; on a virtual machine first touches cost system time), after
    the kernels are loaded on a 2,000-node file (numba's start-up is not counted).  ``BENCH_RUNS`` runs
    (default 5) of ``BENCH_XF_NODES`` nodes (default 1,000,000); medians with min and max, and the load."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_read_mix import make_file

    runs = int(os.environ.get("BENCH_RUNS", 5))
    n = int(os.environ.get("BENCH_XF_NODES", 1_000_000))
    with tempfile.TemporaryDirectory() as tmp:
        src, small = Path(tmp) / f"mix{n}.0.et", Path(tmp) / "small.0.et"
        make_file(src, n)
        make_file(small, 2000)
        rows = []
        for _ in range(runs):
            cmd = [sys.executable, __file__, "--one", str(src), str(small), tmp]
            rows.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
            time.sleep(2.5)  # memory the last run freed goes back to the host (free page reporting) as between commands
    rows = [[*r, r[3] - r[4]] for r in rows]  # user CPU: steadier than system time, which first touches drive
    names = ("read + columns", "transform", "write", "total", "of it system", "of it user")
    parts = []
    for k, name in enumerate(names):
        v = [r[k] for r in rows]
        parts.append(f"{name} {statistics.median(v):.3f} s ({min(v):.2f}-{max(v):.2f})")
    print(f"transform --scale-compute 2 --compact, {n:,} nodes, fresh processes, CPU medians: " + ", ".join(parts))
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)


def _one(src: str, small: str, tmp: str) -> None:
    """One fresh-process run of :func:`fresh_e2e` (JSON list of its figures on stdout)."""
    import json

    _cli_steps(Path(small), Path(tmp) / "warm")
    print(json.dumps(_cli_steps(Path(src), Path(tmp) / "out")))


if __name__ == "__main__":
    import sys as _sys

    if "--process" in _sys.argv:  # [--runs N] [--file RANK.et]
        _args = _sys.argv[_sys.argv.index("--process") + 1 :]
        _runs = int(_args[_args.index("--runs") + 1]) if "--runs" in _args else 7
        process_runs(_runs, _args[_args.index("--file") + 1] if "--file" in _args else None)
    elif "--one" in _sys.argv:
        _one(*_sys.argv[2:5])
    elif "--fresh" in _sys.argv:
        fresh_e2e()
    elif "--columnar" in _sys.argv:
        columnar_e2e()
    else:
        main()
