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
:mod:`tracekit._columnar` and :class:`~tracekit.model.Node` objects are built
only on demand.  Writing an untouched trace copies its records, so
``read -> write`` is byte-identical.

Every write is atomic (temporary file in the target directory, then rename),
and no writer ever opens an input for writing.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob as _glob
import gzip
import os
import re
import signal
import stat
import tempfile
import zlib
from pathlib import Path
from typing import IO, Any, Iterator, Sequence

import numpy as np
import orjson

from tracekit._codec import metadata_from_pb, metadata_to_pb, node_from_pb, node_to_pb
from tracekit._proto import et_def_pb2 as pb
from tracekit.errors import TraceFormatError, TracekitError
from tracekit.model import ExecutionTrace, Metadata, Node

try:  # protobuf's decode error type (google.protobuf.message.DecodeError)
    from google.protobuf.message import DecodeError
except ImportError:  # pragma: no cover
    DecodeError = Exception  # type: ignore[assignment,misc]

GZIP_MAGIC = b"\x1f\x8b"
_UMASK = os.umask(0)
os.umask(_UMASK)
_RANK_RE = re.compile(r"\.(\d+)\.et(\.gz)?$")


# ----------------------------------------------------------------------------- input protection
_PROTECTED: set[str] | None = None  # real paths of this command's inputs, while protection is on


@contextlib.contextmanager
def protect_inputs() -> Iterator[None]:
    """While active, every file read through :func:`note_input` may not be written by :func:`atomic_output`.

    The CLI runs each command under it, so ``-o`` naming one of the
    command's inputs is refused instead of destroying the input.
    """
    global _PROTECTED
    saved, _PROTECTED = _PROTECTED, set()
    try:
        yield
    finally:
        _PROTECTED = saved


def note_input(path: str | os.PathLike[str]) -> None:
    """Record ``path`` as an input of the running command (see :func:`protect_inputs`)."""
    if _PROTECTED is not None:
        _PROTECTED.add(os.path.realpath(path))


def read_input_bytes(path: str | os.PathLike[str]) -> bytes:
    """All bytes of an input file, recorded with :func:`note_input`."""
    note_input(path)
    with open(path, "rb") as fh:
        return fh.read()


def check_output(path: str | os.PathLike[str]) -> None:
    """Raise TracekitError when ``path`` is an input of the running command."""
    if _PROTECTED is not None and os.path.realpath(path) in _PROTECTED:
        raise TracekitError("refusing to overwrite an input of this command; choose another output path",
                            path=path)


# ----------------------------------------------------------------------------- atomic output
def output_target(path: str | os.PathLike[str]) -> tuple[Path, bool]:
    """Where a write to ``path`` lands: ``(file to replace or write, write_through)``.

    A symlink is followed, so its target is replaced and the link stays.  A
    path that names something other than a regular file (a device such as
    ``/dev/null``, a FIFO, a socket, or ``/dev/stdout`` and the other
    ``/proc`` magic links) is written through (opened and written in place,
    ``write_through`` True): renaming a file over it would destroy it.
    """
    p = Path(path)
    try:
        st = os.stat(p)  # follows symlinks
    except (FileNotFoundError, NotADirectoryError):
        st = None
    real = Path(os.path.realpath(p))
    if st is not None and (not stat.S_ISREG(st.st_mode) or str(real).startswith("/proc/")):
        return p, True
    return (real if p.is_symlink() else p), False


_DEFERRED_SIGNALS = {getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)}


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Block SIGINT/SIGTERM/SIGHUP for a few statements (creating a temporary file and recording its name),
    so an interrupt cannot land between the two and leave a file nobody knows to remove."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not on Linux
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def make_parents(folder: Path) -> list[Path]:
    """Create ``folder`` and missing parents; returns those created (deepest last) for :func:`remove_if_empty`."""
    missing = []
    f = Path(folder)
    while not f.exists() and f != f.parent:
        missing.append(f)
        f = f.parent
    if f.exists() and not f.is_dir():  # e.g. `-o README.md/out.json`: mkdir would only say "File exists"
        raise TracekitError("not a directory (the output path needs it as a folder)", path=f)
    folder.mkdir(parents=True, exist_ok=True)
    return list(reversed(missing))


