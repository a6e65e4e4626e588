"""The per-rank checks of validation (module doc of :mod:`tracekit.checks.validate` lists them) and a rank's findings.

:func:`validate_trace` checks one trace; :func:`check_rank` keeps what the cross-rank pass needs of it
(:class:`RankFindings`: issues, collective order per group, declared groups), so a job is validated one
rank in memory at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from tracekit.model.attrs import COMM_DST, COMM_SIZE, COMM_SRC, COMM_TYPE, PG_NAME, as_int, as_str
from tracekit.errors import ValidationError
from tracekit.model.groups import shared_groups
from tracekit.model import MAX_DURATION_NS, MAX_TIME_NS, CollectiveType, ExecutionTrace, NodeType
from tracekit.sets.rendezvous import comm_table
from tracekit.checks.report import (
    ERROR,
    NO_COMM_SIZE,
    NO_COMM_TYPE,
    WARNING,
    Issue,
    ValidationReport,
    capped,
)

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model.graph import NodeColumns
    from tracekit.sets.traceset import TraceSet


def time_range_issues(cols: "NodeColumns", path: str | None, rank: int | None) -> list[Issue]:
    """``time-range`` errors: durations over MAX_DURATION_NS, start times over MAX_TIME_NS (column values
    saturate at 2^63-1 when the wire value does not fit int64)."""
    out = []
    for values, what, limit in (
        (cols.duration_ns, "duration", MAX_DURATION_NS),
        (cols.start_time_ns, "start time", MAX_TIME_NS),
    ):
        for p in np.flatnonzero(values > limit).tolist():
            v = int(values[p])
            shown = "more than 2^63-1 ns" if v >= 2**63 - 1 else f"{v:,} ns"
            out.append(
                Issue(
                    "time-range",
                    ERROR,
                    f"{what} {shown} is out of range (0 to {limit:,} ns)",
                    path,
                    rank,
                    int(cols.ids[p]),
                )
            )
    return out


def validate_trace(trace: ExecutionTrace) -> ValidationReport:
    """Run the per-trace checks (see module docstring).

    Raises:
        TraceFormatError: the trace's records cannot be decoded.
    """
    report = ValidationReport(checked_ranks=1, checked_nodes=len(trace))
    path, rank = trace.path, trace.rank
    cols = trace.columns()
    cols.verify()  # attribute framing (decoded lazily): a corrupt attribute is a format error
    graph = trace.graph()
    dup = [Issue("unique-ids", ERROR, f"duplicate node id {int(i)}", path, rank, int(i)) for i in graph.duplicate_ids]
    capped(report, dup, "unique-ids", path, rank)
    capped(report, _dangling(cols, graph, path, rank), "dangling-dep", path, rank)
    capped(report, _node_types(cols, path, rank), "node-type", path, rank)
    neg = [
        Issue(
            "negative-duration", ERROR, f"negative duration {int(cols.duration_ns[p])} ns", path, rank, int(cols.ids[p])
        )
        for p in np.flatnonzero(cols.duration_ns < 0).tolist()
    ]
    capped(report, neg, "negative-duration", path, rank)
    capped(report, time_range_issues(cols, path, rank), "time-range", path, rank)
    try:
        graph.topological_order()
    except ValidationError as exc:
        report.add(Issue("cycle", ERROR, exc.message, path, rank, exc.node_id))
    capped(report, _check_comm_attrs(trace), "comm-attrs", path, rank)
    return report


def _dangling(cols: Any, graph: Any, path: str | None, rank: int | None) -> list[Issue]:
    """``dangling-dep``: data deps on missing ids (errors), control deps on missing ids (warnings: simulators
    do not follow them)."""
    issues = [
        Issue("dangling-dep", ERROR, f"data dep {int(dep)} does not exist", path, rank, int(graph.ids[pos]))
        for pos, dep in graph.missing.tolist()
    ]
    if len(cols.ctrl_ids):
        owner = np.repeat(np.arange(len(cols)), np.diff(cols.ctrl_ptr))
        _, found = graph.positions_of(cols.ctrl_ids)
        for pos, dep in zip(owner[~found].tolist(), cols.ctrl_ids[~found].tolist()):
            issues.append(
                Issue("dangling-dep", WARNING, f"ctrl dep {dep} does not exist", path, rank, int(graph.ids[pos]))
            )
    return issues


def _node_types(cols: Any, path: str | None, rank: int | None) -> list[Issue]:
    """``node-type``: type numbers outside NodeType (the int16 column saturates: "or more"/"or less")."""
    out = []
    for p in np.flatnonzero((cols.types < 0) | (cols.types > max(NodeType))).tolist():
        t = int(cols.types[p])
        more = " or more" if t == 2**15 - 1 else " or less" if t == -(2**15) else ""
        out.append(Issue("node-type", ERROR, f"unknown node type {t}{more}", path, rank, int(cols.ids[p])))
    return out


def _check_comm_attrs(trace: ExecutionTrace) -> list[Issue]:
    """:func:`comm_issues` of every COMM node that may have one (a column pass finds them; most have none)."""
    cols = trace.columns()
    types = cols.types
    comm = (types >= NodeType.COMM_SEND_NODE) & (types <= NodeType.COMM_COLL_NODE)
    if not comm.any():
        return []
    has_size, size, size_ok = COMM_SIZE.column_or(cols, absent=0, bad=-1)
    has_type, ctype, type_ok = COMM_TYPE.column_or(cols, absent=0, bad=-1)
    coll = types == NodeType.COMM_COLL_NODE
    suspect = ~has_size | ~size_ok | (size < 0)
    suspect |= coll & (~has_type | ~type_ok | ~np.isin(ctype, list(CollectiveType._value2member_map_)))
    suspect |= ~coll & ~(COMM_SRC.present(cols) & COMM_DST.present(cols))
    try:
        PG_NAME.column(cols)
    except ValidationError:
        suspect[:] = True  # some pg_name is not text: the per-node rule finds which
    positions = np.flatnonzero(comm & suspect).tolist()
    raw = {key: key.raw(cols)[1] for key in COMM_CHECKED} if positions else {}
    issues: list[Issue] = []
    for p in positions:
        at_p: dict[str, Any] = {key: values[p] for key, values in raw.items()}
        issues += comm_issues(int(cols.ids[p]), int(types[p]), at_p.get, trace.path, trace.rank)
    return issues


#: the attributes :func:`comm_issues` reads
COMM_CHECKED = (COMM_SIZE, COMM_TYPE, PG_NAME, COMM_SRC, COMM_DST)


def comm_issues(
    node_id: int, node_type: int, get: Callable[[str], Any], path: str | None, rank: int | None
) -> list[Issue]:
    """The ``comm-attrs`` findings of one COMM node (the one copy: full and streaming validation call it).

    Each value is read by its field's rule (:mod:`tracekit.model.attrs`), as replay reads it: a missing
    ``comm_size``/``comm_type`` is a warning (read as 0 bytes / ALL_REDUCE, as ASTRA-sim and Chakra's feeder
    do); a value the rule rejects, a negative size, an unknown collective type, a ``pg_name`` that is not text
    and a send without ``comm_dst`` or a recv without ``comm_src`` (the peer) are errors.

    Args:
        node_id, node_type: the node's id and NodeType wire number (COMM_SEND, COMM_RECV or COMM_COLL).
        get: ``get(key)`` -> the stored value of attribute ``key`` (None when absent), for the keys in
            :data:`COMM_CHECKED`.
        path, rank: where the node is (for the issues' text).
    """
    out: list[Issue] = []
    errors: list[str] = []
    size = get(COMM_SIZE)
    if size is None:
        out.append(Issue("comm-attrs", WARNING, NO_COMM_SIZE, path, rank, node_id))
    elif _int_or_none(COMM_SIZE, size) is None or size < 0:
        errors.append(f"comm_size must be a non-negative integer (bytes), got {size!r}")
    pg = get(PG_NAME)
    if pg is not None:
        try:
            as_str(PG_NAME, pg)
        except ValidationError:
            errors.append(f"pg_name must be text, got {pg!r}")
    if node_type == NodeType.COMM_COLL_NODE:
        ct = get(COMM_TYPE)
        if ct is None:
            out.append(Issue("comm-attrs", WARNING, NO_COMM_TYPE, path, rank, node_id))
        elif _int_or_none(COMM_TYPE, ct) not in CollectiveType._value2member_map_:
            errors.append(f"unknown comm_type {ct!r}")
    else:
        # the peer: a send's destination, a receive's source (its own end is the rank), as replay and ASTRA-sim
        # read them; ASTRA-sim's own custom-collective examples carry only that one
        peer = COMM_DST if node_type == NodeType.COMM_SEND_NODE else COMM_SRC
        if get(peer) is None:
            errors.append(f"{NodeType(node_type).name} has no {peer} (the peer rank)")
    return out + [Issue("comm-attrs", ERROR, message, path, rank, node_id) for message in errors]


def _int_or_none(key: str, value: Any) -> int | None:
    """``value`` by the integer rule, None when the rule rejects it (NaN and infinities included)."""
    try:
        return as_int(key, value)
    except ValidationError:
        return None


def rank_collectives(trace: ExecutionTrace) -> dict[str, list[tuple[int, int, int]]]:
    """Per process group, the ordered list of ``(node_id, comm_type, comm_bytes)`` of one rank's collectives.

    Order and the reading of missing values are :mod:`tracekit.sets.rendezvous`'s (the one matcher): issue
    (topological) order, ties by file position; a missing ``comm_type``/``comm_size`` reads as ALL_REDUCE (0)
    and 0 bytes, as ASTRA-sim and Chakra's feeder read them.  ``comm_bytes`` is the node's ``comm_size``, bytes.

    Raises:
        ValidationError: the data dependencies have a cycle (no issue order exists).
    """
    cols = trace.columns()
    # while a replay memoises the rank's table (NodeColumns.keep_attrs), its collectives are the whole table's:
    # the issue order of a subset is the order of the whole restricted to it
    coll = None if cols.memo is not None else np.flatnonzero(cols.types == NodeType.COMM_COLL_NODE)
    table = comm_table(trace, coll)
    ids, attr = cols.ids, table.coll_attr
    return {
        name: [(i, *attr[p]) for i, p in zip(ids[positions].tolist(), positions)]
        for name, positions in table.coll.items()
    }


def collective_sequences(traceset: "TraceSet") -> dict[int, dict[str, list[tuple[int, int, int]]]]:
    """Per rank, per process group: the ordered list of ``(node_id, comm_type, comm_bytes)`` of its collectives."""
    return {rank: rank_collectives(trace) for rank, trace in traceset.items()}


@dataclass(frozen=True)
class RankFindings:
    """What the per-rank pass keeps of one rank: issues, collective order, declared groups (small)."""

    rank: int
    path: str | None
    nodes: int
    issues: tuple[Issue, ...]
    collectives: dict[str, np.ndarray]  # per group: int64[K, 3] rows (node_id, comm_type, comm_bytes)
    declared_groups: dict[str, tuple[int, ...]]
    declared_world: int | None = None  # the ``world_size`` metadata attribute (converters write it), when present
    max_peer: int = -1  # the highest rank a send goes to or a recv comes from (-1: none)


def max_p2p_peer(trace: ExecutionTrace) -> int:
    """The highest peer rank of the trace's point-to-point nodes (a send's ``comm_dst``, a recv's ``comm_src``),
    -1 without any; values the integer rule rejects are left out (``comm-attrs`` reports them)."""
    cols = trace.columns()
    best = -1
    for kind, field in ((NodeType.COMM_SEND_NODE, COMM_DST), (NodeType.COMM_RECV_NODE, COMM_SRC)):
        mask = cols.types == kind
        if not mask.any():
            continue
        present, values, ok = field.column_or(cols, -1, -1)
        peers = values[mask & present & ok]
        if len(peers):
            best = max(best, int(peers.max()))
    return best


def _declared_world(trace: ExecutionTrace) -> int | None:
    """The trace's ``world_size`` metadata attribute when it is an integer (a bool or text is ignored)."""
    value = trace.metadata.get_attr("world_size")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_rank(trace: ExecutionTrace) -> RankFindings:
    """The per-rank pass of :func:`validate_traceset` on one trace.

    A process-group declaration that cannot be parsed becomes an issue, not an exception.

    Raises:
        TraceFormatError: the trace's records cannot be decoded.
    """
    sub = validate_trace(trace)
    issues = list(sub.issues)
    collectives = {
        name: np.asarray(seq, dtype=np.int64).reshape(-1, 3)
        for name, seq in (rank_collectives(trace) if sub.ok else {}).items()
    }
    try:
        declared = shared_groups(trace)  # one dict for ranks with equal declarations (merged by identity)
    except ValidationError as exc:
        issues.append(Issue("process-groups", ERROR, exc.message, trace.path, trace.rank, exc.node_id))
        declared = {}
    return RankFindings(
        trace.rank if trace.rank is not None else 0,
        trace.path,
        len(trace),
        tuple(issues),
        collectives,
        declared,
        _declared_world(trace),
        max_p2p_peer(trace) if sub.ok else -1,
    )
