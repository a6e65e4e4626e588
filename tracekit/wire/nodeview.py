"""``trace.nodes`` of a trace read from a file: a read-only view over its columns (issues 13 and 17).

:class:`NodeView` builds :class:`ColumnNode` values (a :class:`~tracekit.model.Node`
subclass, equal to the same node built by hand) from the numpy columns of
:mod:`tracekit.wire.columnar` on access, a chunk at a time: a node is five values
(id, type, duration, the file's :class:`AttrTable`, its position) made at C
speed, so iterating costs no protobuf message per node and holds one chunk of
nodes at a time.  Name, dependencies, start time and attributes are read from
the table when touched (names decoded for the whole file on the first read of
one); attributes are decoded per node, and the typed integer accessors
(``node.comm_bytes``, ``node.num_ops``...) from their first read on are
answered from columns of every node, found in one pass over the records for
all the standard integer fields (nodes built afterwards carry those values, so
such a read is one C call).  Records with fields the columns do not hold
(``inputs``/``outputs``, ``storage``, unknown fields) and records with
out-of-range times are decoded with protobuf into plain nodes, whose error
names the record.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import chain, repeat
from typing import Any, Iterable, Iterator, Sequence, overload

import numpy as np
from google.protobuf.message import DecodeError

from tracekit.model.attrs import FIELD_OF_PROPERTY, Attr, as_int
from tracekit.errors import TraceFormatError, TracekitError, ValidationError
from tracekit.model.node import Node, NodeType, TypedAttrs, _tuplegetter

_NODE_TYPES = {int(t): t for t in NodeType}
CHUNK_NODES = 1 << 10  # nodes built per step of an iteration: bounds what a view holds at once
_COLUMN_AFTER = 64  # reads of one attribute name after which it is decoded as a column for all nodes
_CACHE_NODES = 1 << 16  # per-node decoded attribute tuples kept (then the cache restarts)


class AttrTable:
    """What a :class:`ColumnNode` reads when touched: names, dependencies, start times and attributes of the
    nodes of one file (attributes decoded on access, see the module docstring).

    Args:
        source: the ``_AttrSource`` of :mod:`tracekit.wire.columnar` (the records, attributes by name).
        cols: the file's :class:`~tracekit.model.graph.NodeColumns`.
    """

    def __init__(self, source: Any, cols: Any) -> None:
        self.source, self.cols = source, cols
        self.names: list[str] | None = None  # decoded by the first name_at
        self.starts = memoryview(cols.start_time_ns)
        self._data = (memoryview(cols.data_ptr), memoryview(cols.data_ids))
        self._ctrl = (memoryview(cols.ctrl_ptr), memoryview(cols.ctrl_ids))
        self._verified = False
        self._cache: dict[int, tuple[Attr, ...]] = {}
        self._reads: dict[str, int] = {}
        self.ints: dict[str, list[int | None]] = {}
        self._general: set[str] = set()  # names with a non-number somewhere: read node by node

    def name_at(self, pos: int) -> str:
        """The name of the node at ``pos`` (the file's names are decoded on the first call, then :attr:`names`).

        Raises:
            TraceFormatError: a name is not UTF-8 (names the first node that has it).
        """
        names = self.names
        if names is None:
            names = self.names = self.cols.names
        return names[pos]

    def start_at(self, pos: int) -> int:
        """``start_time_ns`` of the node at ``pos``."""
        return self.starts[pos]

    def data_deps_at(self, pos: int) -> tuple[int, ...]:
        """``data_deps`` of the node at ``pos`` (ids, tuple)."""
        ptr, ids = self._data
        a, b = ptr[pos], ptr[pos + 1]
        return (ids[a],) if b - a == 1 else tuple(ids[a:b])

    def ctrl_deps_at(self, pos: int) -> tuple[int, ...]:
        """``ctrl_deps`` of the node at ``pos`` (ids, tuple)."""
        ptr, ids = self._ctrl
        a, b = ptr[pos], ptr[pos + 1]
        return (ids[a],) if b - a == 1 else tuple(ids[a:b])

    def attrs_at(self, pos: int) -> tuple[Attr, ...]:
        """The attributes of the node at ``pos``, in file order (its record decoded with protobuf).

        Raises:
            TraceFormatError: an attribute message cannot be decoded (names the node).
        """
        cached = self._cache.get(pos)
        if cached is not None:
            return cached
        from tracekit.wire.codec import attr_from_pb
        from tracekit._proto import et_def_pb2 as pb

        src = self.source
        if not self._verified:
            src.verify()  # frames every attribute message once (check_attrs); TraceFormatError names a corrupt one
            self._verified = True
        s, e = int(src.starts[pos]), int(src.ends[pos])
        try:
            attrs = tuple(map(attr_from_pb, pb.Node.FromString(src.data[s:e]).attr))
        except DecodeError as exc:
            raise TraceFormatError(
                f"attribute cannot be decoded ({exc})",
                byte_offset=s,
                path=src.encoded.path,
                rank=src.encoded.rank,
                node_id=int(self.cols.ids[pos]),
            ) from None
        if len(self._cache) >= _CACHE_NODES:
            self._cache.clear()
        self._cache[pos] = attrs
        return attrs

    def _often(self, name: str) -> bool:
        count = self._reads.get(name, 0) + 1
        self._reads[name] = count
        return count > _COLUMN_AFTER or name in self.cols._attr_cache

    def value_at(self, name: str, pos: int) -> Any:
        """The value of the first attribute ``name`` of the node at ``pos``, or None."""
        if self._often(name):
            return self.cols.attr(name)[1][pos]
        for a in self.attrs_at(pos):
            if a.name == name:
                return a.value
        return None

    def int_at(self, name: str, pos: int) -> int | None:
        """Attribute ``name`` of the node at ``pos`` by the integer rule (:func:`tracekit.model.attrs.as_int`).

        Raises:
            ValidationError: the value is not a number (names node and attribute).
            TraceFormatError: on the first read, a corrupt attribute message anywhere in the file.
        """
        try:
            return self.ints[name][pos]  # the column of a name read before (list indexing: no numpy scalar)
        except KeyError:
            pass
        if name in self._general:
            return as_int(name, self.cols.attr(name)[1][pos], int(self.cols.ids[pos]))
        # the first typed read of a name: its column for every node, in one pass over the records that also
        # finds the other standard integer fields (a loop reading two fields makes one pass, not two) and frames
        # every attribute message (a corrupt one raises here, as on any first attribute use)
        self.cols.prefetch_attrs([x for x in (name, *INT_FIELDS) if x not in self.ints and x not in self._general])
        try:
            present, values = self.cols.attr_int(name)
        except ValidationError:  # some node holds a non-number: answer node by node
            self._general.add(name)
            return self.int_at(name, pos)
        col = self.ints[name] = np.where(present, values, np.array(None, dtype=object)).tolist()
        return col[pos]


def _none(node: Any) -> None:
    return None


class ColumnNode(Node):
    """A :class:`~tracekit.model.Node` of a trace read from a file: the same value, read from the file's columns.

    Five values underneath (id, type, duration_ns, the file's :class:`AttrTable`, the node's position), so
    a node costs one small tuple to build; name, dependencies, start time and attributes are read from the
    table when touched (names decoded for the whole file on first use).  Equality, hash, repr and editing
    are :class:`Node`'s (through :meth:`fields`); a pickled or edited node is a plain :class:`Node`.
    """

    __slots__ = ()
    id = _tuplegetter(0, "node id")
    type = _tuplegetter(1, "NodeType")
    duration_ns = _tuplegetter(2, "duration, ns")
    inputs = outputs = storage = property(_none, doc="None (records with these fields are plain Nodes)")

    @property
    def name(self) -> str:  # type: ignore[override]
        """Operator or collective name."""
        names = self[3].names
        return self[3].name_at(self[4]) if names is None else names[self[4]]

    @property
    def data_deps(self) -> tuple[int, ...]:  # type: ignore[override]
        """Tuple of data-dependency ids."""
        return self[3].data_deps_at(self[4])

    @property
    def ctrl_deps(self) -> tuple[int, ...]:  # type: ignore[override]
        """Tuple of control-dependency ids."""
        return self[3].ctrl_deps_at(self[4])

    @property
    def start_time_ns(self) -> int:  # type: ignore[override]
        """Measured start, ns (0 if unknown)."""
        return self[3].starts[self[4]]

    @property
    def attrs(self) -> tuple[Attr, ...]:  # type: ignore[override]
        """Attributes in file order (decoded on access).

        Raises:
            TraceFormatError: the node's attribute messages cannot be decoded.
        """
        return self[3].attrs_at(self[4])

    def fields(self) -> tuple:
        """The 11 field values in :data:`~tracekit.model.node.NODE_FIELDS` order (attributes decoded)."""
        t, pos = self[3], self[4]
        deps = t.data_deps_at(pos), t.ctrl_deps_at(pos)
        return (self[0], t.name_at(pos), self[1], *deps, t.start_at(pos), self[2], None, None, t.attrs_at(pos), None)

    def get_attr(self, name: str, default: Any = None) -> Any:
        """The value of the first attribute called ``name``, else ``default``."""
        value = self[3].value_at(name, self[4])
        return default if value is None else value

    def int_attr(self, name: str) -> int | None:
        """Attribute ``name`` by the integer rule of :func:`tracekit.model.attrs.as_int`, None when absent.

        Raises:
            ValidationError: a value that is not a number (names node and attribute).
        """
        return self[3].int_at(name, self[4])


def _int_getter(key: str) -> Any:
    """The getter of a :class:`ColumnNode`'s integer field ``key``: one frame while the field is a column."""

    def get(node: Any) -> int | None:
        try:
            return node[3].ints[key][node[4]]
        except KeyError:
            return node[3].int_at(key, node[4])

    return get


INT_FIELDS: list[str] = []  # the attribute names of the standard integer fields (comm_size, num_ops...)
_INT_PROPERTIES: dict[str, list[tuple[str, str | None]]] = {}  # attribute name -> (property, docstring)
for _name, _prop in list(vars(TypedAttrs).items()):  # the standard integer fields, read without int_attr
    _field = FIELD_OF_PROPERTY.get(_prop) if isinstance(_prop, property) else None
    if _field is not None and _field.node_reader == "int_attr":
        setattr(ColumnNode, _name, property(_int_getter(str(_field)), doc=_prop.__doc__))
        INT_FIELDS.append(str(_field))
        _INT_PROPERTIES.setdefault(str(_field), []).append((_name, _prop.__doc__))
_CARRYING: dict[tuple[str, ...], type[ColumnNode]] = {}


def _carrying(names: tuple[str, ...]) -> type[ColumnNode]:
    """The :class:`ColumnNode` subclass whose nodes carry the values of the integer fields ``names`` (attribute
    names decoded as columns, :attr:`AttrTable.ints`) after their five values: ``node.num_ops`` is then one C
    call (a tuple item), not a Python getter.  Made once per set of names."""
    cls = _CARRYING.get(names)
    if cls is None:
        getters = {p: _tuplegetter(5 + k, doc or p) for k, x in enumerate(names) for p, doc in _INT_PROPERTIES[x]}
        cls = _CARRYING[names] = type("ColumnNode", (ColumnNode,), {"__slots__": (), "__module__": __name__, **getters})
    return cls


class NodeView(Sequence[Node]):
    """The nodes of a file in file order, built from its columns on access (read-only).

    Args:
        encoded: the file's records (:class:`tracekit.wire.framing.EncodedNodes`).
        cols: their :class:`~tracekit.model.graph.NodeColumns` (from :func:`tracekit.wire.columnar.decode_columns`).
    """

    def __init__(self, encoded: Any, cols: Any) -> None:
        source = getattr(cols.attr_fn, "__self__", None)
        if source is None or not hasattr(source, "special"):  # columns derived by a rewrite: read the records' own
            cols = encoded.columns()
            source = cols.attr_fn.__self__
        self._encoded, self._cols, self._n = encoded, cols, len(cols)
        self._table = AttrTable(source, cols)
        self._special: list[int] = np.flatnonzero(source.special).tolist()
        self._types = _node_types(cols.types)
        self._chunk: tuple[int, list[Node]] = (-1, [])
        self._last = -2

    def __len__(self) -> int:
        return self._n

    def _rows(self, lo: int, hi: int = -1) -> Iterable[Node]:
        """Nodes ``lo .. hi-1`` (to ``lo + CHUNK_NODES`` when ``hi`` is -1): each built when it is asked for.

        A node is five values (id, type, duration, the :class:`AttrTable`, its position) made by a C-level
        ``map`` over ``zip``; records decoded with protobuf (see the module docstring) are decoded in place.

        Raises:
            TraceFormatError: a record decoded with protobuf is corrupt or holds an out-of-range time.
        """
        cols, table = self._cols, self._table
        hi = min(self._n, lo + CHUNK_NODES) if hi < 0 else hi
        values = [cols.ids[lo:hi].tolist(), self._types[lo:hi].tolist(), cols.duration_ns[lo:hi].tolist()]
        carried = tuple(x for x in table.ints if x in _INT_PROPERTIES)  # standard fields decoded as columns
        values += [repeat(table), range(lo, hi), *(table.ints[x][lo:hi] for x in carried)]
        nodes = map(tuple.__new__, repeat(_carrying(carried) if carried else ColumnNode), zip(*values))
        special = self._special
        a = bisect_left(special, lo) if special else 0
        if a == len(special) or special[a] >= hi:
            return nodes
        out: list[Node] = list(nodes)
        for i in special[a : bisect_left(special, hi)]:
            out[i - lo] = self._decode_record(i)
        return out

    def _build(self, lo: int, hi: int) -> list[Node]:
        """Nodes ``lo .. hi-1`` as a list (see :meth:`_rows`)."""
        from tracekit.gc_pause import paused_gc

        with paused_gc():  # new acyclic tuples: cyclic collections would only rescan them
            return list(self._rows(lo, hi))

    def _decode_record(self, i: int) -> Node:
        from tracekit.wire.codec import node_from_pb

        last = int(self._cols.ids[i - 1]) if i else None
        try:
            return node_from_pb(self._encoded.decode_one(i, last))
        except TracekitError as exc:
            raise exc.with_context(path=self._encoded.path, rank=self._encoded.rank) from None

    def __iter__(self) -> Iterator[Node]:
        """The nodes in file order, each built when the iteration reaches it.

        The column values are taken ``CHUNK_NODES`` at a time, but a node is
        made only when it is asked for, so a loop that drops each node before
        the next leaves the cyclic collector nothing to scan (building whole
        chunks first made every collection scan a chunk of live nodes:
        measured 40 % of an iteration's CPU).

        Raises:
            TraceFormatError: a record decoded with protobuf is corrupt (when it is reached).
        """
        return chain.from_iterable(map(self._rows, range(0, self._n, CHUNK_NODES)))

    @overload
    def __getitem__(self, index: int) -> Node: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Node, ...]: ...

    def __getitem__(self, index: int | slice) -> Node | tuple[Node, ...]:
        """The node at ``index`` (negative counts from the end), or a tuple of nodes for a slice.

        Raises:
            IndexError: ``index`` out of range.
        """
        if isinstance(index, slice):
            lo, hi, step = index.indices(self._n)
            if step == 1:
                return tuple(self._build(lo, max(lo, hi)))
            return tuple(self[i] for i in range(lo, hi, step))
        i = index.__index__()
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"node position {index} out of range (0 to {self._n - 1})")
        lo, chunk = self._chunk
        if lo <= i < lo + len(chunk):
            return chunk[i - lo]
        sequential, self._last = i == self._last + 1, i
        if sequential:  # an index loop: build ahead
            self._chunk = (i, self._build(i, min(self._n, i + 4096)))
            return self._chunk[1][0]
        return self._build(i, i + 1)[0]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(other) == self._n and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<NodeView of {self._n} nodes>"


_TYPE_TABLE = np.array([_NODE_TYPES.get(t, t) for t in range(max(_NODE_TYPES) + 1)], dtype=object)


def _node_types(types: np.ndarray) -> np.ndarray:
    """NodeType members (object[N]) for int16 wire numbers (the int itself for unknown numbers)."""
    wire = types.astype(np.int64)
    if not len(wire) or (int(wire.min()) >= 0 and int(wire.max()) < len(_TYPE_TABLE)):
        return _TYPE_TABLE[wire]
    out = np.empty(len(wire), dtype=object)
    out[:] = [_NODE_TYPES.get(t, t) for t in wire.tolist()]
    return out
