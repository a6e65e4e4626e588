"""The one mutable form of a node: :class:`NodeDraft`, which converters assemble edge by edge and then build.

:mod:`tracekit.model` re-exports it; the immutable :class:`~tracekit.model.node.Node` and the typed accessors both share
(:class:`~tracekit.model.node.TypedAttrs`) are in :mod:`tracekit.model.node`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracekit.model.attrs import Attr, as_bool, as_int, as_str, attrs_with
from tracekit.model.node import IOInfo, Node, NodeType, TypedAttrs


@dataclass(slots=True)
class NodeDraft(TypedAttrs):
    """A node under construction, for converters that assemble a graph edge by edge (the one mutable form).

    Fields as :class:`Node` (lists where :class:`Node` has tuples).  A draft
    never enters a trace: :meth:`build` gives the immutable :class:`Node`, and
    :class:`ExecutionTrace` accepts only those.  Typed accessors follow the
    same rules as :class:`Node` (:mod:`tracekit.model.attrs`).
    """

    id: int
    name: str = ""
    type: "NodeType | int" = NodeType.COMP_NODE
    data_deps: list[int] = field(default_factory=list)
    ctrl_deps: list[int] = field(default_factory=list)
    start_time_ns: int = 0
    duration_ns: int = 0
    inputs: IOInfo | None = None
    outputs: IOInfo | None = None
    attrs: list[Attr] = field(default_factory=list)
    storage: bytes | None = None

    @classmethod
    def from_node(cls, node: Node) -> "NodeDraft":
        """A draft with the fields of ``node``."""
        return cls(
            node.id,
            node.name,
            node.type,
            list(node.data_deps),
            list(node.ctrl_deps),
            node.start_time_ns,
            node.duration_ns,
            node.inputs,
            node.outputs,
            list(node.attrs),
            node.storage,
        )

    def build(self) -> Node:
        """The immutable :class:`Node` with this draft's fields."""
        return Node(
            self.id,
            self.name,
            self.type,
            self.data_deps,
            self.ctrl_deps,
            self.start_time_ns,
            self.duration_ns,
            self.inputs,
            self.outputs,
            self.attrs,
            self.storage,
        )

    def get_attr(self, name: str, default: Any = None) -> Any:
        """The value of the first attribute called ``name``, else ``default``."""
        for a in self.attrs:
            if a.name == name:
                return a.value
        return default

    def has_attr(self, name: str) -> bool:
        """True when the draft has an attribute called ``name``."""
        return any(a.name == name for a in self.attrs)

    def set_attr(self, name: str, value: Any, kind: str | None = None) -> None:
        """Set attribute ``name`` (kind rule of :meth:`Node.with_attr`).

        Raises:
            ValidationError: for an unknown ``kind``.
        """
        self.attrs = list(attrs_with(tuple(self.attrs), name, value, kind, self.id))

    def remove_attr(self, name: str) -> None:
        """Drop attribute ``name`` (nothing when absent)."""
        self.attrs = [a for a in self.attrs if a.name != name]

    def int_attr(self, name: str) -> int | None:
        """As :meth:`Node.int_attr`."""
        return as_int(name, self.get_attr(name), self.id)

    def str_attr(self, name: str) -> str | None:
        """As :meth:`Node.str_attr`."""
        return as_str(name, self.get_attr(name), self.id)

    def bool_attr(self, name: str) -> bool | None:
        """As :meth:`Node.bool_attr`."""
        return as_bool(name, self.get_attr(name), self.id)
