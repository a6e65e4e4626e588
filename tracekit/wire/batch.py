"""Encoding many nodes given as columns into framed ``.et`` records in one compiled pass (issue 17).

Generators that produce hundreds of thousands of nodes per rank call
:func:`encode_nodes` (re-exported by :mod:`tracekit.io`) instead of building a
``Node`` and a protobuf message per node; the bytes are those
:func:`tracekit.wire.io.encode_node` writes for the same nodes (tested).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from tracekit.model.attrs import Attr
from tracekit.errors import TracekitError
from tracekit.model import MAX_DURATION_NS, MAX_TIME_NS


def _table(rows: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=ptr[1:])
    return np.frombuffer(b"".join(rows), dtype=np.uint8).copy(), ptr


def _field_bytes(tag: int, payload: bytes) -> bytes:
    from tracekit.wire.framing import frame

    return bytes([tag]) + frame(payload)


def _attr_field(a: Attr) -> bytes:
    """One attribute as an encoded ``Node.attr`` field (tag, length, ``AttributeProto``)."""
    from tracekit.wire.codec import attr_to_pb
    from tracekit._proto import et_def_pb2 as pb

    m = pb.AttributeProto()
    try:
        attr_to_pb(a, m)
    except (TypeError, ValueError) as exc:
        raise TracekitError(f"cannot encode attribute {a.name!r}: {exc}") from None
    return _field_bytes(10 << 3 | 2, m.SerializeToString())


def _attr_fields(attrs: Sequence[Attr]) -> list[bytes]:
    """Each attribute as an encoded ``Node.attr`` field (tag, length, ``AttributeProto``)."""
    return [_attr_field(a) for a in attrs]


def _name_field(name: str) -> bytes:
    """A node name as an encoded ``Node.name`` field; nothing for "" (proto3 omits the default)."""
    if name.__class__ is not str:
        raise TracekitError(f"node name {name!r} is not a string")
    return _field_bytes(2 << 3 | 2, name.encode()) if name else b""


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
    names: "Sequence[str] | FieldTable",
    name_codes: np.ndarray,
    data_ptr: np.ndarray | None = None,
    data_ids: np.ndarray | None = None,
    ctrl_ptr: np.ndarray | None = None,
    ctrl_ids: np.ndarray | None = None,
    start_ns: np.ndarray | None = None,
    attrs: "Sequence[Attr] | FieldTable" = (),
    attr_ptr: np.ndarray | None = None,
    attr_codes: np.ndarray | None = None,
) -> bytes:
    """Framed ``Node`` records (no metadata record) for N nodes given as columns.

    The bytes equal ``b"".join(encode_node(node) for node in nodes)`` for the same nodes
    (``inputs``, ``outputs`` and ``storage`` are not columns here: nodes with them go through
    :func:`tracekit.wire.io.encode_node`).  Strings and attributes are given as tables so each distinct
    one is encoded once; a :class:`FieldTable` given as ``names`` or ``attrs`` keeps its encoded
    rows across calls (each distinct value encoded once per job, not once per call).

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
        The records, ready to follow :func:`tracekit.wire.io.encode_metadata`'s bytes in a ``.et`` file.

    Raises:
        TracekitError: mismatched column lengths, a bad CSR, a code outside its table, a negative
            id or type, or a time out of range (names the node id and the value).
    """
    from tracekit.wire.encode import encode_node_columns

    ids, types_a, dur, start, codes = _checked(ids, types, duration_ns, start_ns, name_codes, len(names))
    n = len(ids)
    name_bytes, name_ptr = names.encoded() if isinstance(names, FieldTable) else _table([_name_field(s) for s in names])
    d_ptr, d_ids = _csr(data_ptr, data_ids, n, "data_deps")
    c_ptr, c_ids = _csr(ctrl_ptr, ctrl_ids, n, "ctrl_deps")
    a_ptr, a_codes = _csr(attr_ptr, attr_codes, n, "attrs")
    a_codes = a_codes.astype(np.int64)
    if len(a_codes) and (a_codes.min() < 0 or a_codes.max() >= len(attrs)):
        raise TracekitError(f"encode_nodes: an attribute code is outside the {len(attrs)} attributes")
    attr_bytes, attr_tab_ptr = attrs.encoded() if isinstance(attrs, FieldTable) else _table(_attr_fields(attrs))
    kern: Any = encode_node_columns  # a compiled kernel: its arity is checked by numba
    args: tuple[Any, ...] = (ids, types_a, dur, start, name_bytes, name_ptr, codes, c_ptr, c_ids, d_ptr, d_ids)
    args += (attr_bytes, attr_tab_ptr, a_ptr, a_codes)
    body = np.zeros(n, dtype=np.int64)
    total = kern(*args, body, np.zeros(0, np.uint8))
    out = np.empty(total, dtype=np.uint8)
    kern(*args, body, out)
    return out.tobytes()


class FieldTable(Sequence[Any]):
    """Distinct node names or attributes, each with its encoded ``Node`` field bytes, grown as codes are asked.

    Give one as ``names`` or ``attrs`` of :func:`encode_nodes` (or to :func:`encode_node_list`) and keep it
    across the calls of one job: each distinct value is encoded once (by protobuf, for attributes) per
    table, not once per call.  A generated GPT-3 175B job has a few thousand distinct attributes over
    hundreds of millions of uses.  Build one with :meth:`names` or :meth:`attributes`.

    Values that compare equal but encode differently (``Attr("x", True, ...)`` and ``Attr("x", 1, ...)``:
    ``True == 1``) get separate rows: a row also matches on the class of the value.
    """

    def __init__(self, encode: Callable[[Any], bytes], value_of: Callable[[Any], Any]) -> None:
        self._encode, self._value_of = encode, value_of
        self._values: list[Any] = []
        self._rows: list[bytes] = []
        self.codes: dict[Any, int] = {}  # value -> its first row (read by the hot loop of encode_node_list)
        self.classes: list[type] = []  # per row: the class of its value (of the attribute's value for attributes)
        self._other: dict[tuple[Any, type], int] = {}  # rows of equal values of another class
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    @classmethod
    def names(cls) -> "FieldTable":
        """A table of node names (``str``; "" encodes as nothing, as proto3 omits it)."""
        return cls(_name_field, lambda name: name)

    @classmethod
    def attributes(cls) -> "FieldTable":
        """A table of :class:`~tracekit.model.attrs.Attr` values (encoded by protobuf)."""
        return cls(_attr_field, lambda attr: attr.value)

    def code(self, value: Any) -> int:
        """The row of ``value``: its index in this table, added and encoded when new.

        Raises:
            TracekitError: protobuf cannot encode the value (names the attribute), or a name is not a str.
        """
        cls = self._value_of(value).__class__
        found = self.codes.get(value)
        if found is not None and self.classes[found] is cls:
            return found
        found = self._other.get((value, cls))
        if found is not None:
            return found
        row = self._encode(value)
        found = len(self._values)
        self._values.append(value)
        self._rows.append(row)
        self.classes.append(cls)
        if value in self.codes:
            self._other[(value, cls)] = found
        else:
            self.codes[value] = found
        return found

    def encoded(self) -> tuple[np.ndarray, np.ndarray]:
        """``(bytes, ptr)``: the rows' field bytes (uint8[B]) and where row i lies in them (int64[len+1])."""
        if self._arrays is None or len(self._arrays[1]) != len(self._rows) + 1:
            self._arrays = _table(self._rows)
        return self._arrays

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, index: Any) -> Any:
        return self._values[index]


