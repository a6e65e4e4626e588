"""The ASTRA-sim 1.0 text workload format: its tokens and columns, the parsed values, and the parser.

The format, its sources and how each parallelism is scheduled are described in
:mod:`tracekit.converters.text_workload` (which converts the parsed workload and re-exports these names).
Bad input raises :class:`~tracekit.errors.ConversionError` naming the file and line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Sequence

from tracekit.errors import ConversionError
from tracekit.model import CollectiveType

COMM_TOKENS: dict[str, CollectiveType | None] = {
    "ALLREDUCE": CollectiveType.ALL_REDUCE,
    "ALLGATHER": CollectiveType.ALL_GATHER,
    "ALLTOALL": CollectiveType.ALL_TO_ALL,
    "REDUCESCATTER": CollectiveType.REDUCE_SCATTER,
    "ALLREDUCEALLTOALL": None,  # ASTRA-sim only; no Chakra collective type
}
NONE_TOKEN = "NONE"
PARALLELISMS = (
    "DATA",
    "MODEL",
    "HYBRID_DATA_MODEL",
    "HYBRID_MODEL_DATA",
    "HYBRID_DLRM",
    "HYBRID_DLRM_ENHANCED",
    "HYBRID_TRANSFORMER",
    "MICRO",
)
TIME_UNITS_NS = {"ns": 1, "cycles": 1, "us": 1000}
LAYER_COLUMNS = 12
_COLUMN_NAMES = (
    "name",
    "reserved",
    "fwd compute time",
    "fwd comm type",
    "fwd comm size",
    "ig compute time",
    "ig comm type",
    "ig comm size",
    "wg compute time",
    "wg comm type",
    "wg comm size",
    "update time",
)


@dataclass(frozen=True)
class Comm:
    """One collective column triple: the file's word, its type and bytes per rank."""

    token: str
    comm_type: CollectiveType | None
    comm_bytes: int


@dataclass(frozen=True)
class TextLayer:
    """One layer line; times in the file's unit (us by default, see :func:`convert_text_workload`), ``None`` comm for ``NONE``.

    Attributes:
        name: the layer's name (column 1).
        line: its line number in the file (1-based, for messages).
        reserved: column 2 (ASTRA-sim's reserved field; kept, not used).
        fwd_time, ig_time, wg_time: forward, input-gradient and weight-gradient compute times.
        fwd_comm, ig_comm, wg_comm: the collective after each pass, bytes per rank in :attr:`Comm.comm_bytes`.
        update_time: the weight update's compute time.
    """

    name: str
    line: int
    reserved: int
    fwd_time: int
    fwd_comm: Comm | None
    ig_time: int
    ig_comm: Comm | None
    wg_time: int
    wg_comm: Comm | None
    update_time: int


@dataclass(frozen=True)
class TextWorkload:
    """A parsed text workload.

    Attributes:
        path: the file (for messages).
        parallelism: the first word of line 1, e.g. ``DATA``.
        layers: the layer lines in file order.
        model_parallel_size: ``model_parallel_NPU_group`` of HYBRID_TRANSFORMER, else None.
        last_bottom_layer: the HYBRID_DLRM option, else None.
    """

    path: str
    parallelism: str
    layers: tuple[TextLayer, ...]
    model_parallel_size: int | None = None
    last_bottom_layer: int | None = None


# ----- parsing -------------------------------------------------------------------------


def line_error(path: str, line: int, message: str) -> ConversionError:
    """The error for ``message`` at 1-based ``line`` of workload file ``path`` (not raised: the caller raises it)."""
    return ConversionError(f"line {line}: {message}", path=path)


def _int(path: str, line: int, column: int, token: str, *, minimum: int | None = 0) -> int:
    if not re.fullmatch(r"[+-]?\d+", token):
        raise line_error(path, line, f"{_COLUMN_NAMES[column]} (column {column + 1}) must be an integer, got {token!r}")
    value = int(token)
    if minimum is not None and value < minimum:
        raise line_error(path, line, f"{_COLUMN_NAMES[column]} (column {column + 1}) must not be negative, got {value}")
    return value


def _comm(path: str, line: int, column: int, fields: Sequence[str]) -> Comm | None:
    token, size_token = fields[column], fields[column + 1]
    size = _int(path, line, column + 1, size_token)
    if token == NONE_TOKEN:
        if size != 0:
            raise line_error(
                path,
                line,
                f"{_COLUMN_NAMES[column]} is NONE but {_COLUMN_NAMES[column + 1]} is {size}; "
                "give a communication type or size 0",
            )
        return None
    if token not in COMM_TOKENS:
        known = ", ".join([*COMM_TOKENS, NONE_TOKEN])
        raise line_error(
            path,
            line,
            f"unknown communication type {token!r} in {_COLUMN_NAMES[column]} (column {column + 1}); known: {known}",
        )
    return Comm(token, COMM_TOKENS[token], size)


