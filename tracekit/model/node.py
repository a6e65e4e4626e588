"""The values of the trace model: node and collective types, :class:`Node`, :class:`Metadata`, time limits.

(:class:`~tracekit.model.draft.NodeDraft`, the mutable form converters assemble, is in :mod:`tracekit.model.draft`.)

:mod:`tracekit.model` re-exports every name here and holds :class:`~tracekit.model.ExecutionTrace`; its module
docstring describes the model as a whole (immutability, the column view, units).  Attribute values follow one rule
per value type (:mod:`tracekit.model.attrs`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Iterable, Sequence

from tracekit.model.attrs import (
    COMM_DST,
    COMM_PRIORITY,
    COMM_SIZE,
    COMM_SRC,
    COMM_TAG,
    COMM_TYPE,
    IS_CPU_OP,
    NUM_OPS,
    PG_NAME,
    STREAM,
    TENSOR_SIZE,
    Attr,
    as_bool,
    as_bytes,
    as_int,
    as_str,
    attrs_with,
)
from tracekit.errors import ValidationError


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
    STORAGE_NODE = 8  # chakra PR #216 (schema/et_def.proto): I/O, detail in Node.storage
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


# Nodes one rank of a generated or converted job may have: a node in memory takes ~0.5-1 KB while it is built
# (Python objects before the columns), so 2^24 nodes (16.8 M) is ~8-16 GB, as much as one rank can take on the
# machines tracekit runs on. Counted from the options (a lower bound) before any node is built: `convert text
# --passes 1e9` and `generate llm --global-batch 1e9` ran for minutes into a MemoryError.
MAX_NODES_PER_RANK = 1 << 24


def check_node_count(nodes_per_rank: int, what: str) -> int:
    """``nodes_per_rank`` when at most :data:`MAX_NODES_PER_RANK`; ConfigError naming ``what`` otherwise.

    Args:
        nodes_per_rank: a lower bound of the nodes one rank would get, from the options alone.
        what: the options that set it, for the message (``--passes 1000000 of 9 layers``).
    """
    if nodes_per_rank > MAX_NODES_PER_RANK:
        from tracekit.errors import ConfigError

        raise ConfigError(
            f"{what} would make at least {nodes_per_rank:,} nodes per rank; tracekit builds at most "
            f"{MAX_NODES_PER_RANK:,} (about 8-16 GB of memory while they are built)"
        )
    return nodes_per_rank


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


@dataclass(frozen=True, slots=True)
class IOInfo:
    """Chakra ``IOInfo``: operator inputs or outputs as strings (values, shapes, types)."""

    values: str = ""
    shapes: str = ""
    types: str = ""


class TypedAttrs:
    """The typed standard attributes (Chakra's vocabulary), shared by :class:`Node` and :class:`NodeDraft`.

    Each reads one standard field of :mod:`tracekit.model.attrs` by its rule, through the class's ``int_attr`` /
    ``str_attr`` / ``bool_attr`` (the field picks which: :meth:`tracekit.model.attrs._Field.node_property`); None when
    the attribute is absent.
    """

    __slots__ = ()
    id: int
    type: Any
    duration_ns: int

    def int_attr(self, name: str) -> int | None:  # pragma: no cover - defined by the subclasses
        """Attribute ``name`` by the int rule (:func:`tracekit.model.attrs.as_int`), None when absent."""
        raise NotImplementedError

    def str_attr(self, name: str) -> str | None:  # pragma: no cover
        """Attribute ``name`` by the str rule (:func:`tracekit.model.attrs.as_str`), None when absent."""
        raise NotImplementedError

    def bool_attr(self, name: str) -> bool | None:  # pragma: no cover
        """Attribute ``name`` by the bool rule (:func:`tracekit.model.attrs.as_bool`), None when absent."""
        raise NotImplementedError

    @property
    def is_comm(self) -> bool:
        """True for COMM_SEND, COMM_RECV and COMM_COLL nodes."""
        return self.type in COMM_TYPES

    @property
    def comm_type(self) -> CollectiveType | None:
        """The ``comm_type`` attribute as a :class:`CollectiveType`, or None when absent.

        Raises:
            ValidationError: when the value is not a known collective type.
        """
        value = self.int_attr(COMM_TYPE)
        if value is None:
            return None
        try:
            return CollectiveType(value)
        except ValueError:
            raise ValidationError(f"unknown comm_type {value}", node_id=self.id) from None

    comm_bytes = COMM_SIZE.node_property("``comm_size``: bytes communicated (integer rule), or None.")
    comm_src = COMM_SRC.node_property("``comm_src``: sending rank of a point-to-point node (integer rule), or None.")
    comm_dst = COMM_DST.node_property("``comm_dst``: receiving rank of a point-to-point node (integer rule), or None.")
    comm_tag = COMM_TAG.node_property("``comm_tag``: matching tag of a point-to-point node (integer rule), or None.")
    comm_priority = COMM_PRIORITY.node_property("``comm_priority`` (integer rule), or None.")
    pg_name = PG_NAME.node_property("``pg_name``: the process group of a collective (string rule), or None.")
    is_cpu_op = IS_CPU_OP.node_property("``is_cpu_op`` (bool rule), or None.")
    num_ops = NUM_OPS.node_property(
        "``num_ops``: floating-point operations (FLOPs) in traces tracekit writes (integer rule)."
    )
    tensor_bytes = TENSOR_SIZE.node_property(
        "``tensor_size``: bytes moved to and from memory by the node (integer rule)."
    )
    stream = STREAM.node_property("Device stream (``stream`` attribute) of a kernel (integer rule), or None.")

    @property
    def duration_us(self) -> float:
        """``duration_ns`` in microseconds."""
        return self.duration_ns / 1000.0


try:  # the C accessor namedtuple fields use: a field read costs one C call
    from _collections import _tuplegetter  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - other Python implementations

    def _tuplegetter(index: int, doc: str) -> Any:  # type: ignore[misc]
        return property(itemgetter(index), doc=doc)


NODE_FIELDS = (
    "id",
    "name",
    "type",
    "data_deps",
    "ctrl_deps",
    "start_time_ns",
    "duration_ns",
    "inputs",
    "outputs",
    "attrs",
    "storage",
)


class Node(TypedAttrs, tuple):  # type: ignore[misc]
    """One node of an execution trace: an immutable value (edits return a new node).

    Fields (read-only):
        id: node id, unique within the rank.
        name: operator or collective name.
        type: a :class:`NodeType`.
        data_deps: tuple of ids of nodes whose completion this node waits for.
        ctrl_deps: tuple of ids of control parents (host call-stack parent in
            converted traces; simulators do not wait for them).
        start_time_ns: measured start, nanoseconds (0 if unknown).
        duration_ns: measured or modelled duration, nanoseconds.
        inputs, outputs: operator I/O strings (:class:`IOInfo`), or None.
        attrs: tuple of :class:`Attr` in file order.
        storage: the serialized ``StorageInfo`` message of a STORAGE_NODE
            (``tracekit._proto.et_def_pb2.StorageInfo``), kept as bytes so it
            round-trips exactly; None when absent.

    Setting a field raises AttributeError; use :meth:`replace`,
    :meth:`with_attr`, :meth:`without_attr`.  Nodes of a trace read from a
    file are views over its columns (:class:`tracekit.wire.nodeview.ColumnNode`,
    a subclass): the same values, with name, dependencies, start time and
    attributes read from the columns only when touched.  (A tuple underneath
    so millions are built at C speed.)
    """

    __slots__ = ()

    def __new__(
        cls,
        id: int,
        name: str = "",
        type: "NodeType | int" = NodeType.COMP_NODE,
        data_deps: Iterable[int] = (),
        ctrl_deps: Iterable[int] = (),
        start_time_ns: int = 0,
        duration_ns: int = 0,
        inputs: IOInfo | None = None,
        outputs: IOInfo | None = None,
        attrs: Iterable[Attr] = (),
        storage: bytes | None = None,
    ) -> "Node":
        return tuple.__new__(
            cls,
            (
                id,
                name,
                type,
                tuple(data_deps),
                tuple(ctrl_deps),
                start_time_ns,
                duration_ns,
                inputs,
                outputs,
                tuple(attrs),
                storage,
            ),
        )

    id = _tuplegetter(0, "node id")
    name = _tuplegetter(1, "operator or collective name")
    type = _tuplegetter(2, "NodeType")
    data_deps = _tuplegetter(3, "tuple of data-dependency ids")
    ctrl_deps = _tuplegetter(4, "tuple of control-dependency ids")
    start_time_ns = _tuplegetter(5, "measured start, ns")
    duration_ns = _tuplegetter(6, "duration, ns")
    inputs = _tuplegetter(7, "IOInfo or None")
    outputs = _tuplegetter(8, "IOInfo or None")
    attrs = _tuplegetter(9, "attributes in file order (tuple of Attr)")
    storage = _tuplegetter(10, "serialized StorageInfo or None")

    def fields(self) -> tuple:
        """The 11 field values in :data:`NODE_FIELDS` order (attributes decoded)."""
        return self[:]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Node):
            return NotImplemented
        return self.fields() == other.fields()

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash(self.fields())

    def __repr__(self) -> str:
        return "Node(" + ", ".join(f"{k}={v!r}" for k, v in zip(NODE_FIELDS, self.fields())) + ")"

    def __reduce__(self) -> tuple:
        return (Node, self.fields())

    def __copy__(self) -> "Node":
        return self

    def __deepcopy__(self, memo: dict) -> "Node":
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Node is immutable: use node.replace({name}=...) (issue 13)")

    # ----- edits that return a new node ----------------------------------------------------
    def replace(self, **changes: Any) -> "Node":
        """A copy of this node with ``changes`` applied (field name -> new value); this node is unchanged.

        Sequences given for ``data_deps``, ``ctrl_deps``, ``attrs`` are stored as tuples.

        Raises:
            TypeError: for a name that is not a field of :class:`Node`.
        """
        bad = changes.keys() - set(NODE_FIELDS)
        if bad:
            raise TypeError(f"Node has no field {sorted(bad)[0]!r}")
        values = dict(zip(NODE_FIELDS, self.fields()))
        values.update(changes)
        return Node(**values)

    def with_attr(self, name: str, value: Any, kind: str | None = None) -> "Node":
        """A copy with attribute ``name`` set to ``value`` (replaced in place, or appended).

        ``kind`` defaults to the existing attribute's kind when it holds an
        integer and ``value`` is one, else to :meth:`Attr.infer`'s kind.

        Raises:
            ValidationError: for an unknown ``kind``, or a value whose kind cannot be inferred.
        """
        return self.replace(attrs=attrs_with(self.attrs, name, value, kind, self.id))

    def without_attr(self, name: str) -> "Node":
        """A copy without attribute ``name`` (an equal copy when absent)."""
        return self.replace(attrs=tuple(a for a in self.attrs if a.name != name))

    # ----- generic attribute access -------------------------------------------------------
    def get_attr(self, name: str, default: Any = None) -> Any:
        """The value of the first attribute called ``name``, else ``default``."""
        for x in self.attrs:
            if x.name == name:
                return x.value
        return default

    def has_attr(self, name: str) -> bool:
        """True when the node has an attribute called ``name``."""
        return any(a.name == name for a in self.attrs)

    def int_attr(self, name: str) -> int | None:
        """Attribute ``name`` by the integer rule of :func:`tracekit.model.attrs.as_int`, None when absent.

        Raises:
            ValidationError: a value that is not a number (names node and attribute).
        """
        return as_int(name, self.get_attr(name), self.id)

    def str_attr(self, name: str) -> str | None:
        """Attribute ``name`` by the string rule of :func:`tracekit.model.attrs.as_str`, None when absent.

        Raises:
            ValidationError: a value that is not text.
        """
        return as_str(name, self.get_attr(name), self.id)

    def bytes_attr(self, name: str) -> bytes | None:
        """Attribute ``name`` by the bytes rule of :func:`tracekit.model.attrs.as_bytes`, None when absent.

        Raises:
            ValidationError: a value that is neither bytes nor a string.
        """
        return as_bytes(name, self.get_attr(name), self.id)

    def bool_attr(self, name: str) -> bool | None:
        """Attribute ``name`` by the bool rule of :func:`tracekit.model.attrs.as_bool`, None when absent.

        Raises:
            ValidationError: a value that is neither a bool nor 0/1.
        """
        return as_bool(name, self.get_attr(name), self.id)


@dataclass(frozen=True, slots=True)
class Metadata:
    """Chakra ``GlobalMetadata``, immutable: a schema version string and a tuple of attributes."""

    version: str = ""
    attrs: Sequence[Attr] = ()  # stored as a tuple whatever sequence is given

    def __post_init__(self) -> None:
        if self.attrs.__class__ is not tuple:
            object.__setattr__(self, "attrs", tuple(self.attrs))

    def get_attr(self, name: str, default: Any = None) -> Any:
        """The value of the first attribute called ``name``, else ``default``."""
        for a in self.attrs:
            if a.name == name:
                return a.value
        return default

    def with_attr(self, name: str, value: Any, kind: str | None = None) -> "Metadata":
        """A copy with attribute ``name`` set (kind rule of :meth:`Node.with_attr`).

        Raises:
            ValidationError: for an unknown ``kind``.
        """
        return Metadata(self.version, attrs_with(tuple(self.attrs), name, value, kind))

    def without_attr(self, name: str) -> "Metadata":
        """A copy without attribute ``name``."""
        return Metadata(self.version, tuple(a for a in self.attrs if a.name != name))

    def with_attrs(self, attrs: Iterable[Attr]) -> "Metadata":
        """A copy with ``attrs`` appended."""
        return Metadata(self.version, tuple(self.attrs) + tuple(attrs))
