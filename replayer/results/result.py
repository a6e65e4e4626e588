"""What a replay found, as values: per-rank times, the collective table, the critical path.

:class:`ReplayResult` and its parts are frozen dataclasses with ``to_dict`` /
``from_dict`` (JSON-ready, round-trip exact).  Times are integer nanoseconds
from the start of the replay (every rank starts at 0): the engine's float
times are rounded to the nearest ns once, here, and every figure is computed
from the rounded times (rounding is monotone, so order and contiguity hold).

Per rank (:class:`RankStats`):

- ``iteration_time_ns``: end of the rank's last node; the job's
  :attr:`ReplayResult.iteration_time_ns` is the largest;
- ``compute_ns``: time during which at least one compute node (COMP, MEM) of
  the rank runs (union of intervals, so overlapping streams count once);
- ``comm_ns``: time during which at least one transfer of the rank runs, from
  the transfer's start (all members arrived) to its end;
- ``exposed_comm_ns``: communication time during which none of the rank's
  compute runs, ``|comm U compute| - |compute|`` (docs/design.md section 4);
- ``comm_wait_ns``: time the rank sits in a communication node waiting for
  its peers to arrive, while nothing else of it runs;
- ``other_idle_ns``: the rest of the iteration (nothing of the rank runs or
  waits).

``compute_ns + exposed_comm_ns + comm_wait_ns + other_idle_ns`` equals
``iteration_time_ns`` exactly (a partition of ``[0, iteration)``);
``idle_ns`` (a property) is ``comm_wait_ns + other_idle_ns``.

The collective table (:class:`CollectiveRow`, one row per collective and per send/recv pair) gives the
transfer time and the achieved bandwidths as nccl-tests defines them (nccl-tests ``doc/PERFORMANCE.md``):
``algbw = S / t`` with ``S`` the operation's size in nccl-tests terms and ``busbw = algbw x factor``:
all-reduce ``2(p-1)/p``; all-gather, reduce-scatter, all-to-all, gather, scatter ``(p-1)/p``; broadcast,
reduce, send/recv 1.  Chakra's ``comm_size`` is each rank's input buffer, so ``S`` is ``comm_size x p`` for
all-gather and gather (the gathered output) and for scatter (the root's buffer), and ``comm_size``
otherwise.  Bandwidths are GB/s (1e9 B/s = B/ns); None when the transfer took no time.

The critical path (:class:`CriticalPath`) follows, from the node that ends last, the event that let each
node start (its last data dependency, the previous node on its resource, or for a collective the member
that arrived last) back to time 0; its steps are contiguous, so its length equals the iteration time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence


from tracekit.errors import ReplayError
from tracekit.replayer.results.nccl_tests import bus_factor, nccl_tests_size
from tracekit.replayer.results.parts import (  # noqa: F401 - the parts of a result, public here as before
    RESULT_FORMAT,
    RESULT_FORMAT_VERSION,
    CollectiveRow,
    CriticalPath,
    FoldInfo,
    PathStep,
    Provenance,
    RankSchedule,
    RankStats,
)


@dataclass(frozen=True)
class ReplayResult:
    """Everything a replay reports.

    Attributes:
        iteration_time_ns: the job's iteration time (largest over ranks), ns.
        ranks: per-rank statistics, by rank.
        collectives: the collective table, by instance index.
        critical_path: see :class:`CriticalPath`.
        provenance: inputs.
        compute_methods: ``((method, node count), ...)`` from the compute model
            (``missing`` counts nodes that had neither a duration nor FLOPs/bytes).
        node_count: nodes replayed.
        schedule: per-rank node times (not compared, not in ``to_dict`` unless asked).
        folding: :class:`FoldInfo` (classes simulated, ranks, and
            why it did not fold) or None when folding was off (not compared).
        memory: peak memory per rank class of a generated job (:mod:`.memory`), or None (not compared).
        collective_rows: read from a compact result (:mod:`.compact`): ``collective_summary``'s rows, the
            per-instance ``collectives`` being empty; None otherwise (not compared).
    """

    iteration_time_ns: int
    ranks: tuple[RankStats, ...]
    collectives: tuple[CollectiveRow, ...]
    critical_path: CriticalPath
    provenance: Provenance
    compute_methods: tuple[tuple[str, int], ...]
    node_count: int
    schedule: tuple[RankSchedule, ...] | None = field(default=None, compare=False, repr=False)
    folding: FoldInfo | None = field(default=None, compare=False)
    memory: dict[str, Any] | None = field(default=None, compare=False)
    collective_rows: tuple[dict[str, Any], ...] | None = field(default=None, compare=False, repr=False)

    def rank(self, rank: int) -> RankStats:
        """Statistics of one rank.

        Raises:
            ReplayError: no such rank.
        """
        for stats in self.ranks:
            if stats.rank == rank:
                return stats
        raise ReplayError(f"the replay has no rank {rank}")

    def collective_summary(self) -> list[dict[str, Any]]:
        """Rows grouped by (kind, comm_bytes, pg_name, group size, algorithm), in first-seen order.

        Each: the key fields, ``count``, ``total_time_ns``, ``mean_time_ns``,
        and the mean ``algbw_gbps`` / ``busbw_gbps`` over rows that have one.
        """
        if self.collective_rows is not None:
            return [dict(row) for row in self.collective_rows]
        groups: dict[tuple, list[CollectiveRow]] = {}
        for row in self.collectives:
            groups.setdefault((row.kind, row.comm_bytes, row.pg_name, len(row.ranks), row.algorithm), []).append(row)
        out = []
        for (kind, nbytes, pg, p, alg), rows in groups.items():
            total = sum(r.time_ns for r in rows)
            alg_bw = [r.algbw_gbps for r in rows if r.algbw_gbps is not None]
            bus_bw = [r.busbw_gbps for r in rows if r.busbw_gbps is not None]
            out.append(
                {
                    "kind": kind,
                    "comm_bytes": nbytes,
                    "pg_name": pg,
                    "group_size": p,
                    "algorithm": alg,
                    "count": len(rows),
                    "total_time_ns": total,
                    "mean_time_ns": total / len(rows),
                    "algbw_gbps": sum(alg_bw) / len(alg_bw) if alg_bw else None,
                    "busbw_gbps": sum(bus_bw) / len(bus_bw) if bus_bw else None,
                }
            )
        return out

    # ----- serialisation ----------------------------------------------------------------------
    def to_dict(self, *, include_schedule: bool = False) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` inverts it exactly."""
        out: dict[str, Any] = {
            "format": RESULT_FORMAT,
            "format_version": RESULT_FORMAT_VERSION,
            "iteration_time_ns": self.iteration_time_ns,
            "ranks": [asdict(r) for r in self.ranks],
            "collectives": [asdict(c) for c in self.collectives],
            "critical_path": asdict(self.critical_path),
            "provenance": asdict(self.provenance),
            "compute_methods": dict(self.compute_methods),
            "node_count": self.node_count,
        }
        if self.folding is not None:
            out["folding"] = self.folding.to_dict()
        if self.memory is not None:
            out["memory"] = self.memory
        if include_schedule and self.schedule is not None:
            out["schedule"] = [s.to_dict() for s in self.schedule]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ReplayResult":
        """Inverse of :meth:`to_dict`; also reads the compact form (version 2, :mod:`.compact`).

        Raises:
            ReplayError: not a replay result, a newer format version, or a missing or malformed field (naming it:
                ``malformed replay result: ranks[2].iteration_time_ns: expected a duration in ns ...``).
        """
        from tracekit.replayer.results.compact import COMPACT_FORMAT_VERSION, result_from_compact

        if not isinstance(d, dict) or d.get("format") != RESULT_FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise ReplayError(
                f"not a tracekit replay result (format {got!r}, expected {RESULT_FORMAT!r}; "
                f"write one with tracekit replay -o FILE)"
            )
        if d.get("format_version") == COMPACT_FORMAT_VERSION:
            return result_from_compact(d, cls)
        if d.get("format_version") != RESULT_FORMAT_VERSION:
            raise ReplayError(
                f"replay result format version {d.get('format_version')!r} is not supported "
                f"(this tracekit reads {RESULT_FORMAT_VERSION} and {COMPACT_FORMAT_VERSION})"
            )
        from tracekit.replayer.results import result_read as read

        f = read.Fields(d, "")
        return cls(
            iteration_time_ns=f.ns("iteration_time_ns"),
            ranks=tuple(read.rank_stats(r) for r in f.objs("ranks")),
            collectives=tuple(read.collective_row(c) for c in f.objs("collectives")),
            critical_path=read.critical_path(f.obj("critical_path")),
            provenance=read.provenance(f.obj("provenance")),
            compute_methods=f.tally("compute_methods"),
            node_count=f.count("node_count"),
            schedule=read.schedules(f),
            folding=read.folding(f),
            memory=read.memory(f),
        )

    def to_json(self, *, include_schedule: bool = False) -> bytes:
        """UTF-8 JSON (indented)."""
        import orjson

        return orjson.dumps(self.to_dict(include_schedule=include_schedule), option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, data: bytes | str) -> "ReplayResult":
        """Parse :meth:`to_json` output.

        Raises:
            ReplayError: not JSON or not a replay result; a ``NaN`` or ``Infinity`` (which Python's json module
                writes) is named by its field.
        """
        import orjson

        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            from tracekit.replayer.results.result_read import with_constants

            doc = with_constants(data)
            if doc is None:
                raise ReplayError(
                    f"not a tracekit replay result: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
                ) from None
        return cls.from_dict(doc)

    def write_json(self, path: str, *, include_schedule: bool = False) -> None:
        """Write :meth:`to_json` atomically to ``path``."""
        from tracekit.io import atomic_output

        with atomic_output(path, "wb") as fh:
            fh.write(self.to_json(include_schedule=include_schedule))


__all__ = [
    "CollectiveRow",
    "CriticalPath",
    "FoldInfo",
    "PathStep",
    "Provenance",
    "RankSchedule",
    "RankStats",
    "ReplayResult",
    "bus_factor",
    "nccl_tests_size",
    "slowest_rank",
]


def slowest_rank(ranks: "Sequence[RankStats]") -> RankStats:
    """The rank that ends last; on a tie the one that waits least for peers (the one the others wait for), then
    the lowest rank.

    Raises:
        ReplayError: no ranks.
    """
    if not ranks:
        raise ReplayError("the replay has no ranks")
    return max(ranks, key=lambda r: (r.iteration_time_ns, -r.comm_wait_ns, -r.rank))
