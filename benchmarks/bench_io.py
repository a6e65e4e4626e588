"""Read + index throughput and memory of the .et I/O path (issue 2).

Workload: one rank file of 1,000,000 nodes, seeded: COMP nodes with names from
a small vocabulary, 1-2 data deps, a control dep, duration and two integer
attributes (num_ops, tensor_size); one COMM_COLL node in 1,000.

Measures (medians of several runs, with min-max spread):
  - tracekit read + index: read_trace() + columns() + graph() (id index, CSR
    predecessors/successors) + topological order;
  - pure-protobuf baseline: a Python loop of ParseFromString over the same
    records (no index at all);
  - resident memory per node of the indexed trace (tracemalloc peak of
    read + index, divided by the node count; the file bytes are included).
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from tracekit._proto import et_def_pb2 as pb
from tracekit.io import frame, read_trace, split_records

N_NODES = int(os.environ.get("BENCH_IO_NODES", 1_000_000))
RUNS = int(os.environ.get("BENCH_RUNS", 5))


def make_file(path: Path, n: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    names = ["aten::mm", "aten::add_", "aten::relu", "aten::layer_norm", "aten::softmax", "aten::copy_"]
    parts = [frame(pb.GlobalMetadata(version="0.0.4").SerializeToString())]
    durs = rng.integers(1, 500_000, size=n).tolist()
    back = rng.integers(1, 64, size=n).tolist()
    for i in range(n):
        m = pb.Node(id=i, name=names[i % len(names)], type=7 if i % 1000 == 999 else 4, duration_micros=durs[i] // 1000)
        if durs[i] % 1000:
            m.duration_nanos = durs[i]
        if i:
            m.data_deps.append(i - 1)
            m.ctrl_deps.append(max(0, i - back[i]))
        if i > 64 and i % 3 == 0:
            m.data_deps.append(i - back[i])
        a = m.attr.add(name="num_ops")
        a.int64_val = 2 * durs[i]
        b = m.attr.add(name="tensor_size")
        b.uint64_val = 4096
        if i % 1000 == 999:
            c = m.attr.add(name="comm_type")
            c.int64_val = 0
            d = m.attr.add(name="comm_size")
            d.int64_val = 1 << 20
        parts.append(frame(m.SerializeToString()))
    path.write_bytes(b"".join(parts))


def read_and_index(path: Path) -> int:
    trace = read_trace(path)
    graph = trace.graph()
    graph.topological_order()
    return graph.n


def protobuf_loop(path: Path) -> int:
    data = path.read_bytes()
    _, _, starts, ends = split_records(data)
    count = 0
    for s, e in zip(starts.tolist(), ends.tolist()):
        m = pb.Node()
        m.ParseFromString(data[s:e])
        count += 1
    return count


def timed(fn, path: Path, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        fn(path)
        out.append(time.perf_counter() - t0)
    return out


def main() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.0.et"
        t0 = time.perf_counter()
        make_file(path, N_NODES)
        print(
            f"generated {N_NODES:,} nodes ({path.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f} s",
            file=sys.stderr,
        )
        ours = timed(read_and_index, path, RUNS)
        base = timed(protobuf_loop, path, max(1, RUNS // 2))
        gc.collect()
        tracemalloc.start()
        trace = read_trace(path)
        graph = trace.graph()
        graph.topological_order()
        _, peak = tracemalloc.get_traced_memory()
        current, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del trace, graph
    med, base_med = statistics.median(ours), statistics.median(base)
    result = {
        "nodes": N_NODES,
        "read_index_s_median": med,
        "read_index_s_min": min(ours),
        "read_index_s_max": max(ours),
        "read_index_nodes_per_s": N_NODES / med,
        "protobuf_loop_s_median": base_med,
        "protobuf_loop_nodes_per_s": N_NODES / base_med,
        "speedup_vs_protobuf_loop": base_med / med,
        "resident_bytes_per_node": current / N_NODES,
        "peak_bytes_per_node": peak / N_NODES,
    }
    print(
        f"read+index: {result['read_index_nodes_per_s']:,.0f} nodes/s (median {med:.3f} s, "
        f"range {min(ours):.3f}-{max(ours):.3f} s, {RUNS} runs)"
    )
    print(
        f"protobuf ParseFromString loop: {result['protobuf_loop_nodes_per_s']:,.0f} nodes/s "
        f"(median {base_med:.3f} s); tracekit is {result['speedup_vs_protobuf_loop']:.1f}x faster"
    )
    print(
        f"memory: {result['resident_bytes_per_node']:.0f} B/node resident after read+index, "
        f"{result['peak_bytes_per_node']:.0f} B/node peak during it"
    )
    return result


if __name__ == "__main__":
    main()
