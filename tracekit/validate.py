"""Validation of execution traces and trace sets.

Each check has a name and a severity.  Per trace: ``unique-ids``,
``dangling-dep`` (data or control dependency on a missing id), ``cycle``
(iterative; names the cycle's ids and names), ``node-type`` (an unknown type
number), ``comm-attrs`` (COMM nodes: ``comm_type`` known on collectives,
``comm_size`` a non-negative integer, ``comm_src``/``comm_dst`` on
send/recv; a missing ``comm_type`` or ``comm_size`` is a warning and reads
as ASTRA-sim reads it, ALL_REDUCE and 0 bytes), ``negative-duration`` (cannot happen on the wire, which is
unsigned, but can in traces built in memory).  Per trace set: ``rank-count``
(a warning when the set holds fewer traces than its world: a partial job),
``process-groups`` (groups resolve, members exist), and
``collective-order``: every member of a process group issues the same
sequence of collectives (type, size, group), reporting the first divergence by
rank and node.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from tracekit.attrs import COMM_DST, COMM_SIZE, COMM_SRC, COMM_TYPE, PG_NAME, as_int, as_str
from tracekit.errors import TracekitError, ValidationError
from tracekit.groups import resolve_groups
from tracekit.model import MAX_DURATION_NS, MAX_TIME_NS, CollectiveType, ExecutionTrace, NodeType
from tracekit.rendezvous import comm_table

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.traceset import TraceSet

ERROR, WARNING = "error", "warning"
#: lenient where the reference tools are: ASTRA-sim and Chakra's feeder read the missing fields as their defaults
NO_COMM_SIZE = "COMM node has no comm_size: read as 0 bytes, as ASTRA-sim and Chakra's feeder do"
NO_COMM_TYPE = ("COMM_COLL node has no comm_type: read as ALL_REDUCE, as ASTRA-sim and Chakra's feeder do "
                "(the field's default)")
MAX_PER_CHECK = 20  # issues reported per check and trace before summarising


@dataclass(frozen=True)
class Issue:
    """One finding of a check (``count`` > 1: a summary line ``... N more like this`` standing for N findings)."""

    check: str
    severity: str
    message: str
    path: str | None = None
    rank: int | None = None
    node_id: int | None = None
    count: int = 1

    def __str__(self) -> str:
        where = TracekitError(self.message, path=self.path, rank=self.rank, node_id=self.node_id)
        return f"{self.severity}: [{self.check}] {where}"


@dataclass
class ValidationReport:
    """All issues found; ``ok`` when there is no error."""

    issues: list[Issue] = field(default_factory=list)
    checked_ranks: int = 0
    checked_nodes: int = 0

    @property
    def errors(self) -> list[Issue]:
        """The issues of severity ``error``, in the order found."""
        return [i for i in self.issues if i.severity == ERROR]

    @property
    def warnings(self) -> list[Issue]:
        """The issues of severity ``warning``, in the order found."""
        return [i for i in self.issues if i.severity == WARNING]

    @property
    def error_count(self) -> int:
        """Errors found, including those summarised as ``... N more like this``."""
        return sum(i.count for i in self.errors)

    @property
    def warning_count(self) -> int:
        """Warnings found, including those summarised as ``... N more like this``."""
        return sum(i.count for i in self.warnings)

    @property
    def ok(self) -> bool:
        """True when no error was found (warnings allowed)."""
        return not self.errors

    def add(self, *issues: Issue) -> None:
        """Append ``issues`` to the report."""
        self.issues.extend(issues)

    def raise_for_errors(self) -> None:
        """Raise ValidationError for the first error (the message counts the rest)."""
        errs = self.errors
        if errs:
            first = errs[0]
            total = self.error_count
            more = f" (and {total - 1:,} more errors)" if total > 1 else ""
            raise ValidationError(f"[{first.check}] {first.message}{more}", path=first.path, rank=first.rank,
                                  node_id=first.node_id)


def time_range_issues(cols, path: str | None, rank: int | None) -> list[Issue]:
    """``time-range`` errors: durations over MAX_DURATION_NS, start times over MAX_TIME_NS (column values
    saturate at 2^63-1 when the wire value does not fit int64)."""
    out = []
    for values, what, limit in ((cols.duration_ns, "duration", MAX_DURATION_NS),
                                (cols.start_time_ns, "start time", MAX_TIME_NS)):
        for p in np.flatnonzero(values > limit).tolist():
            v = int(values[p])
            shown = "more than 2^63-1 ns" if v >= 2**63 - 1 else f"{v:,} ns"
            out.append(Issue("time-range", ERROR, f"{what} {shown} is out of range (0 to {limit:,} ns)", path,
                             rank, int(cols.ids[p])))
    return out


def _capped(report: ValidationReport, issues: list[Issue], check: str, trace: ExecutionTrace) -> None:
    report.add(*issues[:MAX_PER_CHECK])
    if len(issues) > MAX_PER_CHECK:
        rest = len(issues) - MAX_PER_CHECK
        report.add(Issue(check, issues[0].severity, f"... {rest:,} more like this", trace.path, trace.rank, count=rest))


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
    # unique ids
    if len(graph.duplicate_ids):
        _capped(report, [Issue("unique-ids", ERROR, f"duplicate node id {int(i)}", path, rank, int(i))
                         for i in graph.duplicate_ids], "unique-ids", trace)
    # dangling data deps
    issues = [Issue("dangling-dep", ERROR, f"data dep {int(dep)} does not exist", path, rank, int(graph.ids[pos]))
              for pos, dep in graph.missing.tolist()]
    # dangling control deps (warning: simulators do not follow them)
    if len(cols.ctrl_ids):
        owner = np.repeat(np.arange(len(cols)), np.diff(cols.ctrl_ptr))
        _, found = graph.positions_of(cols.ctrl_ids)
        for pos, dep in zip(owner[~found].tolist(), cols.ctrl_ids[~found].tolist()):
            issues.append(Issue("dangling-dep", WARNING, f"ctrl dep {dep} does not exist", path, rank,
                                int(graph.ids[pos])))
    _capped(report, issues, "dangling-dep", trace)
    # node types
    bad_types = np.flatnonzero((cols.types < 0) | (cols.types > max(NodeType)))
    _capped(report, [Issue("node-type", ERROR, f"unknown node type {int(cols.types[p])}"
                           + (" or more" if cols.types[p] == 2**15 - 1 else " or less" if cols.types[p] == -2**15 else ""),
                           path, rank,
                           int(cols.ids[p])) for p in bad_types.tolist()], "node-type", trace)
    neg = np.flatnonzero(cols.duration_ns < 0)
    _capped(report, [Issue("negative-duration", ERROR, f"negative duration {int(cols.duration_ns[p])} ns", path, rank,
                           int(cols.ids[p])) for p in neg.tolist()], "negative-duration", trace)
    _capped(report, time_range_issues(cols, path, rank), "time-range", trace)
    # cycles
    try:
        graph.topological_order()
    except ValidationError as exc:
        report.add(Issue("cycle", ERROR, exc.message, path, rank, exc.node_id))
    # COMM attributes
    _capped(report, _check_comm_attrs(trace), "comm-attrs", trace)
    return report


def _check_comm_attrs(trace: ExecutionTrace) -> list[Issue]:
    cols = trace.columns()
    comm_pos = np.flatnonzero((cols.types >= NodeType.COMM_SEND_NODE) & (cols.types <= NodeType.COMM_COLL_NODE))
    if not len(comm_pos):
        return []
    raw = {key: key.raw(cols)[1] for key in COMM_CHECKED}
    issues: list[Issue] = []
    for p in comm_pos.tolist():
        issues += comm_issues(int(cols.ids[p]), int(cols.types[p]), lambda key: raw[key][p], trace.path, trace.rank)
    return issues


#: the attributes :func:`comm_issues` reads
COMM_CHECKED = (COMM_SIZE, COMM_TYPE, PG_NAME, COMM_SRC, COMM_DST)


def comm_issues(
    node_id: int, node_type: int, get: Callable[[str], Any], path: str | None, rank: int | None
) -> list[Issue]:
    """The ``comm-attrs`` findings of one COMM node (the one copy: full and streaming validation call it).

    Each value is read by its field's rule (:mod:`tracekit.attrs`), as replay reads it: a missing
    ``comm_size``/``comm_type`` is a warning (read as 0 bytes / ALL_REDUCE, as ASTRA-sim and Chakra's feeder
    do); a value the rule rejects, a negative size, an unknown collective type, a ``pg_name`` that is not text
    and a send/recv without ``comm_src``/``comm_dst`` are errors.

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
        errors += [f"{NodeType(node_type).name} has no {key}" for key in (COMM_SRC, COMM_DST) if get(key) is None]
    return out + [Issue("comm-attrs", ERROR, message, path, rank, node_id) for message in errors]


