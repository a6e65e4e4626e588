"""Compute and communication slowing each other where they overlap on a rank (issue 30.2).

A GPU running a compute kernel and a collective at once shares its SMs and memory bandwidth: both take longer
than alone.  The device's factors (``tracekit/costs/devices.toml``: ``overlap_compute_slowdown`` s_c,
``overlap_comm_slowdown`` s_m; sources there) say how much: a compute node overlapped by communication for
``v`` ns of its run takes ``v x s_c`` longer; a transfer overlapped by compute on a member for ``w`` ns
(the largest over its members) takes ``w x s_m`` longer (latency and data scaled together).

The overlaps are those of the replay without interference (first order: the stretched nodes' new overlaps are
not fed back); :func:`with_interference` then replays once more.  Hand-computed: a GEMM of ``G`` ns next to an
all-reduce of ``A <= G`` ns, both starting at 0 on one rank, become ``G + A x s_c`` and ``A x (1 + s_m)``.

Which nodes count: compute = timed nodes on a compute stream or the memory resource (as :mod:`.perturb`),
communication = the transfer interval ``[xfer_start, xfer_end)`` of every collective and send/recv the rank
takes part in.  Off (``[compute] interference = false``, the default, as ASTRA-sim which overlaps for free), for
the ``astra`` model always, for devices without factors, and for the ``measured`` collective model: a replay of
measured times (``check-replay``) already holds the slowdown the capture saw, so stretching them would count it
twice.  Folded replays stretch the representatives (members run their class's timeline, so have its overlaps).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.replayer.simulation.perturb import compute_mask, scaled_instance

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.engine import Schedule
    from tracekit.replayer.simulation.program import ReplayProgram

__all__ = ["device_slowdowns", "overlap_ns", "simulate_with_interference", "with_interference"]


def device_slowdowns(spec, collective_model: str | None = None) -> tuple[float, float]:
    """``(s_c, s_m)`` of the spec's device from ``tracekit/costs/devices.toml`` (``(0, 0)`` when unknown or off).

    ``collective_model``: the replay's (a ``ReplayOptions`` override), else the spec's.
    """
    from tracekit.costs.devices import find_device

    if not spec.compute.interference or (collective_model or spec.collective_model) in ("astra", "measured"):
        return 0.0, 0.0
    dev = find_device(spec.device.name)
    return (dev.overlap_compute_slowdown, dev.overlap_comm_slowdown) if dev is not None else (0.0, 0.0)


def simulate_with_interference(
    program: "ReplayProgram", say: Any, collective_model: str | None
) -> tuple["ReplayProgram", "Schedule"]:
    """Simulate ``program``; with interference on (:func:`device_slowdowns`), stretch and simulate once more.

    Returns:
        the program simulated last and its schedule.
    """
    from tracekit.replayer.simulation.engine import events_progress, simulate

    schedule = simulate(program, progress=events_progress(say))
    slowdowns = device_slowdowns(program.spec, collective_model)
    if any(slowdowns):
        program = with_interference(program, schedule, *slowdowns)
        schedule = simulate(program, progress=events_progress(say))
    return program, schedule


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals ``[starts, ends)`` as sorted disjoint intervals."""
    keep = ends > starts
    if not keep.any():
        return np.zeros(0), np.zeros(0)
    order = np.argsort(starts[keep], kind="stable")
    s, e = starts[keep][order], ends[keep][order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    group = np.cumsum(new) - 1
    u_end = np.zeros(int(group[-1]) + 1)
    np.maximum.at(u_end, group, e)
    return s[new], u_end


def overlap_ns(starts: np.ndarray, ends: np.ndarray, u_starts: np.ndarray, u_ends: np.ndarray) -> np.ndarray:
    """Per interval ``[starts[i], ends[i])``, ns covered by the disjoint sorted intervals ``u``."""
    if len(u_starts) == 0:
        return np.zeros(len(starts))
    cum = np.concatenate(([0.0], np.cumsum(u_ends - u_starts)))

    def covered(t: np.ndarray) -> np.ndarray:  # union length before t
        i = np.searchsorted(u_starts, t, side="right")
        prev = np.maximum(i - 1, 0)
        inside = np.clip(t - u_starts[prev], 0.0, (u_ends - u_starts)[prev])
        return np.where(i > 0, cum[prev] + inside, 0.0)

    return np.maximum(covered(ends) - covered(starts), 0.0)


def with_interference(program: "ReplayProgram", sched: "Schedule", s_c: float, s_m: float) -> "ReplayProgram":
    """A copy of ``program`` with each overlapped compute node and transfer stretched (module doc)."""
    from array import array

    dur = np.frombuffer(program.duration_ns, dtype=np.float64).copy()
    mask = compute_mask(program)
    xs, xe = np.asarray(sched.xfer_start_ns), np.asarray(sched.xfer_end_ns)
    instance_of = np.asarray(program.instance_of, dtype=np.int64)
    stretch = np.zeros(len(program.instances))
    for lay in program.layouts:  # a folded program's are the representatives: members' overlaps are theirs
        sl = slice(lay.offset, lay.offset + lay.n)
        comp = np.flatnonzero(mask[sl]) + lay.offset
        mine = np.unique(instance_of[sl][instance_of[sl] >= 0])
        if not len(comp) or not len(mine):
            continue
        cs, ce = sched.start_ns[comp], sched.end_ns[comp]
        ms, me = xs[mine], xe[mine]
        dur[comp] += s_c * overlap_ns(cs, ce, *_union(ms, me))
        np.maximum.at(stretch, mine, overlap_ns(ms, me, *_union(cs, ce)) * s_m)
    instances = list(program.instances)
    for i in np.flatnonzero(stretch > 0).tolist():
        inst, cost = instances[i], instances[i].cost
        time_ns = xe[i] - xs[i]
        if cost is None or not time_ns > 0:
            continue
        instances[i] = scaled_instance(inst, 1.0 + stretch[i] / time_ns)
    return replace(program, duration_ns=array("d", dur.tobytes()), instances=instances)
