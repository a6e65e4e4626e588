"""Encoding a generated rank's nodes to `.et` records, byte for byte as :func:`tracekit.io.encode_trace` does.

A generated rank has hundreds of thousands of nodes built from a few hundred distinct attributes (op roles,
phases, layers, micro-batches, sizes).  Filling one protobuf message per node costs ~30 us; here each distinct
:class:`~tracekit.model.Attr` is encoded once by protobuf itself (cached) and a node's record is its few scalar
fields written as varints followed by its cached attribute bytes, ~10x faster.

The bytes equal protobuf's serialization (upb writes known fields in field-number order, packed repeated
varints for the dependency lists, proto3 defaults omitted): ``tests/converters/test_generator_encode.py``
compares them on every generator's output.  A node this encoder does not handle (inputs, outputs, storage, a
value outside the varint fields' ranges) is encoded by protobuf.

This is the generator's one entry to encoding (:func:`encode_generated`); when the batch encoder of issue 17
(columns to framed records) lands in :mod:`tracekit.io`, this module should hand it the nodes' columns instead.
"""

from __future__ import annotations

from typing import Iterable

from tracekit.errors import TracekitError
from tracekit._codec import node_to_pb
from tracekit._framing import frame
from tracekit.io import encode_metadata
from tracekit.model import Attr, ExecutionTrace, Metadata, Node, NodeType
from tracekit.node import MAX_DURATION_NS, MAX_TIME_NS

__all__ = ["encode_generated"]

_U64 = 1 << 64


def _varint_slow(value: int) -> bytes:
    """Protobuf varint of a non-negative int below 2^64."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [_varint_slow(v) for v in range(1 << 16)]  # ids, deps and lengths of generated ranks: a lookup


def _varint(value: int) -> bytes:
    """Protobuf varint of a non-negative int below 2^64."""
    return _SMALL[value] if value < 0x10000 else _varint_slow(value)


def _attr_record(attr: Attr) -> bytes:
    """The bytes ``attr`` occupies inside a Node record (tag 10, length, AttributeProto), by protobuf."""
    return node_to_pb(Node(id=0, name="", type=NodeType.INVALID_NODE, attrs=[attr])).SerializeToString()


def _by_protobuf(node: Node) -> bytes:
    """One framed record by protobuf (TypeError/ValueError for a value it cannot encode)."""
    return frame(node_to_pb(node).SerializeToString())


class _Encoder:
    """Node records of one trace (caches shared across the traces of one generator run)."""

    def __init__(self) -> None:
        self.attrs: dict[Attr, tuple[type, bytes]] = {}
        self.names: dict[str, bytes] = {}

    def attr(self, a: Attr) -> bytes:
        found = self.attrs.get(a)
        if found is not None and found[0] is a.value.__class__:  # True == 1 == 1.0: same key, other bytes
            return found[1]
        record = _attr_record(a)
        self.attrs[a] = (a.value.__class__, record)
        return record

    def name(self, name: str) -> bytes:
        found = self.names.get(name)
        if found is None:
            raw = name.encode("utf-8")
            found = self.names[name] = b"\x12" + _varint(len(raw)) + raw
        return found

    def node(self, node: Node) -> bytes:
        """One framed record (varint length + Node message)."""
        nid, dur, start = node.id, node.duration_ns, node.start_time_ns
        if (
            node.inputs is not None
            or node.outputs is not None
            or node.storage is not None
            or nid.__class__ is not int
            or not 0 <= nid < _U64
            or dur.__class__ is not int
            or not 0 <= dur <= MAX_DURATION_NS
            or start.__class__ is not int
            or not 0 <= start <= MAX_TIME_NS
        ):
            return _by_protobuf(node)
        parts = [b"\x08" + _varint(nid)] if nid else []
        if node.name:
            parts.append(self.name(node.name))
        t = int(node.type)
        if t:
            if not 0 < t < 0x80000000:
                return _by_protobuf(node)
            parts.append(b"\x18" + _varint(t))
        for tag, deps in ((b"\x22", node.ctrl_deps), (b"\x2a", node.data_deps)):
            if deps:
                if min(deps) < 0 or max(deps) >= _U64:
                    return _by_protobuf(node)  # protobuf raises
                packed = b"".join([_SMALL[d] if d < 0x10000 else _varint_slow(d) for d in deps])
                parts.append(tag + _varint(len(packed)) + packed)
        if start >= 1000:
            parts.append(b"\x30" + _varint(start // 1000))
        if dur >= 1000:
            parts.append(b"\x38" + _varint(dur // 1000))
        cache = self.attrs
        for a in node.attrs:
            found = cache.get(a)
            parts.append(found[1] if found is not None and found[0] is a.value.__class__ else self.attr(a))
        if dur % 1000:
            parts.append(b"\xc8\x3e" + _varint(dur))  # duration_nanos = 1001
        if start % 1000:
            parts.append(b"\xd0\x3e" + _varint(start))  # start_time_nanos = 1002
        body = b"".join(parts)
        return _varint(len(body)) + body


def encode_generated(
    nodes: Iterable[Node], metadata: Metadata, *, rank: int | None = None, encoder: _Encoder | None = None
) -> bytes:
    """The `.et` bytes of a generated trace: equal to ``encode_trace(ExecutionTrace(nodes, metadata, rank=rank))``.

    Args:
        encoder: reuse one across the traces of a job (its attribute cache), or None for a fresh one.

    Raises:
        TracekitError: a node field holds a value protobuf cannot encode (naming the node id and rank).
    """
    enc = encoder if encoder is not None else _Encoder()
    parts = [encode_metadata(metadata, rank=rank)]
    for node in nodes:
        try:
            parts.append(enc.node(node))
        except (TypeError, ValueError) as exc:
            raise TracekitError(f"cannot encode node: {exc}", node_id=node.id, rank=rank) from None
    return b"".join(parts)


def encode_generated_trace(trace: ExecutionTrace, encoder: _Encoder | None = None) -> bytes:
    """:func:`encode_generated` of a freshly built trace (its nodes, metadata and rank)."""
    return encode_generated(trace.nodes, trace.metadata, rank=trace.rank, encoder=encoder)