def _int_or_none(key: str, value: Any) -> int | None:
    """``value`` by the integer rule, None when the rule rejects it (NaN and infinities included)."""
    try:
        return as_int(key, value)
    except ValidationError:
        return None


def rank_collectives(trace: ExecutionTrace) -> dict[str, list[tuple[int, int, int]]]:
    """Per process group, the ordered list of ``(node_id, comm_type, comm_bytes)`` of one rank's collectives.

    Order and the reading of missing values are :mod:`tracekit.rendezvous`'s (the one matcher): issue
    (topological) order, ties by file position; a missing ``comm_type``/``comm_size`` reads as ALL_REDUCE (0)
    and 0 bytes, as ASTRA-sim and Chakra's feeder read them.  ``comm_bytes`` is the node's ``comm_size``, bytes.

    Raises:
        ValidationError: the data dependencies have a cycle (no issue order exists).
    """
    cols = trace.columns()
    table = comm_table(trace, np.flatnonzero(cols.types == NodeType.COMM_COLL_NODE))
    ids = cols.ids
    return {name: [(int(ids[p]), *table.coll_attr[p]) for p in positions] for name, positions in table.coll.items()}


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
    collectives = {name: np.asarray(seq, dtype=np.int64).reshape(-1, 3)
                   for name, seq in (rank_collectives(trace) if sub.ok else {}).items()}
    try:
        declared = trace.process_groups()
    except ValidationError as exc:
        issues.append(Issue("process-groups", ERROR, exc.message, trace.path, trace.rank, exc.node_id))
        declared = {}
    return RankFindings(trace.rank if trace.rank is not None else 0, trace.path, len(trace), tuple(issues),
                        collectives, declared, _declared_world(trace))


