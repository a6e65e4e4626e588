"""The compiled record writers (tracekit/wire/encode.py, tracekit/wire/batch.py): bytes equal to protobuf's per node."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.interop.astra import astra_ready
from tracekit.errors import TracekitError
from tracekit.model.groups import DEFAULT_PG
from tracekit.io import encode_node, encode_nodes, encode_trace, framed_records, trace_from_bytes
from tracekit.model import Attr, ExecutionTrace, IOInfo, Node, NodeType

ATTRS = [
    Attr("comm_size", 1048576, "int64_val"),
    Attr("pg_name", "3", "string_val"),
    Attr("is_cpu_op", False, "bool_val"),
    Attr("involved_dim", [True, False], "bool_list"),
]


def _random_nodes(n: int, seed: int = 1) -> tuple[list[Node], dict]:
    """Nodes with every column kind (ids up to 2^63, empty names, nanosecond times) and their columns."""
    rng = np.random.default_rng(seed)
    names = ["", "aten::mm", "nccl:all_reduce", "é"]
    ids = rng.integers(0, 2**63, size=n, dtype=np.uint64)
    ids[0] = 0
    types = rng.integers(0, 8, size=n)
    dur = rng.integers(0, 5_000_000, size=n)
    dur[::3] = dur[::3] // 1000 * 1000  # whole microseconds: no duration_nanos field
    start = rng.integers(0, 10**12, size=n)
    codes = rng.integers(0, len(names), size=n)
    cols: dict = {"names": names, "name_codes": codes, "start_ns": start, "attrs": ATTRS}
    nodes = []
    for key, k in (("data", 4), ("ctrl", 2)):
        lens = rng.integers(0, k, size=n)
        ptr = np.concatenate(([0], np.cumsum(lens)))
        cols[f"{key}_ptr"], cols[f"{key}_ids"] = ptr, rng.integers(0, 2**40, size=int(ptr[-1]), dtype=np.uint64)
    a_lens = rng.integers(0, 3, size=n)
    cols["attr_ptr"] = np.concatenate(([0], np.cumsum(a_lens)))
    cols["attr_codes"] = rng.integers(0, len(ATTRS), size=int(a_lens.sum()))
    for i in range(n):
        d, c, a = (cols[f"{k}_ptr"][i : i + 2] for k in ("data", "ctrl", "attr"))
        nodes.append(
            Node(
                id=int(ids[i]),
                name=names[codes[i]],
                type=int(types[i]),
                data_deps=cols["data_ids"][d[0] : d[1]].tolist(),
                ctrl_deps=cols["ctrl_ids"][c[0] : c[1]].tolist(),
                start_time_ns=int(start[i]),
                duration_ns=int(dur[i]),
                attrs=[ATTRS[j] for j in cols["attr_codes"][a[0] : a[1]]],
            )
        )
    return nodes, dict(cols, ids=ids, types=types, duration_ns=dur)


def test_encode_nodes_equals_protobuf_per_node():
    nodes, cols = _random_nodes(300)
    ids, types, dur = cols.pop("ids"), cols.pop("types"), cols.pop("duration_ns")
    assert encode_nodes(ids, types, dur, **cols) == b"".join(encode_node(n) for n in nodes)


def test_encode_nodes_minimal_columns():
    # id 0, type 0 and zero times are proto3 defaults: not written, as protobuf does (an empty body: 0x00)
    out = encode_nodes(np.array([0, 5]), np.array([0, 4]), np.array([0, 1000]), names=[""], name_codes=[0, 0])
    assert out == bytes([0x00, 0x06, 0x08, 0x05, 0x18, 0x04, 0x38, 0x01])
    assert out == encode_node(Node(id=0, type=0)) + encode_node(Node(id=5, type=4, duration_ns=1000))


def test_encode_nodes_refuses_bad_columns():
    with pytest.raises(TracekitError, match=r"duration -5 is out of range") as exc:
        encode_nodes(np.array([1, 9]), np.array([4, 4]), np.array([0, -5]), names=["x"], name_codes=[0, 0])
    assert exc.value.node_id == 9
    with pytest.raises(TracekitError, match="ptr must be"):
        encode_nodes([1], [4], [0], names=["x"], name_codes=[0], data_ptr=[0, 2], data_ids=[1])
    with pytest.raises(TracekitError, match="name code"):
        encode_nodes([1], [4], [0], names=["x"], name_codes=[1])


def test_framed_records_not_back_to_back():
    """Records whose bodies are not preceded by their own length prefix are framed again (compiled pass)."""
    from tracekit.wire.framing import EncodedNodes

    bodies = [encode_node(Node(id=i, name="op" * i, duration_ns=1000 * i))[1:] for i in range(1, 6)]
    data = b"".join(b"\xff" + b for b in bodies)  # a stray byte before each body
    starts = np.cumsum([0] + [len(b) + 1 for b in bodies[:-1]]) + 1
    enc = EncodedNodes(data, starts, starts + [len(b) for b in bodies], None, 0)
    assert b"".join(framed_records(enc)) == b"".join(bytes([len(b)]) + b for b in bodies)


def _encoded(trace: ExecutionTrace) -> ExecutionTrace:
    return trace_from_bytes(encode_trace(trace), rank=0)


def test_astra_ready_on_records_equals_node_path():
    init = IOInfo(values='[{"pg_name": "3", "ranks": [0, 1]}]', shapes="", types="")
    nodes = [
        Node(id=1, name="process_group:init", type=NodeType.METADATA_NODE, inputs=init),
        Node(id=2, name="ar", type=NodeType.COMM_COLL_NODE, attrs=[Attr("pg_name", "3", "string_val")]),
        Node(id=3, name="ar0", type=NodeType.COMM_COLL_NODE, attrs=[Attr("pg_name", "0", "string_val")]),
        Node(id=4, name="mm", type=NodeType.COMP_NODE, duration_ns=5000, data_deps=[2]),
        Node(id=5, name="ar1", type=NodeType.COMM_COLL_NODE, attrs=[Attr("pg_name", "7", "string_val")]),
    ]
    ids = {"3": "1", "0": None, DEFAULT_PG: None, "7": "7"}
    by_nodes = astra_ready(ExecutionTrace(nodes), ids)
    on_records = astra_ready(_encoded(ExecutionTrace(nodes)), ids)
    assert on_records.node_at(0).is_cpu_op is True
    assert on_records.node_at(1).get_attr("pg_name") == "1"
    assert on_records.node_at(2).get_attr("pg_name") is None  # the all-ranks group loses its name
    assert encode_trace(on_records) == encode_trace(by_nodes)
    untouched = _encoded(ExecutionTrace(nodes[3:]))
    assert astra_ready(untouched, ids) is untouched


def test_groups_found_on_records_as_on_nodes():
    """groups_from_trace on encoded records (a compiled search of the name bytes) equals the node path; a
    non-ASCII name sends it through the decoded names, a name that is not UTF-8 raises there as before."""
    from tracekit.errors import TraceFormatError
    from tracekit.model.groups import groups_from_trace

    first = IOInfo(values='[{"pg_name": "3", "ranks": [0, 1]}]', shapes="", types="")
    later = IOInfo(values='[{"pg_name": "5", "ranks": [2, 3]}, {"pg_name": "3", "ranks": [1, 2]}]', shapes="", types="")
    nodes = [
        Node(id=1, name="## process_group:init ##", type=NodeType.METADATA_NODE, inputs=first),
        Node(id=2, name="process_group:ini", type=NodeType.METADATA_NODE, inputs=first),  # not the name
        Node(id=3, name="mm", type=NodeType.COMP_NODE, duration_ns=5000),
        Node(id=4, name="process_group:init", type=NodeType.COMP_NODE, inputs=later),  # any type, later wins
    ]
    want = {"3": (1, 2), "5": (2, 3)}
    assert groups_from_trace(ExecutionTrace(nodes)) == want
    assert groups_from_trace(_encoded(ExecutionTrace(nodes))) == want
    wide = [*nodes, Node(id=5, name="é", type=NodeType.COMP_NODE)]
    assert groups_from_trace(_encoded(ExecutionTrace(wide))) == want
    data = encode_trace(ExecutionTrace(wide)).replace("é".encode(), b"\xff\xfe")
    with pytest.raises(TraceFormatError, match="not valid UTF-8"):
        groups_from_trace(trace_from_bytes(data, rank=0))


def test_astra_candidates_on_records_with_and_without_columns():
    """The records astra_ready decodes: every METADATA node and the communication nodes whose first ``pg_name``
    is "" or a renamed group, or is not one string; found from the columns' types when the trace has them, else
    by a scan of the types, with the same result."""
    from tracekit.interop.astra import _candidates_encoded

    def comm(i: int, kind: NodeType, *attrs: Attr) -> Node:
        return Node(id=i, name=f"c{i}", type=kind, attrs=list(attrs))

    coll, send, recv = NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE
    nodes = [
        Node(id=0, name="meta", type=NodeType.METADATA_NODE),
        comm(1, coll, Attr("pg_name", "3", "string_val")),  # renamed to "1"
        comm(2, send, Attr("pg_name", "", "string_val")),  # the default group, named ""
        comm(3, recv, Attr("pg_name", 3, "int64_val")),  # not a string: decoded, _fixed_node decides
        comm(4, coll, Attr("pg_name", "7", "string_val")),  # keeps its name
        Node(id=5, name="mm", type=NodeType.COMP_NODE, attrs=[Attr("pg_name", "3", "string_val")]),  # not comm
        comm(6, coll, Attr("comm_size", 8, "int64_val")),  # no group
        comm(7, coll, Attr("pg_name", "3", "string_val", doc_string="tp")),  # a doc string beside the value
        comm(8, coll, Attr("pg_name", "7", "string_val"), Attr("pg_name", "3", "string_val")),  # the first counts
    ]
    ids = {"3": "1", DEFAULT_PG: None, "7": "7"}
    plain = _encoded(ExecutionTrace(nodes))
    with_cols = _encoded(ExecutionTrace(nodes))
    with_cols.columns()
    assert _candidates_encoded(plain, ids) == [0, 1, 2, 3, 7]
    assert _candidates_encoded(with_cols, ids) == [0, 1, 2, 3, 7]


def test_spliced_records_stay_in_their_array_until_read_as_bytes():
    """A rewrite's records live in the kernel's output array: written as pieces (no bytes made), equal to the
    per-node encoding; ``data`` makes the bytes once; a pickle carries plain bytes."""
    import pickle

    from tracekit.wire.spliced import SplicedNodes
    from tracekit.io import encoded_pieces
    from tracekit.wire.records import Edit, Records, rewrite, varint_fields

    nodes = [Node(id=i, name="mm", type=NodeType.COMP_NODE, duration_ns=1000 * (i + 1)) for i in range(4)]
    src = _encoded(ExecutionTrace(nodes))
    edit = Edit()
    rows = np.array([1, 3])
    edit.drops.append((rows, 7))
    edit.inserts.append((rows, 7, varint_fields(7, np.array([20, 40]))))
    out = rewrite(Records.of(src), edit)
    enc = out._encoded
    assert isinstance(enc, SplicedNodes) and enc._bytes is None
    want = encode_trace(
        ExecutionTrace([nodes[0], nodes[1].replace(duration_ns=20_000), nodes[2], nodes[3].replace(duration_ns=40_000)])
    )
    assert b"".join(bytes(p) for p in encoded_pieces(out)) == want
    assert enc._bytes is None  # writing made no bytes
    assert enc.data == enc.array.tobytes() and enc._bytes is not None
    back = pickle.loads(pickle.dumps(out))
    assert type(back._encoded).__name__ == "EncodedNodes"
    assert encode_trace(back) == want
    assert [n.duration_ns for n in back.nodes] == [1000, 20_000, 3000, 40_000]


def _attr_msg(*fields: bytes) -> bytes:
    """One ``attr`` field (Node field 10) holding the given AttributeProto fields, its length as a varint."""
    from tracekit.wire.framing import _varint

    body = b"".join(fields)
    return b"\x52" + _varint(len(body)) + body


def _str_field(number: int, text: bytes) -> bytes:
    from tracekit.wire.framing import _varint

    return _varint(number << 3 | 2) + _varint(len(text)) + text


def test_string_attr_scan_reads_the_wire_as_protobuf_does():
    """string_attr_in on hand-made records, one wire form each: long attribute messages (two-byte lengths),
    a repeated name field (the last one counts), a long name before, two values, a doc string; each flag
    is what protobuf's decoded record says (2: not one string, decoded by the caller); a cut record is reported by its row."""
    from tracekit._proto import et_def_pb2 as pb
    from tracekit.wire.recscan import string_attr_in

    name, value, doc = (lambda t: _str_field(1, t)), (lambda t: _str_field(29, t)), (lambda t: _str_field(2, t))
    head = b"\x08\x05" + _str_field(2, b"ar") + b"\x18\x07"  # id 5, name "ar", COMM_COLL
    records = [
        head + _attr_msg(name(b"pg_name"), doc(b"d" * 200), value(b"3")),  # 1: long message, renamed group
        head + _attr_msg(name(b"x"), name(b"pg_name"), value(b"3")),  # 1: the last name field counts
        head + _attr_msg(name(b"pg_name"), name(b"x"), value(b"3")) + _attr_msg(name(b"pg_name"), value(b"7")),  # 0
        head + _attr_msg(name(b"n" * 300), value(b"3")) + _attr_msg(name(b"pg_name"), value(b"")),  # 1: "" renames
        head + _attr_msg(name(b"pg_name"), value(b"3"), value(b"7")),  # 2: two value fields (decoded to judge)
        head + _attr_msg(name(b"pg_name"), value(b"7"), b"\x48\x03"),  # 2: a string and an int64 value
        head + b"\xd2\x00\x0d\x0a\x07pg_name\xea\x01\x013",  # 1: the attr tag in two bytes (an overlong varint)
        head + _attr_msg(name(b"pg_name_x"), value(b"3")),  # 0: another name
    ]
    want = [1, 1, 0, 1, 2, 2, 1, 0]
    for rec, flag in zip(records, want):  # 0 and 1 as protobuf decodes the records; 2: the caller decodes
        attr = next((a for a in pb.Node.FromString(rec).attr if a.name == "pg_name"), None)
        if flag != 2:
            assert flag == int(
                attr is not None and attr.WhichOneof("value") == "string_val" and attr.string_val in ("", "3")
            )
    buf = np.frombuffer(b"".join(records), dtype=np.uint8)
    ends = np.cumsum([len(r) for r in records]).astype(np.int64)
    starts = ends - [len(r) for r in records]
    rows = np.arange(len(records), dtype=np.int64)
    table, table_ptr = np.frombuffer(b"3", dtype=np.uint8), np.array([0, 0, 1], dtype=np.int64)
    key = np.frombuffer(b"pg_name", dtype=np.uint8)
    flags = np.full(len(records), -1, dtype=np.int8)
    assert string_attr_in(buf, starts, ends, rows, key, table, table_ptr, flags) == 0
    assert flags.tolist() == want
    cut = ends.copy()
    cut[3] -= 1  # record 3 ends inside its last attribute
    assert string_attr_in(buf, starts, cut, rows, key, table, table_ptr, flags) == -4


