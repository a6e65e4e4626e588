"""`.et` record framing and decompression (re-exported by :mod:`tracekit.io`).

A `.et` file is a stream of records, each a varint32 byte length followed by
one protobuf message (docs/design.md section 3).  :func:`split_records` finds
the record spans of a whole file, :class:`EncodedNodes` keeps a file's node
records encoded, :func:`gunzip_limited` decompresses within the limits.
"""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
from google.protobuf.message import DecodeError

from tracekit.wire.codec import node_from_pb
from tracekit.output import decompression_limits, read_input_bytes
from tracekit._proto import et_def_pb2 as pb
from tracekit.errors import TraceFormatError, TracekitError
from tracekit.model import Node

GZIP_MAGIC = b"\x1f\x8b"
_RANK_RE = re.compile(r"\.(\d+)\.et(\.gz)?$")


# ----------------------------------------------------------------------------- decompression limits
_RATIO_CHECK_AFTER = 64 << 20
_CHUNK = 4 << 20


def gunzip_limited(data: bytes, *, path: str | os.PathLike[str] | None = None) -> bytes:
    """Decompress gzip ``data`` (all members) within :func:`decompression_limits`.

    Memory stays bounded by the cap: the output is produced in chunks and the
    limits are checked after each one.

    Raises:
        TraceFormatError: corrupt or truncated gzip data, or a limit exceeded
            (naming the environment variable that raises it).
    """
    max_bytes, max_ratio = decompression_limits()
    out: list[bytes] = []
    total = 0
    rest = data
    try:
        while rest:
            d = zlib.decompressobj(wbits=31)
            buf = rest
            while True:
                chunk = d.decompress(buf, _CHUNK)
                buf = d.unconsumed_tail
                total += len(chunk)
                out.append(chunk)
                consumed = len(rest) - len(d.unused_data) - len(buf)
                if total > max_bytes:
                    raise TraceFormatError(
                        f"decompresses to more than {max_bytes:,} bytes (limit: set TRACEKIT_MAX_DECOMPRESSED_BYTES "
                        f"to raise it)",
                        path=path,
                    )
                if total > _RATIO_CHECK_AFTER and total > max_ratio * max(1, len(data) - len(rest) + consumed):
                    raise TraceFormatError(
                        f"gzip data expands more than {max_ratio}x (a decompression bomb?); set "
                        f"TRACEKIT_MAX_GZIP_RATIO to raise the limit",
                        path=path,
                    )
                if d.eof or (not chunk and not buf):
                    break
            if not d.eof:
                raise TraceFormatError("corrupt gzip stream: truncated (end of stream not found)", path=path)
            rest = d.unused_data.lstrip(b"\0")  # further members; zero padding after the last one is allowed
    except zlib.error as exc:
        raise TraceFormatError(f"corrupt gzip stream: {exc}", path=path) from None
    return b"".join(out)


# ----------------------------------------------------------------------------- record framing
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def frame(message_bytes: bytes) -> bytes:
    """One record: varint32 length + message bytes."""
    return _varint(len(message_bytes)) + message_bytes


#: bytes of a raw `.et` file framed before the whole file is read (:func:`check_head`)
HEAD_BYTES = 1 << 16


def _read_raw(path: str | os.PathLike[str], *, rank: int | None = None) -> bytes:
    """The (decompressed) bytes of a `.et`/`.et.gz` file, after :func:`check_head` of a raw regular file.

    Raises:
        TraceFormatError: a bad record among the first :data:`HEAD_BYTES`, a gzip stream over its limits.
    """
    p = Path(path)
    if os.path.isfile(p) and os.path.getsize(p) > HEAD_BYTES:  # not a FIFO: its head would be consumed
        check_head(p, rank=rank)
    data = read_input_bytes(p)
    if data[:2] == GZIP_MAGIC:
        data = gunzip_limited(data, path=p)
    return data


