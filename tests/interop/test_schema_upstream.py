"""schema/et_def.proto has upstream Chakra's field set; node types 8-10 read, validate and round-trip.

Upstream: the schema module of mlc-chakra 1.0.0 from the package index (``.venv-chakra``, tests/reference_tools.py)
for every message, field and enum it has, plus the storage operations of mlcommons/chakra PR #216 (node types
STORAGE_NODE 8, BATCH_NODE 9, CHECKPOINT_NODE 10, ``Node.storage`` = 11), as the header of schema/et_def.proto says.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from reference_tools import chakra_decode, chakra_python
from tracekit._proto import et_def_pb2 as pb
from tracekit.cli import cli
from tracekit.io import encode_trace, read_trace, write_trace
from tracekit.wire.jsonform import dumps_trace, loads_trace
from tracekit.model import ExecutionTrace, Node, NodeType
from tracekit.transforms.streaming import validate_stream
from tracekit.checks.validate import validate_trace

_DESCRIBE = """
import json, sys
from google.protobuf import descriptor_pb2
from chakra.schema.protobuf import et_def_pb2 as m
d = descriptor_pb2.FileDescriptorProto(); m.DESCRIPTOR.CopyToProto(d)
out = {}
for msg in d.message_type:
    out[msg.name] = {f.name: [f.number, f.type, f.label, f.type_name] for f in msg.field}
for e in d.enum_type:
    out[e.name] = {v.name: v.number for v in e.value}
print(json.dumps(out))
"""


def _ours() -> dict:
    from google.protobuf import descriptor_pb2

    d = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(d)
    out: dict = {}
    for msg in d.message_type:
        out[msg.name] = {f.name: [f.number, f.type, f.label, f.type_name] for f in msg.field}
    for e in d.enum_type:
        out[e.name] = {v.name: v.number for v in e.value}
    return out


def test_every_field_of_chakras_schema_is_in_ours_with_its_number_and_type():
    upstream = json.loads(chakra_python(_DESCRIBE))
    ours = _ours()
    assert len(upstream) == 22  # 20 messages (AttributeProto, 15 lists, GlobalMetadata, Node, IOInfo, Tensor) + 2 enums
    for name, fields in upstream.items():
        assert name in ours, name
        for field, facts in fields.items():
            assert ours[name].get(field) == facts, (name, field)


def test_pr_216_additions():
    ours = _ours()
    assert {k: v for k, v in ours["NodeType"].items() if v >= 8} == {
        "STORAGE_NODE": 8,
        "BATCH_NODE": 9,
        "CHECKPOINT_NODE": 10,
    }
    assert ours["Node"]["storage"][:2] == [11, 11]  # field 11, TYPE_MESSAGE
    assert sorted(ours["StorageLevel"].values()) == [0, 1, 2, 3, 4]
    assert set(ours["StorageInfo"]) == {"level", "fs", "page", "block"}


def _storage_trace() -> ExecutionTrace:
    fs = pb.StorageInfo(
        level=pb.STORAGE_LEVEL_FS,
        fs=pb.FsOp(op=pb.FsOp.FS_OP_PWRITE, pathname="/ckpt/s100.pt", fd=7, offset=4096, size_bytes=1 << 20),
    )
    page = pb.StorageInfo(
        level=pb.STORAGE_LEVEL_PAGE, page=pb.PageOp(op=pb.PageOp.PAGE_OP_DIRTY, inode=12, page_index=1, nr_pages=256)
    )
    block = pb.StorageInfo(
        level=pb.STORAGE_LEVEL_BLOCK,
        block=pb.BlockOp(
            op=pb.BlockOp.BLOCK_OP_WRITE,
            queue_event=pb.BlockOp.BLOCK_EVENT_COMPLETE,
            device="nvme0n1",
            lba=8,
            nr_sectors=2048,
        ),
    )
    nodes = [
        Node(0, "next batch", NodeType.BATCH_NODE, duration_ns=3_000),
        Node(1, "pwrite", NodeType.STORAGE_NODE, data_deps=[0], duration_ns=5_250, storage=fs.SerializeToString()),
        Node(2, "dirty", NodeType.STORAGE_NODE, data_deps=[1], storage=page.SerializeToString()),
        Node(3, "bio", NodeType.STORAGE_NODE, data_deps=[2], duration_ns=40_000, storage=block.SerializeToString()),
        Node(4, "save checkpoint", NodeType.CHECKPOINT_NODE, data_deps=[3], duration_ns=1_000),
    ]
    return ExecutionTrace(nodes)


def test_node_types_8_to_10_read_validate_and_round_trip_byte_for_byte(tmp_path):
    path = write_trace(_storage_trace(), tmp_path / "io.0.et")
    raw = path.read_bytes()
    lazy = read_trace(path)
    assert encode_trace(lazy) == raw
    nodes = read_trace(path).nodes
    assert [n.type for n in nodes] == [NodeType.BATCH_NODE] + [NodeType.STORAGE_NODE] * 3 + [NodeType.CHECKPOINT_NODE]
    assert pb.StorageInfo.FromString(nodes[1].storage).fs.pathname == "/ckpt/s100.pt"
    assert pb.StorageInfo.FromString(nodes[3].storage).block.nr_sectors == 2048
    assert encode_trace(ExecutionTrace(nodes)) == raw
    assert encode_trace(loads_trace(dumps_trace(read_trace(path)))) == raw
    assert validate_trace(read_trace(path)).issues == [] and validate_stream(path).issues == []
    assert CliRunner().invoke(cli, ["validate", str(path)]).exit_code == 0


def test_chakra_reads_node_types_8_to_10(tmp_path):
    path = write_trace(_storage_trace(), tmp_path / "io.0.et")
    ((_, rows),) = chakra_decode(path)
    # Chakra's schema has no type 8-10 names and no storage field: proto3 keeps the numbers and skips field 11
    assert [(row[0], row[2], row[3]) for row in rows] == [
        (0, 9, []),
        (1, 8, [0]),
        (2, 8, [1]),
        (3, 8, [2]),
        (4, 10, [3]),
    ]
    assert [row[6] for row in rows] == [3, 5, 0, 40, 1]  # duration_micros: the nanoseconds floored


@pytest.mark.parametrize("bad", ["zz", 7])
def test_bad_storage_json_is_a_format_error(bad):
    from tracekit.errors import TraceFormatError

    doc = json.loads(dumps_trace(_storage_trace()))
    doc["nodes"][1]["storage_pb_hex"] = bad
    with pytest.raises(TraceFormatError, match="node 1: storage_pb_hex must be a hex string"):
        loads_trace(json.dumps(doc).encode())