def test_rewrite_spans_with_dropped_records_and_shorter_bodies():
    """rewrite's record spans when records are dropped and when an edited body ends shorter than its bound
    (a 200-byte name dropped, so the length prefix shrinks from two bytes to one): records decode as edited."""
    from tracekit.wire.records import Edit, Records, rewrite, varint_fields

    nodes = [Node(id=i, name="n" * (200 if i % 2 else 3), type=NodeType.COMP_NODE, duration_ns=1000) for i in range(6)]
    edit = Edit(keep=np.array([True, True, False, True, True, False]))
    rows = np.array([1, 3])
    edit.drops.append((rows, 2))  # the names
    edit.inserts.append((rows, 7, varint_fields(7, np.array([9, 300]))))
    edit.drops.append((rows, 7))
    out = rewrite(Records.of(_encoded(ExecutionTrace(nodes))), edit)
    want = [nodes[0], nodes[1].replace(name="", duration_ns=9000), nodes[3].replace(name="", duration_ns=300_000)]
    want.append(nodes[4])
    assert encode_trace(out) == encode_trace(ExecutionTrace(want))
    enc = out._encoded
    from tracekit.wire.codec import node_to_pb

    bodies = [node_to_pb(n).SerializeToString() for n in want]
    assert [enc.data[s:e] for s, e in zip(enc.starts.tolist(), enc.ends.tolist())] == bodies