def check_head(path: str | os.PathLike[str], *, rank: int | None = None) -> None:
    """Frame the records of the first :data:`HEAD_BYTES` of a raw `.et` file and raise at the first bad one, so a
    large file that is not a trace (1.5 GB of zero bytes) fails at its first record, not after it was read whole.

    Raises:
        TraceFormatError: an empty node record, a length prefix of more than 5 bytes, or a record longer than the
            file, naming the file, the rank and the byte offset.
    """
    from tracekit.wire import kernels as wk
    from tracekit.output import open_input

    with open_input(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(HEAD_BYTES)
    if head[:2] == GZIP_MAGIC:
        return
    none = np.zeros(0, dtype=np.int32)
    code, _, at, length, body_at, _ = wk.frame(np.frombuffer(head, dtype=np.uint8), none, none, True, True, size)
    spath = os.fspath(path)
    if code == wk.RECORD_OVER_LIMIT:
        raise TraceFormatError(
            f"record of {length} bytes runs past the end of the file ({size - body_at} bytes left)",
            byte_offset=at,
            path=spath,
            rank=rank,
        )
    if code != wk.OK:
        raise _framing_error(head, code, at, length, body_at, spath, rank)


def split_records(
    data: bytes, *, path: str | None = None, rank: int | None = None
) -> tuple[int, int, np.ndarray, np.ndarray]:
    """Split a `.et` byte string into records.

    Returns:
        ``(meta_start, meta_end, starts, ends)``: the metadata message span and
        arrays (shape ``[N]``; int32, int64 for data of 2 GiB or more) of node
        message spans (without prefixes); framed by :func:`tracekit.wire.kernels.frame`.

    Raises:
        TraceFormatError: empty input, truncated length prefix, a length past
            the end of the data, or an empty node record.
    """
    from tracekit.wire import kernels as wk

    n = len(data)
    if n == 0:
        raise TraceFormatError("empty file: no GlobalMetadata record", path=path, rank=rank)
    buf = np.frombuffer(data, dtype=np.uint8)
    off_t = np.int32 if n < 2**31 else np.int64  # byte offsets: 4 bytes each for files under 2 GiB
    guess = _count_guess(buf)
    starts, ends = np.empty(guess, dtype=off_t), np.empty(guess, dtype=off_t)
    code, count, at, length, body_at, _ = wk.frame(buf, starts, ends, True, False, 0)
    if code != wk.OK:
        raise _framing_error(data, code, at, length, body_at, path, rank)
    if count > guess:  # the guess fell short: the records past it are framed again, into exact arrays
        rest = int(ends[guess - 1])
        more_s, more_e = np.empty(count - guess, dtype=off_t), np.empty(count - guess, dtype=off_t)
        wk.frame(buf[rest:], more_s, more_e, False, False, 0)
        starts, ends = np.concatenate((starts, more_s + rest)), np.concatenate((ends, more_e + rest))
    elif count < guess * 7 // 8:  # far fewer records than guessed: exact arrays, not views of larger ones
        starts, ends = starts[:count].copy(), ends[:count].copy()
    return int(starts[0]), int(ends[0]), starts[1:count], ends[1:count]


def _count_guess(buf: np.ndarray) -> int:
    """The number of records ``buf`` holds, guessed from its first 64 KiB, so that one framing pass sizes and
    fills the span arrays (a short guess costs a second pass over the records past it only): exact when the
    64 KiB hold them all, else 1/8 more than their mean size gives, at most one per 2 bytes (a node record
    takes at least 2: a length and one byte)."""
    from tracekit.wire import kernels as wk

    none = np.zeros(0, dtype=np.int32)
    _, k, _, _, _, stop = wk.frame(buf[: 1 << 16], none, none, True, True, len(buf))
    if stop == len(buf) or k < 2:
        return max(k, 1)
    return min(1 + len(buf) // 2, len(buf) * k // stop * 9 // 8 + 16)


def _framing_error(
    data: bytes, code: int, at: int, length: int, body_at: int, path: str | None, rank: int | None
) -> TraceFormatError:
    """The error for a framing code of :func:`tracekit.wire.kernels.frame` (record prefix at byte ``at``)."""
    from tracekit.wire import kernels as wk

    if code == wk.EMPTY_RECORD:
        return TraceFormatError("empty node record (zero length)", byte_offset=at, path=path, rank=rank)
    if code == wk.TRUNCATED_PREFIX:
        return TraceFormatError("truncated record length prefix", byte_offset=at, path=path, rank=rank)
    if code == wk.LONG_PREFIX:
        return TraceFormatError(
            "malformed record length prefix (more than 5 bytes)", byte_offset=at, path=path, rank=rank
        )
    hint = ""
    if data[:1] in (b"{", b"[") or data[:3] == b"\xef\xbb\xbf":
        hint = "; the file looks like JSON: give it a .json name, or turn it into .et with `tracekit load`"
    return TraceFormatError(
        f"record of {length} bytes runs past the end of the file ({len(data) - body_at} bytes left){hint}",
        byte_offset=at,
        path=path,
        rank=rank,
    )


class EncodedNodes:
    """The node records of one file, kept encoded (see module docstring)."""

    __slots__ = ("data", "starts", "ends", "path", "rank")

    def __init__(self, data: bytes, starts: np.ndarray, ends: np.ndarray, path: str | None, rank: int | None):
        self.data, self.starts, self.ends, self.path, self.rank = data, starts, ends, path, rank

    def __len__(self) -> int:
        return len(self.starts)

    def decode_one(self, i: int, last_good: int | None = None) -> Any:
        """The ``Node`` message of record ``i`` (protobuf).

        Raises:
            TraceFormatError: the record does not decode (byte offset, ``last_good`` id).
        """
        s, e = int(self.starts[i]), int(self.ends[i])
        m = pb.Node()
        try:
            m.ParseFromString(self.data[s:e])
        except DecodeError as exc:
            raise TraceFormatError(
                f"undecodable Node message ({exc})",
                byte_offset=s,
                last_good_node_id=last_good,
                path=self.path,
                rank=self.rank,
            ) from None
        return m

    def decode_all(self) -> list[Node]:
        """Every record as a :class:`Node`, with protobuf (the reference the column path is tested against).

        Raises:
            TraceFormatError: a record does not decode.
        """
        out: list[Node] = []
        last = None
        for i in range(len(self.starts)):
            m = self.decode_one(i, last)
            try:
                out.append(node_from_pb(m))
            except TracekitError as exc:
                raise exc.with_context(path=self.path, rank=self.rank) from None
            last = m.id
        return out

    def columns(self, attrs: Sequence[str] = (), on_attrs: Any = None):
        """The records' :class:`~tracekit.model.graph.NodeColumns` (:func:`tracekit.wire.columnar.decode_columns`;
        ``attrs``/``on_attrs``: attributes found in the same pass, see there).

        Raises:
            TraceFormatError: a record does not decode.
        """
        from tracekit.wire.columnar import decode_columns

        return decode_columns(self, attrs, on_attrs)

    def node_view(self, columns: Any) -> Any:
        """``trace.nodes`` of a trace over these records: a :class:`~tracekit.wire.nodeview.NodeView` over
        ``columns`` (the records' :meth:`columns`), which builds node values on access."""
        from tracekit.wire.nodeview import NodeView

        return NodeView(self, columns)

    def names_containing(self, text: str) -> list[int] | None:
        """Positions of the records whose node name contains ``text``, found on the bytes without decoding names.

        None when some name is not ASCII (the caller decodes the names then, which checks their UTF-8): one
        substring search over all records first, then the compiled byte search
        (:func:`tracekit.wire.recscan.names_containing`).
        """
        import re

        from tracekit.wire.recscan import names_containing

        array = getattr(self, "array", None)  # records a columnar transform wrote (tracekit.wire.spliced.SplicedNodes)
        needle = text.encode()
        if array is None and needle not in self.data:
            return []
        if array is not None and re.search(re.escape(needle), memoryview(array)) is None:
            return []
        search: Any = names_containing  # a compiled kernel
        hits = np.zeros(len(self.starts), dtype=bool)
        code = search(
            record_array(self),
            np.asarray(self.starts, dtype=np.int64),
            np.asarray(self.ends, dtype=np.int64),
            np.frombuffer(needle, dtype=np.uint8),
            hits,
        )
        return np.flatnonzero(hits).tolist() if code == 0 else None

    def raw_records(self) -> Iterator[bytes]:
        """Each record framed again (length prefix + message bytes), for writing an untouched trace."""
        data = self.data
        for s, e in zip(self.starts.tolist(), self.ends.tolist()):
            yield frame(data[s:e])


def is_rank_file_of(stem: str, name: str) -> bool:
    """Whether the file name ``name`` is a rank file ``<stem>.<rank>.et[.gz]`` of the set named ``stem`` (a file of
    the set ``<stem>.0`` beside it, ``<stem>.0.2.et``, is not)."""
    return re.fullmatch(re.escape(stem) + r"\.\d+\.et(\.gz)?", name) is not None


def rank_from_path(path: str | os.PathLike[str]) -> int | None:
    """The rank in a ``<prefix>.<rank>.et[.gz]`` file name, or None."""
    m = _RANK_RE.search(os.fspath(path))
    return int(m.group(1)) if m else None


# ----------------------------------------------------------------------------- "is this a trace at all?"
_PRINTABLE_NAME = re.compile(r"[\x21-\x7e][\x20-\x7e]{0,127}")
NOT_A_TRACE_HINT = "not a Chakra execution trace?"


def looks_like_chakra(head: bytes, file_size: int) -> bool:
    """Whether ``head`` (the first bytes of a decompressed `.et` file of ``file_size`` bytes) starts with a
    plausible GlobalMetadata record: a length prefix within the file, a message protobuf decodes without unknown
    fields, and a printable ``version`` or printable attribute names (Chakra's writers set one or the other:
    ASTRA-sim's examples ``version "0.0.4"``, Chakra's converter ``schema``/``pid``... attributes).

    Random bytes pass this by chance about once in 10^4 files or less; a truncated or partly corrupt real
    trace passes (its first record is intact).
    """
    md = _first_message(head, file_size, pb.GlobalMetadata())
    if md is None:
        return False
    if not md.ByteSize():  # an empty metadata record: the next record must be a node
        used = _varint_size(head)  # the record is its prefix alone
        if used >= file_size:
            return True  # the metadata alone: an empty trace
        return _first_message(head[used:], file_size - used, pb.Node()) is not None
    names = [a.name for a in md.attr]
    return bool(_PRINTABLE_NAME.fullmatch(md.version)) or (
        bool(names) and all(_PRINTABLE_NAME.fullmatch(n) for n in names)
    )


def _varint_size(head: bytes) -> int:
    """Bytes of the varint length prefix at the start of ``head`` (0: malformed or truncated)."""
    for i, b in enumerate(head[:5]):
        if b < 0x80:
            return i + 1
    return 0


def _first_message(head: bytes, file_size: int, message: Any) -> Any:
    """``message`` parsed from the first record of ``head``, or None: a prefix past the file, a record that does not
    decode, or one with unknown fields or a non-canonical encoding (not what a writer makes)."""
    used = _varint_size(head)
    if not used:
        return None
    length = sum((b & 0x7F) << (7 * i) for i, b in enumerate(head[:used]))
    if used + length > min(file_size, len(head)):
        return None
    try:
        message.ParseFromString(head[used : used + length])
    except DecodeError:
        return None
    return message if message.ByteSize() == length else None


def not_a_trace_hint(path: str | os.PathLike[str], head_bytes: int = 1 << 20) -> str:
    """:data:`NOT_A_TRACE_HINT` when the `.et`/`.et.gz` file at ``path`` does not start like a Chakra trace
    (:func:`looks_like_chakra`), else ``""`` (also when it cannot be read: the reader's own error says why)."""
    import gzip

    try:
        size = os.path.getsize(path)
        with open(path, "rb") as raw:
            head = raw.read(head_bytes)
            if head[:2] == GZIP_MAGIC:
                raw.seek(0)
                with gzip.open(raw) as fh:
                    head = fh.read(head_bytes)
                size = max(size, len(head) + (1 if len(head) == head_bytes else 0))
    except (OSError, EOFError, zlib.error):
        return ""
    if head[:1] in (b"{", b"[") or head[:3] == b"\xef\xbb\xbf":  # JSON: the framing error says what to do
        return ""
    return "" if looks_like_chakra(head, size) else NOT_A_TRACE_HINT


def record_array(encoded: EncodedNodes) -> np.ndarray:
    """The bytes holding ``encoded``'s records as ``uint8`` (no copy), for kernels and writers."""
    array = getattr(encoded, "array", None)
    return array if array is not None else np.frombuffer(encoded.data, dtype=np.uint8)
