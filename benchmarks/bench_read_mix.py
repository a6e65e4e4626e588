"""Reading a realistic node mix (issue 17, "Must show" 2): half COMP, half COMM_COLL with 4-6 attributes.

Workload (seeded): 1,000,000 nodes; even ids COMP (``num_ops``, ``tensor_size``,
``stream``, ``is_cpu_op``), odd ids COMM_COLL (``comm_type``, ``comm_size``,
``pg_name``, ``stream``, and on every third one ``comm_tag``, ``op_role``);
one data dependency on the previous node.

Figures, each beside the reference measured in the same run (median of
``BENCH_RUNS`` runs, default 3, with min and max; the machine is shared):

- ``info``: what ``tracekit info`` does per rank (read + ``summarize_trace``);
- ``trace_nodes``: iterating ``read_trace(path).nodes`` (the Python node view
  over the columns, issue 13) on all nodes, reading each node's ``id``,
  ``type`` and ``duration_ns`` (attributes stay encoded until touched);
- ``trace_nodes_attrs``: the same plus one typed attribute per node
  (``comm_bytes`` of COMM nodes, ``num_ops`` of COMP nodes);
- ``iter_nodes``: streaming every node, reading the same three fields;
- reference: a plain protobuf ``ParseFromString`` loop over the same records
  (no field read), timed in the same run before each figure's group;
- each figure in wall time and in CPU time of this process (``time.process_time``,
  steadier when other work shares the cores);
- memory: tracemalloc peak per node of ``info``, of iterating ``trace.nodes``
  and of ``iter_nodes``.
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
RUNS = int(os.environ.get("BENCH_RUNS", 3))


def make_file(path: Path, n: int, seed: int = 0) -> None:
    from tracekit._proto import et_def_pb2 as pb
    from tracekit.io import frame

    rng = np.random.default_rng(seed)
    durs = rng.integers(1, 500_000, size=n).tolist()
    parts = [frame(pb.GlobalMetadata(version="0.0.4").SerializeToString())]
    for i in range(n):
        m = pb.Node(
            id=i,
            name="aten::mm" if i % 2 == 0 else "nccl:all_reduce",
            type=4 if i % 2 == 0 else 7,
            duration_micros=durs[i] // 1000,
        )
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
    from tracekit.checks.summary import summarize_trace

    return summarize_trace(read_trace(path)).nodes


def _touch(nodes) -> int:
    total = 0
    for node in nodes:
        total += node.id + node.type + node.duration_ns
    return total


def node_view(path: Path) -> int:
    from tracekit.io import read_trace

    return _touch(read_trace(path).nodes)


def node_view_attrs(path: Path) -> int:
    from tracekit.io import read_trace

    total = 0
    for node in read_trace(path).nodes:
        total += node.id + ((node.comm_bytes or 0) if node.type == 7 else (node.num_ops or 0))
    return total


def stream(path: Path) -> int:
    from tracekit.io import iter_nodes

    return _touch(iter_nodes(path))


def protobuf_loop(path: Path) -> int:
    from tracekit._proto import et_def_pb2 as pb
    from tracekit.io import split_records

    data = path.read_bytes()
    _, _, starts, ends = split_records(data)
    for s, e in zip(starts.tolist(), ends.tolist()):
        pb.Node().ParseFromString(data[s:e])
    return len(starts)


def _timed(fn, path: Path) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of ``RUNS`` calls (CPU time is the steadier figure on a shared machine)."""
    wall, cpu = [], []
    for _ in range(RUNS):
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        fn(path)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return wall, cpu


def _figure(name: str, n: int, times: tuple[list[float], list[float]], ref: tuple[float, float], out: dict) -> None:
    wall, cpu = times
    med, cmed = statistics.median(wall), statistics.median(cpu)
    out[f"{name}_nodes_per_s"] = n / med
    out[f"{name}_s_median"] = med
    out[f"{name}_s_range"] = [min(wall), max(wall)]
    out[f"{name}_vs_protobuf_loop"] = (n / med) / ref[0]
    out[f"{name}_cpu_nodes_per_s"] = n / cmed
    out[f"{name}_cpu_vs_protobuf_loop"] = (n / cmed) / ref[1]
    print(
        f"{name}: {n / med:,.0f} nodes/s (median {med:.2f} s, {min(wall):.2f}-{max(wall):.2f}); "
        f"{(n / med) / ref[0]:.2f}x the protobuf loop; CPU time: {n / cmed:,.0f} nodes/s "
        f"({min(cpu):.2f}-{max(cpu):.2f} s), {(n / cmed) / ref[1]:.2f}x",
        flush=True,
    )


def _peak_per_node(fn, path: Path, name: str, out: dict) -> None:
    gc.collect()
    tracemalloc.start()
    fn(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out[f"{name}_peak_bytes_per_node"] = peak / N_NODES
    print(f"{name} peak memory: {peak / N_NODES:.0f} B/node", flush=True)


def main() -> dict:
    out: dict = {"nodes": N_NODES, "runs": RUNS, "note": "shared 2-core machine: figures under load"}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mix.0.et"
        make_file(path, N_NODES)
        for name, fn in (
            ("info", info_path),
            ("trace_nodes", node_view),
            ("trace_nodes_attrs", node_view_attrs),
            ("iter_nodes", stream),
        ):
            base, base_cpu = _timed(protobuf_loop, path)  # the reference, measured beside each figure
            ref = N_NODES / statistics.median(base)
            ref_cpu = N_NODES / statistics.median(base_cpu)
            out[f"{name}_protobuf_loop_nodes_per_s"] = ref
            out[f"{name}_protobuf_loop_s_range"] = [min(base), max(base)]
            out[f"{name}_protobuf_loop_cpu_nodes_per_s"] = ref_cpu
            print(
                f"protobuf ParseFromString loop: {ref:,.0f} nodes/s "
                f"(median {statistics.median(base):.2f} s, {min(base):.2f}-{max(base):.2f}); "
                f"CPU time: {ref_cpu:,.0f} nodes/s",
                flush=True,
            )
            _figure(name, N_NODES, _timed(fn, path), (ref, ref_cpu), out)
        for name, fn in (("info", info_path), ("trace_nodes", node_view), ("iter_nodes", stream)):
            _peak_per_node(fn, path, name, out)
    return out


if __name__ == "__main__":
    main()
