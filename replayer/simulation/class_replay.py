"""Replaying a job stored as rank classes (:mod:`tracekit.sets.classset`) without deriving every rank.

A member of a class is its representative with some attribute values
replaced (slots: ``pg_name``, ``comm_src``, ``comm_dst``).  Everything the
folding proof reads of a rank (:func:`.folding.scan_rank`) is either
rank-local and untouched by those values (the digest: types, ids, names,
durations, sizes, graph, tags) or keyed by them (collectives per group name,
sends per destination, receives per source).  So a member's scan is its
representative's with the keys renamed through the member's value map
(:func:`member_scan`), and its per-rank check findings likewise
(:func:`member_findings`); the fold plan (:func:`.folding.plan_folding`) is
then proven on the whole job exactly as for per-rank files (:func:`.run.replay_with_traces`), and only the
representatives are simulated.

When a class's slots touch any other attribute the renaming would not be
exact: those members are derived in full (:meth:`ClassSet.rank_bytes`) and
scanned like files.  When folding cannot be proven, or a representative has
check errors, the job is expanded in memory and replayed unfolded (so the
result, or the error report, is exactly the per-rank one).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracekit.checks.classset import RENAMED, member_findings, slot_maps
from tracekit.model import Attr

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.checks.rank_checks import RankFindings
    from tracekit.replayer.simulation.folding import RankScan
    from tracekit.workloads.rank_template import RankTemplate

log = logging.getLogger(__name__)

__all__ = ["StampedClasses", "member_scan"]


def member_scan(scan: "RankScan", rank: int, path: str | None, value_map: dict[tuple[str, Any], Any]) -> "RankScan":
    """The :class:`~.folding.RankScan` of a member whose trace is ``scan``'s rank with ``value_map`` applied.

    Args:
        value_map: ``(attribute name, representative's value) -> member's value``
            for ``pg_name``/``comm_src``/``comm_dst`` only.
    """
    from tracekit.replayer.simulation.scan_tables import MemberScan

    pg, src, dst = slot_maps(value_map)
    return MemberScan.renamed(scan, rank, path, pg, src, dst)


@dataclass(frozen=True)
class _Template:
    """The first clean file of a stamped class, as :class:`StampedClasses` keeps it.

    Attributes:
        slots: the class's slot attributes (representative's values); values: this file's slot values.
        template: the file's bytes as a :class:`~tracekit.workloads.rank_template.RankTemplate` over the slots.
        offset: byte offset of the file's node records.
        scan, findings, groups: the file's scan, check findings (None: not checked) and declared groups.
    """

    slots: tuple[Attr, ...]
    values: tuple[Any, ...]
    template: "RankTemplate"
    offset: int
    scan: "RankScan"
    findings: "RankFindings | None"
    groups: dict[str, tuple[int, ...]]


class StampedClasses:
    """Per-rank files stamped with their rank class (:data:`tracekit.sets.classset.RANK_CLASS_ATTR`).

    The first clean file of a class is read the ordinary way (checked, scanned) and kept as a template;
    a later file of the class is derived from it without decoding: its node records must equal the
    template's with the file's own slot values put in, byte for byte (else it is read the ordinary way),
    and then its scan and check findings are the first file's renamed (:func:`member_scan`,
    :func:`~tracekit.checks.classset.member_findings`), exactly as for a class set.
    """

    def __init__(self) -> None:
        self.first: dict[str, _Template] = {}

    def derive(
        self, rank: int, path: str, data: bytes
    ) -> "tuple[RankScan, RankFindings | None, dict[str, tuple[int, ...]]] | None":
        """``(scan, findings or None, declared groups)`` of a stamped member, or None (read it in full)."""
        from tracekit.sets.classset import read_rank_class
        from tracekit.errors import ConfigError
        from tracekit.model import Attr

        stamp = read_rank_class(data)
        if stamp is None or stamp[0] not in self.first:
            return None
        key, slots, values, offset = stamp
        first = self.first[key]
        if slots != first.slots:
            return None
        attrs: dict[object, Attr] = {i: Attr(s.name, v, s.kind) for i, (s, v) in enumerate(zip(slots, values))}
        try:
            expected = first.template.for_rank(attrs)
        except ConfigError:
            return None
        if memoryview(expected)[first.offset :] != memoryview(data)[offset:]:
            return None
        vmap = {(s.name, fv): v for s, fv, v in zip(slots, first.values, values)}
        return (
            member_scan(first.scan, rank, path, vmap),
            member_findings(first.findings, rank, vmap) if first.findings is not None else None,
            first.groups,
        )

    def remember(
        self,
        data: bytes,
        scan: "RankScan",
        findings: "RankFindings | None",
        groups: dict[str, tuple[int, ...]],
    ) -> None:
        """Keep a fully read file as its class's template (when stamped, clean and renaming-only)."""
        from tracekit.sets.classset import read_rank_class
        from tracekit.workloads.rank_template import RankTemplate

        stamp = read_rank_class(data)
        if stamp is None or stamp[0] in self.first or (findings is not None and findings.issues):
            return
        key, slots, values, offset = stamp
        if not all(s.name in RENAMED for s in slots):
            return
        attrs: dict[object, Attr] = {i: Attr(s.name, v, s.kind) for i, (s, v) in enumerate(zip(slots, values))}
        self.first[key] = _Template(slots, values, RankTemplate(data, attrs), offset, scan, findings, groups)
