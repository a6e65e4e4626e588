"""The two guarded spots of core catch only the errors they mean: bad data falls back or is reported, a bug surfaces."""

from __future__ import annotations

import orjson
import pytest

from tracekit.sets import stamps as classset_stamps
from tracekit._proto import et_def_pb2 as pb
from tracekit.errors import TraceFormatError
from tracekit.io import encode_trace, frame
from tracekit.wire.jsonform import loads_trace
from tracekit.model import Attr, ExecutionTrace, Node


def _stamped(doc_text: str) -> bytes:
    """A one-node trace whose metadata carries ``doc_text`` as its rank-class stamp."""
    data = encode_trace(ExecutionTrace([Node(id=1)]))
    start, end = classset_stamps._first_record(data)
    extra = pb.GlobalMetadata(attr=[pb.AttributeProto(name=classset_stamps.RANK_CLASS_ATTR, string_val=doc_text)])
    return frame(data[start:end] + extra.SerializeToString()) + data[end:]


@pytest.mark.parametrize(
    "doc_text",
    [
        "not json",
        "[1, 2]",
        '{"key": "k"}',
        '{"key": "k", "slots": [[1]], "values": []}',
        '{"key": "k", "slots": 5, "values": []}',
    ],
)
def test_a_malformed_stamp_is_read_the_ordinary_way(doc_text):
    assert classset_stamps.read_rank_class(_stamped(doc_text)) is None


def test_a_good_stamp_is_read_and_a_bug_is_not_hidden(monkeypatch):
    data = classset_stamps.stamp_rank_class(
        encode_trace(ExecutionTrace([Node(id=1)])), "k", [Attr("comm_size", 0)], [64]
    )
    key, slots, values, _ = classset_stamps.read_rank_class(data)
    assert (key, slots, values) == ("k", (Attr("comm_size", 0, "int64_val"),), (64,))

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(classset_stamps, "Attr", broken)
    with pytest.raises(ZeroDivisionError):
        classset_stamps.read_rank_class(data)


def test_a_feeder_attribute_of_no_kind_is_a_format_error_naming_it():
    doc = {"workload_graph": [{"Id": 1, "NodeType": 4, "comm_size": []}]}
    with pytest.raises(TraceFormatError, match=r"node 1: attribute 'comm_size': .*empty list"):
        loads_trace(orjson.dumps(doc), path="f.json")
