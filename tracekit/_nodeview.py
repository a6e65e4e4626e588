"""``trace.nodes`` of a trace read from a file: a read-only view over its columns (issues 13 and 17).

:class:`NodeView` builds :class:`~tracekit.model.Node` values from the numpy
columns of :mod:`tracekit._columnar` on access, a chunk at a time (ids, names,
types, times and dependencies come from the arrays; the tuples underneath a
node are made at C speed), so iterating costs no protobuf message per node
and holds one chunk of nodes at a time.  A node's attributes are not decoded
when the node is built: the node points at an :class:`AttrTable`, which
decodes them when they are touched (``node.attrs``, ``node.get_attr``) and
answers the typed accessors (``node.comm_bytes``...) from one vectorized
column per attribute name once a name is read often.  Records with fields the
columns do not hold (``inputs``/``outputs``, ``storage``, unknown fields) and
records with out-of-range times are decoded with protobuf, whose error names
the record.
"""

from __future__ import annotations

from itertools import chain, count, repeat
from typing import Any, Iterator, Sequence, overload

import numpy as np
from google.protobuf.message import DecodeError

from tracekit.attrs import Attr, as_int
from tracekit.errors import TraceFormatError, TracekitError, ValidationError
from tracekit.node import Node, NodeType

_NODE_TYPES = {int(t): t for t in NodeType}
CHUNK_NODES = 1 << 10  # nodes built per step of an iteration: bounds what a view holds at once
_COLUMN_AFTER = 64  # reads of one attribute name after which it is decoded as a column for all nodes
_CACHE_NODES = 1 << 16  # per-node decoded attribute tuples kept (then the cache restarts)


class AttrTable:
    """Attributes of the nodes of one file, decoded on access (see module docstring).

    Args:
        source: the ``_AttrSource`` of :mod:`tracekit._columnar` (the records, attributes by name).
        cols: the file's :class:`~tracekit.graph.NodeColumns`.
    """

    def __init__(self, source: Any, cols: Any) -> None:
        self.source, self.cols = source, cols
        self._verified = False
        self._cache: dict[int, tuple[Attr, ...]] = {}
        self._reads: dict[str, int] = {}
        self._ints: dict[str, list[int | None]] = {}
        self._general: set[str] = set()  # names with a non-number somewhere: read node by node

    def attrs_at(self, pos: int) -> tuple[Attr, ...]:
        """The attributes of the node at ``pos``, in file order (its record decoded with protobuf).

        Raises:
            TraceFormatError: an attribute message cannot be decoded (names the node).
        """
        cached = self._cache.get(pos)
        if cached is not None:
            return cached
        from tracekit._codec import attr_from_pb
        from tracekit._proto import et_def_pb2 as pb

        src = self.source
        if not self._verified:
            src.verify()  # the node walk framed every attribute; TraceFormatError names a corrupt one
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
        """Attribute ``name`` of the node at ``pos`` by the integer rule (:func:`tracekit.attrs.as_int`).

        Raises:
            ValidationError: the value is not a number (names node and attribute).
        """
        try:
            return self._ints[name][pos]  # the column of a name read often (list indexing: no numpy scalar)
        except KeyError:
            pass
        if name in self._general:
            return as_int(name, self.cols.attr(name)[1][pos], int(self.cols.ids[pos]))
        if not self._often(name):
            return as_int(name, self.value_at(name, pos), int(self.cols.ids[pos]))
        # names read about as often as this one (a loop reading two fields) are found in the same pass
        half = _COLUMN_AFTER // 2
        self.cols.prefetch_attrs([x for x, c in self._reads.items() if c > half and x not in self._ints])
        try:
            present, values = self.cols.attr_int(name)
        except ValidationError:  # some node holds a non-number: answer node by node
            self._general.add(name)
            return self.int_at(name, pos)
        col = self._ints[name] = np.where(present, values, np.array(None, dtype=object)).tolist()
        return col[pos]


