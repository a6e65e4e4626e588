"""Validation of execution traces and trace sets.

Each check has a name and a severity.  Per trace: ``unique-ids``,
``dangling-dep`` (data or control dependency on a missing id), ``cycle``
(iterative; names the cycle's ids and names), ``node-type`` (an unknown type
number), ``comm-attrs`` (COMM nodes: ``comm_type`` present and known on
collectives, ``comm_size`` a non-negative integer, ``comm_src``/``comm_dst``
on send/recv), ``negative-duration`` (cannot happen on the wire, which is
unsigned, but can in traces built in memory).  Per trace set: ``rank-count``
(a warning when the set holds fewer traces than its world: a partial job),
``process-groups`` (groups resolve, members exist), and
``collective-order``: every member of a process group issues the same
sequence of collectives (type, size, group), reporting the first divergence by
rank and node.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from tracekit.errors import TracekitError, ValidationError
from tracekit.groups import canonical_pg_name
from tracekit.model import CollectiveType, ExecutionTrace, NodeType

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.traceset import TraceSet

ERROR, WARNING = "error", "warning"
MAX_PER_CHECK = 20  # issues reported per check and trace before summarising


@dataclass(frozen=True)
class Issue:
    """One finding of a check."""

    check: str
    severity: str
    message: str
    path: str | None = None
    rank: int | None = None
    node_id: int | None = None

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
        return [i for i in self.issues if i.severity == ERROR]

    @property
    def warnings(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == WARNING]

    @property
    def ok(self) -> bool:
        return not self.errors

    def add(self, *issues: Issue) -> None:
        self.issues.extend(issues)

    def raise_for_errors(self) -> None:
        """Raise ValidationError for the first error (the message counts the rest)."""
        errs = self.errors
        if errs:
            first = errs[0]
            more = f" (and {len(errs) - 1} more errors)" if len(errs) > 1 else ""
            raise ValidationError(f"[{first.check}] {first.message}{more}", path=first.path, rank=first.rank,
                                  node_id=first.node_id)


def _capped(report: ValidationReport, issues: list[Issue], check: str, trace: ExecutionTrace) -> None:
    report.add(*issues[:MAX_PER_CHECK])
    if len(issues) > MAX_PER_CHECK:
        report.add(Issue(check, issues[0].severity, f"... {len(issues) - MAX_PER_CHECK} more like this",
                         trace.path, trace.rank))


def validate_trace(trace: ExecutionTrace) -> ValidationReport:
    """Run the per-trace checks (see module docstring).

    Raises:
        TraceFormatError: the trace's records cannot be decoded.
    """
    report = ValidationReport(checked_ranks=1, checked_nodes=len(trace))
    path, rank = trace.path, trace.rank
    cols = trace.columns()
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
    bad_types = np.flatnonzero((cols.types < 0) | (cols.types > 7))
    _capped(report, [Issue("node-type", ERROR, f"unknown node type {int(cols.types[p])}", path, rank,
                           int(cols.ids[p])) for p in bad_types.tolist()], "node-type", trace)
    neg = np.flatnonzero(cols.duration_ns < 0)
    _capped(report, [Issue("negative-duration", ERROR, f"negative duration {int(cols.duration_ns[p])} ns", path, rank,
                           int(cols.ids[p])) for p in neg.tolist()], "negative-duration", trace)
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
    path, rank = trace.path, trace.rank
    comm_pos = np.flatnonzero((cols.types >= NodeType.COMM_SEND_NODE) & (cols.types <= NodeType.COMM_COLL_NODE))
    if not len(comm_pos):
        return []
    issues: list[Issue] = []
    _, ctype = cols.attr("comm_type")
    _, csize = cols.attr("comm_size")
    _, csrc = cols.attr("comm_src")
    _, cdst = cols.attr("comm_dst")
    for p in comm_pos.tolist():
        nid, t = int(cols.ids[p]), int(cols.types[p])
        size = csize[p]
        if size is None:
            issues.append(Issue("comm-attrs", ERROR, "COMM node has no comm_size", path, rank, nid))
        elif isinstance(size, bool) or not isinstance(size, int) or size < 0:
            issues.append(Issue("comm-attrs", ERROR, f"comm_size must be a non-negative integer (bytes), got {size!r}",
                                path, rank, nid))
        if t == NodeType.COMM_COLL_NODE:
            ct = ctype[p]
            if ct is None:
                issues.append(Issue("comm-attrs", ERROR, "COMM_COLL node has no comm_type", path, rank, nid))
            elif isinstance(ct, bool) or not isinstance(ct, int) or ct not in CollectiveType._value2member_map_:
                issues.append(Issue("comm-attrs", ERROR, f"unknown comm_type {ct!r}", path, rank, nid))
        else:
            for key, vals in (("comm_src", csrc), ("comm_dst", cdst)):
                if vals[p] is None:
                    issues.append(Issue("comm-attrs", ERROR, f"{NodeType(t).name} has no {key}", path, rank, nid))
    return issues


def collective_sequences(traceset: "TraceSet") -> dict[int, dict[str, list[tuple[int, int, int]]]]:
    """Per rank, per process group: the ordered list of ``(node_id, comm_type, comm_bytes)`` of its collectives."""
    out: dict[int, dict[str, list[tuple[int, int, int]]]] = {}
    for rank, trace in traceset.items():
        cols = trace.columns()
        pos = np.flatnonzero(cols.types == NodeType.COMM_COLL_NODE)
        per_group: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        if len(pos):
            _, ctype = cols.attr("comm_type")
            _, csize = cols.attr("comm_size")
            _, pg = cols.attr("pg_name")
            order = trace.graph().topological_order()
            rank_of = np.empty(len(cols), dtype=np.int64)
            rank_of[order] = np.arange(len(order))
            for p in sorted(pos.tolist(), key=lambda q: rank_of[q]):
                per_group[canonical_pg_name(pg[p])].append(
                    (int(cols.ids[p]), -1 if ctype[p] is None else int(ctype[p]),
                     -1 if csize[p] is None else int(csize[p])))
        out[rank] = dict(per_group)
    return out


def validate_traceset(traceset: "TraceSet") -> ValidationReport:
    """Per-trace checks on every rank plus the cross-rank checks (see module docstring)."""
    report = ValidationReport()
    for trace in traceset:
        sub = validate_trace(trace)
        report.add(*sub.issues)
        report.checked_ranks += 1
        report.checked_nodes += sub.checked_nodes
    try:
        groups = traceset.process_groups
    except ValidationError as exc:
        report.add(Issue("process-groups", ERROR, exc.message, exc.path, exc.rank))
        return report
    missing = traceset.missing_ranks
    if missing:
        report.add(Issue("rank-count", WARNING,
                         f"partial job: traces for {len(traceset)} of {traceset.world_size} ranks; no trace for "
                         f"ranks {list(missing[:16])}{' ...' if len(missing) > 16 else ''} (a replay needs them all)"))
    if not report.ok:  # order checks need sound per-rank graphs
        return report
    seqs = collective_sequences(traceset)
    for rank, per_group in seqs.items():
        for name in per_group:
            if name not in groups:
                node = per_group[name][0][0]
                report.add(Issue("process-groups", ERROR, f"collective names undeclared process group {name!r}",
                                 traceset[rank].path, rank, node))
            elif rank not in groups[name]:
                node = per_group[name][0][0]
                report.add(Issue("process-groups", ERROR,
                                 f"rank {rank} issues a collective on group {name!r} it is not a member of "
                                 f"({list(groups[name])[:16]})", traceset[rank].path, rank, node))
    for name, members in groups.items():
        members = [r for r in members if r in seqs]  # only ranks with a trace can be compared
        if len(members) < 2:
            continue
        ref_rank = members[0]
        ref = seqs[ref_rank].get(name, [])
        for r in members[1:]:
            other = seqs[r].get(name, [])
            issue = _first_divergence(name, ref_rank, ref, r, other, traceset)
            if issue is not None:
                report.add(issue)
    return report


def _describe(entry: tuple[int, int, int]) -> str:
    _, ct, size = entry
    tname = CollectiveType(ct).name if ct in CollectiveType._value2member_map_ else str(ct)
    return f"{tname} of {size} bytes"


def _first_divergence(name: str, ref_rank: int, ref: list, r: int, other: list, ts: "TraceSet") -> Issue | None:
    for k, (a, b) in enumerate(zip(ref, other)):
        if a[1:] != b[1:]:
            return Issue("collective-order", ERROR,
                         f"group {name!r}: collective #{k} is {_describe(b)} here but {_describe(a)} on rank "
                         f"{ref_rank} (node {a[0]})", ts[r].path, r, b[0])
    if len(ref) != len(other):
        longer, lrank = (ref, ref_rank) if len(ref) > len(other) else (other, r)
        k = min(len(ref), len(other))
        return Issue("collective-order", ERROR,
                     f"group {name!r}: rank {ref_rank} issues {len(ref)} collectives, rank {r} issues {len(other)}; "
                     f"first unmatched is #{k}: {_describe(longer[k])}", ts[lrank].path, lrank, longer[k][0])
    return None
