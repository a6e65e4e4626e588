"""Hardware specs: what a replay runs on, read from TOML.

This module owns the :class:`HardwareSpec` value (device, network dimensions,
compute and collective-model settings), loading it by preset name or path,
listing the built-in presets, and fitting a spec to a trace set's world size.
Reading and writing the TOML (with :mod:`tomllib` / tomli-w, every key
validated) is in :mod:`.spec_toml`.  Cost models live elsewhere
(:mod:`.collectives`, :mod:`.astra_model`, :mod:`.nccl_model`, :mod:`.compute`).

Units are in the key names.  ``_gbps`` means **gigabytes per second, 1 GB/s =
1e9 bytes/s** (not gigabits), which is the same as 1 byte per nanosecond;
``_ns`` nanoseconds, ``_us`` microseconds, ``_per_s`` per second.

The TOML layout (every table but ``[device]`` and ``[[network]]`` optional)::

    name = "dgx-a100"
    description = "..."
    fit_to_world_size = true      # outermost dimension may be resized (see with_world_size)

    [device]
    name = "A100-SXM4-80GB"
    peak_flops_per_s = { bf16 = 312e12, fp32 = 19.5e12 }
    default_dtype = "bf16"
    mem_bandwidth_gbps = 2039.0
    compute_efficiency = 0.7      # achievable fraction of peak FLOP/s (default 1)
    memory_efficiency = 0.8       # achievable fraction of memory bandwidth (default 1)

    [compute]
    mode = "measured"             # "measured" | "roofline" | "astra"
    duration_scale = 1.0          # factor on measured durations

    [collectives]
    model = "alpha_beta"          # "alpha_beta" | "astra" | "nccl"

    [[network]]                   # dimension 0 = innermost (fastest varying rank)
    name = "nvlink"
    topology = "switch"           # "ring" | "switch" | "fully_connected"
    size = 8
    bandwidth_gbps = 300.0        # per rank, per direction, into this dimension
    latency_ns = 700.0            # per message (per hop on a ring topology)
    nccl_link = "nvlink"          # "nvlink" | "pci" | "net": NCCL latency class
    algorithms = { all_reduce = "ring", all_to_all = "direct" }

    [astra]                       # required for model = "astra" (see astra_model)
    [nccl]                        # optional overrides of NCCL's tuning constants

Cluster size: a preset describes one cluster size (the outermost dimension's
``size`` is its node count) and sets ``fit_to_world_size = true``;
:meth:`HardwareSpec.fitted` then resizes the outermost dimension to a trace
set's world size (see :meth:`HardwareSpec.with_world_size`).  A spec with
``fit_to_world_size = false`` (the default for user files and imported
ASTRA-sim configs) must match the trace set exactly.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar, Mapping

from tracekit.errors import SpecError
from tracekit.model import CollectiveType

from tracekit.replayer.simulation.nccl_constants import NcclConstants

TOPOLOGIES = ("ring", "switch", "fully_connected")
FABRICS = ("fat_tree", "rail_optimized")
ALGORITHMS = ("ring", "direct", "halving_doubling", "double_binary_tree")
COLLECTIVE_MODELS = ("alpha_beta", "astra", "nccl")
COMPUTE_MODES = ("measured", "roofline", "astra")

#: Spec key for each collective type (Chakra ``CollectiveCommType``).
COLLECTIVE_KEYS: dict[str, CollectiveType] = {
    "all_reduce": CollectiveType.ALL_REDUCE,
    "reduce": CollectiveType.REDUCE,
    "all_gather": CollectiveType.ALL_GATHER,
    "gather": CollectiveType.GATHER,
    "scatter": CollectiveType.SCATTER,
    "broadcast": CollectiveType.BROADCAST,
    "all_to_all": CollectiveType.ALL_TO_ALL,
    "reduce_scatter": CollectiveType.REDUCE_SCATTER,
}
_KEY_OF = {v: k for k, v in COLLECTIVE_KEYS.items()}
_KEY_OF[CollectiveType.REDUCE_SCATTER_BLOCK] = "reduce_scatter"

#: Algorithm used on a dimension when its ``algorithms`` table does not name one.
DEFAULT_ALGORITHMS: dict[str, str] = {
    "all_reduce": "ring",
    "reduce_scatter": "ring",
    "all_gather": "ring",
    "all_to_all": "direct",
    "broadcast": "ring",
    "reduce": "ring",
    "gather": "direct",
    "scatter": "direct",
}
#: Collectives a double binary tree can run (it has no scatter/gather phases).
TREE_COLLECTIVES = frozenset({"all_reduce", "broadcast", "reduce"})


def collective_key(comm_type: CollectiveType) -> str:
    """The spec key (``all_reduce`` ...) of a collective type; barrier has none.

    Raises:
        SpecError: for BARRIER (it has no per-dimension algorithm).
    """
    try:
        return _KEY_OF[CollectiveType(comm_type)]
    except KeyError:
        raise SpecError(f"collective {CollectiveType(comm_type).name} has no algorithm setting") from None


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator.

    Attributes:
        name: product name.
        peak_flops_per_s: ``((dtype, FLOP/s), ...)``, dense peak per dtype
            (may be empty, e.g. for an imported ASTRA-sim config without
            ``peak-perf``; then a roofline cannot run).
        default_dtype: the dtype whose peak the roofline uses (None if no peaks).
        mem_bandwidth_gbps: device memory bandwidth, GB/s (1e9 B/s).
        compute_efficiency: achievable fraction of peak FLOP/s, in (0, 1].
        memory_efficiency: achievable fraction of memory bandwidth, in (0, 1].
    """

    name: str
    peak_flops_per_s: tuple[tuple[str, float], ...]
    default_dtype: str | None
    mem_bandwidth_gbps: float
    compute_efficiency: float = 1.0
    memory_efficiency: float = 1.0

    def peak(self, dtype: str | None = None) -> float:
        """Peak FLOP/s for ``dtype`` (default: ``default_dtype``).

        Raises:
            SpecError: the device lists no peak for that dtype.
        """
        want = dtype or self.default_dtype
        for name, value in self.peak_flops_per_s:
            if name == want:
                return value
        listed = ", ".join(n for n, _ in self.peak_flops_per_s) or "none"
        raise SpecError(
            f"key device.peak_flops_per_s: device {self.name!r} has no peak for dtype "
            f"{want!r} (has {listed}); a roofline needs it"
        )

    @property
    def mem_bandwidth_bytes_per_s(self) -> float:
        """Memory bandwidth in bytes/s (``mem_bandwidth_gbps * 1e9``; GB here is 1e9 bytes)."""
        return self.mem_bandwidth_gbps * 1e9