def remove_if_empty(created: list[Path]) -> None:
    """Remove the folders :func:`make_parents` created, deepest first, while they are empty (a failed write)."""
    for f in reversed(created):
        try:
            f.rmdir()
        except OSError:
            return


def _new_temp(folder: Path) -> tuple[int, str]:
    fd, tmp = tempfile.mkstemp(prefix=".tk-", suffix=".tmp", dir=folder)
    os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file the usual permissions
    return fd, tmp


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; rename it onto ``path`` on success.

    On any exception the temporary file is removed and ``path`` is untouched.
    Parent directories are created.  ``mode`` is ``"wb"`` or ``"w"`` (UTF-8).
    A symlink is followed (its target is replaced); a device, FIFO or
    ``/dev/stdout`` is written through, never replaced (see :func:`output_target`).

    Raises:
        TracekitError: ``path`` is an input of the running command (see :func:`protect_inputs`).
    """
    check_output(path)
    target, through = output_target(path)
    kwargs = {} if "b" in mode else {"encoding": "utf-8"}
    if through:
        try:
            with open(target, mode, **kwargs) as fh:
                yield fh
        except OSError as exc:
            raise TracekitError(f"cannot write: {exc.strerror or exc}", path=path) from None
        return
    created = make_parents(target.parent)
    tmp = None
    try:
        with _signals_deferred():
            fd, tmp = _new_temp(target.parent)
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
        os.replace(tmp, target)
    except BaseException:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        remove_if_empty(created)
        raise


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_output(path, "wb") as fh:
        fh.write(data)


# ----------------------------------------------------------------------------- decompression limits
DEFAULT_MAX_DECOMPRESSED_BYTES = 4 << 30
DEFAULT_MAX_GZIP_RATIO = 300
_RATIO_CHECK_AFTER = 64 << 20
_CHUNK = 4 << 20


def _env_limit(name: str, default: int) -> int:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = int(float(text))
    except ValueError:
        raise TracekitError(f"{name}={text!r} is not a number") from None
    if value <= 0:
        raise TracekitError(f"{name}={text!r} must be positive")
    return value


def decompression_limits() -> tuple[int, int]:
    """``(max_bytes, max_ratio)`` for gzip input.

    ``max_bytes`` caps the decompressed size of one file (env
    ``TRACEKIT_MAX_DECOMPRESSED_BYTES``, default 4 GiB); ``max_ratio`` caps the
    decompressed/compressed size ratio once more than 64 MiB came out (env
    ``TRACEKIT_MAX_GZIP_RATIO``, default 300; real traces compress 7-30x,
    a gzip bomb of zeros about 1000x).
    """
    return (_env_limit("TRACEKIT_MAX_DECOMPRESSED_BYTES", DEFAULT_MAX_DECOMPRESSED_BYTES),
            _env_limit("TRACEKIT_MAX_GZIP_RATIO", DEFAULT_MAX_GZIP_RATIO))


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
                        f"to raise it)", path=path)
                if total > _RATIO_CHECK_AFTER and total > max_ratio * max(1, len(data) - len(rest) + consumed):
                    raise TraceFormatError(
                        f"gzip data expands more than {max_ratio}x (a decompression bomb?); set "
                        f"TRACEKIT_MAX_GZIP_RATIO to raise the limit", path=path)
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


def _read_raw(path: str | os.PathLike[str]) -> bytes:
    p = Path(path)
    data = read_input_bytes(p)
    if data[:2] == GZIP_MAGIC:
        data = gunzip_limited(data, path=p)
    return data


def split_records(data: bytes, *, path: str | None = None, rank: int | None = None) -> tuple[int, int, np.ndarray, np.ndarray]:
    """Split a `.et` byte string into records.

    Returns:
        ``(meta_start, meta_end, starts, ends)``: the metadata message span and
        int64 arrays (shape ``[N]``) of node message spans (without prefixes).

    Raises:
        TraceFormatError: empty input, truncated length prefix, a length past
            the end of the data, or an empty node record.
    """
    n = len(data)
    if n == 0:
        raise TraceFormatError("empty file: no GlobalMetadata record", path=path, rank=rank)
    # One pass over the length prefixes: only the record boundaries are kept
    # (``bounds[i]`` = offset of record i's prefix; the last entry = end of data);
    # prefix lengths and message spans are then derived with numpy.
    bounds = [0]
    append = bounds.append
    pos = 0
    while pos < n:
        b = data[pos]
        if b < 0x80:  # one-byte length prefix: records under 128 bytes
            if not b and pos:  # fail at once: a run of zero bytes would otherwise be scanned to its end
                raise TraceFormatError("empty node record (zero length)", byte_offset=pos, path=path, rank=rank)
            pos += b + 1
        elif pos + 1 < n and data[pos + 1] < 0x80:  # two-byte prefix: records under 16 KiB
            pos += ((b & 0x7F) | (data[pos + 1] << 7)) + 2
        else:
            rec_at, length, shift = pos, 0, 0
            while True:
                if pos >= n:
                    raise TraceFormatError("truncated record length prefix", byte_offset=rec_at,
                                           path=path, rank=rank)
                b = data[pos]
                pos += 1
                length |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift > 35:
                    raise TraceFormatError("malformed record length prefix (more than 5 bytes)",
                                           byte_offset=rec_at, path=path, rank=rank)
            pos += length
        append(pos)
    if pos > n:
        rec_at = bounds[-2]
        body_at = rec_at + _prefix_len(data, rec_at)
        hint = ""
        if data[:1] in (b"{", b"[") or data[:3] == b"\xef\xbb\xbf":
            hint = "; the file looks like JSON: give it a .json name, or turn it into .et with `tracekit load`"
        raise TraceFormatError(
            f"record of {pos - body_at} bytes runs past the end of the file ({n - body_at} bytes left){hint}",
            byte_offset=rec_at, path=path, rank=rank)
    edges = np.asarray(bounds, dtype=np.int64)
    rec_starts, rec_ends = edges[:-1], edges[1:]
    # prefix lengths, vectorized: 1 + the number of leading continuation bytes (at most 5, checked above)
    u8 = np.frombuffer(data, dtype=np.uint8)
    plen = np.ones(len(rec_starts), dtype=np.int64)
    cont = u8[rec_starts] >= 0x80
    for k in range(1, 5):
        if not cont.any():
            break
        plen += cont
        cont &= u8[np.minimum(rec_starts + k, n - 1)] >= 0x80
    starts = rec_starts + plen
    empty = np.flatnonzero(starts[1:] == rec_ends[1:])
    if len(empty):
        raise TraceFormatError("empty node record (zero length)", byte_offset=int(rec_starts[1 + empty[0]]),
                               path=path, rank=rank)
    off_t = np.int32 if n < 2**31 else np.int64  # byte offsets: 4 bytes each for files under 2 GiB
    return int(starts[0]), int(rec_ends[0]), starts[1:].astype(off_t), rec_ends[1:].astype(off_t)


def _prefix_len(data: bytes, at: int) -> int:
    k = at
    while data[k] >= 0x80:
        k += 1
    return k - at + 1


class EncodedNodes:
    """The node records of one file, kept encoded (see module docstring)."""

    __slots__ = ("data", "starts", "ends", "path", "rank")

    def __init__(self, data: bytes, starts: np.ndarray, ends: np.ndarray, path: str | None, rank: int | None):
        self.data, self.starts, self.ends, self.path, self.rank = data, starts, ends, path, rank

    def __len__(self) -> int:
        return len(self.starts)

    def decode_one(self, i: int, last_good: int | None = None) -> Any:
        s, e = int(self.starts[i]), int(self.ends[i])
        m = pb.Node()
        try:
            m.ParseFromString(self.data[s:e])
        except DecodeError as exc:
            raise TraceFormatError(f"undecodable Node message ({exc})", byte_offset=s,
                                   last_good_node_id=last_good, path=self.path, rank=self.rank) from None
        return m

    def decode_all(self) -> list[Node]:
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

    def columns(self):
        from tracekit._columnar import decode_columns

        return decode_columns(self)

    def raw_records(self) -> Iterator[bytes]:
        data = self.data
        for s, e in zip(self.starts.tolist(), self.ends.tolist()):
            yield frame(data[s:e])


def rank_from_path(path: str | os.PathLike[str]) -> int | None:
    """The rank in a ``<prefix>.<rank>.et[.gz]`` file name, or None."""
    m = _RANK_RE.search(os.fspath(path))
    return int(m.group(1)) if m else None


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
        from tracekit.jsonform import read_json_trace

        return read_json_trace(spath, rank=rank)
    data = _read_raw(spath)
    return trace_from_bytes(data, path=spath, rank=rank)


def trace_from_bytes(data: bytes, *, path: str | None = None, rank: int | None = None) -> ExecutionTrace:
    """Parse a whole `.et` byte string (see :func:`read_trace`)."""
    ms, me, starts, ends = split_records(data, path=path, rank=rank)
    md = pb.GlobalMetadata()
    try:
        md.ParseFromString(data[ms:me])
    except DecodeError as exc:
        raise TraceFormatError(f"undecodable GlobalMetadata message ({exc})", byte_offset=0,
                               path=path, rank=rank) from None
    encoded = EncodedNodes(data, starts, ends, path, rank)
    return ExecutionTrace._from_encoded(encoded, metadata_from_pb(md), rank=rank, path=path, meta_raw=data[ms:me])


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
    note_input(spath)
    with open(spath, "rb") as raw:
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
            raise TraceFormatError("truncated or malformed metadata length prefix", byte_offset=0, path=spath,
                                   rank=rank)
        body = prefix[used:] + fh.read(max(0, length - (len(prefix) - used)))
        if len(body) < length:
            raise TraceFormatError(f"metadata record of {length} bytes runs past the end of the file",
                                   byte_offset=0, path=spath, rank=rank)
    m = pb.GlobalMetadata()
    try:
        m.ParseFromString(body[:length])
    except DecodeError as exc:
        raise TraceFormatError(f"undecodable GlobalMetadata message ({exc})", byte_offset=0, path=spath,
                               rank=rank) from None
    return metadata_from_pb(m)


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


def iter_nodes(path: str | os.PathLike[str]) -> Iterator[Node]:
    """Stream the nodes of a `.et`/`.et.gz` file without holding them all.

    The metadata record is read and checked first; nodes are yielded one by
    one, so a file larger than memory can be scanned.

    Raises:
        TraceFormatError: as :func:`read_trace`, raised when the bad record is reached.
    """
    spath = os.fspath(path)
    rank = rank_from_path(spath)
    note_input(spath)
    with open(spath, "rb") as raw:
        fh = _maybe_gunzip(raw)
        limit = decompression_limits()[0] if fh is not raw else os.fstat(raw.fileno()).st_size
        offset = 0
        index = 0
        last = None
        empty = True
        while True:
            prefix_at = offset
            length, shift, nbytes = 0, 0, 0
            while True:
                b = fh.read(1)
                if not b:
                    if nbytes:
                        raise TraceFormatError("truncated record length prefix", byte_offset=prefix_at,
                                               last_good_node_id=last, path=spath, rank=rank)
                    if empty:
                        raise TraceFormatError("empty file: no GlobalMetadata record", path=spath, rank=rank)
                    return
                nbytes += 1
                length |= (b[0] & 0x7F) << shift
                if b[0] < 0x80:
                    break
                shift += 7
                if shift > 35:
                    raise TraceFormatError("malformed record length prefix", byte_offset=prefix_at,
                                           last_good_node_id=last, path=spath, rank=rank)
            empty = False
            if length > limit:
                raise TraceFormatError(f"record of {length} bytes runs past the end of the file",
                                       byte_offset=prefix_at, last_good_node_id=last, path=spath, rank=rank)
            body = fh.read(length)
            offset += nbytes + length
            if len(body) != length:
                raise TraceFormatError(f"record of {length} bytes runs past the end of the file",
                                       byte_offset=prefix_at, last_good_node_id=last, path=spath, rank=rank)
            try:
                if index == 0:
                    pb.GlobalMetadata().ParseFromString(body)
                else:
                    if length == 0:
                        raise TraceFormatError("empty node record (zero length)", byte_offset=prefix_at,
                                               last_good_node_id=last, path=spath, rank=rank)
                    m = pb.Node()
                    m.ParseFromString(body)
                    try:
                        node = node_from_pb(m)
                    except TracekitError as exc:
                        raise exc.with_context(path=spath, rank=rank) from None
                    last = node.id
                    yield node
            except DecodeError as exc:
                raise TraceFormatError(f"undecodable message ({exc})", byte_offset=prefix_at,
                                       last_good_node_id=last, path=spath, rank=rank) from None
            index += 1


def encode_trace(trace: ExecutionTrace) -> bytes:
    """The `.et` bytes of ``trace`` (records copied when the trace is untouched).

    Raises:
        TracekitError: a node field holds a value protobuf cannot encode.
    """
    parts: list[bytes] = []
    meta_raw = getattr(trace, "_meta_raw", None)
    if meta_raw is not None and _meta_untouched(trace):
        parts.append(frame(meta_raw))
    else:
        parts.append(encode_metadata(trace.metadata, rank=trace.rank, path=trace.path))
    if trace._nodes is None:  # untouched since read: copy the records
        parts.extend(trace._encoded.raw_records())
    else:
        for node in trace._nodes:
            try:
                parts.append(frame(node_to_pb(node).SerializeToString()))
            except (TypeError, ValueError) as exc:
                raise TracekitError(f"cannot encode node: {exc}", node_id=node.id, rank=trace.rank,
                                    path=trace.path) from None
    return b"".join(parts)


def _meta_untouched(trace: ExecutionTrace) -> bool:
    raw = trace._meta_raw
    m = pb.GlobalMetadata()
    m.ParseFromString(raw)
    return metadata_from_pb(m) == trace.metadata


def write_trace(trace: ExecutionTrace, path: str | os.PathLike[str]) -> Path:
    """Write ``trace`` atomically; the format follows the suffix.

    ``.et`` (Chakra protobuf stream), ``.et.gz`` (gzip of it), ``.json``
    (tracekit JSON document, see :mod:`tracekit.jsonform`).

    Returns:
        The path written.

    Raises:
        TracekitError: the trace cannot be encoded (nothing is written).
    """
    p = Path(path)
    name = p.name
    if name.endswith(".json"):
        from tracekit.jsonform import dumps_trace

        write_bytes_atomic(p, dumps_trace(trace))
        return p
    data = encode_trace(trace)
    if name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6, mtime=0)
    write_bytes_atomic(p, data)
    return p


# ----------------------------------------------------------------------------- trace sets
def trace_paths(spec: "str | os.PathLike[str] | Sequence[str | os.PathLike[str]]") -> list[tuple[int, Path]]:
    """Resolve a trace-set spec to ``(rank, path)`` pairs sorted by rank.

    ``spec`` is a prefix (``dir/job`` -> ``dir/job.<rank>.et[.gz]``), a glob
    (``'dir/*.et'``), a directory (every ``*.<rank>.et[.gz]`` in it), a
    single file, or a sequence of these (what a shell glob expands to: each
    file's rank comes from its name).

    Raises:
        TraceFormatError: nothing matches, a name has no rank, or two files
            claim the same rank.
    """
    if isinstance(spec, (list, tuple)):
        return _trace_paths_of_many(spec)
    s = os.fspath(spec)
    p = Path(s)
    if any(ch in s for ch in "*?["):
        files = [Path(f) for f in _glob.glob(s)]
    elif p.is_dir():
        files = [f for f in p.iterdir() if _RANK_RE.search(f.name)]
    elif p.is_file():
        files = [p]
    else:
        files = [Path(f) for f in _glob.glob(_glob.escape(s) + ".*.et") + _glob.glob(_glob.escape(s) + ".*.et.gz")]
    files = [f for f in files if f.is_file()]
    if not files:
        raise TraceFormatError(f"no trace files match {s!r} (expected <prefix>.<rank>.et files)", path=s)
    pairs: dict[int, Path] = {}
    for f in files:
        r = rank_from_path(f.name)
        if r is None:
            if len(files) == 1:
                r = 0
            else:
                m = re.search(r"\.\d+(\.[^./]+(?:\.gz)?)$", f.name)
                if m:  # a rank, but another extension: say so (e.g. ASTRA-sim's twoComm.2.eg)
                    raise TraceFormatError(f"file name ends in {m.group(1)!r}, not '.et' or '.et.gz' (expected "
                                           f"<prefix>.<rank>.et)", path=f)
                raise TraceFormatError("file name has no rank (expected <prefix>.<rank>.et)", path=f)
        if r in pairs:
            raise TraceFormatError(f"two files for rank {r}: {pairs[r]} and {f}", path=s)
        pairs[r] = f
        note_input(f)
    return sorted(pairs.items())


def _trace_paths_of_many(specs: Sequence[str | os.PathLike[str]]) -> list[tuple[int, Path]]:
    if len(specs) == 1:
        return trace_paths(specs[0])
    if not specs:
        raise TraceFormatError("no trace files given")
    pairs: dict[int, Path] = {}
    for item in specs:
        p = Path(os.fspath(item))
        if p.is_file():
            r = rank_from_path(p.name)
            if r is None:
                raise TraceFormatError("file name has no rank (expected <prefix>.<rank>.et)", path=p)
            found = [(r, p)]
            note_input(p)
        else:
            found = trace_paths(item)
        for r, f in found:
            if r in pairs and pairs[r] != f:
                raise TraceFormatError(f"two files for rank {r}: {pairs[r]} and {f}", path=f)
            pairs[r] = f
    return sorted(pairs.items())


def read_traceset(spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]):
    """Read all ranks of a job (see :func:`trace_paths` for ``spec``).

    Returns:
        A :class:`tracekit.traceset.TraceSet`.

    Raises:
        TraceFormatError: as :func:`trace_paths` and :func:`read_trace`.
    """
    from tracekit.classset import find_class_set
    from tracekit.traceset import TraceSet

    classes = find_class_set(spec)
    if classes is not None:  # a job stored as rank classes (tracekit.classset)
        return classes.to_traceset()
    pairs = trace_paths(spec)
    traces = {rank: read_trace(path, rank=rank) for rank, path in pairs}
    return TraceSet(traces)


_GROUPS_KEY = -1  # TraceSetWriter._temps key of the comm-group file


class TraceSetWriter:
    """Writes the ``<prefix>.<rank>.et[.gz]`` files of one trace set as a unit.

    Each rank goes to a temporary file in the target folder; when the
    ``with`` block ends without error, the prefix is checked and every file is
    renamed into place.  On any exception (an encoding error, Ctrl-C) every
    temporary file is removed and no output file is touched.  The check
    refuses a prefix that already holds rank files this set would not
    replace (ranks from an earlier, larger job, or the same rank with the
    other suffix), since reading the prefix back would mix them in.

    Usage::

        with TraceSetWriter("out/job") as w:
            for rank, data in encoded_ranks:
                w.add(rank, data)
        w.paths  # written, in rank order

    Beside the rank files it writes ``<prefix>.comm_groups.json``, ASTRA-sim's
    ``--comm-group-configuration`` file (``{"<id>": [ranks]}``; ``{}`` when the
    set has no sub-groups): set :attr:`comm_groups` to the document (see
    :func:`tracekit.astra_compat.comm_groups_document`) before the block ends.

    Raises:
        TracekitError: the prefix holds other rank files, or an output is an
            input of the running command.
    """

    def __init__(self, prefix: str | os.PathLike[str], *, compress: bool = False,
                 comm_groups: dict | None = None) -> None:
        self.prefix = os.fspath(prefix)
        self.suffix = ".et.gz" if compress else ".et"
        self._temps: dict[int, str] = {}
        self.paths: list[Path] = []
        self.comm_groups: dict | None = comm_groups
        self.comm_groups_path: Path | None = None
        self._lock_fd: int | None = None
        self._lock_path: Path | None = None
        self._created: list[Path] = []  # folders this writer made (removed again when the write fails)

    def target(self, rank: int) -> Path:
        return Path(f"{self.prefix}.{rank}{self.suffix}")

    def _final(self, rank: int) -> Path:
        """The file the rank's output replaces: symlinks followed; a device or FIFO is refused."""
        target, through = output_target(self.target(rank))
        if through:
            raise TracekitError("is not a regular file: a trace set is written as files (renamed into place); "
                                "choose another prefix", path=self.target(rank))
        return target

    def _lock(self) -> None:
        """Take the prefix's lock (``.<name>.tk-lock`` beside the rank files) for the life of the writer."""
        if self._lock_fd is not None:
            return
        base = Path(self.prefix)
        self._created += make_parents(base.parent if str(base.parent) else Path("."))
        lock_path = base.parent / f".{base.name}.tk-lock"
        while True:
            with _signals_deferred():  # the lock file and the record of it come together
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666 & ~_UMASK)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    raise TracekitError("another tracekit command is writing this output prefix right now "
                                        f"(lock {lock_path.name} is held); wait for it or choose another prefix",
                                        path=self.prefix) from None
                try:
                    same = os.fstat(fd).st_ino == os.stat(lock_path).st_ino
                except FileNotFoundError:
                    same = False
                if same:  # not a lock file its previous holder unlinked after we opened it
                    self._lock_fd, self._lock_path = fd, lock_path
                    return
                os.close(fd)

    def _unlock(self) -> None:
        if self._lock_fd is None:
            return
        with _signals_deferred():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._lock_path)
            os.close(self._lock_fd)
            self._lock_fd = None

    def reserve(self, rank: int) -> Path:
        """A temporary path for ``rank`` that an external writer fills (renamed at the end)."""
        if rank in self._temps:
            raise TracekitError(f"rank {rank} written twice", path=self.prefix)
        self._lock()
        target = self._final(rank)
        check_output(target)
        self._created += make_parents(target.parent)
        with _signals_deferred():
            fd, tmp = _new_temp(target.parent)
            self._temps[rank] = tmp
        os.close(fd)
        return Path(tmp)

    def add(self, rank: int, data: bytes) -> None:
        """Write one rank's encoded trace (``.et`` bytes; compressed here when the writer compresses)."""
        tmp = self.reserve(rank)
        if self.suffix == ".et.gz":
            data = gzip.compress(data, compresslevel=6, mtime=0)
        with open(tmp, "wb") as fh:
            fh.write(data)

    def _conflicts(self) -> list[str]:
        base = Path(self.prefix)
        folder = base.parent if str(base.parent) else Path(".")
        if not folder.is_dir():
            return []
        out = []
        stem = _glob.escape(base.name)
        for other in _glob.glob(os.path.join(_glob.escape(str(folder)), stem + ".*.et")) + \
                _glob.glob(os.path.join(_glob.escape(str(folder)), stem + ".*.et.gz")):
            name = os.path.basename(other)
            rest = name[len(base.name) + 1:]
            rank_text, _, suffix = rest.partition(".")
            if not rank_text.isdigit():
                continue
            if int(rank_text) not in self._temps or "." + suffix != self.suffix:
                out.append(name)
        return sorted(out)

    def __enter__(self) -> "TraceSetWriter":
        self._lock()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                conflicts = self._conflicts()
                if conflicts:
                    shown = ", ".join(conflicts[:6]) + (" ..." if len(conflicts) > 6 else "")
                    raise TracekitError(f"the output prefix already holds rank files this trace set would not "
                                        f"replace ({shown}); reading it back would mix them in: remove them "
                                        f"or choose another prefix", path=self.prefix)
                for rank in sorted(self._temps):  # inputs may have been read after reserve()
                    check_output(self.target(rank))
                groups_target = Path(f"{self.prefix}.comm_groups.json")
                check_output(groups_target)
                with _signals_deferred():  # removed with the rank temps on error
                    fd, groups_tmp = _new_temp(groups_target.parent)
                    self._temps[_GROUPS_KEY] = groups_tmp
                with os.fdopen(fd, "wb") as fh:
                    fh.write(orjson.dumps(self.comm_groups or {}, option=orjson.OPT_INDENT_2) + b"\n")
                for rank in sorted(r for r in self._temps if r != _GROUPS_KEY):
                    os.replace(self._temps[rank], self._final(rank))
                    self.paths.append(self.target(rank))
                os.replace(groups_tmp, groups_target)
                self.comm_groups_path = groups_target
                self._temps.clear()
        finally:
            for tmp in self._temps.values():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            self._temps.clear()
            self._unlock()
            if not self.paths:
                remove_if_empty(self._created)


