"""Reading a `.et`/`.et.gz` file as a stream: the metadata record alone, or the nodes in bounded memory.

:func:`iter_nodes` reads blocks of ``BLOCK_BYTES``, frames the complete
records of each block, decodes them column-wise (:mod:`tracekit.wire.columnar`)
and yields node views (:class:`tracekit.wire.nodeview.NodeView`), so memory holds
one block and its columns at a time.  Whenever a block is not plainly
well-formed (a bad or truncated length prefix, an empty record, a record that
does not decode), the rest of the file is read record by record with protobuf,
which yields every good node before the bad record and raises the error that
names it (byte offset, last good node id).
"""

from __future__ import annotations

import gzip
import os
from typing import IO, Iterator

import numpy as np
from google.protobuf.message import DecodeError

from tracekit.wire.codec import metadata_from_pb, node_from_pb
from tracekit.output import decompression_limits
from tracekit.wire.framing import EncodedNodes, rank_from_path
from tracekit.output import open_input
from tracekit._proto import et_def_pb2 as pb
from tracekit.errors import TraceFormatError, TracekitError
from tracekit.model import Metadata, Node

GZIP_MAGIC = b"\x1f\x8b"
BLOCK_BYTES = 1 << 20  # bytes read per step of iter_nodes


def _maybe_gunzip(raw: IO[bytes]) -> IO[bytes]:
    """A reader of ``raw``'s content, decompressing when it starts with the gzip magic."""
    head = raw.read(2)
    raw.seek(0)
    return gzip.open(raw, "rb") if head == GZIP_MAGIC else raw  # type: ignore[return-value]


def read_metadata(path: str | os.PathLike[str]) -> Metadata:
    """The GlobalMetadata of a `.et`/`.et.gz` file, reading only its first record.

    Raises:
        TraceFormatError: empty file, truncated or undecodable metadata record.
    """
    spath = os.fspath(path)
    rank = rank_from_path(spath)
    with open_input(spath) as raw:
        fh = _maybe_gunzip(raw)
        prefix = fh.read(5)
        if not prefix:
            raise TraceFormatError("empty file: no GlobalMetadata record", path=spath, rank=rank)
        length, shift, used = 0, 0, 0
        for b in prefix:
            used += 1
            length |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        else:
            raise TraceFormatError(
                "truncated or malformed metadata length prefix", byte_offset=0, path=spath, rank=rank
            )
        body = prefix[used:] + fh.read(max(0, length - (len(prefix) - used)))
        if len(body) < length:
            raise TraceFormatError(
                f"metadata record of {length} bytes runs past the end of the file", byte_offset=0, path=spath, rank=rank
            )
    m = pb.GlobalMetadata()
    try:
        m.ParseFromString(body[:length])
    except DecodeError as exc:
        raise TraceFormatError(
            f"undecodable GlobalMetadata message ({exc})", byte_offset=0, path=spath, rank=rank
        ) from None
    return metadata_from_pb(m)


def iter_nodes(path: str | os.PathLike[str]) -> Iterator[Node]:
    """Stream the nodes of a `.et`/`.et.gz` file in file order, holding one block of records at a time.

    The metadata record is read and checked first.  Memory is bounded by
    ``BLOCK_BYTES`` plus the columns of one block (whatever the file size),
    unless the caller keeps the nodes.

    Raises:
        TraceFormatError: as :func:`tracekit.wire.io.read_trace`, raised when the bad record is reached
            (every node before it has been yielded).
    """
    spath = os.fspath(path)
    rank = rank_from_path(spath)
    with open_input(spath) as raw:
        fh = _maybe_gunzip(raw)
        limit = decompression_limits()[0] if fh is not raw else os.fstat(raw.fileno()).st_size
        yield from _Stream(fh, spath, rank, limit).nodes()


def _frame_block(buf: bytes, first: bool, limit: int) -> tuple[np.ndarray, np.ndarray, int] | None:
    """``(starts, ends, stop)``: the message spans of the complete records at the start of ``buf``, and where they end.

    ``first``: ``buf`` starts with the metadata record.  None when a length
    prefix is malformed, a record is empty or larger than ``limit``: the
    record-by-record reader reports those.
    """
    from tracekit.wire import kernels as wk

    u8 = np.frombuffer(buf, dtype=np.uint8)
    off_t = np.int32 if len(buf) < 2**31 else np.int64
    none = np.zeros(0, dtype=off_t)
    code, count, _, _, _, stop = wk.frame(u8, none, none, first, True, limit)
    if code != wk.OK:
        return None
    starts, ends = np.empty(count, dtype=off_t), np.empty(count, dtype=off_t)
    wk.frame(u8, starts, ends, first, True, limit)
    return starts, ends, stop