@dataclass(frozen=True)
class NetworkDim:
    """One network dimension (e.g. NVLink inside a node, InfiniBand across nodes).

    Attributes:
        name: label (``nvlink``, ``ib`` ...).
        topology: ``ring`` (hops = ring distance), ``switch`` or ``fully_connected``.
        size: ranks along this dimension.
        bandwidth_gbps: bandwidth each rank can inject into this dimension,
            per direction, GB/s (1e9 B/s; equal to bytes per ns).
        latency_ns: latency of one message (one hop on a ring topology), ns.
        algorithms: ``((collective key, algorithm), ...)`` for every collective key.
        nccl_link: NCCL latency class (``nvlink``/``pci``/``net``) or None.
        fabric: how a network beyond one switch is built (None: one non-blocking switch): ``fat_tree`` (leaf
            switches of ``nodes_per_leaf`` nodes under a spine) or ``rail_optimized`` (NIC i of every node on rail
            switch i, ``nodes_per_leaf`` nodes a rail, rails joined by a spine); ``oversubscription`` = a leaf's
            down-link / up-link bandwidth ratio (>= 1).  Used by the NCCL model (:mod:`.nccl_model`).
    """

    name: str
    topology: str
    size: int
    bandwidth_gbps: float
    latency_ns: float
    algorithms: tuple[tuple[str, str], ...] = tuple(sorted(DEFAULT_ALGORITHMS.items()))
    nccl_link: str | None = None
    fabric: str | None = None
    nodes_per_leaf: int = 0
    oversubscription: float = 1.0

    @property
    def bandwidth_bytes_per_ns(self) -> float:
        """Bandwidth in bytes per nanosecond (1 GB/s = 1 B/ns)."""
        return self.bandwidth_gbps

    def algorithm(self, comm_type: CollectiveType | str) -> str:
        """The algorithm this dimension uses for a collective type or key.

        Raises:
            SpecError: ``comm_type`` is BARRIER (it has no algorithm setting).
            KeyError: ``comm_type`` is a string that is not a key of :data:`COLLECTIVE_KEYS`.
        """
        key = comm_type if isinstance(comm_type, str) else collective_key(comm_type)
        return dict(self.algorithms)[key]


