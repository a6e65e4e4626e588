"""Closed-form checks of the columnar transform machinery (issue 17): record splicing and compaction on columns."""

from __future__ import annotations

import numpy as np
import pytest
from _tfhelpers import comp

from tracekit.errors import TransformError, ValidationError
from tracekit.io import encode_trace, trace_from_bytes
from tracekit.model import ExecutionTrace
from tracekit.wire.records import Blobs, Edit, Records, packed_fields, rewrite, varint_fields, varints
from tracekit.transforms.compact import compact_trace


def _encoded(nodes) -> ExecutionTrace:
    return trace_from_bytes(encode_trace(ExecutionTrace(nodes)), rank=0)


def test_varints_are_protobuf_varints():
    # 300 = 0b10_0101100 -> 0xAC 0x02 (protobuf encoding guide's example); 2^63 takes 10 bytes
    data, lens = varints(np.array([0, 1, 127, 128, 300, 2**63], dtype=np.uint64))
    assert lens.tolist() == [1, 1, 1, 2, 2, 10]
    assert data[:7].tolist() == [0, 1, 127, 0x80, 0x01, 0xAC, 0x02]


def test_packed_field_bytes():
    blobs = packed_fields(5, np.array([0, 2, 2]), np.array([1, 300], dtype=np.uint64))
    assert blobs.data[blobs.ptr[0] : blobs.ptr[1]].tobytes() == b"\x2a\x03\x01\xac\x02"
    assert blobs.lens.tolist() == [5, 0]  # an empty list writes no field
    assert varint_fields(7, np.array([5])).data.tobytes() == b"\x38\x05"


def test_splice_drops_records_and_rewrites_fields():
    t = _encoded([comp(i, [i - 1] if i else [], 1000 * (i + 1), stream=3) for i in range(5)])
    rec = Records.of(t)
    keep = np.array([True, False, True, True, True])
    e = Edit(keep=keep)
    rows = np.array([2, 4])
    e.drops.append((rows, 7))
    e.inserts.append((rows, 7, varint_fields(7, np.array([9, 11]))))
    e.drops.append((rows, 5))
    e.inserts.append((rows, 5, packed_fields(5, np.array([0, 1, 3]), np.array([0, 0, 2], dtype=np.uint64))))
    out = rewrite(rec, e)
    got = [(n.id, n.duration_ns, list(n.data_deps)) for n in out.nodes]
    assert got == [(0, 1000, []), (2, 9000, [0]), (3, 4000, [2]), (4, 11000, [0, 2])]
    assert [n.attrs for n in out.nodes] == [t.nodes[i].attrs for i in (0, 2, 3, 4)]


def test_splice_moves_a_body_back_when_its_prefix_is_shorter_than_the_room():
    """Record 1's 120-byte name becomes "y": the room left for its prefix (old body + new bytes, 2 varint
    bytes) is one byte more than its new length needs; the body moves back and the records stay framed."""
    nodes = [comp(0, [], 1000), comp(1, [0], 2000, name="x" * 120), comp(2, [1], 3000)]
    t = _encoded(nodes)
    rec = Records.of(t)
    assert rec.ends[1] - rec.starts[1] > 127  # a 2-byte length prefix before the edit
    e = Edit()
    e.drops.append((np.array([1]), 2))
    e.inserts.append((np.array([1]), 2, Blobs.from_list([b"\x12\x01y"])))
    out = rewrite(rec, e)
    want = ExecutionTrace([nodes[0], nodes[1].replace(name="y"), nodes[2]])
    assert encode_trace(out) == encode_trace(want)
    assert [n.name for n in trace_from_bytes(encode_trace(out)).nodes] == ["k", "y", "k"]


def test_compact_on_columns_merges_a_chain_with_forward_ids():
    # ids not ascending in file order: 10 -> 5 -> 7 on one stream, each 1 us, no FLOPs/bytes (issue 27: priced
    # nodes never merge); then 7 -> 8 with 100 FLOPs on 8 stays apart
    nodes = [
        comp(10, [], 1000, stream=1),
        comp(5, [10], 1000, stream=1),
        comp(7, [5], 1000, stream=1),
        comp(8, [7], 1000, stream=1, num_ops=100),
    ]
    out, stats = compact_trace(_encoded(nodes))
    n, priced = out.nodes
    assert (stats.nodes_before, stats.nodes_after, stats.deps_before, stats.deps_after) == (4, 2, 3, 1)
    assert (n.id, n.duration_ns, n.num_ops) == (10, 3000, None)
    assert list(n.get_attr("merged_node_ids")) == [10, 5, 7] and n.get_attr("merged_nodes") == 3
    assert (priced.id, priced.num_ops, list(priced.data_deps)) == (8, 100, [10])


