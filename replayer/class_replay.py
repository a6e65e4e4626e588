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
then proven on the whole job exactly as for per-rank files, and only the
representatives are simulated.

When a class's slots touch any other attribute the renaming would not be
exact: those members are derived in full (:meth:`ClassSet.rank_bytes`) and
scanned like files.  When folding cannot be proven, or a representative has
check errors, the job is expanded in memory and replayed unfolded (so the
result, or the error report, is exactly the per-rank one).
"""

from __future__ import annotations

import logging
from dataclasses import replace as dc_replace
from typing import TYPE_CHECKING, Any, Callable

from tracekit.classset import RENAMED, member_findings, slot_maps
from tracekit.model import Attr

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.classset import ClassSet
    from tracekit.replayer._program import ReplayOptions
    from tracekit.replayer.folding import RankScan

log = logging.getLogger(__name__)

__all__ = ["StampedClasses", "member_scan", "replay_class_set"]


def member_scan(scan: "RankScan", rank: int, path: str | None, value_map: dict[tuple[str, Any], Any]) -> "RankScan":
    """The :class:`~.folding.RankScan` of a member whose trace is ``scan``'s rank with ``value_map`` applied.

    Args:
        value_map: ``(attribute name, representative's value) -> member's value``
            for ``pg_name``/``comm_src``/``comm_dst`` only.
    """
    from tracekit.replayer.folding import RankScan

    pg, src, dst = slot_maps(value_map)
    return RankScan(
        rank, path, scan.n, scan.digest,
        {pg.get(k, k): v for k, v in scan.coll.items()}, scan.coll_attr,
        {(dst.get(peer, peer), tag): v for (peer, tag), v in scan.sends.items()},
        {(src.get(peer, peer), tag): v for (peer, tag), v in scan.recvs.items()},
        {p: (size, pg.get(name, name)) for p, (size, name) in scan.p2p_attr.items()},
        scan.comm_count, scan.comm_ids)


def replay_class_set(cs: "ClassSet", spec: Any, *, options: "ReplayOptions | None" = None,
                     status: "Callable[[str], None] | None" = None):
    """Replay a rank-class set; same result as replaying its expanded per-rank files.

    Returns:
        ``(result, traceset)`` as :func:`.folding.replay_files` (the trace set
        holds the representatives only when folded).

    Raises:
        as :func:`tracekit.replayer.replay`.
    """
    from tracekit.groups import resolve_groups
    from tracekit.replayer import replay
    from tracekit.replayer._program import ReplayOptions, effective_spec
    from tracekit.replayer.checks import ReplayCheckError, check_spec_size
    from tracekit.replayer.folding import FoldInfo, NotFoldable, plan_folding, replay_folded, scan_rank
    from tracekit.replayer.hardware import HardwareSpec, load_spec
    from tracekit.traceset import TraceSet
    from tracekit.validate import ERROR, check_rank, cross_rank_checks

    options = options or ReplayOptions()
    if not isinstance(spec, HardwareSpec):
        spec = load_spec(spec)
    label = str(cs.manifest)

    def unfolded(reason: str | None):
        ts = cs.to_traceset()
        result = replay(ts, spec, options=dc_replace(options, fold=False))
        if reason is not None:
            result = dc_replace(result, folding=FoldInfo(len(ts), len(ts), reason))
        return result, ts

    if not options.fold:
        return unfolded(None)
    scans: dict[int, "RankScan"] = {}
    findings = []
    kept = {}
    declared: dict[str, tuple[int, ...]] = {}
    say = status or (lambda text: None)
    for k, cls in enumerate(cs.classes):
        say(f"checking and digesting rank class {k + 1} of {len(cs.classes)}")
        trace = cs.read_representative(cls)
        found = check_rank(trace) if options.check else None
        if found is not None and any(i.severity == ERROR for i in found.issues):
            return unfolded(None)  # the unfolded replay's checks report it with the member ranks
        groups_here = found.declared_groups if found is not None else trace.process_groups()
        for name, ranks in groups_here.items():
            if declared.setdefault(name, ranks) != ranks:
                return unfolded(None)
        scan = scan_rank(trace)
        kept[cls.representative] = trace
        exact = all(s.name in RENAMED for s in cls.slots)
        for index, rank in enumerate(cls.ranks):
            path = f"{label}#rank{rank}"
            if index == 0:
                scans[rank] = dc_replace(scan, path=path)
                findings.append(found)
                continue
            if not exact:  # derive the member in full (module doc)
                from tracekit.io import trace_from_bytes

                member = trace_from_bytes(cs.rank_bytes(rank), path=path, rank=rank)
                findings.append(check_rank(member) if options.check else None)
                scans[rank] = scan_rank(member)
                continue
            vmap = cls.value_map(index)
            scans[rank] = member_scan(scan, rank, path, vmap)
            findings.append(member_findings(found, rank, vmap) if found is not None else None)
    world = cs.world_size
    try:
        groups = resolve_groups(declared, world)
    except Exception:  # noqa: BLE001 - the unfolded replay reports it
        return unfolded(None)
    if options.check:
        if any(f is not None and any(i.severity == ERROR for i in f.issues) for f in findings):
            return unfolded(None)
        report = cross_rank_checks([f for f in findings if f is not None], groups, world)
        if report.errors:
            raise ReplayCheckError(list(report.errors))
    ts = TraceSet(kept, process_groups=declared)
    check_spec_size(ts, spec, world_size=world)
    fitted = effective_spec(spec, options, world)
    try:
        say(f"proving rank folding over {world} ranks")
        plan = plan_folding(scans, groups, fitted, options)
    except NotFoldable as exc:
        log.info("not folding: %s", exc)
        del kept, ts, scans
        return unfolded(str(exc))
    missing = [r for r in plan.reps if r not in kept]
    if missing:  # a digest class led by a rank that is no manifest representative
        for r in missing:
            from tracekit.io import trace_from_bytes

            kept[r] = trace_from_bytes(cs.rank_bytes(r), path=f"{label}#rank{r}", rank=r)
        ts = TraceSet(kept, process_groups=declared)
    paths = tuple(scans[r].path for r in range(world))
    say(f"simulating {len(plan.reps)} representative ranks and expanding to {world}")
    return replay_folded(ts, fitted, options, plan, world_paths=paths), ts


class StampedClasses:
    """Per-rank files stamped with their rank class (:data:`tracekit.classset.RANK_CLASS_ATTR`).

    The first clean file of a class is read the ordinary way (checked, scanned) and kept as a template;
    a later file of the class is derived from it without decoding: its node records must equal the
    template's with the file's own slot values put in, byte for byte (else it is read the ordinary way),
    and then its scan and check findings are the first file's renamed (:func:`member_scan`,
    :func:`~tracekit.classset.member_findings`), exactly as for a class set.
    """

    def __init__(self) -> None:
        self.first: dict[str, tuple] = {}

    def derive(self, rank: int, path: str, data: bytes):
        """``(scan, findings or None, declared groups)`` of a stamped member, or None (read it in full)."""
        from tracekit.classset import read_rank_class
        from tracekit.errors import ConfigError
        from tracekit.model import Attr

        stamp = read_rank_class(data)
        if stamp is None or stamp[0] not in self.first:
            return None
        key, slots, values, offset = stamp
        f_slots, f_values, template, f_offset, scan, findings, groups = self.first[key]
        if slots != f_slots:
            return None
        try:
            expected = template.for_rank({i: Attr(s.name, v, s.kind) for i, (s, v) in enumerate(zip(slots, values))})
        except ConfigError:
            return None
        if memoryview(expected)[f_offset:] != memoryview(data)[offset:]:
            return None
        vmap = {(s.name, fv): v for s, fv, v in zip(slots, f_values, values)}
        return (member_scan(scan, rank, path, vmap),
                member_findings(findings, rank, vmap) if findings is not None else None, groups)

    def remember(self, data: bytes, scan, findings, groups) -> None:
        """Keep a fully read file as its class's template (when stamped, clean and renaming-only)."""
        from tracekit.classset import read_rank_class
        from tracekit.workloads.rank_template import RankTemplate

        stamp = read_rank_class(data)
        if stamp is None or stamp[0] in self.first or (findings is not None and findings.issues):
            return
        key, slots, values, offset = stamp
        if not all(s.name in RENAMED for s in slots):
            return
        attrs = {i: Attr(s.name, v, s.kind) for i, (s, v) in enumerate(zip(slots, values))}
        self.first[key] = (slots, values, RankTemplate(data, attrs), offset, scan, findings, groups)
