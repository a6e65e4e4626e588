"""The generators' node encoder (converters/generators/_encode.py) writes exactly protobuf's bytes."""

from __future__ import annotations

import pytest

from tracekit.converters.generators._encode import _Encoder, encode_generated, encode_generated_trace
from tracekit.converters.generators import dlrm_preset, generate_dlrm
from tracekit.converters.generators.micro import _shape_table, chakra_shape, send_recv_bench
from tracekit.errors import TracekitError
from tracekit.io import encode_trace
from tracekit.model import Attr, ExecutionTrace, IOInfo, Metadata, Node, NodeType


def _fresh(trace: ExecutionTrace) -> ExecutionTrace:
    """The trace as a generator hands it over (nodes in memory, no encoded records to copy)."""
    return ExecutionTrace(list(trace.nodes), trace.metadata, rank=trace.rank)


@pytest.mark.parametrize("shape", sorted(_shape_table()))
def test_chakra_shapes_encode_as_protobuf(shape):
    enc = _Encoder()
    for trace in chakra_shape(shape, 2):
        t = _fresh(trace)
        assert encode_generated_trace(t, enc) == encode_trace(t)


def test_dlrm_and_send_recv_encode_as_protobuf():
    enc = _Encoder()
    jobs = [
        generate_dlrm(dlrm_preset("dlrm-small", 4, global_batch_size=64), (1e14, 1e12)),
        send_recv_bench(4, "ring", 1 << 20),
    ]
    count = 0
    for ts in jobs:
        for trace in ts:
            t = _fresh(trace)
            assert encode_generated_trace(t, enc) == encode_trace(t)
            count += len(t.nodes)
    assert count > 100


def test_edge_values_encode_as_protobuf():
    nodes = [
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
        Node(id=7, name="io", inputs=IOInfo("[1]", "[[2]]", "[f]"), attrs=[Attr("a", [1, 2], "int64_list")]),
        Node(
            id=8,
            name="attrs",
            attrs=[
                Attr("f", 0.5, "double_val"),
                Attr("s", "v", "string_val"),
                Attr("b", True, "bool_val"),
                Attr("n", None, None),
                Attr("d", 3, "int64_val", "doc"),
            ],
        ),
    ]
    t = ExecutionTrace(nodes, Metadata(version="0.0.4"), rank=3)
    assert encode_generated(t.nodes, t.metadata, rank=3) == encode_trace(t)


def test_bad_value_names_node_and_rank():
    t = ExecutionTrace([Node(id=4, name="bad", attrs=[Attr("x", "text", "int64_val")])], Metadata(version=""), rank=2)
    with pytest.raises(TracekitError, match="int") as info:
        encode_generated(t.nodes, t.metadata, rank=2)
    assert info.value.node_id == 4 and info.value.rank == 2
