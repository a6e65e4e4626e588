"""One column table for ranks with identical nodes (issue 34: work per distinct program, not per rank).

Data-parallel jobs run the same program on every rank (or on every rank of a node): their rank files differ in
nothing but their names, and a set built in memory repeats the same nodes.  :func:`share_identical_columns` finds
the traces of a set whose nodes and metadata are identical, builds the columns of one of them and gives the
others the same :class:`~tracekit.model.graph.NodeColumns` object, so decoding and every table derived from the
columns (the communication table, kept attributes) is done once per distinct program.  Callers that cache
per-rank work by columns identity (:func:`columns_key`) then do that work once per distinct program too.

Identity is exact, never a lossy summary.  Traces read from files: the record count, the length of the records'
span and its first and last :data:`SAMPLE_BYTES` group candidates, then the records' bytes (one ``memcmp``, no
hash: a hash of every byte cost 4-20x more), their boundaries and the metadata are compared exactly.  Traces
whose nodes are in memory: the same node count and metadata, then the node sequences compared element by element
-- the same object (at C speed), or a :class:`~tracekit.model.Node` whose every field has the same type and value
(so ``1`` and ``True``, equal in Python, are not taken for one another); more than one node in
:data:`MAX_UNSHARED_FRACTION` of them being other objects ends the comparison (sharing would not pay).
"""

from __future__ import annotations

import operator
from itertools import compress, islice
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from tracekit.model import Node

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace


#: nodes compared by value at most one in this many (others must be the very objects of the representative); also
#: how many representatives of one candidate group a trace is compared with
MAX_UNSHARED_FRACTION = 8
#: bytes at each end of a file's records that pick its candidates
SAMPLE_BYTES = 4096


def _records(trace: "ExecutionTrace") -> Any:
    """The trace's :class:`~tracekit.wire.framing.EncodedNodes` when it is untouched since read, else None."""
    encoded = getattr(trace, "_encoded", None)
    return encoded if getattr(trace, "_nodes", True) is None else None


def _span(encoded: Any) -> tuple[int, int]:
    """``[lo, hi)``: the bytes from the first node record to the end of the last."""
    return (int(encoded.starts[0]), int(encoded.ends[-1])) if len(encoded.starts) else (0, 0)


def _file_key(encoded: Any) -> tuple[Any, ...] | None:
    """Record count, span length and the span's first and last :data:`SAMPLE_BYTES` (candidates, not proof);
    None for records not held as ``bytes`` (a rewrite's buffer: never shared)."""
    data = encoded.data
    if not isinstance(data, bytes):
        return None
    lo, hi = _span(encoded)
    return (
        "file",
        len(encoded.starts),
        hi - lo,
        data[lo : min(hi, lo + SAMPLE_BYTES)],
        data[max(lo, hi - SAMPLE_BYTES) : hi],
    )


def _same(a: "ExecutionTrace", b: "ExecutionTrace") -> bool:
    """Exact: the same record bytes, record boundaries (relative to the first record) and metadata."""
    ea, eb = _records(a), _records(b)
    if ea is eb:  # relabelled copies of one trace (with_label: a class set's members)
        return same_metadata(a, b)
    (la, ha), (lb, hb) = _span(ea), _span(eb)
    if ha - la != hb - lb or not same_metadata(a, b):
        return False
    if not ea.data.startswith(memoryview(eb.data)[lb:hb], la):  # a memcmp: no copy, no hash
        return False
    return bool(np.array_equal(ea.starts - la, eb.starts - lb) and np.array_equal(ea.ends - la, eb.ends - lb))


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
    limit = len(na) // MAX_UNSHARED_FRACTION
    other = list(islice(compress(range(len(na)), map(operator.is_not, na, nb)), limit + 1))
    if len(other) > limit:  # stops at the first node past the limit
        return False
    return all(_strictly_equal(na[i], nb[i]) for i in other)


def _key(trace: "ExecutionTrace") -> tuple[Any, ...] | None:
    """The group of candidates a trace's representative is looked for in (None: never shared)."""
    encoded = _records(trace)
    if encoded is not None:
        return _file_key(encoded)
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