@dataclass(frozen=True)
class ComputeSettings:
    """How compute nodes are costed (see :mod:`.compute`).

    Attributes:
        mode: ``measured`` (duration x scale; roofline only for nodes without a
            duration), ``roofline`` (always roofline when num_ops or
            tensor_size is known) or ``astra`` (ASTRA-sim's rules).
        duration_scale: factor applied to measured durations.
        dtype: dtype whose peak the roofline uses (None = device default).
        interference: compute and communication overlapping on a rank slow each other
            (:mod:`.interference`; the device's factors in ``tracekit/devices.toml``); off = ASTRA-sim's rule.
    """

    mode: str = "measured"
    duration_scale: float = 1.0
    dtype: str | None = None
    interference: bool = False


@dataclass(frozen=True)
class AstraSettings:
    """ASTRA-sim system-layer parameters used by the compatible model.

    Attributes:
        endpoint_delay_ns: ``endpoint-delay``, ns per received message.
        local_mem_bw_gbps: ``local-mem-bw`` (GB/s = B/ns); local reductions and roofline.
        preferred_dataset_splits: ``preferred-dataset-splits``, chunks per collective.
        active_chunks_per_dimension: ``active-chunks-per-dimension``.
        collective_optimization: ``localBWAware`` or ``baseline``.
        bandwidth_convention: ``gib`` (link GB/s read as 2^30 B/s, as the
            ASTRA-sim analytical backend measured in docs/design.md does) or ``si`` (1e9).
        roofline_enabled: ``roofline-enabled``.
        peak_perf_tflops: ``peak-perf`` (TFLOP/s), for the roofline.
        build: which ASTRA-sim the model follows where its builds differ (:data:`ASTRA_BUILDS`): ``518bd51``
            (master, 2026-03, the default: what users run) or ``c459ab6`` (2025-08).  They differ on sub-world
            communicator groups (c459ab6 runs every one as a ring; 518bd51 runs the configured algorithm) and
            zero-duration compute (518bd51 charges 1 ns per node).  replayer/NOTES.md, "ASTRA-sim builds".
        network_backend: ``congestion_unaware`` (ASTRA-sim's ``AstraSim_Analytical_Congestion_Unaware``:
            :mod:`.astra_model`) or ``congestion_aware`` (``AstraSim_Analytical_Congestion_Aware``: messages hop
            by hop over FIFO links, :mod:`.astra_congestion`).
    """

    endpoint_delay_ns: int
    local_mem_bw_gbps: float
    preferred_dataset_splits: int = 1
    active_chunks_per_dimension: int = 1
    collective_optimization: str = "localBWAware"
    bandwidth_convention: str = "gib"
    roofline_enabled: bool = False
    peak_perf_tflops: float | None = None
    build: str = "518bd51"
    network_backend: str = "congestion_unaware"
    NETWORK_BACKENDS: ClassVar[tuple[str, ...]] = ("congestion_unaware", "congestion_aware")


#: ASTRA-sim builds the compatible model can follow (``[astra] build``), the default first
ASTRA_BUILDS = ("518bd51", "c459ab6")


