"""The JSON form of a trace: one valid JSON document, lossless both ways.

Layout::

    {"format": "tracekit.et.json", "format_version": 1, "rank": 0,
     "metadata": {"version": "0.0.4", "attrs": [...]},
     "nodes": [{"id": 1, "name": "...", "type": "COMP_NODE", "data_deps": [...], "ctrl_deps": [...],
                "start_time_ns": 0, "duration_ns": 1500,
                "inputs": {"values": "", "shapes": "", "types": ""},          (only when present)
                "storage_pb_hex": "0801...",    (STORAGE_NODE detail, serialized StorageInfo; when present)
                "attrs": [{"name": "comm_size", "kind": "int64_val", "value": 1048576}]}]}

Attribute kinds are kept, so ``.et -> .json -> .et`` reproduces the same bytes.
Non-finite floats are written as the strings ``"NaN"``, ``"Infinity"`` and
``"-Infinity"``; bytes values as base64 strings.  The reader also accepts
Chakra's feeder JSON (``{"workload_graph": [{"Id": .., "Name": .., "NodeType": ..,
"ctrlDeps": [..], "data_deps": [..], "runtime": µs, ...}]}``).  JSON is
encoded and decoded with orjson.
"""

from __future__ import annotations

import base64
import math
import os
from typing import Any

import orjson

from tracekit.wire.capture_hint import convert_hint, pytorch_kind
from tracekit.wire.codec import attr_to_pb
from tracekit.errors import TraceFormatError, ValidationError, malformed_input
from tracekit.model import (
    ATTR_KINDS,
    MAX_DURATION_NS,
    MAX_TIME_NS,
    NODE_FIELDS,
    Attr,
    ExecutionTrace,
    IOInfo,
    Metadata,
    Node,
    NodeType,
    time_range_error,
)

FORMAT = "tracekit.et.json"


def _PB_ATTR() -> Any:  # noqa: N802 - a message factory (tracekit._proto has no stubs: Any)
    from tracekit._proto import et_def_pb2

    return et_def_pb2.AttributeProto()


_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_FLOAT_KINDS = frozenset({"double_val", "float_val", "double_list", "float_list"})
_BYTES_KINDS = frozenset({"bytes_val", "bytes_list"})


def _float_out(v: float) -> Any:
    if math.isfinite(v):
        return v
    return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")


def _attr_out(a: Attr) -> dict[str, Any]:
    value = a.value
    if a.kind in _FLOAT_KINDS:
        value = [_float_out(v) for v in value] if isinstance(value, (list, tuple)) else _float_out(value)
    elif a.kind in _BYTES_KINDS:
        value = (
            [base64.b64encode(v).decode() for v in value]
            if isinstance(value, (list, tuple))
            else base64.b64encode(value).decode()
        )
    out: dict[str, Any] = {"name": a.name, "kind": a.kind, "value": value}
    if a.doc_string:
        out["doc_string"] = a.doc_string
    return out


def _node_out(n: Node) -> dict[str, Any]:
    t = n.type
    out: dict[str, Any] = {
        "id": n.id,
        "name": n.name,
        "type": t.name if isinstance(t, NodeType) else int(t),
        "data_deps": n.data_deps,
        "ctrl_deps": n.ctrl_deps,
        "start_time_ns": n.start_time_ns,
        "duration_ns": n.duration_ns,
    }
    if n.inputs is not None:
        out["inputs"] = {"values": n.inputs.values, "shapes": n.inputs.shapes, "types": n.inputs.types}
    if n.outputs is not None:
        out["outputs"] = {"values": n.outputs.values, "shapes": n.outputs.shapes, "types": n.outputs.types}
    out["attrs"] = [_attr_out(a) for a in n.attrs]
    if n.storage is not None:
        out["storage_pb_hex"] = n.storage.hex()  # serialized StorageInfo (chakra PR #216)
    return out


def _storage_in(value: Any, nid: int, path: str | None, rank: int | None) -> bytes | None:
    if value is None:
        return None
    try:
        return bytes.fromhex(value)
    except (TypeError, ValueError):
        raise TraceFormatError(
            f"storage_pb_hex must be a hex string, got {value!r}"[:200], path=path, rank=rank, node_id=nid
        ) from None


