"""The Chakra ET wire format: everything that knows protobuf bytes and trace file formats.

One trace file is read and written by :mod:`tracekit.wire.io` (``.et``, ``.et.gz``, tracekit JSON, Chakra feeder
JSON). Below it: record framing and decompression (:mod:`~tracekit.wire.framing`), model <-> protobuf messages
(:mod:`~tracekit.wire.codec`), column-wise decoding (:mod:`~tracekit.wire.columnar`,
:mod:`~tracekit.wire.attrsource`) and the lazy node view over it (:mod:`~tracekit.wire.nodeview`), compiled
read loops (:mod:`~tracekit.wire.kernels`, private helpers ``_prim``, ``_attrwire``, ``_names``), compiled writers
and record scans (:mod:`~tracekit.wire.encode`, :mod:`~tracekit.wire.batch`, :mod:`~tracekit.wire.recscan`,
:mod:`~tracekit.wire.spliced`), streaming reads (:mod:`~tracekit.wire.stream`), the JSON form
(:mod:`~tracekit.wire.jsonform`) and the PyTorch-capture sniffing of a wrong input
(:mod:`~tracekit.wire.capture_hint`). Uses :mod:`tracekit.model`; never a trace set, a check or a transform.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracekit.wire.attrsource import numeric_values
    from tracekit.wire.batch import FieldTable, encode_node_list, encode_nodes
    from tracekit.wire.capture_hint import convert_hint, sniff_pytorch_file
    from tracekit.wire.codec import metadata_to_pb, node_to_pb
    from tracekit.wire.encode import int_attr_slots
    from tracekit.wire.framing import (
        GZIP_MAGIC,
        EncodedNodes,
        frame,
        gunzip_limited,
        looks_like_chakra,
        not_a_trace_hint,
        rank_from_path,
        record_array,
        split_records,
    )
    from tracekit.wire.io import (
        encode_metadata,
        encode_node,
        encode_trace,
        encoded_pieces,
        framed_records,
        read_trace,
        trace_from_bytes,
        write_trace,
    )
    from tracekit.wire.jsonform import dumps_trace, loads_trace, read_json_trace
    from tracekit.wire.nodeview import ColumnNode
    from tracekit.wire.records import Blobs, Edit, Records, concat_rows, packed_fields, rewrite, varint_fields, varints
    from tracekit.wire.recscan import record_types, string_attr_in
    from tracekit.wire.spliced import SplicedNodes
    from tracekit.wire.stream import iter_nodes, read_metadata

__all__ = [
    "Blobs",
    "ColumnNode",
    "Edit",
    "EncodedNodes",
    "FieldTable",
    "GZIP_MAGIC",
    "Records",
    "SplicedNodes",
    "concat_rows",
    "convert_hint",
    "dumps_trace",
    "encode_metadata",
    "encode_node",
    "encode_node_list",
    "encode_nodes",
    "encode_trace",
    "encoded_pieces",
    "frame",
    "framed_records",
    "gunzip_limited",
    "int_attr_slots",
    "iter_nodes",
    "loads_trace",
    "looks_like_chakra",
    "metadata_to_pb",
    "node_to_pb",
    "not_a_trace_hint",
    "numeric_values",
    "packed_fields",
    "rank_from_path",
    "read_json_trace",
    "read_metadata",
    "read_trace",
    "record_array",
    "record_types",
    "rewrite",
    "sniff_pytorch_file",
    "split_records",
    "string_attr_in",
    "trace_from_bytes",
    "varint_fields",
    "varints",
    "write_trace",
]

# name -> the module defining it, imported on first use (PEP 562): importing the package imports no module
_FACE = {
    "Blobs": "tracekit.wire.records",
    "ColumnNode": "tracekit.wire.nodeview",
    "Edit": "tracekit.wire.records",
    "EncodedNodes": "tracekit.wire.framing",
    "FieldTable": "tracekit.wire.batch",
    "GZIP_MAGIC": "tracekit.wire.framing",
    "Records": "tracekit.wire.records",
    "SplicedNodes": "tracekit.wire.spliced",
    "concat_rows": "tracekit.wire.records",
    "convert_hint": "tracekit.wire.capture_hint",
    "dumps_trace": "tracekit.wire.jsonform",
    "encode_metadata": "tracekit.wire.io",
    "encode_node": "tracekit.wire.io",
    "encode_node_list": "tracekit.wire.batch",
    "encode_nodes": "tracekit.wire.batch",
    "encode_trace": "tracekit.wire.io",
    "encoded_pieces": "tracekit.wire.io",
    "frame": "tracekit.wire.framing",
    "framed_records": "tracekit.wire.io",
    "gunzip_limited": "tracekit.wire.framing",
    "int_attr_slots": "tracekit.wire.encode",
    "iter_nodes": "tracekit.wire.stream",
    "loads_trace": "tracekit.wire.jsonform",
    "looks_like_chakra": "tracekit.wire.framing",
    "metadata_to_pb": "tracekit.wire.codec",
    "node_to_pb": "tracekit.wire.codec",
    "not_a_trace_hint": "tracekit.wire.framing",
    "numeric_values": "tracekit.wire.attrsource",
    "packed_fields": "tracekit.wire.records",
    "rank_from_path": "tracekit.wire.framing",
    "read_json_trace": "tracekit.wire.jsonform",
    "read_metadata": "tracekit.wire.stream",
    "read_trace": "tracekit.wire.io",
    "record_array": "tracekit.wire.framing",
    "record_types": "tracekit.wire.recscan",
    "rewrite": "tracekit.wire.records",
    "sniff_pytorch_file": "tracekit.wire.capture_hint",
    "split_records": "tracekit.wire.framing",
    "string_attr_in": "tracekit.wire.recscan",
    "trace_from_bytes": "tracekit.wire.io",
    "varint_fields": "tracekit.wire.records",
    "varints": "tracekit.wire.records",
    "write_trace": "tracekit.wire.io",
}


def __getattr__(name: str) -> object:
    """A name of the face, from its defining module on first use; ``AttributeError`` for any other name."""
    if name not in _FACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_FACE[name]), name)
