"""Loading the JSON files PyTorch writes: ``.json``, ``.json.gz`` and ``.tar.gz``.

One job: turn a path into a parsed JSON document, or raise one clear
:class:`~tracekit.errors.TraceFormatError` naming the file, the line and
column and what is wrong there.  Parsing uses orjson (strict RFC 8259: bare
``NaN``/``Infinity`` tokens and trailing commas are rejected, which is what we
want -- a silently accepted ``NaN`` becomes a plausible-looking wrong trace).

A ``.tar.gz`` archive must hold exactly one ``.json`` member (the PARAM
repository ships ``hf_GPT2_et.json.tar.gz`` that way).
"""

from __future__ import annotations

import io
import os
import tarfile
import zlib
from pathlib import Path
from typing import Any

import orjson

from tracekit.errors import TraceFormatError

_BAD_TOKENS = ("NaN", "nan", "-nan", "Infinity", "-Infinity", "inf", "-inf")


def read_json_bytes(path: str | os.PathLike[str]) -> bytes:
    """The (decompressed) JSON text of ``path`` as bytes.

    Raises:
        TraceFormatError: corrupt gzip/tar data, an archive without exactly one
            ``.json`` member, decompressed data over the limits of
            :func:`tracekit.io.decompression_limits` (bytes, ratio), or an empty file.
        OSError: the file cannot be opened.
    """
    p = Path(path)
    name = p.name.lower()
    from tracekit.io import decompression_limits, gunzip_limited, read_input_bytes

    raw = read_input_bytes(p)
    try:
        if name.endswith((".tar.gz", ".tgz", ".tar")):
            with tarfile.open(fileobj=io.BytesIO(raw), mode="r:*") as tar:
                members = [m for m in tar.getmembers() if m.isfile() and m.name.lower().endswith(".json")]
                if len(members) != 1:
                    listed = ", ".join(m.name for m in members) or "none"
                    raise TraceFormatError(f"archive must hold exactly one .json member, found {listed}", path=p)
                max_bytes = decompression_limits()[0]
                if members[0].size > max_bytes:
                    raise TraceFormatError(
                        f"archive member {members[0].name} holds {members[0].size:,} bytes, "
                        f"more than {max_bytes:,} (limit: set TRACEKIT_MAX_DECOMPRESSED_BYTES "
                        f"to raise it)",
                        path=p,
                    )
                fh = tar.extractfile(members[0])
                data = fh.read() if fh is not None else b""
        elif name.endswith(".gz") or raw[:2] == b"\x1f\x8b":
            data = gunzip_limited(raw, path=p)
        else:
            data = raw
    except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise TraceFormatError(f"cannot decompress: {exc}", path=p) from None
    if not data.strip():
        raise TraceFormatError("file is empty", path=p)
    return data


def _line_col(data: bytes, pos: int) -> tuple[int, int]:
    line = data.count(b"\n", 0, pos) + 1
    col = pos - (data.rfind(b"\n", 0, pos) + 1) + 1
    return line, col


def _explain(data: bytes, pos: int, msg: str) -> str:
    """A human explanation of an orjson error at byte ``pos``."""
    rest = data[pos : pos + 12].lstrip()
    head = rest.decode("utf-8", "replace")
    for token in _BAD_TOKENS:
        if head.startswith(token):
            return f"bare {token!r} token (NaN/Infinity are not valid JSON numbers)"
    if pos >= len(data.rstrip()):
        return "unexpected end of file (truncated JSON?)"
    if "trailing comma" in msg:
        return "trailing comma"
    if "expected ','" in msg:
        return f"missing comma before {head[:10]!r}"
    return f"{msg} near {head[:10]!r}"


def parse_json_bytes(data: bytes, *, path: str | os.PathLike[str] | None = None) -> Any:
    """Parse JSON ``data`` with orjson.

    Raises:
        TraceFormatError: invalid JSON, naming line, column and the cause
            (trailing comma, missing comma, truncation, bare NaN/Infinity).
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        pos = min(getattr(exc, "pos", 0) or 0, len(data))
        line, col = _line_col(data, pos)
        why = _explain(data, pos, getattr(exc, "msg", str(exc)))
        raise TraceFormatError(f"invalid JSON at line {line} column {col}: {why}", path=path) from None


def load_json(path: str | os.PathLike[str]) -> Any:
    """Read and parse a ``.json``, ``.json.gz`` or ``.tar.gz`` JSON file.

    Raises:
        TraceFormatError: corrupt compression or invalid JSON (see
            :func:`parse_json_bytes`).
        OSError: the file cannot be opened.
    """
    return parse_json_bytes(read_json_bytes(path), path=path)
