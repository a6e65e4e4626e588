"""Device models for compute projection: peaks per dtype, memory bandwidth and efficiency curves by size.

This module owns the device presets (data in ``tracekit/costs/devices.toml``, each with its spec-sheet source),
looking a device up by the name a capture or a hardware spec records, and the efficiency curves:

* :func:`gemm_efficiency` ``(m, n, k, dtype, device)``: achievable fraction of the dtype's peak for one
  GEMM ``[m, k] @ [k, n]`` (``batch`` copies): ``gemm_max_efficiency x max_T(tile_eff x wave_eff)`` with
  ``tile_eff = m n / (ceil(m/T) T ceil(n/T) T)`` (tile quantization) and ``wave_eff = work / (ceil(work /
  U) U)`` over the ``U`` compute units (wave quantization), where ``work`` = output tiles, times a split-K
  factor ``min(U // tiles, ceil(k / 4T))`` when the tiles alone cannot fill the device (NVIDIA, "Matrix
  Multiplication Background User's Guide"; split-K as in CUTLASS); the tile edge ``T`` is the device's
  ``gemm_tile`` ``T0`` or a half, quarter ... down to 16, whichever is fastest (as cuBLAS heuristics pick
  smaller tiles for small problems), a smaller tile running at ``T / T0`` of the unit's peak (its
  arithmetic intensity per loaded element is proportional to ``T``);
* :func:`attention_efficiency`: ``attention_max_efficiency x wave_eff`` over ``batch x heads x ceil(L/T)``
  query tiles (FlashAttention's parallelization);
* :func:`memory_efficiency` ``(nbytes, device)``: ``memory_max_efficiency x B / (B + bandwidth x
  memory_latency_s)`` (Little's law: a small kernel cannot keep enough bytes in flight).

:func:`op_seconds` combines them into a roofline time for one op of a class (:mod:`tracekit.costs.opcost`):
``max(F / (peak x eff_compute), B / (bandwidth x eff_memory))``.  Issue-16 calibration code should call
:func:`gemm_efficiency` directly.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from tracekit.errors import ConfigError
from tracekit.workloads.units import DTYPE_BYTES

DEVICES_FILE = Path(__file__).with_name("devices.toml")
_MATRIX = ("gemm", "conv")


@dataclass(frozen=True)
class DeviceModel:
    """One device (see ``devices.toml`` for the keys' meaning and sources).

    Attributes:
        key: preset key (``a100-80gb``) or a label for ad-hoc devices.
        name: product name (from the spec sheet).
        peak_flops_per_s: ``((dtype, FLOP/s), ...)`` dense peaks of the matrix units.
        default_dtype: the dtype whose peak prices ops of unknown dtype.
        vector_flops_per_s: fp32 rate of the non-matrix units (memory-bound op classes), FLOP/s.
        mem_bandwidth_bytes_per_s: device memory bandwidth, bytes/s.
        compute_units: SMs / CUs / cores.
        gemm_tile: output tile edge ``T0`` of one thread block, elements (see :func:`gemm_efficiency`).
        gemm_max_efficiency, attention_max_efficiency, memory_max_efficiency: achievable fractions of
            peak, in (0, 1] (sources in ``devices.toml``).
        memory_latency_s: latency term of :func:`memory_efficiency` (Little's law), seconds.
        kind: ``gpu`` or ``cpu``.
        memory_bytes: device memory, bytes (0 = not recorded).
        overlap_compute_slowdown, overlap_comm_slowdown: extra time fraction of a compute kernel / a collective
            while the other runs on the same GPU (shared SMs and memory bandwidth; 0 = not known: no interference).
        pytorch_tf32: PyTorch runs fp32 ops of :data:`TF32_BY_DEFAULT` classes as TF32 on this device by
            default (CUDA on NVIDIA Ampere and later; :func:`op_seconds`).
        tf32_conv_efficiency: fraction of the GEMM curve a TF32 convolution reaches (``devices.toml``).
        source: the spec sheet the numbers come from.
        match: case-insensitive regular expressions matched against recorded device names.
    """

    key: str
    name: str
    peak_flops_per_s: tuple[tuple[str, float], ...]
    default_dtype: str
    vector_flops_per_s: float
    mem_bandwidth_bytes_per_s: float
    compute_units: int = 1
    gemm_tile: int = 1
    gemm_max_efficiency: float = 1.0
    attention_max_efficiency: float = 1.0
    memory_max_efficiency: float = 1.0
    memory_latency_s: float = 0.0
    kind: str = "gpu"
    memory_bytes: int = 0
    overlap_compute_slowdown: float = 0.0
    overlap_comm_slowdown: float = 0.0
    pytorch_tf32: bool = False
    tf32_conv_efficiency: float = 1.0
    source: str = ""
    match: tuple[str, ...] = field(default=(), compare=False)

    def peak(self, dtype: str | None = None) -> tuple[float, str]:
        """``(FLOP/s, dtype used)`` for ``dtype``: its own peak, else tf32 -> fp32 (what pre-Ampere
        hardware and CPUs run), else the fp32 peak, else the default dtype's.

        Raises:
            ConfigError: the device lists no peak at all for these dtypes.
        """
        table = dict(self.peak_flops_per_s)
        for want in (dtype or self.default_dtype, "fp32" if dtype == "tf32" else None, "fp32", self.default_dtype):
            if want in table:
                return table[want], want
        raise ConfigError(f"device {self.key!r} lists no peak FLOP/s")


def _model(key: str, d: Mapping[str, Any]) -> DeviceModel:
    try:
        return DeviceModel(
            key=key,
            name=str(d["name"]),
            peak_flops_per_s=tuple((k, float(v)) for k, v in d["peak_flops_per_s"].items()),
            default_dtype=str(d["default_dtype"]),
            vector_flops_per_s=float(d["vector_flops_per_s"]),
            mem_bandwidth_bytes_per_s=float(d["mem_bandwidth_bytes_per_s"]),
            compute_units=int(d["compute_units"]),
            gemm_tile=int(d["gemm_tile"]),
            gemm_max_efficiency=float(d["gemm_max_efficiency"]),
            attention_max_efficiency=float(d["attention_max_efficiency"]),
            memory_max_efficiency=float(d["memory_max_efficiency"]),
            memory_latency_s=float(d["memory_latency_s"]),
            kind=str(d.get("kind", "gpu")),
            memory_bytes=int(d.get("memory_bytes", 0)),
            overlap_compute_slowdown=float(d.get("overlap_compute_slowdown", 0.0)),
            overlap_comm_slowdown=float(d.get("overlap_comm_slowdown", 0.0)),
            pytorch_tf32=bool(d.get("pytorch_tf32", False)),
            tf32_conv_efficiency=float(d.get("tf32_conv_efficiency", 1.0)),
            source=str(d["source"]),
            match=tuple(d.get("match", ())),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"device preset {key!r}: bad or missing key ({exc})", path=str(DEVICES_FILE)) from None


@lru_cache(maxsize=1)
def device_presets() -> dict[str, DeviceModel]:
    """All presets of ``devices.toml`` by key, in file order (read once, cached).

    Raises:
        ConfigError: a preset has a missing or mistyped key (names the preset and the file).
    """
    with open(DEVICES_FILE, "rb") as f:
        data = tomllib.load(f)
    return {k: _model(k, v) for k, v in data["devices"].items()}


def find_device(name: str | None) -> DeviceModel | None:
    """The preset whose key equals ``name`` or whose ``match`` pattern matches it (case-insensitive,
    first in file order), or None.

    Raises:
        ConfigError: ``devices.toml`` has a bad preset (see :func:`device_presets`).
    """
    if not name:
        return None
    presets = device_presets()
    if name in presets:
        return presets[name]
    for dev in presets.values():
        if any(re.search(p, name, re.IGNORECASE) for p in dev.match):
            return dev
    return None


def device_model(value: Any) -> DeviceModel:
    """A :class:`DeviceModel` from a preset key or device name, a DeviceModel, a hardware spec (its
    ``device``: the matching preset's curves with the spec's own peaks and bandwidth), or anything with
    ``peak_flops_per_s`` and ``mem_bandwidth_bytes_per_s`` (a flat roofline without efficiency curves).

    Raises:
        ConfigError: an unknown name or an object without those attributes.
    """
    if isinstance(value, DeviceModel):
        return value
    if isinstance(value, str):
        dev = find_device(value)
        if dev is None:
            raise ConfigError(f"unknown device {value!r}; presets: {', '.join(device_presets())}")
        return dev
    obj = getattr(value, "device", value)
    peaks = getattr(obj, "peak_flops_per_s", None)
    bw = getattr(obj, "mem_bandwidth_bytes_per_s", None)
    if peaks is None or bw is None:
        raise ConfigError(f"device {value!r} has no peak_flops_per_s / mem_bandwidth_bytes_per_s")
    name = str(getattr(obj, "name", "") or "")
    if isinstance(peaks, (int, float)):
        return DeviceModel(
            key=name or "device",
            name=name,
            peak_flops_per_s=(("default", float(peaks)),),
            default_dtype="default",
            vector_flops_per_s=float(peaks),
            mem_bandwidth_bytes_per_s=float(bw),
        )
    peaks = tuple((str(k), float(v)) for k, v in peaks)
    if not peaks:
        raise ConfigError(f"device {name or value!r} has no peak_flops_per_s entries")
    default = str(getattr(obj, "default_dtype", None) or peaks[0][0])
    preset = find_device(name)
    if preset is not None:
        table = dict(peaks)
        return DeviceModel(
            **{
                **preset.__dict__,
                "peak_flops_per_s": peaks,
                "default_dtype": default,
                "mem_bandwidth_bytes_per_s": float(bw),
                "vector_flops_per_s": table.get("fp32", preset.vector_flops_per_s),
            }
        )
    return DeviceModel(
        key=name or "device",
        name=name,
        peak_flops_per_s=peaks,
        default_dtype=default,
        vector_flops_per_s=dict(peaks).get("fp32", peaks[0][1]),
        mem_bandwidth_bytes_per_s=float(bw),
    )


# ----------------------------------------------------------------------------- efficiency curves
def _wave(work: int, units: int) -> float:
    return work / (math.ceil(work / units) * units) if work > 0 else 0.0


def gemm_efficiency(m: int, n: int, k: int, dtype: str | None, device: Any, batch: int = 1) -> float:
    """Achievable fraction of ``device``'s ``dtype`` peak for ``batch`` GEMMs ``[m,k] @ [k,n]`` (module
    doc: max efficiency x tile quantization x wave quantization with split-K). In (0, 1]; 0 for an empty
    GEMM. ``dtype`` does not change the curve today (kept for calibrated per-dtype curves).

    Raises:
        ConfigError: ``device`` is not a device (see :func:`device_model`).
    """
    dev = device_model(device)
    if min(m, n, k, batch) <= 0:
        return 0.0
    units = max(dev.compute_units, 1)
    t0 = max(dev.gemm_tile, 1)
    best, t = 0.0, t0
    while True:  # the library picks the tile (T, T/2, ... >= 16) that runs fastest
        tm, tn = math.ceil(m / t), math.ceil(n / t)
        tiles = tm * tn * batch
        split = max(1, min(units // tiles, math.ceil(k / (4 * t)))) if tiles < units else 1
        best = max(best, (t / t0) * (m * n) / (tm * t * tn * t) * _wave(tiles * split, units))
        if t // 2 < 16:
            return dev.gemm_max_efficiency * best
        t //= 2


def attention_efficiency(batch_heads: int, seq_len: int, device: Any) -> float:
    """Achievable fraction of peak for fused attention over ``batch_heads`` (B x H) and query length
    ``seq_len`` (tokens): max efficiency x wave quantization of the ``B H ceil(L / T)`` query tiles
    (FlashAttention's parallelization over batch, heads and query blocks; Dao 2023).

    Raises:
        ConfigError: ``device`` is not a device (see :func:`device_model`).
    """
    dev = device_model(device)
    work = batch_heads * math.ceil(max(seq_len, 1) / max(dev.gemm_tile, 1))
    return dev.attention_max_efficiency * _wave(work, max(dev.compute_units, 1))


def memory_efficiency(nbytes: float, device: Any) -> float:
    """Achievable fraction of memory bandwidth for a kernel moving ``nbytes`` bytes (module doc).

    ``memory_max_efficiency x B / (B + bandwidth x memory_latency_s)`` (Little's law).

    Raises:
        ConfigError: ``device`` is not a device (see :func:`device_model`).
    """
    dev = device_model(device)
    latency_bytes = dev.mem_bandwidth_bytes_per_s * dev.memory_latency_s
    return dev.memory_max_efficiency * (nbytes / (nbytes + latency_bytes) if latency_bytes > 0 else 1.0)


@dataclass(frozen=True)
class OpTime:
    """Model time of one op on one device.

    Attributes:
        seconds: the roofline time, s.
        dtype: the dtype whose peak was used.
        dtype_fallback: True when that is not the op's own dtype.
    """

    seconds: float
    dtype: str
    dtype_fallback: bool


#: Op classes PyTorch runs in TF32 when their dtype is fp32, by default, on devices with TF32 math:
#: convolutions (``torch.backends.cudnn.allow_tf32`` defaults to True); fp32 matmuls do not
#: (``torch.backends.cuda.matmul.allow_tf32`` defaults to False since PyTorch 1.12).  Source: PyTorch docs,
#: "CUDA semantics", section "TensorFloat-32 (TF32) on Ampere (and later) devices".
TF32_BY_DEFAULT: frozenset[str] = frozenset({"conv"})
#: What each ``tf32`` policy name means (:func:`tf32_classes`): PyTorch's defaults, TF32 off, or TF32 for
#: matmuls too (``torch.backends.cuda.matmul.allow_tf32 = True`` / ``torch.set_float32_matmul_precision("high")``).
TF32_POLICIES: dict[str, frozenset[str]] = {"pytorch": TF32_BY_DEFAULT, "off": frozenset(), "all": frozenset(_MATRIX)}


#: Capture metadata attribute (string, a :data:`TF32_POLICIES` name) saying how the captured run set PyTorch's TF32
#: flags; projection (:class:`tracekit.transforms.Retarget`) follows it unless told otherwise.
TF32_ATTR = "tf32"


def tf32_classes(policy: str) -> frozenset[str]:
    """The op classes whose fp32 ops run as TF32 under ``policy`` (:data:`TF32_POLICIES`).

    Raises:
        ConfigError: an unknown policy name.
    """
    try:
        return TF32_POLICIES[policy]
    except KeyError:
        raise ConfigError(f"unknown TF32 policy {policy!r}; choose {', '.join(TF32_POLICIES)}") from None


def _math_dtype(op_class: str, dtype: str | None, device: DeviceModel, tf32: frozenset[str]) -> str | None:
    """The dtype the matrix units run: ``tf32`` for an fp32 op of a class in ``tf32`` on a device with TF32 math."""
    if dtype == "fp32" and op_class in tf32 and device.pytorch_tf32 and device.peak("tf32")[1] == "tf32":
        return "tf32"
    return dtype


def op_seconds(
    flops: float,
    nbytes: float,
    op_class: str | None,
    dtype: str | None,
    device: DeviceModel,
    tf32: frozenset[str] = TF32_BY_DEFAULT,
) -> OpTime:
    """Roofline time of one op of ``op_class`` on ``device``.

    * no class (nodes with only ``num_ops``/``tensor_size``): ``max(F / peak(default dtype), B / bandwidth)``;
    * ``gemm``/``conv``: equivalent square GEMM ``s = 1.5 e F / B`` (``F = 2 s^3``, ``B = 3 s^2 e`` for
      element size ``e``) priced with :func:`gemm_efficiency`; ``attention``: its max efficiency;
    * other classes: ``F`` at the vector rate; bytes at :func:`memory_efficiency`.

    Roofline: Williams, Waterman and Patterson, "Roofline" (CACM 2009).

    Args:
        flops: FLOPs of the op (``F``).
        nbytes: bytes it reads and writes (``B``).
        op_class: one of :data:`tracekit.costs.opcost.OP_CLASSES`, or None.
        dtype: the op's compute dtype (``bf16`` ...), or None.
        device: the device to price on.
        tf32: op classes whose fp32 ops run as TF32 where the device has TF32 math (:data:`TF32_BY_DEFAULT`,
            PyTorch's defaults; a device without TF32, such as a V100, runs them at fp32).  An op the capture
            recorded as ``tf32`` (cuDNN's ``allow_tf32`` argument) is TF32 whatever this says.  A TF32
            convolution runs at ``tf32_conv_efficiency`` of the GEMM curve (``devices.toml``).

    Returns:
        :class:`OpTime` with the time in seconds.

    Raises:
        ConfigError: the device lists no peak FLOP/s.
    """
    if not op_class:
        peak, used = device.peak(None)
        return OpTime(max(flops / peak, nbytes / device.mem_bandwidth_bytes_per_s), used, False)
    mem_s = nbytes / (device.mem_bandwidth_bytes_per_s * memory_efficiency(nbytes, device)) if nbytes > 0 else 0.0
    if op_class in _MATRIX or op_class == "attention":
        asked = dtype
        dtype = _math_dtype(op_class, dtype, device, tf32)
        peak, used = device.peak(dtype or None)
        if op_class == "attention":
            eff = device.attention_max_efficiency
        else:
            e = DTYPE_BYTES.get(dtype or used, 4)
            s = max(1, round(1.5 * e * flops / nbytes)) if nbytes > 0 else 4096
            eff = gemm_efficiency(s, s, s, used, device)
            if op_class == "conv" and used == "tf32":
                eff *= device.tf32_conv_efficiency
        comp_s = flops / (peak * eff) if flops > 0 else 0.0
        return OpTime(max(comp_s, mem_s), used, bool(dtype) and used not in (dtype, asked))
    return OpTime(max(flops / device.vector_flops_per_s, mem_s), "fp32", False)


__all__ = [
    "DeviceModel",
    "OpTime",
    "TF32_ATTR",
    "TF32_BY_DEFAULT",
    "TF32_POLICIES",
    "attention_efficiency",
    "device_model",
    "device_presets",
    "find_device",
    "gemm_efficiency",
    "memory_efficiency",
    "op_seconds",
    "tf32_classes",
]
