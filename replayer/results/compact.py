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

from dataclasses import asdict, fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.results.parts import CriticalPath
    from tracekit.replayer.results.result import RankStats, ReplayResult
    from tracekit.replayer.results.result_read import Fields

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
        "critical_path": path_dict(result.critical_path),
        "provenance": asdict(result.provenance),
        "compute_methods": dict(result.compute_methods),
        "node_count": result.node_count,
    }
    if result.folding is not None:
        out["folding"] = result.folding.to_dict()
    return out


def path_dict(path: "CriticalPath") -> dict[str, Any]:
    """``dataclasses.asdict(path)`` (steps a tuple of dicts, fields in declaration order) without its deep copy of
    every value: 0.2 CPU s for the 25 k steps of GPT-3 175B with 12 virtual stages, here ~0.02 s."""
    from tracekit.replayer.results.parts import PathStep

    names = tuple(f.name for f in fields(PathStep))
    values = attrgetter(*names)
    return {
        "steps": tuple(dict(zip(names, values(step))) for step in path.steps),
        "length_ns": path.length_ns,
        "compute_ns": path.compute_ns,
        "comm_ns": path.comm_ns,
    }


def _table_row(f: "Fields") -> dict[str, Any]:
    """One ``collective_table`` row with its fields checked."""
    count = f.count("count", least=1)
    total = f.ns("total_time_ns")
    return {
        "kind": f.text("kind"),
        "comm_bytes": f.count("comm_bytes"),
        "pg_name": f.text("pg_name"),
        "group_size": f.count("group_size", least=1),
        "algorithm": f.text("algorithm"),
        "count": count,
        "total_time_ns": total,
        "mean_time_ns": total / count,
        "algbw_gbps": f.amount("algbw_gbps", None),
        "busbw_gbps": f.amount("busbw_gbps", None),
    }


def _class_ranks(c: "Fields", world: int) -> list["RankStats"]:
    """The ranks of one ``rank_classes`` entry, each range checked to lie within ``0..world-1`` before it is
    expanded (a bad file must not make a list of 10^12 ranks)."""
    from tracekit.replayer.results.parts import RankStats
    from tracekit.replayer.results.result_read import malformed

    figures = {k: c.count(k) if k == "nodes" else c.ns(k) for k in _FIGURES}
    out = []
    for i, span in enumerate(c.items("ranks")):
        where = f"{c.at('ranks')}[{i}]"
        ok = isinstance(span, (list, tuple)) and len(span) == 2 and all(type(x) is int for x in span)
        if not ok or not 0 <= span[0] <= span[1] < world:
            shown = "-".join(map(str, span)) if ok else "a value that is not [first, last]"
            raise malformed(where, f"rank range {shown} is not within ranks 0-{world - 1}")
        out += [RankStats(rank=r, **figures) for r in range(span[0], span[1] + 1)]
    return out


def result_from_compact(d: dict[str, Any], cls: "type[ReplayResult]") -> "ReplayResult":
    """Read the compact form (see module doc) back into a :class:`ReplayResult` (``cls``, the class itself: it
    calls this, and is not imported here).

    Raises:
        ReplayError: malformed (a missing key, a bad value, a rank listed twice or ranks not ``0..world-1``),
            naming the field.
    """
    from tracekit.replayer.results import result_read as read

    f = read.Fields(d, "")
    provenance = read.provenance(f.obj("provenance"))
    world = provenance.world_size
    ranks: list[RankStats] = []
    for c in f.objs("rank_classes"):
        ranks += _class_ranks(c, world)
        if len(ranks) > world:
            break  # a rank listed twice: the check below says so, without expanding the rest
    ranks.sort(key=lambda s: s.rank)
    if [s.rank for s in ranks] != list(range(world)):
        raise read.malformed("", f"rank_classes do not list ranks 0-{world - 1} once each")
    return cls(
        iteration_time_ns=f.ns("iteration_time_ns"),
        ranks=tuple(ranks),
        collectives=(),
        critical_path=read.critical_path(f.obj("critical_path")),
        provenance=provenance,
        compute_methods=f.tally("compute_methods"),
        node_count=f.count("node_count"),
        folding=read.folding(f),
        collective_rows=tuple(_table_row(row) for row in f.objs("collective_table")),
    )


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
