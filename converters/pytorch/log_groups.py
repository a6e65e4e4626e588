"""The converter's log lines of many ranks, grouped: one warning line per distinct text, naming the ranks.

Ranks convert in worker processes, each logging its own findings (``et_rank0.json: 1 host op(s) overlap ...``);
a job of 64 ranks with the same finding printed it 64 times.  :func:`collected_log` keeps the records of one
rank's conversion (``tracekit.converters`` loggers) instead of emitting them; :func:`emit_grouped` logs them in
the parent once the ranks are done: warnings whose text (after the rank's own file name) is the same on several
ranks become one line naming the files and the ranks, other records are logged as they were.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Iterator, Sequence

#: The loggers whose records are collected (every converter module logs under it).
LOGGER = "tracekit.converters"


@dataclass(frozen=True)
class LogLine:
    """One collected record: level, logger name and the formatted message (picklable)."""

    level: int
    logger: str
    message: str


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.lines: list[LogLine] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(LogLine(record.levelno, record.name, record.getMessage()))


@contextlib.contextmanager
def collected_log() -> Iterator[list[LogLine]]:
    """Collect the records of the converter loggers logged inside the block, instead of emitting them.

    Yields:
        The list the records are appended to (as :class:`LogLine`).
    """
    logger = logging.getLogger(LOGGER)
    handler = _Collect()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def rank_list(ranks: Sequence[int]) -> str:
    """``0-3, 6, 8, 9`` for ranks 0, 1, 2, 3, 6, 8, 9 (sorted; runs of three or more as ranges)."""
    out: list[str] = []
    rs = sorted(set(ranks))
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        if j - i >= 2:
            out.append(f"{rs[i]}-{rs[j]}")
        else:
            out += [str(r) for r in rs[i : j + 1]]
        i = j + 1
    return ", ".join(out)


def emit_grouped(per_rank: Sequence[tuple[int, str, Sequence[LogLine]]]) -> None:
    """Log the records of several ranks' conversions: identical warnings once, naming files and ranks.

    Args:
        per_rank: ``(rank, file, records)`` per converted rank; a warning's leading ``"<file>: "`` is its
            rank's prefix and is left out when comparing texts.

    A text found on one rank is logged as it was; on several: ``"<first file> ... <last file>: ranks 0-3: <text>"``
    (files in rank order), at the place of its first occurrence.
    """
    groups: dict[tuple[int, str, str], list[tuple[int, str, str]]] = {}
    for rank, path, lines in sorted(per_rank, key=lambda item: item[0]):
        for line in lines:
            if line.level < logging.WARNING:
                logging.getLogger(line.logger).log(line.level, line.message)
                continue
            text = line.message
            if path and text.startswith(f"{path}: "):
                text = text[len(path) + 2 :]
            groups.setdefault((line.level, line.logger, text), []).append((rank, path, line.message))
    for (level, name, text), where in groups.items():
        if len(where) == 1:
            message = where[0][2]
        else:
            first, last = where[0][1], where[-1][1]
            message = f"{first} ... {last}: ranks {rank_list([r for r, _, _ in where])}: {text}"
        logging.getLogger(name).log(level, message)
