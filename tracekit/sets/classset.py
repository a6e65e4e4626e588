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

This module holds the manifest (model, reading, writing, expanding); beside it
:mod:`tracekit.checks.classset` validates and summarizes a class set class by
class, :mod:`tracekit.sets.stamps` marks per-rank files with their class,
and :mod:`tracekit.transforms.classwise` transforms a class set class by class.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from tracekit.sets.stamps import class_key, read_rank_class, stamp_rank_class
from tracekit.errors import TraceFormatError, TracekitError
from tracekit.sets.forms import MANIFEST_SUFFIX, check_one_form, rank_files_of  # noqa: F401 - public here too
from tracekit.model import Attr

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace
    from tracekit.sets.traceset import TraceSet
    from tracekit.workloads.rank_template import RankTemplate

__all__ = [
    "ClassSet",
    "RankClass",
    "MANIFEST_SUFFIX",
    "find_class_set",
    "read_class_set",
    "write_class_set",
    # re-exported for tracekit.replayer and tracekit.converters, which import them from here
    "class_key",
    "read_rank_class",
    "stamp_rank_class",
]

FORMAT = "tracekit-rank-classes"
VERSION = 1
_KINDS = ("string_val", "int32_val", "int64_val", "uint32_val", "uint64_val", "bool_val")
_INT_RANGE = {"int32_val": (-(2**31), 2**31), "int64_val": (-(2**63), 2**63), "uint32_val": (0, 2**32)}
_INT_RANGE["uint64_val"] = (0, 2**64)


def _slot_value_problem(kind: str, value: Any) -> str | None:
    """Why ``value`` cannot be a slot value of ``kind`` (None when it can): the wire type's Python type and range."""
    if kind == "string_val":
        return None if isinstance(value, str) else f"{value!r} is not a string"
    if kind == "bool_val":
        return None if isinstance(value, bool) else f"{value!r} is not true or false"
    low, high = _INT_RANGE[kind]
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{value!r} is not an integer"
    return None if low <= value < high else f"{value!r} is out of the range of {kind.removesuffix('_val')}"


