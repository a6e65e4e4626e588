"""Encoding many nodes given as columns into framed ``.et`` records in one compiled pass (issue 17).

Generators that produce hundreds of thousands of nodes per rank call
:func:`encode_nodes` (re-exported by :mod:`tracekit.io`) instead of building a
``Node`` and a protobuf message per node; the bytes are those
:func:`tracekit.io.encode_node` writes for the same nodes (tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tracekit.attrs import Attr
from tracekit.errors import TracekitError
from tracekit.model import MAX_DURATION_NS, MAX_TIME_NS


def _table(rows: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=ptr[1:])
    return np.frombuffer(b"".join(rows), dtype=np.uint8).copy(), ptr


def _field_bytes(tag: int, payload: bytes) -> bytes:
    from tracekit._framing import frame

    return bytes([tag]) + frame(payload)


def _attr_fields(attrs: Sequence[Attr]) -> list[bytes]:
    """Each attribute as an encoded ``Node.attr`` field (tag, length, ``AttributeProto``)."""
    from tracekit._codec import attr_to_pb
    from tracekit._proto import et_def_pb2 as pb

    out = []
    for a in attrs:
        m = pb.AttributeProto()
        try:
            attr_to_pb(a, m)
        except (TypeError, ValueError) as exc:
            raise TracekitError(f"cannot encode attribute {a.name!r}: {exc}") from None
        out.append(_field_bytes(10 << 3 | 2, m.SerializeToString()))
    return out


def _csr(ptr: np.ndarray | None, values: np.ndarray | None, n: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    if ptr is None:
        return np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.uint64)
    p = np.asarray(ptr, dtype=np.int64)
    v = np.asarray(values if values is not None else [], dtype=np.uint64)
    if len(p) != n + 1 or p[0] != 0 or p[-1] != len(v) or bool((np.diff(p) < 0).any()):
        raise TracekitError(f"{what}: ptr must be int64[N+1] rising from 0 to the number of values ({len(v)})")
    return p, v


def _checked(
    ids: np.ndarray,
    types: np.ndarray,
    duration_ns: np.ndarray,
    start_ns: np.ndarray | None,
    name_codes: np.ndarray,
    n_names: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The per-node columns as the kernel's dtypes, checked (see :func:`encode_nodes` for the errors)."""
    ids = np.asarray(ids)
    n = len(ids)
    cols = {"types": types, "duration_ns": duration_ns, "name_codes": name_codes}
    if start_ns is not None:
        cols["start_ns"] = start_ns
    for what, col in cols.items():
        if len(col) != n:
            raise TracekitError(f"encode_nodes: {what} has {len(col)} entries for {n} ids")
    if n and (ids.dtype.kind == "i" and bool((ids < 0).any())):
        raise TracekitError(f"node id {int(ids[np.argmax(ids < 0)])} is negative")
    ids = ids.astype(np.uint64)
    types_a = np.asarray(types, dtype=np.int64)
    dur = np.asarray(duration_ns, dtype=np.int64)
    start = np.zeros(n, np.int64) if start_ns is None else np.asarray(start_ns, dtype=np.int64)
    limits = (("type", types_a, 2**31 - 1), ("duration", dur, MAX_DURATION_NS), ("start time", start, MAX_TIME_NS))
    for what, col, top in limits:
        bad = (col < 0) | (col > top)
        if bad.any():
            i = int(np.argmax(bad))
            raise TracekitError(f"{what} {int(col[i]):,} is out of range (0 to {top:,})", node_id=int(ids[i]))
    codes = np.asarray(name_codes, dtype=np.int64)
    if n and (codes.min() < 0 or codes.max() >= n_names):
        raise TracekitError(f"encode_nodes: a name code is outside the {n_names} names")
    return ids, types_a, dur, start, codes


def encode_nodes(
    ids: np.ndarray,
    types: np.ndarray,
    duration_ns: np.ndarray,
    *,
    names: Sequence[str],
    name_codes: np.ndarray,
    data_ptr: np.ndarray | None = None,
    data_ids: np.ndarray | None = None,
    ctrl_ptr: np.ndarray | None = None,
    ctrl_ids: np.ndarray | None = None,
    start_ns: np.ndarray | None = None,
    attrs: Sequence[Attr] = (),
    attr_ptr: np.ndarray | None = None,
    attr_codes: np.ndarray | None = None,
) -> bytes:
    """Framed ``Node`` records (no metadata record) for N nodes given as columns.

    The bytes equal ``b"".join(encode_node(node) for node in nodes)`` for the same nodes
    (``inputs``, ``outputs`` and ``storage`` are not columns here: nodes with them go through
    :func:`tracekit.io.encode_node`).  Strings and attributes are given as tables so each distinct
    one is encoded once.

    Args:
        ids: node ids, uint64[N] (any non-negative integers).
        types: :class:`~tracekit.model.NodeType` numbers, int[N].
        duration_ns: durations in nanoseconds, int[N], 0 to :data:`~tracekit.model.MAX_DURATION_NS`.
        names: the distinct names; name_codes: int[N] index of each node's name in ``names``.
        data_ptr, data_ids: data dependencies as CSR (int[N+1] row pointers, uint64 ids), or None.
        ctrl_ptr, ctrl_ids: control dependencies, the same way, or None.
        start_ns: start times in nanoseconds, int[N] (0 to :data:`~tracekit.model.MAX_TIME_NS`), or None.
        attrs: the distinct attributes; attr_ptr, attr_codes: CSR (int[N+1], int[A]) of each node's
            attributes as indices into ``attrs``, in the order they are written.

    Returns:
        The records, ready to follow :func:`tracekit.io.encode_metadata`'s bytes in a ``.et`` file.

    Raises:
        TracekitError: mismatched column lengths, a bad CSR, a code outside its table, a negative
            id or type, or a time out of range (names the node id and the value).
    """
    from tracekit._encode import encode_node_columns

    ids, types_a, dur, start, codes = _checked(ids, types, duration_ns, start_ns, name_codes, len(names))
    n = len(ids)
    name_bytes, name_ptr = _table([_field_bytes(2 << 3 | 2, s.encode()) if s else b"" for s in names])
    d_ptr, d_ids = _csr(data_ptr, data_ids, n, "data_deps")
    c_ptr, c_ids = _csr(ctrl_ptr, ctrl_ids, n, "ctrl_deps")
    a_ptr, a_codes = _csr(attr_ptr, attr_codes, n, "attrs")
    a_codes = a_codes.astype(np.int64)
    if len(a_codes) and (a_codes.min() < 0 or a_codes.max() >= len(attrs)):
        raise TracekitError(f"encode_nodes: an attribute code is outside the {len(attrs)} attributes")
    attr_bytes, attr_tab_ptr = _table(_attr_fields(attrs))
    kern: Any = encode_node_columns  # a compiled kernel: its arity is checked by numba
    args: tuple[Any, ...] = (ids, types_a, dur, start, name_bytes, name_ptr, codes, c_ptr, c_ids, d_ptr, d_ids)
    args += (attr_bytes, attr_tab_ptr, a_ptr, a_codes)
    body = np.zeros(n, dtype=np.int64)
    total = kern(*args, body, np.zeros(0, np.uint8))
    out = np.empty(total, dtype=np.uint8)
    kern(*args, body, out)
    return out.tobytes()
