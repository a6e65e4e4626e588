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

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np
import numpy.typing as npt

from tracekit.errors import ReplayError
from tracekit.replayer.results.nccl_tests import bus_factor, nccl_tests_size

RESULT_FORMAT = "tracekit.replay"
RESULT_FORMAT_VERSION = 1


@dataclass(frozen=True)
class RankStats:
    """Where one rank's time went (see module doc for each figure), integer ns.

    ``compute_ns + exposed_comm_ns + comm_wait_ns + other_idle_ns ==
    iteration_time_ns``; ``comm_ns`` overlaps compute and is not part of the sum.
    """

    rank: int
    iteration_time_ns: int
    compute_ns: int
    comm_ns: int
    exposed_comm_ns: int
    comm_wait_ns: int
    other_idle_ns: int
    nodes: int

    @property
    def idle_ns(self) -> int:
        """Time nothing of the rank runs: waiting for peers plus other idle, ns."""
        return self.comm_wait_ns + self.other_idle_ns

    def categories_ns(self) -> tuple[int, int, int, int]:
        """``(compute, exposed comm, waiting for peers, other idle)``, ns; they sum to the iteration time."""
        return (self.compute_ns, self.exposed_comm_ns, self.comm_wait_ns, self.other_idle_ns)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RankStats":
        """Inverse of ``asdict``; also reads results written before ``other_idle_ns`` (total ``idle_ns``).

        Raises:
            ReplayError: a missing or malformed figure, naming it.
        """
        from tracekit.replayer.results.result_read import Fields, rank_stats

        return rank_stats(Fields(d, "rank"))


@dataclass(frozen=True)
class CollectiveRow:
    """One collective (or send/recv pair) as replayed.

    Attributes:
        index: instance number (collectives by group and order, then send/recv pairs).
        kind: ``ALL_REDUCE`` ... (CollectiveType name) or ``SEND_RECV``.
        comm_bytes: Chakra ``comm_size``, bytes.
        pg_name: process group.
        ranks: members (send/recv: ``(src, dst)``).
        node_ids: each member's node id, in ``ranks`` order.
        algorithm: the cost model's label.
        start_ns, end_ns: the transfer (from the last member's arrival).
        time_ns: ``end_ns - start_ns``.
        algbw_gbps, busbw_gbps: nccl-tests bandwidths, GB/s; None for zero time.
    """

    index: int
    kind: str
    comm_bytes: int
    pg_name: str
    ranks: tuple[int, ...]
    node_ids: tuple[int, ...]
    algorithm: str
    start_ns: int
    end_ns: int
    time_ns: int
    algbw_gbps: float | None
    busbw_gbps: float | None


@dataclass(frozen=True)
class PathStep:
    """One node on the critical path: ``category`` is ``compute`` or ``comm``."""

    rank: int
    node_id: int
    name: str
    category: str
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class CriticalPath:
    """The chain of nodes that decides the iteration time, in execution order.

    ``length_ns = compute_ns + comm_ns``, the sum of the steps' durations.
    """

    steps: tuple[PathStep, ...]
    length_ns: int
    compute_ns: int
    comm_ns: int


@dataclass(frozen=True)
class Provenance:
    """What was replayed on what."""

    trace_paths: tuple[str | None, ...]
    spec_name: str
    spec_path: str | None
    collective_model: str
    compute_mode: str
    compute_scale: float
    streams: str
    world_size: int
    tracekit_version: str


@dataclass(frozen=True, eq=False)
class RankSchedule:
    """Per-node times of one rank (for timelines); arrays over the rank's nodes in file order.

    Attributes:
        node_ids: uint64[n]. kind: int8[n] engine node kinds. resource: int32[n]
        index into ``resource_names`` (-1 none). start_ns, end_ns: float64[n]
        (start = arrival for communication nodes). xfer_start_ns: float64[n]
        transfer start of communication nodes (NaN otherwise). instance: int64[n]
        collective table index (-1 none). names: the nodes' names (None in
        results written before names were kept). merged_ids: ``{node id: ids of
        the input nodes it stands for}`` for nodes a transform merged (Compact's
        ``merged_node_ids``), else empty.
    """

    rank: int
    node_ids: npt.NDArray[np.uint64]
    kind: npt.NDArray[np.int8]
    resource: npt.NDArray[np.int32]
    resource_names: tuple[str, ...]
    start_ns: npt.NDArray[np.float64]
    end_ns: npt.NDArray[np.float64]
    xfer_start_ns: npt.NDArray[np.float64]
    instance: npt.NDArray[np.int64]
    names: tuple[str, ...] | None = None
    merged_ids: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of lists (times in ns, a NaN ``xfer_start_ns`` as None); :meth:`from_dict` inverts it."""
        extra: dict[str, Any] = {}
        if self.names is not None:
            extra["names"] = list(self.names)
        if self.merged_ids:
            extra["merged_ids"] = {str(k): list(v) for k, v in self.merged_ids.items()}
        return {
            **extra,
            "rank": self.rank,
            "node_ids": self.node_ids.tolist(),
            "kind": self.kind.tolist(),
            "resource": self.resource.tolist(),
            "resource_names": list(self.resource_names),
            "start_ns": _ints(self.start_ns),
            "end_ns": _ints(self.end_ns),
            "xfer_start_ns": _ints(self.xfer_start_ns),
            "instance": self.instance.tolist(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RankSchedule":
        """Inverse of :meth:`to_dict` (older results lack ``names``/``merged_ids``); KeyError/ValueError if malformed."""
        return cls(
            int(d["rank"]),
            np.asarray(d["node_ids"], dtype=np.uint64),
            np.asarray(d["kind"], dtype=np.int8),
            np.asarray(d["resource"], dtype=np.int32),
            tuple(d["resource_names"]),
            np.asarray(d["start_ns"], dtype=np.float64),
            np.asarray(d["end_ns"], dtype=np.float64),
            np.asarray([math.nan if x is None else x for x in d["xfer_start_ns"]], dtype=np.float64),
            np.asarray(d["instance"], dtype=np.int64),
            tuple(d["names"]) if "names" in d else None,
            {int(k): tuple(int(x) for x in v) for k, v in d.get("merged_ids", {}).items()},
        )


@dataclass(frozen=True)
class FoldInfo:
    """What rank folding did (:mod:`tracekit.replayer.simulation.folding`): ``classes`` simulated of ``ranks``;
    ``reason`` when it did not fold (else None)."""

    classes: int
    ranks: int
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"classes", "ranks", "reason"}`` as JSON-ready values."""
        return {"classes": self.classes, "ranks": self.ranks, "reason": self.reason}


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
            return result_from_compact(d)
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


def _ints(a: npt.NDArray[np.float64]) -> list[int | None]:
    """Integral float64 times as a list of ints (None for NaN)."""
    if not np.isnan(a).any():
        return a.astype(np.int64).tolist()
    return [None if math.isnan(x) else int(x) for x in a.tolist()]


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
