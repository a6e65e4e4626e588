"""Reading a replay result document back, field by field (:meth:`ReplayResult.from_dict`).

Every value is checked by name before it is used, so a malformed document (written by hand, by another tool, or
cut short) is refused with one line naming the field, what it must be and what it holds::

    malformed replay result: ranks[2].iteration_time_ns: expected a duration in ns (a number >= 0), got -5

instead of a Python exception's text or, for a negative or infinite time, a comparison built on it.  Times are
JSON numbers of ns (integers; results written before times were rounded hold floats, rounded here to the nearest
ns); counts are integers >= 0; keys a reader does not know are ignored (a newer writer may add some).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tracekit.errors import ReplayError

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.results.parts import (
        CollectiveRow,
        CriticalPath,
        FoldInfo,
        Provenance,
        RankSchedule,
        RankStats,
    )

_MISSING = object()


def _show(value: Any) -> str:
    """A JSON value as a message shows it: containers by kind, scalars by their JSON spelling, at most 60 chars."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def malformed(where: str, says: str) -> ReplayError:
    """The one error of a malformed result: ``malformed replay result: <field>: <says>``."""
    return ReplayError(f"malformed replay result: {where}: {says}" if where else f"malformed replay result: {says}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Fields:
    """One JSON object of a result, with its place in the document (``ranks[2]``, ``critical_path``).

    Raises:
        ReplayError: (every method) a missing key or a value of the wrong kind, naming the field.
    """

    __slots__ = ("doc", "where")

    def __init__(self, doc: Any, where: str) -> None:
        if not isinstance(doc, dict):
            raise malformed(where or "the document", f"expected an object, got {_show(doc)}")
        self.doc: dict[str, Any] = doc
        self.where = where

    def at(self, key: str) -> str:
        """The field's name in messages: ``ranks[2].compute_ns``."""
        return f"{self.where}.{key}" if self.where else key

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        """The value of ``key``; ``default`` when absent (a missing key without one is an error)."""
        value = self.doc.get(key, default)
        if value is _MISSING:
            raise malformed(self.at(key), "missing")
        return value

    def has(self, key: str) -> bool:
        """Whether ``key`` is present (and not null)."""
        return self.doc.get(key) is not None

    def ns(self, key: str) -> int:
        """A time, integer ns: a finite JSON number >= 0, rounded to the nearest ns."""
        value = self.raw(key)
        if not _number(value) or not math.isfinite(value) or value < 0:
            raise malformed(self.at(key), f"expected a duration in ns (a number >= 0), got {_show(value)}")
        return int(round(value))

    def count(self, key: str, *, least: int = 0) -> int:
        """An integer >= ``least`` (an integral float is taken as that integer)."""
        value = self.raw(key)
        if not _number(value) or not math.isfinite(value) or value != int(value) or value < least:
            raise malformed(self.at(key), f"expected an integer >= {least}, got {_show(value)}")
        return int(value)

    def amount(self, key: str, default: Any = _MISSING) -> float | None:
        """A finite number >= 0, or None for null (``default`` when absent)."""
        value = self.raw(key, default)
        if value is None:
            return None
        if not _number(value) or not math.isfinite(value) or value < 0:
            raise malformed(self.at(key), f"expected a number >= 0 or null, got {_show(value)}")
        return float(value)

    def text(self, key: str, default: Any = _MISSING, *, nullable: bool = False) -> Any:
        """A string (or None for null when ``nullable``)."""
        value = self.raw(key, default)
        if isinstance(value, str) or (nullable and value is None):
            return value
        raise malformed(self.at(key), f"expected a string{' or null' if nullable else ''}, got {_show(value)}")

    def obj(self, key: str) -> "Fields":
        """The object at ``key``."""
        return Fields(self.raw(key), self.at(key))

    def items(self, key: str) -> list[Any]:
        """The list at ``key``."""
        value = self.raw(key)
        if not isinstance(value, (list, tuple)):  # a tuple: from_dict of an ``asdict`` in memory
            raise malformed(self.at(key), f"expected a list, got {_show(value)}")
        return list(value)

    def objs(self, key: str) -> list["Fields"]:
        """The list of objects at ``key``."""
        return [Fields(v, f"{self.at(key)}[{i}]") for i, v in enumerate(self.items(key))]

    def counts(self, key: str) -> tuple[int, ...]:
        """A list of integers >= 0 (ranks, node ids)."""
        values = self.items(key)
        for i, v in enumerate(values):
            if not _number(v) or not math.isfinite(v) or v != int(v) or v < 0:
                raise malformed(f"{self.at(key)}[{i}]", f"expected an integer >= 0, got {_show(v)}")
        return tuple(int(v) for v in values)

    def tally(self, key: str) -> tuple[tuple[str, int], ...]:
        """An object of name -> integer >= 0 (``compute_methods``), in file order."""
        sub = self.obj(key)
        return tuple((name, sub.count(name)) for name in sub.doc)


def with_constants(data: bytes | str) -> Any:
    """``data`` parsed by Python's json module, which reads the ``NaN``/``Infinity`` it writes (strict JSON and
    orjson do not), so the field holding one is named by the checks; None when that fails too."""
    import json

    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, an integer of > 4,300 digits
        return None


# ----------------------------------------------------------------------------- the result's parts
def rank_stats(f: Fields) -> "RankStats":
    """One ``ranks`` row; a result written before ``other_idle_ns`` holds the total ``idle_ns`` instead."""
    from tracekit.replayer.results.parts import RankStats

    wait = f.ns("comm_wait_ns")
    if "other_idle_ns" not in f.doc and "idle_ns" in f.doc:
        idle = f.ns("idle_ns")
        if idle < wait:
            raise malformed(f.at("idle_ns"), f"{idle} is less than comm_wait_ns {wait}")
        other = idle - wait
    else:
        other = f.ns("other_idle_ns")
    return RankStats(
        rank=f.count("rank"),
        iteration_time_ns=f.ns("iteration_time_ns"),
        compute_ns=f.ns("compute_ns"),
        comm_ns=f.ns("comm_ns"),
        exposed_comm_ns=f.ns("exposed_comm_ns"),
        comm_wait_ns=wait,
        other_idle_ns=other,
        nodes=f.count("nodes"),
    )


def collective_row(f: Fields) -> "CollectiveRow":
    """One ``collectives`` row (the full form's per-instance table)."""
    from tracekit.replayer.results.parts import CollectiveRow

    return CollectiveRow(
        index=f.count("index"),
        kind=f.text("kind"),
        comm_bytes=f.count("comm_bytes"),
        pg_name=f.text("pg_name"),
        ranks=f.counts("ranks"),
        node_ids=f.counts("node_ids"),
        algorithm=f.text("algorithm"),
        start_ns=f.ns("start_ns"),
        end_ns=f.ns("end_ns"),
        time_ns=f.ns("time_ns"),
        algbw_gbps=f.amount("algbw_gbps", None),
        busbw_gbps=f.amount("busbw_gbps", None),
    )


def critical_path(f: Fields) -> "CriticalPath":
    """The ``critical_path`` object and its steps."""
    from tracekit.replayer.results.parts import CriticalPath, PathStep

    steps = tuple(
        PathStep(
            s.count("rank"), s.count("node_id"), s.text("name"), s.text("category"), s.ns("start_ns"), s.ns("end_ns")
        )
        for s in f.objs("steps")
    )
    return CriticalPath(steps, f.ns("length_ns"), f.ns("compute_ns"), f.ns("comm_ns"))


def provenance(f: Fields) -> "Provenance":
    """The ``provenance`` object; its world size within tracekit's rank range (a bad file must not size a list)."""
    from tracekit.model.node import MAX_RANKS
    from tracekit.replayer.results.parts import Provenance

    paths = f.items("trace_paths")
    for i, p in enumerate(paths):
        if p is not None and not isinstance(p, str):
            raise malformed(f"{f.at('trace_paths')}[{i}]", f"expected a path or null, got {_show(p)}")
    world = f.count("world_size", least=1)
    if world > MAX_RANKS:
        raise malformed(f.at("world_size"), f"{world:,} is out of range (1 to {MAX_RANKS:,})")
    scale = f.amount("compute_scale")
    if scale is None:
        raise malformed(f.at("compute_scale"), "expected a number >= 0, got null")
    return Provenance(
        trace_paths=tuple(paths),
        spec_name=f.text("spec_name"),
        spec_path=f.text("spec_path", None, nullable=True),
        collective_model=f.text("collective_model"),
        compute_mode=f.text("compute_mode"),
        compute_scale=scale,
        streams=f.text("streams"),
        world_size=world,
        tracekit_version=f.text("tracekit_version"),
    )


def folding(f: Fields) -> "FoldInfo | None":
    """The optional ``folding`` object."""
    from tracekit.replayer.results.parts import FoldInfo

    if not f.has("folding"):
        return None
    fold = f.obj("folding")
    return FoldInfo(fold.count("classes"), fold.count("ranks"), fold.text("reason", None, nullable=True))


def schedules(f: Fields) -> "tuple[RankSchedule, ...] | None":
    """The optional ``schedule`` (``replay --with-schedule``): per rank, arrays of node times."""
    from tracekit.replayer.results.parts import RankSchedule

    if not f.has("schedule"):
        return None
    out = []
    for s in f.objs("schedule"):
        try:
            out.append(RankSchedule.from_dict(s.doc))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise malformed(s.where, "not a rank schedule as tracekit replay --with-schedule writes it") from exc
    return tuple(out)


def memory(f: Fields) -> "dict[str, Any] | None":
    """The optional ``memory`` object (a generated job's peak memory per rank class)."""
    return f.obj("memory").doc if f.has("memory") else None


__all__ = [
    "Fields",
    "collective_row",
    "critical_path",
    "folding",
    "malformed",
    "memory",
    "provenance",
    "rank_stats",
    "schedules",
    "with_constants",
]
