"""Replaying a job stored as rank classes (:mod:`tracekit.classset`) without deriving every rank.

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
from dataclasses import replace as dc_replace
from typing import TYPE_CHECKING, Any, Callable

from tracekit.classset import RENAMED, member_findings, slot_maps
from tracekit.model import Attr

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.classset import ClassSet
    from tracekit.model import ExecutionTrace
    from tracekit.rank_checks import RankFindings
    from tracekit.replayer.simulation.gather import Gathered
    from tracekit.replayer.simulation.program import ReplayOptions
    from tracekit.replayer.simulation.folding import RankScan
    from tracekit.workloads.rank_template import RankTemplate

log = logging.getLogger(__name__)

__all__ = ["StampedClasses", "gather_class_set", "member_scan"]


def member_scan(scan: "RankScan", rank: int, path: str | None, value_map: dict[tuple[str, Any], Any]) -> "RankScan":
    """The :class:`~.folding.RankScan` of a member whose trace is ``scan``'s rank with ``value_map`` applied.

    Args:
        value_map: ``(attribute name, representative's value) -> member's value``
            for ``pg_name``/``comm_src``/``comm_dst`` only.
    """
    from tracekit.replayer.simulation.scan_tables import MemberScan

    pg, src, dst = slot_maps(value_map)
    return MemberScan.renamed(scan, rank, path, pg, src, dst)


def gather_class_set(cs: "ClassSet", options: "ReplayOptions", say: "Callable[..., None]") -> "Gathered":
    """Check and scan a rank-class set's representatives; members' scans and findings are theirs renamed.

    The folded replay of the result (:func:`.run.replay_with_traces`) equals replaying the expanded per-rank
    files.

    Raises:
        NotFoldable: a representative or derived member fails its checks, or groups are declared differently
            (the caller replays the expanded set unfolded, whose checks report it per rank).
    """
    from tracekit.io import trace_from_bytes
    from tracekit.replayer.simulation.folding import scan_rank
    from tracekit.replayer.simulation.gather import Gathered, check_errors, declare
    from tracekit.validate import check_rank

    label = str(cs.manifest)
    scans: dict[int, RankScan] = {}
    findings: list[RankFindings | None] = []
    kept: dict[int, ExecutionTrace] = {}
    declared: dict[str, tuple[int, ...]] = {}
    for k, cls in enumerate(cs.classes):
        say("checking and digesting rank classes", k, len(cs.classes))
        trace = cs.read_representative(cls)
        found = check_rank(trace) if options.check else None
        check_errors(cls.representative, found)
        declare(declared, found.declared_groups if found is not None else trace.process_groups(), cls.representative)
        scan = scan_rank(trace)
        kept[cls.representative] = trace
        exact = all(s.name in RENAMED for s in cls.slots)
        for index, rank in enumerate(cls.ranks):
            path = f"{label}#rank{rank}"
            if index == 0:
                scans[rank] = dc_replace(scan, path=path)
                findings.append(found)
            elif not exact:  # derive the member in full (module doc)
                member = trace_from_bytes(cs.rank_bytes(rank), path=path, rank=rank)
                findings.append(check_rank(member) if options.check else None)
                check_errors(rank, findings[-1])
                scans[rank] = scan_rank(member)
            else:
                vmap = cls.value_map(index)
                scans[rank] = member_scan(scan, rank, path, vmap)
                findings.append(member_findings(found, rank, vmap) if found is not None else None)

    def derive(rank: int) -> "ExecutionTrace":  # a digest class led by a rank that is no manifest representative
        return trace_from_bytes(cs.rank_bytes(rank), path=f"{label}#rank{rank}", rank=rank)

    return Gathered(scans, kept, declared, findings, cs.world_size, derive=derive)


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
    """Per-rank files stamped with their rank class (:data:`tracekit.classset.RANK_CLASS_ATTR`).

    The first clean file of a class is read the ordinary way (checked, scanned) and kept as a template;
    a later file of the class is derived from it without decoding: its node records must equal the
    template's with the file's own slot values put in, byte for byte (else it is read the ordinary way),
    and then its scan and check findings are the first file's renamed (:func:`member_scan`,
    :func:`~tracekit.classset.member_findings`), exactly as for a class set.
    """

    def __init__(self) -> None:
        self.first: dict[str, _Template] = {}

    def derive(
        self, rank: int, path: str, data: bytes
    ) -> "tuple[RankScan, RankFindings | None, dict[str, tuple[int, ...]]] | None":
        """``(scan, findings or None, declared groups)`` of a stamped member, or None (read it in full)."""
        from tracekit.classset import read_rank_class
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
        from tracekit.classset import read_rank_class
        from tracekit.workloads.rank_template import RankTemplate

        stamp = read_rank_class(data)
        if stamp is None or stamp[0] in self.first or (findings is not None and findings.issues):
            return
        key, slots, values, offset = stamp
        if not all(s.name in RENAMED for s in slots):
            return
        attrs: dict[object, Attr] = {i: Attr(s.name, v, s.kind) for i, (s, v) in enumerate(zip(slots, values))}
        self.first[key] = _Template(slots, values, RankTemplate(data, attrs), offset, scan, findings, groups)
