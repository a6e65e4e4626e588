"""What every transform shares: the :class:`Transform` base, node copies, parameter checks and provenance.

A transform is a frozen dataclass whose :meth:`Transform.apply` maps a
:class:`~tracekit.sets.traceset.TraceSet` to a new one without touching its input
(nodes that change are copied; untouched traces are shared).  ``describe()``
returns a JSON-ready dict (the transform's name and parameters) that
:func:`stamp_provenance` appends to each output trace's global metadata
attribute ``tracekit_provenance`` (a JSON string)::

    {"input": "traces/job", "steps": [{"transform": "ScaleCompute", "factor": 0.5}, ...]}

so a trace written by a pipeline says which transforms made it from which input.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from typing import TYPE_CHECKING, Any, Callable, Iterable

from tracekit.errors import ConfigError, TransformError
from tracekit.model import INT_KINDS, Attr, ExecutionTrace, Metadata, Node

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.sets.traceset import TraceSet

PROVENANCE_ATTR = "tracekit_provenance"


class Transform:
    """Base of all transforms (subclasses are frozen dataclasses).

    Subclasses implement :meth:`apply`; :meth:`describe` defaults to the
    class name plus the dataclass fields.
    """

    def apply(self, traceset: "TraceSet") -> "TraceSet":  # pragma: no cover - abstract
        """The transformed trace set (``traceset`` itself is left unchanged).

        Raises:
            TransformError, ConfigError: as documented by each subclass.
        """
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """``{"transform": <class name>, <field>: <value>, ...}`` (JSON-ready)."""
        out: dict[str, Any] = {"transform": type(self).__name__}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            out[f.name] = _jsonable(getattr(self, f.name))
        return out

    def __call__(self, traceset: "TraceSet") -> "TraceSet":
        return self.apply(traceset)


def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(_jsonable(k)): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return repr(value)


# ----------------------------------------------------------------------------- parameter checks
def check_factor(what: str, value: Any) -> float:
    """``value`` as a float if it is a finite number > 0.

    Raises:
        ConfigError: not a number, not finite, or <= 0 (names ``what``).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{what} must be a finite number > 0, got {value!r}")
    return float(value)


