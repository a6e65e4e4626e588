"""Checks and summaries of a rank-class set, class by class (:mod:`tracekit.sets.classset`).

Representatives are checked or summarized from their files; a member whose class varies only group names and
peers (:data:`RENAMED`) gets its representative's findings with the names renamed, else it is checked on its
derived trace. ``tracekit validate`` and ``tracekit summary`` on a class set go through here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit.model.attrs import COMM_DST, COMM_SRC, PG_NAME

if TYPE_CHECKING:
    from tracekit.sets.classset import ClassSet
    from tracekit.model import ExecutionTrace
    from tracekit.checks.rank_checks import RankFindings
    from tracekit.checks.summary import TraceSetSummary, TraceSummary
    from tracekit.checks.report import ValidationReport

__all__ = [
    "RENAMED",
    "check_class_set",
    "member_findings",
    "member_trace",
    "slot_maps",
    "summarize_class_set",
    "validate_class_set",
]

RENAMED = frozenset({PG_NAME, COMM_SRC, COMM_DST})  # slots whose effect on checks is a renaming


def slot_maps(value_map: dict[tuple[str, Any], Any]) -> tuple[dict[str, str], dict[int, int], dict[int, int]]:
    """Group-name, source-peer and destination-peer renamings of a member's value map (canonical group names)."""
    from tracekit.model.groups import canonical_pg_name

    pg = {
        canonical_pg_name(str(old)): canonical_pg_name(str(new))
        for (name, old), new in value_map.items()
        if name == PG_NAME
    }
    src = {int(old): int(new) for (name, old), new in value_map.items() if name == COMM_SRC}
    dst = {int(old): int(new) for (name, old), new in value_map.items() if name == COMM_DST}
    return pg, src, dst


def member_findings(findings: RankFindings, rank: int, value_map: dict[tuple[str, Any], Any]) -> RankFindings:
    """A member's :class:`~tracekit.checks.validate.RankFindings` from its representative's (which has no issues).

    The per-rank checks read ids, types, dependencies and attribute values;
    a member differs from its representative only in group names and peers
    (:data:`RENAMED`), so its findings are the representative's with the
    per-group collective tables renamed.
    """
    from dataclasses import replace

    pg, _, _ = slot_maps(value_map)
    return replace(
        findings,
        rank=rank,
        path=None,
        issues=(),
        collectives={pg.get(k, k): v for k, v in findings.collectives.items()},
    )


def member_trace(cs: ClassSet, rank: int) -> ExecutionTrace:
    """The decoded :class:`~tracekit.model.ExecutionTrace` of ``rank`` (its class's representative with
    the rank's slot values).

    Raises:
        TracekitError: ``rank`` is not in the job.
        TraceFormatError: the class file cannot be decoded.
    """
    from tracekit.wire.io import trace_from_bytes

    return trace_from_bytes(cs.rank_bytes(rank), path=f"{cs.manifest}#rank{rank}", rank=rank)


def check_class_set(cs: ClassSet) -> list[RankFindings]:
    """:func:`tracekit.checks.validate.check_rank` findings of every rank, in rank order.

    Representatives are checked; members derived (:func:`member_findings`)
    when the representative has no issue and the class varies only
    :data:`RENAMED` attributes, else checked on their derived trace.

    Raises:
        TraceFormatError: a class file cannot be decoded.
    """
    from tracekit.checks.validate import check_rank

    out: dict[int, RankFindings] = {}
    for cls in cs.classes:
        rep = check_rank(cs.read_representative(cls))
        out[cls.representative] = rep
        exact = not rep.issues and all(s.name in RENAMED for s in cls.slots)
        for index, rank in enumerate(cls.ranks[1:], start=1):
            out[rank] = (
                member_findings(rep, rank, cls.value_map(index)) if exact else check_rank(member_trace(cs, rank))
            )
    return [out[r] for r in sorted(out)]


def validate_class_set(cs: ClassSet) -> ValidationReport:
    """:func:`tracekit.checks.validate.validate_files` for a class set -> ValidationReport.

    Findings are in the report, never raised.

    Raises:
        TraceFormatError: a class file cannot be decoded.
    """
    from tracekit.model.groups import resolve_groups
    from tracekit.checks.validate import ValidationError, cross_rank_checks, _report, Issue, ERROR, merged_declarations

    findings = check_class_set(cs)
    declared, f, bad = merged_declarations(findings)  # members share their representative's declaration: O(1) each
    if f is not None:
        return _report(
            findings,
            error=Issue(
                "process-groups",
                ERROR,
                f"process group {bad!r} declared differently on rank {f.rank}",
                str(cs.manifest),
                f.rank,
            ),
        )
    try:
        groups = resolve_groups(declared, cs.world_size)
    except ValidationError as exc:
        return _report(findings, error=Issue("process-groups", ERROR, exc.message))
    return cross_rank_checks(findings, groups, cs.world_size)


def summarize_class_set(cs: ClassSet) -> TraceSetSummary:
    """:func:`tracekit.checks.summary.summarize_files` for a class set (a member's summary is its representative's): one
    summary per class, ``per_rank`` a :class:`~tracekit.checks.member_summaries.MemberSummaries` over every rank.

    Raises:
        TraceFormatError: a class file cannot be decoded.
        ValidationError: a ``process_group:init`` value cannot be parsed, or a group names a rank outside the world.
    """
    from tracekit.checks.member_summaries import MemberSummaries
    from tracekit.model.groups import pg_descriptions, resolve_groups
    from tracekit.checks.summary import TraceSetSummary, summarize_trace

    reps: list[TraceSummary] = []
    declared: dict[str, tuple[int, ...]] = {}
    descs: dict[str, str] = {}
    for cls in cs.classes:
        trace = cs.read_representative(cls)
        declared.update(trace.process_groups())
        descs.update(pg_descriptions(trace))
        reps.append(summarize_trace(trace))
    groups = {k: list(v) for k, v in resolve_groups(declared, cs.world_size).items()}
    return TraceSetSummary(
        ranks=cs.world_size,
        process_groups=groups,
        per_rank=MemberSummaries(cs, reps),
        process_group_descs=descs,
    )