def _parse_layer(path: str, line: int, text: str) -> TextLayer:
    f = text.split()
    if len(f) != LAYER_COLUMNS:
        raise line_error(
            path,
            line,
            f"a layer line has {LAYER_COLUMNS} columns (name, reserved, then compute time, "
            f"comm type, comm size for fwd, ig and wg, then update time); found {len(f)}",
        )
    return TextLayer(
        name=f[0],
        line=line,
        reserved=_int(path, line, 1, f[1], minimum=None),
        fwd_time=_int(path, line, 2, f[2]),
        fwd_comm=_comm(path, line, 3, f),
        ig_time=_int(path, line, 5, f[5]),
        ig_comm=_comm(path, line, 6, f),
        wg_time=_int(path, line, 8, f[8]),
        wg_comm=_comm(path, line, 9, f),
        update_time=_int(path, line, 11, f[11]),
    )


def _parse_header(path: str, words: list[str]) -> tuple[str, int | None, int | None]:
    if not words:
        raise line_error(path, 1, f"empty first line; expected the parallelism, one of {', '.join(PARALLELISMS)}")
    kind, rest = words[0], words[1:]
    if kind not in PARALLELISMS:
        raise line_error(path, 1, f"unsupported parallelism {kind!r}; supported: {', '.join(PARALLELISMS)}")
    tp = bottom = None
    if kind == "HYBRID_TRANSFORMER":
        if len(rest) != 2 or rest[0] != "model_parallel_NPU_group:" or not rest[1].isdigit() or int(rest[1]) < 1:
            raise line_error(
                path,
                1,
                f"HYBRID_TRANSFORMER needs 'model_parallel_NPU_group: <positive int>' after it, got {' '.join(rest)!r}",
            )
        tp = int(rest[1])
    elif kind.startswith("HYBRID_DLRM"):
        if len(rest) != 1 or not rest[0].isdigit():
            raise line_error(
                path, 1, f"{kind} needs the index of the last bottom-MLP layer after it, got {' '.join(rest)!r}"
            )
        bottom = int(rest[0])
    elif rest:
        raise line_error(path, 1, f"unexpected words after {kind}: {' '.join(rest)!r}")
    return kind, tp, bottom


def parse_text_workload(text: str, *, path: str | os.PathLike[str] = "<text>") -> TextWorkload:
    """Parse the text of an ASTRA-sim workload.

    Raises:
        ConversionError: unsupported parallelism, bad header options, a layer
            count that disagrees with the layer lines, a line without 12
            columns, a non-integer or negative number, an unknown
            communication type; the message names the file and line.
    """
    path = os.fspath(path)
    lines = text.splitlines()
    kind, tp, bottom = _parse_header(path, lines[0].split() if lines else [])
    count_words = lines[1].split() if len(lines) > 1 else []
    if len(count_words) != 1 or not count_words[0].isdigit() or int(count_words[0]) < 1:
        raise line_error(path, 2, f"expected the number of layers (a positive integer), got {' '.join(count_words)!r}")
    n_layers = int(count_words[0])
    layers: list[TextLayer] = []
    for number, raw in enumerate(lines[2:], start=3):
        if not raw.strip():
            continue
        if len(layers) == n_layers:
            raise line_error(path, number, f"more layer lines than the {n_layers} announced on line 2")
        layers.append(_parse_layer(path, number, raw))
    if len(layers) != n_layers:
        raise line_error(path, 2, f"announces {n_layers} layers but the file has {len(layers)} layer lines")
    if bottom is not None and not 0 <= bottom <= n_layers - 2:
        raise line_error(
            path,
            1,
            f"{kind} last bottom layer {bottom} must be between 0 and {n_layers - 2} "
            f"(the layer after it issues the embedding's backward all-to-all)",
        )
    return TextWorkload(path, kind, tuple(layers), tp, bottom)


def read_text_workload(path: str | os.PathLike[str]) -> TextWorkload:
    """Read and parse a text workload file (see :func:`parse_text_workload`).

    Raises:
        ConversionError: the file is not valid UTF-8 text or not a valid workload.
        OSError: the file cannot be read.
    """
    from tracekit.io import read_input_bytes

    data = read_input_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConversionError(f"not a text file: {exc}", path=path) from None
    return parse_text_workload(text, path=path)
