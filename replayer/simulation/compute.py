"""Compute cost: how long a compute node runs on the spec's device.

Methods (``ComputeCost.method``; one per node, so a replay can say how many
nodes each method timed):

- ``measured``: the node's measured ``duration_ns`` x ``compute.duration_scale``,
  rounded to the nearest ns (half to even);
- ``roofline``: ``num_ops / min(peak x compute_efficiency, mem_bw x
  memory_efficiency x num_ops / tensor_bytes)`` (Williams, Waterman and
  Patterson, "Roofline", CACM 2009), computed as the equal ``max(num_ops /
  (peak x eff), tensor_bytes / (mem_bw x mem_eff))`` so that a node with only
  FLOPs or only bytes still gets a time; rounded to the nearest ns;
- ``astra_measured``: ASTRA-sim's replay of a recorded duration:
  ``duration_micros * 1000`` ns, i.e. ``duration_ns`` floored to whole
  microseconds, and 1 ns when that is zero (docs/design.md section 4) unless the node has no
  ``num_ops`` either and ``[astra] build`` is ``c459ab6``, which skips such a node (0 ns; 518bd51 does not);
- ``astra_roofline``: ASTRA-sim's roofline (``Workload::issue_comp`` and
  ``Roofline::get_perf``): ``intensity = num_ops / tensor_size``, ``perf =
  min(local_mem_bw x 1e9 x intensity, peak_perf x 1e12)``, time =
  ``uint64(num_ops / perf x 1e9)`` (truncated); ``peak-perf`` is TFLOP/s and
  ``local-mem-bw`` GB/s in ASTRA-sim's system JSON;
- ``missing``: neither a duration nor FLOPs/bytes: 0 ns (ASTRA-sim likewise
  skips a roofline node without ``tensor_size``).

Which method a node gets (``compute.mode`` in the spec):

- ``measured`` (default): measured if ``duration_ns > 0``, else roofline if
  ``num_ops > 0`` or ``tensor_bytes > 0``, else missing;
- ``roofline``: roofline when it can, else measured, else missing;
- ``astra``: ``astra_roofline`` when ``[astra] roofline_enabled`` (missing when
  ``tensor_bytes`` is 0; 0 ns when ``num_ops`` is 0), else ``astra_measured``.

``num_ops`` counts FLOPs (tracekit's writers; Chakra's ``num_ops``) and
``tensor_bytes`` is Chakra's ``tensor_size`` in bytes; 0 means unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tracekit.errors import SpecError

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import Node
    from tracekit.replayer.simulation.hardware import HardwareSpec

METHODS = ("measured", "roofline", "astra_measured", "astra_roofline", "missing")
MEASURED, ROOFLINE, ASTRA_MEASURED, ASTRA_ROOFLINE, MISSING = range(len(METHODS))


@dataclass(frozen=True)
class ComputeCost:
    """Duration of one compute node and the method that gave it.

    Attributes:
        duration_ns: the node's replayed duration, ns (whole).
        method: one of :data:`METHODS`.
    """

    duration_ns: int
    method: str


@dataclass(frozen=True)
class ComputeCosts:
    """Durations of many nodes (vectorized :class:`ComputeModel`).

    Attributes:
        duration_ns: int64[N], ns.
        method: uint8[N], index into :data:`METHODS`.
    """

    duration_ns: npt.NDArray[np.int64]
    method: npt.NDArray[np.uint8]

    def counts(self) -> dict[str, int]:
        """Number of nodes timed by each method (methods with no node left out)."""
        found = np.bincount(self.method, minlength=len(METHODS))
        return {METHODS[i]: int(c) for i, c in enumerate(found) if c}


class ComputeModel:
    """Compute durations for one spec (see module doc for the methods and rules).

    Raises (at construction):
        SpecError: mode ``astra`` without an ``[astra]`` table, or a dtype the
            device has no peak for.
    """

    def __init__(self, spec: "HardwareSpec") -> None:
        self.spec = spec
        self.mode = spec.compute.mode
        self.scale = spec.compute.duration_scale
        device = spec.device
        self._peak_flops_per_s: float | None = None
        if device.peak_flops_per_s:
            self._peak_flops_per_s = device.peak(spec.compute.dtype)
        self.mem_bytes_per_ns = device.mem_bandwidth_gbps * device.memory_efficiency
        self.astra_roofline = False
        if self.mode == "astra":
            if spec.astra is None:
                raise SpecError("key astra: is required for compute.mode = 'astra'", path=spec.path)
            self.astra_roofline = spec.astra.roofline_enabled
            self.astra_zero_is_1ns = spec.astra.build == "518bd51"  # every zero-duration node costs 1 ns
            peak_tflops = spec.astra.peak_perf_tflops
            self.astra_peak_per_s = peak_tflops * 1e12 if peak_tflops is not None else self._peak_flops_per_s
            self.astra_mem_bw_per_s = spec.astra.local_mem_bw_gbps * 1e9

    # --- one node ---

    def cost(self, duration_ns: int, num_ops: int | None = None, tensor_bytes: int | None = None) -> ComputeCost:
        """Duration of one node from its measured duration, FLOPs and bytes (None or 0 = unknown).

        Args:
            duration_ns: measured duration, ns.
            num_ops: FLOPs (Chakra ``num_ops`` as tracekit's writers fill it).
            tensor_bytes: bytes moved (Chakra ``tensor_size``).

        Raises:
            SpecError: the node needs a roofline and the device lists no peak for the dtype (or, in mode
                ``astra``, ``[astra] peak_perf_tflops`` is missing).
        """
        costs = self.costs(
            np.array([num_ops or 0], dtype=np.float64),
            np.array([tensor_bytes or 0], dtype=np.float64),
            np.array([duration_ns or 0], dtype=np.int64),
        )
        return ComputeCost(int(costs.duration_ns[0]), METHODS[int(costs.method[0])])

    def node_cost(self, node: "Node") -> ComputeCost:
        """:meth:`cost` of a trace node (``duration_ns``, ``num_ops``, ``tensor_bytes``).

        Raises:
            SpecError: as :meth:`cost`.
        """
        return self.cost(node.duration_ns, node.num_ops, node.tensor_bytes)

    # --- many nodes ---

    def costs(self, num_ops: np.ndarray, tensor_bytes: np.ndarray, duration_ns: np.ndarray) -> ComputeCosts:
        """Durations of N nodes at once.

        Args:
            num_ops: FLOPs per node, shape (N,), 0 = unknown.
            tensor_bytes: bytes per node, shape (N,), 0 = unknown.
            duration_ns: measured durations, ns, shape (N,), 0 = unknown.

        Returns:
            :class:`ComputeCosts` with int64 durations (ns) and uint8 methods, shape (N,) each.

        Raises:
            SpecError: the arrays differ in shape; or a node needs a roofline and the device lists no peak
                for the dtype (mode ``astra``: ``[astra] peak_perf_tflops`` is missing).
        """
        ops = np.asarray(num_ops, dtype=np.float64)
        nbytes = np.asarray(tensor_bytes, dtype=np.float64)
        dur = np.asarray(duration_ns, dtype=np.int64)
        if not (ops.shape == nbytes.shape == dur.shape):
            raise SpecError(
                f"compute cost arrays differ in shape: num_ops {ops.shape}, "
                f"tensor_bytes {nbytes.shape}, duration_ns {dur.shape}"
            )
        out = np.zeros(dur.shape, dtype=np.int64)
        method = np.full(dur.shape, MISSING, dtype=np.uint8)
        if self.mode == "astra":
            self._astra(ops, nbytes, dur, out, method)
            return ComputeCosts(out, method)
        has_dur = dur > 0
        has_roof = (ops > 0) | (nbytes > 0)
        if self.mode == "roofline":
            use_roof = has_roof
            use_meas = has_dur & ~has_roof
        else:
            use_meas = has_dur
            use_roof = has_roof & ~has_dur
        with np.errstate(over="ignore"):
            out[use_meas] = _ns_int(dur[use_meas] * self.scale)
        method[use_meas] = MEASURED
        flops_per_ns = self._flops_per_ns() if np.any(ops[use_roof] > 0) else 1.0
        t = np.maximum(ops[use_roof] / flops_per_ns, nbytes[use_roof] / self.mem_bytes_per_ns)
        out[use_roof] = _ns_int(t)
        method[use_roof] = ROOFLINE
        return ComputeCosts(out, method)

    def _flops_per_ns(self) -> float:
        peak_flops_per_s = self._peak_flops_per_s
        if peak_flops_per_s is None:  # the device lists no peak at all: this raises SpecError naming the key
            peak_flops_per_s = self.spec.device.peak(self.spec.compute.dtype)
        return peak_flops_per_s * self.spec.device.compute_efficiency / 1e9

    def _astra(
        self,
        ops: npt.NDArray[np.float64],
        nbytes: npt.NDArray[np.float64],
        dur: npt.NDArray[np.int64],
        out: npt.NDArray[np.int64],
        method: npt.NDArray[np.uint8],
    ) -> None:
        if not self.astra_roofline:
            micros_ns = (dur // 1000) * 1000
            # ASTRA-sim c459ab6 (Workload::issue): a node with no runtime and no num_ops is skipped (0 ns); with
            # num_ops but no runtime it is replayed for 1 ns; 518bd51 replays every zero-duration node for 1 ns
            # (recorded: edge-compute-zero-duration, two such nodes: 2 cycles)
            out[:] = np.where(micros_ns > 0, micros_ns, np.where((ops > 0) | self.astra_zero_is_1ns, 1, 0))
            method[:] = ASTRA_MEASURED
            return
        ok = nbytes > 0
        if not np.any(ok):  # no node has tensor_size: all stay missing (0 ns)
            return
        peak_per_s = self.astra_peak_per_s
        if peak_per_s is None:
            raise SpecError("key astra.peak_perf_tflops: the ASTRA-sim roofline needs peak-perf", path=self.spec.path)
        with np.errstate(divide="ignore", invalid="ignore"):
            intensity = ops[ok] / nbytes[ok]
            perf = np.minimum(self.astra_mem_bw_per_s * intensity, peak_per_s)
            elapsed_s = np.where(ops[ok] > 0, ops[ok] / perf, 0.0)
        out[ok] = _ns_int(np.floor(elapsed_s * 1e9))
        method[ok] = ASTRA_ROOFLINE


_SATURATED_NS = float(2**63 - 1024)  # the largest float64 below 2^63: out-of-range times saturate, never wrap


def _ns_int(values: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.int64]:
    """Float nanoseconds -> int64, rounded; values past int64 saturate (the replay program names them)."""
    return np.rint(np.minimum(np.nan_to_num(values, nan=_SATURATED_NS), _SATURATED_NS)).astype(np.int64)


def compute_model(spec: "HardwareSpec") -> ComputeModel:
    """The :class:`ComputeModel` for ``spec``.

    Raises:
        SpecError: mode ``astra`` without an ``[astra]`` table, or a dtype the device has no peak for.
    """
    return ComputeModel(spec)
