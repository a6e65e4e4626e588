"""How much of a capture's compute/communication overlap the interference model explains (``check-replay``).

Per rank, from the converted capture's device nodes (``is_cpu_op`` False with a ``stream``: Kineto kernels, memcpy
and memset with their measured ``start_time_ns``/``duration_ns`` on their stream; an ET's collectives without a
stream are host calls):

* **communication** = the device nodes of type ``COMM_*`` (NCCL kernels); **compute** = every other timed device
  node (as the interference model's compute mask: compute streams and the memory resource);
* ``measured_overlap_ns`` = ``|U(compute) ∩ U(communication)|``, the time a compute and a communication kernel
  ran at once on the rank's device (unions of ``[start, start + duration)``, ns);
* per op name with at least ``min_samples`` instances that overlapped communication (overlap > 0 ns) and as many
  that did not: ``measured_ratio`` = median overlapped duration / median non-overlapped duration (a direct
  measurement of interference), and ``model_ratio = 1 + s_c x median(overlap fraction)`` of the overlapped
  instances, what :mod:`tracekit.replayer.simulation.interference` would make of the same overlap (a compute
  node overlapped ``v`` ns runs ``v x s_c`` longer; ``s_c`` = the spec device's ``overlap_compute_slowdown``,
  tracekit/costs/devices.toml);
* ``measured_extra_ns`` = sum over those ops' overlapped instances of (duration - the op's median non-overlapped
  duration); ``model_extra_ns`` = ``s_c x`` their summed overlap; ``explained = model / measured``;
* ``replay_overlap_ns`` = the same union intersection on the replayed schedule (measured durations), and
  ``replay_model_extra_ns = s_c x`` the summed per-compute-node overlap there: what switching interference on
  would add to that replay's compute.

A rank with no device node (a CPU/gloo capture) has ``device`` False: there is no device overlap to measure.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracekit.model.attrs import STREAM
from tracekit.replayer.simulation.interference import _union, overlap_ns

__all__ = [
    "MIN_SAMPLES",
    "OpSlowdown",
    "RankOverlap",
    "intersection_ns",
    "rank_overlap",
    "spec_slowdown",
    "with_job_row",
]

#: Instances needed on each side (overlapped, not overlapped) before an op's median ratio is reported.
MIN_SAMPLES = 3


@dataclass(frozen=True)
class OpSlowdown:
    """One op name's measured slowdown under communication (durations in ns, ratios unitless)."""

    name: str
    overlapped: int
    alone: int
    median_overlapped_ns: float
    median_alone_ns: float
    median_overlap_fraction: float
    model_ratio: float | None

    @property
    def measured_ratio(self) -> float:
        """Median overlapped duration over median non-overlapped duration."""
        return self.median_overlapped_ns / self.median_alone_ns if self.median_alone_ns > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (ns, counts, ratios)."""
        return {
            "name": self.name,
            "overlapped": self.overlapped,
            "alone": self.alone,
            "median_overlapped_ns": self.median_overlapped_ns,
            "median_alone_ns": self.median_alone_ns,
            "measured_ratio": self.measured_ratio,
            "median_overlap_fraction": self.median_overlap_fraction,
            "model_ratio": self.model_ratio,
        }


@dataclass(frozen=True)
class RankOverlap:
    """A rank's measured and replayed compute/communication overlap and the model's share of its cost (module doc).

    ``replay_*`` are None when the rank has no replayed schedule; ``model_*``/``explained`` None when the spec's
    device has no interference factor (``s_c`` None) or nothing was measured.
    """

    rank: int
    device: bool
    compute_kernels: int = 0
    comm_kernels: int = 0
    measured_compute_ns: float = 0.0
    measured_comm_ns: float = 0.0
    measured_overlap_ns: float = 0.0
    overlapped_kernels: int = 0
    ops: tuple[OpSlowdown, ...] = ()
    measured_extra_ns: float = 0.0
    model_extra_ns: float | None = None
    replay_overlap_ns: float | None = None
    replay_model_extra_ns: float | None = None
    s_c: float | None = None

    @property
    def explained(self) -> float | None:
        """``model_extra_ns / measured_extra_ns`` (None when either is unknown or nothing extra was measured)."""
        if self.model_extra_ns is None or not self.measured_extra_ns > 0:
            return None
        return self.model_extra_ns / self.measured_extra_ns

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (ns, counts; ``ops`` per :meth:`OpSlowdown.to_dict`)."""
        out = {k: v for k, v in self.__dict__.items() if k != "ops"}
        out["ops"] = [o.to_dict() for o in self.ops]
        out["explained"] = self.explained
        return out


def spec_slowdown(spec: Any) -> tuple[str, float | None]:
    """``(device name, overlap_compute_slowdown or None)`` of a spec or preset name (the factor whether or not
    the spec switches interference on: check-replay asks what the model would predict).

    Raises:
        SpecError: an unknown preset name.
    """
    from tracekit.costs.devices import find_device
    from tracekit.replayer.simulation.specs import load_spec

    spec = load_spec(spec) if isinstance(spec, str) else spec
    dev = find_device(spec.device.name)
    s_c = dev.overlap_compute_slowdown if dev is not None else 0.0
    return spec.device.name, (s_c if s_c > 0 else None)


