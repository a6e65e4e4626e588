"""The parts of a replay result (:mod:`.result`, :mod:`.compact`, :mod:`.result_read`): per-rank figures, collective
rows, per-node schedules, the critical path, provenance and folding. :mod:`.result` re-exports them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

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


def _ints(a: npt.NDArray[np.float64]) -> list[int | None]:
    """Integral float64 times as a list of ints (None for NaN)."""
    if not np.isnan(a).any():
        return a.astype(np.int64).tolist()
    return [None if math.isnan(x) else int(x) for x in a.tolist()]
