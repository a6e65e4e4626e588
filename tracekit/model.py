"""The trace model: nodes, attributes and one rank's execution trace.

An :class:`ExecutionTrace` is the execution graph of one rank: global metadata
plus :class:`Node` objects.  Nodes are plain mutable records (builders and
transforms create them); the trace owns the list.  A trace read from a file
keeps its encoded records and decodes :class:`Node` objects only when
``trace.nodes`` is first used, so reading, indexing (:meth:`ExecutionTrace.columns`)
and writing back an untouched trace never pay for Python objects per node.

Time is kept in integer nanoseconds everywhere (``duration_ns``,
``start_time_ns``); the schema maps it to Chakra's microsecond fields (see
schema/et_def.proto).  Sizes are bytes; ``num_ops`` counts FLOPs in traces
tracekit writes.

The standard attributes other tools read (docs/design.md section 3) have typed
accessors on :class:`Node` that accept every integer kind real files use.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from tracekit.errors import ValidationError

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.graph import DepGraph, NodeColumns


class NodeType(enum.IntEnum):
    """Chakra ``NodeType`` values (wire numbers)."""

    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7
    STORAGE_NODE = 8      # chakra PR #216 (schema/et_def.proto): I/O, detail in Node.storage
    BATCH_NODE = 9
    CHECKPOINT_NODE = 10


# Time limits: beyond them a value is an input error naming the node, never a wrapped or negative time.
MAX_DURATION_NS = 2**53  # about 104 days; float64 holds every integer up to it, so replay sums stay exact
MAX_TIME_NS = 2**62  # start times (often epoch-based, 1.7e18 ns in 2024) with room to add durations in int64


def time_range_error(field_name: str, value: Any, limit: int) -> str | None:
    """The message for a time ``value`` (ns) outside ``0 .. limit``, or None when it is in range."""
    if 0 <= value <= limit:
        return None
    return f"{field_name} {value:,} ns is out of range (0 to {limit:,} ns)"


# Rank counts beyond this are input errors (the largest training jobs have ~1e5 ranks); checked before
# anything per rank is allocated, so an absurd --ranks or --dp fails at once instead of exhausting memory.
MAX_RANKS = 1 << 20


def check_rank_count(n: int, what: str) -> int:
    """``n`` when ``1 <= n <= MAX_RANKS``; ConfigError naming ``what`` otherwise."""
    if n > MAX_RANKS or n < 1:
        from tracekit.errors import ConfigError

        raise ConfigError(f"{what} would have {n:,} ranks; tracekit handles 1 to {MAX_RANKS:,}")
    return n


COMM_TYPES = frozenset({NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE, NodeType.COMM_COLL_NODE})


class CollectiveType(enum.IntEnum):
    """Chakra ``CollectiveCommType`` values (wire numbers)."""

    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


# Attribute value kinds: the names of the AttributeProto oneof fields.
SCALAR_KINDS = (
    "double_val", "float_val", "int32_val", "int64_val", "uint32_val", "uint64_val",
    "sint32_val", "sint64_val", "fixed32_val", "fixed64_val", "sfixed32_val",
    "sfixed64_val", "bool_val", "string_val", "bytes_val",
)
LIST_KINDS = tuple(k.replace("_val", "_list") for k in SCALAR_KINDS)
ATTR_KINDS = frozenset(SCALAR_KINDS + LIST_KINDS)
INT_KINDS = frozenset(k for k in SCALAR_KINDS if "int" in k or "fixed" in k)


@dataclass(slots=True)
class Attr:
    """One ``AttributeProto``: a name, a value and its wire kind.

    Attributes:
        name: attribute name, e.g. ``comm_size``.
        value: a Python scalar (int, float, bool, str, bytes) or a list of them.
        kind: the oneof field that carries it, e.g. ``int64_val`` or
            ``uint64_list``; kept so a file round-trips byte for byte.
            ``None`` means "no value set" (an attribute with only a name).
        doc_string: the optional documentation string.
    """

    name: str
    value: Any
    kind: str | None = "int64_val"
    doc_string: str = ""

    @staticmethod
    def infer(name: str, value: Any) -> "Attr":
        """An :class:`Attr` with the usual kind for a Python value.

        int -> int64_val, float -> double_val, bool -> bool_val, str ->
        string_val, bytes -> bytes_val; lists likewise with ``_list``.

        Raises:
            ValidationError: for a value of another type or an empty list.
        """
        return Attr(name, value, _infer_kind(name, value))


def _infer_kind(name: str, value: Any) -> str:
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValidationError(f"attribute {name!r}: cannot infer the kind of an empty list; give kind=")
        return _infer_kind(name, value[0]).replace("_val", "_list")
    if isinstance(value, bool):
        return "bool_val"
    if isinstance(value, int):
        return "int64_val" if value < 2**63 else "uint64_val"
    if isinstance(value, float):
        return "double_val"
    if isinstance(value, str):
        return "string_val"
    if isinstance(value, (bytes, bytearray)):
        return "bytes_val"
    raise ValidationError(f"attribute {name!r}: unsupported value {value!r} of type {type(value).__name__}")


@dataclass(slots=True)
class IOInfo:
    """Chakra ``IOInfo``: operator inputs or outputs as strings (values, shapes, types)."""

    values: str = ""
    shapes: str = ""
    types: str = ""


@dataclass(slots=True)
class Node:
    """One node of an execution trace.

    Attributes:
        id: node id, unique within the rank.
        name: operator or collective name.
        type: a :class:`NodeType`.
        data_deps: ids of nodes whose completion this node waits for.
        ctrl_deps: ids of control parents (host call-stack parent in
            converted traces; simulators do not wait for them).
        start_time_ns: measured start, nanoseconds (0 if unknown).
        duration_ns: measured or modelled duration, nanoseconds.
        inputs, outputs: operator I/O strings, or None.
        attrs: attributes in file order.
        storage: the serialized ``StorageInfo`` message of a STORAGE_NODE
            (``tracekit._proto.et_def_pb2.StorageInfo``), kept as bytes so it
            round-trips exactly; None when absent.
    """

    id: int
    name: str = ""
    type: NodeType = NodeType.COMP_NODE
    data_deps: list[int] = field(default_factory=list)
    ctrl_deps: list[int] = field(default_factory=list)
    start_time_ns: int = 0
    duration_ns: int = 0
    inputs: IOInfo | None = None
    outputs: IOInfo | None = None
    attrs: list[Attr] = field(default_factory=list)
    storage: bytes | None = None

    # ----- edits that return a new node (the API every rewrite uses; issue 13) ----------
    def replace(self, **changes: Any) -> "Node":
        """A copy of this node with ``changes`` applied (field name -> new value); this node is unchanged.

        Lists (``data_deps``, ``ctrl_deps``, ``attrs``) are copied, so the new node shares no mutable state.

        Raises:
            TypeError: for a name that is not a field of :class:`Node`.
        """
        fields = {"data_deps": list(self.data_deps), "ctrl_deps": list(self.ctrl_deps),
                  "attrs": [Attr(a.name, a.value, a.kind, a.doc_string) for a in self.attrs]}
        fields.update(changes)
        return dataclasses.replace(self, **fields)

    def with_attr(self, name: str, value: Any, kind: str | None = None) -> "Node":
        """A copy with attribute ``name`` set to ``value`` (kind rule of :meth:`set_attr`).

        Raises:
            ValidationError: for an unknown ``kind``.
        """
        node = self.replace()
        node.set_attr(name, value, kind)
        return node

    def without_attr(self, name: str) -> "Node":
        """A copy without attribute ``name`` (unchanged copy when absent)."""
        return self.replace(attrs=[Attr(a.name, a.value, a.kind, a.doc_string) for a in self.attrs if a.name != name])

    # ----- generic attribute access -------------------------------------------------
    def get_attr(self, name: str, default: Any = None) -> Any:
        """The value of the first attribute called ``name``, else ``default``."""
        for a in self.attrs:
            if a.name == name:
                return a.value
        return default

    def has_attr(self, name: str) -> bool:
        return any(a.name == name for a in self.attrs)

    def set_attr(self, name: str, value: Any, kind: str | None = None) -> None:
        """Set (replace or append) attribute ``name``.

        ``kind`` defaults to the existing attribute's kind when it holds an
        integer and ``value`` is one, else to :meth:`Attr.infer`.

        Raises:
            ValidationError: for an unknown ``kind``.
        """
        if kind is not None and kind not in ATTR_KINDS:
            raise ValidationError(f"attribute {name!r}: unknown kind {kind!r}", node_id=self.id)
        for a in self.attrs:
            if a.name == name:
                if kind is None:
                    keep = a.kind in INT_KINDS and isinstance(value, int) and not isinstance(value, bool)
                    kind = a.kind if keep else _infer_kind(name, value)
                a.value, a.kind = value, kind
                return
        self.attrs.append(Attr(name, value, kind or _infer_kind(name, value)))

    def remove_attr(self, name: str) -> None:
        self.attrs = [a for a in self.attrs if a.name != name]

    def _int_attr(self, name: str) -> int | None:
        value = self.get_attr(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(f"attribute {name!r} must be an integer, got {value!r}", node_id=self.id)
        return value

    # ----- typed standard attributes ---------------------------------------------------
    @property
    def is_comm(self) -> bool:
        return self.type in COMM_TYPES

    @property
    def comm_type(self) -> CollectiveType | None:
        """The ``comm_type`` attribute as a :class:`CollectiveType`, or None when absent.

        Raises:
            ValidationError: when the value is not a known collective type.
        """
        value = self._int_attr("comm_type")
        if value is None:
            return None
        try:
            return CollectiveType(value)
        except ValueError:
            raise ValidationError(f"unknown comm_type {value}", node_id=self.id) from None

    @property
    def comm_bytes(self) -> int | None:
        """``comm_size`` in bytes (any integer kind), or None."""
        return self._int_attr("comm_size")

    @property
    def comm_src(self) -> int | None:
        return self._int_attr("comm_src")

    @property
    def comm_dst(self) -> int | None:
        return self._int_attr("comm_dst")

    @property
    def comm_tag(self) -> int | None:
        return self._int_attr("comm_tag")

    @property
    def comm_priority(self) -> int | None:
        return self._int_attr("comm_priority")

    @property
    def pg_name(self) -> str | None:
        value = self.get_attr("pg_name")
        return None if value is None else str(value)

    @property
    def is_cpu_op(self) -> bool | None:
        value = self.get_attr("is_cpu_op")
        return None if value is None else bool(value)

    @property
    def num_ops(self) -> int | None:
        """``num_ops``: floating-point operations (FLOPs) in traces tracekit writes."""
        value = self.get_attr("num_ops")
        if isinstance(value, float):
            return int(value)
        return self._int_attr("num_ops")

    @property
    def tensor_bytes(self) -> int | None:
        """``tensor_size``: bytes moved to and from memory by the node."""
        value = self.get_attr("tensor_size")
        if isinstance(value, float):
            return int(value)
        return self._int_attr("tensor_size")

    @property
    def stream(self) -> int | None:
        """Device stream (``stream`` attribute) of a kernel, or None."""
        return self._int_attr("stream")

    @property
    def duration_us(self) -> float:
        return self.duration_ns / 1000.0


@dataclass(slots=True)
class Metadata:
    """Chakra ``GlobalMetadata``: a schema version string and attributes."""

    version: str = ""
    attrs: list[Attr] = field(default_factory=list)

    def get_attr(self, name: str, default: Any = None) -> Any:
        for a in self.attrs:
            if a.name == name:
                return a.value
        return default

    def set_attr(self, name: str, value: Any, kind: str | None = None) -> None:
        for a in self.attrs:
            if a.name == name:
                a.value, a.kind = value, kind or _infer_kind(name, value)
                return
        self.attrs.append(Attr(name, value, kind or _infer_kind(name, value)))


class ExecutionTrace:
    """The execution graph of one rank.

    Args:
        nodes: the nodes, in file order.  The trace takes ownership of the list.
        metadata: global metadata; a default one is created if omitted.
        rank: the rank this trace belongs to, when known.
        path: the file it was read from, when any (used in error messages).

    A trace is treated as a value once built: code that changes nodes builds a
    new trace (see :meth:`with_nodes`), so cached indexes stay valid.
    """

    __slots__ = ("metadata", "rank", "path", "_nodes", "_encoded", "_columns", "_graph", "_meta_raw")

    def __init__(self, nodes: Iterable[Node] | None = None, metadata: Metadata | None = None,
                 *, rank: int | None = None, path: str | None = None) -> None:
        self.metadata = metadata if metadata is not None else Metadata(version="0.0.4")
        self.rank = rank
        self.path = path
        self._nodes: list[Node] | None = list(nodes) if nodes is not None else []
        self._encoded = None  # tracekit.io.EncodedNodes when read from a file
        self._columns: NodeColumns | None = None
        self._graph: DepGraph | None = None
        self._meta_raw: bytes | None = None

    @classmethod
    def _from_encoded(cls, encoded: Any, metadata: Metadata, *, rank: int | None,
                      path: str | None) -> "ExecutionTrace":
        trace = cls(None, metadata, rank=rank, path=path)
        trace._nodes = None
        trace._encoded = encoded
        return trace

    # ----- nodes ----------------------------------------------------------------------
    @property
    def nodes(self) -> list[Node]:
        """The nodes in file order (decoded on first use for traces read from files)."""
        if self._nodes is None:
            self._nodes = self._decode_nodes()
        return self._nodes

    def _decode_nodes(self) -> list[Node]:
        """Nodes built from the columns (fast); protobuf per record when that fails, for its error."""
        from tracekit._nodeview import nodes_from_columns

        try:
            return nodes_from_columns(self._encoded, self.columns())
        except Exception:  # noqa: BLE001 - any failure: the record-by-record path raises the precise error
            return self._encoded.decode_all()

    def __len__(self) -> int:
        if self._nodes is None:
            return len(self._encoded)
        return len(self._nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def with_nodes(self, nodes: Iterable[Node], metadata: Metadata | None = None) -> "ExecutionTrace":
        """A new trace of the same rank with other nodes (metadata copied unless given)."""
        md = metadata if metadata is not None else Metadata(self.metadata.version,
                                                            [Attr(a.name, a.value, a.kind, a.doc_string)
                                                             for a in self.metadata.attrs])
        return ExecutionTrace(nodes, md, rank=self.rank, path=None)

    def with_metadata(self, metadata: Metadata) -> "ExecutionTrace":
        """The same nodes with other metadata; a trace read from a file keeps its encoded records."""
        if self._nodes is None:
            trace = ExecutionTrace._from_encoded(self._encoded, metadata, rank=self.rank, path=None)
            trace._columns, trace._graph = self._columns, self._graph
            return trace
        return ExecutionTrace(self._nodes, metadata, rank=self.rank, path=None)

    def node_at(self, position: int) -> Node:
        """The node at ``position`` (file order), decoding only that record for a trace read from a file."""
        if self._nodes is None:
            from tracekit._codec import node_from_pb

            return node_from_pb(self._encoded.decode_one(position))
        return self._nodes[position]

    def node_by_id(self, node_id: int) -> Node:
        """The node with id ``node_id``.

        Raises:
            ValidationError: no such node.
        """
        return self.node_at(self.graph().position_of(node_id))

    # ----- indexes ----------------------------------------------------------------------
    def columns(self) -> "NodeColumns":
        """Columnar view of the node table (numpy arrays), cached."""
        if self._columns is None:
            from tracekit.graph import NodeColumns

            if self._nodes is None:
                self._columns = self._encoded.columns()
            else:
                self._columns = NodeColumns.from_nodes(self._nodes)
        return self._columns

    def graph(self) -> "DepGraph":
        """The data-dependency graph as compact arrays (see :class:`tracekit.graph.DepGraph`), cached.

        Raises:
            ValidationError: duplicate node ids (an index needs unique ids).
        """
        if self._graph is None:
            from tracekit.graph import DepGraph

            self._graph = DepGraph.build(self.columns(), path=self.path, rank=self.rank)
        return self._graph

    def process_groups(self) -> dict[str, tuple[int, ...]]:
        """Process groups declared in this trace (``process_group:init`` METADATA node).

        Returns:
            ``pg_name -> ranks``; an empty tuple means "all ranks".
        """
        from tracekit.groups import groups_from_trace

        return groups_from_trace(self)

    def __repr__(self) -> str:
        return f"ExecutionTrace(rank={self.rank}, nodes={len(self)}, version={self.metadata.version!r})"


def nodes_by_id(nodes: Sequence[Node]) -> dict[int, Node]:
    """Map node id -> node (last wins for duplicate ids)."""
    return {n.id: n for n in nodes}