def _check_rank_file(item: tuple[int, str]) -> RankFindings:
    from tracekit.io import read_trace

    rank, path = item
    return check_rank(read_trace(path, rank=rank))


def validate_traceset(traceset: "TraceSet") -> ValidationReport:
    """Per-trace checks on every rank plus the cross-rank checks (see module docstring).

    Findings are returned in the report, never raised (see :meth:`ValidationReport.raise_for_errors`).

    Raises:
        TraceFormatError: a trace's records cannot be decoded.
    """
    findings = [check_rank(trace) for trace in traceset]
    try:
        groups = traceset.process_groups
    except ValidationError as exc:
        return _report(findings, error=Issue("process-groups", ERROR, exc.message, exc.path, exc.rank))
    return cross_rank_checks(findings, groups, traceset.world_size)


def validate_files(pairs: Sequence[tuple[int, str | os.PathLike[str]]], *, executor: str = "serial",
                   max_workers: int | None = None, ray_address: str | None = None,
                   progress: Callable[[int, int], None] | None = None) -> ValidationReport:
    """:func:`validate_traceset` on rank files, one rank in memory at a time per worker.

    Each worker reads a rank, checks it and keeps only its findings (issues,
    collective order, declared groups), so jobs of thousands of large rank
    files validate in bounded memory; ranks run in parallel with
    :func:`tracekit.parallel.parallel_map` (``executor="process"`` or ``"ray"``).

    Args:
        pairs: ``(rank, path)`` of every rank file (see :func:`tracekit.io.trace_paths`).
        executor, max_workers, ray_address: as :func:`tracekit.parallel.parallel_map`.
        progress: called as ``progress(done, total)`` after each rank (see :func:`tracekit.parallel.parallel_map`).

    Raises:
        TraceFormatError: a rank file cannot be read or decoded.
        ConfigError: an unknown executor, or Ray requested but not installed.
    """
    from tracekit.parallel import parallel_map

    findings = parallel_map(_check_rank_file, [(r, os.fspath(p)) for r, p in pairs], executor=executor,
                            max_workers=max_workers, ray_address=ray_address, progress=progress)
    declared: dict[str, tuple[int, ...]] = {}
    for f in findings:
        for name, ranks in f.declared_groups.items():
            if name in declared and declared[name] != ranks:
                return _report(findings, error=Issue(
                    "process-groups", ERROR, f"process group {name!r} declared as {list(declared[name])[:16]} on "
                    f"another rank and as {list(ranks)[:16]} here", f.path, f.rank))
            declared[name] = ranks
    world = max([f.rank for f in findings] + [max(r) for r in declared.values() if r], default=-1) + 1
    try:
        groups = resolve_groups(declared, world)
    except ValidationError as exc:
        return _report(findings, error=Issue("process-groups", ERROR, exc.message))
    return cross_rank_checks(findings, groups, world)