def intersection_ns(a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray, b_end: np.ndarray) -> float:
    """``|U(a) ∩ U(b)|`` of two sets of intervals ``[start, end)`` (ns)."""
    ua = _union(np.asarray(a_start, float), np.asarray(a_end, float))
    ub = _union(np.asarray(b_start, float), np.asarray(b_end, float))
    return float(overlap_ns(*ua, *ub).sum())


def _union_ns(starts: np.ndarray, ends: np.ndarray) -> float:
    us, ue = _union(starts, ends)
    return float((ue - us).sum())


def _device_nodes(trace: Any) -> tuple[list[Any], list[Any]]:
    comp: list[Any] = []
    comm: list[Any] = []
    for n in trace.nodes:
        if n.is_cpu_op is False and n.duration_ns > 0 and STREAM.of(n) is not None:
            (comm if n.type.name.startswith("COMM") else comp).append(n)
    return comp, comm


def _op_slowdowns(
    comp: list[Any], covered: np.ndarray, s_c: float | None, min_samples: int
) -> tuple[tuple[OpSlowdown, ...], float, float]:
    """Per op name with enough samples: the slowdown rows, summed measured extra ns and summed overlap ns."""
    by_name: dict[str, tuple[list[tuple[float, float]], list[float]]] = {}
    for n, v in zip(comp, covered.tolist()):
        over, alone = by_name.setdefault(n.name, ([], []))
        if v > 0:
            over.append((float(n.duration_ns), v))
        else:
            alone.append(float(n.duration_ns))
    rows, extra, overlap = [], 0.0, 0.0
    for name, (over, alone) in sorted(by_name.items()):
        if len(over) < min_samples or len(alone) < min_samples:
            continue
        base = statistics.median(alone)
        frac = statistics.median(v / d for d, v in over)
        extra += sum(d - base for d, _ in over)
        overlap += sum(v for _, v in over)
        model = None if s_c is None else 1.0 + s_c * frac
        rows.append(OpSlowdown(name, len(over), len(alone), statistics.median(d for d, _ in over), base, frac, model))
    rows.sort(key=lambda o: -o.overlapped * o.median_overlapped_ns)
    return tuple(rows), extra, overlap


def rank_overlap(
    trace: Any, rank: int, sched: Any, s_c: float | None, *, min_samples: int = MIN_SAMPLES
) -> RankOverlap:
    """The :class:`RankOverlap` of one rank's trace and its replayed schedule (``sched``: the rank's
    ``result.schedule`` entry with ``node_ids``/``start_ns``/``end_ns``, or None)."""
    comp, comm = _device_nodes(trace)
    if not comp and not comm:
        return RankOverlap(rank, False)
    t0 = min(n.start_time_ns for n in comp + comm)  # epoch ns exceed float64's exact integers: times from t0
    cs = np.array([n.start_time_ns - t0 for n in comp], dtype=float)
    ce = cs + np.array([n.duration_ns for n in comp], dtype=float)
    ms = np.array([n.start_time_ns - t0 for n in comm], dtype=float)
    me = ms + np.array([n.duration_ns for n in comm], dtype=float)
    covered = overlap_ns(cs, ce, *_union(ms, me))
    ops, extra, op_overlap = _op_slowdowns(comp, covered, s_c, min_samples)
    replay = replay_extra = None
    if sched is not None:
        where = {int(i): k for k, i in enumerate(sched.node_ids.tolist())}
        rs, re_ = np.asarray(sched.start_ns, float), np.asarray(sched.end_ns, float)

        def spans(nodes: list[Any]) -> tuple[np.ndarray, np.ndarray]:
            k = np.array([where[n.id] for n in nodes if n.id in where], dtype=np.int64)
            s, e = rs[k], re_[k]
            ok = ~(np.isnan(s) | np.isnan(e))
            return s[ok], e[ok]

        (rcs, rce), (rms, rme) = spans(comp), spans(comm)
        replay = intersection_ns(rcs, rce, rms, rme)
        replay_extra = None if s_c is None else s_c * float(overlap_ns(rcs, rce, *_union(rms, rme)).sum())
    return RankOverlap(
        rank,
        True,
        len(comp),
        len(comm),
        _union_ns(cs, ce),
        _union_ns(ms, me),
        intersection_ns(cs, ce, ms, me),
        int((covered > 0).sum()),
        ops,
        extra,
        None if s_c is None or not ops else s_c * op_overlap,
        replay,
        replay_extra,
        s_c,
    )


def with_job_row(rows: list[RankOverlap] | tuple[RankOverlap, ...]) -> tuple[RankOverlap, ...]:
    """``rows`` plus, when two or more ranks have device nodes, a job row (rank -1, as check-replay's job rows):
    the ranks' sums (ns, counts; ``model_extra_ns`` over the ranks that have one, whose ``measured_extra_ns``
    are the only non-zero ones), no ops."""
    dev = [o for o in rows if o.device]
    if len(dev) < 2:
        return tuple(rows)

    def total(key: str) -> Any:
        got = [getattr(o, key) for o in dev if getattr(o, key) is not None]
        return sum(got) if got else None

    keys = "compute_kernels comm_kernels measured_compute_ns measured_comm_ns measured_overlap_ns overlapped_kernels"
    keys += " measured_extra_ns model_extra_ns replay_overlap_ns replay_model_extra_ns"
    s_c = {o.s_c for o in dev}
    job = RankOverlap(-1, True, **{k: total(k) for k in keys.split()}, s_c=s_c.pop() if len(s_c) == 1 else None)
    return tuple(rows) + (job,)
