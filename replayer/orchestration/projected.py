"""How a replay times compute across hardware: measured, roofline, or projected from the capture device.

``replay --hw X`` on a trace whose metadata names the device its durations were measured on
(``compute_device``, written by the PyTorch converter from Kineto ``deviceProperties``) projects compute
from that device to X by default: the trace set goes through :class:`tracekit.transforms.Retarget` (the
code ``transform --retarget`` runs), then replays with the measured (now projected) durations.  Choices
(:data:`COMPUTE_CHOICES`):

* ``auto`` (default): ``projected`` when both devices are known, else ``measured`` (the reason is returned);
* ``measured``: the trace's durations (times ``--compute-scale``);
* ``roofline``: the spec's roofline for every node with FLOPs/bytes; nodes without keep their measured
  time and are counted (``compute_methods``: ``roofline`` vs ``measured``);
* ``projected``: as described; an unknown capture or target device is an error.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tracekit.errors import ConfigError

COMPUTE_CHOICES = ("auto", "measured", "roofline", "projected")


@dataclass(frozen=True)
class ComputePlan:
    """What a replay will do with compute: ``method`` (measured | roofline | projected), ``source`` and
    ``target`` device keys when projecting, and ``reason`` (why ``auto`` chose what it chose)."""

    method: str
    source: str | None = None
    target: str | None = None
    reason: str = ""


def compute_label(plan: ComputePlan, result: Any) -> str:
    """How compute was timed, as every timing command prints it: ``projected SRC -> DST``, or the methods that
    timed the compute nodes (``measured``, ``roofline``, ``measured + roofline`` ...)."""
    if plan.method == "projected":
        return f"projected {plan.source} -> {plan.target}"
    methods = [k for k, v in result.compute_methods if v and k != "missing"]
    return " + ".join(methods) or result.provenance.compute_mode


def trace_compute_device(traceset: Any) -> str | None:
    """The ``compute_device`` (else ``capture_device``) of the trace set's first rank that names one."""
    for trace in traceset:
        md = trace.metadata
        for key in ("compute_device", "capture_device"):
            v = md.get_attr(key)
            if isinstance(v, str) and v:
                return v
    return None


def plan_compute(traceset: Any, spec: Any, compute: str = "auto", capture_device: str | None = None) -> ComputePlan:
    """Decide how compute is timed (module doc).

    Raises:
        ConfigError: unknown choice; ``projected`` with an unknown capture or target device.
    """
    from tracekit.costs.devices import device_model, find_device

    if compute not in COMPUTE_CHOICES:
        raise ConfigError(f"--compute must be one of {', '.join(COMPUTE_CHOICES)}, got {compute!r}")
    if compute in ("measured", "roofline"):
        return ComputePlan(compute, reason="chosen")
    name = capture_device or trace_compute_device(traceset)
    src = find_device(name) if name else None
    dst = find_device(spec.device.name)
    if src is None or dst is None:
        why = (
            "the trace records no capture device"
            if not name
            else f"no device preset matches the capture device {name!r}"
            if src is None
            else f"no device preset matches the spec's device {spec.device.name!r}"
        )
        if compute == "projected":
            raise ConfigError(
                f"cannot project compute: {why} (give --capture-device, see devices in tracekit/costs/devices.toml)"
            )
        return ComputePlan("measured", reason=why)
    return ComputePlan("projected", src.key, device_model(spec).key, reason=f"capture device {name!r}")