_INT = frozenset("iu")


def _plain(node: Any) -> bool:
    """True when :func:`encode_nodes` writes ``node`` exactly as protobuf does (no I/O, no storage, ints in range)."""

    def uint(v: Any, top: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= top

    return (
        node.inputs is None
        and node.outputs is None
        and node.storage is None
        and uint(node.id, 2**64 - 1)
        and uint(node.type, 2**31 - 1)
        and uint(node.duration_ns, MAX_DURATION_NS)
        and uint(node.start_time_ns, MAX_TIME_NS)
        and all(uint(d, 2**64 - 1) for d in (*node.data_deps, *node.ctrl_deps))
    )


def _collect(nodes: Sequence[Any], names: FieldTable, attrs: FieldTable) -> tuple[dict[str, list[int]], list[int]]:
    """The columns of :func:`encode_nodes` as lists, and the positions of the nodes with inputs, outputs or storage."""
    cols: dict[str, list[int]] = {k: [] for k in ("ids", "types", "duration_ns", "start_ns", "name_codes")}
    for k in ("data", "ctrl", "attr"):
        cols[k + "_ptr"], cols[k + "_ids"] = [0], []
    ids, types, durs, starts, ncodes = (cols[k] for k in ("ids", "types", "duration_ns", "start_ns", "name_codes"))
    data, data_ptr, ctrl, ctrl_ptr = cols["data_ids"], cols["data_ptr"], cols["ctrl_ids"], cols["ctrl_ptr"]
    acodes, attr_ptr = cols["attr_ids"], cols["attr_ptr"]
    nget, aget, aclasses = names.codes.get, attrs.codes.get, attrs.classes
    extras: list[int] = []
    node = None
    try:
        for i, node in enumerate(nodes):
            ids.append(node.id)
            name = node.name
            c = nget(name)
            ncodes.append(names.code(name) if c is None else c)
            types.append(node.type)
            durs.append(node.duration_ns)
            starts.append(node.start_time_ns)
            data.extend(node.data_deps)
            data_ptr.append(len(data))
            ctrl.extend(node.ctrl_deps)
            ctrl_ptr.append(len(ctrl))
            for a in node.attrs:
                c = aget(a)
                acodes.append(c if c is not None and aclasses[c] is a.value.__class__ else attrs.code(a))
            attr_ptr.append(len(acodes))
            if node.inputs is not None or node.outputs is not None or node.storage is not None:
                extras.append(i)
    except TracekitError as exc:
        raise exc.with_context(node_id=getattr(node, "id", None)) from None
    return cols, extras


def _in_range(cols: dict[str, np.ndarray]) -> bool:
    """True when every column is integers within the ranges :func:`encode_nodes` writes as protobuf does."""
    if any(a.dtype.kind not in _INT for k, a in cols.items() if k != "attr_ids"):
        return False
    limits = (("ids", 2**64 - 1), ("types", 2**31 - 1), ("duration_ns", MAX_DURATION_NS), ("start_ns", MAX_TIME_NS))
    for key, top in limits:
        a = cols[key]
        if len(a) and (a.min() < 0 or int(a.max()) > top):
            return False
    return all(not len(cols[k]) or cols[k].min() >= 0 for k in ("data_ids", "ctrl_ids"))


def encode_node_list(
    nodes: Iterable[Any], *, names: FieldTable | None = None, attrs: FieldTable | None = None
) -> bytes:
    """Framed records of :class:`~tracekit.model.Node` values through :func:`encode_nodes`'s compiled pass.

    The bytes equal ``b"".join(encode_node(n) for n in nodes)`` (:func:`tracekit.wire.io.encode_node`).  When a
    node has inputs, outputs or storage, or a field is not an integer in the kernel's ranges (ids and
    dependencies below 2^64, types below 2^31, times up to :data:`~tracekit.model.MAX_DURATION_NS` /
    :data:`~tracekit.model.MAX_TIME_NS`), that node is encoded by protobuf instead (the nodes between such
    nodes still go through the compiled pass).

    Args:
        nodes: N nodes (any iterable; read once).
        names, attrs: tables to reuse across calls (:meth:`FieldTable.names`, :meth:`FieldTable.attributes`),
            or None for fresh ones.

    Raises:
        TracekitError: a value protobuf cannot encode (names the node id).
    """
    from tracekit.wire.io import encode_node

    nodes = nodes if isinstance(nodes, Sequence) else list(nodes)
    names = FieldTable.names() if names is None else names
    attrs = FieldTable.attributes() if attrs is None else attrs
    lists, odd = _collect(nodes, names, attrs)
    cols = {k: np.array(v) if v else np.zeros(0, np.int64) for k, v in lists.items()}
    if not _in_range(cols):  # rare: protobuf decides the odd nodes; numpy's guess of a dtype is not trusted
        odd = [i for i, node in enumerate(nodes) if not _plain(node)]
        cols = {k: a if k.endswith("_ptr") else np.array(lists[k], dtype=object) for k, a in cols.items()}
    parts, start = [], 0
    for i in [*odd, len(nodes)]:
        if i > start:
            rows = _rows(cols, start, i)
            ids, types, dur = rows.pop("ids"), rows.pop("types"), rows.pop("duration_ns")
            parts.append(
                encode_nodes(ids, types, dur, names=names, attrs=attrs, attr_codes=rows.pop("attr_ids"), **rows)
            )
        if i < len(nodes):
            parts.append(encode_node(nodes[i]))
        start = i + 1
    return b"".join(parts)


def _rows(cols: dict[str, np.ndarray], a: int, b: int) -> dict[str, np.ndarray]:
    """Nodes ``a`` to ``b - 1`` of the columns (dependency and attribute CSRs re-based)."""
    out = {k: cols[k][a:b] for k in ("ids", "types", "duration_ns", "start_ns", "name_codes")}
    for k in ("data", "ctrl", "attr"):
        ptr = cols[k + "_ptr"]
        out[k + "_ptr"] = ptr[a : b + 1] - ptr[a]
        out[k + "_ids"] = cols[k + "_ids"][ptr[a] : ptr[b]]
    return out
