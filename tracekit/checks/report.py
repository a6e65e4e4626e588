"""Validation findings: :class:`Issue` (one finding of a named check) and :class:`ValidationReport`.

The checks themselves are in :mod:`tracekit.checks.rank_checks` (one rank) and :mod:`tracekit.checks.validate` (a trace set).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tracekit.errors import TracekitError, ValidationError

ERROR, WARNING = "error", "warning"
#: lenient where the reference tools are: ASTRA-sim and Chakra's feeder read the missing fields as their defaults
NO_COMM_SIZE = "COMM node has no comm_size: read as 0 bytes, as ASTRA-sim and Chakra's feeder do"
NO_COMM_TYPE = (
    "COMM_COLL node has no comm_type: read as ALL_REDUCE, as ASTRA-sim and Chakra's feeder do (the field's default)"
)
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
            raise ValidationError(
                f"[{first.check}] {first.message}{more}", path=first.path, rank=first.rank, node_id=first.node_id
            )


def capped(report: ValidationReport, issues: list[Issue], check: str, path: str | None, rank: int | None) -> None:
    """Add the first :data:`MAX_PER_CHECK` of ``issues`` to ``report`` and one ``... N more like this`` line."""
    report.add(*issues[:MAX_PER_CHECK])
    if len(issues) > MAX_PER_CHECK:
        rest = len(issues) - MAX_PER_CHECK
        report.add(Issue(check, issues[0].severity, f"... {rest:,} more like this", path, rank, count=rest))