def replay_with_compute(
    traces: Any,
    spec: Any,
    *,
    options: Any = None,
    compute: str = "auto",
    capture_device: str | None = None,
    status: Any = None,
    perturb: Any = None,
):
    """Replay ``traces`` (files or a TraceSet) on ``spec`` timing compute as :func:`plan_compute` decides.

    ``status`` (optional) receives phase descriptions from the file-streaming path
    (:func:`tracekit.replayer.replay_with_traces`); ``perturb``: a :class:`~tracekit.replayer.simulation.perturb.
    Perturbation` applied to the replay.

    Returns:
        ``(result, traceset, plan, report)``: the ReplayResult (with the memory of a generated job:
        :func:`tracekit.replayer.results.memory.with_memory`), the trace set replayed, the
        :class:`ComputePlan` and the merged :class:`tracekit.costs.projection.ProjectionReport` (None unless
        projected).

    Raises:
        as :func:`tracekit.replayer.replay` and :func:`plan_compute`.
    """
    from tracekit.io import read_traceset
    from tracekit.replayer import ReplayOptions, replay_with_traces
    from tracekit.replayer.results.memory import with_memory
    from tracekit.replayer.simulation.hardware import HardwareSpec
    from tracekit.replayer.simulation.specs import load_spec
    from tracekit.sets.traceset import TraceSet

    options = options or ReplayOptions()
    if not isinstance(spec, HardwareSpec):
        spec = load_spec(spec)
    if perturb is not None and not perturb.active:  # the CLI passes an empty one: a class set stays class-wise
        perturb = None
    ts = traces if isinstance(traces, TraceSet) else None
    if ts is None and compute in ("measured", "auto") and capture_device is None:
        # files: decide from the first rank's metadata so jobs without a device keep the streaming path
        from tracekit.io import read_metadata, trace_paths

        from tracekit.sets.classset import find_class_set

        classes = find_class_set(traces)  # a class set: its first representative's metadata
        first = classes.classes[0].file if classes is not None else trace_paths(traces)[0][1]
        md = read_metadata(first) if str(first).endswith((".et", ".et.gz")) else None
        named = md is not None and any(md.get_attr(k) for k in ("compute_device", "capture_device"))
        if compute == "measured" or (md is not None and not named):
            result, kept = replay_with_traces(traces, spec, options=options, status=status, perturb=perturb)
            reason = "chosen" if compute == "measured" else "the trace records no capture device"
            return with_memory(result, kept, spec), kept, ComputePlan("measured", reason=reason), None
    if ts is None and perturb is None and options.fold and compute in ("auto", "projected", "roofline"):
        done = _replay_class_set(traces, spec, options, compute, capture_device, status)
        if done is not None:
            result, kept, plan, report = done
            return with_memory(result, kept, spec), kept, plan, report
    ts = ts if ts is not None else read_traceset(traces)
    plan = plan_compute(ts, spec, compute, capture_device)
    report = None
    if plan.method == "roofline":
        spec = replace(spec, compute=replace(spec.compute, mode="roofline"))
    elif plan.method == "projected":
        from tracekit.costs.devices import device_model
        from tracekit.transforms import Retarget

        step = Retarget(device_model(plan.source), device_model(spec))
        traces_out, report = {}, None
        for rank, trace in ts.items():
            out, rep = step.project_trace(trace)
            traces_out[rank] = out.with_label(path=trace.path)  # same node ids: errors name the file read
            if report is None:
                report = rep
            else:
                report.merge(rep)
        ts = ts.with_traces(traces_out)
    return with_memory(replay_with_traces(ts, spec, options=options, perturb=perturb)[0], ts, spec), ts, plan, report


def _replay_class_set(traces: Any, spec: Any, options: Any, compute: str, capture_device: str | None, status: Any):
    """:func:`replay_with_compute` of a rank-class set, compute planned and projected once per class (issue 34:
    "projection defeats folding"): each representative is projected and the classes, held in memory
    (:class:`~.memory_classes.MemoryClassSet`), are replayed folded.  The report counts every rank (a class's
    report times its members).  None when ``traces`` is not a class set."""
    from tracekit.sets.classset import find_class_set
    from tracekit.replayer import replay_with_traces
    from tracekit.replayer.orchestration.memory_classes import MemoryClassSet
    from tracekit.transforms.classrescale import load_classes

    cs = find_class_set(traces)
    if cs is None:
        return None
    classes = load_classes(cs)
    plan = plan_compute([c.trace for c in classes], spec, compute, capture_device)
    report = None
    if plan.method == "roofline":
        spec = replace(spec, compute=replace(spec.compute, mode="roofline"))
    elif plan.method == "projected":
        from tracekit.costs.devices import device_model
        from tracekit.transforms import Retarget

        step = Retarget(device_model(plan.source), device_model(spec))
        if status is not None:
            status(f"projecting compute {plan.source} -> {plan.target} per rank class", 0, len(classes))
        projected = []
        for c in classes:
            out, rep = step.project_trace(c.trace)
            projected.append(out.with_label(path=c.trace.path))  # same node ids: errors name the class file
            for _ in c.ranks:  # the report of every rank, as the per-rank route merges them
                if report is None:
                    report = replace(rep, nodes=dict(rep.nodes), measured_ns=dict(rep.measured_ns),
                                     projected_ns=dict(rep.projected_ns))  # fmt: skip
                else:
                    report.merge(rep)
        traces = MemoryClassSet(cs.manifest, cs.world_size, cs.classes, traces=tuple(projected))
    result, kept = replay_with_traces(traces, spec, options=options, status=status)
    return result, kept, plan, report


__all__ = [
    "COMPUTE_CHOICES",
    "ComputePlan",
    "compute_label",
    "plan_compute",
    "replay_with_compute",
    "trace_compute_device",
]
