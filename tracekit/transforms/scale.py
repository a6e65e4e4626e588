"""Scaling transforms: compute time by a factor, compute retargeted to another device, message sizes.

* :class:`ScaleCompute` -- multiply compute nodes' durations (nodes without a
  duration get their ``num_ops`` and ``tensor_size`` multiplied instead, so a
  roofline replay scales too), optionally only nodes of some types, host or
  device nodes, or names matching a pattern;
* :class:`Retarget` -- move compute from one device to another with
  :mod:`tracekit.costs.projection` (the code ``replay --hw`` uses): a measured
  duration ``d`` becomes ``d * t(target) / t(source)``, ``t`` the device
  model time of the node's op class (roofline, Williams, Waterman and
  Patterson, CACM 2009, with efficiency curves by size); the measured
  efficiency is kept and every node is counted by method;
* :class:`ScaleComm` -- multiply ``comm_size`` of communication nodes, with
  per-collective-type overrides.

Rounding: new integer values are ``round(old * factor)`` (half to even).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from tracekit.model.attrs import COMM_SIZE, COMM_TYPE
from tracekit.errors import ConfigError
from tracekit.model import COMM_TYPES, CollectiveType, Node, NodeType
from tracekit.transforms.base import Transform, check_factor, map_nodes, map_traces, scale_int
from tracekit.transforms.nodescale import _TIMED, scaled_compute  # noqa: F401 - public here too

COMPUTE_TYPES = ("COMP_NODE",)


def _types(names: tuple[str, ...], allowed: frozenset[NodeType]) -> frozenset[NodeType]:
    out = set()
    for name in names:
        key = str(name).upper()
        key = key if key.endswith("_NODE") else key + "_NODE"
        try:
            t = NodeType[key]
        except KeyError:
            raise ConfigError(f"unknown node type {name!r}") from None
        if t not in allowed:
            raise ConfigError(f"node type {t.name} is not one of {', '.join(a.name for a in sorted(allowed))}")
        out.add(t)
    return frozenset(out)


def _pattern(p: str | None) -> re.Pattern | None:
    if p is None:
        return None
    try:
        return re.compile(p)
    except re.error as exc:
        raise ConfigError(f"bad name pattern {p!r}: {exc}") from None


@dataclass(frozen=True)
class ScaleCompute(Transform):
    """Multiply compute time by ``factor``.

    A selected node with ``duration_ns > 0`` gets ``round(duration_ns *
    factor)``; one without a duration gets ``num_ops`` and ``tensor_size``
    multiplied (its roofline time scales by ``factor`` up to rounding).

    Args:
        factor: > 0.
        node_types: which node types count as compute (default COMP_NODE;
            MEM_LOAD_NODE / MEM_STORE_NODE allowed).
        name_pattern: only nodes whose name matches (``re.search``).
        cpu: True = only host ops (``is_cpu_op``), False = only device
            nodes, None = both.

    Raises:
        ConfigError: factor <= 0 or not finite, unknown type, bad pattern.
    """

    factor: float
    node_types: tuple[str, ...] = COMPUTE_TYPES
    name_pattern: str | None = None
    cpu: bool | None = None

    def __post_init__(self) -> None:
        check_factor("compute scale factor", self.factor)
        object.__setattr__(self, "node_types", tuple(self.node_types))
        _types(self.node_types, _TIMED)
        _pattern(self.name_pattern)

    def selects(self, node: Node, types: frozenset[NodeType], pat: re.Pattern | None) -> bool:
        """Whether ``node`` is scaled: its type in ``types``, ``is_cpu_op`` as ``cpu`` asks, name matching ``pat``.

        Raises:
            ValidationError: ``is_cpu_op`` breaks the bool rule (only read when ``cpu`` is set).
        """
        if node.type not in types:
            return False
        if self.cpu is not None and bool(node.is_cpu_op) != self.cpu:
            return False
        return pat is None or pat.search(node.name) is not None

    def apply(self, traceset):
        """Every rank with selected compute scaled by ``factor`` (class docstring); other nodes unchanged.

        Raises:
            ValidationError: ``num_ops``/``tensor_size`` (of a node without a duration) or ``is_cpu_op`` breaks
                its value rule (:mod:`tracekit.model.attrs`; names the node).
            TransformError: a scaled value does not fit 63 bits.
        """
        from tracekit.transforms.colscale import is_encoded, scale_compute_encoded

        types, pat, k = _types(self.node_types, _TIMED), _pattern(self.name_pattern), float(self.factor)

        def one(node: Node) -> Node | None:
            return scaled_compute(node, k) if self.selects(node, types, pat) else None

        def one_trace(t):  # columnar on encoded records; node by node for traces built in memory
            out = scale_compute_encoded(t, k, types, pat, self.cpu) if is_encoded(t) else map_nodes(t, one)
            values = lambda trace: trace.columns().duration_ns  # noqa: E731
            refuse_all_zeroed(t, out, values, "compute scale factor", "duration", "ns", k)
            return out

        return map_traces(traceset, one_trace)


# ----------------------------------------------------------------------------- devices
@dataclass(frozen=True)
class Device:
    """A device's roofline: peak FLOP/s and memory bandwidth (bytes/s).

    Raises:
        ConfigError: a rate that is not a finite number > 0.
    """

    peak_flops_per_s: float
    mem_bandwidth_bytes_per_s: float
    name: str = ""

    def __post_init__(self) -> None:
        check_factor("peak FLOP/s", self.peak_flops_per_s)
        check_factor("memory bandwidth (bytes/s)", self.mem_bandwidth_bytes_per_s)

    @classmethod
    def of(cls, value: Any) -> "Device":
        """A :class:`Device` from a Device, a ``(peak_flops_per_s, bytes_per_s)`` pair, a mapping with
        those keys, or any object with ``peak_flops_per_s`` / ``mem_bandwidth_bytes_per_s`` attributes
        (a replayer ``HardwareSpec`` is read through its ``device``; a per-dtype peak table through
        its ``peak()`` method, i.e. the default dtype).

        Raises:
            ConfigError: none of these forms, or bad rates.
        """
        if isinstance(value, Device):
            return value
        if isinstance(value, (tuple, list)) and len(value) == 2:
            return cls(value[0], value[1])
        if isinstance(value, Mapping):
            try:
                return cls(value["peak_flops_per_s"], value["mem_bandwidth_bytes_per_s"], str(value.get("name", "")))
            except KeyError as exc:
                raise ConfigError(f"device table needs key {exc.args[0]!r}") from None
        obj = getattr(value, "device", value)
        peak = getattr(obj, "peak_flops_per_s", None)
        bw = getattr(obj, "mem_bandwidth_bytes_per_s", None)
        if peak is None or bw is None:
            raise ConfigError(f"device {value!r} has no peak_flops_per_s / mem_bandwidth_bytes_per_s")
        if not isinstance(peak, (int, float)):
            if callable(getattr(obj, "peak", None)):
                peak = obj.peak()
            else:
                raise ConfigError(f"device {value!r}: peak_flops_per_s is not a number")
        return cls(peak, bw, str(getattr(obj, "name", "") or getattr(value, "name", "")))

    def seconds(self, flops: float, nbytes: float) -> float:
        """Roofline time ``max(flops / peak, bytes / bandwidth)`` in seconds."""
        return max(flops / self.peak_flops_per_s, nbytes / self.mem_bandwidth_bytes_per_s)


UNKNOWN_POLICIES = ("keep", "flops", "memory")
#: metadata attribute naming the device a trace's durations are for (set by converters, moved by Retarget).
COMPUTE_DEVICE_ATTR = "compute_device"


@dataclass(frozen=True)
class Retarget(Transform):
    """Move measured compute from ``source`` to ``target`` device (:mod:`tracekit.costs.projection`).

    Each timed node with a duration and a cost becomes ``d x t(target) / t(source)`` with ``t`` the
    device model time of its op class (:func:`tracekit.costs.devices.op_seconds`; plain roofline for nodes
    with only ``num_ops``/``tensor_size``).  Nodes with no duration keep their FLOPs and bytes (a
    roofline replay on the target times them).  Nodes with a duration but no cost follow ``unknown``:
    ``"keep"`` (default), ``"flops"`` (scale by the peak ratio) or ``"memory"`` (bandwidth ratio).
    Which nodes move: with ``cpu=None`` (default) the host ops too when ``source`` is a CPU (a CPU
    capture), else only nodes that are not host ops (``is_cpu_op`` not true); ``cpu`` True/False forces it.
    ``tf32``: which fp32 ops run as TF32 on a device with TF32 math (:data:`tracekit.costs.devices.TF32_POLICIES`:
    ``pytorch`` = PyTorch's defaults, convolutions only; ``off``; ``all`` = matmuls too), for a capture whose
    run changed ``torch.backends.cudnn.allow_tf32`` / ``torch.backends.cuda.matmul.allow_tf32``; None = the
    capture's flag (metadata attribute :data:`tracekit.costs.devices.TF32_ATTR`), else ``pytorch``.  Every node is counted by method in the output
    traces' metadata attribute ``compute_projection`` (JSON), and ``compute_device`` becomes the target.

    Args:
        source, target: anything :func:`tracekit.costs.devices.device_model` accepts (preset names such as
            ``a100-80gb``, hardware specs, :class:`Device`, ``(peak_flops_per_s, bytes_per_s)``).

    Raises:
        ConfigError: bad devices or ``unknown`` policy.
    """

    source: Any
    target: Any
    unknown: str = "keep"
    cpu: bool | None = None
    tf32: str | None = None

    def __post_init__(self) -> None:
        from tracekit.costs.devices import device_model, tf32_classes

        if self.tf32 is not None:
            tf32_classes(self.tf32)  # an unknown policy is refused here

        for name in ("source", "target"):
            value = getattr(self, name)
            if isinstance(value, (tuple, list, Mapping)):
                value = Device.of(value)
            object.__setattr__(self, name, device_model(value))
        if self.unknown not in UNKNOWN_POLICIES:
            raise ConfigError(f"unknown policy must be one of {', '.join(UNKNOWN_POLICIES)}, got {self.unknown!r}")

    def describe(self) -> dict[str, Any]:
        """``{"transform": "Retarget", "source", "target", "unknown", "cpu"}`` with the devices' preset keys."""
        return {
            "transform": "Retarget",
            "source": self.source.key,
            "target": self.target.key,
            "unknown": self.unknown,
            "cpu": self.cpu,
            **({"tf32": self.tf32} if self.tf32 is not None else {}),
        }

    def apply(self, traceset):
        """Every rank projected to ``target`` (:meth:`project_trace`; its report in each trace's metadata).

        Raises:
            ValidationError: a cost attribute (``num_ops``, ``tensor_size``) or ``is_cpu_op`` breaks its value rule.
        """
        return map_traces(traceset, lambda t: self.project_trace(t)[0])

    def project_trace(self, trace):
        """``(projected trace, ProjectionReport)`` for one rank."""
        import orjson

        from tracekit.costs.projection import cpu_to_gpu, new_report, project_node

        from tracekit.costs.projection import tf32_policy

        src, dst, tf32 = self.source, self.target, tf32_policy(trace, self.tf32)
        # a CPU source: host ops are the compute; else the device nodes (decided per node, so streaming
        # chunks of a rank file behave like the whole file)
        host_compute = (src.kind == "cpu") if self.cpu is None else self.cpu
        report = new_report(src, dst, host_compute)
        fallback = {
            "keep": None,
            "flops": src.peak()[0] / dst.peak()[0],
            "memory": src.mem_bandwidth_bytes_per_s / dst.mem_bandwidth_bytes_per_s,
        }[self.unknown]

        def one(node: Node) -> Node | None:
            if node.type not in _TIMED:
                return None
            d = node.duration_ns
            moves = host_compute if node.is_cpu_op is True else self.cpu is not True
            if (
                fallback is not None
                and d > 0
                and moves
                and not ((node.num_ops or 0) > 0 or (node.tensor_bytes or 0) > 0)
            ):
                report.add("unknown_" + self.unknown, d, d * fallback)
                new = d * fallback
            elif not moves:
                report.add("kept_host", d, d)
                return None
            else:
                new = project_node(node, src, dst, True, report, tf32)
            if new is None or round(new) == d:
                return None
            return node.replace(duration_ns=int(round(new)))

        from tracekit.transforms.colretarget import retarget_encoded
        from tracekit.transforms.colscale import is_encoded, rewrite_some

        encoded = is_encoded(trace)
        # the columnar path multiplies one ratio per op into the durations; a CPU -> GPU projection does not
        # scale the measured time (tracekit.costs.projection.projected_duration), so it goes node by node
        by_ratio = not cpu_to_gpu(src, dst)
        out = retarget_encoded(trace, self, host_compute, fallback, report) if encoded and by_ratio else None
        if out is None and encoded:  # CPU -> GPU, or an attribute the columns cannot read: timed nodes decoded
            out = rewrite_some(trace, np.isin(trace.columns().types, [int(t) for t in _TIMED]), one)
        elif out is None:
            out = map_nodes(trace, one)
        md = out.metadata.with_attr(COMPUTE_DEVICE_ATTR, dst.name or dst.key, "string_val")
        md = md.with_attr("compute_projection", orjson.dumps(report.to_dict()).decode(), "string_val")
        return out.with_metadata(md), report


# ----------------------------------------------------------------------------- messages
def _coll_key(key: Any) -> CollectiveType:
    if isinstance(key, CollectiveType):
        return key
    if isinstance(key, int) and not isinstance(key, bool):
        return CollectiveType(key)
    name = str(key).upper().replace("-", "_")
    aliases = {
        "ALLREDUCE": "ALL_REDUCE",
        "ALLGATHER": "ALL_GATHER",
        "REDUCESCATTER": "REDUCE_SCATTER",
        "ALLTOALL": "ALL_TO_ALL",
    }
    try:
        return CollectiveType[aliases.get(name, name)]
    except KeyError:
        raise ConfigError(
            f"unknown collective type {key!r}; choose from {', '.join(t.name.lower() for t in CollectiveType)}"
        ) from None


@dataclass(frozen=True)
class ScaleComm(Transform):
    """Multiply message sizes (``comm_size``) by ``factor``, or by ``per_type[comm_type]`` for listed collectives.

    Args:
        factor: default factor for every communication node (> 0).
        per_type: collective type (name like ``"all_reduce"``, a
            :class:`CollectiveType` or its number) -> factor, overriding
            ``factor`` for collectives of that type.
        p2p: also scale sends and receives (by ``factor``).

    Durations are left alone (collective models time messages from their size).

    Raises:
        ConfigError: a factor <= 0, an unknown collective type.
    """

    factor: float = 1.0
    per_type: Mapping[Any, float] = field(default_factory=dict)
    p2p: bool = True

    def __post_init__(self) -> None:
        check_factor("message size factor", self.factor)
        table = {}
        for k, v in dict(self.per_type).items():
            table[_coll_key(k)] = check_factor(f"message size factor for {_coll_key(k).name.lower()}", v)
        object.__setattr__(self, "per_type", table)

    def describe(self) -> dict[str, Any]:
        """``{"transform": "ScaleComm", "factor", "p2p", "per_type": {"all_reduce": k, ...}}`` (JSON-ready)."""
        return {
            "transform": "ScaleComm",
            "factor": self.factor,
            "p2p": self.p2p,
            "per_type": {k.name.lower(): v for k, v in self.per_type.items()},
        }

    def apply(self, traceset):
        """Every rank with ``comm_size`` scaled (bytes, rounded half to even by :func:`scale_int`); durations kept.

        Raises:
            ValidationError: a collective's ``comm_type`` is not a known collective type, or ``comm_size``
                breaks the integer rule (names the node).
            TransformError: a scaled size does not fit 63 bits.
        """
        table, default = self.per_type, float(self.factor)

        def one(node: Node) -> Node | None:
            if node.type not in COMM_TYPES:
                return None
            if node.type == NodeType.COMM_COLL_NODE:
                ct = node.comm_type
                k = table.get(ct, default) if ct is not None else default
            elif self.p2p:
                k = default
            else:
                return None
            size = node.comm_bytes
            if k == 1.0 or size is None:
                return None
            return node.with_attr(COMM_SIZE, scale_int(size, k))

        def scaled_trace(t):  # on encoded records: only the communication nodes are decoded
            from tracekit.transforms.colscale import is_encoded, rewrite_some, scale_comm_encoded

            if not is_encoded(t):
                return map_nodes(t, one)
            kinds = [int(x) for x in (COMM_TYPES if self.p2p else {NodeType.COMM_COLL_NODE})]
            factors = comm_factors(t.columns(), table, default, self.p2p)
            if factors is None:  # comm_type values the columns cannot judge: node by node
                return rewrite_some(t, np.isin(t.columns().types, kinds), one)
            return scale_comm_encoded(t, factors, one)

        def one_trace(t):
            out = scaled_trace(t)
            values = lambda trace: COMM_SIZE.column_or(trace.columns(), 0, 0)[1]  # noqa: E731
            smallest = min([default, *table.values()])
            refuse_all_zeroed(t, out, values, "message size factor", "comm_size", "bytes", smallest)
            return out

        return map_traces(traceset, one_trace)


def refuse_all_zeroed(before: Any, after: Any, values: Any, what: str, field_name: str, unit: str, k: float) -> None:
    """Refuse a scale that turned every non-zero value it changed into 0 (``--scale-compute 1e-320``).

    ``values(trace)`` gives a rank's int64[N] values (the same nodes in the same order in ``before`` and
    ``after``).  A rank where some values became 0 and no changed value stayed non-zero is refused; ``k``
    (the smallest factor applied) >= 1 cannot zero a value, and nothing is read then.

    Raises:
        TransformError: names the file, rank, the largest such node and value, and the factor it needs to stay
            non-zero (a product above 0.5 rounds to at least 1).
    """
    from tracekit.errors import TransformError

    if after is before or k >= 1.0:  # a factor >= 1 keeps every value >= 1 non-zero: nothing to read
        return
    old, new = values(before), values(after)
    zeroed = (old > 0) & (new == 0)
    if not zeroed.any() or ((old > 0) & (new > 0) & (new != old)).any():
        return
    i = int(np.argmax(np.where(zeroed, old, 0)))
    raise TransformError(
        f"{what} {k!r} turns every {field_name} it scales into 0 (the largest, {int(old[i]):,} {unit}, becomes "
        f"{int(old[i]) * k:.3g}, rounded to 0); only a factor above {0.5 / int(old[i]):.3g} keeps it non-zero",
        path=before.path,
        rank=before.rank,
        node_id=int(before.columns().ids[i]),
    )


def comm_factors(cols: Any, table: Mapping[CollectiveType, float], default: float, p2p: bool) -> np.ndarray | None:
    """Message-size factor of every node (float64[N]; 1.0 for nodes ScaleComm leaves alone), or None when a
    collective's ``comm_type`` is not a known collective number (the node path reports it)."""
    from tracekit.errors import ValidationError

    types = cols.types
    coll = types == int(NodeType.COMM_COLL_NODE)
    out = np.ones(len(types), dtype=np.float64)
    if p2p:
        out[(types == int(NodeType.COMM_SEND_NODE)) | (types == int(NodeType.COMM_RECV_NODE))] = default
    if coll.any():
        try:
            present, ct = COMM_TYPE.column(cols)
        except ValidationError:
            return None
        known = np.isin(ct, [int(c) for c in CollectiveType])
        if (present & coll & ~known).any():
            return None
        lut = np.full(max(int(c) for c in CollectiveType) + 1, default, dtype=np.float64)
        for c, k in table.items():
            lut[int(c)] = k
        out[coll] = np.where(present[coll], lut[np.where(known, ct, 0)[coll]], default)
    return out


__all__ = ["Device", "Retarget", "ScaleComm", "ScaleCompute"]
