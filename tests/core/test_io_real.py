"""Every real Chakra .et loads and writes back byte for byte; dump/load is the identity."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest

from tracekit.io import encode_trace, read_trace, read_traceset
from tracekit.wire.jsonform import dumps_trace, loads_trace
from tracekit.model import NodeType
from tracekit.checks.summary import summarize_trace

SAMPLE_FILES = [
    "all_reduce.0.et",
    "all_reduce.1.et",
    "all_reduce.2.et",
    "all_reduce.3.et",
    "custom_allreduce.0.et",
    "custom_allreduce.1.et",
    "feeder.0.et",
]


def _roundtrips(path: Path) -> None:
    raw = path.read_bytes()
    untouched = read_trace(path)
    assert encode_trace(untouched) == raw
    materialized = read_trace(path)
    assert len(materialized.nodes) == len(untouched)
    assert encode_trace(materialized) == raw  # re-encoded from Node objects
    via_json = loads_trace(dumps_trace(materialized))
    assert encode_trace(via_json) == raw


@pytest.mark.parametrize("name", SAMPLE_FILES)
def test_bundled_real_files_roundtrip(samples_dir, name):
    _roundtrips(samples_dir / "chakra" / name)


def test_feeder_trace_counts(samples_dir):
    # Counts of mlcommons/chakra tests/data/chakra.0.et, as listed in its provenance.
    s = summarize_trace(read_trace(samples_dir / "chakra" / "feeder.0.et"))
    assert s.nodes == 3664
    assert s.data_deps == 181878
    assert s.nodes_by_type == {"COMP_NODE": 3643, "COMM_COLL_NODE": 21}
    assert s.collectives == {"ALL_REDUCE": 5, "BROADCAST": 2, "MISSING": 14}


def test_astra_allreduce_values(samples_dir):
    ts = read_traceset(samples_dir / "chakra" / "all_reduce")
    assert ts.ranks == (0, 1, 2, 3)
    for trace in ts:
        (node,) = trace.nodes
        assert node.type == NodeType.COMM_COLL_NODE
        assert node.comm_bytes == 1048576
        assert node.comm_type.name == "ALL_REDUCE"
        assert trace.metadata.version == "0.0.4"


def test_every_shared_chakra_file_roundtrips(real_dir, tmp_path):
    chakra = real_dir / "chakra"
    files = sorted(chakra.rglob("*.et"))
    with tarfile.open(chakra / "astra-sim-onecomm-64" / "onecomm_allreduce.tar") as tar:
        tar.extractall(tmp_path, filter="data")
    tar_files = sorted(tmp_path.rglob("*.et"))
    assert len(tar_files) == 64
    assert len(files) == 8  # shared/real/README.md: 4 + 2 ASTRA-sim, 1 feeder test, 1 Chakra converter output
    for path in files + tar_files:
        _roundtrips(path)
    ts = read_traceset(tar_files[0].parent / "one_comm_coll_node_allreduce")
    assert ts.ranks == tuple(range(64))


def test_chakra_converter_output_declares_its_group(real_dir):
    # resnet.0.et (Chakra 21585d8's converter on param-resnet) stores the group list as a Python repr:
    # ['[{"pg_name": "0", "pg_desc": "default_pg", ... "ranks": [], "group_size": 1, "group_count": 1}]']
    trace = read_trace(real_dir / "chakra" / "chakra-converter-resnet" / "resnet.0.et")
    assert len(trace) == 14_391
    assert trace.process_groups() == {"0": ()}
    ts = read_traceset(real_dir / "chakra" / "chakra-converter-resnet" / "resnet")
    assert ts.process_groups == {"0": (0,)}


def test_gzip_read_and_write(samples_dir, tmp_path):
    from tracekit.io import write_trace

    src = samples_dir / "chakra" / "custom_allreduce.0.et"
    gz = write_trace(read_trace(src), tmp_path / "x.0.et.gz")
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    assert encode_trace(read_trace(gz)) == src.read_bytes()
    assert read_trace(gz).rank == 0
    shutil.copy(gz, tmp_path / "plain_name.0.et")  # gzip detected by magic, not by suffix
    assert len(read_trace(tmp_path / "plain_name.0.et")) == len(read_trace(src))


def test_columnar_decoder_matches_node_decoder_on_real_trace(samples_dir):
    import numpy as np

    trace = read_trace(samples_dir / "chakra" / "feeder.0.et")
    cols = trace.columns()
    nodes = list(read_trace(samples_dir / "chakra" / "feeder.0.et").nodes)  # built once, compared 17 times
    assert cols.ids.tolist() == [n.id for n in nodes]
    assert cols.types.tolist() == [int(n.type) for n in nodes]
    assert cols.duration_ns.tolist() == [n.duration_ns for n in nodes]
    assert cols.names == [n.name for n in nodes]
    assert np.diff(cols.data_ptr).tolist() == [len(n.data_deps) for n in nodes]
    assert cols.data_ids.tolist() == [d for n in nodes for d in n.data_deps]
    assert cols.ctrl_ids.tolist() == [d for n in nodes for d in n.ctrl_deps]
    for attr in ("comm_type", "comm_size", "is_cpu_op", "involved_dim", "op_schema"):
        present, values = cols.attr(attr)
        assert values == [n.get_attr(attr) for n in nodes]
        assert present.tolist() == [n.has_attr(attr) for n in nodes]
    assert int(cols.attr("comm_size")[0].sum()) == 7


def test_vectorized_attribute_decoding_matches_protobuf_for_every_scalar_kind():
    """The numpy fast path for scalar attributes agrees with protobuf's decoder, kind by kind."""
    from tracekit.io import trace_from_bytes
    from tracekit.model import Attr, ExecutionTrace, Node

    cases = [
        ("int32_val", -7),
        ("int64_val", -(2**40)),
        ("uint32_val", 2**32 - 1),
        ("uint64_val", 2**63 + 5),
        ("sint32_val", -3),
        ("sint64_val", -(2**50)),
        ("fixed32_val", 4000000000),
        ("fixed64_val", 2**62),
        ("sfixed32_val", -9),
        ("sfixed64_val", -(2**60)),
        ("bool_val", True),
        ("bool_val", False),
        ("double_val", 2.5),
        ("float_val", 0.25),
        ("string_val", "x"),
        ("int64_list", [1, 2]),
    ]
    nodes = [Node(id=i, attrs=[Attr("v", value, kind)]) for i, (kind, value) in enumerate(cases)]
    nodes.append(Node(id=len(cases), attrs=[Attr("v", 3, "int64_val", doc_string="with a doc string")]))
    nodes.append(Node(id=len(cases) + 1))
    cols = trace_from_bytes(encode_trace(ExecutionTrace(nodes))).columns()
    present, values = cols.attr("v")
    expected = [n.get_attr("v") for n in nodes]
    assert values == expected
    assert [type(v) for v in values] == [type(v) for v in expected]
    assert present.tolist() == [True] * (len(cases) + 1) + [False]
    numeric = ExecutionTrace(
        [
            n
            for n in nodes
            if isinstance(n.get_attr("v", 0), (int, float))
            and not isinstance(n.get_attr("v"), bool)
            and n.get_attr("v", 0) < 2**63
        ]
    )
    p2, ints = trace_from_bytes(encode_trace(numeric)).columns().attr_int("v")
    assert ints.tolist() == [int(n.get_attr("v", 0)) for n in numeric.nodes]
