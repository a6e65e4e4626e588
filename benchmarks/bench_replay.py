"""Replay throughput: simulated nodes per second on a large generated trace set (issue 4).

Workload (seeded, data-parallel training shaped; every rank runs the same
program): per rank ``BENCH_REPLAY_NODES`` nodes (default 100,000):

- a host thread that launches the step: one CPU op per 100 kernels, each
  depending on the previous CPU op (so host and device overlap);
- a forward chain of kernels on compute stream 0, then a backward chain;
  every 500 backward kernels a gradient bucket is all-reduced (16 MiB,
  COMM_COLL on comm stream 0, all ranks) and the next kernel does not wait
  for it (overlap); a second process group (the rank's node of 8) runs a
  4 MiB all-gather each bucket too;
- an optimizer chain on compute stream 1 that waits for every all-reduce;
- durations drawn from 1-50 us.

``BENCH_REPLAY_RANKS`` ranks (default 64) on ``dgx-h100`` fitted to them
(alpha-beta model, bandwidth sharing on).  Measured separately, medians of
``BENCH_RUNS`` runs: compiling the trace set into the engine's arrays
(:func:`compile_program`; its first run also builds each trace's cached
column index and attribute columns, reported as ``compile_first_s``), the
simulation alone (:func:`simulate`), and building the result; plus the
up-front checks once.  The headline figure is simulated nodes per second of
the simulation; the end-to-end figure includes compile and results.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

from tracekit.model.groups import pg_init_node
from tracekit.model import Attr, CollectiveType, ExecutionTrace, Node, NodeType
from tracekit.sets.traceset import TraceSet

N_RANKS = int(os.environ.get("BENCH_REPLAY_RANKS", 64))
N_NODES = int(os.environ.get("BENCH_REPLAY_NODES", 100_000))
RUNS = int(os.environ.get("BENCH_RUNS", 3))
BUCKET = 500
LAUNCH_EVERY = int(os.environ.get("BENCH_REPLAY_LAUNCH_EVERY", 100))


def _coll(node_id: int, name: str, ctype: CollectiveType, nbytes: int, pg: str, deps: list[int]) -> Node:
    return Node(
        node_id,
        name,
        NodeType.COMM_COLL_NODE,
        data_deps=deps,
        attrs=[
            Attr("is_cpu_op", False, "bool_val"),
            Attr("comm_type", int(ctype), "int64_val"),
            Attr("comm_size", nbytes, "int64_val"),
            Attr("pg_name", pg, "string_val"),
        ],
    )


def rank_nodes(n_nodes: int, world: int, seed: int = 0) -> tuple[list[Node], dict[str, tuple[int, ...]]]:
    """One rank's program (the same on every rank; the node group is the rank's block of 8)."""
    rng = np.random.default_rng(seed)
    groups = {"0": (), "1": tuple(range(min(8, world)))}
    nodes: list[Node] = [pg_init_node(0, groups)]
    durs = rng.integers(1_000, 50_000, size=n_nodes).tolist()
    nid = 1
    n_buckets = max(1, n_nodes // (2 * BUCKET + 2 * BUCKET // LAUNCH_EVERY + 2) // 2)
    n_opt = max(10, n_nodes // 10)
    budget = n_nodes - 1 - n_opt - 2 * n_buckets  # kernels plus their launches
    n_kernels = budget * LAUNCH_EVERY // (LAUNCH_EVERY + 1)
    n_fwd = n_kernels // 2
    n_bwd = n_kernels - n_fwd
    prev_kernel = None
    prev_launch = None
    reduces = []
    for k in range(n_fwd + n_bwd):
        if k % LAUNCH_EVERY == 0:
            deps = [prev_launch] if prev_launch is not None else []
            nodes.append(
                Node(
                    nid,
                    "launch",
                    NodeType.COMP_NODE,
                    data_deps=deps,
                    duration_ns=durs[nid % n_nodes] // 10,
                    attrs=[Attr("is_cpu_op", True, "bool_val")],
                )
            )
            prev_launch = nid
            nid += 1
        deps = [prev_kernel] if prev_kernel is not None else []
        if k % LAUNCH_EVERY == 0:
            deps.append(prev_launch)
        nodes.append(Node(nid, "kernel", NodeType.COMP_NODE, data_deps=deps, duration_ns=durs[nid % n_nodes]))
        prev_kernel = nid
        nid += 1
        if k >= n_fwd and (k - n_fwd) % BUCKET == BUCKET - 1 and len(reduces) < n_buckets:
            nodes.append(_coll(nid, "all_reduce", CollectiveType.ALL_REDUCE, 16 << 20, "0", [prev_kernel]))
            reduces.append(nid)
            nid += 1
            nodes.append(_coll(nid, "all_gather", CollectiveType.ALL_GATHER, 4 << 20, "1", [prev_kernel]))
            nid += 1
    prev = None
    for j in range(n_nodes - len(nodes)):
        deps = [prev] if prev is not None else (reduces + [prev_kernel])
        nodes.append(
            Node(
                nid,
                "optimizer",
                NodeType.COMP_NODE,
                data_deps=deps,
                duration_ns=durs[j],
                attrs=[Attr("stream", 1, "int64_val")],
            )
        )
        prev = nid
        nid += 1
    return nodes, groups


def make_traceset(n_ranks: int, n_nodes: int) -> TraceSet:
    """``n_ranks`` ranks of :func:`rank_nodes`; each rank's all-gathers on its node's group ``node<k>``.

    Each rank's ``process_group:init`` node declares the groups that rank uses (all ranks, its node of 8), so
    the set's groups are the union of the traces' declarations and survive writing to rank files (the set once
    declared the node groups only in memory, over a stale ``"1"`` = ranks 0-7 on every rank: read back from
    files, ranks 8 and up named a group no file declared).
    """
    nodes, _ = rank_nodes(n_nodes, n_ranks)
    traces = {}
    for r in range(n_ranks):
        base = r - r % 8
        block = f"node{base // 8}"
        init = pg_init_node(0, {"0": (), block: tuple(range(base, min(base + 8, n_ranks)))}, world_size=n_ranks)
        rank_list = [init] + [n if n.pg_name != "1" else _regroup(n, block) for n in nodes[1:]]
        traces[r] = ExecutionTrace(rank_list, rank=r)
    return TraceSet(traces)


def _regroup(node: Node, pg: str) -> Node:
    attrs = [Attr("pg_name", pg, "string_val") if a.name == "pg_name" else a for a in node.attrs]
    return Node(node.id, node.name, node.type, data_deps=node.data_deps, attrs=attrs)


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> dict:
    from tracekit.replayer import ReplayOptions
    from tracekit.replayer.simulation.program import compile_program, effective_spec
    from tracekit.replayer.simulation.checks import check_replay_inputs
    from tracekit.replayer.simulation.engine import simulate
    from tracekit.replayer.simulation.specs import load_spec
    from tracekit.replayer.results.build import build_result

    t0 = time.perf_counter()
    ts = make_traceset(N_RANKS, N_NODES)
    total = sum(len(t) for t in ts)
    print(
        f"generated {N_RANKS} ranks x {N_NODES:,} nodes = {total:,} nodes in {time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
    )
    spec = load_spec("dgx-h100")
    options = ReplayOptions(check=False)
    fitted = effective_spec(spec, options, ts.world_size)
    t0 = time.perf_counter()
    check_replay_inputs(ts, spec)
    checks_s = time.perf_counter() - t0
    compile_s, sim_s, result_s = [], [], []
    iteration = None
    for _ in range(RUNS):
        t0 = time.perf_counter()
        program = compile_program(ts, fitted, options)
        t1 = time.perf_counter()
        sched = simulate(program)
        t2 = time.perf_counter()
        result = build_result(program, sched, ts)
        t3 = time.perf_counter()
        compile_s.append(t1 - t0)
        sim_s.append(t2 - t1)
        result_s.append(t3 - t2)
        if iteration is not None and result.iteration_time_ns != iteration:
            raise SystemExit("replay is not deterministic")
        iteration = result.iteration_time_ns
        del program, sched
    sim, comp, res = _median(sim_s), _median(compile_s), _median(result_s)
    out = {
        "ranks": N_RANKS,
        "nodes": total,
        "simulate_s_median": sim,
        "simulate_s_min": min(sim_s),
        "simulate_s_max": max(sim_s),
        "simulated_nodes_per_s": total / sim,
        "compile_s_median": comp,
        "compile_first_s": compile_s[0],
        "results_s_median": res,
        "checks_s": checks_s,
        "end_to_end_nodes_per_s": total / (sim + comp + res),
        "iteration_time_ns": iteration,
        "collectives": len(result.collectives),
    }
    print(
        f"simulate: {out['simulated_nodes_per_s']:,.0f} nodes/s (median {sim:.2f} s, range "
        f"{min(sim_s):.2f}-{max(sim_s):.2f} s, {RUNS} runs); compile {comp:.2f} s (first, building the "
        f"traces' column indexes: {compile_s[0]:.2f} s), results {res:.2f} s, "
        f"checks {checks_s:.2f} s; end to end (no checks) {out['end_to_end_nodes_per_s']:,.0f} nodes/s; "
        f"iteration {iteration / 1e6:.3f} ms, {len(result.collectives)} collectives"
    )
    return out


if __name__ == "__main__":
    main()
