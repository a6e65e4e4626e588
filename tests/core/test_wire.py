"""A trace written from scratch decodes with protobuf's generic (schema-less) decoder by docs/design.md field numbers."""

from __future__ import annotations

import pytest
from google.protobuf import empty_pb2
from google.protobuf.unknown_fields import UnknownFieldSet

from tracekit.model.groups import pg_init_node
from tracekit.io import encode_trace, split_records, write_trace
from tracekit.wire.jsonform import dumps_trace, loads_trace
from tracekit.model import Attr, CollectiveType, ExecutionTrace, Metadata, Node, NodeType


def _fields(message_bytes: bytes) -> dict[int, list]:
    m = empty_pb2.Empty()
    m.ParseFromString(message_bytes)
    out: dict[int, list] = {}
    for f in UnknownFieldSet(m):
        out.setdefault(f.field_number, []).append((f.wire_type, f.data))
    return out


def _varints(packed: bytes) -> list[int]:
    out, v, shift = [], 0, 0
    for b in packed:
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            out.append(v)
            v, shift = 0, 0
    return out


def _scratch_trace() -> ExecutionTrace:
    nodes = [
        pg_init_node(1, {"0": (), "1": (0, 1)}),
        Node(
            id=2,
            name="matmul",
            type=NodeType.COMP_NODE,
            duration_ns=1500,
            attrs=[
                Attr("num_ops", 2_000_000, "int64_val"),
                Attr("tensor_size", 4096, "uint64_val"),
                Attr("is_cpu_op", False, "bool_val"),
            ],
        ),
        Node(
            id=3,
            name="allreduce",
            type=NodeType.COMM_COLL_NODE,
            data_deps=[2],
            duration_ns=7000,
            attrs=[
                Attr("comm_type", int(CollectiveType.ALL_REDUCE), "int64_val"),
                Attr("comm_size", 1 << 20, "int64_val"),
                Attr("pg_name", "1", "string_val"),
            ],
        ),
        Node(
            id=4,
            name="send",
            type=NodeType.COMM_SEND_NODE,
            data_deps=[3],
            ctrl_deps=[2],
            attrs=[
                Attr("comm_size", 256, "int64_val"),
                Attr("comm_src", 0, "int32_val"),
                Attr("comm_dst", 1, "int32_val"),
                Attr("comm_tag", 7, "int32_val"),
            ],
        ),
        Node(
            id=5,
            name="recv",
            type=NodeType.COMM_RECV_NODE,
            data_deps=[3, 4],
            start_time_ns=2_000_123,
            attrs=[
                Attr("comm_size", 256, "int64_val"),
                Attr("comm_src", 1, "int32_val"),
                Attr("comm_dst", 0, "int32_val"),
                Attr("comm_tag", 7, "int32_val"),
                Attr("weights", [0.5, -1.25], "double_list"),
            ],
        ),
    ]
    return ExecutionTrace(nodes, Metadata("0.0.4", [Attr("creator", "tracekit", "string_val")]), rank=0)


def test_generic_decoder_sees_design_field_numbers():
    data = encode_trace(_scratch_trace())
    ms, me, starts, ends = split_records(data)
    meta = _fields(data[ms:me])
    assert meta[1] == [(2, b"0.0.4")]  # version = 1 (length-delimited)
    attr = _fields(meta[2][0][1])
    assert attr[1] == [(2, b"creator")] and attr[29] == [(2, b"tracekit")]  # name = 1, string_val = 29
    recs = [_fields(data[s:e]) for s, e in zip(starts.tolist(), ends.tolist())]
    assert [r[1][0][1] for r in recs] == [1, 2, 3, 4, 5]  # id = 1 (varint)
    assert [r[3][0][1] for r in recs] == [1, 4, 7, 5, 6]  # type = 3: METADATA, COMP, COLL, SEND, RECV
    assert recs[1][2] == [(2, b"matmul")]  # name = 2
    assert recs[1][7] == [(0, 1)]  # duration_micros = 7: 1500 ns -> 1 us
    assert recs[1][1001] == [(0, 1500)]  # exact nanoseconds in the extension field
    assert _varints(recs[4][5][0][1]) == [3, 4]  # data_deps = 5, packed
    assert _varints(recs[3][4][0][1]) == [2]  # ctrl_deps = 4
    assert recs[4][6] == [(0, 2000)] and recs[4][1002] == [(0, 2_000_123)]  # start micros / nanos
    assert 1001 not in recs[2]  # 7000 ns is whole micros: no extension field
    comm_attrs = {(_fields(a)[1][0][1]): _fields(a) for _, a in recs[2][10]}  # attr = 10
    assert comm_attrs[b"comm_type"][9] == [(0, 0)]  # int64_val = 9; ALL_REDUCE = 0 is still present
    assert comm_attrs[b"comm_size"][9] == [(0, 1 << 20)]
    assert comm_attrs[b"pg_name"][29] == [(2, b"1")]
    mm = {(_fields(a)[1][0][1]): _fields(a) for _, a in recs[1][10]}
    assert mm[b"tensor_size"][13] == [(0, 4096)]  # uint64_val = 13
    assert mm[b"is_cpu_op"][27] == [(0, 0)]  # bool_val = 27
    send = {(_fields(a)[1][0][1]): _fields(a) for _, a in recs[3][10]}
    assert send[b"comm_dst"][7] == [(0, 1)]  # int32_val = 7
    inputs = _fields(recs[0][8][0][1])  # inputs = 8 -> IOInfo.values = 1
    assert b'"pg_name":"1"' in inputs[1][0][1]


def test_scratch_trace_json_roundtrip_is_identity(tmp_path):
    trace = _scratch_trace()
    data = encode_trace(trace)
    again = loads_trace(dumps_trace(trace))
    assert encode_trace(again) == data
    assert [n for n in again.nodes] == list(trace.nodes)
    p = write_trace(trace, tmp_path / "t.0.et")
    assert p.read_bytes() == data


def test_nonfinite_floats_survive_json():
    trace = ExecutionTrace([Node(id=1, attrs=[Attr("x", [float("nan"), float("inf"), -float("inf")], "double_list")])])
    back = loads_trace(dumps_trace(trace))
    assert encode_trace(back) == encode_trace(trace)


@pytest.mark.parametrize(
    "kind,value",
    [
        ("float_val", 0.1),
        ("sint64_val", -5),
        ("fixed32_val", 7),
        ("bytes_list", [b"\x00\xff"]),
        ("uint64_val", 2**64 - 1),
    ],
)
def test_every_value_kind_roundtrips(kind, value):
    trace = ExecutionTrace([Node(id=1, attrs=[Attr("v", value, kind)])])
    back = loads_trace(dumps_trace(trace))
    assert encode_trace(back) == encode_trace(trace)