def _report(findings: Sequence[RankFindings], error: Issue | None = None) -> ValidationReport:
    report = ValidationReport(checked_ranks=len(findings), checked_nodes=sum(f.nodes for f in findings))
    for f in findings:
        report.add(*f.issues)
    if error is not None:
        report.add(error)
    return report


def cross_rank_checks(findings: Sequence[RankFindings], groups: dict[str, tuple[int, ...]],
                      world: int) -> ValidationReport:
    """The cross-rank checks over per-rank findings (:func:`check_rank`) of a world of ``world`` ranks.

    Reports every rank's own issues, a partial job (warning), collectives on
    undeclared groups or by non-members, and the first divergence of each
    group's collective sequence between its members.
    """
    report = _report(findings)
    by_rank = {f.rank: f for f in findings}
    missing = [r for r in range(world) if r not in by_rank]
    if missing:
        report.add(Issue("rank-count", WARNING,
                         f"partial job: traces for {len(by_rank)} of {world} ranks; no trace for "
                         f"ranks {missing[:16]}{' ...' if len(missing) > 16 else ''} (a replay needs them all)"))
    said = next((f for f in findings if f.declared_world is not None and f.declared_world != world), None)
    if said is not None:
        report.add(Issue("world-size", WARNING,
                         f"the trace says world size {said.declared_world:,}, but the set holds traces for "
                         f"{len(by_rank):,} rank(s) of a world of {world:,}",
                         said.path, said.rank))
    if not report.ok:  # order checks need sound per-rank graphs
        return report
    for rank, f in by_rank.items():
        for name, seq in f.collectives.items():
            if name not in groups:
                report.add(Issue("process-groups", ERROR, f"collective names undeclared process group {name!r}",
                                 f.path, rank, int(seq[0][0])))
            elif rank not in groups[name]:
                report.add(Issue("process-groups", ERROR,
                                 f"rank {rank} issues a collective on group {name!r} it is not a member of "
                                 f"({list(groups[name])[:16]})", f.path, rank, int(seq[0][0])))
    for name, members in groups.items():
        members = [r for r in members if r in by_rank]  # only ranks with a trace can be compared
        if len(members) < 2:
            continue
        ref_rank = members[0]
        empty = np.zeros((0, 3), dtype=np.int64)
        ref = by_rank[ref_rank].collectives.get(name, empty)
        for r in members[1:]:
            issue = _first_divergence(name, ref_rank, ref, r, by_rank[r].collectives.get(name, empty), by_rank)
            if issue is not None:
                report.add(issue)
    return report


def _describe(entry) -> str:
    ct, size = int(entry[1]), int(entry[2])
    tname = CollectiveType(ct).name if ct in CollectiveType._value2member_map_ else str(ct)
    return f"{tname} of {size} bytes"


def _first_divergence(name: str, ref_rank: int, ref: np.ndarray, r: int, other: np.ndarray,
                      by_rank: dict[int, RankFindings]) -> Issue | None:
    k = min(len(ref), len(other))
    differ = np.flatnonzero((ref[:k, 1:] != other[:k, 1:]).any(axis=1))
    if len(differ):
        i = int(differ[0])
        a, b = ref[i], other[i]
        return Issue("collective-order", ERROR,
                     f"group {name!r}: collective #{i} is {_describe(b)} here but {_describe(a)} on rank "
                     f"{ref_rank} (node {int(a[0])})", by_rank[r].path, r, int(b[0]))
    if len(ref) != len(other):
        longer, lrank = (ref, ref_rank) if len(ref) > len(other) else (other, r)
        return Issue("collective-order", ERROR,
                     f"group {name!r}: rank {ref_rank} issues {len(ref)} collectives, rank {r} issues {len(other)}; "
                     f"first unmatched is #{k}: {_describe(longer[k])}", by_rank[lrank].path, lrank, int(longer[k][0]))
    return None
