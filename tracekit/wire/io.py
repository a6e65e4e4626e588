"""Reading and writing execution traces: Chakra `.et` (optionally gzip), tracekit JSON, Chakra feeder JSON.

`.et` layout (docs/design.md section 3): a stream of records, each a varint32 byte
length followed by one protobuf message; one ``GlobalMetadata`` first, then
``Node`` messages to the end of the file.  Files ending in ``.gz`` (or starting
with the gzip magic) are decompressed transparently.

Reading is strict: a truncated record, a length prefix past the end of the
file, an undecodable message, an empty file or an empty node record raise
:class:`~tracekit.errors.TraceFormatError` with the byte offset and the last
good node id; a short trace is never returned (attribute messages inside a
well-framed record are checked on first attribute access and by validation).
A trace read from a file keeps
its encoded records; its node table is decoded column-wise by
:mod:`tracekit.wire.columnar` and :class:`~tracekit.model.Node` objects are built
only on demand.  Writing an untouched trace copies its records, so
``read -> write`` is byte-identical.

Every write is atomic (temporary file in the target directory, then rename),
and no writer ever opens an input for writing.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any

import numpy as np

from google.protobuf.message import DecodeError

from tracekit.wire.codec import metadata_from_pb, metadata_to_pb, node_to_pb
from tracekit.wire.framing import (
    GZIP_MAGIC,  # noqa: F401
    EncodedNodes,
    _read_raw,
    frame,
    rank_from_path,
    split_records,
)
from tracekit.output import (
    note_input,  # noqa: F401
    open_input,  # noqa: F401
    write_bytes_atomic,
)
from tracekit._proto import et_def_pb2 as pb
from tracekit.wire.stream import iter_nodes, read_metadata  # noqa: F401
from tracekit.errors import TraceFormatError, TracekitError
from tracekit.model import ExecutionTrace, Metadata, Node


# ----------------------------------------------------------------------------- read / write .et
def read_trace(path: str | os.PathLike[str], *, rank: int | None = None) -> ExecutionTrace:
    """Read one rank's trace from ``.et``, ``.et.gz``, tracekit ``.json`` or Chakra feeder JSON.

    Args:
        path: the file.
        rank: the rank; default parsed from ``<prefix>.<rank>.et``.

    Raises:
        TraceFormatError: the file is not a valid trace (see module docstring).
        OSError: the file cannot be read.
    """
    spath = os.fspath(path)
    if rank is None:
        rank = rank_from_path(spath)
    if spath.endswith((".json", ".json.gz")):
        from tracekit.wire.jsonform import read_json_trace

        return read_json_trace(spath, rank=rank)
    data = _read_raw(spath, rank=rank)
    return trace_from_bytes(data, path=spath, rank=rank)


def trace_from_bytes(data: bytes, *, path: str | None = None, rank: int | None = None) -> ExecutionTrace:
    """Parse a whole `.et` byte string (see :func:`read_trace`)."""
    ms, me, starts, ends = split_records(data, path=path, rank=rank)
    md = pb.GlobalMetadata()
    try:
        md.ParseFromString(data[ms:me])
    except DecodeError as exc:
        raise TraceFormatError(
            f"undecodable GlobalMetadata message ({exc})", byte_offset=0, path=path, rank=rank
        ) from None
    encoded = EncodedNodes(data, starts, ends, path, rank)
    return ExecutionTrace._from_encoded(encoded, metadata_from_pb(md), rank=rank, path=path, meta_raw=data[ms:me])


def encode_node(node: Node) -> bytes:
    """One framed node record (varint length + ``Node`` message), for streaming writers.

    Raises:
        TracekitError: a field holds a value protobuf cannot encode.
    """
    try:
        return frame(node_to_pb(node).SerializeToString())
    except (TypeError, ValueError) as exc:
        raise TracekitError(f"cannot encode node: {exc}", node_id=node.id) from None


def encode_metadata(metadata: Metadata, *, rank: int | None = None, path: str | None = None) -> bytes:
    """The framed GlobalMetadata record that starts a `.et` file.

    Raises:
        TracekitError: an attribute holds a value protobuf cannot encode.
    """
    try:
        return frame(metadata_to_pb(metadata).SerializeToString())
    except (TypeError, ValueError) as exc:
        raise TracekitError(f"cannot encode metadata: {exc}", rank=rank, path=path) from None


def encode_trace(trace: ExecutionTrace) -> bytes:
    """The `.et` bytes of ``trace`` (records copied when the trace is untouched).

    Raises:
        TracekitError: a node field holds a value protobuf cannot encode.
    """
    return b"".join(encoded_pieces(trace))


def encoded_pieces(trace: ExecutionTrace) -> list[bytes | memoryview]:
    """The `.et` bytes of ``trace`` as pieces to write in order (:func:`encode_trace` joins them).

    A trace holding encoded records gives its metadata record and one view of its records' buffer,
    so writing it copies nothing in memory.

    Raises:
        TracekitError: a node field holds a value protobuf cannot encode.
    """
    parts: list[bytes | memoryview] = []
    meta_raw = getattr(trace, "_meta_raw", None)
    if meta_raw is not None and _meta_untouched(trace):
        parts.append(frame(meta_raw))
    else:
        parts.append(encode_metadata(trace.metadata, rank=trace.rank, path=trace.path))
    if trace._nodes is None:  # untouched since read (or rewritten on records): copy the records
        parts.extend(framed_records(trace._encoded))
    else:
        for node in trace._nodes:
            try:
                parts.append(frame(node_to_pb(node).SerializeToString()))
            except (TypeError, ValueError) as exc:
                raise TracekitError(
                    f"cannot encode node: {exc}", node_id=node.id, rank=trace.rank, path=trace.path
                ) from None
    return parts


def framed_records(encoded: Any) -> list[bytes | memoryview]:
    """The framed node records of ``encoded`` (an :class:`EncodedNodes`) as byte pieces to write, in order.

    When the records lie back to back in their buffer (a file as read, or records rewritten by a columnar
    transform) this is the first record framed plus one view of the buffer (no copy); otherwise they are
    framed again in one compiled pass (:func:`tracekit.wire.encode.frame_records`).
    """
    from tracekit.wire.encode import back_to_back, frame_records, varint_lens
    from tracekit.wire.spliced import record_array

    starts = np.asarray(encoded.starts, dtype=np.int64)
    ends = np.asarray(encoded.ends, dtype=np.int64)
    if not len(starts):
        return []
    buf = record_array(encoded)
    if back_to_back(buf, starts, ends):
        first, end = int(starts[0]), int(ends[0])
        return [frame(buf[first:end].tobytes()), buf[end : int(ends[-1])].data]
    lens = ends - starts
    out = np.empty(int((lens + varint_lens(lens)).sum()), dtype=np.uint8)
    frame_records(buf, starts, ends, out)
    return [out.data]


def _meta_untouched(trace: ExecutionTrace) -> bool:
    raw = trace._meta_raw
    m = pb.GlobalMetadata()
    m.ParseFromString(raw)
    return metadata_from_pb(m) == trace.metadata


def write_trace(trace: ExecutionTrace, path: str | os.PathLike[str]) -> Path:
    """Write ``trace`` atomically; the format follows the suffix.

    ``.et`` (Chakra protobuf stream), ``.et.gz`` (gzip of it), ``.json``
    (tracekit JSON document, see :mod:`tracekit.wire.jsonform`).

    Returns:
        The path written.

    Raises:
        TracekitError: the trace cannot be encoded (nothing is written).
    """
    p = Path(path)
    name = p.name
    if name.endswith(".json"):
        from tracekit.wire.jsonform import dumps_trace

        write_bytes_atomic(p, dumps_trace(trace))
        return p
    data = encode_trace(trace)
    if name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6, mtime=0)
    write_bytes_atomic(p, data)
    return p
