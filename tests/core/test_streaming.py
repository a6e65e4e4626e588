"""Streaming validation and transforms: same findings and same bytes as the in-memory path, bounded memory."""

from __future__ import annotations

import gzip
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from tracekit.errors import TraceFormatError, TransformError
from tracekit.io import encode_trace, read_trace, write_trace
from tracekit.model import Attr, ExecutionTrace, Node, NodeType
from tracekit.transforms.streaming import IdSet, streamable, transform_stream, validate_stream
from tracekit.sets.traceset import TraceSet
from tracekit.checks.validate import validate_trace


# ----------------------------------------------------------------------------- id set
def test_idset_dense_and_sparse_agree_with_a_python_set():
    rng = np.random.default_rng(7)
    dense = rng.integers(0, 50_000, size=20_000).tolist()
    sparse = (rng.integers(0, 1 << 62, size=20_000, dtype=np.int64)).tolist()
    for ids in (dense, dense + sparse):
        s, ref = IdSet(), set()
        for i in ids:
            assert s.add(i) == (i not in ref)
            ref.add(i)
        assert len(s) == len(ref)
        probes = ids[::7] + rng.integers(0, 1 << 62, size=2000, dtype=np.int64).tolist() + [0, 1, 49_999, 50_000]
        assert [p in s for p in probes] == [p in ref for p in probes]
    # dense ids stay a bitmap of ~max_id/8 bytes; sparse ones switch to 8 bytes per id
    d = IdSet()
    for i in range(1_000_000):
        d.add(i)
    assert d.nbytes == 1 << 17  # 128 KiB bitmap for a million ids
    assert (10**6 - 1) in d and 10**6 not in d


# ----------------------------------------------------------------------------- validation
REAL_ET = [
    "chakra/astra-sim-allreduce-4npus/all_reduce.0.et",
    "chakra/astra-sim-custom-allreduce/custom_allreduce.0.et",
]


@pytest.mark.parametrize("rel", REAL_ET)
def test_validate_stream_equals_full_validation_on_real_files(real_dir, rel):
    path = real_dir / rel
    full = validate_trace(read_trace(path))
    stream = validate_stream(path)
    assert stream.issues == full.issues
    assert stream.checked_nodes == full.checked_nodes == len(read_trace(path))


def test_validate_stream_on_the_chakra_feeder_file_flags_forward_deps(real_dir):
    """chakra.0.et (3,664 nodes) has 21 COMM nodes without comm_type and ctrl deps on missing ids, found
    identically both ways, and 53 data deps on later nodes, so the stream says cycles need a full pass."""
    path = real_dir / "chakra" / "chakra-feeder-tests" / "chakra.0.et"
    full = validate_trace(read_trace(path))
    stream = validate_stream(path)
    assert stream.checked_nodes == 3664
    assert [i for i in stream.issues if i.check != "cycle"] == full.issues
    cycle = [i for i in stream.issues if i.check == "cycle"]
    assert len(cycle) == 1 and cycle[0].severity == "warning"
    assert cycle[0].message.startswith("53 data dependencies point to later nodes")
    assert sum(i.check == "comm-attrs" for i in full.issues) == 21


def _chain(n: int, *, extra: dict[int, list[int]] | None = None) -> list[Node]:
    nodes = []
    for i in range(n):
        deps = [i - 1] if i else []
        deps += (extra or {}).get(i, [])
        nodes.append(
            Node(
                i,
                f"op{i % 5}",
                NodeType.COMP_NODE,
                data_deps=deps,
                duration_ns=1000 + i,
                attrs=[Attr("is_cpu_op", i % 3 == 0, "bool_val")],
            )
        )
    return nodes


def test_validate_stream_finds_each_problem_with_the_full_texts(tmp_path):
    nodes = _chain(50, extra={10: [999], 20: [30]})  # dangling, forward
    nodes.append(Node(7, "dup", NodeType.COMP_NODE, data_deps=[3]))  # duplicate id
    nodes.append(Node(60, "ar", NodeType.COMM_COLL_NODE, data_deps=[5], attrs=[Attr("comm_size", 8)]))
    path = tmp_path / "bad.3.et"
    path.write_bytes(encode_trace(ExecutionTrace(nodes)))
    report = validate_stream(path)
    got = [(i.check, i.severity, i.node_id, i.message) for i in report.issues]
    assert got == [
        ("unique-ids", "error", 7, "duplicate node id 7"),
        ("dangling-dep", "error", 10, "data dep 999 does not exist"),
        (
            "cycle",
            "warning",
            None,
            "1 data dependencies point to later nodes, so a streaming pass cannot rule out "
            "cycles; run a full validation (without --stream) for the cycle check",
        ),
        (
            "comm-attrs",
            "warning",
            60,
            "COMM_COLL node has no comm_type: read as ALL_REDUCE, as ASTRA-sim and "
            "Chakra's feeder do (the field's default)",
        ),
    ]
    assert all(i.rank == 3 and i.path == str(path) for i in report.issues)
    full = validate_trace(read_trace(path))
    assert [i for i in report.issues if i.check != "cycle"] == [i for i in full.issues if i.check != "cycle"]


