"""Conversion between the trace model and the generated protobuf classes.

This module and :mod:`tracekit.io` are the only places that touch
``tracekit._proto.et_def_pb2``.  Time fields follow the convention recorded in
``schema/et_def.proto``: the model holds nanoseconds; the file holds whole
microseconds plus the exact nanoseconds in fields 1001/1002 when they are not a
whole number of microseconds.
"""

from __future__ import annotations

from typing import Any

from tracekit._proto import et_def_pb2 as pb
from tracekit.errors import TraceFormatError
from tracekit.model import (
    LIST_KINDS,
    MAX_DURATION_NS,
    MAX_TIME_NS,
    Attr,
    IOInfo,
    Metadata,
    Node,
    NodeType,
    time_range_error,
)

_NODE_TYPES = {int(t): t for t in NodeType}


def ns_from_wire(micros: int, nanos: int) -> int:
    """Nanoseconds from the (micros, nanos) pair of a record.

    The nanosecond field wins when it agrees with the micros (another tool
    that rewrote only the micros field invalidates it).
    """
    if nanos and nanos // 1000 == micros:
        return nanos
    return micros * 1000


def _checked(value: int, what: str, limit: int, m: Any) -> int:
    if value > limit:
        raise TraceFormatError(time_range_error(what, value, limit) or "", node_id=m.id)
    return value


def attr_from_pb(a: Any) -> Attr:
    """An :class:`Attr` from an ``AttributeProto`` message (list kinds as tuples)."""
    kind = a.WhichOneof("value")
    if kind is None:
        value = None
    elif kind in _LIST_SET:
        value = list(getattr(a, kind).values)
    else:
        value = getattr(a, kind)
    return Attr(a.name, value, kind, a.doc_string)


_LIST_SET = frozenset(LIST_KINDS)


def attr_to_pb(attr: Attr, target: Any) -> None:
    """Fill the ``AttributeProto`` ``target`` from ``attr`` (TypeError/ValueError from protobuf for a bad value)."""
    target.name = attr.name
    if attr.doc_string:
        target.doc_string = attr.doc_string
    kind = attr.kind
    if kind is None:
        return
    if kind in _LIST_SET:
        getattr(target, kind).values.extend(attr.value)
    else:
        setattr(target, kind, attr.value)


def node_from_pb(m: Any) -> Node:
    """A :class:`Node` from a decoded ``Node`` message."""
    t = m.type
    return Node(
        id=m.id,
        name=m.name,
        type=_NODE_TYPES.get(t, t),
        data_deps=list(m.data_deps),
        ctrl_deps=list(m.ctrl_deps),
        start_time_ns=_checked(ns_from_wire(m.start_time_micros, m.start_time_nanos), "start time", MAX_TIME_NS, m),
        duration_ns=_checked(ns_from_wire(m.duration_micros, m.duration_nanos), "duration", MAX_DURATION_NS, m),
        inputs=IOInfo(m.inputs.values, m.inputs.shapes, m.inputs.types) if m.HasField("inputs") else None,
        outputs=IOInfo(m.outputs.values, m.outputs.shapes, m.outputs.types) if m.HasField("outputs") else None,
        attrs=[attr_from_pb(a) for a in m.attr],
        storage=m.storage.SerializeToString() if m.HasField("storage") else None,
    )


def node_to_pb(node: Node) -> Any:
    """A ``Node`` message for :class:`Node` (ValueError/TypeError on bad field values)."""
    m = pb.Node()
    m.id = node.id
    if node.name:
        m.name = node.name
    m.type = int(node.type)
    if node.ctrl_deps:
        m.ctrl_deps.extend(node.ctrl_deps)
    if node.data_deps:
        m.data_deps.extend(node.data_deps)
    start_ns, dur_ns = int(node.start_time_ns), int(node.duration_ns)
    problem = time_range_error("duration", dur_ns, MAX_DURATION_NS) or time_range_error(
        "start time", start_ns, MAX_TIME_NS
    )
    if problem:
        raise ValueError(problem)
    m.start_time_micros = start_ns // 1000
    m.duration_micros = dur_ns // 1000
    if dur_ns % 1000:
        m.duration_nanos = dur_ns
    if start_ns % 1000:
        m.start_time_nanos = start_ns
    if node.inputs is not None:
        m.inputs.values, m.inputs.shapes, m.inputs.types = node.inputs.values, node.inputs.shapes, node.inputs.types
        m.inputs.SetInParent()
    if node.outputs is not None:
        m.outputs.values, m.outputs.shapes, m.outputs.types = (
            node.outputs.values,
            node.outputs.shapes,
            node.outputs.types,
        )
        m.outputs.SetInParent()
    for a in node.attrs:
        attr_to_pb(a, m.attr.add())
    if node.storage is not None:
        m.storage.ParseFromString(node.storage)
        m.storage.SetInParent()
    return m


def metadata_from_pb(m: Any) -> Metadata:
    """A :class:`Metadata` from a ``GlobalMetadata`` message."""
    return Metadata(m.version, tuple(attr_from_pb(a) for a in m.attr))


def metadata_to_pb(md: Metadata) -> Any:
    """A ``GlobalMetadata`` message for ``md`` (TypeError/ValueError from protobuf for a bad value)."""
    m = pb.GlobalMetadata()
    if md.version:
        m.version = md.version
    for a in md.attrs:
        attr_to_pb(a, m.attr.add())
    return m
