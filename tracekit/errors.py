"""The one exception hierarchy of tracekit.

Every failure caused by input (a file, a parameter, a spec) is raised as a
subclass of :class:`TracekitError`.  Each carries, where known, the file path,
the rank and the node id it is about, and renders as one line::

    traces/job.3.et: rank 3: node 412: data dep 9999 does not exist

The CLI prints that line and exits with code 1; ``--debug`` shows the
traceback.  Errors are raised once, never logged and then raised.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any, Literal


class TracekitError(Exception):
    """Base of all tracekit errors.

    Args:
        message: what is wrong, naming the bad value.
        path: the file the problem is in, if any.
        rank: the rank (trace file) the problem is in, if any.
        node_id: the node the problem is about, if any.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | os.PathLike[str] | None = None,
        rank: int | None = None,
        node_id: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = os.fspath(path) if path is not None else None
        self.rank = rank
        self.node_id = node_id

    def where(self) -> str:
        """The location prefix (``path: rank R: node N``), possibly empty."""
        parts = []
        if self.path is not None:
            parts.append(self.path)
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        if self.node_id is not None:
            parts.append(f"node {self.node_id}")
        return ": ".join(parts)

    def with_context(self, **context: Any) -> "TracekitError":
        """Fill in location fields that are still unknown; returns ``self``."""
        for key in ("path", "rank", "node_id"):
            value = context.get(key)
            if value is not None and getattr(self, key) is None:
                setattr(self, key, os.fspath(value) if key == "path" else value)
        return self

    def __str__(self) -> str:
        where = self.where()
        return f"{where}: {self.message}" if where else self.message


class TraceFormatError(TracekitError):
    """A trace file cannot be decoded (truncated, corrupt, not a trace).

    Attributes:
        byte_offset: offset in the (decompressed) file where decoding failed, bytes, if known;
            the message then ends with ``(at byte N[, after node M])``.
        last_good_node_id: id of the last node decoded before the failure, if any.
    """

    def __init__(
        self, message: str, *, byte_offset: int | None = None, last_good_node_id: int | None = None, **context: Any
    ) -> None:
        if byte_offset is not None:
            message = f"{message} (at byte {byte_offset}"
            if last_good_node_id is not None:
                message += f", after node {last_good_node_id}"
            message += ")"
        super().__init__(message, **context)
        self.byte_offset = byte_offset
        self.last_good_node_id = last_good_node_id


class ValidationError(TracekitError):
    """A trace or trace set breaks a structural rule (see tracekit.checks.validate)."""


class ConversionError(TracekitError):
    """A producer (PyTorch, Kineto, text workload) cannot convert its input."""


class ConfigError(TracekitError):
    """A parameter, generator configuration or pipeline file is invalid."""


class SpecError(TracekitError):
    """A hardware spec is invalid or disagrees with the trace set."""


class TransformError(TracekitError):
    """A transform cannot apply to the given trace(s)."""


class ReplayError(TracekitError):
    """The replay cannot run or cannot finish."""


class DeadlockError(ReplayError):
    """The replay stalled: work is left and nothing can run.

    Attributes:
        blocked: per rank, a human-readable description of the node it is
            blocked on and what that node waits for.
    """

    def __init__(self, message: str, *, blocked: dict[int, str] | None = None, **context: Any) -> None:
        super().__init__(message, **context)
        self.blocked = dict(blocked or {})


# Exceptions that code walking a parsed document raises when the document has an unexpected shape
# (a list where an object belongs, an unhashable key, nesting deeper than the recursion limit).
_SHAPE_ERRORS = (TypeError, ValueError, KeyError, AttributeError, IndexError, RecursionError)


class malformed_input:  # noqa: N801 - used as a context manager, reads like one
    """Turn a shape error raised while reading one input document into a one-line error of ``error``.

    The input readers check the fields they know by name; this guard covers
    the rest of the document walk, so a structure no check anticipated still
    gives ``<path>: malformed <what>: <exception>`` (exit code 1) instead of a
    traceback.  The original exception stays chained (``--debug`` shows it).
    """

    def __init__(self, what: str, path: str | os.PathLike[str] | None, error: type[TracekitError] = TracekitError):
        self.what, self.path, self.error = what, path, error

    def __enter__(self) -> "malformed_input":
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        if exc is not None and isinstance(exc, _SHAPE_ERRORS) and not isinstance(exc, TracekitError):
            text = str(exc) or type(exc).__name__
            raise self.error(f"malformed {self.what}: {type(exc).__name__}: {text}"[:300], path=self.path) from exc
        return False