def check_degree(what: str, value: Any) -> int:
    """``value`` if it is an int >= 1.

    Raises:
        ConfigError: otherwise (names ``what``).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{what} must be an integer >= 1, got {value!r}")
    return value


# ----------------------------------------------------------------------------- node copies
def copy_node(node: Node) -> Node:
    """``node`` itself: nodes are immutable values (kept for callers; edits use ``node.replace``)."""
    return node


#: ``(name, value, kind)``: one attribute edit for :func:`edited_node` (kind None: the rule of ``Node.with_attr``)
AttrEdit = tuple[str, Any, "str | None"]


def edited_node(
    node: Node,
    edits: Iterable[AttrEdit] = (),
    *,
    id: int | None = None,
    data_deps: list[int] | None = None,
    ctrl_deps: list[int] | None = None,
    duration_ns: int | None = None,
) -> Node:
    """A new node: ``node`` with a new ``id``, dependencies, duration (None = unchanged) and attribute ``edits``.

    The result equals ``node.replace(...)`` followed by ``.with_attr(name, value, kind)`` per edit (an existing
    attribute is replaced where it stands, a new one appended; kind None keeps an integer kind for an integer value,
    else infers it), built in one copy instead of one per edit: rewrites stamp hundreds of thousands of nodes.
    ``node`` is not changed; the lists given are taken as they are (pass fresh ones).

    Raises:
        ValidationError: a value whose kind cannot be inferred (an empty list without a kind).
    """
    attrs = list(node.attrs)
    for name, value, kind in edits:
        for i, a in enumerate(attrs):
            if a.name == name:
                if kind is None:
                    keep = a.kind in INT_KINDS and isinstance(value, int) and not isinstance(value, bool)
                    kind = a.kind if keep else Attr.infer(name, value).kind
                attrs[i] = Attr(name, value, kind, a.doc_string)
                break
        else:
            attrs.append(Attr(name, value, kind) if kind is not None else Attr.infer(name, value))
    return Node(
        node.id if id is None else id,
        node.name,
        node.type,
        list(node.data_deps) if data_deps is None else data_deps,
        list(node.ctrl_deps) if ctrl_deps is None else ctrl_deps,
        node.start_time_ns,
        node.duration_ns if duration_ns is None else duration_ns,
        node.inputs,
        node.outputs,
        attrs,
        node.storage,
    )


def copy_metadata(md: Metadata) -> Metadata:
    """``md`` itself: metadata is an immutable value (edits use ``md.with_attr``)."""
    return md


def with_metadata(trace: ExecutionTrace, metadata: Metadata) -> ExecutionTrace:
    """``trace`` with other metadata, sharing its (possibly still encoded) nodes."""
    return trace.with_metadata(metadata)


def map_nodes(trace: ExecutionTrace, fn: Callable[[Node], Node | None]) -> ExecutionTrace:
    """A trace whose nodes are ``fn(node)`` (None keeps the node as is; return a copy to change it).

    The input trace is returned unchanged (same object) when ``fn`` changed nothing.

    Raises:
        TransformError: raised by ``fn``, with the node id filled in.
    """
    out: list[Node] = []
    changed = False
    for node in trace.nodes:
        try:
            new = fn(node)
        except TransformError as exc:
            raise exc.with_context(node_id=node.id)
        if new is None:
            out.append(node)
        else:
            out.append(new)
            changed = True
    return trace.with_nodes(out) if changed else trace


def map_traces(traceset: "TraceSet", fn: Callable[[ExecutionTrace], ExecutionTrace]) -> "TraceSet":
    """A trace set with ``fn`` applied to every rank's trace (process groups kept).

    Raises:
        TransformError: raised by ``fn``, with the rank and path filled in.
    """
    out = {}
    for rank, trace in traceset.items():
        try:
            out[rank] = fn(trace)
        except TransformError as exc:
            raise exc.with_context(rank=rank, path=trace.path)
    return traceset.with_traces(out, traceset.process_groups)


def scale_int(value: int, factor: float) -> int:
    """``round(value * factor)`` (half to even), at least 1 when ``value`` > 0 and the product is >= 0.5.

    Raises:
        TransformError: the product is not finite or does not fit 63 bits.
    """
    product = value * factor
    if not math.isfinite(product) or abs(product) >= 2**63:
        raise TransformError(f"{value:,} x {factor:g} = {product:g} is out of range (more than 2^63)")
    return int(round(product))


# ----------------------------------------------------------------------------- provenance
def provenance_of(trace: ExecutionTrace) -> dict[str, Any] | None:
    """The ``tracekit_provenance`` record of ``trace`` as a dict, or None.

    Raises:
        TransformError: the attribute is not a JSON object.
    """
    raw = trace.metadata.get_attr(PROVENANCE_ATTR)
    if raw is None:
        return None
    try:
        record = json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        record = None
    if not isinstance(record, dict):
        raise TransformError(
            f"metadata attribute {PROVENANCE_ATTR!r} is not a JSON object: {str(raw)[:80]!r}",
            rank=trace.rank,
            path=trace.path,
        )
    return record


def stamp_provenance(traceset: "TraceSet", steps: Iterable[dict[str, Any]], source: str | None) -> "TraceSet":
    """Record ``steps`` (``describe()`` dicts) applied to ``source`` in every trace's metadata.

    An earlier record in the trace (a trace that was already transformed) is
    kept under ``"previous"``.

    Raises:
        TransformError: an earlier ``tracekit_provenance`` record is not a JSON object.
    """
    steps = list(steps)
    out = {}
    for rank, trace in traceset.items():
        record: dict[str, Any] = {"input": source, "steps": steps}
        before = provenance_of(trace)
        if before is not None and before.get("steps") != steps:
            record["previous"] = before
        md = trace.metadata.with_attr(PROVENANCE_ATTR, json.dumps(record, sort_keys=True), "string_val")
        out[rank] = with_metadata(trace, md)
    return traceset.with_traces(out, traceset.process_groups)
