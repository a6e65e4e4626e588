"""The compiled read loops (tracekit.wire.kernels) on hand-built records, values worked out by hand.

Wire rules: https://protobuf.dev/programming-guides/encoding/ (tag = field << 3 | wire type; varints
little-endian base 128).  Node fields: id 1, name 2, type 3, ctrl_deps 4, data_deps 5, start 6,
duration 7 (micros), attr 10; AttributeProto: name 1, then the value oneof (docs/design.md section 3).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from tracekit.errors import TraceFormatError
from tracekit.io import frame, read_trace, split_records
from tracekit.model import Attr, ExecutionTrace, IOInfo, Node, NodeType


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _key(field: int, wt: int) -> bytes:
    return _varint(field << 3 | wt)


def _ld(field: int, payload: bytes) -> bytes:
    return _key(field, 2) + _varint(len(payload)) + payload


def _attr(name: str, value_field: int, wt: int, payload: bytes) -> bytes:
    return _ld(10, _ld(1, name.encode()) + _key(value_field, wt) + payload)


def _file(tmp_path, *records: bytes):
    path = tmp_path / "h.0.et"
    path.write_bytes(frame(b"") + b"".join(frame(r) for r in records))
    return path


def test_multi_byte_varints_and_both_dependency_encodings(tmp_path):
    # id 300 = 0xAC 0x02; duration 2**35 us; data deps packed (1, 300), ctrl deps unpacked 7 then 2**40
    rec = (
        _key(1, 0)
        + b"\xac\x02"
        + _key(3, 0)
        + b"\x04"
        + _key(7, 0)
        + _varint(2**35)
        + _ld(5, b"\x01\xac\x02")
        + _key(4, 0)
        + b"\x07"
        + _key(4, 0)
        + _varint(2**40)
    )
    rec2 = _key(1, 0) + b"\x05" + _key(5, 0) + b"\x02" + _key(5, 0) + b"\x03"  # unpacked data deps 2, 3
    cols = read_trace(_file(tmp_path, rec, rec2)).columns()
    assert cols.ids.tolist() == [300, 5]
    assert cols.duration_ns.tolist() == [2**35 * 1000, 0]
    assert cols.data_ptr.tolist() == [0, 2, 4] and cols.data_ids.tolist() == [1, 300, 2, 3]
    assert cols.ctrl_ptr.tolist() == [0, 2, 2] and cols.ctrl_ids.tolist() == [7, 2**40]


def test_ten_byte_varint_is_read_and_eleven_bytes_refused(tmp_path):
    ten = _key(1, 0) + b"\xff" * 9 + b"\x01"  # 2**64 - 1 in the maximum ten bytes
    assert read_trace(_file(tmp_path, ten)).columns().ids.tolist() == [2**64 - 1]
    eleven = _key(1, 0) + b"\xff" * 10 + b"\x01"
    with pytest.raises(TraceFormatError, match="undecodable Node message") as err:
        read_trace(_file(tmp_path, eleven)).columns()
    assert err.value.byte_offset == 2  # the record after the 1-byte empty metadata record and its prefix


def test_truncated_record_and_zero_length_record(tmp_path):
    good = _key(1, 0) + b"\x01"
    path = tmp_path / "t.0.et"
    path.write_bytes(frame(b"") + frame(good) + b"\x05\x08")  # a 5-byte record with 1 byte left
    with pytest.raises(TraceFormatError, match=r"record of 5 bytes runs past the end of the file \(1 bytes left\)"):
        read_trace(path)
    path.write_bytes(frame(b"") + frame(good) + b"\x00" + frame(good))
    with pytest.raises(TraceFormatError, match="empty node record") as err:
        read_trace(path)
    assert err.value.byte_offset == 4  # 1 (metadata) + 3 (first node record)
    assert split_records(frame(b"") + frame(good))[2].tolist() == [2]  # an empty metadata record is fine


def test_unknown_fields_are_skipped_and_decoded_by_protobuf_in_the_view(tmp_path):
    # field 15 varint, field 16 fixed64, field 17 fixed32, field 900 length-delimited: none of them Node's
    rec = (
        _key(1, 0)
        + b"\x09"
        + _key(15, 0)
        + b"\x96\x01"
        + _key(16, 1)
        + b"\x00" * 8
        + _key(17, 5)
        + b"\x00" * 4
        + _ld(900, b"xyz")
        + _key(3, 0)
        + b"\x07"
    )
    trace = read_trace(_file(tmp_path, rec))
    cols = trace.columns()
    assert cols.ids.tolist() == [9] and cols.types.tolist() == [7]
    assert list(trace.nodes) == [Node(9, "", NodeType.COMM_COLL_NODE)]


def test_negative_int64_and_every_scalar_value_kind(tmp_path):
    rec = (
        _key(1, 0)
        + b"\x01"
        + _attr("i64", 9, 0, _varint(2**64 - 5))  # int64 -5: ten-byte two's complement
        + _attr("i32", 7, 0, _varint(2**64 - 2))  # int32 -2 (sign-extended on the wire)
        + _attr("u32", 11, 0, _varint(2**32 - 1))
        + _attr("u64", 13, 0, _varint(2**63 + 1))  # past int64: decoded by protobuf
        + _attr("s32", 15, 0, _varint(5))  # zigzag 5 = -3
        + _attr("s64", 17, 0, _varint(4))  # zigzag 4 = 2
        + _attr("f64", 3, 1, struct.pack("<d", -1.5))
        + _attr("f32", 5, 5, struct.pack("<f", 0.25))
        + _attr("x32", 19, 5, struct.pack("<I", 2**32 - 1))
        + _attr("x64", 21, 1, struct.pack("<Q", 7))
        + _attr("sx32", 23, 5, struct.pack("<i", -9))
        + _attr("sx64", 25, 1, struct.pack("<q", -(2**40)))
        + _attr("b", 27, 0, b"\x01")
        + _attr("s", 29, 2, _varint(3) + b"abc")
        + _attr("l", 10, 2, _varint(4) + _ld(1, b"\x01\x7f"))  # int64_list, packed values 1, 127
        + _ld(10, _ld(1, b"none"))  # a name without a value
    )
    cols = read_trace(_file(tmp_path, rec)).columns()
    want = {
        "i64": -5, "i32": -2, "u32": 2**32 - 1, "u64": 2**63 + 1, "s32": -3, "s64": 2, "f64": -1.5, "f32": 0.25,
        "x32": 2**32 - 1, "x64": 7, "sx32": -9, "sx64": -(2**40), "b": True, "s": "abc", "l": (1, 127), "none": None,
    }  # fmt: skip
    for name, value in want.items():
        present, values = cols.attr(name)
        assert present.tolist() == [True] and values == [value], name
        assert type(values[0]) is type(value), name
    assert cols.attr_int("i64")[1].tolist() == [-5] and cols.attr_int("f64")[1].tolist() == [-1]
    assert cols.attr("absent")[0].tolist() == [False]


def test_first_attribute_of_a_name_wins_and_a_later_name_field_renames(tmp_path):
    second_name = _ld(10, _ld(1, b"x") + _key(9, 0) + b"\x05" + _ld(1, b"y"))  # protobuf: the last name, "y"
    rec = _key(1, 0) + b"\x01" + _attr("y", 9, 0, b"\x02") + second_name + _attr("y", 9, 0, b"\x03")
    cols = read_trace(_file(tmp_path, rec)).columns()
    assert cols.attr("y")[1] == [2] and cols.attr("x")[0].tolist() == [False]


def test_corrupt_attribute_is_reported_on_first_use_naming_node_and_offset(tmp_path):
    bad = _ld(10, _ld(1, b"n") + _key(9, 0) + b"\xff")  # a varint cut by the message end
    rec = _key(1, 0) + b"\x2a" + bad
    cols = read_trace(_file(tmp_path, rec)).columns()
    assert cols.ids.tolist() == [42]  # reading ids, types and times still works
    with pytest.raises(TraceFormatError, match=r"undecodable attribute \(truncated varint\)") as err:
        cols.attr("n")
    # empty metadata record (1 byte), record prefix (1), id field (2), attribute key and length (2)
    assert err.value.node_id == 42 and err.value.byte_offset == 1 + 1 + 2 + 2


@pytest.mark.parametrize("reader", ["verify", "validate", "node_attrs", "typed_read", "node_typed_read", "summary"])
def test_corrupt_attribute_after_good_nodes_is_named_by_every_reader(tmp_path, reader):
    from tracekit.checks.rank_checks import validate_trace
    from tracekit.checks.summary import summarize_trace

    good = [_key(1, 0) + _varint(i) + _attr("comm_size", 9, 0, _varint(8 * i)) for i in range(3)]
    bad = _key(1, 0) + b"\x2a" + _ld(10, _ld(1, b"n") + _key(9, 0) + b"\xff")  # a varint cut by the message end
    path = _file(tmp_path, *good, bad)
    trace = read_trace(path)
    assert trace.columns().ids.tolist() == [0, 1, 2, 42]  # the plain walk does not read attributes
    read = {
        "verify": lambda: trace.columns().verify(),
        "validate": lambda: validate_trace(trace),
        "node_attrs": lambda: trace.nodes[0].attrs,  # a good node: the first attribute use checks the file
        "typed_read": lambda: trace.columns().attr_int("comm_size"),
        "node_typed_read": lambda: trace.nodes[0].comm_bytes,  # a good node: its column is found for every node
        "summary": lambda: summarize_trace(trace),
    }[reader]
    with pytest.raises(TraceFormatError, match=r"undecodable attribute \(truncated varint\)") as err:
        read()
    # metadata (1 byte), 3 good records (prefix 1, id 2, attribute 2 + 13 bytes), the bad one's prefix (1), id (2),
    # attribute key and length (2)
    assert err.value.node_id == 42 and err.value.byte_offset == 1 + 3 * (1 + 2 + 15) + 1 + 2 + 2
    assert err.value.path == str(path) and err.value.rank == 0


def test_node_view_with_protobuf_decoded_records_between_built_ones(tmp_path):
    nodes = [Node(i, f"n{i % 3}", NodeType.COMP_NODE, data_deps=[i - 1] if i else [], duration_ns=1000 * i,
                  attrs=[Attr("num_ops", i)]) for i in range(300)]  # fmt: skip
    nodes[100] = nodes[100].replace(inputs=IOInfo("[1]", "[[2]]", "[int]"))
    nodes[250] = nodes[250].replace(outputs=IOInfo("[3]", "[[4]]", "[float]"))
    from tracekit.io import write_trace

    view = read_trace(write_trace(ExecutionTrace(nodes), tmp_path / "v.0.et")).nodes
    assert list(view) == nodes  # 2 of 300 records decoded with protobuf, in place
    assert view[250].outputs == IOInfo("[3]", "[[4]]", "[float]") and view[299].get_attr("num_ops") == 299


def test_names_are_grouped_by_content_past_the_first_table_size(tmp_path):
    names = [f"op{i % 700}" for i in range(2000)]  # 700 distinct names: more than the first 1,024-slot table holds
    from tracekit.io import write_trace

    trace = ExecutionTrace([Node(i, names[i]) for i in range(2000)])
    cols = read_trace(write_trace(trace, tmp_path / "n.0.et")).columns()
    assert cols.names == names


def test_kernel_time_limits_match_the_model():
    from tracekit.wire import kernels as wk
    from tracekit.model.node import MAX_DURATION_NS, MAX_TIME_NS

    assert (wk._MAX_DURATION_NS, wk._MAX_TIME_NS) == (MAX_DURATION_NS, MAX_TIME_NS)
    buf = np.frombuffer(frame(b"") + frame(b"\x08\x01"), dtype=np.uint8)
    none = np.zeros(0, dtype=np.int32)
    assert wk.frame(buf, none, none, True, False, 0)[:2] == (wk.OK, 2)


def test_names_sharing_their_first_8_bytes_are_told_apart(tmp_path):
    # names of one length and first bytes: the search compares every byte of a name in its table slot
    names = ["comm_size_a", "comm_size_b", "comm_siz", "comm_si", "comm_size"]
    rec = _key(1, 0) + b"\x01" + b"".join(_attr(x, 9, 0, _varint(k + 1)) for k, x in enumerate(names))
    cols = read_trace(_file(tmp_path, rec)).columns()
    cols.prefetch_attrs(names[::-1])  # several names in one pass
    assert [cols.attr(x)[1] for x in names] == [[1], [2], [3], [4], [5]]
    assert cols.attr("comm_size_c")[0].tolist() == [False]


@pytest.mark.parametrize(
    "sizes",
    [
        [70_000] + [2] * 50_000,  # a first record past the 64 KiB the count is guessed from
        [0] + [400] * 300 + [2] * 100_000,  # larger records first: the guess falls short, the rest is framed again
        [0] + [2] * 30_000 + [600] * 10_000,  # smaller records first: the guess is too large, the arrays are cut
    ],
)
def test_split_records_sized_by_a_guessed_count_gives_every_span(sizes):
    data = b"".join(frame(b"\x08" * n) for n in sizes)
    meta_start, meta_end, starts, ends = split_records(data)
    want, pos = [], 0
    for n in sizes:
        pos += len(_varint(n))
        want.append((pos, pos + n))
        pos += n
    assert [(meta_start, meta_end)] + list(zip(starts.tolist(), ends.tolist())) == want
    assert starts.base is None or starts.base.size <= len(sizes) * 9 // 8 + 16  # no array much larger than needed


def test_more_names_than_search_slots_and_other_layouts_are_found_in_one_pass(tmp_path):
    # 300 names share the 128 slots of the search's name table; names alike in length and in the bytes the
    # table samples (first, last, middle) are told apart by their bytes; an attribute with a doc string, or
    # with its value before its name, is walked field by field
    names = [f"a{i:03d}z" for i in range(300)]
    doc = _ld(10, _ld(1, b"with_doc") + _ld(2, b"a doc string") + _key(9, 0) + b"\x07")
    value_first = _ld(10, _key(9, 0) + b"\x09" + _ld(1, b"value_first"))
    rec = _key(1, 0) + b"\x01" + b"".join(_attr(x, 9, 0, _varint(k + 1)) for k, x in enumerate(names))
    cols = read_trace(_file(tmp_path, rec + doc + value_first)).columns()
    cols.prefetch_attrs([*names, "with_doc", "value_first", "a300z"])
    assert [cols.attr(x)[1] for x in names] == [[k + 1] for k in range(300)]
    assert cols.attr("with_doc")[1] == [7] and cols.attr("value_first")[1] == [9]
    assert cols.attr("a300z")[0].tolist() == [False]


def test_attributes_read_from_read_only_record_offsets():
    """Arrays a trace arrives with from Ray's object store are read-only: the attribute search must still type (it
    passed a slice of them where the node walk writes, and numba refused to compile: the Ray sweep failed in CI)."""
    from tracekit.checks.rank_checks import validate_trace

    path = Path(__file__).resolve().parents[2] / "sample_traces" / "chakra" / "feeder.0.et"
    writable = validate_trace(read_trace(path)).issues
    trace = read_trace(path)
    source = trace.columns().attr_num_fn.__self__  # the records' attribute source (tracekit.wire.attrsource)
    source.attr_at.flags.writeable = False
    assert validate_trace(trace).issues == writable
    assert len(writable) == 42  # the feeder sample's findings (tracekit validate lists them)