def write_traceset(traceset, prefix: str | os.PathLike[str], *, compress: bool = False) -> list[Path]:
    """Write ``<prefix>.<rank>.et`` (``.et.gz`` with ``compress``) for every rank, as a unit.

    See :class:`TraceSetWriter`: an error or interrupt leaves no output file
    and no temporary file; a prefix holding other rank files is refused.

    Every trace is made runnable by ASTRA-sim on the way
    (:func:`tracekit.astra_compat.astra_ready`: no ``pg_name`` on all-ranks
    communication, positive integer ids for the other groups, METADATA nodes
    marked ``is_cpu_op``) and ``<prefix>.comm_groups.json`` lists the groups.

    Returns:
        The paths written, in rank order.
    """
    from tracekit.astra_compat import astra_group_ids, astra_ready, comm_groups_document

    groups = traceset.process_groups
    ids = astra_group_ids(groups, traceset.world_size)
    with TraceSetWriter(prefix, compress=compress) as writer:
        for rank, trace in traceset.items():
            writer.add(rank, encode_trace(astra_ready(trace, ids)))
        writer.comm_groups = comm_groups_document(groups, ids)
    return writer.paths


__all__ = [
    "TraceSetWriter", "atomic_output", "check_output", "encode_metadata", "note_input", "protect_inputs",
    "read_input_bytes", "encode_node", "encode_trace", "frame", "iter_nodes", "read_metadata", "rank_from_path", "read_trace",
    "read_traceset", "split_records", "trace_from_bytes", "trace_paths", "write_bytes_atomic",
    "write_trace", "write_traceset", "Metadata",
]
