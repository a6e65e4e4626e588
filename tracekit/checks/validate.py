"""Validation of execution traces and trace sets.

Each check has a name and a severity.  Per trace (:mod:`tracekit.checks.rank_checks`): ``unique-ids``,
``dangling-dep`` (data or control dependency on a missing id), ``cycle`` (iterative; names the cycle's ids
and names), ``node-type`` (an unknown type number), ``time-range``, ``comm-attrs`` (COMM nodes, every value
read by its field's rule in :mod:`tracekit.model.attrs`: ``comm_type`` known on collectives, ``comm_size`` a
non-negative integer, ``pg_name`` text, ``comm_src``/``comm_dst`` on send/recv; a missing ``comm_type`` or
``comm_size`` is a warning and reads as ASTRA-sim reads it, ALL_REDUCE and 0 bytes), ``negative-duration``
(cannot happen on the wire, which is unsigned, but can in traces built in memory).  Per trace set (here):
``rank-count`` (a warning when the set holds fewer traces than its world: a partial job), ``world-size`` (a
warning when a trace's ``world_size`` metadata disagrees), ``process-groups`` (groups resolve, members
exist), and ``collective-order``: every member of a process group issues the same sequence of collectives
(type, size, group), reporting the first divergence by rank and node.

Findings are :class:`~tracekit.checks.report.Issue` values in a
:class:`~tracekit.checks.report.ValidationReport` (both importable from here).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from tracekit.errors import ValidationError
from tracekit.model.groups import GroupsMerger, resolve_groups
from tracekit.model import CollectiveType
from tracekit.checks.rank_checks import (
    COMM_CHECKED,
    RankFindings,
    check_rank,
    collective_sequences,
    comm_issues,
    rank_collectives,
    time_range_issues,
    validate_trace,
)
from tracekit.checks.report import (
    ERROR,
    MAX_PER_CHECK,
    NO_COMM_SIZE,
    NO_COMM_TYPE,
    WARNING,
    Issue,
    ValidationReport,
)

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace
    from tracekit.sets.traceset import TraceSet

__all__ = [
    "COMM_CHECKED",
    "ERROR",
    "MAX_PER_CHECK",
    "NO_COMM_SIZE",
    "NO_COMM_TYPE",
    "WARNING",
    "Issue",
    "RankFindings",
    "ValidationError",
    "ValidationReport",
    "check_rank",
    "collective_sequences",
    "comm_issues",
    "cross_rank_checks",
    "merged_declarations",
    "rank_collectives",
    "time_range_issues",
    "validate_files",
    "validate_trace",
    "validate_traceset",
]


def _check_rank_file(item: tuple[int, str]) -> RankFindings:
    from tracekit.wire.io import read_trace

    rank, path = item
    return check_rank(read_trace(path, rank=rank))


def validate_traceset(traceset: "TraceSet") -> ValidationReport:
    """Per-trace checks on every rank plus the cross-rank checks (see module docstring).

    Findings are returned in the report, never raised (see :meth:`ValidationReport.raise_for_errors`).

    Raises:
        TraceFormatError: a trace's records cannot be decoded.
    """
    findings = _per_program(traceset)
    try:
        groups = traceset.process_groups
    except ValidationError as exc:
        return _report(findings, error=Issue("process-groups", ERROR, exc.message, exc.path, exc.rank))
    return cross_rank_checks(findings, groups, traceset.world_size)


def _per_program(traceset: "TraceSet") -> list[RankFindings]:
    """:func:`check_rank` of every rank, once per distinct program: a rank sharing its columns object and metadata
    with a rank checked already (:func:`tracekit.wire.sharing.share_identical_columns`, ``with_label``) takes its
    findings relabelled when they hold no issue (a finding names its rank and file: those are checked again)."""
    from dataclasses import replace

    from tracekit.wire.sharing import columns_key, same_metadata

    out: list[RankFindings] = []
    seen: dict[int, tuple["ExecutionTrace", RankFindings]] = {}
    for trace in traceset:
        key = columns_key(trace)
        hit = seen.get(key)
        if hit is not None and same_metadata(hit[0], trace):
            out.append(replace(hit[1], rank=trace.rank if trace.rank is not None else 0, path=trace.path))
            continue
        found = check_rank(trace)
        if not found.issues:
            seen[key] = (trace, found)
        out.append(found)
    return out


def validate_files(
    pairs: Sequence[tuple[int, str | os.PathLike[str]]],
    *,
    executor: str = "serial",
    max_workers: int | None = None,
    ray_address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    comm_groups: Mapping[str, Sequence[int]] | None = None,
    comm_groups_path: str | None = None,
) -> ValidationReport:
    """:func:`validate_traceset` on rank files, one rank in memory at a time per worker.

    Each worker reads a rank, checks it and keeps only its findings (issues,
    collective order, declared groups), so jobs of thousands of large rank
    files validate in bounded memory; ranks run in parallel with
    :func:`tracekit.parallel.parallel_map` (``executor="process"`` or ``"ray"``).

    Args:
        pairs: ``(rank, path)`` of every rank file (see :func:`tracekit.sets.io.trace_paths`).
        executor, max_workers, ray_address: as :func:`tracekit.parallel.parallel_map`.
        progress: called as ``progress(done, total)`` after each rank (see :func:`tracekit.parallel.parallel_map`).
        comm_groups: groups of an ASTRA-sim comm-group file (``comm_groups_path``), added to the declared ones
            (:func:`tracekit.sets.comm_groups.merge_declared`; a disagreement is a ``process-groups`` error).

    Raises:
        TraceFormatError: a rank file cannot be read or decoded.
        ConfigError: an unknown executor, or Ray requested but not installed.
    """
    from tracekit.parallel import parallel_map

    findings = parallel_map(
        _check_rank_file,
        [(r, os.fspath(p)) for r, p in pairs],
        executor=executor,
        max_workers=max_workers,
        ray_address=ray_address,
        progress=progress,
    )
    declared, f, bad = merged_declarations(findings)
    if f is not None and bad is not None:
        return _report(
            findings,
            error=Issue(
                "process-groups",
                ERROR,
                f"process group {bad!r} declared as {list(declared[bad])[:16]} on "
                f"another rank and as {list(f.declared_groups[bad])[:16]} here",
                f.path,
                f.rank,
            ),
        )
    if comm_groups:
        from tracekit.sets.comm_groups import merge_declared

        try:
            declared = merge_declared(declared, comm_groups, comm_groups_path)
        except ValidationError as exc:
            return _report(findings, error=Issue("process-groups", ERROR, exc.message, comm_groups_path))
    world = max([f.rank for f in findings] + [max(r) for r in declared.values() if r], default=-1) + 1
    try:
        groups = resolve_groups(declared, world)
    except ValidationError as exc:
        return _report(findings, error=Issue("process-groups", ERROR, exc.message))
    return cross_rank_checks(findings, groups, world)


def merged_declarations(
    findings: Sequence[RankFindings],
) -> tuple[dict[str, tuple[int, ...]], RankFindings | None, str | None]:
    """The ranks' declared groups merged (:class:`~tracekit.model.groups.GroupsMerger`: a rank sharing the previous
    rank's declaration costs O(1)).

    Returns:
        ``(groups, None, None)``, or at the first rank declaring a group otherwise ``(groups merged so far, its
        findings, the group's name)``.
    """
    merger = GroupsMerger()
    for f in findings:
        bad = merger.add(f.declared_groups)
        if bad is not None:
            return merger.groups, f, bad
    return merger.groups, None, None


def _report(findings: Sequence[RankFindings], error: Issue | None = None) -> ValidationReport:
    report = ValidationReport(checked_ranks=len(findings), checked_nodes=sum(f.nodes for f in findings))
    for f in findings:
        report.add(*f.issues)
    if error is not None:
        report.add(error)
    return report


def cross_rank_checks(
    findings: Sequence[RankFindings], groups: dict[str, tuple[int, ...]], world: int
) -> ValidationReport:
    """The cross-rank checks over per-rank findings (:func:`check_rank`) of a world of ``world`` ranks.

    Reports every rank's own issues, a partial job (warning), collectives on
    undeclared groups or by non-members, and the first divergence of each
    group's collective sequence between its members.
    """
    report = _report(findings)
    by_rank = {f.rank: f for f in findings}
    # a send or recv names its peer: a peer beyond the ranks given shows the job is bigger than the set
    peer = max((f.max_peer for f in findings), default=-1)
    implied = max(world, peer + 1)
    missing = [r for r in range(implied) if r not in by_rank]
    if missing:
        why = f" (sends and recvs name peers up to rank {peer})" if peer + 1 > world else ""
        report.add(
            Issue(
                "rank-count",
                WARNING,
                f"partial job: traces for {len(by_rank)} of {implied} ranks{why}; no trace for "
                f"ranks {missing[:16]}{' ...' if len(missing) > 16 else ''} (a replay needs them all)",
            )
        )
    said = next((f for f in findings if f.declared_world is not None and f.declared_world != world), None)
    if said is not None:
        report.add(
            Issue(
                "world-size",
                WARNING,
                f"the trace says world size {said.declared_world:,}, but the set holds traces for "
                f"{len(by_rank):,} rank(s) of a world of {world:,}",
                said.path,
                said.rank,
            )
        )
    if not report.ok:  # order checks need sound per-rank graphs
        return report
    member_sets: dict[str, frozenset[int]] = {}  # a rank-in-group test in O(1) (a data-parallel group is long)
    for rank, f in by_rank.items():
        for name, seq in f.collectives.items():
            if name not in groups:
                report.add(
                    Issue(
                        "process-groups",
                        ERROR,
                        f"collective names undeclared process group {name!r}",
                        f.path,
                        rank,
                        int(seq[0][0]),
                    )
                )
            elif rank not in (member_sets.get(name) or member_sets.setdefault(name, frozenset(groups[name]))):
                report.add(
                    Issue(
                        "process-groups",
                        ERROR,
                        f"rank {rank} issues a collective on group {name!r} it is not a member of "
                        f"({list(groups[name])[:16]})",
                        f.path,
                        rank,
                        int(seq[0][0]),
                    )
                )
    for name, group in groups.items():
        members = [r for r in group if r in by_rank]  # only ranks with a trace can be compared
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


def _describe(entry: npt.NDArray[np.int64]) -> str:
    """``ALL_REDUCE of 4096 bytes`` for a row ``(node id, comm type, comm bytes)`` of a rank's collective table."""
    ct, size = int(entry[1]), int(entry[2])
    tname = CollectiveType(ct).name if ct in CollectiveType._value2member_map_ else str(ct)
    return f"{tname} of {size} bytes"


def _first_divergence(
    name: str, ref_rank: int, ref: np.ndarray, r: int, other: np.ndarray, by_rank: dict[int, RankFindings]
) -> Issue | None:
    k = min(len(ref), len(other))
    differ = np.flatnonzero((ref[:k, 1:] != other[:k, 1:]).any(axis=1))
    if len(differ):
        i = int(differ[0])
        a, b = ref[i], other[i]
        return Issue(
            "collective-order",
            ERROR,
            f"group {name!r}: collective #{i} is {_describe(b)} here but {_describe(a)} on rank "
            f"{ref_rank} (node {int(a[0])})",
            by_rank[r].path,
            r,
            int(b[0]),
        )
    if len(ref) != len(other):
        longer, lrank = (ref, ref_rank) if len(ref) > len(other) else (other, r)
        return Issue(
            "collective-order",
            ERROR,
            f"group {name!r}: rank {ref_rank} issues {len(ref)} collectives, rank {r} issues {len(other)}; "
            f"first unmatched is #{k}: {_describe(longer[k])}",
            by_rank[lrank].path,
            lrank,
            int(longer[k][0]),
        )
    return None