def dumps_trace(trace: ExecutionTrace) -> bytes:
    """The JSON document of ``trace`` (UTF-8 bytes, indented)."""
    doc = {
        "format": FORMAT,
        "format_version": 1,
        "rank": trace.rank,
        "metadata": {"version": trace.metadata.version, "attrs": [_attr_out(a) for a in trace.metadata.attrs]},
        "nodes": [_node_out(n) for n in trace.nodes],
    }
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


def _float_in(v: Any) -> float:
    """A float attribute value: a number, or one of the strings of non-finite floats (KeyError for others)."""
    return _NONFINITE[v] if isinstance(v, str) else float(v)


def _bytes_in(v: Any) -> bytes:
    """A bytes attribute value from its base64 text (binascii.Error, a ValueError, when it is not)."""
    return base64.b64decode(v, validate=True)


def _attr_in(d: Any, where: str, path: str) -> Attr:
    if not isinstance(d, dict) or "name" not in d:
        raise TraceFormatError(f"{where}: attribute must be an object with a name, got {d!r}"[:300], path=path)
    kind = d.get("kind")
    if kind is not None and (not isinstance(kind, str) or kind not in ATTR_KINDS):
        raise TraceFormatError(f"{where}: attribute {d['name']!r} has unknown kind {kind!r}"[:300], path=path)
    if not isinstance(d["name"], str) or not isinstance(d.get("doc_string", ""), str):
        raise TraceFormatError(
            f"{where}: attribute name and doc_string must be strings, got {d['name']!r}"[:300], path=path
        )
    value = d.get("value")
    try:
        if kind in _FLOAT_KINDS:
            value = [_float_in(v) for v in value] if isinstance(value, list) else _float_in(value)
        elif kind in _BYTES_KINDS:
            value = [_bytes_in(v) for v in value] if isinstance(value, list) else _bytes_in(value)
    except (TypeError, ValueError, KeyError):  # binascii.Error is a ValueError
        text = "base64 text" if kind in _BYTES_KINDS else 'a number (or "NaN", "Infinity", "-Infinity")'
        raise TraceFormatError(
            f"{where}: attribute {d['name']!r} of kind {kind}: value must be {text}, got {value!r}"[:300], path=path
        ) from None
    attr = Attr(d["name"], value, kind, d.get("doc_string", ""))
    try:  # the value must fit its wire kind (type and range), as a .et file would hold it
        attr_to_pb(attr, _PB_ATTR())
    except (TypeError, ValueError, AttributeError) as exc:
        raise TraceFormatError(
            f"{where}: attribute {d['name']!r}: value {value!r:.80} does not fit kind {kind}: {exc}"[:300], path=path
        ) from None
    return attr


def _io_in(d: Any, node_id: int, path: str, rank: int | None) -> IOInfo | None:
    if d is None:
        return None
    if (
        not isinstance(d, dict)
        or set(d) - {"values", "shapes", "types"}
        or not all(isinstance(v, str) for v in d.values())
    ):
        raise TraceFormatError(
            f"inputs/outputs must be an object of strings values/shapes/types, got {d!r}"[:200],
            path=path,
            rank=rank,
            node_id=node_id,
        )
    return IOInfo(d.get("values", ""), d.get("shapes", ""), d.get("types", ""))


def _node_type(value: Any, where: str, path: str) -> NodeType | int:
    if isinstance(value, str):
        try:
            return NodeType[value]
        except KeyError:
            raise TraceFormatError(f"{where}: unknown node type {value!r}", path=path) from None
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value < 2**15:  # unknown types are kept for validation to report, but must fit its columns
            raise TraceFormatError(f"{where}: node type {value} is out of range (0 to 32767)", path=path)
        try:
            return NodeType(value)
        except ValueError:
            return value
    raise TraceFormatError(f"{where}: node type must be a name or number, got {value!r}", path=path)


_U64_MAX = 2**64 - 1
# the Node fields, ``storage`` written as the hex of its serialized StorageInfo
_NODE_KEYS = frozenset(NODE_FIELDS) - {"storage"} | {"storage_pb_hex"}
_DOC_KEYS = frozenset({"format", "format_version", "rank", "metadata", "nodes"})


