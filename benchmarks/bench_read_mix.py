"""Reading a realistic node mix (issue 17, "Must show" 2): half COMP, half COMM_COLL with 4-6 attributes.

Workload (seeded): 1,000,000 nodes; even ids COMP (``num_ops``, ``tensor_size``,
``stream``, ``is_cpu_op``), odd ids COMM_COLL (``comm_type``, ``comm_size``,
``pg_name``, ``stream``, and on every third one ``comm_tag``, ``op_role``);
one data dependency on the previous node.

Figures, each beside the reference measured in the same run (median of
``BENCH_RUNS`` runs, default 3, with min and max; the machine is shared):

- ``info``: what ``tracekit info`` does per rank (read + ``summarize_trace``);
- ``nodes``: ``read_trace(path).nodes`` (Python ``Node`` objects), on the first
  ``BENCH_MIX_VIEW_NODES`` nodes (default 100,000; it is the slow path);
- ``iter_nodes``: streaming every node;
- reference: a plain protobuf ``ParseFromString`` loop over the same records;
- memory: tracemalloc peak of the ``info`` path per node.
"""

from __future__ import annotations

import gc
import os
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

N_NODES = int(os.environ.get("BENCH_MIX_NODES", 1_000_000))
VIEW_NODES = int(os.environ.get("BENCH_MIX_VIEW_NODES", 100_000))
RUNS = int(os.environ.get("BENCH_RUNS", 3))


def make_file(path: Path, n: int, seed: int = 0) -> None:
    from tracekit._proto import et_def_pb2 as pb
    from tracekit.io import frame

    rng = np.random.default_rng(seed)
    durs = rng.integers(1, 500_000, size=n).tolist()
    parts = [frame(pb.GlobalMetadata(version="0.0.4").SerializeToString())]
    for i in range(n):
        m = pb.Node(id=i, name="aten::mm" if i % 2 == 0 else "nccl:all_reduce", type=4 if i % 2 == 0 else 7,
                    duration_micros=durs[i] // 1000)
        if i:
            m.data_deps.append(i - 1)
        if i % 2 == 0:
            m.attr.add(name="num_ops").int64_val = 2 * durs[i]
            m.attr.add(name="tensor_size").uint64_val = 4096
            m.attr.add(name="stream").int64_val = 7
            m.attr.add(name="is_cpu_op").bool_val = False
        else:
            m.attr.add(name="comm_type").int64_val = 0
            m.attr.add(name="comm_size").int64_val = 1 << 20
            m.attr.add(name="pg_name").string_val = str(i % 8)
            m.attr.add(name="stream").int64_val = 9
            if i % 3 == 0:
                m.attr.add(name="comm_tag").int64_val = i
                m.attr.add(name="op_role").string_val = "dp_grad_allreduce"
        parts.append(frame(m.SerializeToString()))
    path.write_bytes(b"".join(parts))


def info_path(path: Path) -> int:
    from tracekit.io import read_trace
    from tracekit.summary import summarize_trace

    return summarize_trace(read_trace(path)).nodes


def node_view(path: Path) -> int:
    from tracekit.io import read_trace

    return len(read_trace(path).nodes)


def stream(path: Path) -> int:
    from tracekit.io import iter_nodes

    return sum(1 for _ in iter_nodes(path))


def protobuf_loop(path: Path) -> int:
    from tracekit._proto import et_def_pb2 as pb
    from tracekit.io import split_records

    data = path.read_bytes()
    _, _, starts, ends = split_records(data)
    for s, e in zip(starts.tolist(), ends.tolist()):
        pb.Node().ParseFromString(data[s:e])
    return len(starts)


def _timed(fn, path: Path) -> list[float]:
    out = []
    for _ in range(RUNS):
        gc.collect()
        t0 = time.perf_counter()
        fn(path)
        out.append(time.perf_counter() - t0)
    return out


def _figure(name: str, n: int, times: list[float], ref: float, out: dict) -> None:
    med = statistics.median(times)
    out[f"{name}_nodes_per_s"] = n / med
    out[f"{name}_s_median"] = med
    out[f"{name}_s_range"] = [min(times), max(times)]
    out[f"{name}_vs_protobuf_loop"] = (n / med) / ref
    print(f"{name}: {n / med:,.0f} nodes/s (median {med:.2f} s, {min(times):.2f}-{max(times):.2f}); "
          f"{(n / med) / ref:.2f}x the protobuf loop", flush=True)


def main() -> dict:
    out: dict = {"nodes": N_NODES, "runs": RUNS, "note": "shared 2-core machine: figures under load"}
    with tempfile.TemporaryDirectory() as tmp:
        path, small = Path(tmp) / "mix.0.et", Path(tmp) / "mix_small.0.et"
        make_file(path, N_NODES)
        make_file(small, VIEW_NODES)
        base = _timed(protobuf_loop, path)
        ref = N_NODES / statistics.median(base)
        out["protobuf_loop_nodes_per_s"] = ref
        out["protobuf_loop_s_range"] = [min(base), max(base)]
        print(f"protobuf ParseFromString loop: {ref:,.0f} nodes/s", flush=True)
        _figure("info", N_NODES, _timed(info_path, path), ref, out)
        _figure("iter_nodes", N_NODES, _timed(stream, path), ref, out)
        small_ref = VIEW_NODES / statistics.median(_timed(protobuf_loop, small))
        _figure("trace_nodes", VIEW_NODES, _timed(node_view, small), small_ref, out)
        gc.collect()
        tracemalloc.start()
        info_path(path)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        out["info_peak_bytes_per_node"] = peak / N_NODES
        print(f"info peak memory: {peak / N_NODES:.0f} B/node", flush=True)
    return out


if __name__ == "__main__":
    main()