def _slots_problem(slots: tuple[Attr, ...], values: tuple[tuple[Any, ...], ...]) -> str | None:
    """The first slot value (slot by slot, then rank by rank) that its slot's kind cannot hold, as
    ``slot 'name': why``; None when all fit.  Checked column by column with the types and extremes of each column
    (a million ranks x a dozen slots in a second; value by value took most of ``info``'s time)."""
    from operator import itemgetter

    for j, slot in enumerate(slots):
        column = list(map(itemgetter(j), values))
        types = set(map(type, column))
        if slot.kind == "string_val":
            fits = types <= {str}
        elif slot.kind == "bool_val":
            fits = types <= {bool}
        else:
            low, high = _INT_RANGE[slot.kind]
            fits = types <= {int} and low <= min(column) and max(column) < high
        if not fits:
            why = next(w for v in column if (w := _slot_value_problem(slot.kind, v)))
            return f"slot {slot.name!r}: {why}"
    return None


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

    def _template(self, cls: RankClass) -> RankTemplate:
        from tracekit.workloads.rank_template import RankTemplate
        from tracekit.wire.framing import _read_raw

        cache: dict[Path, RankTemplate] = self.__dict__.setdefault("_templates", {})
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

        With ``stamp`` each file's metadata names its class (:func:`tracekit.sets.stamps.stamp_rank_class`),
        so a replay of the per-rank files derives members from their class's first file instead of decoding them.
        """
        for cls in self.classes:
            template = self._template(cls)
            key = class_key(template.data) if stamp else ""
            for index, rank in enumerate(cls.ranks):
                data = template.for_rank(dict(enumerate(cls.member_attrs(index))))
                yield rank, stamp_rank_class(data, key, cls.slots, cls.values[index]) if stamp else data

    def read_representative(self, cls: RankClass) -> ExecutionTrace:
        """The representative's :class:`ExecutionTrace` (rank = the representative).

        Raises:
            TraceFormatError: the class file is not a trace.
            OSError: it cannot be read.
        """
        from tracekit.wire.io import read_trace

        return read_trace(cls.file, rank=cls.representative)

    def to_traceset(self) -> TraceSet:
        """Every rank's trace (encoded bytes held per rank, nodes decoded on first use)."""
        from tracekit.wire.io import trace_from_bytes
        from tracekit.sets.traceset import TraceSet

        path = str(self.manifest)
        return TraceSet({r: trace_from_bytes(b, path=f"{path}#rank{r}", rank=r) for r, b in self.iter_rank_bytes()})

    def expand(
        self,
        prefix: str | os.PathLike[str],
        *,
        progress: Callable[[Iterable[tuple[int, bytes]], int], Iterable[tuple[int, bytes]]] | None = None,
    ) -> list[Path]:
        """Write the per-rank Chakra files ``<prefix>.<rank>.et`` (as a unit: see TraceSetWriter).

        Each file's metadata carries its class stamp (:data:`tracekit.sets.stamps.RANK_CLASS_ATTR`); node
        records are exactly the member's.

        Returns:
            the paths written, in rank order.

        Raises:
            TracekitError: the prefix holds other rank files, or an output is an input of the running command.
            TraceFormatError: a class file cannot be decoded.
        """
        from tracekit.sets.writer import TraceSetWriter

        items: Iterable[tuple[int, bytes]] = self.iter_rank_bytes(stamp=True)
        if progress is not None:
            items = progress(items, self.world_size)
        from tracekit.sets.comm_groups import astra_group_ids, comm_groups_document
        from tracekit.model.groups import resolve_groups
        from tracekit.wire.io import trace_from_bytes

        declared: dict[str, tuple[int, ...]] = {}
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

    from tracekit.output import read_input_bytes

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
    from tracekit.model.node import MAX_RANKS

    if world > MAX_RANKS:  # before any per-rank set is built (10**12 ranks exhausted memory)
        raise _bad(p, f"world_size {world:,} is out of range (1 to {MAX_RANKS:,})")
    classes: list[RankClass] = []
    seen: set[int] = set()
    for k, c in enumerate(doc.get("classes") or []):
        try:
            ranks = tuple(c["ranks"])
            for r in ranks:  # int() would read "1", 1.9 and true as rank 1
                if not isinstance(r, int) or isinstance(r, bool) or r < 0:
                    raise _bad(p, f"class {k}: rank {r!r} is not an integer >= 0")
            slots = tuple(Attr(str(n), v, str(kind)) for n, kind, v in c["slots"])
            values = tuple(map(tuple, c["values"]))
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
        if len(values) != len(ranks) or not set(map(len, values)) <= {len(slots)}:
            raise _bad(p, f"class {k}: one value per slot per rank expected")
        if any(s.kind not in _KINDS for s in slots):
            raise _bad(p, f"class {k}: slot kinds must be among {', '.join(_KINDS)}")
        bad = _slots_problem(slots, values)
        if bad is not None:
            raise _bad(p, f"class {k}: {bad}")
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
        check_one_form(s)
        return read_class_set(s + MANIFEST_SUFFIX)
    if p.is_dir():
        from tracekit.wire.framing import rank_from_path

        manifests = sorted(p.glob("*" + MANIFEST_SUFFIX))
        ranked = sorted(f.name for f in p.iterdir() if rank_from_path(f.name) is not None)
        if len(manifests) == 1 and not ranked:
            return read_class_set(manifests[0])
        if manifests and ranked:
            raise TraceFormatError(
                f"the folder holds both a class set ({manifests[0].name}) and rank files ({ranked[0]} ...): "
                "name the one to read (its prefix or manifest)",
                path=s,
            )
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

    from tracekit.output import atomic_output

    base = Path(os.fspath(prefix))
    check_one_form(base, "class set")
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
