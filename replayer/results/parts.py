"""The parts of a replay result that its full and compact forms share (:mod:`.result`, :mod:`.compact`): per-rank
figures, the critical path, provenance, folding, and their readers from JSON. :mod:`.result` re-exports them."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

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
        """Inverse of ``asdict``; also reads results written before ``other_idle_ns`` (total ``idle_ns``)."""
        d = dict(d)
        if "other_idle_ns" not in d and "idle_ns" in d:
            d["other_idle_ns"] = d["idle_ns"] - d["comm_wait_ns"]
        d.pop("idle_ns", None)
        return cls(**{k: (int(v) if k in ("rank", "nodes") else _ns(v)) for k, v in d.items()})


def _ns(v: Any) -> int:
    """A time read from JSON as integer ns (older results hold floats)."""
    return int(round(float(v)))


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


def _folding(d: dict[str, Any] | None) -> FoldInfo | None:
    if d is None:
        return None
    return FoldInfo(int(d["classes"]), int(d["ranks"]), d.get("reason"))


def _step(s: dict[str, Any]) -> PathStep:
    s = dict(s)
    s["start_ns"], s["end_ns"] = _ns(s["start_ns"]), _ns(s["end_ns"])
    return PathStep(**s)


def _provenance(p: dict[str, Any]) -> Provenance:
    p = dict(p)
    p["trace_paths"] = tuple(p["trace_paths"])
    names = {f.name for f in fields(Provenance)}
    return Provenance(**{k: v for k, v in p.items() if k in names})
