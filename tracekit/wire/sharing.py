"""One column table for ranks with identical nodes (issue 34: work per distinct program, not per rank).

Data-parallel jobs run the same program on every rank (or on every rank of a node): their rank files differ in
nothing but their names, and a set built in memory repeats the same nodes.  :func:`share_identical_columns` finds
the traces of a set whose nodes and metadata are identical, builds the columns of one of them and gives the
others the same :class:`~tracekit.model.graph.NodeColumns` object, so decoding and every table derived from the
columns (the communication table, kept attributes) is done once per distinct program.  Callers that cache
per-rank work by columns identity (:func:`columns_key`) then do that work once per distinct program too.

Identity is exact, never a lossy summary.  Traces read from files: a BLAKE2b digest (``hashlib``) of the span of
the node records groups candidates, then the record boundaries and the metadata are compared exactly.  Traces
whose nodes are in memory: the same node count and metadata, then the node sequences compared element by element
-- the same object (at C speed), or a :class:`~tracekit.model.Node` whose every field has the same type and value
(so ``1`` and ``True``, equal in Python, are not taken for one another); more than one node in
:data:`MAX_UNSHARED_FRACTION` of them being other objects ends the comparison (sharing would not pay).
"""

from __future__ import annotations

import hashlib
import operator
from itertools import compress
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from tracekit.model import Node

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace


#: nodes compared by value at most one in this many (others must be the very objects of the representative)
MAX_UNSHARED_FRACTION = 8


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
    if not same_metadata(a, b):
        return False
    if not len(ea.starts):
        return True
    sa, sb = int(ea.starts[0]), int(eb.starts[0])
    return bool(np.array_equal(ea.starts - sa, eb.starts - sb) and np.array_equal(ea.ends - sa, eb.ends - sb))


def _strictly_equal(a: Any, b: Any) -> bool:
    """``a == b`` with the same type at every level (tuples, :class:`Node` and :class:`Attr` field by field)."""
    if a is b:
        return True
    if a.__class__ is not b.__class__:
        return False
    if isinstance(a, tuple):
        if isinstance(a, Node) and a.__class__ is not Node:  # a view over another file's columns: fields lazy
            return False
        return len(a) == len(b) and all(map(_strictly_equal, a, b))
    return bool(a == b)


def same_metadata(a: "ExecutionTrace", b: "ExecutionTrace") -> bool:
    """The two traces' metadata have the same version and attributes, value types included."""
    ma, mb = a.metadata, b.metadata
    return ma is mb or (ma.version == mb.version and _strictly_equal(tuple(ma.attrs), tuple(mb.attrs)))


def _same_nodes(a: "ExecutionTrace", b: "ExecutionTrace") -> bool:
    """Both hold their nodes in memory, with the same metadata and node by node the same values (module doc)."""
    na, nb = getattr(a, "_nodes", None), getattr(b, "_nodes", None)
    if na is None or nb is None or len(na) != len(nb) or not same_metadata(a, b):
        return False
    other = list(compress(range(len(na)), map(operator.is_not, na, nb)))
    if len(other) * MAX_UNSHARED_FRACTION > len(na):
        return False
    return all(_strictly_equal(na[i], nb[i]) for i in other)


def _key(trace: "ExecutionTrace") -> tuple[Any, ...] | None:
    """The group of candidates a trace's representative is looked for in (None: never shared)."""
    encoded = _records(trace)
    if encoded is not None:
        return ("file", *_digest(encoded))
    nodes = getattr(trace, "_nodes", None)
    return ("memory", len(nodes)) if nodes else None


def share_identical_columns(traces: Iterable["ExecutionTrace"]) -> int:
    """Give every trace the columns of the first trace with identical nodes and metadata (module doc).

    A trace that has built its columns or graph already keeps them (and may serve as the shared one).

    Returns:
        The number of distinct programs among the traces (empty ones aside).

    Raises:
        TraceFormatError: a representative's records cannot be decoded (as its first column read would).
    """
    reps: dict[tuple[Any, ...], list["ExecutionTrace"]] = {}
    for trace in traces:
        key = _key(trace)
        if key is None:
            continue
        group = reps.setdefault(key, [])
        same = _same if key[0] == "file" else _same_nodes
        rep = next((r for r in group[-MAX_UNSHARED_FRACTION:] if same(r, trace)), None)
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
