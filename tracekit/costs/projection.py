"""Compute projection: measured durations moved from the capture device to another device.

A compute node measured at ``d`` ns on device D becomes ``d x t(X) / t(D)`` on device X, where ``t`` is
the model time of the node's op (:func:`tracekit.costs.devices.op_seconds`: its FLOPs ``num_ops``, bytes
``tensor_size``, ``op_class`` and ``compute_dtype``).  The measured efficiency of the capture is kept and
only the ratio of the two devices' models is applied, per op class (GEMMs scale with the matrix peaks,
memory-bound ops with the bandwidths).

Which nodes move: from a GPU, the device nodes (kernels, ``is_cpu_op`` not true); host ops keep their
measured time (they run on the host CPU).  From a CPU (a CPU capture) the host ops are the compute and
move.  A CPU -> GPU projection cannot keep the capture's efficiency (a CPU's is no guide to a GPU's): each op
with a cost takes the target's model time ``op_seconds(target)`` (the roofline), a rough estimate
(:attr:`ProjectionReport.rough`; :func:`projected_duration`).

Every node is counted under one method (:data:`METHODS`), with its time before and after, so a summary can
say which method timed how much compute.  Nothing falls back silently: nodes without a cost, host nodes
kept, ops whose model time is 0, and dtype fallbacks are all counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracekit.costs.devices import TF32_BY_DEFAULT, DeviceModel, op_seconds
from tracekit.fmt import fmt_ms
from tracekit.model import Node, NodeType

TIMED = frozenset({NodeType.COMP_NODE, NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE})
#: How a node's time was set.
METHODS = ("projected", "kept_no_cost", "kept_host", "kept_no_work", "no_duration", "unknown_flops", "unknown_memory")


@dataclass
class ProjectionReport:
    """What a projection did, per method: node counts and measured / projected ns.

    Attributes:
        source, target: device keys.
        nodes, measured_ns, projected_ns: dicts keyed by method (:data:`METHODS`).
        dtype_fallbacks: nodes whose dtype the target or source has no peak for (priced at fp32).
        rough: a CPU capture projected to a GPU (a rough roofline estimate).
    """

    source: str
    target: str
    nodes: dict[str, int] = field(default_factory=dict)
    measured_ns: dict[str, float] = field(default_factory=dict)
    projected_ns: dict[str, float] = field(default_factory=dict)
    dtype_fallbacks: int = 0
    rough: bool = False

    def add(self, method: str, measured: float, projected: float) -> None:
        """Count one node priced by ``method``.

        Args:
            method: one of :data:`METHODS`.
            measured: the node's measured duration, ns.
            projected: its projected duration on the target, ns.
        """
        self.nodes[method] = self.nodes.get(method, 0) + 1
        self.measured_ns[method] = self.measured_ns.get(method, 0.0) + measured
        self.projected_ns[method] = self.projected_ns.get(method, 0.0) + projected

    def merge(self, other: "ProjectionReport") -> None:
        """Add another report's counts, times (ns) and fallbacks into this one (e.g. from another rank)."""
        for m, c in other.nodes.items():
            self.nodes[m] = self.nodes.get(m, 0) + c
            self.measured_ns[m] = self.measured_ns.get(m, 0.0) + other.measured_ns[m]
            self.projected_ns[m] = self.projected_ns.get(m, 0.0) + other.projected_ns[m]
        self.dtype_fallbacks += other.dtype_fallbacks
        self.rough = self.rough or other.rough

    def lines(self) -> list[str]:
        """Human summary: one line per method with nodes and time, then the fallbacks."""
        total = sum(self.measured_ns.values())
        out = [
            f"compute projected {self.source} -> {self.target}"
            + (
                " (CPU capture -> GPU: a rough estimate; each op with a cost takes the GPU's roofline time, "
                "the CPU's measured time says nothing of the GPU's)"
                if self.rough
                else ""
            )
        ]
        for m in METHODS:
            if m in self.nodes:
                share = 100.0 * self.measured_ns[m] / total if total > 0 else 0.0
                out.append(
                    f"  {m}: {self.nodes[m]:,} nodes, {fmt_ms(self.measured_ns[m])} measured "
                    f"({share:.1f}%) -> {fmt_ms(self.projected_ns[m])}"
                )
        if self.dtype_fallbacks:
            out.append(f"  dtype fallbacks (priced at fp32): {self.dtype_fallbacks:,} nodes")
        return out

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values; per method ``nodes``, ``measured_ns`` and ``projected_ns`` (ns)."""
        return {
            "source": self.source,
            "target": self.target,
            "rough": self.rough,
            "dtype_fallbacks": self.dtype_fallbacks,
            "methods": {
                m: {"nodes": self.nodes[m], "measured_ns": self.measured_ns[m], "projected_ns": self.projected_ns[m]}
                for m in METHODS
                if m in self.nodes
            },
        }


def projected_duration(
    duration_ns: float,
    flops: float,
    nbytes: float,
    op_class: str | None,
    dtype: str | None,
    source: DeviceModel,
    target: DeviceModel,
    tf32: frozenset[str] = TF32_BY_DEFAULT,
) -> tuple[float, str, bool]:
    """``(duration on target in ns (float), method, dtype fell back)`` for one node measured on source.

    The measured duration is scaled by the ratio of the two devices' model times,
    ``duration_ns * op_seconds(target) / op_seconds(source)`` (:func:`tracekit.costs.devices.op_seconds`), so
    what the model does not capture (launch overheads, achieved efficiency) carries over from the measurement.
    From a CPU to an accelerator (:func:`cpu_to_gpu`) the result is ``op_seconds(target)`` alone, in ns: what
    a host op's measured time holds beyond its model (threads, caches, allocation, framework overhead) is the
    CPU's, not the GPU's, and scaling it moved tiny host GEMMs measured at tens of ms (a 0.5 MFLOP
    ``aten::mm`` at 59 ms in the bundled gloo capture, 16,000x its CPU model time) to tens of ms on an A100,
    slower than the capture, since the GPU's model is the slower one for such small ops.

    Args:
        duration_ns: measured duration on ``source``, ns (<= 0: ``no_duration``, 0 returned).
        flops: the node's FLOPs (``num_ops``).
        nbytes: bytes it reads and writes (``tensor_size``).
        op_class: its op class (:data:`tracekit.costs.opcost.OP_CLASSES`), or None.
        dtype: its compute dtype, or None.
        source, target: the capture's device and the device to project to.
        tf32: op classes whose fp32 ops run as TF32 where a device has TF32 math
            (:func:`tracekit.costs.devices.op_seconds`; PyTorch's defaults unless the capture ran otherwise).

    Raises:
        ConfigError: a device lists no peak FLOP/s.
    """
    if duration_ns <= 0:
        return 0.0, "no_duration", False
    if flops <= 0 and nbytes <= 0:
        return float(duration_ns), ("kept_no_work" if op_class else "kept_no_cost"), False
    ts = op_seconds(flops, nbytes, op_class, dtype, source, tf32)
    tt = op_seconds(flops, nbytes, op_class, dtype, target, tf32)
    if ts.seconds <= 0:
        return float(duration_ns), "kept_no_work", False
    fell = ts.dtype_fallback or tt.dtype_fallback
    if cpu_to_gpu(source, target):
        return tt.seconds * 1e9, "projected", fell
    return duration_ns * (tt.seconds / ts.seconds), "projected", fell


def tf32_policy(trace: Any, given: str | None = None) -> frozenset[str]:
    """The op classes whose fp32 ops run as TF32 when projecting ``trace`` (:func:`tracekit.costs.devices.tf32_classes`):
    the ``given`` policy, else the capture's flag (metadata attribute :data:`tracekit.costs.devices.TF32_ATTR`), else
    ``pytorch`` (PyTorch's defaults).

    Raises:
        ConfigError: an unknown policy name, given or in the capture's flag (naming the rank and file).
    """
    from tracekit.costs.devices import TF32_ATTR, TF32_POLICIES, tf32_classes
    from tracekit.errors import ConfigError

    if given is not None:
        return tf32_classes(given)
    flag = trace.metadata.get_attr(TF32_ATTR)
    if flag is not None and flag not in TF32_POLICIES:
        raise ConfigError(
            f"metadata attribute {TF32_ATTR!r} is {flag!r}; choose {', '.join(TF32_POLICIES)}",
            rank=trace.rank,
            path=trace.path,
        )
    return tf32_classes("pytorch" if flag is None else str(flag))


def cpu_to_gpu(source: DeviceModel, target: DeviceModel) -> bool:
    """Whether a projection goes from a CPU to an accelerator, where :func:`projected_duration` prices each op
    by the target's model alone (module doc) instead of scaling the measured time."""
    return source.kind == "cpu" and target.kind != "cpu"


def _str_attr(node: Node, name: str) -> str | None:
    v = node.get_attr(name)
    return v if isinstance(v, str) and v else None


def project_node(
    node: Node,
    source: DeviceModel,
    target: DeviceModel,
    host_is_compute: bool,
    report: ProjectionReport,
    tf32: frozenset[str] = TF32_BY_DEFAULT,
) -> float | None:
    """Projected duration (float ns) of one node, counted in ``report``; None when not a timed node.

    Host ops (``is_cpu_op``) keep their measured duration unless ``host_is_compute`` (a CPU capture).

    Raises:
        ConfigError: a device lists no peak FLOP/s.
    """
    if node.type not in TIMED:
        return None
    d = float(node.duration_ns)
    if bool(node.is_cpu_op) and not host_is_compute:
        report.add("kept_host", d, d)
        return d
    new, method, fell = projected_duration(
        d,
        node.num_ops or 0,
        node.tensor_bytes or 0,
        _str_attr(node, "op_class"),
        _str_attr(node, "compute_dtype"),
        source,
        target,
        tf32,
    )
    report.add(method, d, new)
    report.dtype_fallbacks += int(fell)
    return new


def new_report(source: DeviceModel, target: DeviceModel, host_is_compute: bool) -> ProjectionReport:
    """An empty :class:`ProjectionReport` from ``source`` to ``target``.

    ``rough`` is set when host ops are the compute (``host_is_compute``) of a CPU capture priced on a
    non-CPU device.
    """
    return ProjectionReport(
        source.key, target.key, rough=host_is_compute and source.kind == "cpu" and target.kind != "cpu"
    )


__all__ = [
    "METHODS",
    "ProjectionReport",
    "cpu_to_gpu",
    "new_report",
    "project_node",
    "projected_duration",
    "tf32_policy",
]
