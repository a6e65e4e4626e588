"""Standard Chakra fields defined once (tracekit.model.attrs): one rule per field, the same on a node and on columns."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tracekit.model.attrs import COMM_SIZE, COMM_TYPE, IS_CPU_OP, PG_NAME, Attr
from tracekit.errors import ValidationError
from tracekit.io import encode_trace, trace_from_bytes
from tracekit.model import ExecutionTrace, Metadata, Node, NodeType
from tracekit.checks.validate import validate_trace

COLL = NodeType.COMM_COLL_NODE


def _coll(nid: int, *attrs: Attr) -> Node:
    return Node(nid, f"ar{nid}", COLL, attrs=list(attrs))


def _read(nodes: list[Node]) -> ExecutionTrace:
    """The trace as a reader sees it: encoded and decoded (columns come from the records)."""
    return trace_from_bytes(encode_trace(ExecutionTrace(nodes, Metadata(version="1"))), path="t.et", rank=0)


def test_a_field_is_its_key():
    assert COMM_SIZE == "comm_size" and {"comm_size": 1}[COMM_SIZE] == 1
    assert type(Attr(COMM_SIZE, 8).name) is str  # stored as the plain name (orjson refuses str subclasses as keys)


def test_node_reads_follow_the_rules():
    n = _coll(
        7,
        Attr("comm_size", 1024.0, "double_val"),  # a count written as a double: truncated
        Attr("pg_name", b"3", "bytes_val"),  # text as bytes: decoded
        Attr("is_cpu_op", 1, "int32_val"),  # 0/1 as an integer: a bool
        Attr("comm_type", True, "bool_val"),  # a bool is not an integer
    )
    assert (COMM_SIZE.of(n), PG_NAME.of(n), IS_CPU_OP.of(n)) == (1024, "3", True)
    with pytest.raises(ValidationError, match="'comm_type' must be an integer, got True") as exc:
        COMM_TYPE.of(n)
    assert exc.value.node_id == 7


def test_columns_agree_with_nodes():
    nodes = [
        _coll(0, Attr("comm_size", 1 << 40, "uint64_val"), Attr("pg_name", "5", "string_val")),
        _coll(1, Attr("comm_size", 2.9, "double_val"), Attr("pg_name", 12, "int64_val")),
        _coll(2),
    ]
    cols = _read(nodes).columns()
    present, size = COMM_SIZE.column(cols)
    assert present.tolist() == [True, True, False] and size.tolist() == [1 << 40, 2, 0]
    assert [COMM_SIZE.of(n) for n in nodes] == [1 << 40, 2, None]
    assert PG_NAME.column(cols)[1] == ["5", "12", None] == [PG_NAME.of(n) for n in nodes]


def test_column_or_marks_what_the_rule_rejects():
    nodes = [
        _coll(0, Attr("comm_type", 4)),
        _coll(1, Attr("comm_type", "x", "string_val")),
        _coll(2, Attr("comm_type", math.nan, "double_val")),
        _coll(3),
    ]
    cols = _read(nodes).columns()
    with pytest.raises(ValidationError, match="node 1"):
        COMM_TYPE.column(cols)
    present, values, ok = COMM_TYPE.column_or(cols, absent=0, bad=-2)
    assert present.tolist() == [True, True, True, False]
    assert values.tolist() == [4, -2, -2, 0] and ok.tolist() == [True, False, False, True]
    assert isinstance(values, np.ndarray)


@pytest.mark.parametrize(
    ("attr", "error"),
    [
        (Attr("comm_size", 1024.0, "double_val"), None),  # read as 1024 bytes, as replay reads it
        (Attr("comm_size", -1, "int64_val"), "comm_size must be a non-negative integer (bytes), got -1"),
        (Attr("comm_size", True, "bool_val"), "comm_size must be a non-negative integer (bytes), got True"),
        (Attr("comm_size", math.inf, "double_val"), "comm_size must be a non-negative integer (bytes), got inf"),
        (Attr("comm_type", 2.0, "double_val"), None),  # ALL_GATHER
        (Attr("comm_type", 42, "int64_val"), "unknown comm_type 42"),
        (Attr("pg_name", 1.5, "double_val"), "pg_name must be text, got 1.5"),
        (Attr("pg_name", 7, "int64_val"), None),  # a group named by its number
    ],
)
def test_validate_reads_comm_attributes_by_the_rules(attr, error):
    base = {"comm_size": Attr("comm_size", 8), "comm_type": Attr("comm_type", 0)}
    base[attr.name] = attr
    report = validate_trace(_read([_coll(3, *base.values())]))
    errors = [i.message for i in report.errors]
    assert errors == ([] if error is None else [error])
    assert all(i.node_id == 3 and i.check == "comm-attrs" for i in report.errors)


#: files that still spell standard keys in reads, each owned by work in flight when the fields moved to
#: tracekit.model.attrs (switch them to the fields and drop them from this list; it only shrinks)
PENDING: set[str] = set()
_READERS = {"get_attr", "attr", "attr_int", "attr_bool", "attr_str", "int_attr", "str_attr", "bool_attr"}
_WRITERS = {"with_attr", "without_attr", "Attr"}


def test_standard_keys_are_spelled_in_tracekit_attrs_only():
    """No read (or, outside converters, write) of a standard attribute by its literal key: they go through
    the fields of tracekit.model.attrs, where each key and its rule are written once."""
    import ast
    from pathlib import Path

    from tracekit.model import attrs

    standard = {v for v in vars(attrs).values() if isinstance(v, attrs._Field)}
    assert {"comm_size", "pg_name", "is_cpu_op", "num_ops", "tensor_size"} <= standard
    root = Path(__file__).resolve().parents[2]
    found = []
    for base in ("tracekit", "replayer"):
        for path in sorted((root / base).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel == "tracekit/model/attrs.py" or rel in PENDING:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Call) or not node.args:
                    continue
                name = getattr(node.func, "attr", getattr(node.func, "id", ""))
                arg = node.args[0]
                if name in _READERS | _WRITERS and isinstance(arg, ast.Constant) and arg.value in standard:
                    found.append(f"{rel}:{node.lineno}: {name}({arg.value!r})")
    assert found == []