@dataclass(frozen=True)
class HardwareSpec:
    """A machine to replay on: one device type and a multi-dimensional network.

    Ranks map to network coordinates with dimension 0 varying fastest (see
    :mod:`.placement`); ``world_size`` is the product of the dimension sizes.

    Attributes:
        name, description: labels.
        device: the accelerator.
        network: dimensions, innermost first.
        compute: compute-cost settings.
        collective_model: ``alpha_beta``, ``astra`` or ``nccl``.
        astra: ASTRA-sim parameters (required for ``astra``).
        nccl: NCCL-like model constants.
        fit_to_world_size: whether :meth:`fitted` may resize the outermost dimension.
        path: the file it was read from, if any.
    """

    name: str
    device: DeviceSpec
    network: tuple[NetworkDim, ...]
    description: str = ""
    compute: ComputeSettings = ComputeSettings()
    collective_model: str = "alpha_beta"
    astra: AstraSettings | None = None
    nccl: NcclConstants = NcclConstants()
    fit_to_world_size: bool = False
    path: str | None = field(default=None, compare=False)

    @property
    def world_size(self) -> int:
        """Ranks in the whole machine: product of the dimension sizes."""
        return math.prod(d.size for d in self.network)

    @property
    def dim_sizes(self) -> tuple[int, ...]:
        """Ranks along each network dimension, innermost first (shape ``(len(network),)``)."""
        return tuple(d.size for d in self.network)

    def with_world_size(self, world_size: int) -> "HardwareSpec":
        """This spec resized to ``world_size`` ranks.

        Dimensions are filled innermost first: with inner dimensions of total
        size ``q`` and ``world_size`` a multiple of ``q``, the outermost
        dimension gets ``world_size / q`` (e.g. dgx-a100 with 64 ranks: 8 x 8).
        With ``world_size`` smaller than the inner dimensions, the first
        dimension that cannot be filled is shrunk to what is left and the
        outer ones dropped (dgx-a100 with 4 ranks: one node, 4 GPUs).

        Raises:
            SpecError: ``world_size`` < 1 or it does not divide evenly.
        """
        if world_size < 1:
            raise SpecError(f"world size must be at least 1, got {world_size}", path=self.path)
        dims: list[NetworkDim] = []
        left = world_size
        for i, dim in enumerate(self.network):
            if i == len(self.network) - 1 or left <= dim.size:
                dims.append(replace(dim, size=left))
                break
            if left % dim.size:
                raise SpecError(
                    f"world size {world_size} is not a multiple of the {dim.size} ranks of "
                    f"network dimension {dim.name!r} (and larger than it)",
                    path=self.path,
                )
            dims.append(dim)
            left //= dim.size
        return replace(self, network=tuple(dims))

    def fitted(self, world_size: int) -> "HardwareSpec":
        """This spec if it has ``world_size`` ranks, else a resized copy when allowed.

        Raises:
            SpecError: sizes differ and ``fit_to_world_size`` is false, or the
                resize is impossible (see :meth:`with_world_size`).
        """
        if world_size == self.world_size:
            return self
        if not self.fit_to_world_size:
            sizes = " x ".join(str(s) for s in self.dim_sizes)
            raise SpecError(
                f"spec {self.name!r} has {self.world_size} ranks ({sizes}) but the trace set has "
                f"{world_size}; set fit_to_world_size = true or change the network sizes",
                path=self.path,
            )
        return self.with_world_size(world_size)

    def to_dict(self) -> dict[str, Any]:
        """The spec as a TOML-ready dict; ``spec_from_dict(spec.to_dict())`` equals ``spec``."""
        from tracekit.replayer.simulation.spec_write import spec_to_dict

        return spec_to_dict(self)

    def to_toml(self) -> str:
        """The spec as TOML text (written with tomli-w)."""
        import tomli_w

        return tomli_w.dumps(self.to_dict())


def spec_from_dict(data: Mapping[str, Any], *, path: str | os.PathLike[str] | None = None) -> HardwareSpec:
    """Build and validate a :class:`HardwareSpec` from a parsed TOML document.

    Raises:
        SpecError: naming ``path`` and the offending key, for a missing,
            unknown, mistyped or out-of-range value.
    """
    from tracekit.replayer.simulation.spec_toml import spec_from_dict as build

    return build(data, path=path)


def read_spec(path: str | os.PathLike[str]) -> HardwareSpec:
    """Read a spec from a TOML file.

    Raises:
        SpecError: the file is missing, is not valid TOML, or a key is bad.
    """
    from tracekit.replayer.simulation.spec_toml import read_spec_file

    return read_spec_file(path)


def list_presets() -> list[str]:
    """Names of the built-in presets (``replayer/presets/*.toml``), sorted."""
    folder = resources.files("tracekit.replayer.presets")
    return sorted(entry.name[:-5] for entry in folder.iterdir() if entry.name.endswith(".toml"))


def preset_path(name: str) -> Path:
    """Path of a built-in preset's TOML file.

    Raises:
        SpecError: no preset has that name.
    """
    if name not in list_presets():
        if os.path.isdir(name):
            raise SpecError("is a directory, not a hardware spec (a preset name or a TOML file)", path=name)
        hint = "; a list is not one spec (sweep takes --hw once per spec: --hw A --hw B)" if "," in name else ""
        raise SpecError(f"no hardware preset named {name!r}; presets: {', '.join(list_presets())}{hint}")
    return Path(str(resources.files("tracekit.replayer.presets").joinpath(f"{name}.toml")))


def load_spec(name_or_path: str | os.PathLike[str]) -> HardwareSpec:
    """A spec from a preset name (``dgx-h100``) or a TOML file path.

    An existing file, or anything with a path separator or a ``.toml``
    suffix, is read as a path; any other string is a preset name.

    Raises:
        SpecError: unknown preset, unreadable file or invalid spec.
    """
    text = os.fspath(name_or_path)
    is_name = (
        isinstance(name_or_path, str)
        and os.sep not in text
        and "/" not in text
        and not text.endswith(".toml")
        and not os.path.isfile(text)
    )
    return read_spec(preset_path(text) if is_name else text)
