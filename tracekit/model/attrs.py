"""Attributes: the immutable :class:`Attr` value and the one rule per value type for reading them.

Chakra stores standard fields (``comm_size``, ``pg_name``, ``is_cpu_op``...)
as ``AttributeProto`` messages whose value may sit in any of 15 scalar kinds.
Every reader in tracekit goes through the rules here (issue 13: reading an
attribute as an integer used to behave four ways in four modules):

- integer (:func:`as_int`): any integer kind gives its value; a floating value
  is truncated toward zero (some writers store counts as doubles); a bool, a
  string, bytes or a list raise :class:`~tracekit.errors.ValidationError`.
- string (:func:`as_str`): ``string_val`` as is, ``bytes_val`` decoded as
  UTF-8, an integer kind as its decimal digits (process-group names written as
  numbers); anything else raises.
- bytes (:func:`as_bytes`): ``bytes_val`` as is, ``string_val`` encoded as UTF-8; anything else raises.
- bool (:func:`as_bool`): ``bool_val``, or an integer kind holding 0 or 1; anything else raises.

Column code applies the same rules vectorized
(:meth:`tracekit.model.graph.NodeColumns.attr_int`).

The standard fields themselves (:data:`COMM_SIZE`, :data:`PG_NAME`, ...) are
defined once, at the end: each is its key (a ``str``) bound to its rule, with
typed readers for one node (:meth:`_Field.of`) and for a rank's columns
(:meth:`_Field.column`), so no reader spells a standard key or picks a rule.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Callable, ClassVar

from tracekit.errors import ValidationError

# Attribute value kinds: the names of the AttributeProto oneof fields.
SCALAR_KINDS = (
    "double_val",
    "float_val",
    "int32_val",
    "int64_val",
    "uint32_val",
    "uint64_val",
    "sint32_val",
    "sint64_val",
    "fixed32_val",
    "fixed64_val",
    "sfixed32_val",
    "sfixed64_val",
    "bool_val",
    "string_val",
    "bytes_val",
)
LIST_KINDS = tuple(k.replace("_val", "_list") for k in SCALAR_KINDS)
ATTR_KINDS = frozenset(SCALAR_KINDS + LIST_KINDS)
INT_KINDS = frozenset(k for k in SCALAR_KINDS if "int" in k or "fixed" in k)


def _bad(name: str, value: Any, want: str, node_id: int | None) -> ValidationError:
    return ValidationError(f"attribute {name!r} must be {want}, got {value!r}", node_id=node_id)


def as_int(name: str, value: Any, node_id: int | None = None) -> int | None:
    """The integer rule: ``value`` of attribute ``name`` as an int, None when ``value`` is None.

    Raises:
        ValidationError: a bool, string, bytes or list value (names the attribute and node).
    """
    if value is None:
        return None
    cls = value.__class__
    if cls is int:
        return value
    if cls is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise _bad(name, value, "an integer", node_id)
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    raise _bad(name, value, "an integer", node_id)


def as_str(name: str, value: Any, node_id: int | None = None) -> str | None:
    """The string rule: ``value`` as a str (see module docstring), None when ``value`` is None.

    Raises:
        ValidationError: a bool, float, list, or bytes that are not UTF-8.
    """
    if value is None or value.__class__ is str:
        return value
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise _bad(name, value, "UTF-8 text", node_id) from None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise _bad(name, value, "a string", node_id)


def as_bytes(name: str, value: Any, node_id: int | None = None) -> bytes | None:
    """The bytes rule: ``bytes_val`` as is, ``string_val`` as UTF-8; None when ``value`` is None.

    Raises:
        ValidationError: any other value.
    """
    if value is None or value.__class__ is bytes:
        return value
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise _bad(name, value, "bytes", node_id)


def as_bool(name: str, value: Any, node_id: int | None = None) -> bool | None:
    """The bool rule: ``bool_val``, or an integer 0/1; None when ``value`` is None.

    Raises:
        ValidationError: any other value.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise _bad(name, value, "a bool", node_id)


_AttrBase = namedtuple("_AttrBase", ("name", "value", "kind", "doc_string"))