class NodeView(Sequence[Node]):
    """The nodes of a file in file order, built from its columns on access (read-only).

    Args:
        encoded: the file's records (:class:`tracekit.io.EncodedNodes`).
        cols: their :class:`~tracekit.graph.NodeColumns` (from :func:`tracekit._columnar.decode_columns`).
    """

    def __init__(self, encoded: Any, cols: Any) -> None:
        source = getattr(cols.attr_fn, "__self__", None)
        if source is None or not hasattr(source, "special"):  # columns derived by a rewrite: read the records' own
            cols = encoded.columns()
            source = cols.attr_fn.__self__
        self._encoded, self._cols, self._n = encoded, cols, len(cols)
        self._table = AttrTable(source, cols)
        self._special = np.flatnonzero(source.special)
        self._types = _node_types(cols.types)
        self._timed = bool(cols.start_time_ns.any())
        self._chunk: tuple[int, list[Node]] = (-1, [])
        self._last = -2

    def __len__(self) -> int:
        return self._n

    def _build(self, lo: int, hi: int) -> list[Node]:
        """Nodes ``lo .. hi-1``.

        Raises:
            TraceFormatError: a record decoded with protobuf is corrupt or holds an out-of-range time.
        """
        cols = self._cols
        types = self._types[lo:hi].tolist()
        data, ctrl = _deps(cols.data_ptr, cols.data_ids, lo, hi), _deps(cols.ctrl_ptr, cols.ctrl_ids, lo, hi)
        start = cols.start_time_ns[lo:hi].tolist() if self._timed else repeat(0)
        out = list(
            map(
                tuple.__new__,
                repeat(Node),
                zip(
                    cols.ids[lo:hi].tolist(),
                    cols.names[lo:hi],
                    types,
                    data,
                    ctrl,
                    start,
                    cols.duration_ns[lo:hi].tolist(),
                    repeat(None),
                    repeat(None),
                    repeat(self._table),
                    repeat(None),
                    range(lo, hi),
                ),
            )
        )
        a, b = np.searchsorted(self._special, (lo, hi))
        for i in self._special[a:b].tolist():
            out[i - lo] = self._decode_record(i)
        return out

    def _decode_record(self, i: int) -> Node:
        from tracekit._codec import node_from_pb

        last = int(self._cols.ids[i - 1]) if i else None
        try:
            return node_from_pb(self._encoded.decode_one(i, last))
        except TracekitError as exc:
            raise exc.with_context(path=self._encoded.path, rank=self._encoded.rank) from None

    def _chunk_at(self, lo: int) -> list[Node]:
        from tracekit._gc import paused_gc

        with paused_gc():  # a chunk of new acyclic tuples: cyclic collections would only rescan them
            return self._build(lo, min(self._n, lo + CHUNK_NODES))

    def __iter__(self) -> Iterator[Node]:
        """The nodes in file order, each built when the iteration reaches it.

        The column values are taken ``CHUNK_NODES`` at a time, but a node is
        made only when it is asked for (a C-level ``map`` over ``zip``), so a
        loop that drops each node before the next leaves the cyclic collector
        nothing to scan: building whole chunks first made every collection
        scan a chunk of live nodes (measured: 40 % of an iteration's CPU).
        Records decoded with protobuf (see :class:`NodeView`) are decoded in
        place; a file with many of them is built a chunk at a time.

        Raises:
            TraceFormatError: a record decoded with protobuf is corrupt (when it is reached).
        """
        special = self._special.tolist()
        if len(special) > self._n // 64:
            return chain.from_iterable(map(self._chunk_at, range(0, self._n, CHUNK_NODES)))
        parts: list[Iterator[Node]] = []
        lo = 0
        for i in special:
            parts += [self._lazy(lo, i), map(self._decode_record, (i,))]
            lo = i + 1
        parts.append(self._lazy(lo, self._n))
        return chain.from_iterable(parts)

    def _lazy(self, lo: int, hi: int) -> Iterator[Node]:
        """Nodes ``lo .. hi-1`` built one by one as they are asked for (no protobuf-decoded record among them)."""
        cols, step = self._cols, CHUNK_NODES
        los = range(lo, hi, step)

        def column(take: Any) -> Iterator[Any]:
            return chain.from_iterable(map(lambda a: take(a, min(hi, a + step)), los))

        return map(
            tuple.__new__,
            repeat(Node),
            zip(
                column(lambda a, b: cols.ids[a:b].tolist()),
                column(lambda a, b: cols.names[a:b]),
                column(lambda a, b: self._types[a:b].tolist()),
                column(lambda a, b: _deps(cols.data_ptr, cols.data_ids, a, b)),
                column(lambda a, b: _deps(cols.ctrl_ptr, cols.ctrl_ids, a, b)),
                column(lambda a, b: cols.start_time_ns[a:b].tolist()) if self._timed else repeat(0),
                column(lambda a, b: cols.duration_ns[a:b].tolist()),
                repeat(None),
                repeat(None),
                repeat(self._table),
                repeat(None),
                count(lo),
            ),
        )

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


def _deps(ptr: np.ndarray, ids: np.ndarray, lo: int, hi: int) -> Any:
    """Per node ``lo .. hi-1``: its dependency ids as a tuple (an iterator of tuples)."""
    p = ptr[lo : hi + 1]
    base = int(p[0])
    if int(p[-1]) == base:
        return repeat((), hi - lo)
    if int(p[-1]) - base == hi - lo and bool((np.diff(p) == 1).all()):  # one dependency each (chains)
        return zip(ids[base : int(p[-1])].tolist())
    values = tuple(ids[base : int(p[-1])].tolist())
    offsets = (p - base).tolist()
    return map(values.__getitem__, map(slice, offsets[:-1], offsets[1:]))
