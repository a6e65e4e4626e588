"""The trace model: nodes, attributes and one rank's execution trace.

An :class:`ExecutionTrace` is the execution graph of one rank: global metadata
plus :class:`Node` values.  Everything here is immutable (issue 13): a node,
an attribute, the metadata and a trace never change once built; an edit
(:meth:`Node.replace`, :meth:`Node.with_attr`, :meth:`ExecutionTrace.with_nodes`)
returns a new value, so the columns and dependency graph a trace caches can
never describe other nodes than the ones it holds.  A trace read from a file
keeps its encoded records: its columns (:meth:`ExecutionTrace.columns`) are
decoded with numpy, and ``trace.nodes`` is a read-only view that builds node
values from the columns on access (:class:`tracekit.wire.nodeview.ColumnNode`, a
:class:`Node` subclass equal to the same node built by hand), reading a node's
name, dependencies, start time and attributes only when they are touched.

Time is kept in integer nanoseconds everywhere (``duration_ns``,
``start_time_ns``); the schema maps it to Chakra's microsecond fields (see
schema/et_def.proto).  Sizes are bytes; ``num_ops`` counts FLOPs in traces
tracekit writes.

The standard attributes other tools read (docs/design.md section 3) have typed
accessors on :class:`Node`, with one rule per value type (:mod:`tracekit.model.attrs`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from tracekit.model.attrs import (
    as_bytes,  # noqa: F401
)
from tracekit.model.draft import NodeDraft  # noqa: F401
from tracekit.model.node import (
    Metadata,
    Node,
)

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model.graph import DepGraph, NodeColumns


class ExecutionTrace:
    """The execution graph of one rank: an immutable value.

    Args:
        nodes: the nodes (:class:`Node`), in file order; stored as a tuple.
        metadata: global metadata; a default one (version ``0.0.4``) if omitted.
        rank: the rank this trace belongs to, when known.
        path: the file it was read from, when any (used in error messages).

    Raises:
        TypeError: an element of ``nodes`` is not a :class:`Node`.

    This constructor and :meth:`_from_encoded` (the file readers' entry) are
    the only ways a trace is built.  Nothing is settable: edits go through
    :meth:`with_nodes`, :meth:`with_metadata` and :meth:`with_label`, which
    return a new trace whose indexes are rebuilt on first use, so a cached
    column table or dependency graph always describes the nodes it came from.
    """

    __slots__ = ("_metadata", "_rank", "_path", "_nodes", "_encoded", "_view", "_columns", "_graph", "_meta_raw")

    def __init__(
        self,
        nodes: Iterable[Node] | None = None,
        metadata: Metadata | None = None,
        *,
        rank: int | None = None,
        path: str | None = None,
    ) -> None:
        self._metadata = metadata if metadata is not None else Metadata(version="0.0.4")
        self._rank, self._path = rank, path
        self._nodes: tuple[Node, ...] | None = tuple(nodes) if nodes is not None else ()
        for node in self._nodes:
            if node.__class__ is not Node and not isinstance(node, Node):
                raise TypeError(f"ExecutionTrace nodes must be Node values, got {type(node).__name__}")
        self._encoded: Any = None  # tracekit.wire.framing.EncodedNodes when read from a file
        self._view: Sequence[Node] | None = None
        self._columns: NodeColumns | None = None
        self._graph: DepGraph | None = None
        self._meta_raw: bytes | None = None

    @classmethod
    def _from_encoded(
        cls, encoded: Any, metadata: Metadata, *, rank: int | None, path: str | None, meta_raw: bytes | None = None
    ) -> "ExecutionTrace":
        """A trace over the encoded records of a file (:class:`tracekit.wire.framing.EncodedNodes`), nothing decoded yet."""
        trace = cls(None, metadata, rank=rank, path=path)
        object.__setattr__(trace, "_nodes", None)
        object.__setattr__(trace, "_encoded", encoded)
        object.__setattr__(trace, "_meta_raw", meta_raw)
        return trace

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ExecutionTrace.__slots__ and not hasattr(self, "_meta_raw"):
            object.__setattr__(self, name, value)  # during construction only
            return
        raise AttributeError(
            f"ExecutionTrace is immutable: use with_nodes / with_metadata / with_label "
            f"instead of setting {name!r} (issue 13)"
        )

    @property
    def metadata(self) -> Metadata:
        """The global metadata (immutable; :meth:`with_metadata` makes a trace with other metadata)."""
        return self._metadata

    @property
    def rank(self) -> int | None:
        """The rank, when known."""
        return self._rank

    @property
    def path(self) -> str | None:
        """The file the trace was read from, when any."""
        return self._path

    # ----- nodes ----------------------------------------------------------------------
    @property
    def nodes(self) -> Sequence[Node]:
        """The nodes in file order: a read-only sequence (a tuple, or a view over the columns of a file).

        Raises:
            TraceFormatError: (read from a file) a record cannot be decoded, raised when it is reached.
        """
        if self._nodes is not None:
            return self._nodes
        if self._view is None:
            object.__setattr__(self, "_view", self._encoded.node_view(self.columns()))
        assert self._view is not None
        return self._view

    def __len__(self) -> int:
        if self._nodes is None:
            return len(self._encoded)
        return len(self._nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def with_nodes(self, nodes: Iterable[Node], metadata: Metadata | None = None) -> "ExecutionTrace":
        """A new trace of the same rank with other nodes (this trace's metadata unless given).

        Raises:
            TypeError: an element of ``nodes`` is not a :class:`Node`.
        """
        return ExecutionTrace(nodes, metadata if metadata is not None else self._metadata, rank=self._rank)

    def with_metadata(self, metadata: Metadata) -> "ExecutionTrace":
        """The same nodes with other metadata; a trace read from a file keeps its encoded records and indexes."""
        if self._nodes is None:
            trace = ExecutionTrace._from_encoded(self._encoded, metadata, rank=self._rank, path=None)
            object.__setattr__(trace, "_columns", self._columns)
            object.__setattr__(trace, "_graph", self._graph)
            return trace
        return ExecutionTrace(self._nodes, metadata, rank=self._rank, path=None)

    def with_label(self, *, rank: int | None = None, path: str | None = None) -> "ExecutionTrace":
        """The same nodes and metadata labelled with another ``rank`` / ``path`` (None keeps the current one)."""
        rank = self._rank if rank is None else rank
        path = self._path if path is None else path
        if self._nodes is None:
            trace = ExecutionTrace._from_encoded(
                self._encoded, self._metadata, rank=rank, path=path, meta_raw=self._meta_raw
            )
            object.__setattr__(trace, "_columns", self._columns)
            return trace
        return ExecutionTrace(self._nodes, self._metadata, rank=rank, path=path)

    def node_at(self, position: int) -> Node:
        """The node at ``position`` (file order; IndexError past the end)."""
        return self.nodes[position]

    def node_by_id(self, node_id: int) -> Node:
        """The node with id ``node_id``.

        Raises:
            ValidationError: no such node.
        """
        return self.node_at(self.graph().position_of(node_id))

    # ----- indexes ----------------------------------------------------------------------
    def columns(self) -> "NodeColumns":
        """Columnar view of the node table (numpy arrays), built once: the trace never changes.

        Raises:
            TraceFormatError: (read from a file) a record cannot be decoded.
        """
        if self._columns is None:
            from tracekit.model.graph import NodeColumns

            if self._nodes is None:
                cols = self._encoded.columns()
            else:
                cols = NodeColumns.from_nodes(self._nodes)
            object.__setattr__(self, "_columns", cols)
        assert self._columns is not None
        return self._columns

    def scan_columns(self, attrs: Sequence[str], on_attrs: Callable[..., None]) -> bool:
        """Build the columns of a trace read from a file in one pass that also finds attributes ``attrs``.

        ``on_attrs(lo, hi, kind, values, types, duration_ns)`` is called for each chunk of records
        (:func:`tracekit.wire.columnar.decode_columns`), so a reader of a few attributes of every node
        needs no second pass and no per-node array per attribute.

        Returns:
            False (nothing called) when the columns are built already or the nodes are in memory.

        Raises:
            TraceFormatError: a record cannot be decoded.
        """
        if self._columns is not None or self._nodes is not None or self._encoded is None:
            return False
        object.__setattr__(self, "_columns", self._encoded.columns(attrs, on_attrs))
        return True

    def _adopt_columns(self, cols: "NodeColumns") -> None:
        """Internal (tracekit.transforms.colscale): columns a rewrite derived for exactly these nodes.

        Taken only while this trace has built none, so it never replaces an index already in use.
        """
        if self._columns is None and self._graph is None:
            object.__setattr__(self, "_columns", cols)

    def graph(self) -> "DepGraph":
        """The data-dependency graph as compact arrays (see :class:`tracekit.model.graph.DepGraph`), built once.

        Raises:
            ValidationError: duplicate node ids (an index needs unique ids).
        """
        if self._graph is None:
            from tracekit.model.graph import DepGraph

            object.__setattr__(self, "_graph", DepGraph.build(self.columns(), path=self._path, rank=self._rank))
        assert self._graph is not None
        return self._graph

    def process_groups(self) -> dict[str, tuple[int, ...]]:
        """Process groups declared in this trace (``process_group:init`` METADATA node).

        Returns:
            ``pg_name -> ranks``; an empty tuple means "all ranks".
        """
        from tracekit.model.groups import groups_from_trace

        return groups_from_trace(self)

    def __repr__(self) -> str:
        return f"ExecutionTrace(rank={self._rank}, nodes={len(self)}, version={self._metadata.version!r})"


def nodes_by_id(nodes: Iterable[Node]) -> dict[int, Node]:
    """Map node id -> node (last wins for duplicate ids)."""
    return {n.id: n for n in nodes}