class Attr(_AttrBase):
    """One ``AttributeProto``, immutable: a name, a value and its wire kind.

    Attributes:
        name: attribute name, e.g. ``comm_size``.
        value: a Python scalar (int, float, bool, str, bytes) or a tuple of
            them (a list given is stored as a tuple).
        kind: the oneof field that carries it, e.g. ``int64_val`` or
            ``uint64_list``; kept so a file round-trips byte for byte.
            ``None`` means "no value set" (an attribute with only a name).
        doc_string: the optional documentation string.
    """

    __slots__ = ()

    def __new__(cls, name: str, value: Any, kind: str | None = "int64_val", doc_string: str = "") -> "Attr":
        if value.__class__ is list:
            value = tuple(value)
        if name.__class__ is not str:  # a standard field (a str subclass) is stored as the plain name
            name = str(name)
        return _AttrBase.__new__(cls, name, value, kind, doc_string)

    @staticmethod
    def infer(name: str, value: Any) -> "Attr":
        """An :class:`Attr` with the usual kind for a Python value.

        int -> int64_val (uint64_val from 2^63), float -> double_val, bool ->
        bool_val, str -> string_val, bytes -> bytes_val; lists and tuples
        likewise with ``_list``.

        Raises:
            ValidationError: for a value of another type or an empty list.
        """
        return Attr(name, value, infer_kind(name, value))


def infer_kind(name: str, value: Any) -> str:
    """The wire kind :meth:`Attr.infer` gives ``value`` (see there).

    Raises:
        ValidationError: for a value of another type or an empty list.
    """
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValidationError(f"attribute {name!r}: cannot infer the kind of an empty list; give kind=")
        return infer_kind(name, value[0]).replace("_val", "_list")
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


def attrs_with(
    attrs: tuple[Attr, ...], name: str, value: Any, kind: str | None = None, node_id: int | None = None
) -> tuple[Attr, ...]:
    """``attrs`` with attribute ``name`` set to ``value`` (replaced in place, or appended).

    ``kind`` defaults to the existing attribute's kind when it holds an
    integer and ``value`` is one, else to :func:`infer_kind`.

    Raises:
        ValidationError: for an unknown ``kind`` or a value whose kind cannot be inferred.
    """
    if kind is not None and kind not in ATTR_KINDS:
        raise ValidationError(f"attribute {name!r}: unknown kind {kind!r}", node_id=node_id)
    for i, a in enumerate(attrs):
        if a.name == name:
            if kind is None:
                keep = a.kind in INT_KINDS and isinstance(value, int) and not isinstance(value, bool)
                kind = a.kind if keep else infer_kind(name, value)
            return attrs[:i] + (Attr(name, value, kind, a.doc_string),) + attrs[i + 1 :]
    return attrs + (Attr(name, value, kind or infer_kind(name, value)),)


# ----------------------------------------------------------------------------- standard fields
#: node reader name -> the getter of one key through it (see :meth:`_Field.node_property`)
_NODE_GETTERS: dict[str, Callable[[str], Callable[[Any], Any]]] = {
    "int_attr": lambda key: lambda node: node.int_attr(key),
    "str_attr": lambda key: lambda node: node.str_attr(key),
    "bool_attr": lambda key: lambda node: node.bool_attr(key),
}

#: each property made by :meth:`_Field.node_property` -> its field (a node view makes its own getters from it)
FIELD_OF_PROPERTY: dict[property, "_Field"] = {}


