"""Checks and counts of traces and trace sets: what ``validate`` and ``info`` report.

Validation (:mod:`tracekit.checks.validate`, per-rank checks in :mod:`tracekit.checks.rank_checks`, findings in
:mod:`tracekit.checks.report`), summaries (:mod:`tracekit.checks.summary`) and the class-by-class checks of a
rank-class set (:mod:`tracekit.checks.classset`). Uses :mod:`tracekit.sets`, :mod:`tracekit.wire`,
:mod:`tracekit.model`.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracekit.checks.classset import (
        RENAMED,
        member_findings,
        member_trace,
        slot_maps,
        summarize_class_set,
        validate_class_set,
    )
    from tracekit.checks.rank_checks import RankFindings, check_rank, comm_issues, rank_collectives, validate_trace
    from tracekit.checks.report import ERROR, MAX_PER_CHECK, WARNING, Issue, ValidationReport
    from tracekit.checks.summary import cost_coverage, summarize_files, summarize_trace, summarize_traceset
    from tracekit.checks.validate import cross_rank_checks, validate_files, validate_traceset

__all__ = [
    "ERROR",
    "Issue",
    "MAX_PER_CHECK",
    "RENAMED",
    "RankFindings",
    "ValidationReport",
    "WARNING",
    "check_rank",
    "comm_issues",
    "cost_coverage",
    "cross_rank_checks",
    "member_findings",
    "member_trace",
    "rank_collectives",
    "slot_maps",
    "summarize_class_set",
    "summarize_files",
    "summarize_trace",
    "summarize_traceset",
    "validate_class_set",
    "validate_files",
    "validate_trace",
    "validate_traceset",
]

# name -> the module defining it, imported on first use (PEP 562): importing the package imports no module
_FACE = {
    "ERROR": "tracekit.checks.report",
    "Issue": "tracekit.checks.report",
    "MAX_PER_CHECK": "tracekit.checks.report",
    "RENAMED": "tracekit.checks.classset",
    "RankFindings": "tracekit.checks.rank_checks",
    "ValidationReport": "tracekit.checks.report",
    "WARNING": "tracekit.checks.report",
    "check_rank": "tracekit.checks.rank_checks",
    "comm_issues": "tracekit.checks.rank_checks",
    "cost_coverage": "tracekit.checks.summary",
    "cross_rank_checks": "tracekit.checks.validate",
    "member_findings": "tracekit.checks.classset",
    "member_trace": "tracekit.checks.classset",
    "rank_collectives": "tracekit.checks.rank_checks",
    "slot_maps": "tracekit.checks.classset",
    "summarize_class_set": "tracekit.checks.classset",
    "summarize_files": "tracekit.checks.summary",
    "summarize_trace": "tracekit.checks.summary",
    "summarize_traceset": "tracekit.checks.summary",
    "validate_class_set": "tracekit.checks.classset",
    "validate_files": "tracekit.checks.validate",
    "validate_trace": "tracekit.checks.rank_checks",
    "validate_traceset": "tracekit.checks.validate",
}


def __getattr__(name: str) -> object:
    """A name of the face, from its defining module on first use; ``AttributeError`` for any other name."""
    if name not in _FACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_FACE[name]), name)