def _u64(value: Any, key: str, node_id: Any, path: str, rank: int | None) -> int:
    """An unsigned 64-bit integer field (ids, times): ints only, no floats, strings or bools."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _U64_MAX:
        raise TraceFormatError(
            f"{key} must be an integer from 0 to 2^64-1, got {value!r}"[:200],
            path=path,
            rank=rank,
            node_id=node_id if isinstance(node_id, int) else None,
        )
    return value


def _time(value: Any, key: str, limit: int, node_id: Any, path: str, rank: int | None) -> int:
    """A time field in nanoseconds: an integer from 0 to ``limit`` (see tracekit.model.MAX_DURATION_NS)."""
    time_ns = _u64(value, key, node_id, path, rank)
    problem = time_range_error(key, time_ns, limit)
    if problem:
        raise TraceFormatError(problem, path=path, rank=rank, node_id=node_id)
    return time_ns


def _int_list(value: Any, key: str, node_id: Any, path: str, rank: int | None = None) -> list[int]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TraceFormatError(
            f"{key} must be a list of node ids, got {value!r}"[:200],
            path=path,
            rank=rank,
            node_id=node_id if isinstance(node_id, int) else None,
        )
    return [_u64(v, key, node_id, path, rank) for v in value]


def _typed(
    container: dict[str, Any], key: str, kind: type, default: Any, where: str, path: str, rank: int | None
) -> Any:
    value = container.get(key, default)
    if value is None or not isinstance(value, kind):
        raise TraceFormatError(f"{where}: {key} must be a {kind.__name__}, got {value!r}"[:200], path=path, rank=rank)
    return value


def loads_trace(data: bytes, *, path: str = "<json>", rank: int | None = None) -> ExecutionTrace:
    """Parse a tracekit JSON document or a Chakra feeder JSON document.

    The tracekit form is checked strictly (it is lossless, so nothing may be
    coerced): unknown keys, integers given as floats or strings, ids or
    times outside 0..2^64-1, and a ``rank`` that is neither null nor a
    non-negative integer are errors.

    Raises:
        TraceFormatError: invalid JSON (with line and column) or a document
            of neither form, naming the node and field at fault.
    """
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(f"invalid JSON: {exc}", path=path, rank=rank) from None
    if isinstance(doc, dict) and "workload_graph" in doc:
        return _from_feeder(doc, path, rank)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        kind = pytorch_kind(doc)
        if kind is not None:  # a PyTorch capture given where a Chakra trace belongs: say how to convert it
            raise TraceFormatError(convert_hint(kind, path, doc), path=path)  # no rank: not a trace
        raise TraceFormatError(
            f'not a tracekit JSON trace (expected "format": "{FORMAT}") nor a Chakra feeder JSON ("workload_graph")',
            path=path,
            rank=rank,
        )
    if doc.get("format_version", 1) != 1:
        raise TraceFormatError(
            f"unsupported format_version {doc.get('format_version')!r} (this tracekit reads 1)", path=path, rank=rank
        )
    unknown = sorted(set(doc) - _DOC_KEYS)
    if unknown:
        raise TraceFormatError(f"unknown top-level keys {unknown}", path=path, rank=rank)
    md = _typed(doc, "metadata", dict, {}, "document", path, rank)
    metadata = Metadata(
        str(md.get("version", "")),
        [_attr_in(a, "metadata", path) for a in _typed(md, "attrs", list, [], "metadata", path, rank)],
    )
    doc_rank = doc.get("rank")
    if doc_rank is not None and (isinstance(doc_rank, bool) or not isinstance(doc_rank, int) or doc_rank < 0):
        raise TraceFormatError(
            f"rank must be null or a non-negative integer, got {doc_rank!r}"[:200], path=path, rank=rank
        )
    if rank is None:
        rank = doc_rank
    nodes = []
    for i, d in enumerate(_typed(doc, "nodes", list, [], "document", path, rank)):
        where = f"node #{i}"
        if not isinstance(d, dict) or "id" not in d:
            raise TraceFormatError(f"{where}: a node must be an object with an id", path=path, rank=rank)
        nid = _u64(d["id"], "id", None, path, rank)
        unknown = sorted(set(d) - _NODE_KEYS)
        if unknown:
            raise TraceFormatError(f"unknown node keys {unknown}", path=path, rank=rank, node_id=nid)
        name = d.get("name", "")
        if not isinstance(name, str):
            raise TraceFormatError(f"name must be a string, got {name!r}"[:200], path=path, rank=rank, node_id=nid)
        nodes.append(
            Node(
                id=nid,
                name=name,
                type=_node_type(d.get("type", 0), f"node {nid}", path),
                data_deps=_int_list(d.get("data_deps"), "data_deps", nid, path, rank),
                ctrl_deps=_int_list(d.get("ctrl_deps"), "ctrl_deps", nid, path, rank),
                start_time_ns=_time(d.get("start_time_ns", 0), "start_time_ns", MAX_TIME_NS, nid, path, rank),
                duration_ns=_time(d.get("duration_ns", 0), "duration_ns", MAX_DURATION_NS, nid, path, rank),
                inputs=_io_in(d.get("inputs"), nid, path, rank),
                outputs=_io_in(d.get("outputs"), nid, path, rank),
                attrs=[
                    _attr_in(a, f"node {nid}", path) for a in _typed(d, "attrs", list, [], f"node {nid}", path, rank)
                ],
                storage=_storage_in(d.get("storage_pb_hex"), nid, path, rank),
            )
        )
    return ExecutionTrace(nodes, metadata, rank=rank, path=path)


_FEEDER_KEYS = {"Id", "Name", "NodeType", "ctrlDeps", "ctrl_deps", "data_deps", "dataDeps", "runtime"}


def _from_feeder(doc: dict[str, Any], path: str, rank: int | None) -> ExecutionTrace:
    nodes = []
    graph = doc["workload_graph"]
    if not isinstance(graph, list) or not graph:
        raise TraceFormatError(
            f"workload_graph must be a non-empty list of nodes, got {graph!r}"[:200], path=path, rank=rank
        )
    for i, d in enumerate(graph):
        if not isinstance(d, dict) or "Id" not in d:
            raise TraceFormatError(f"workload_graph[{i}]: a node must be an object with an Id", path=path, rank=rank)
        nid = _u64(d["Id"], "Id", None, path, rank)
        runtime = d.get("runtime", 0)
        if not isinstance(runtime, (int, float)) or runtime < 0 or not math.isfinite(runtime):
            raise TraceFormatError(
                f"runtime must be a non-negative number of microseconds, got {runtime!r}",
                path=path,
                rank=rank,
                node_id=nid,
            )
        attrs = []
        for key, value in d.items():
            if key not in _FEEDER_KEYS and value is not None:
                try:
                    attrs.append(Attr.infer(key, value))
                except ValidationError as exc:  # an empty list or a value of no attribute kind
                    raise TraceFormatError(f"attribute {key!r}: {exc}", path=path, rank=rank, node_id=nid) from None
        nodes.append(
            Node(
                id=nid,
                name=str(d.get("Name", "")),
                type=_node_type(d.get("NodeType", 0), f"node {nid}", path),
                data_deps=_int_list(d.get("data_deps", d.get("dataDeps")), "data_deps", nid, path, rank),
                ctrl_deps=_int_list(d.get("ctrlDeps", d.get("ctrl_deps")), "ctrlDeps", nid, path, rank),
                duration_ns=_time(int(round(runtime * 1000)), "runtime (x 1000)", MAX_DURATION_NS, nid, path, rank),
                attrs=attrs,
            )
        )
    md = Metadata(
        version="feeder-json",
        attrs=[Attr.infer(key, doc[key]) for key in ("workload_name", "ngpus") if key in doc and doc[key] is not None],
    )
    return ExecutionTrace(nodes, md, rank=rank, path=path)


def read_json_trace(path: str | os.PathLike[str], *, rank: int | None = None) -> ExecutionTrace:
    """Read a `.json` or `.json.gz` trace (see :func:`loads_trace`).

    Raises:
        TraceFormatError: invalid JSON or gzip data, a document of neither form, or a structure the reader
            did not expect (names the file).
        OSError: the file cannot be read.
    """
    spath = os.fspath(path)
    from tracekit.output import read_input_bytes

    data = read_input_bytes(spath)
    if data[:2] == b"\x1f\x8b":
        from tracekit.wire.framing import gunzip_limited

        data = gunzip_limited(data, path=spath)
    with malformed_input("trace JSON", spath, TraceFormatError):
        return loads_trace(data, path=spath, rank=rank)