class _Field(str):
    """A standard attribute: its key (this ``str``, usable wherever a name is) and its value rule.

    One implementation for every value type, parameterised by three class attributes that a subclass sets:
    ``rule`` (:func:`as_int`, :func:`as_str` or :func:`as_bool`), ``node_reader`` (the method of
    :class:`~tracekit.model.Node` and :class:`~tracekit.model.NodeDraft` that applies the rule, a Node view
    answering it from its columns) and ``column_reader`` (the method of :class:`tracekit.model.graph.NodeColumns`
    that applies it to a rank's columns, vectorized).
    """

    __slots__ = ()
    rule: ClassVar[Callable[[str, Any, int | None], Any]]
    node_reader: ClassVar[str]
    column_reader: ClassVar[str]

    def of(self, node: Any) -> Any:
        """The value on one node (anything with ``get_attr`` and ``id``) by the field's rule, None when absent.

        Raises:
            ValidationError: the value breaks the rule (names the attribute and node).
        """
        return type(self).rule(self, node.get_attr(self), node.id)

    def node_property(self, doc: str) -> property:
        """A read-only property giving this field of its node by the node's own reader (``node.int_attr(key)``).

        ``doc`` becomes the property's docstring.  The getter is a closure over the plain ``str`` key: a Python
        frame, which CPython 3.11+ runs faster than :func:`operator.methodcaller`, and a plain key keeps the
        node view's dict lookups on CPython's exact-``str`` fast path (measured: about a quarter less per read
        than with the field itself as the key).
        """
        prop = property(_NODE_GETTERS[self.node_reader](str(self)), doc=doc)
        FIELD_OF_PROPERTY[prop] = self
        return prop

    def column(self, cols: Any, *args: Any) -> tuple[Any, Any]:
        """``(present bool[N], values[N])`` of a rank's columns by the field's rule (vectorized).

        ``values`` is int64[N] for an integer field (``args``: the value where absent, default 0), bool[N]
        for a bool field (False where absent), a list of str or None for a string field.

        Raises:
            ValidationError: a value breaks the rule (names the attribute and node).
        """
        return getattr(cols, self.column_reader)(self, *args)

    def raw(self, cols: Any) -> tuple[Any, list[Any]]:
        """The values as stored: ``(present bool[N], values list[N])`` of a rank's columns (None where absent)."""
        return cols.attr(self)

    def present(self, cols: Any) -> Any:
        """bool[N]: which nodes of a rank's columns carry the attribute."""
        return cols.attr(self)[0]


class IntField(_Field):
    """A standard attribute read by the integer rule (:func:`as_int`)."""

    __slots__ = ()
    rule = staticmethod(as_int)
    node_reader = "int_attr"
    column_reader = "attr_int"

    def present(self, cols: Any) -> Any:
        """bool[N]: which nodes of a rank's columns carry the attribute (numeric fast path when it applies)."""
        return self.column_or(cols, absent=0, bad=0)[0]

    def column_or(self, cols: Any, absent: int, bad: int) -> tuple[Any, Any, Any]:
        """Lenient :meth:`column` for checks that report bad values instead of raising.

        Returns:
            ``(present bool[N], values int64[N], ok bool[N])``: ``absent`` where the attribute is missing,
            ``bad`` (and ``ok`` False) where the value breaks the integer rule.
        """
        import numpy as np

        try:
            present, values = cols.attr_int(self, absent)
            return present, values, np.ones(len(values), dtype=bool)
        except ValidationError:
            present, raw = cols.attr(self)
        values = np.full(len(raw), absent, dtype=np.int64)
        ok = np.ones(len(raw), dtype=bool)
        for i in np.flatnonzero(present).tolist():
            try:
                values[i] = as_int(self, raw[i])
            except (ValidationError, OverflowError):
                values[i], ok[i] = bad, False
        return present, values, ok


class StrField(_Field):
    """A standard attribute read by the string rule (:func:`as_str`)."""

    __slots__ = ()
    rule = staticmethod(as_str)
    node_reader = "str_attr"
    column_reader = "attr_str"


class BoolField(_Field):
    """A standard attribute read by the bool rule (:func:`as_bool`)."""

    __slots__ = ()
    rule = staticmethod(as_bool)
    node_reader = "bool_attr"
    column_reader = "attr_bool"


# Chakra's standard attributes (docs/design.md section 3; the names Chakra's feeder and ASTRA-sim read) and the
# converter extras tracekit reads back.  Units: COMM_SIZE and TENSOR_SIZE in bytes, NUM_OPS in FLOPs in traces
# tracekit writes (Chakra leaves the unit to the writer).
COMM_TYPE = IntField("comm_type")  #: CollectiveType wire number of a COMM_COLL node
COMM_SIZE = IntField("comm_size")  #: bytes communicated
COMM_SRC = IntField("comm_src")  #: sending rank of a send/recv
COMM_DST = IntField("comm_dst")  #: receiving rank of a send/recv
COMM_TAG = IntField("comm_tag")  #: matching tag of a send/recv
COMM_PRIORITY = IntField("comm_priority")  #: collective priority
PG_NAME = StrField("pg_name")  #: process group of a collective (absent: the world group)
IS_CPU_OP = BoolField("is_cpu_op")  #: host-side node (False: a device kernel)
NUM_OPS = IntField("num_ops")  #: floating-point operations (FLOPs)
TENSOR_SIZE = IntField("tensor_size")  #: bytes moved to and from memory
STREAM = IntField("stream")  #: device stream of a kernel
TID = IntField("tid")  #: host thread id (PyTorch ET and Kineto converters)
