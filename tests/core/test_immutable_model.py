"""One immutable trace model (issue 13): nodes, attributes, metadata and traces never change once built.

The stale-view case of issue 13 ("after changing a node, validate_trace passed on
the stale index while the writer saved a dependency on a node that does not
exist") cannot happen: a change in place raises, and an edited trace is a new
value whose index is built from its own nodes.
"""

from __future__ import annotations

import pytest

from tracekit.model.attrs import as_bool, as_bytes, as_int, as_str
from tracekit.errors import ValidationError
from tracekit.io import read_trace, write_trace
from tracekit.model import Attr, ExecutionTrace, Metadata, Node, NodeDraft, NodeType
from tracekit.checks.validate import validate_trace


def _chain(n: int = 3) -> ExecutionTrace:
    return ExecutionTrace(
        [
            Node(i, f"op{i}", data_deps=[i - 1] if i else [], duration_ns=1000, attrs=[Attr("num_ops", 10 * i)])
            for i in range(n)
        ],
        rank=0,
    )


def _dangling(report) -> list[str]:
    return [i.message for i in report.issues if i.check == "dangling-dep"]


def test_the_stale_view_case_cannot_happen_in_memory():
    trace = _chain()
    assert validate_trace(trace).ok and trace.graph().n == 3  # the index is built and cached
    node = trace.nodes[2]
    with pytest.raises(AttributeError, match="immutable"):
        node.data_deps = (99,)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        node.data_deps.append(99)  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        trace.nodes[2] = node.replace(data_deps=(99,))  # type: ignore[index]
    with pytest.raises(AttributeError, match="immutable"):
        trace.metadata = Metadata("x")  # type: ignore[misc]
    # the edit is a new trace, indexed from its own nodes: validation sees the dangling dependency
    edited = trace.with_nodes([n.replace(data_deps=(99,)) if n.id == 2 else n for n in trace.nodes])
    assert _dangling(validate_trace(edited)) == ["data dep 99 does not exist"]
    assert [int(x) for x in edited.graph().missing[0]] == [2, 99]
    # ... and the trace it came from is untouched, index and nodes alike
    assert validate_trace(trace).ok and list(trace.nodes[2].data_deps) == [1]


def test_the_stale_view_case_cannot_happen_through_a_file(tmp_path):
    path = write_trace(_chain(), tmp_path / "t.0.et")
    trace = read_trace(path)
    assert validate_trace(trace).ok
    with pytest.raises(AttributeError):
        trace.nodes[2].data_deps = (99,)  # type: ignore[misc]
    with pytest.raises(TypeError):
        trace.nodes[2] = trace.nodes[1]  # type: ignore[index]
    edited = trace.with_nodes([n.replace(data_deps=(99,)) if n.id == 2 else n for n in trace.nodes])
    out = write_trace(edited, tmp_path / "e.0.et")
    # what validation says of the edited trace is what it says of the file the writer saved
    assert (
        _dangling(validate_trace(edited))
        == _dangling(validate_trace(read_trace(out)))
        == ["data dep 99 does not exist"]
    )
    assert validate_trace(read_trace(path)).ok  # the input file is unchanged


def test_edits_return_new_values_and_leave_the_original():
    n = Node(5, "x", NodeType.COMM_COLL_NODE, attrs=[Attr("comm_size", 4096, "uint64_val")])
    m = n.with_attr("comm_size", 8192).with_attr("pg_name", "tp").without_attr("nothing")
    assert (n.comm_bytes, m.comm_bytes, m.pg_name) == (4096, 8192, "tp")
    assert m.attrs[0] == Attr("comm_size", 8192, "uint64_val")  # an integer keeps the attribute's integer kind
    assert n.without_attr("comm_size").attrs == () and n.attrs == (Attr("comm_size", 4096, "uint64_val"),)
    assert n.replace(data_deps=[1, 2]).data_deps == (1, 2) and n.data_deps == ()
    with pytest.raises(TypeError, match="no field 'dur'"):
        n.replace(dur=3)
    with pytest.raises(AttributeError):
        n.attrs[0].value = 1  # type: ignore[misc]
    md = Metadata("0.0.4", [Attr("a", 1)])
    assert md.with_attr("b", "x").get_attr("b") == "x" and md.get_attr("b") is None
    assert Attr("l", [1, 2], "int64_list").value == (1, 2)
    with pytest.raises(TypeError, match="Node values"):
        ExecutionTrace([NodeDraft(1)])  # type: ignore[list-item]
    assert NodeDraft.from_node(m).build() == m


def test_one_rule_per_value_type():
    assert as_int("n", 7) == 7 and as_int("n", 2.9) == 2 and as_int("n", -2.9) == -2 and as_int("n", None) is None
    for bad in (True, "7", b"7", [7], float("nan")):
        with pytest.raises(ValidationError, match="'n' must be an integer"):
            as_int("n", bad, node_id=3)
    assert as_str("pg", "tp") == "tp" and as_str("pg", 3) == "3" and as_str("pg", b"dp") == "dp"
    with pytest.raises(ValidationError):
        as_str("pg", 1.5)
    assert as_bytes("b", b"\x00") == b"\x00" and as_bytes("b", "a") == b"a"
    with pytest.raises(ValidationError):
        as_bytes("b", 1)
    assert as_bool("c", True) is True and as_bool("c", 0) is False
    with pytest.raises(ValidationError):
        as_bool("c", 2)


def test_accessors_agree_between_built_nodes_the_file_view_and_the_columns(tmp_path):
    kinds = [
        ("int32_val", -7),
        ("uint64_val", 2**40),
        ("sint64_val", -5),
        ("fixed32_val", 9),
        ("double_val", 2.75),
        ("float_val", -1.5),
    ]
    nodes = [
        Node(i, "c", NodeType.COMM_COLL_NODE, attrs=[Attr("comm_size", v, k), Attr("pg_name", str(i), "string_val")])
        for i, (k, v) in enumerate(kinds)
    ]
    nodes.append(Node(len(kinds), "bad", NodeType.COMM_COLL_NODE, attrs=[Attr("comm_size", True, "bool_val")]))
    trace = read_trace(write_trace(ExecutionTrace(nodes), tmp_path / "k.0.et"))
    want = [-7, 2**40, -5, 9, 2, -1]
    assert [n.comm_bytes for n in nodes[:-1]] == [n.comm_bytes for n in trace.nodes[:-1]] == want
    assert [n.pg_name for n in trace.nodes[:-1]] == [str(i) for i in range(len(kinds))]
    with pytest.raises(ValidationError, match="node 6"):
        _ = trace.nodes[-1].comm_bytes
    with pytest.raises(ValidationError, match="node 6"):
        trace.columns().attr_int("comm_size")
    good = read_trace(write_trace(ExecutionTrace(nodes[:-1]), tmp_path / "g.0.et"))
    assert good.columns().attr_int("comm_size")[1].tolist() == want
    assert ExecutionTrace(nodes[:-1]).columns().attr_int("comm_size")[1].tolist() == want
