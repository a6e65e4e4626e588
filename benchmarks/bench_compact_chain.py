"""Compaction of a data-dependency chain (issue 17): must grow linearly with the chain; 1 M nodes < 5 s.

Workload: N COMP nodes on one compute stream, each depending on the previous,
1 us each (the whole chain merges into one node), and the same chain with
every other node on a second stream (nothing merges; the reduction sees the
whole chain).  Before issue 17: 10 k nodes 12 s, 20 k 41 s, 40 k > 120 s.

Two paths, measured in the same run:

- ``columnar``: the chain as encoded records (what reading a file gives), compacted
  on columns (``tracekit.transforms.colcompact``), up to 1,000,000 nodes;
- ``nodes``: the chain as ``Node`` objects built in memory (the per-node path),
  up to 100,000 nodes.

Figures: CPU seconds of ``compact_trace`` (median of ``BENCH_RUNS`` runs, default 3,
with min and max; the machine is shared, so CPU rather than wall time) and nodes per
CPU second.  Building the inputs is not timed.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

RUNS = int(os.environ.get("BENCH_RUNS", 3))
COLUMNAR_SIZES = (10_000, 100_000, 1_000_000)
NODE_SIZES = (10_000, 40_000, 100_000)


def _chain(n: int, streams: int = 1):
    from tracekit.model import Attr, ExecutionTrace, Node, NodeType

    return ExecutionTrace(
        [
            Node(
                id=i,
                name=f"op{i}",
                type=NodeType.COMP_NODE,
                data_deps=[i - 1] if i else [],
                duration_ns=1000,
                attrs=[Attr("stream", 7 + i % streams, "int64_val")],
            )
            for i in range(n)
        ]
    )


def encoded_chain(n: int, streams: int = 1):
    """The chain as an encoded trace, built with numpy (no Node objects): ids, name ``op``, COMP, 1 us."""
    from tracekit._proto import et_def_pb2 as pb
    from tracekit.io import frame, trace_from_bytes
    from tracekit.wire.records import Blobs, concat_rows, packed_fields, varint_fields, varints

    ids = np.arange(n, dtype=np.uint64)
    lens = np.minimum(np.arange(n), 1)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    stream_attr = [pb.AttributeProto(name="stream", int64_val=7 + k).SerializeToString() for k in range(streams)]
    attr = Blobs.from_list(
        [b"\x52" + bytes([len(stream_attr[i % streams])]) + stream_attr[i % streams] for i in range(streams)]
    )
    pick = np.arange(n) % streams
    attr_rows = Blobs.of(_tile_rows(attr, pick), attr.lens[pick])
    body = concat_rows(
        varint_fields(1, ids),
        Blobs.const(b"\x12\x02op\x18\x04", n),
        packed_fields(5, ptr, ids[:-1] if n else ids),
        varint_fields(7, np.ones(n, np.uint64)),
        attr_rows,
    )
    pb_, pl = varints(body.lens)
    framed = concat_rows(Blobs.of(pb_, pl), body)
    meta = frame(pb.GlobalMetadata(version="0.0.4").SerializeToString())
    return trace_from_bytes(meta + framed.data.tobytes(), rank=0)


def _tile_rows(blobs, pick: np.ndarray) -> np.ndarray:
    lens = blobs.lens[pick]
    idx = np.repeat(blobs.ptr[:-1][pick] - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))
    return blobs.data[idx]


def _measure(make, label: str, out: dict) -> None:
    from tracekit.transforms.compact import compact_trace

    times, stats = [], None
    for _ in range(RUNS):
        trace = make()
        t0 = time.process_time()
        _, stats = compact_trace(trace)
        times.append(time.process_time() - t0)
    med = statistics.median(times)
    n = stats.nodes_before
    out[f"{label}_cpu_s"] = med
    out[f"{label}_cpu_s_range"] = [min(times), max(times)]
    out[f"{label}_nodes_per_cpu_s"] = n / med
    print(
        f"{label:28s} {n:>9,} -> {stats.nodes_after:>9,} nodes: {med:7.3f} s CPU ({min(times):.3f}-{max(times):.3f}), "
        f"{n / med:>12,.0f} nodes/s",
        flush=True,
    )


def main() -> dict:
    out: dict = {}
    for n in COLUMNAR_SIZES:
        for streams in (1, 2):
            _measure(lambda n=n, s=streams: encoded_chain(n, s), f"columnar_chain_{n}_streams{streams}", out)
    for n in NODE_SIZES:
        _measure(lambda n=n: _chain(n), f"nodes_chain_{n}", out)
    return out


if __name__ == "__main__":
    main()