def test_compact_on_columns_drops_implied_dependency_only():
    # a -> b -> c and a -> c: a -> c is implied; duplicates and a missing id go with the rewrite
    nodes = [comp(0, [], 1000, stream=1), comp(1, [0], 1000, stream=2), comp(2, [1, 0, 0, 99], 1000, stream=3)]
    out, stats = compact_trace(_encoded(nodes))
    assert [list(n.data_deps) for n in out.nodes] == [[], [0], [1]]
    assert (stats.deps_before, stats.deps_after) == (5, 2)


def test_compact_on_columns_reports_a_cycle():
    nodes = [comp(0, [1], 1000, stream=1), comp(1, [0], 1000, stream=2)]
    with pytest.raises(ValidationError, match="dependency cycle"):
        compact_trace(_encoded(nodes))


def test_compact_with_duplicate_ids_falls_back_to_the_node_path():
    nodes = [comp(0, [], 1000, stream=1), comp(0, [], 1000, stream=2)]
    out, stats = compact_trace(_encoded(nodes))
    assert stats.nodes_after == 2 and [n.id for n in out.nodes] == [0, 0]


def test_scale_compute_out_of_range_names_the_node():
    from tracekit.sets.traceset import TraceSet
    from tracekit.transforms import ScaleCompute

    ts = TraceSet([_encoded([comp(0, [], 1000), comp(4, [0], 2**52)])])
    with pytest.raises(TransformError) as err:
        ScaleCompute(4).apply(ts)
    assert err.value.node_id == 4 and "out of range" in str(err.value)


def test_scale_comm_in_place_only_for_plain_integer_sizes():
    from _tfhelpers import coll

    from tracekit.model import Attr
    from tracekit.sets.traceset import TraceSet
    from tracekit.transforms import ScaleComm

    plain = coll(0, comm_bytes=1000)
    documented = coll(1, comm_bytes=1000)
    documented = documented.replace(
        attrs=[Attr(a.name, a.value, a.kind, "bytes" if a.name == "comm_size" else "") for a in documented.attrs]
    )
    unsigned = coll(2, comm_bytes=1000).with_attr("comm_size", 1000, "uint32_val")
    twice = coll(3, comm_bytes=1000).with_attr("x", "y" * 200)  # a long attribute: decoded one by one
    ts = TraceSet([_encoded([plain, documented, unsigned, twice])])
    out = ScaleComm(2.5).apply(ts)[0].nodes
    assert [n.comm_bytes for n in out] == [2500, 2500, 2500, 2500]
    assert out[1].attrs[[a.name for a in out[1].attrs].index("comm_size")].doc_string == "bytes"
    assert [a.kind for a in out[2].attrs if a.name == "comm_size"] == ["uint32_val"]
    want = ScaleComm(2.5).apply(TraceSet([ExecutionTrace([plain, documented, unsigned, twice])]))[0].nodes
    assert out == want


@pytest.mark.parametrize("factor", [2, 0.3])
def test_scale_then_compact_on_columns_equals_node_path(factor):
    """ScaleCompute hands patched columns to Compact (roofline nodes re-encoded): same trace as the node path."""
    pytest.importorskip("tracekit.converters.generators.llm")
    from columnar_cases import digest, encoded, generated_llm

    from tracekit.transforms import Compact, Pipeline, ScaleCompute

    ts = generated_llm()
    pipe = Pipeline([ScaleCompute(factor, name_pattern="fwd|bwd"), Compact()])
    assert digest(pipe.apply(encoded(ts))) == digest(pipe.apply(ts))


def test_scale_and_compact_read_no_attribute_when_no_chain_can_merge(monkeypatch):
    """The mix of benchmarks/bench_transform.py (COMP nodes each waiting for a collective): no COMP node's only
    dependency is a COMP node, so compaction reads no attribute; ScaleCompute reads durations only."""
    from tracekit.wire.attrsource import _AttrSource
    from tracekit.model import Attr, Node, NodeType
    from tracekit.transforms import Compact, Pipeline, ScaleCompute
    from tracekit.sets.traceset import TraceSet

    nodes = []
    for i in range(6):
        if i % 2:
            attrs = [Attr("comm_type", 0, "int64_val"), Attr("comm_size", 64, "int64_val")]
            nodes.append(Node(id=i, name="ar", type=NodeType.COMM_COLL_NODE, data_deps=[i - 1], attrs=attrs))
        else:
            nodes.append(comp(i, [i - 1] if i else [], 1500 * (i + 1), stream=7, num_ops=10))

    def no_attribute_reads(self, names):
        raise AssertionError(f"attributes read: {names}")

    monkeypatch.setattr(_AttrSource, "_find_all", no_attribute_reads)
    out = Pipeline([ScaleCompute(2), Compact()]).apply(TraceSet([_encoded(nodes)]))
    assert [n.duration_ns for n in out[0].nodes] == [3000, 0, 9000, 0, 15000, 0]
    assert [list(n.data_deps) for n in out[0].nodes] == [[], [0], [1], [2], [3], [4]]
