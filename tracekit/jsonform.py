"""The JSON form of a trace: one valid JSON document, lossless both ways.

Layout::

    {"format": "tracekit.et.json", "format_version": 1, "rank": 0,
     "metadata": {"version": "0.0.4", "attrs": [...]},
     "nodes": [{"id": 1, "name": "...", "type": "COMP_NODE", "data_deps": [...], "ctrl_deps": [...],
                "start_time_ns": 0, "duration_ns": 1500,
                "inputs": {"values": "", "shapes": "", "types": ""},          (only when present)
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
import gzip
import math
import os
from typing import Any

import orjson

from tracekit.errors import TraceFormatError
from tracekit.model import ATTR_KINDS, Attr, ExecutionTrace, IOInfo, Metadata, Node, NodeType

FORMAT = "tracekit.et.json"
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
        value = [_float_out(v) for v in value] if isinstance(value, list) else _float_out(value)
    elif a.kind in _BYTES_KINDS:
        value = [base64.b64encode(v).decode() for v in value] if isinstance(value, list) \
            else base64.b64encode(value).decode()
    out: dict[str, Any] = {"name": a.name, "kind": a.kind, "value": value}
    if a.doc_string:
        out["doc_string"] = a.doc_string
    return out


def _node_out(n: Node) -> dict[str, Any]:
    t = n.type
    out: dict[str, Any] = {
        "id": n.id, "name": n.name, "type": t.name if isinstance(t, NodeType) else int(t),
        "data_deps": n.data_deps, "ctrl_deps": n.ctrl_deps,
        "start_time_ns": n.start_time_ns, "duration_ns": n.duration_ns,
    }
    if n.inputs is not None:
        out["inputs"] = {"values": n.inputs.values, "shapes": n.inputs.shapes, "types": n.inputs.types}
    if n.outputs is not None:
        out["outputs"] = {"values": n.outputs.values, "shapes": n.outputs.shapes, "types": n.outputs.types}
    out["attrs"] = [_attr_out(a) for a in n.attrs]
    return out


def dumps_trace(trace: ExecutionTrace) -> bytes:
    """The JSON document of ``trace`` (UTF-8 bytes, indented)."""
    doc = {
        "format": FORMAT, "format_version": 1, "rank": trace.rank,
        "metadata": {"version": trace.metadata.version, "attrs": [_attr_out(a) for a in trace.metadata.attrs]},
        "nodes": [_node_out(n) for n in trace.nodes],
    }
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


def _attr_in(d: Any, where: str, path: str) -> Attr:
    if not isinstance(d, dict) or "name" not in d:
        raise TraceFormatError(f"{where}: attribute must be an object with a name, got {d!r}"[:300], path=path)
    kind = d.get("kind")
    if kind is not None and kind not in ATTR_KINDS:
        raise TraceFormatError(f"{where}: attribute {d['name']!r} has unknown kind {kind!r}", path=path)
    value = d.get("value")
    if kind in _FLOAT_KINDS:
        conv = (lambda v: _NONFINITE.get(v, v) if isinstance(v, str) else float(v))
        value = [conv(v) for v in value] if isinstance(value, list) else conv(value)
    elif kind in _BYTES_KINDS:
        value = [base64.b64decode(v) for v in value] if isinstance(value, list) else base64.b64decode(value)
    return Attr(str(d["name"]), value, kind, d.get("doc_string", ""))


def _io_in(d: Any) -> IOInfo | None:
    if d is None:
        return None
    return IOInfo(d.get("values", ""), d.get("shapes", ""), d.get("types", ""))


def _node_type(value: Any, where: str, path: str) -> NodeType | int:
    if isinstance(value, str):
        try:
            return NodeType[value]
        except KeyError:
            raise TraceFormatError(f"{where}: unknown node type {value!r}", path=path) from None
    if isinstance(value, int):
        try:
            return NodeType(value)
        except ValueError:
            return value
    raise TraceFormatError(f"{where}: node type must be a name or number, got {value!r}", path=path)


def _int_list(value: Any, key: str, node_id: Any, path: str) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise TraceFormatError(f"{key} must be a list of integer node ids, got {value!r}"[:300], path=path,
                               node_id=node_id if isinstance(node_id, int) else None)
    return value


def loads_trace(data: bytes, *, path: str = "<json>", rank: int | None = None) -> ExecutionTrace:
    """Parse a tracekit JSON document or a Chakra feeder JSON document.

    Raises:
        TraceFormatError: invalid JSON (with line and column) or a document
            of neither form, naming the node at fault.
    """
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(f"invalid JSON: {exc}", path=path, rank=rank) from None
    if isinstance(doc, dict) and "workload_graph" in doc:
        return _from_feeder(doc, path, rank)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TraceFormatError(f"not a tracekit JSON trace (expected \"format\": \"{FORMAT}\") "
                               "nor a Chakra feeder JSON (\"workload_graph\")", path=path, rank=rank)
    md = doc.get("metadata") or {}
    metadata = Metadata(str(md.get("version", "")), [_attr_in(a, "metadata", path) for a in md.get("attrs", [])])
    if rank is None and isinstance(doc.get("rank"), int):
        rank = doc["rank"]
    nodes = []
    for i, d in enumerate(doc.get("nodes", [])):
        where = f"node #{i}"
        if not isinstance(d, dict) or not isinstance(d.get("id"), int):
            raise TraceFormatError(f"{where}: a node must be an object with an integer id", path=path, rank=rank)
        nid = d["id"]
        try:
            nodes.append(Node(
                id=nid, name=str(d.get("name", "")), type=_node_type(d.get("type", 0), f"node {nid}", path),
                data_deps=_int_list(d.get("data_deps"), "data_deps", nid, path),
                ctrl_deps=_int_list(d.get("ctrl_deps"), "ctrl_deps", nid, path),
                start_time_ns=int(d.get("start_time_ns", 0)), duration_ns=int(d.get("duration_ns", 0)),
                inputs=_io_in(d.get("inputs")), outputs=_io_in(d.get("outputs")),
                attrs=[_attr_in(a, f"node {nid}", path) for a in d.get("attrs", [])],
            ))
        except (TypeError, ValueError) as exc:
            raise TraceFormatError(f"bad field value: {exc}", path=path, rank=rank, node_id=nid) from None
    return ExecutionTrace(nodes, metadata, rank=rank, path=path)


_FEEDER_KEYS = {"Id", "Name", "NodeType", "ctrlDeps", "ctrl_deps", "data_deps", "dataDeps", "runtime"}


def _from_feeder(doc: dict[str, Any], path: str, rank: int | None) -> ExecutionTrace:
    nodes = []
    for i, d in enumerate(doc["workload_graph"]):
        if not isinstance(d, dict) or not isinstance(d.get("Id"), int):
            raise TraceFormatError(f"workload_graph[{i}]: a node must be an object with an integer Id",
                                   path=path, rank=rank)
        nid = d["Id"]
        runtime = d.get("runtime", 0)
        if not isinstance(runtime, (int, float)) or runtime < 0 or not math.isfinite(runtime):
            raise TraceFormatError(f"runtime must be a non-negative number of microseconds, got {runtime!r}",
                                   path=path, rank=rank, node_id=nid)
        node = Node(id=nid, name=str(d.get("Name", "")), type=_node_type(d.get("NodeType", 0), f"node {nid}", path),
                    data_deps=_int_list(d.get("data_deps", d.get("dataDeps")), "data_deps", nid, path),
                    ctrl_deps=_int_list(d.get("ctrlDeps", d.get("ctrl_deps")), "ctrlDeps", nid, path),
                    duration_ns=int(round(runtime * 1000)))
        for key, value in d.items():
            if key not in _FEEDER_KEYS and value is not None:
                try:
                    node.attrs.append(Attr.infer(key, value))
                except Exception as exc:  # noqa: BLE001 - re-raised as a format error
                    raise TraceFormatError(f"attribute {key!r}: {exc}", path=path, rank=rank, node_id=nid) from None
        nodes.append(node)
    md = Metadata(version="feeder-json")
    for key in ("workload_name", "ngpus"):
        if key in doc and doc[key] is not None:
            md.attrs.append(Attr.infer(key, doc[key]))
    return ExecutionTrace(nodes, md, rank=rank, path=path)


def read_json_trace(path: str | os.PathLike[str], *, rank: int | None = None) -> ExecutionTrace:
    """Read a `.json` or `.json.gz` trace (see :func:`loads_trace`)."""
    spath = os.fspath(path)
    from tracekit.io import read_input_bytes

    data = read_input_bytes(spath)
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise TraceFormatError(f"corrupt gzip stream: {exc}", path=spath) from None
    return loads_trace(data, path=spath, rank=rank)
