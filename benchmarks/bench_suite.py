"""The cross-cutting benchmark suite (issue 7): every stage of the toolchain on fixed, seeded workloads.

Workloads (all deterministic; generators have no randomness):

* generated LLM jobs of 8, 64, 512 and 4,096 ranks: GPT-3 1.3B shape
  (Brown et al. 2020), tp 2 x pp 4 x dp (ranks / 8), 4 micro-batches per
  pipeline, 1F1B, roofline durations for an A100 (312 TFLOP/s, 2,039 GB/s);
* the large real PyTorch ETs in ``../shared/real/pytorch``: param-hf-gpt2
  (27,156 ET nodes, no Kineto) and param-resnet (14,392 ET nodes + 111,631
  Kineto events).

Stages: generate (``write_llm``), read (``read_traceset`` + column decode of
every rank), write (``write_traceset``: untouched records are copied),
validate (``validate_traceset``), transform (``ScaleCompute`` then encode:
every node decoded, rewritten and re-encoded; jobs of up to 64 ranks), replay (dgx-h100,
alpha-beta), convert (PyTorch ET [+ Kineto] to Chakra).  Each figure is the
median of ``BENCH_RUNS`` runs (default 3; 1 for the 4,096-rank job) with its
min and max, a throughput in nodes/s, and the peak of Python-tracked memory
(``tracemalloc``, numpy included) of one extra run, in bytes per node.

Side by side in the same run: our ``.et`` read rate against a pure-protobuf
Python loop (``ParseFromString`` per record, no index) over the same files.

Environment: ``BENCH_RUNS``; ``BENCH_SIZES`` (comma list, default
``8,64,512,4096``); ``BENCH_REPLAY_MAX_RANKS`` (default 512: replay larger
jobs only with rank folding).
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

RUNS = int(os.environ.get("BENCH_RUNS", 3))
SIZES = tuple(int(s) for s in os.environ.get("BENCH_SIZES", "8,64,512,4096").split(","))
REPLAY_MAX_RANKS = int(os.environ.get("BENCH_REPLAY_MAX_RANKS", 512))
REAL = Path(os.environ.get("TRACEKIT_REAL_DATA", Path(__file__).resolve().parents[2] / "shared" / "real"))


# ----------------------------------------------------------------------------- measuring
def measure(fn: Callable[[], Any], nodes: int, runs: int, *, memory: bool = True) -> dict:
    """Median/min/max wall time of ``fn`` over ``runs`` runs, nodes/s, and the tracemalloc peak of one run."""
    times = []
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        del out
    med = statistics.median(times)
    fig = {
        "s_median": med,
        "s_min": min(times),
        "s_max": max(times),
        "runs": runs,
        "nodes_per_s": nodes / med if med > 0 else None,
    }
    if memory:
        gc.collect()
        tracemalloc.start()
        out = fn()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del out
        fig["peak_mb"] = peak / 1e6
        fig["peak_bytes_per_node"] = peak / nodes if nodes else None
    return fig


def _say(name: str, fig: dict) -> None:
    rate = f"{fig['nodes_per_s']:>12,.0f} nodes/s" if fig.get("nodes_per_s") else " " * 20
    mem = f"  peak {fig['peak_mb']:8.1f} MB ({fig['peak_bytes_per_node']:.0f} B/node)" if "peak_mb" in fig else ""
    print(
        f"  {name:34s} {fig['s_median']:8.3f} s (min {fig['s_min']:.3f}, max {fig['s_max']:.3f}, "
        f"n={fig['runs']}) {rate}{mem}",
        flush=True,
    )


# ----------------------------------------------------------------------------- workloads
def llm_config(ranks: int):
    from tracekit.converters.generators import LLMConfig, ParallelSpec, llm_preset

    model, _ = llm_preset("gpt3-1.3b")
    dp = ranks // 8
    return LLMConfig(model, ParallelSpec(dp=dp, tp=2, pp=4), global_batch_size=4 * dp, micro_batch_size=1)


def protobuf_loop(paths: list[Path]) -> int:
    """The baseline: read each file and ParseFromString every record (no index, no columns)."""
    from tracekit._proto import et_def_pb2 as pb
    from tracekit.io import split_records

    count = 0
    for path in paths:
        data = path.read_bytes()
        _, _, starts, ends = split_records(data)
        for s, e in zip(starts.tolist(), ends.tolist()):
            m = pb.Node()
            m.ParseFromString(data[s:e])
            count += 1
    return count


def read_all(prefix: str):
    from tracekit.io import read_traceset

    ts = read_traceset(prefix)
    for trace in ts:
        trace.columns()
    return ts


def bench_llm(ranks: int, tmp: Path) -> dict:
    from tracekit.converters.generators import Roofline, write_llm
    from tracekit.io import encode_trace, write_traceset
    from tracekit.transforms.scale import ScaleCompute
    from tracekit.checks.validate import validate_traceset

    runs = 1 if ranks >= 4096 else RUNS
    config = llm_config(ranks)
    a100 = Roofline(312e12, 2039e9)
    prefix = tmp / f"llm{ranks}" / "job"
    prefix.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    paths = write_llm(config, prefix, a100)
    gen_s = time.perf_counter() - t0
    ts = read_all(str(prefix))
    nodes = sum(len(t) for t in ts)
    size = sum(p.stat().st_size for p in paths)
    out: dict[str, Any] = {"ranks": ranks, "nodes": nodes, "bytes_on_disk": size, "nodes_per_rank": nodes / ranks}
    print(
        f"llm {ranks} ranks: {nodes:,} nodes, {size / 1e6:.1f} MB ({config.model.name}, tp 2 pp 4 dp "
        f"{ranks // 8}); generated in {gen_s:.2f} s",
        flush=True,
    )
    out["generate"] = {"s_median": gen_s, "s_min": gen_s, "s_max": gen_s, "runs": 1, "nodes_per_s": nodes / gen_s}
    _say("generate (write_llm)", out["generate"])
    out["read"] = measure(lambda: read_all(str(prefix)), nodes, runs)
    _say("read + decode columns", out["read"])
    base_runs = max(1, runs // 2) if ranks < 512 else 1
    out["protobuf_loop"] = measure(lambda: protobuf_loop(paths), nodes, base_runs, memory=False)
    _say("pure-protobuf ParseFromString loop", out["protobuf_loop"])
    out["read_speedup_vs_protobuf"] = out["protobuf_loop"]["s_median"] / out["read"]["s_median"]
    print(f"  -> our read is {out['read_speedup_vs_protobuf']:.1f}x the protobuf loop", flush=True)
    wdir = tmp / f"llm{ranks}" / "copy"
    out["write"] = measure(lambda: write_traceset(ts, wdir / "job"), nodes, runs, memory=ranks < 4096)
    _say("write (records copied)", out["write"])
    shutil.rmtree(wdir, ignore_errors=True)
    big = ranks >= 4096
    out["validate"] = measure(lambda: validate_traceset(ts), nodes, runs, memory=not big)
    _say("validate_traceset", out["validate"])
    if ranks <= 64:

        def transform():
            fresh = read_all(str(prefix))
            res = ScaleCompute(0.5).apply(fresh)
            return [encode_trace(t) for t in res]

        out["transform"] = measure(transform, nodes, runs)
        _say("transform (ScaleCompute, re-encode)", out["transform"])
    out["replay"] = bench_replay(ts, nodes, runs, str(prefix))
    del ts
    shutil.rmtree(prefix.parent, ignore_errors=True)
    return out


def _fold_field() -> str | None:
    """The ReplayOptions field that switches rank folding, if the engine has one."""
    from dataclasses import fields

    from tracekit.replayer import ReplayOptions

    names = {f.name for f in fields(ReplayOptions)}
    return next((n for n in ("fold", "fold_ranks", "rank_folding") if n in names), None)


def bench_replay(ts, nodes: int, runs: int, prefix: str | None = None) -> dict:
    from tracekit.replayer import ReplayOptions, replay

    out: dict[str, Any] = {}
    fold = _fold_field()
    variants = [("unfolded", ReplayOptions(**({fold: False} if fold else {})))]
    if fold:
        variants.append(("folded", ReplayOptions(**{fold: True})))
    for label, options in variants:
        if label == "unfolded" and ts.world_size > REPLAY_MAX_RANKS:
            out[label] = {"skipped": f"more than {REPLAY_MAX_RANKS} ranks (BENCH_REPLAY_MAX_RANKS)"}
            continue
        # cold: a freshly read set (the replay decodes the attribute columns it needs); warm: columns cached
        if prefix is not None:
            out[label + "_cold_incl_read"] = measure(
                lambda: replay(read_all(prefix), "dgx-h100", options=options), nodes, runs, memory=False
            )
            _say(f"read + replay {label} (cold)", out[label + "_cold_incl_read"])
        result = replay(ts, "dgx-h100", options=options)
        out[label] = measure(lambda: replay(ts, "dgx-h100", options=options), nodes, runs)
        out[label]["iteration_time_ns"] = result.iteration_time_ns
        _say(f"replay {label} (warm, dgx-h100)", out[label])
    if not fold:
        out["folded"] = {"skipped": "the engine has no rank folding option yet"}
    elif "s_median" in out.get("unfolded", {}) and "s_median" in out["folded"]:
        out["fold_speedup"] = out["unfolded"]["s_median"] / out["folded"]["s_median"]
        out["fold_equal"] = out["unfolded"]["iteration_time_ns"] == out["folded"]["iteration_time_ns"]
    return out


def bench_real(tmp: Path) -> dict:
    from tracekit.converters.pytorch import convert_rank
    from tracekit.io import write_trace
    from tracekit.checks.validate import validate_trace

    out: dict[str, Any] = {}
    d = REAL / "pytorch"
    jobs = {
        "param-hf-gpt2": (d / "param-hf-gpt2" / "hf_GPT2_et.json.tar.gz", None, 27_156),
        "param-resnet": (
            d / "param-resnet" / "resnet_et.json.gz",
            d / "param-resnet" / "resnet_kineto.json.gz",
            14_392,
        ),
    }
    for name, (et, kineto, et_nodes) in jobs.items():
        if not et.is_file():
            out[name] = {"skipped": f"{et} not found"}
            continue
        print(f"real {name}: {et_nodes:,} ET nodes" + (" + Kineto" if kineto else ""), flush=True)
        fig: dict[str, Any] = {"et_nodes": et_nodes}
        fig["convert"] = measure(lambda: convert_rank(et, kineto, rank=0), et_nodes, RUNS)
        _say("convert (ET nodes/s)", fig["convert"])
        trace = convert_rank(et, kineto, rank=0).trace
        path = tmp / f"{name}.0.et"
        write_trace(trace, path)
        n = len(trace)
        fig["chakra_nodes"] = n
        fig["read"] = measure(lambda: read_all(str(path)), n, RUNS)
        _say("read .et + decode columns", fig["read"])
        fig["protobuf_loop"] = measure(lambda: protobuf_loop([path]), n, RUNS, memory=False)
        _say("pure-protobuf loop", fig["protobuf_loop"])
        fig["read_speedup_vs_protobuf"] = fig["protobuf_loop"]["s_median"] / fig["read"]["s_median"]
        fig["validate"] = measure(lambda: validate_trace(read_all(str(path))[0]), n, RUNS)
        _say("read + validate", fig["validate"])
        out[name] = fig
    return out


def main() -> dict:
    results: dict[str, Any] = {"runs": RUNS, "sizes": list(SIZES)}
    tmp = Path(tempfile.mkdtemp(prefix="tracekit-bench-"))
    try:
        for ranks in SIZES:
            results[f"llm_{ranks}"] = bench_llm(ranks, tmp)
        results["real"] = bench_real(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return results


if __name__ == "__main__":
    import json

    json.dump(main(), sys.stdout, indent=1, default=str)
