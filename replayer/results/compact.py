"""The replay result sized by what differs (issue 34 item 3): rank classes, the collective table, the critical path.

A folded replay of thousands of ranks has a handful of distinct rank figures, yet the full result
(:meth:`ReplayResult.to_dict`, format version 1) lists every rank and every collective instance with its members
and node ids: 1.75 GB at 8,192 ranks, written in minutes.  The compact form (format version 2, ``"form":
"classes"``) keeps what a person reads and what ``report``, ``diff`` and ``sweep`` use:

- ``rank_classes``: ranks with equal figures share one row; ``ranks`` is a list of inclusive ``[first, last]``
  ranges (the terminal's per-rank table groups ranks the same way);
- ``collective_table``: :meth:`ReplayResult.collective_summary`'s rows (one per kind, bytes, process group,
  group size and algorithm; count, total and mean time, mean bandwidths), no per-instance rows;
- the critical path, provenance, compute methods, node count and folding, as in version 1.

Its size grows with the number of distinct rank figures and process groups, not with ranks x collectives.
:func:`result_from_compact` reads it back into a :class:`ReplayResult` whose ``ranks`` hold every rank again
(expanded from the ranges), whose ``collectives`` are empty and whose ``collective_rows`` hold the table
(``collective_summary`` returns them).  The full form stays available (``tracekit replay --per-rank``).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from tracekit.errors import ReplayError
from tracekit.replayer.results.parts import CriticalPath, RankStats, _folding, _ns, _provenance, _step

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.results.result import RankStats, ReplayResult

#: ``format_version`` of the compact form (the full form is ``RESULT_FORMAT_VERSION``, 1).
COMPACT_FORMAT_VERSION = 2
COMPACT_FORM = "classes"
_FIGURES = ("iteration_time_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "comm_wait_ns", "other_idle_ns", "nodes")


def rank_spans(ranks: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted ranks as inclusive ``(first, last)`` runs of consecutive ranks: ``[0, 1, 2, 5] -> [(0, 2), (5, 5)]``."""
    spans: list[tuple[int, int]] = []
    for r in sorted(ranks):
        if spans and r == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], r)
        else:
            spans.append((r, r))
    return spans


def rank_classes(ranks: Sequence["RankStats"]) -> list[tuple[list[int], "RankStats"]]:
    """Ranks with equal figures grouped: ``[(ranks, stats of the lowest rank)]`` in order of first rank."""
    groups: dict[tuple, tuple[list[int], RankStats]] = {}
    for r in ranks:
        groups.setdefault(tuple(getattr(r, k) for k in _FIGURES), ([], r))[0].append(r.rank)
    return sorted(groups.values(), key=lambda g: min(g[0]))


def compact_dict(result: "ReplayResult") -> dict[str, Any]:
    """The compact form of ``result`` as a JSON-ready dict (see module doc); :func:`result_from_compact` reads it.

    Cost: one pass over ranks and one over collective instances (the table), no per-instance dicts.
    """
    from tracekit.replayer.results.parts import RESULT_FORMAT

    classes = [
        {"ranks": [list(s) for s in rank_spans(members)], **{k: getattr(stats, k) for k in _FIGURES}}
        for members, stats in rank_classes(result.ranks)
    ]
    out: dict[str, Any] = {
        "format": RESULT_FORMAT,
        "format_version": COMPACT_FORMAT_VERSION,
        "form": COMPACT_FORM,
        "iteration_time_ns": result.iteration_time_ns,
        "rank_classes": classes,
        "collective_table": result.collective_summary(),
        "critical_path": asdict(result.critical_path),
        "provenance": asdict(result.provenance),
        "compute_methods": dict(result.compute_methods),
        "node_count": result.node_count,
    }
    if result.folding is not None:
        out["folding"] = result.folding.to_dict()
    return out