class _Stream:
    """State of one :func:`iter_nodes` pass: the unread bytes, their file offset, the records seen."""

    def __init__(self, fh: IO[bytes], path: str, rank: int | None, limit: int) -> None:
        self.fh, self.path, self.rank, self.limit = fh, path, rank, limit
        self.buf, self.offset, self.index = b"", 0, 0
        self.data = b""  # the slow path's window of unread bytes
        self.last: int | None = None

    def nodes(self) -> Iterator[Node]:
        """The nodes, block by block (see module docstring).

        Raises:
            TraceFormatError: a bad record, when it is reached.
        """
        from tracekit.wire.columnar import decode_columns
        from tracekit.wire.nodeview import NodeView

        eof = False
        while not eof:
            chunk = self.fh.read(BLOCK_BYTES)
            eof = not chunk
            buf = self.buf + chunk if self.buf else chunk
            framed = _frame_block(buf, self.index == 0, self.limit)
            if framed is None or (eof and framed[2] != len(buf)) or (eof and self.index == 0 and not len(framed[0])):
                self.buf = buf
                break
            starts, ends, stop = framed
            k = 0
            if self.index == 0 and len(starts):  # the metadata record
                try:
                    pb.GlobalMetadata().ParseFromString(buf[int(starts[0]) : int(ends[0])])
                except DecodeError:
                    self.buf = buf
                    break
                k = 1
            encoded = EncodedNodes(buf, starts[k:], ends[k:], self.path, self.rank)
            try:
                view = NodeView(encoded, decode_columns(encoded))
            except TraceFormatError:
                self.buf = buf
                break
            yield from view
            self.index += len(starts)
            if len(view):
                self.last = int(view._cols.ids[-1])
            self.offset += stop
            self.buf = buf[stop:]
        else:
            return
        yield from self._slow()

    def _fill(self, end: int) -> bool:
        """Whether the window ``self.data`` holds bytes up to ``end``, reading blocks until it does (False at the
        end of the file): the slow path reads what the records it checks need, not the rest of the file."""
        while len(self.data) < end:
            chunk = self.fh.read(max(BLOCK_BYTES, end - len(self.data)))
            if not chunk:
                return False
            self.data += chunk
        return True

    def _slow(self) -> Iterator[Node]:
        """The rest of the file record by record (protobuf), raising the error that names the bad record."""
        self.data = self.buf
        path, rank, last = self.path, self.rank, self.last
        pos = 0
        if not self._fill(1) and self.index == 0:
            raise TraceFormatError("empty file: no GlobalMetadata record", path=path, rank=rank)
        while self._fill(pos + 1):
            if pos > BLOCK_BYTES:  # drop the records read: the window stays about a block
                self.data, self.offset, pos = self.data[pos:], self.offset + pos, 0
            data = self.data
            at = self.offset + pos
            length, shift, k = 0, 0, pos
            while True:
                if not self._fill(k + 1):
                    raise TraceFormatError(
                        "truncated record length prefix", byte_offset=at, last_good_node_id=last, path=path, rank=rank
                    )
                data = self.data
                b = data[k]
                k += 1
                length |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift > 35:
                    raise TraceFormatError(
                        "malformed record length prefix", byte_offset=at, last_good_node_id=last, path=path, rank=rank
                    )
            if length > self.limit or not self._fill(k + length):
                raise TraceFormatError(
                    f"record of {length} bytes runs past the end of the file",
                    byte_offset=at,
                    last_good_node_id=last,
                    path=path,
                    rank=rank,
                )
            data = self.data
            body, pos = data[k : k + length], k + length
            try:
                if self.index == 0:
                    pb.GlobalMetadata().ParseFromString(body)
                else:
                    if length == 0:
                        raise TraceFormatError(
                            "empty node record (zero length)",
                            byte_offset=at,
                            last_good_node_id=last,
                            path=path,
                            rank=rank,
                        )
                    m = pb.Node()
                    m.ParseFromString(body)
                    try:
                        node = node_from_pb(m)
                    except TracekitError as exc:
                        raise exc.with_context(path=path, rank=rank) from None
                    last = node.id
                    yield node
            except DecodeError as exc:
                raise TraceFormatError(
                    f"undecodable message ({exc})", byte_offset=at, last_good_node_id=last, path=path, rank=rank
                ) from None
            self.index += 1
