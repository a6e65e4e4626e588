"""Fast read paths (issue 17) give exactly what the general paths give."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tracekit.errors import TraceFormatError
from tracekit.io import read_trace, write_trace
from tracekit.model import Attr, ExecutionTrace, Node, NodeType
from tracekit.checks.summary import _comm_totals, summarize_trace


def _comm_mix() -> ExecutionTrace:
    nodes = []
    for i in range(40):
        t = (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE, NodeType.COMP_NODE)[i % 4]
        attrs = [Attr("comm_size", 1000 * i + 1, "uint64_val" if i % 3 else "int32_val")]
        if i % 5:
            attrs.insert(0, Attr("comm_type", (i % 11), "int64_val" if i % 2 else "uint32_val"))
        if i % 7 == 0:
            attrs.append(Attr("pg_name", "tp0", "string_val"))
        nodes.append(Node(i, f"n{i}", t, data_deps=[i - 1] if i else [], attrs=attrs))
    return ExecutionTrace(nodes)


def test_vectorized_comm_totals_equal_the_general_path(tmp_path):
    path = write_trace(_comm_mix(), tmp_path / "mix.0.et")
    fast = summarize_trace(read_trace(path))
    cols = read_trace(path).columns()
    comm = np.flatnonzero((cols.types >= 5) & (cols.types <= 7))
    colls, sizes = Counter(), Counter()
    _comm_totals(cols, comm, colls, sizes)
    assert list(fast.collectives.items()) == list(colls.items())  # same keys, same order
    assert list(fast.comm_bytes_by_collective.items()) == list(sizes.items())
    # by hand: COMM_COLL at i = 0, 4, ..., 36; comm_type missing where i % 5 == 0 (i = 0, 20)
    assert fast.collectives["MISSING"] == 2
    assert fast.comm_bytes_by_collective["SEND"] == sum(1000 * i + 1 for i in range(1, 40, 4))


def test_float_comm_type_takes_the_general_path(tmp_path):
    trace = ExecutionTrace(
        [Node(0, "ar", NodeType.COMM_COLL_NODE, attrs=[Attr("comm_type", 2.5, "double_val"), Attr("comm_size", 8)])]
    )
    s = summarize_trace(read_trace(write_trace(trace, tmp_path / "f.0.et")))
    assert s.collectives == {"UNKNOWN_2.5": 1} and s.comm_bytes_by_collective == {"UNKNOWN_2.5": 8}


def test_corrupt_attribute_value_is_still_caught(tmp_path):
    trace = ExecutionTrace([Node(i, "x", attrs=[Attr("num_ops", 300 + i)]) for i in range(3)])
    path = write_trace(trace, tmp_path / "c.0.et")
    data = bytearray(path.read_bytes())
    at = data.rindex(b"num_ops") + len(b"num_ops")  # last node's value: tag 0x48 (int64), varint 302
    assert data[at] == 0x48
    data[at + 1] = 0xFF  # a continuation byte where the varint's last byte was
    data[at + 2] |= 0x80
    path.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match="attribute") as err:
        read_trace(path).columns().attr("num_ops")
    assert "node 2" in str(err.value) or err.value.node_id == 2


def _every_kind_trace() -> ExecutionTrace:
    from tracekit.model import IOInfo

    values = {
        "double_val": 2.5,
        "float_val": 0.25,
        "int32_val": -7,
        "int64_val": -(2**40),
        "uint32_val": 2**32 - 1,
        "uint64_val": 2**64 - 1,
        "sint32_val": -3,
        "sint64_val": -(2**50),
        "fixed32_val": 9,
        "fixed64_val": 2**63 + 5,
        "sfixed32_val": -9,
        "sfixed64_val": -(2**60),
        "bool_val": True,
        "string_val": "dp_grad_allreduce",
        "bytes_val": b"\x00\xff",
        "int64_list": [1, -2, 3],
        "string_list": ["a", "b"],
    }
    nodes = []
    for i, (kind, value) in enumerate(values.items()):
        attrs = [
            Attr(f"a{i}", value, kind),
            Attr("num_ops", 3 * i + 1),
            Attr("empty", None, None),
            Attr("doc", 1, "int64_val", "a doc string"),
            Attr("is_cpu_op", False, "bool_val"),
            Attr("zero", 0, "int64_val"),
            Attr("", "", "string_val"),
        ]
        node = Node(
            i,
            "aten::mm" if i % 2 else "nccl:all_reduce ü",
            NodeType(4 + i % 4),
            data_deps=[i - 1] if i else [],
            ctrl_deps=[i - 2] if i > 1 else [],
            start_time_ns=1000 * i + (i % 3),
            duration_ns=2500 * i,
            attrs=attrs,
        )
        if i == 3:
            node = node.replace(inputs=IOInfo("[1]", "[[2]]", "[int]"))
        nodes.append(node)
    return ExecutionTrace(nodes)


def test_node_view_equals_protobuf_decode(tmp_path):
    path = write_trace(_every_kind_trace(), tmp_path / "k.0.et")
    trace = read_trace(path)
    fast = trace.nodes
    slow = read_trace(path)._encoded.decode_all()
    assert fast == slow
    assert [type(a.value) for n in fast for a in n.attrs] == [type(a.value) for n in slow for a in n.attrs]
    assert fast[3].inputs is not None and fast[0].attrs[0].value == 2.5


def test_node_view_of_a_corrupt_file_raises_the_record_error(tmp_path):
    trace = ExecutionTrace([Node(i, "x", attrs=[Attr("num_ops", 300 + i)]) for i in range(3)])
    path = write_trace(trace, tmp_path / "c.0.et")
    data = bytearray(path.read_bytes())
    at = data.rindex(b"num_ops") + len(b"num_ops")
    data[at + 1] = 0xFF
    data[at + 2] |= 0x80
    path.write_bytes(bytes(data))
    nodes = read_trace(path).nodes  # a view: attributes are decoded when touched
    assert [n.id for n in nodes] == [0, 1, 2]
    with pytest.raises(TraceFormatError, match="node 2"):
        _ = [n.attrs for n in nodes]


def test_node_view_equals_protobuf_decode_on_the_benchmark_mix(tmp_path):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "bench_read_mix", Path(__file__).parents[2] / "benchmarks" / "bench_read_mix.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    path = tmp_path / "mix.0.et"
    bench.make_file(path, 3000)
    trace = read_trace(path)
    assert len(trace.nodes) == 3000
    assert trace.nodes == read_trace(path)._encoded.decode_all()
    assert trace.nodes[3].attrs[-1].value == "dp_grad_allreduce" and list(trace.nodes[3].data_deps) == [2]


def _cost_mix() -> ExecutionTrace:
    """COMP nodes on both sides with every cost attribute, comm nodes, ProfilerStep markers, varied dependencies."""
    nodes = []
    for i in range(30):
        deps = list(range(max(0, i - i % 3), i))  # 0, 1 or 2 data dependencies
        ctrl = [i - 1] if i % 4 == 1 else []
        if i % 5 == 4:
            attrs = [Attr("comm_type", i % 3), Attr("comm_size", 64 * i)]
            nodes.append(Node(i, f"ar{i}", NodeType.COMM_COLL_NODE, data_deps=deps, ctrl_deps=ctrl, attrs=attrs))
            continue
        attrs = [Attr("is_cpu_op", i % 2 == 0, "bool_val") if i % 3 else Attr("is_cpu_op", 0, "int32_val")]
        if i % 2:
            attrs.append(Attr("num_ops", 1000 + i))
        if i % 7 == 0:
            attrs.append(Attr("tensor_size", 4096, "uint64_val"))
        if i % 9 == 0:
            attrs.append(Attr("op_class", "view", "string_val"))
        name = f"ProfilerStep#{i}" if i % 10 == 3 else f"op{i}"
        if name.startswith("ProfilerStep"):
            attrs.append(Attr("range_duration_ns", 5000 + i))
        nodes.append(
            Node(i, name, NodeType.COMP_NODE, data_deps=deps, ctrl_deps=ctrl, duration_ns=1000 * (i + 1), attrs=attrs)
        )
    return ExecutionTrace(nodes)


def test_summary_while_reading_equals_the_column_path(tmp_path, monkeypatch):
    import tracekit.wire.columnar as columnar

    monkeypatch.setattr(columnar, "ATTR_CHUNK", 4)  # chunks of 4 records: 8 chunks, the last one short
    path = write_trace(_cost_mix(), tmp_path / "mix.0.et")
    scanned_trace = read_trace(path)
    scanned = summarize_trace(scanned_trace)
    plain = read_trace(path)
    plain.columns()  # columns built before: the summary takes the column path
    assert scanned == summarize_trace(plain)
    a, b = scanned_trace.columns(), plain.columns()
    for name in ("ids", "types", "duration_ns", "data_ptr", "data_ids", "ctrl_ptr", "ctrl_ids"):
        assert getattr(a, name).tolist() == getattr(b, name).tolist(), name
    # by hand: COMP nodes are i % 5 != 4 (24); device side (is_cpu_op false): odd i with a bool, or i % 3 == 0
    device = [i for i in range(30) if i % 5 != 4 and (i % 3 == 0 or i % 2 == 1)]
    costed = [i for i in device if i % 2 or i % 7 == 0 or i % 9 == 0]
    assert scanned.cost.side == "device" and scanned.cost.comp_nodes == len(device)
    assert scanned.cost.costed_nodes == len(costed)
    assert scanned.cost.costed_ns == sum(1000 * (i + 1) for i in costed)
    assert scanned.cost.total_flops == sum(1000 + i for i in range(30) if i % 5 != 4 and i % 2)
    assert scanned.steps == {"ProfilerStep#3": 5003, "ProfilerStep#13": 5013, "ProfilerStep#23": 5023}
    # comm nodes i = 4, 9, ..., 29 with comm_type i % 3 (Chakra: 0 ALL_REDUCE, 1 REDUCE, 2 ALL_GATHER), first seen first
    assert list(scanned.collectives.items()) == [("REDUCE", 2), ("ALL_REDUCE", 2), ("ALL_GATHER", 2)]
    assert scanned.comm_bytes_by_collective["ALL_REDUCE"] == 64 * (9 + 24)


def test_summary_while_reading_falls_back_for_irregular_values(tmp_path, monkeypatch):
    import tracekit.wire.columnar as columnar

    monkeypatch.setattr(columnar, "ATTR_CHUNK", 4)
    nodes = list(_cost_mix().nodes)
    nodes[25] = nodes[25].with_attr("num_ops", 7.9, "double_val")  # a float count: truncated by the integer rule
    nodes[24] = nodes[24].with_attr("comm_type", 1.5, "double_val")  # a float collective: the general path
    path = write_trace(ExecutionTrace(nodes), tmp_path / "odd.0.et")
    plain = read_trace(path)
    plain.columns()
    scanned = summarize_trace(read_trace(path))
    assert scanned == summarize_trace(plain)
    assert scanned.collectives["UNKNOWN_1.5"] == 1 and scanned.collectives["ALL_REDUCE"] == 1


def test_summary_while_reading_reports_a_corrupt_attribute(tmp_path, monkeypatch):
    import tracekit.wire.columnar as columnar

    monkeypatch.setattr(columnar, "ATTR_CHUNK", 2)  # the bad record lies in the second chunk
    trace = ExecutionTrace([Node(i, "x", attrs=[Attr("num_ops", 300 + i)]) for i in range(3)])
    path = write_trace(trace, tmp_path / "c.0.et")
    data = bytearray(path.read_bytes())
    at = data.rindex(b"num_ops") + len(b"num_ops")
    data[at + 1] = 0xFF
    data[at + 2] |= 0x80
    path.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match="attribute") as err:
        summarize_trace(read_trace(path))
    assert err.value.node_id == 2


def test_node_view_typed_reads_equal_the_nodes_and_share_one_pass(tmp_path, monkeypatch):
    import tracekit.wire.kernels as wk

    nodes = []
    for i in range(300):
        if i % 2:
            nodes.append(Node(i, "ar", NodeType.COMM_COLL_NODE, attrs=[Attr("comm_size", 8 * i)]))
        else:
            nodes.append(Node(i, "mm", NodeType.COMP_NODE, attrs=[Attr("num_ops", 3 * i)] if i % 10 else []))
    nodes[101] = nodes[101].with_attr("comm_size", 2.75, "double_val")  # the integer rule truncates
    path = write_trace(ExecutionTrace(nodes), tmp_path / "v.0.et")
    calls = []
    find = wk.find_attrs
    monkeypatch.setattr(wk, "find_attrs", lambda *a: calls.append(1) or find(*a))
    view = read_trace(path).nodes
    got = [(n.comm_bytes, n.num_ops) for n in view]
    assert got == [(n.comm_bytes, n.num_ops) for n in nodes]
    assert got[101] == (2, None) and got[3] == (24, None) and got[4] == (None, 12) and got[10] == (None, None)
    assert len(calls) == 1  # both columns found in one pass over the records


def test_node_view_reads_a_non_number_node_by_node(tmp_path):
    from tracekit.errors import ValidationError

    nodes = [Node(i, "ar", NodeType.COMM_COLL_NODE, attrs=[Attr("comm_size", i)]) for i in range(200)]
    nodes[150] = nodes[150].with_attr("comm_size", "big", "string_val")
    view = read_trace(write_trace(ExecutionTrace(nodes), tmp_path / "s.0.et")).nodes
    assert [view[i].comm_bytes for i in range(150)] == list(range(150))
    with pytest.raises(ValidationError, match="comm_size") as err:
        _ = view[150].comm_bytes
    assert err.value.node_id == 150
    assert view[199].comm_bytes == 199


def test_node_view_nodes_are_node_values_read_lazily(tmp_path):
    import copy
    import pickle

    from tracekit.wire.nodeview import ColumnNode

    nodes = [
        Node(
            10 + i,
            f"op{i % 3}",
            NodeType.COMP_NODE if i % 2 else NodeType.COMM_COLL_NODE,
            data_deps=list(range(10, 10 + i))[-(i % 4) :] if i % 4 else [],  # 0, 1, 2 or 3 dependencies
            ctrl_deps=[10 + i - 1] if i % 5 == 1 else [],
            start_time_ns=1000 * i,
            duration_ns=7 * i,
            attrs=[Attr("num_ops", 3 * i)]
            if i % 2
            else [Attr("comm_size", 5 * i), Attr("pg_name", "dp", "string_val")],
        )
        for i in range(12)
    ]
    trace = read_trace(write_trace(ExecutionTrace(nodes), tmp_path / "l.0.et"))
    view = trace.nodes
    assert [(n.id, n.type, n.duration_ns) for n in view] == [(10 + i, n.type, 7 * i) for i, n in enumerate(nodes)]
    assert trace.columns()._names is None  # a loop that reads no name decodes none
    read = list(view)
    assert all(type(n) is ColumnNode for n in read) and read == nodes and view == nodes
    assert [n.data_deps for n in read][:5] == [(), (10,), (10, 11), (10, 11, 12), ()]
    assert read[6].ctrl_deps == (15,) and read[6].start_time_ns == 6000 and read[3].name == "op0"
    for built, got in zip(nodes, read):
        assert hash(got) == hash(built) and repr(got) == repr(built) and got.fields() == built.fields()
        assert (got.comm_bytes, got.num_ops, got.pg_name) == (built.comm_bytes, built.num_ops, built.pg_name)
        back = pickle.loads(pickle.dumps(got))
        assert type(back) is Node and back == built and copy.deepcopy(got) is got
    edited = read[3].replace(name="x").with_attr("num_ops", 1)
    assert type(edited) is Node and edited.name == "x" and edited.num_ops == 1 and read[3].num_ops == 9
    assert edited.data_deps == (10, 11, 12) and read[3] == nodes[3]
    with pytest.raises(AttributeError):
        read[1].name = "y"
    assert ExecutionTrace(read).nodes == tuple(nodes)  # view nodes build a trace in memory


def test_node_view_nodes_built_after_a_typed_read_carry_the_integer_fields(tmp_path):
    import pickle

    from tracekit.wire.nodeview import CHUNK_NODES, ColumnNode

    n = 3 * CHUNK_NODES
    nodes = [
        Node(i, "ar", NodeType.COMM_COLL_NODE, attrs=[Attr("comm_size", 8 * i), Attr("rf_id", i)])
        if i % 2
        else Node(i, "mm", NodeType.COMP_NODE, attrs=[Attr("num_ops", 3 * i), Attr("tensor_size", 4, "uint64_val")])
        for i in range(n)
    ]
    view = read_trace(write_trace(ExecutionTrace(nodes), tmp_path / "c.0.et")).nodes
    got = [(v.num_ops, v.comm_bytes, v.tensor_bytes, v.comm_tag, v.int_attr("rf_id")) for v in view]
    assert got == [(b.num_ops, b.comm_bytes, b.tensor_bytes, b.comm_tag, b.get_attr("rf_id")) for b in nodes]
    assert got[2] == (6, None, 4, None, None) and got[3] == (None, 24, None, None, 3)
    later = view[n - 1]  # built after the columns were decoded: the values are in the node
    assert type(later) is not ColumnNode and isinstance(later, ColumnNode) and tuple.__len__(later) > 5
    assert later == nodes[n - 1] and hash(later) == hash(nodes[n - 1]) and repr(later) == repr(nodes[n - 1])
    back = pickle.loads(pickle.dumps(later))
    assert type(back) is Node and back == nodes[n - 1] and back.comm_bytes == 8 * (n - 1)