def test_validate_stream_caps_pending_forward_deps(tmp_path):
    nodes = _chain(30, extra={i: [100 + i] for i in range(5)})
    path = tmp_path / "t.0.et"
    path.write_bytes(encode_trace(ExecutionTrace(nodes)))
    report = validate_stream(path, max_pending=2)
    msgs = [i.message for i in report.errors]
    assert (
        "3 dependencies on later or missing nodes beyond the 2 a streaming pass remembers; validate this file "
        "with a full pass (without --stream)" in msgs
    )
    assert msgs[:2] == ["data dep 100 does not exist", "data dep 101 does not exist"]


def test_validate_stream_reads_gzip_and_reports_bad_records(tmp_path):
    data = encode_trace(ExecutionTrace(_chain(100)))
    gz = tmp_path / "t.0.et.gz"
    gz.write_bytes(gzip.compress(data))
    assert validate_stream(gz).ok and validate_stream(gz).checked_nodes == 100
    cut = tmp_path / "cut.0.et"
    cut.write_bytes(data[:-4])
    with pytest.raises(TraceFormatError, match="runs past the end of the file"):
        validate_stream(cut)


def test_validate_stream_memory_is_bounded(tmp_path, monkeypatch):
    """The pass holds one block of records (16 KiB here) and its columns: a file three times larger
    (10,000 -> 30,000 nodes, about 0.38 -> 1.15 MB, 23-70 blocks) needs no more memory, and far less than
    the full in-memory validation (about 8x at 10,000 nodes)."""
    import tracekit.wire.stream

    monkeypatch.setattr(tracekit.wire.stream, "BLOCK_BYTES", 16 << 10)
    peaks = []
    for n in (10_000, 30_000):
        path = tmp_path / f"big{n}.0.et"
        path.write_bytes(encode_trace(ExecutionTrace(_chain(n))))
        validate_stream(path)  # imports and one-time tables outside the measurement
        tracemalloc.start()
        report = validate_stream(path)
        _, stream_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert report.ok and report.checked_nodes == n
        peaks.append(stream_peak)
    tracemalloc.start()
    validate_trace(read_trace(tmp_path / "big10000.0.et"))
    _, full_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peaks[1] < 1.25 * peaks[0]
    assert peaks[0] < full_peak / 4


# ----------------------------------------------------------------------------- transforms
def _converted(real_dir: Path, tmp: Path) -> Path:
    from tracekit.converters.pytorch import convert_rank

    d = real_dir / "pytorch" / "torch-cpu-gloo" / "dist_ws2"
    trace = convert_rank(d / "et_rank0.json", d / "kineto_rank0.json", rank=0).trace
    path = tmp / "gloo.0.et"
    write_trace(trace, path)
    return path


def _transforms():
    from tracekit.transforms.pipeline import Pipeline
    from tracekit.transforms.scale import ScaleComm, ScaleCompute
    from tracekit.transforms.select import DropCpuOps, RemoveNodes

    return [
        ScaleCompute(0.5),
        ScaleComm(2.0),
        DropCpuOps(),
        RemoveNodes(name_pattern="aten::"),
        Pipeline([ScaleCompute(0.5), DropCpuOps()]),
    ]


def test_transform_stream_writes_the_same_bytes_as_the_in_memory_transform(real_dir, tmp_path):
    from tracekit.transforms.base import stamp_provenance

    src = _converted(real_dir, tmp_path)
    trace = read_trace(src)
    assert len(trace) == 322
    removed = []
    for t in _transforms():
        steps = [s.describe() for s in t.steps] if type(t).__name__ == "Pipeline" else [t.describe()]
        expected = stamp_provenance(t.apply(TraceSet({0: trace})), steps, str(src))[0]
        dst = tmp_path / "out.0.et"
        stats = transform_stream(src, dst, t)
        assert dst.read_bytes() == encode_trace(expected), type(t).__name__
        assert (stats.nodes_in, stats.nodes_out) == (322, len(expected))
        removed.append(stats.nodes_removed)
    assert removed == [0, 0, 311, 245, 311]


def test_transform_stream_refuses_what_cannot_stream(real_dir, tmp_path):
    from tracekit.transforms.compact import Compact
    from tracekit.transforms.pipeline import Pipeline
    from tracekit.transforms.scale import ScaleCompute

    src = _converted(real_dir, tmp_path)
    assert streamable(ScaleCompute(2.0)) and not streamable(Compact())
    assert not streamable(Pipeline([ScaleCompute(2.0), Compact()]))
    with pytest.raises(TransformError, match="Compact cannot stream"):
        transform_stream(src, tmp_path / "o.0.et", Pipeline([ScaleCompute(2.0), Compact()]))
    assert not (tmp_path / "o.0.et").exists()
    # a removal meeting a dependency on a later node (the real Chakra feeder file has 53)
    feeder = real_dir / "chakra" / "chakra-feeder-tests" / "chakra.0.et"
    with pytest.raises(TransformError, match="names no earlier node .* run it without streaming"):
        transform_stream(feeder, tmp_path / "f.0.et", _remove_comp())
    assert not (tmp_path / "f.0.et").exists()


def _remove_comp():
    from tracekit.transforms.select import RemoveNodes

    return RemoveNodes(node_types=("COMP_NODE",))
