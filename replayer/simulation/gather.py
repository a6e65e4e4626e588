"""Reading a job for a folded replay: per rank a small scan, the full trace only for the first of each class.

:func:`gather_files` reads rank files one at a time; :func:`.class_replay.gather_class_set` reads a class set's
representatives. Both give a :class:`Gathered` to :func:`.run.replay_with_traces`, which proves the folding
(:func:`.folding.plan_folding`) and simulates the representatives; a :class:`~.folding.NotFoldable` raised here
makes it replay the whole job unfolded instead (and say why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from tracekit.replayer.simulation.folding import ASTRA_WORLD_SPANS_CLASSES, NotFoldable, RankScan, scan_rank
from tracekit.model.groups import GroupsMerger, shared_groups

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.sets.classset import ClassSet
    from tracekit.model import ExecutionTrace
    from tracekit.replayer.simulation.program import ReplayOptions
    from tracekit.checks.validate import RankFindings

__all__ = ["Gathered", "gather_files"]


@dataclass
class Gathered:
    """What a folded replay needs of a job before the proof.

    Attributes:
        scans: every rank's :class:`~.folding.RankScan` (0..world-1).
        kept: the traces kept in full (at least the first rank of each digest class), by rank.
        declared: the process groups the ranks declare (unresolved).
        findings: per rank its check findings (None where not checked).
        world: the job's number of ranks.
        spec_ranks: the ranks that have files (for the spec-size check; None = all of ``world``).
        derive: ``rank -> trace`` for a representative that is not in ``kept`` (None: all are).
    """

    scans: dict[int, RankScan]
    kept: dict[int, "ExecutionTrace"]
    declared: dict[str, tuple[int, ...]]
    findings: list["RankFindings | None"]
    world: int
    spec_ranks: list[int] | None = None
    derive: "Callable[[int], ExecutionTrace] | None" = None


def declare(merger: GroupsMerger, groups: dict[str, tuple[int, ...]], rank: int) -> None:
    """Add one rank's declared groups to ``merger.groups`` (O(1) for the declaration merged just before).

    Raises:
        NotFoldable: a group is declared with other ranks than before.
    """
    name = merger.add(groups)
    if name is not None:
        raise NotFoldable(
            f"rank {rank} declares process group {name!r} as {list(groups[name])[:16]}, another rank "
            f"as {list(merger.groups[name])[:16]}"
        )


def check_errors(rank: int, findings: "RankFindings | None") -> None:
    """Raise NotFoldable when ``findings`` has errors (the unfolded replay's checks then report them in full)."""
    from tracekit.checks.validate import ERROR

    if findings is not None and any(i.severity == ERROR for i in findings.issues):
        raise NotFoldable(f"rank {rank} fails the up-front checks")


def _first_world_collective(scan: RankScan) -> tuple[int, int] | None:
    """``(node id, comm_type)`` of the first collective of the default group in ``scan``, or None."""
    from tracekit.model.groups import DEFAULT_PG

    positions = scan.coll.get(DEFAULT_PG)
    if not positions:
        return None
    return scan.comm_ids[positions[0]], scan.coll_attr[positions[0]][0]


def gather_files(
    traces: Any, options: "ReplayOptions", say: Callable[..., None], *, one_class: bool = False
) -> Gathered:
    """Read, check and scan rank files one at a time (a prefix, glob or directory: :func:`tracekit.io.trace_paths`).

    Each rank is checked (when ``options.check``), digested (:func:`~.folding.scan_rank`) and dropped unless it
    is the first of its class, so memory holds the representatives plus a small table per rank. Files stamped
    with their rank class are derived from the class's first file (:class:`~.class_replay.StampedClasses`).

    ``one_class``: the model folds only a job of one class (ASTRA-sim's, :func:`.folding._astra_foldable`): stop
    once the ranks read hold two classes and a class of two (:data:`ASTRA_WORLD_SPANS_CLASSES`); the last rank
    is digested out of turn once the first are one class of two (:class:`_LastRankProbe`).

    Raises:
        NotFoldable: a rank fails its checks, ranks declare a group differently, or ``one_class`` fails.
        TraceFormatError: an unreadable file. ReplayError: a rank of the job has no file.
    """
    from tracekit.io import _read_raw, read_trace, trace_from_bytes, trace_paths
    from tracekit.replayer.simulation.class_replay import StampedClasses
    from tracekit.checks.validate import check_rank

    pairs = trace_paths(traces)
    scans: dict[int, RankScan] = {}
    kept: dict[int, "ExecutionTrace"] = {}
    first: dict[bytes, RankScan] = {}
    digests: set[bytes] = set()  # classes seen, for one_class
    findings: list["RankFindings | None"] = []
    merger = GroupsMerger()  # ranks with equal pg-init records share one declaration (shared_groups)
    declared = merger.groups
    stamped = StampedClasses()  # members of stamped files are derived, not decoded (class_replay.py)
    probe = _LastRankProbe(pairs if one_class else [])
    for rank, path in pairs:
        probe.check(digests, scans)
        say("reading and digesting ranks", len(scans), len(pairs))
        spath = str(path)
        data = None if spath.endswith((".json", ".json.gz")) else _read_raw(path)
        derived = stamped.derive(rank, spath, data) if data is not None else None
        if derived is not None and (derived[1] is not None or not options.check):
            scans[rank], f, groups_here = derived
            if options.check:
                findings.append(f)
            declare(merger, groups_here, rank)
            _one_class(one_class, scans, digests, scans[rank])
            continue
        trace = read_trace(path, rank=rank) if data is None else trace_from_bytes(data, path=spath, rank=rank)
        f = None
        if options.check:
            f = check_rank(trace)
            findings.append(f)
            check_errors(rank, f)
            groups_here = f.declared_groups
        else:
            groups_here = shared_groups(trace)
        declare(merger, groups_here, rank)
        scan = scan_rank(trace)
        seen = first.get(scan.digest)
        if seen is None:
            first[scan.digest] = scan
            kept[rank] = trace
        else:  # equal by the digest: share the rank-local tables
            scan.coll_attr, scan.comm_ids = seen.coll_attr, seen.comm_ids
        scans[rank] = scan
        _one_class(one_class, scans, digests, scan)
        if data is not None:
            stamped.remember(data, scan, f, groups_here)
        del trace, data
    return _whole_job(traces, pairs, options, scans, kept, declared, findings)


def _whole_job(
    traces: Any,
    pairs: list[tuple[int, Any]],
    options: "ReplayOptions",
    scans: dict[int, RankScan],
    kept: dict[int, "ExecutionTrace"],
    declared: dict[str, tuple[int, ...]],
    findings: list["RankFindings | None"],
) -> "Gathered":
    """:func:`gather_files`' end: the comm-group file's groups merged, the world size, the whole-job checks.

    Raises:
        ReplayError: a rank of the job has no file. NotFoldable: a whole-job check fails.
    """
    from tracekit.replayer.simulation.checks import check_complete
    from tracekit.model.groups import default_group_size
    from tracekit.replayer.simulation.whole_job import check_whole_job

    if options.comm_groups:  # an ASTRA-sim comm-group file (tracekit.sets.comm_groups)
        from tracekit.sets.comm_groups import merge_declared

        declared = merge_declared(declared, dict(options.comm_groups), options.comm_groups_path)
    world = max([r for r, _ in pairs] + [max(v) for v in declared.values() if v], default=-1) + 1
    check_complete(scans, world, path=str(traces), file=str(pairs[0][1]))
    if world > 1:  # a one-rank job is not folded: the unfolded replay checks it (run.replay_traceset)
        low = scans[min(scans)]
        rep = kept.get(low.rank)
        size = (lambda: default_group_size(rep)) if rep is not None else (lambda: None)
        check_whole_job(low.path, low.rank, world, declared, lambda: _first_world_collective(low), size)
    return Gathered(scans, kept, declared, findings, world, spec_ranks=sorted(scans))


def _one_class(wanted: bool, scans: dict[int, RankScan], digests: set[bytes], scan: RankScan) -> None:
    """With ``wanted``: raise NotFoldable once ``scans`` hold two classes (digests) and a class of two ranks."""
    if wanted:
        digests.add(scan.digest)
        if 1 < len(digests) < len(scans):
            raise NotFoldable(ASTRA_WORLD_SPANS_CLASSES)


class _LastRankProbe:
    """For ``gather_files(one_class=True)``: one out-of-turn digest of the job's last rank file.

    Once the ranks read so far are one class with two or more members, a last rank of another class settles the
    outcome (two classes, one of two: :data:`ASTRA_WORLD_SPANS_CLASSES`) without reading the ranks between; in a
    TP x PP x DP job the first ranks are the first pipeline stage and the last rank the last stage.  The probed
    trace is not kept (read again in turn when it is of the same class); a file the probe cannot read or digest is
    left to its turn, which reports it as before.
    """

    def __init__(self, pairs: list) -> None:  # no pairs: never probes
        self.pending = len(pairs) > 3
        self.rank: int | None = pairs[-1][0] if pairs else None
        self.path: Any = pairs[-1][1] if pairs else None

    def check(self, digests: set[bytes], scans: dict[int, RankScan]) -> None:
        """Probe once, when ``scans`` (read in turn) are one class of two or more.

        Raises:
            NotFoldable: the last rank is of another class.
        """
        if not self.pending or len(digests) != 1 or len(scans) < 2 or self.rank in scans:
            return
        from tracekit.errors import TracekitError
        from tracekit.io import read_trace

        self.pending = False
        try:
            digest = scan_rank(read_trace(self.path, rank=self.rank)).digest
        except (TracekitError, OSError):  # read in turn, where the error is reported as before
            return
        if digest not in digests:
            raise NotFoldable(ASTRA_WORLD_SPANS_CLASSES)


def gather_class_set(cs: "ClassSet", options: "ReplayOptions", say: "Callable[..., None]") -> "Gathered":
    """Check and scan a rank-class set's representatives; members' scans and findings are theirs renamed.

    The folded replay of the result (:func:`.run.replay_with_traces`) equals replaying the expanded per-rank
    files.

    Raises:
        NotFoldable: a representative or derived member fails its checks, or groups are declared differently
            (the caller replays the expanded set unfolded, whose checks report it per rank).
    """
    from dataclasses import replace as dc_replace

    from tracekit.checks.classset import RENAMED, member_findings
    from tracekit.replayer.simulation.attr_pass import REPLAY_ATTRS, ROOFLINE_ATTRS
    from tracekit.replayer.simulation.class_replay import member_scan
    from tracekit.io import trace_from_bytes
    from tracekit.replayer.simulation.folding import scan_rank
    from tracekit.checks.validate import check_rank

    label = str(cs.manifest)
    scans: dict[int, RankScan] = {}
    findings: list[RankFindings | None] = []
    kept: dict[int, ExecutionTrace] = {}
    merger = GroupsMerger()
    declared = merger.groups
    for k, cls in enumerate(cs.classes):
        say("checking and digesting rank classes", k, len(cs.classes))
        trace = cs.read_representative(cls)
        trace.columns().keep_attrs(REPLAY_ATTRS + ROOFLINE_ATTRS)  # checks and digest: one attribute search
        found = check_rank(trace) if options.check else None
        check_errors(cls.representative, found)
        declare(merger, found.declared_groups if found is not None else shared_groups(trace), cls.representative)
        scan = scan_rank(trace)
        trace.columns().release_attrs()  # (a NotFoldable above drops the trace: the job replays unfolded)
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
