"""Rank-class sets: a job stored as one trace per class of ranks plus a manifest.

In generated (and rescaled) jobs most ranks differ from a *representative*
only in a few attribute values: the ``pg_name`` of their groups and the
peers (``comm_src``/``comm_dst``) of their sends and receives.  A rank-class
set stores the job as

- ``<prefix>.class<k>.et``: the representative's Chakra trace of class k
  (an ordinary `.et` file; the representative is the lowest rank of its class);
- ``<prefix>.classes.json``: the manifest: world size, and per class its file,
  its ranks, the representative's varying attributes (*slots*: name, kind,
  value) and each member's values for those slots.

A member's trace is the representative's with every attribute equal (same
name, kind and value, byte for byte in the wire format) to a slot replaced by
the member's value: :class:`tracekit.workloads.rank_template.RankTemplate`
does it on the encoded bytes, so :meth:`ClassSet.rank_bytes` gives exactly the
file a per-rank writer would have written (``tracekit expand`` writes them).

Every command resolves a TRACES argument naming a manifest, its prefix, or a
directory holding one manifest to the class set (:func:`find_class_set`);
:meth:`ClassSet.to_traceset` gives the per-rank :class:`TraceSet` (bytes
derived on demand), and the replayer simulates class sets without deriving
the members' traces (``tracekit.replayer.simulation.class_replay``).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from tracekit.errors import TraceFormatError, TracekitError
from tracekit.model import Attr

__all__ = [
    "ClassSet",
    "RankClass",
    "MANIFEST_SUFFIX",
    "find_class_set",
    "read_class_set",
    "summarize_class_set",
    "validate_class_set",
    "write_class_set",
]

FORMAT = "tracekit-rank-classes"
VERSION = 1
MANIFEST_SUFFIX = ".classes.json"
RENAMED = frozenset({"pg_name", "comm_src", "comm_dst"})  # slots whose effect on checks is a renaming
_KINDS = ("string_val", "int32_val", "int64_val", "uint32_val", "uint64_val", "bool_val")


@dataclass(frozen=True)
class RankClass:
    """One class of ranks.

    Attributes:
        file: the representative's `.et` file.
        ranks: the member ranks, ascending; ``ranks[0]`` is the representative.
        slots: the representative's varying attributes (name, kind, value).
        values: per member (aligned with ``ranks``), its value for each slot.
    """

    file: Path
    ranks: tuple[int, ...]
    slots: tuple[Attr, ...]
    values: tuple[tuple[Any, ...], ...]

    @property
    def representative(self) -> int:
        """The rank whose trace stands for the class (the first of ``ranks``)."""
        return self.ranks[0]

    def member_attrs(self, index: int) -> tuple[Attr, ...]:
        """The slot attributes of member ``ranks[index]``."""
        return tuple(Attr(s.name, v, s.kind) for s, v in zip(self.slots, self.values[index]))

    def value_map(self, index: int) -> dict[tuple[str, Any], Any]:
        """``(attribute name, representative's value) -> member's value`` for member ``ranks[index]``."""
        return {(s.name, s.value): v for s, v in zip(self.slots, self.values[index])}


@dataclass(frozen=True)
class ClassSet:
    """A job stored as rank classes (module doc).  ``manifest``: the `.classes.json` path."""

    manifest: Path
    world_size: int
    classes: tuple[RankClass, ...]

    def locate(self, rank: int) -> tuple[RankClass, int]:
        """The class of ``rank`` and its index in the class.

        Raises:
            TracekitError: ``rank`` is not in the job (names the manifest).
        """
        for c in self.classes:
            if rank in c.ranks:  # tuples of ranks: fine for thousands of ranks, called per rank
                return c, c.ranks.index(rank)
        raise TracekitError(f"rank {rank} is not in the job ({self.world_size} ranks)", path=self.manifest)

    def rank_bytes(self, rank: int) -> bytes:
        """The `.et` bytes of ``rank`` (exactly what a per-rank writer writes).

        Raises:
            TracekitError: ``rank`` is not in the job.
            TraceFormatError: the class file cannot be decoded.
            OSError: the class file cannot be read.
        """
        cls, index = self.locate(rank)
        return self._template(cls).for_rank(dict(enumerate(cls.member_attrs(index))))

    def _template(self, cls: RankClass):
        from tracekit.workloads.rank_template import RankTemplate
        from tracekit.io import _read_raw

        cache = self.__dict__.setdefault("_templates", {})
        if cls.file not in cache:
            from tracekit.errors import TracekitError

            cache.clear()  # one representative's bytes at a time
            try:
                cache[cls.file] = RankTemplate(_read_raw(cls.file), dict(enumerate(cls.slots)))
            except TracekitError as exc:  # name the class file (the framing error knows only the byte offset)
                raise exc.with_context(path=cls.file, rank=cls.representative) from None
        return cache[cls.file]

    def iter_rank_bytes(self, *, stamp: bool = False) -> Iterator[tuple[int, bytes]]:
        """``(rank, .et bytes)`` class by class (one representative in memory at a time).

        With ``stamp`` each file's metadata names its class (:func:`stamp_rank_class`), so a replay of the
        per-rank files derives members from their class's first file instead of decoding them.
        """
        for cls in self.classes:
            template = self._template(cls)
            key = class_key(template.data) if stamp else ""
            for index, rank in enumerate(cls.ranks):
                data = template.for_rank(dict(enumerate(cls.member_attrs(index))))
                yield rank, stamp_rank_class(data, key, cls.slots, cls.values[index]) if stamp else data

    def read_representative(self, cls: RankClass):
        """The representative's :class:`ExecutionTrace` (rank = the representative).

        Raises:
            TraceFormatError: the class file is not a trace.
            OSError: it cannot be read.
        """
        from tracekit.io import read_trace

        return read_trace(cls.file, rank=cls.representative)

    def to_traceset(self):
        """Every rank's trace (encoded bytes held per rank, nodes decoded on first use)."""
        from tracekit.io import trace_from_bytes
        from tracekit.traceset import TraceSet

        path = str(self.manifest)
        return TraceSet({r: trace_from_bytes(b, path=f"{path}#rank{r}", rank=r) for r, b in self.iter_rank_bytes()})

    def expand(self, prefix: str | os.PathLike[str], *, progress=None) -> list[Path]:
        """Write the per-rank Chakra files ``<prefix>.<rank>.et`` (as a unit: see TraceSetWriter).

        Each file's metadata carries its class stamp (:data:`RANK_CLASS_ATTR`); node records are exactly
        the member's.

        Returns:
            the paths written, in rank order.

        Raises:
            TracekitError: the prefix holds other rank files, or an output is an input of the running command.
            TraceFormatError: a class file cannot be decoded.
        """
        from tracekit.io import TraceSetWriter

        items: Iterable[tuple[int, bytes]] = self.iter_rank_bytes(stamp=True)
        if progress is not None:
            items = progress(items, self.world_size)
        from tracekit.astra_compat import astra_group_ids, comm_groups_document
        from tracekit.groups import resolve_groups
        from tracekit.io import trace_from_bytes

        declared: dict = {}
        with TraceSetWriter(prefix) as writer:
            for rank, data in items:
                writer.add(rank, data)
                if rank == 0:  # generated sets declare every group on every rank
                    declared = trace_from_bytes(data, rank=rank).process_groups()
            groups = resolve_groups(declared, self.world_size)  # ASTRA-sim's comm-group file beside the set
            writer.comm_groups = comm_groups_document(groups, astra_group_ids(groups, self.world_size))
        return writer.paths


def _bad(path: Path, message: str) -> TraceFormatError:
    return TraceFormatError(f"bad rank-class manifest: {message}", path=path)


def read_class_set(path: str | os.PathLike[str]) -> ClassSet:
    """Parse a `.classes.json` manifest (files resolved beside it).

    Raises:
        TraceFormatError: not JSON, wrong format tag, ranks not exactly
            0..world_size-1 once each, a representative that is not the lowest
            rank of its class, slots and values of different lengths, a missing
            class file.
    """
    import orjson

    from tracekit.io import read_input_bytes

    p = Path(path)
    try:
        doc = orjson.loads(read_input_bytes(p))
    except orjson.JSONDecodeError as exc:
        raise _bad(p, f"not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise _bad(p, f"expected format {FORMAT!r} version {VERSION}")
    world = doc.get("world_size")
    if not isinstance(world, int) or world < 1:
        raise _bad(p, f"world_size {world!r} is not a positive integer")
    from tracekit.node import MAX_RANKS

    if world > MAX_RANKS:  # before any per-rank set is built (10**12 ranks exhausted memory)
        raise _bad(p, f"world_size {world:,} is out of range (1 to {MAX_RANKS:,})")
    classes, seen = [], set()
    for k, c in enumerate(doc.get("classes") or []):
        try:
            ranks = tuple(int(r) for r in c["ranks"])
            slots = tuple(Attr(str(n), v, str(kind)) for n, kind, v in c["slots"])
            values = tuple(tuple(v) for v in c["values"])
            name = str(c["file"])
        except KeyError as exc:
            raise _bad(p, f"class {k}: no {exc.args[0]!r} entry") from None
        except (TypeError, ValueError) as exc:
            raise _bad(p, f"class {k}: {exc}") from None
        if Path(name).name != name or name in ("", ".", ".."):  # written beside the manifest, read only there
            raise _bad(p, f"class {k}: trace file {name!r} is not a file name beside the manifest")
        file = p.parent / name
        if not ranks or list(ranks) != sorted(set(ranks)):
            raise _bad(p, f"class {k}: ranks must be ascending and distinct")
        if len(values) != len(ranks) or any(len(v) != len(slots) for v in values):
            raise _bad(p, f"class {k}: one value per slot per rank expected")
        if any(s.kind not in _KINDS for s in slots):
            raise _bad(p, f"class {k}: slot kinds must be among {', '.join(_KINDS)}")
        if tuple(values[0]) != tuple(s.value for s in slots):
            raise _bad(p, f"class {k}: the representative's values differ from its slots")
        if not file.is_file():
            raise _bad(p, f"class {k}: missing trace file {file}")
        if seen & set(ranks):
            raise _bad(p, f"class {k}: rank(s) {sorted(seen & set(ranks))[:8]} in two classes")
        seen.update(ranks)
        classes.append(RankClass(file, ranks, slots, values))
    if seen != set(range(world)):
        missing = sorted(set(range(world)) - seen)[:8]
        raise _bad(
            p,
            f"ranks must be 0..{world - 1} exactly once (missing {missing}, extra "
            f"{sorted(seen - set(range(world)))[:8]})",
        )
    return ClassSet(p, world, tuple(classes))


def find_class_set(spec: Any) -> ClassSet | None:
    """The class set a TRACES argument names, or None (then it names per-rank files).

    ``spec`` names a manifest when it is the `.classes.json` file itself, a
    prefix ``dir/job`` with ``dir/job.classes.json``, or a directory holding
    exactly one manifest and no ``*.<rank>.et`` file.

    Raises:
        TraceFormatError: the manifest it names is invalid (see :func:`read_class_set`).
    """
    if not isinstance(spec, (str, os.PathLike)):
        return None
    s = os.fspath(spec)
    p = Path(s)
    if s.endswith(MANIFEST_SUFFIX) and p.is_file():
        return read_class_set(p)
    if not p.is_dir() and Path(s + MANIFEST_SUFFIX).is_file():
        return read_class_set(s + MANIFEST_SUFFIX)
    if p.is_dir():
        from tracekit.io import rank_from_path

        manifests = sorted(p.glob("*" + MANIFEST_SUFFIX))
        if len(manifests) == 1 and not any(rank_from_path(f.name) is not None for f in p.iterdir()):
            return read_class_set(manifests[0])
    return None


def write_class_set(
    prefix: str | os.PathLike[str],
    world_size: int,
    classes: Iterable[tuple[bytes, Sequence[Attr], Sequence[tuple[int, Sequence[Attr]]]]],
) -> Path:
    """Write ``<prefix>.class<k>.et`` and ``<prefix>.classes.json``; returns the manifest path.

    Args:
        prefix: output prefix (``dir/job``).
        world_size: ranks of the job.
        classes: per class ``(representative's .et bytes, its slot attributes,
            [(rank, that rank's slot attributes), ...])`` with the
            representative first (the lowest rank).

    All files appear together: an error or Ctrl-C removes the ones written.

    Raises:
        TracekitError: an output is an input of the running command.
        TraceFormatError: the manifest is inconsistent (as :func:`read_class_set` checks it).
    """
    import orjson

    from tracekit.io import atomic_output

    base = Path(os.fspath(prefix))
    written: list[Path] = []
    entries = []
    try:
        for k, (data, slots, members) in enumerate(classes):
            file = base.parent / f"{base.name}.class{k}.et"
            with atomic_output(file) as fh:
                fh.write(data)
            written.append(file)
            entries.append(
                {
                    "file": file.name,
                    "ranks": [int(r) for r, _ in members],
                    "slots": [[a.name, a.kind, a.value] for a in slots],
                    "values": [[a.value for a in attrs] for _, attrs in members],
                }
            )
        manifest = base.parent / f"{base.name}{MANIFEST_SUFFIX}"
        doc = {"format": FORMAT, "version": VERSION, "world_size": int(world_size), "classes": entries}
        with atomic_output(manifest) as fh:
            fh.write(orjson.dumps(doc))
        written.append(manifest)
        read_class_set(manifest)
    except BaseException:
        for f in written:
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
        raise
    return manifest


# ----- checks and summaries of a class set, per class ------------------------------------------


def slot_maps(value_map: dict[tuple[str, Any], Any]) -> tuple[dict[str, str], dict[int, int], dict[int, int]]:
    """Group-name, source-peer and destination-peer renamings of a member's value map (canonical group names)."""
    from tracekit.groups import canonical_pg_name

    pg = {
        canonical_pg_name(str(old)): canonical_pg_name(str(new))
        for (name, old), new in value_map.items()
        if name == "pg_name"
    }
    src = {int(old): int(new) for (name, old), new in value_map.items() if name == "comm_src"}
    dst = {int(old): int(new) for (name, old), new in value_map.items() if name == "comm_dst"}
    return pg, src, dst


def member_findings(findings, rank: int, value_map: dict[tuple[str, Any], Any]):
    """A member's :class:`~tracekit.validate.RankFindings` from its representative's (which has no issues).

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


def _member_trace(cs: ClassSet, rank: int):
    from tracekit.io import trace_from_bytes

    return trace_from_bytes(cs.rank_bytes(rank), path=f"{cs.manifest}#rank{rank}", rank=rank)


def check_class_set(cs: ClassSet) -> list:
    """:func:`tracekit.validate.check_rank` findings of every rank, in rank order.

    Representatives are checked; members derived (:func:`member_findings`)
    when the representative has no issue and the class varies only
    :data:`RENAMED` attributes, else checked on their derived trace.

    Raises:
        TraceFormatError: a class file cannot be decoded.
    """
    from tracekit.validate import check_rank

    out = {}
    for cls in cs.classes:
        rep = check_rank(cs.read_representative(cls))
        out[cls.representative] = rep
        exact = not rep.issues and all(s.name in RENAMED for s in cls.slots)
        for index, rank in enumerate(cls.ranks[1:], start=1):
            out[rank] = (
                member_findings(rep, rank, cls.value_map(index)) if exact else check_rank(_member_trace(cs, rank))
            )
    return [out[r] for r in sorted(out)]


def validate_class_set(cs: ClassSet):
    """:func:`tracekit.validate.validate_files` for a class set -> ValidationReport.

    Findings are in the report, never raised.

    Raises:
        TraceFormatError: a class file cannot be decoded.
    """
    from tracekit.groups import resolve_groups
    from tracekit.validate import ValidationError, cross_rank_checks, _report, Issue, ERROR

    findings = check_class_set(cs)
    declared: dict[str, tuple[int, ...]] = {}
    for f in findings:
        for name, ranks in f.declared_groups.items():
            if declared.setdefault(name, ranks) != ranks:
                return _report(
                    findings,
                    error=Issue(
                        "process-groups",
                        ERROR,
                        f"process group {name!r} declared differently on rank {f.rank}",
                        str(cs.manifest),
                        f.rank,
                    ),
                )
    try:
        groups = resolve_groups(declared, cs.world_size)
    except ValidationError as exc:
        return _report(findings, error=Issue("process-groups", ERROR, exc.message))
    return cross_rank_checks(findings, groups, cs.world_size)


def summarize_class_set(cs: ClassSet):
    """:func:`tracekit.summary.summarize_files` for a class set (a member's summary is its representative's).

    Raises:
        TraceFormatError: a class file cannot be decoded.
        ValidationError: a ``process_group:init`` value cannot be parsed, or a group names a rank outside the world.
    """
    from dataclasses import replace

    from tracekit.groups import pg_descriptions, resolve_groups
    from tracekit.summary import TraceSetSummary, summarize_trace

    per_rank, declared, descs = {}, {}, {}
    for cls in cs.classes:
        trace = cs.read_representative(cls)
        declared.update(trace.process_groups())
        descs.update(pg_descriptions(trace))
        rep = summarize_trace(trace)
        for rank in cls.ranks:
            per_rank[rank] = replace(rep, rank=rank, path=f"{cs.manifest}#rank{rank}")
    groups = {k: list(v) for k, v in resolve_groups(declared, cs.world_size).items()}
    return TraceSetSummary(
        ranks=cs.world_size,
        process_groups=groups,
        per_rank=[per_rank[r] for r in sorted(per_rank)],
        process_group_descs=descs,
    )


# ----- transforms of a class set, per class ----------------------------------------------------

#: Steps whose result on a member is the member's slot values put into their result on the representative:
#: they read and write each rank's nodes by type, dependencies, durations, sizes and streams, never group
#: names or peers, and add no attribute equal to a slot.
CLASSWISE_TRANSFORMS = ("ScaleCompute", "ScaleComm", "Retarget", "DropCpuOps", "Compact")


def classwise(pipeline) -> bool:
    """Whether :func:`transform_class_set` can run ``pipeline`` (every step in :data:`CLASSWISE_TRANSFORMS`)."""
    return all(type(step).__name__ in CLASSWISE_TRANSFORMS for step in pipeline.steps)


def transform_class_set(cs: ClassSet, pipeline, output: str | os.PathLike[str]) -> tuple[Path, int, int]:
    """Run ``pipeline`` on each class representative and write the result as a class set.

    Returns:
        ``(manifest path, nodes in, nodes out)`` counted over every rank.

    Raises:
        TracekitError: a step is not class-wise (see :func:`classwise`), an output is an input of the
            running command, or as the steps raise (TransformError, ConfigError).
        TraceFormatError: a class file cannot be decoded.
    """
    from tracekit.io import encode_trace
    from tracekit.traceset import TraceSet

    if not classwise(pipeline):
        raise TracekitError(
            "these steps need every rank: "
            + ", ".join(type(s).__name__ for s in pipeline.steps if type(s).__name__ not in CLASSWISE_TRANSFORMS),
            path=cs.manifest,
        )
    counts = [0, 0]

    def classes():
        """Each class's transformed representative as ``write_class_set`` takes it, counting nodes in and out."""
        for cls in cs.classes:
            trace = cs.read_representative(cls)
            ts = TraceSet({cls.representative: trace}, trace.process_groups())
            out = pipeline.run(ts, source=cs.manifest)[cls.representative]
            counts[0] += len(trace) * len(cls.ranks)
            counts[1] += len(out) * len(cls.ranks)
            yield encode_trace(out), cls.slots, [(r, cls.member_attrs(i)) for i, r in enumerate(cls.ranks)]

    manifest = write_class_set(output, cs.world_size, classes())
    return manifest, counts[0], counts[1]


# ----- rank-class stamps in per-rank files ---------------------------------------------------------

#: GlobalMetadata attribute of a per-rank file written from a class: JSON ``{"key", "slots", "values"}``
#: (``key``: hash of the class representative's node records; ``values``: this rank's slot values).
RANK_CLASS_ATTR = "tracekit_rank_class"


def _first_record(data: bytes) -> tuple[int, int]:
    """``(start, end)`` of the metadata message (after its varint length prefix); (0, -1) when malformed."""
    length, shift, i = 0, 0, 0
    while i < min(len(data), 5):
        b = data[i]
        length |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return (i, i + length) if i + length <= len(data) else (0, -1)
        shift += 7
    return 0, -1


def class_key(data: bytes) -> str:
    """The class key of a representative's `.et` bytes: a BLAKE2b hash of its node records."""
    import hashlib

    _, end = _first_record(data)
    return hashlib.blake2b(data[max(end, 0) :], digest_size=16).hexdigest()


def stamp_rank_class(data: bytes, key: str, slots: Sequence[Attr], values: Sequence[Any]) -> bytes:
    """``data`` with :data:`RANK_CLASS_ATTR` appended to its metadata (node records untouched).

    Appending a repeated field's encoding to a protobuf message appends to that field (protobuf encoding
    guide, "Concatenating messages"), so the metadata keeps every other byte.
    """
    import orjson

    from tracekit._proto import et_def_pb2 as pb
    from tracekit.io import frame

    start, end = _first_record(data)
    doc = {"key": key, "slots": [[a.name, a.kind, a.value] for a in slots], "values": list(values)}
    extra = pb.GlobalMetadata(attr=[pb.AttributeProto(name=RANK_CLASS_ATTR, string_val=orjson.dumps(doc).decode())])
    return frame(data[start:end] + extra.SerializeToString()) + data[end:]


def read_rank_class(data: bytes) -> tuple[str, tuple[Attr, ...], tuple[Any, ...], int] | None:
    """``(key, slots, this rank's values, offset of the node records)`` of a stamped file's bytes, else None."""
    import orjson
    from google.protobuf.message import DecodeError

    from tracekit._proto import et_def_pb2 as pb

    start, end = _first_record(data)
    if end < 0:
        return None
    md = pb.GlobalMetadata()
    try:
        md.ParseFromString(data[start:end])
        found = [a.string_val for a in md.attr if a.name == RANK_CLASS_ATTR]
        if not found:
            return None
        doc = orjson.loads(found[-1])
        slots = tuple(Attr(str(n), v, str(kind)) for n, kind, v in doc["slots"])
        values = tuple(doc["values"])
        key = str(doc["key"])
    except (DecodeError, ValueError, KeyError, TypeError):  # a malformed stamp (orjson's error is a ValueError;
        return None  # a wrong shape a Key/Type/ValueError): the file is read the ordinary way, which reports it
    if len(values) != len(slots):
        return None
    return key, slots, values, end
