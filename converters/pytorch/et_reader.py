"""Reading PyTorch Execution Trace (ET) JSON into normalized host operators.

The ExecutionTraceObserver has written two node layouts:

* schema ``1.0.1`` ("flat"): each node carries ``rf_id``, ``parent``, ``tid``
  ... at top level and its operator I/O as parallel lists ``inputs`` /
  ``input_shapes`` / ``input_types`` (same for outputs);
* schemas ``1.0.2-chakra.0.0.4`` through ``1.1.1-chakra.0.0.4`` and newer
  ``<base>-chakra.1.x.y`` ("nested"): ``ctrl_deps`` holds the parent id,
  ``inputs``/``outputs`` are objects ``{values, shapes, types[, strides]}`` and
  the per-node fields live in an ``attrs`` list of ``{name, type, value}``.

Both become :class:`EtOp` records in an :class:`EtTrace`.  An unknown schema
string, or a file whose nodes do not have the layout its schema promises, is a
:class:`~tracekit.errors.ConversionError` naming the version and the supported
list.  The field meanings follow PyTorch's ``execution_trace.cpp``
(``torch/csrc/profiler/standalone/execution_trace_observer.cpp``).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from tracekit.errors import ConversionError, TraceFormatError

from tracekit.converters.pytorch.jsonload import load_json

FLAT_SCHEMAS = ("1.0.1",)
NESTED_SCHEMAS = (
    "1.0.2-chakra.0.0.4",
    "1.0.3-chakra.0.0.4",
    "1.0.4-chakra.0.0.4",
    "1.1.0-chakra.0.0.4",
    "1.1.1-chakra.0.0.4",
)
SUPPORTED_SCHEMAS_TEXT = ", ".join(FLAT_SCHEMAS + NESTED_SCHEMAS) + ", <1.x.y>-chakra.1.x.y"
_NEWER = re.compile(r"^1\.\d+\.\d+-chakra\.1\.\d+\.\d+$")

# Per-node fields every layout provides (flat: top level; nested: attrs).
_STANDARD = ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid", "op_schema")


@dataclass(frozen=True, slots=True)
class EtIO:
    """Operator inputs or outputs: parallel lists of values, shapes and types.

    A tensor value is ``[tensor_id, storage_id, offset, numel, elem_bytes, device]``
    (``offset`` the storage offset and ``numel`` the size, both in elements;
    ``elem_bytes`` bytes per element; as PyTorch's
    ``execution_trace_observer.cpp`` writes them); lists of tensors nest.  Types are strings such as ``Tensor(float)`` or
    ``GenericList[Tensor(float)]``.
    """

    values: list = field(default_factory=list)
    shapes: list = field(default_factory=list)
    types: list = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class EtOp:
    """One ET node (a host operator or record function).

    Attributes:
        id: node id (unique in the file).
        name: operator name (``aten::mm``, ``## forward ##``, ``nccl:all_reduce``).
        parent: id of the enclosing node (call-stack parent); equals ``id`` or 0
            for a root.
        rf_id: RecordFunction id (PyTorch assigns them in start order across
            threads); joins to Kineto ``Record function id``.
        tid: ET thread index (1 = first thread seen, not an OS tid).
        fw_parent, seq_id, scope, fw_tid: autograd bookkeeping as written.
        op_schema: the operator's schema string ("" when none).
        inputs, outputs: operator I/O.
        extra: other attributes (e.g. ``collective_name`` of record_param_comms).
    """

    id: int
    name: str
    parent: int
    rf_id: int
    tid: int
    fw_parent: int = 0
    seq_id: int = -1
    scope: int = 0
    fw_tid: int = 0
    op_schema: str = ""
    inputs: EtIO = EtIO()
    outputs: EtIO = EtIO()
    extra: dict = field(default_factory=dict)

    @property
    def is_root(self) -> bool:
        """True for a bookkeeping root: its parent is 0 or itself."""
        return self.parent in (0, self.id)


@dataclass(frozen=True)
class EtTrace:
    """One ET file: its schema and operators sorted by ``rf_id`` then ``id``.

    Attributes:
        path: source file.
        schema: the schema string as written.
        pid: process id recorded by the observer.
        ops: all nodes (roots included), sorted by (rf_id, id).
        by_id: id -> op.
        capture_time: the file's ``time`` field as written, or None.
    """

    path: str
    schema: str
    pid: int | None
    ops: tuple[EtOp, ...]
    by_id: dict[int, EtOp]
    capture_time: str | None = None  # the ``time`` field ("YYYY-MM-DD HH:MM:SS", local time of the capture)

    def children(self) -> dict[int, list[EtOp]]:
        """parent id -> child ops in (rf_id, id) order (roots excluded as children of themselves)."""
        kids: dict[int, list[EtOp]] = {}
        for op in self.ops:
            if not op.is_root:
                kids.setdefault(op.parent, []).append(op)
        return kids


def schema_layout(schema: Any, *, path: str | None = None) -> str:
    """``"flat"`` or ``"nested"`` for a schema string.

    Raises:
        ConversionError: unknown schema, naming it and the supported list.
    """
    if schema in FLAT_SCHEMAS:
        return "flat"
    if schema in NESTED_SCHEMAS or (isinstance(schema, str) and _NEWER.match(schema)):
        return "nested"
    raise ConversionError(f"unsupported ET schema {schema!r}; supported: {SUPPORTED_SCHEMAS_TEXT}", path=path)


def _int(value: Any, what: str, node_id: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConversionError(
            f"{what} must be an integer, got {value!r}",
            path=path,
            node_id=node_id if isinstance(node_id, int) else None,
        )
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ConversionError(
                f"{what} must be an integer, got {value!r}",
                path=path,
                node_id=node_id if isinstance(node_id, int) else None,
            )
        value = int(value)
    return value


def _flat_op(raw: dict, path: str) -> EtOp:
    nid = raw.get("id")
    return EtOp(
        id=_int(nid, "node id", None, path),
        name=str(raw.get("name", "")),
        parent=_int(raw.get("parent", 0), "parent", nid, path),
        rf_id=_int(raw.get("rf_id", 0), "rf_id", nid, path),
        tid=_int(raw.get("tid", 0), "tid", nid, path),
        fw_parent=_int(raw.get("fw_parent", 0), "fw_parent", nid, path),
        seq_id=_int(raw.get("seq_id", -1), "seq_id", nid, path),
        scope=_int(raw.get("scope", 0), "scope", nid, path),
        fw_tid=_int(raw.get("fw_tid", 0), "fw_tid", nid, path),
        op_schema=str(raw.get("op_schema", "") or ""),
        inputs=_io(
            {"values": raw.get("inputs"), "shapes": raw.get("input_shapes"), "types": raw.get("input_types")},
            "inputs",
            nid,
            path,
        ),
        outputs=_io(
            {"values": raw.get("outputs"), "shapes": raw.get("output_shapes"), "types": raw.get("output_types")},
            "outputs",
            nid,
            path,
        ),
    )


def _io(obj: Any, what: str, nid: Any, path: str) -> EtIO:
    if obj is None:
        return EtIO()
    if not isinstance(obj, dict):
        raise ConversionError(
            f"{what} must be an object with values/shapes/types, got {type(obj).__name__}",
            path=path,
            node_id=nid if isinstance(nid, int) else None,
        )
    parts = [obj.get(k) or [] for k in ("values", "shapes", "types")]
    for key, part in zip(("values", "shapes", "types"), parts):
        if not isinstance(part, list):
            raise ConversionError(
                f"{what}.{key} must be a list, got {part!r:.80}",
                path=path,
                node_id=nid if isinstance(nid, int) else None,
            )
    return EtIO(*parts)


def _nested_op(raw: dict, path: str) -> EtOp:
    nid = raw.get("id")
    node_id = _int(nid, "node id", None, path)
    attrs: dict[str, Any] = {}
    raw_attrs = raw.get("attrs") or ()
    if not isinstance(raw_attrs, list):
        raise ConversionError(
            f"attrs must be a list of {{name, type, value}} objects, got {raw_attrs!r:.80}", path=path, node_id=node_id
        )
    for a in raw_attrs:
        if isinstance(a, dict) and "name" in a:
            if not isinstance(a["name"], str):
                raise ConversionError(
                    f"attribute name must be a string, got {a['name']!r:.80}", path=path, node_id=node_id
                )
            attrs[a["name"]] = a.get("value")
    parent = raw.get("ctrl_deps", 0)
    if isinstance(parent, list):  # some writers emit a one-element list
        parent = parent[0] if parent else 0
    std = {k: attrs.pop(k, None) for k in _STANDARD}
    return EtOp(
        id=node_id,
        name=str(raw.get("name", "")),
        parent=_int(parent, "ctrl_deps (parent id)", node_id, path),
        rf_id=_int(std["rf_id"] if std["rf_id"] is not None else 0, "rf_id", node_id, path),
        tid=_int(std["tid"] if std["tid"] is not None else 0, "tid", node_id, path),
        fw_parent=_int(std["fw_parent"] or 0, "fw_parent", node_id, path),
        seq_id=_int(std["seq_id"] if std["seq_id"] is not None else -1, "seq_id", node_id, path),
        scope=_int(std["scope"] or 0, "scope", node_id, path),
        fw_tid=_int(std["fw_tid"] or 0, "fw_tid", node_id, path),
        op_schema=str(std["op_schema"] or ""),
        inputs=_io(raw.get("inputs"), "inputs", node_id, path),
        outputs=_io(raw.get("outputs"), "outputs", node_id, path),
        extra=attrs,
    )


def parse_et(doc: Any, *, path: str | os.PathLike[str]) -> EtTrace:
    """Normalize a parsed ET JSON document.

    Raises:
        ConversionError: not an ET (no ``schema``/``nodes``), unsupported
            schema, node layout not matching the schema, a node without an id,
            a non-integer id/parent/rf_id/tid/seq field, ``inputs``/``outputs``
            that are not lists of values/shapes/types, ``attrs`` not a list or
            with a non-string name, duplicate node ids, a parent id that names
            no node, no operators at all, or a parent tree that is not a tree
            (:func:`check_parent_tree`); each names the file and node id.
    """
    spath = os.fspath(path)
    if not isinstance(doc, dict) or "nodes" not in doc:
        raise ConversionError("not a PyTorch Execution Trace: no top-level 'nodes' list", path=spath)
    schema = doc.get("schema")
    layout = schema_layout(schema, path=spath)
    raw_nodes = doc["nodes"]
    if not isinstance(raw_nodes, list):
        raise ConversionError("'nodes' must be a list", path=spath)
    make = _flat_op if layout == "flat" else _nested_op
    ops: list[EtOp] = []
    for raw in raw_nodes:
        if not isinstance(raw, dict) or "id" not in raw:
            raise ConversionError(f"ET node without an id: {str(raw)[:80]}", path=spath)
        has_attrs = "attrs" in raw
        if (layout == "nested") != has_attrs or (layout == "flat" and "parent" not in raw):
            want = "nested (attrs list, ctrl_deps)" if layout == "nested" else "flat (top-level rf_id/parent)"
            raise ConversionError(
                f"schema {schema!r} promises the {want} node layout but node "
                f"{raw.get('id')} does not have it; supported: {SUPPORTED_SCHEMAS_TEXT}",
                path=spath,
            )
        ops.append(make(raw, spath))
    by_id: dict[int, EtOp] = {}
    for op in ops:
        if not 0 <= op.id < 2**64:  # a Chakra node id is a uint64 (et_def.proto); -3 was a traceback
            raise ConversionError(f"node id {op.id:,} of {op.name!r} is not a Chakra node id (0 to 2^64-1)", path=spath)
        if op.id in by_id:
            raise ConversionError(f"duplicate ET node id {op.id}", path=spath, node_id=op.id)
        by_id[op.id] = op
    for op in ops:
        if not op.is_root and op.parent not in by_id:
            raise ConversionError(
                f"parent id {op.parent} of {op.name!r} names no node in the file", path=spath, node_id=op.id
            )
    if len(ops) == 0:
        raise ConversionError("ET has no nodes", path=spath)
    check_parent_tree(ops, by_id, path=spath)
    ops.sort(key=lambda o: (o.rf_id, o.id))
    pid = doc.get("pid")
    when = doc.get("time")
    return EtTrace(
        path=spath,
        schema=str(schema),
        pid=pid if isinstance(pid, int) else None,
        ops=tuple(ops),
        by_id=by_id,
        capture_time=when if isinstance(when, str) else None,
    )


def check_parent_tree(ops: list[EtOp], by_id: dict[int, EtOp], *, path: str) -> None:
    """The call-stack parents must form a tree: only bookkeeping roots name themselves, and no parent chain loops.

    A self-parented operator would be taken for a root and dropped from the
    conversion; a parent cycle would become a control-dependency cycle.

    Raises:
        ConversionError: naming how many operators name themselves as parent
            (with the first ids), or the ids along the first parent cycle.
    """
    selfish = [op for op in ops if op.parent == op.id and not op.name.startswith("[pytorch|profiler|execution_")]
    if selfish:
        shown = ", ".join(f"{op.id} ({op.name[:40]!r})" for op in selfish[:5]) + (" ..." if len(selfish) > 5 else "")
        raise ConversionError(
            f"{len(selfish)} of {len(ops)} operators name themselves as their parent: {shown}; only "
            f"the [pytorch|profiler|execution_trace|process] root may, so they would be dropped "
            f"as roots (the ET is corrupt)",
            path=path,
            node_id=selfish[0].id,
        )
    state: dict[int, int] = {}  # 1: on the chain being walked, 2: leads to a root
    for op in ops:
        chain: list[int] = []
        cur = op
        while not cur.is_root and state.get(cur.id) is None:
            state[cur.id] = 1
            chain.append(cur.id)
            cur = by_id[cur.parent]
        if state.get(cur.id) == 1:  # walked back into this chain: a cycle
            loop = chain[chain.index(cur.id) :] + [cur.id]
            shown = " -> ".join(map(str, loop[:12])) + (" ..." if len(loop) > 12 else "")
            raise ConversionError(
                f"parent cycle: {shown} (each id's parent is the next); the call-stack parents "
                f"must form a tree, so these {len(loop) - 1} operators have no root (the ET is "
                f"corrupt)",
                path=path,
                node_id=loop[0],
            )
        for nid in chain:
            state[nid] = 2


def read_et(path: str | os.PathLike[str]) -> EtTrace:
    """Read an ET JSON file (``.json``, ``.json.gz`` or ``.tar.gz``).

    Raises:
        TraceFormatError: invalid JSON or compression (see :func:`.jsonload.load_json`).
        ConversionError: see :func:`parse_et`.
        OSError: the file cannot be opened.
    """
    return parse_et(load_json(path), path=path)


__all__ = [
    "EtIO",
    "EtOp",
    "EtTrace",
    "read_et",
    "parse_et",
    "schema_layout",
    "SUPPORTED_SCHEMAS_TEXT",
    "TraceFormatError",
]
