"""Generated ranks are encoded by the library's batch encoder (tracekit.wire.batch.encode_node_list over
encode_nodes) with one name/attribute table per job: exactly protobuf's bytes, node by node."""

from __future__ import annotations

import pytest

from tracekit.wire.batch import FieldTable, encode_node_list
from tracekit.converters.generators import dlrm_preset, generate_dlrm
from tracekit.converters.generators.micro import _shape_table, chakra_shape, send_recv_bench
from tracekit.errors import TracekitError
from tracekit.io import encode_node
from tracekit.model import Attr, IOInfo, Node, NodeType


def _protobuf(nodes) -> bytes:
    return b"".join(encode_node(n) for n in nodes)


@pytest.mark.parametrize("shape", sorted(_shape_table()))
def test_chakra_shapes_encode_as_protobuf(shape):
    names, attrs = FieldTable.names(), FieldTable.attributes()
    for trace in chakra_shape(shape, 2):
        assert encode_node_list(trace.nodes, names=names, attrs=attrs) == _protobuf(trace.nodes)


def test_dlrm_and_send_recv_encode_as_protobuf():
    names, attrs = FieldTable.names(), FieldTable.attributes()
    jobs = [
        generate_dlrm(dlrm_preset("dlrm-small", 4, global_batch_size=64), (1e14, 1e12)),
        send_recv_bench(4, "ring", 1 << 20),
    ]
    count = 0
    for ts in jobs:
        for trace in ts:
            assert encode_node_list(trace.nodes, names=names, attrs=attrs) == _protobuf(trace.nodes)
            count += len(trace.nodes)
    assert count > 100
    assert len(attrs) < count  # the table holds each distinct attribute once across the job's ranks


def test_edge_values_encode_as_protobuf():
    io = Node(id=7, name="io", inputs=IOInfo("[1]", "[[2]]", "[f]"), attrs=[Attr("a", [1, 2], "int64_list")])
    nodes = [
        io,  # a node with inputs goes to protobuf; the runs around it through the compiled pass
        Node(id=0, name="", type=NodeType.INVALID_NODE),  # every field at its default: an empty message
        Node(id=2**64 - 1, name="ü名", type=NodeType.COMP_NODE, duration_ns=1_234_567, start_time_ns=999),
        Node(
            id=300,
            name="x",
            type=NodeType.COMM_COLL_NODE,
            data_deps=[0, 127, 128, 2**63],
            ctrl_deps=[5],
            start_time_ns=2**62,
            duration_ns=2**53,
        ),
        io,
        Node(
            id=8,
            name="attrs",
            attrs=[
                Attr("f", 0.5, "double_val"),
                Attr("s", "v", "string_val"),
                Attr("b", True, "bool_val"),
                Attr("b", 1, "bool_val"),  # equal to the one before (True == 1): its own table row
                Attr("n", None, None),
                Attr("d", 3, "int64_val", "doc"),
            ],
        ),
    ]
    assert encode_node_list(nodes) == _protobuf(nodes)
    assert encode_node_list(nodes[1:4]) == _protobuf(nodes[1:4])  # ids of both int64 and uint64 range


def test_bad_value_names_node():
    with pytest.raises(TracekitError, match="int") as info:
        encode_node_list([Node(id=3, name="ok"), Node(id=4, name="bad", attrs=[Attr("x", "text", "int64_val")])])
    assert info.value.node_id == 4
    with pytest.raises(TracekitError, match="duration") as info:
        encode_node_list([Node(id=3, name="ok"), Node(id=5, duration_ns=2**60)])
    assert info.value.node_id == 5


def test_llm_rank_error_names_rank():
    from tracekit.converters.generators.llm import _encode
    from tracekit.model import ExecutionTrace

    bad = ExecutionTrace([Node(id=4, name="bad", attrs=[Attr("x", "text", "int64_val")])], rank=2)
    with pytest.raises(TracekitError) as info:
        _encode(bad, FieldTable.names(), FieldTable.attributes())
    assert info.value.node_id == 4 and info.value.rank == 2
