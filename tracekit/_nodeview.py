"""Node objects built from the columns (issue 17): ``trace.nodes`` without a protobuf message per node.

:func:`nodes_from_columns` makes the same :class:`~tracekit.model.Node` list as
decoding every record with protobuf (``EncodedNodes.decode_all``), from the
columns of :mod:`tracekit._columnar`: ids, types, times and dependencies come
from numpy arrays; attributes laid out as writers emit them (``name`` then one
scalar value field) are decoded in numpy, one pass per value kind.  Records
with other fields (``inputs``/``outputs``, unknown fields) and attributes of
other layouts (lists, doc strings) are decoded with protobuf, so the result is
equal (tests/core/test_read_fast.py compares both on every value kind).  Any
decoding failure here makes the caller fall back to protobuf, whose error
names the record.
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

import numpy as np

from tracekit.model import Attr, Node, NodeType

_NODE_TYPES = {int(t): t for t in NodeType}
_INT_KINDS = {7: "int32_val", 9: "int64_val", 11: "uint32_val", 13: "uint64_val", 15: "sint32_val",
              17: "sint64_val", 19: "fixed32_val", 21: "fixed64_val", 23: "sfixed32_val", 25: "sfixed64_val"}
_FLOAT_KINDS = {3: "double_val", 5: "float_val"}


def _value_fields(source: Any, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per attribute message: (value field number, 0 when none, -1 for a string of another wire type;
    payload start; canonical bool)."""
    canon = source._canonical(start, end)
    _, has, field, wt, body, _ = source._value_tag(start, end)
    field = np.where(canon & has, field, 0)
    field[(field == 29) & (wt != 2)] = -1
    return field, body, canon


def _attr_lists(source: Any) -> list[list[Attr]]:
    """Attributes of every node, in file order (protobuf for the messages numpy does not decode)."""
    from tracekit._codec import attr_from_pb
    from tracekit._proto import et_def_pb2 as pb

    source.verify()
    n, data = source.n, source.data
    start = source.start.astype(np.int64)
    end = start + source.size
    k = len(start)
    field, body, canon = _value_fields(source, start, end)
    head = source._name_lengths().astype(np.int64)
    hits = np.arange(k, dtype=np.int64)
    fast, ints, floats, kind = source._scalars(hits, head) if k else (np.zeros(0, bool),) * 4
    values = np.full(k, None, dtype=object)  # numpy stores Python ints, floats and bools in object arrays
    kinds = np.full(k, None, dtype=object)
    for fnum, name in _INT_KINDS.items():
        sel = canon & fast & (field == fnum)
        values[sel], kinds[sel] = ints[sel], name
    sel = canon & fast & (field == 27)
    values[sel], kinds[sel] = ints[sel].astype(bool), "bool_val"
    for fnum, name in _FLOAT_KINDS.items():
        sel = canon & fast & (field == fnum)
        values[sel], kinds[sel] = floats[sel], name
    done = canon & ((fast & np.isin(field, list(_INT_KINDS) + [27, 3, 5])) | (field == 0))
    short = source.buf[np.minimum(body, len(source.buf) - 1)] < 0x80  # one-byte length
    strs = np.flatnonzero(canon & (field == 29) & (body < end) & short)
    raw = list(map(data.__getitem__, map(slice, (body[strs] + 1).tolist(), end[strs].tolist())))
    try:
        values[strs] = [r.decode("utf-8") for r in raw]
        kinds[strs] = "string_val"
        done[strs] = True
    except UnicodeDecodeError:
        pass  # all of them by protobuf, whose error names the record
    fast_idx = np.flatnonzero(done)
    s0 = start[fast_idx] + 2
    raw_names = list(map(data.__getitem__, map(slice, s0.tolist(), (s0 + head[fast_idx]).tolist())))
    names = {r: r.decode("utf-8") for r in set(raw_names)}  # UnicodeDecodeError: the caller uses protobuf
    built = list(map(Attr, map(names.__getitem__, raw_names), values[fast_idx].tolist(),
                     kinds[fast_idx].tolist(), repeat("", len(fast_idx))))
    if len(fast_idx) == k:
        out: list[Any] = built
    else:
        out = [None] * k
        for i, a in zip(fast_idx.tolist(), built):
            out[i] = a
        for i in np.flatnonzero(~done).tolist():
            out[i] = attr_from_pb(pb.AttributeProto.FromString(data[start[i]:end[i]]))
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(source.owner, minlength=n), out=ptr[1:])
    return list(map(out.__getitem__, map(slice, ptr[:-1].tolist(), ptr[1:].tolist())))


def nodes_from_columns(encoded: Any, cols: Any) -> list[Node]:
    """The nodes of ``encoded`` (a :class:`tracekit.io.EncodedNodes`) whose columns are ``cols``.

    Raises:
        TraceFormatError: a record or attribute cannot be decoded (as ``decode_all``).
    """
    from tracekit._gc import paused_gc

    with paused_gc():  # millions of new acyclic objects: cyclic collections would only rescan them
        return _build(encoded, cols)


def _build(encoded: Any, cols: Any) -> list[Node]:
    from tracekit._codec import node_from_pb
    from tracekit.model import MAX_DURATION_NS, MAX_TIME_NS

    if (cols.duration_ns > MAX_DURATION_NS).any() or (cols.start_time_ns > MAX_TIME_NS).any():
        # out-of-range times: the record-by-record decode raises the error naming the node
        raise ValueError("time out of range")

    source = cols.attr_fn.__self__
    n = len(cols)
    names = cols.names
    attrs = _attr_lists(source) if n else []
    ids = cols.ids.tolist()
    types = [_NODE_TYPES.get(t, t) for t in cols.types.tolist()]
    dur = cols.duration_ns.tolist()
    start = cols.start_time_ns.tolist() if cols.start_time_ns.any() else [0] * n
    dp, dv = cols.data_ptr.tolist(), cols.data_ids.tolist()
    cp, cv = cols.ctrl_ptr.tolist(), cols.ctrl_ids.tolist()
    data = list(map(dv.__getitem__, map(slice, dp[:-1], dp[1:])))
    ctrl = list(map(cv.__getitem__, map(slice, cp[:-1], cp[1:])))
    out = list(map(Node, ids, names, types, data, ctrl, start, dur, repeat(None, n), repeat(None, n), attrs))
    for i in np.flatnonzero(source.other).tolist():  # inputs/outputs or unknown fields: protobuf
        out[i] = node_from_pb(encoded.decode_one(i, ids[i - 1] if i else None))
    return out