def _table_row(row: dict[str, Any]) -> dict[str, Any]:
    """One ``collective_table`` row with its types checked (KeyError/TypeError/ValueError when malformed)."""
    count = int(row["count"])
    total = int(row["total_time_ns"])
    if count < 1:
        raise ValueError(f"collective_table row with count {count}")
    return {
        "kind": str(row["kind"]),
        "comm_bytes": int(row["comm_bytes"]),
        "pg_name": str(row["pg_name"]),
        "group_size": int(row["group_size"]),
        "algorithm": str(row["algorithm"]),
        "count": count,
        "total_time_ns": total,
        "mean_time_ns": total / count,
        "algbw_gbps": None if row.get("algbw_gbps") is None else float(row["algbw_gbps"]),
        "busbw_gbps": None if row.get("busbw_gbps") is None else float(row["busbw_gbps"]),
    }


def _world(value: Any) -> int:
    """The provenance's world size, within tracekit's rank range (a bad file must not size a list of ranks)."""
    from tracekit.model.node import MAX_RANKS

    world = int(value)
    if not 1 <= world <= MAX_RANKS:
        raise ValueError(f"world_size {world:,} is out of range (1 to {MAX_RANKS:,})")
    return world


def _span(a: Any, b: Any, world: int) -> tuple[int, int]:
    """A class's rank range ``[a, b]``, checked to lie within ranks ``0..world-1``."""
    lo, hi = int(a), int(b)
    if not 0 <= lo <= hi < world:
        raise ValueError(f"rank range {lo}-{hi} is not within ranks 0-{world - 1}")
    return lo, hi


def result_from_compact(d: dict[str, Any], cls: "type[ReplayResult]") -> "ReplayResult":
    """Read the compact form (see module doc) back into a :class:`ReplayResult` (``cls``, the class itself: it
    calls this, and is not imported here).

    Raises:
        ReplayError: malformed (a missing key, a bad value, a rank listed twice or ranks not ``0..world-1``).
    """
    try:
        provenance = _provenance(d["provenance"])
        world = _world(provenance.world_size)
        ranks = []
        for c in d["rank_classes"]:
            figures = {k: int(c[k]) for k in _FIGURES}
            spans = [_span(a, b, world) for a, b in c["ranks"]]  # checked before a range is expanded
            ranks += [RankStats(rank=r, **figures) for a, b in spans for r in range(a, b + 1)]
            if len(ranks) > world:
                break  # a rank listed twice: the check below says so, without expanding the rest
        ranks.sort(key=lambda s: s.rank)
        cp = d["critical_path"]
        if [s.rank for s in ranks] != list(range(world)):
            raise ValueError(f"rank_classes do not list ranks 0-{world - 1} once each")
        return cls(
            iteration_time_ns=_ns(d["iteration_time_ns"]),
            ranks=tuple(ranks),
            collectives=(),
            critical_path=CriticalPath(
                tuple(_step(s) for s in cp["steps"]), _ns(cp["length_ns"]), _ns(cp["compute_ns"]), _ns(cp["comm_ns"])
            ),
            provenance=provenance,
            compute_methods=tuple((str(k), int(v)) for k, v in d["compute_methods"].items()),
            node_count=int(d["node_count"]),
            folding=_folding(d.get("folding")),
            collective_rows=tuple(_table_row(row) for row in d["collective_table"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ReplayError(f"malformed replay result: {exc!r}") from None


def collective_counts(result: "ReplayResult") -> tuple[int, int]:
    """``(collectives, send/recv pairs)`` replayed, from the per-instance table or the compact form's rows."""
    if result.collective_rows is not None:
        pairs = sum(row["count"] for row in result.collective_rows if row["kind"] == "SEND_RECV")
        return sum(row["count"] for row in result.collective_rows) - pairs, pairs
    pairs = sum(1 for c in result.collectives if c.kind == "SEND_RECV")
    return len(result.collectives) - pairs, pairs


__all__ = [
    "COMPACT_FORMAT_VERSION",
    "collective_counts",
    "compact_dict",
    "rank_classes",
    "rank_spans",
    "result_from_compact",
]
