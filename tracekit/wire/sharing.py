"""One column table for rank files whose node records are byte-identical (issue 34: work per distinct program).

Data-parallel jobs write the same program on every rank (or on every rank of a node): their rank files differ in
nothing but their names.  :func:`share_identical_columns` finds the traces of a set read from files whose node
records and metadata are the same bytes, decodes one of them and gives the others the same
:class:`~tracekit.model.graph.NodeColumns` object, so decoding and every table derived from the columns (the
communication table, kept attributes) is done once per distinct program.  Callers that cache per-rank work by
columns identity (:func:`columns_key`) then do that work once per distinct program too.

Identity is decided on bytes, never on a lossy summary: a BLAKE2b digest (``hashlib``) of the span of the node
records groups candidates, then the record boundaries and the metadata are compared exactly.  Traces whose nodes
live in memory (built, not read) are left as they are.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace


def _records(trace: "ExecutionTrace") -> Any:
    """The trace's :class:`~tracekit.wire.framing.EncodedNodes` when it is untouched since read, else None."""
    encoded = getattr(trace, "_encoded", None)
    return encoded if getattr(trace, "_nodes", True) is None else None


def _digest(encoded: Any) -> tuple[bytes, int]:
    """``(BLAKE2b-128 of the bytes from the first record to the last, record count)``."""
    n = len(encoded.starts)
    lo, hi = (int(encoded.starts[0]), int(encoded.ends[-1])) if n else (0, 0)
    return hashlib.blake2b(memoryview(encoded.data)[lo:hi], digest_size=16).digest(), n


def _same(a: "ExecutionTrace", b: "ExecutionTrace") -> bool:
    """Exact: the same metadata and record boundaries relative to the first record (the bytes' digest agreed)."""
    ea, eb = _records(a), _records(b)
    if a.metadata != b.metadata:
        return False
    if not len(ea.starts):
        return True
    sa, sb = int(ea.starts[0]), int(eb.starts[0])
    return bool(np.array_equal(ea.starts - sa, eb.starts - sb) and np.array_equal(ea.ends - sa, eb.ends - sb))


def share_identical_columns(traces: Iterable["ExecutionTrace"]) -> int:
    """Give every trace read from a file the columns of the first trace with byte-identical records and metadata.

    A trace that has built its columns or graph already keeps them (and may serve as the shared one).

    Returns:
        The number of distinct programs among the traces read from files.

    Raises:
        TraceFormatError: a representative's records cannot be decoded (as its first column read would).
    """
    reps: dict[tuple[bytes, int], list["ExecutionTrace"]] = {}
    for trace in traces:
        encoded = _records(trace)
        if encoded is None:
            continue
        group = reps.setdefault(_digest(encoded), [])
        rep = next((r for r in group if _same(r, trace)), None)
        if rep is None:
            group.append(trace)
        elif trace is not rep:
            trace._adopt_columns(rep.columns())
    return sum(len(g) for g in reps.values())


def columns_key(trace: "ExecutionTrace") -> int:
    """A key equal for two traces of one job exactly when they share one columns object (same nodes).

    For caches of per-rank work that reads only the columns (the rank and path label findings and errors
    only; work that reads the metadata compares it too): valid while the traces are alive.
    """
    return id(trace.columns())
