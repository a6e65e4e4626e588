"""Reading and writing hardware-spec TOML: every key checked, every error naming file and key.

Schema: :mod:`.hardware`. This module turns a parsed TOML document into a :class:`~.hardware.HardwareSpec`,
rejecting unknown keys (a typo such as ``bandwith_gbps`` is an error, not a silent default), and back.
"""

from __future__ import annotations

import math
import os
import tomllib
from pathlib import Path
from typing import Any, Mapping

from tracekit.errors import SpecError, malformed_input

from tracekit.replayer.simulation.hardware import (
    ALGORITHMS,
    ASTRA_BUILDS,
    COLLECTIVE_KEYS,
    COLLECTIVE_MODELS,
    COMPUTE_MODES,
    DEFAULT_ALGORITHMS,
    FABRICS,
    TOPOLOGIES,
    TREE_COLLECTIVES,
    AstraSettings,
    ComputeSettings,
    DeviceSpec,
    HardwareSpec,
    NetworkDim,
)
from tracekit.replayer.simulation.nccl_constants import NCCL_ALGORITHMS, NCCL_LINKS, NCCL_PROTOCOLS, NcclConstants

# Absurd values are refused with the key named: no spec quantity (FLOP/s, GB/s, ns, bytes) comes near 1e18,
# and beyond it times overflow into inf/NaN that every later step would reject or print as "inf ns".
MAX_SPEC_NUMBER = 1e18
MIN_SPEC_POSITIVE = 1e-6  # nor is a positive rate or factor below 1e-6 (bandwidth_gbps = 1e-300: 1.6e297 s)
MAX_NPUS = 1 << 24  # ranks per network dimension
# ASTRA-sim's preferred-dataset-splits and active-chunks-per-dimension: each chunk of a collective is simulated
# (0.13 ms each measured on a 16-rank all-reduce: 10^5 splits took 16 s, 10^8 would take hours); configs use 1-64.
MAX_DATASET_SPLITS = 1 << 16


# --- reading ---------------------------------------------------------------------------------


class _Reader:
    """Typed access to a TOML table; every error names the file and the key."""

    def __init__(
        self, table: Mapping[str, Any], key: str, path: str | None, known: frozenset[str] | None = None
    ) -> None:
        if not isinstance(table, Mapping):
            raise SpecError(f"key {key or '(top level)'}: expected a table, got {table!r}", path=path)
        self.table = table
        self.prefix = key
        self.path = path
        self.used: set[str] = set()
        if known is not None:
            unknown = sorted(set(table) - known)
            if unknown:
                raise self.error(unknown[0], f"unknown key (expected one of {', '.join(sorted(known))})")

    def _name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def error(self, key: str, message: str) -> SpecError:
        """A :class:`SpecError` naming the full key (``network[0].size``) and the spec's path."""
        return SpecError(f"key {self._name(key)}: {message}", path=self.path)

    def has(self, key: str) -> bool:
        """Whether the table has ``key``."""
        return key in self.table

    def raw(
        self,
        key: str,
        default: Any = ...,
    ) -> Any:
        """The value of ``key`` as given (``default`` when absent), marked as used.

        Raises:
            SpecError: ``key`` is absent and has no default.
        """
        self.used.add(key)
        if key not in self.table:
            if default is ...:
                raise self.error(key, "is required")
            return default
        return self.table[key]

    def string(self, key: str, default: Any = ..., choices: tuple[str, ...] | None = None) -> Any:
        """The string value of ``key`` (``default`` when absent).

        Raises:
            SpecError: absent without default, not a string, or not one of ``choices``.
        """
        value = self.raw(key, default)
        if value is default and key not in self.table:
            return value
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, got {value!r}")
        if choices is not None and value not in choices:
            raise self.error(key, f"must be one of {', '.join(choices)}; got {value!r}")
        return value

    def number(
        self,
        key: str,
        default: Any = ...,
        *,
        positive: bool = False,
        nonnegative: bool = False,
        at_most: float | None = None,
    ) -> Any:
        """The value of ``key`` as a float (``default`` when absent), in the key's unit.

        Raises:
            SpecError: absent without default, not a finite number, larger than :data:`MAX_SPEC_NUMBER` in
                magnitude, positive but below :data:`MIN_SPEC_POSITIVE`, or outside the bounds asked for.
        """
        value = self.raw(key, default)
        if value is default and key not in self.table:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.error(key, f"must be a number, got {value!r}")
        if abs(value) > MAX_SPEC_NUMBER:
            raise self.error(
                key, f"must be at most {bound_text(MAX_SPEC_NUMBER)} in magnitude, got {bound_text(value)}"
            )
        if positive and value < MIN_SPEC_POSITIVE:
            raise self.error(key, f"must be {'at least 1e-06' if value > 0 else 'positive'}, got {value!r}")
        if nonnegative and value < 0:
            raise self.error(key, f"must not be negative, got {value!r}")
        if at_most is not None and value > at_most:
            raise self.error(key, f"must be at most {at_most}, got {value!r}")
        return float(value)

    def integer(self, key: str, default: Any = ..., *, minimum: int | None = None, maximum: int | None = None) -> Any:
        """The integer value of ``key`` (``default`` when absent).

        Raises:
            SpecError: absent without default, not an integer, below ``minimum`` or above ``maximum``.
        """
        value = self.raw(key, default)
        if value is default and key not in self.table:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"must be an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.error(key, f"must be at least {minimum}, got {value!r}")
        if maximum is not None and value > maximum:
            raise self.error(key, f"must be at most {maximum:,}, got {value:,}")
        return value

    def boolean(self, key: str, default: Any = ...) -> Any:
        """The boolean value of ``key`` (``default`` when absent).

        Raises:
            SpecError: absent without default, or not true/false.
        """
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {value!r}")
        return value

    def sub(self, key: str, known: frozenset[str] | None = None) -> "_Reader | None":
        """The table under ``key``, or None when absent."""
        self.used.add(key)
        if key not in self.table:
            return None
        return _Reader(self.table[key], self._name(key), self.path, known)

    def required_sub(self, key: str, known: frozenset[str] | None = None) -> "_Reader":
        """The table under ``key``; SpecError when absent."""
        return _Reader(self.raw(key), self._name(key), self.path, known)

    def finish(self) -> None:
        """Reject keys nobody read (catches typos such as ``bandwith_gbps``)."""
        unknown = sorted(set(self.table) - self.used)
        if unknown:
            raise self.error(unknown[0], "unknown key")


def bound_text(x: float) -> str:
    """A bound or value as messages print it: ``16,777,216``, ``1e18``, ``1e-06``, ``0.5``."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return repr(x)
    if not math.isfinite(x):
        return str(x)
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:g}".replace("e+", "e")


_TOP_KEYS = frozenset(
    {
        "name",
        "description",
        "fit_to_world_size",
        "device",
        "compute",
        "collectives",
        "network",
        "astra",
        "nccl",
        "perturb",
        "price_per_gpu_hour_usd",
    }
)
_DEVICE_KEYS = frozenset(
    {"name", "peak_flops_per_s", "default_dtype", "mem_bandwidth_gbps", "compute_efficiency", "memory_efficiency"}
)
_DIM_KEYS = frozenset(
    {"name", "topology", "size", "bandwidth_gbps", "latency_ns", "algorithms", "nccl_link"}
    | {"fabric", "nodes_per_leaf", "oversubscription"}
)


def _read_device(r: _Reader) -> DeviceSpec:
    peaks_r = r.sub("peak_flops_per_s")
    peaks = []
    if peaks_r is not None:
        for dtype in peaks_r.table:
            peaks.append((dtype, peaks_r.number(dtype, positive=True)))
    default_dtype = r.string("default_dtype", peaks[0][0] if peaks else None)
    if default_dtype is not None and default_dtype not in dict(peaks):
        raise r.error("default_dtype", f"{default_dtype!r} is not in peak_flops_per_s")
    device = DeviceSpec(
        name=r.string("name"),
        peak_flops_per_s=tuple(peaks),
        default_dtype=default_dtype,
        mem_bandwidth_gbps=r.number("mem_bandwidth_gbps", positive=True),
        compute_efficiency=r.number("compute_efficiency", 1.0, positive=True, at_most=1.0),
        memory_efficiency=r.number("memory_efficiency", 1.0, positive=True, at_most=1.0),
    )
    r.finish()
    return device


def _read_dim(r: _Reader, *, astra: bool = False) -> NetworkDim:
    """One ``[[network]]`` table; ``astra``: ASTRA-sim's tree also runs reduce-scatter, all-gather, all-to-all."""
    algorithms = dict(DEFAULT_ALGORITHMS)
    alg_r = r.sub("algorithms")
    if alg_r is not None:
        for key in alg_r.table:
            if key not in COLLECTIVE_KEYS:
                raise alg_r.error(key, f"unknown collective; expected one of {', '.join(COLLECTIVE_KEYS)}")
            name = alg_r.string(key, choices=ALGORITHMS)
            if (
                name == "double_binary_tree"
                and key not in TREE_COLLECTIVES
                and not (astra and key in ("reduce_scatter", "all_gather", "all_to_all"))
            ):
                raise alg_r.error(key, f"double_binary_tree cannot run {key}; use ring, direct or halving_doubling")
            algorithms[key] = name
    dim = NetworkDim(
        name=r.string("name"),
        topology=r.string("topology", choices=TOPOLOGIES),
        size=r.integer("size", minimum=1),
        bandwidth_gbps=r.number("bandwidth_gbps", positive=True),
        latency_ns=r.number("latency_ns", nonnegative=True),
        algorithms=tuple(sorted(algorithms.items())),
        nccl_link=r.string("nccl_link", None, choices=NCCL_LINKS),
        fabric=r.string("fabric", None, choices=FABRICS),
        nodes_per_leaf=r.integer("nodes_per_leaf", 0, minimum=0),
        oversubscription=r.number("oversubscription", 1.0, positive=True),
    )
    if dim.fabric is not None and dim.nodes_per_leaf < 1:
        raise r.error("nodes_per_leaf", f"must be >= 1 with fabric = {dim.fabric!r}")
    if dim.oversubscription < 1.0:
        raise r.error("oversubscription", f"must be >= 1 (down-link / up-link bandwidth), got {dim.oversubscription}")
    r.finish()
    return dim


def _read_astra(r: _Reader) -> AstraSettings:
    settings = AstraSettings(
        endpoint_delay_ns=r.integer("endpoint_delay_ns", minimum=0),
        local_mem_bw_gbps=r.number("local_mem_bw_gbps", positive=True),
        preferred_dataset_splits=r.integer("preferred_dataset_splits", 1, minimum=1, maximum=MAX_DATASET_SPLITS),
        active_chunks_per_dimension=r.integer("active_chunks_per_dimension", 1, minimum=1, maximum=MAX_DATASET_SPLITS),
        collective_optimization=r.string(
            "collective_optimization", "localBWAware", choices=("localBWAware", "baseline")
        ),
        bandwidth_convention=r.string("bandwidth_convention", "gib", choices=("gib", "si")),
        roofline_enabled=r.boolean("roofline_enabled", False),
        peak_perf_tflops=r.number("peak_perf_tflops", None, positive=True),
        build=r.string("build", ASTRA_BUILDS[0], choices=ASTRA_BUILDS),
        network_backend=r.string("network_backend", "congestion_unaware", choices=AstraSettings.NETWORK_BACKENDS),
    )
    r.finish()
    return settings


def _read_proto_table(r: _Reader, default: tuple) -> tuple:
    rows = dict(default)
    for algorithm in r.table:
        if algorithm not in NCCL_ALGORITHMS:
            raise r.error(algorithm, f"unknown algorithm; expected one of {', '.join(NCCL_ALGORITHMS)}")
        values = r.raw(algorithm)
        if (
            not isinstance(values, list)
            or len(values) != 3
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in values)
        ):
            raise r.error(algorithm, f"must be 3 non-negative numbers (LL, LL128, Simple), got {values!r}")
        rows[algorithm] = tuple(float(v) for v in values)
    r.finish()
    return tuple((a, rows[a]) for a in NCCL_ALGORITHMS)


def _positive_list(r: _Reader, key: str, default: tuple[float, ...], length: int | None) -> tuple[float, ...]:
    values = r.raw(key, list(default))
    if (
        not isinstance(values, list)
        or not values
        or (length is not None and len(values) != length)
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values)
    ):
        count = f"{length} " if length else ""
        raise r.error(key, f"must be a list of {count}positive numbers; got {values!r}")
    return tuple(float(v) for v in values)


def _positive_triple(r: _Reader, key: str, default: tuple[float, float, float]) -> tuple[float, float, float]:
    """Three positive numbers at ``key`` (one per node-count class of NCCL's tables: 1, 2, more), else ``default``."""
    one, two, more = _positive_list(r, key, default, 3)
    return (one, two, more)


#: [nccl] keys that are any number >= 0
_NCCL_NONNEGATIVE = ("per_channel_bw_gbps", "net_overhead_us", "latency_floor_us", "pcie_bw_gbps", "copy_latency_us",
                     "hbm_bytes_per_byte")  # fmt: skip


def _read_nccl(r: _Reader) -> NcclConstants:
    default = NcclConstants()
    algorithms = r.raw("algorithms", list(default.algorithms))
    protocols = r.raw("protocols", list(default.protocols))
    for key, values, choices in (("algorithms", algorithms, NCCL_ALGORITHMS), ("protocols", protocols, NCCL_PROTOCOLS)):
        if not isinstance(values, list) or not values or any(v not in choices for v in values):
            raise r.error(key, f"must be a non-empty list drawn from {', '.join(choices)}; got {values!r}")
    if "ring" not in algorithms:
        raise r.error("algorithms", "must include ring (the only algorithm for most collectives)")
    base = default.base_latency_us
    base_r = r.sub("base_latency_us")
    if base_r is not None:
        base = _read_proto_table(base_r, base)
    hw = default.hw_latency_us
    hw_r = r.sub("hw_latency_us")
    if hw_r is not None:
        rows = dict(hw)
        for link in hw_r.table:
            if link not in NCCL_LINKS:
                raise hw_r.error(link, f"unknown link class; expected one of {', '.join(NCCL_LINKS)}")
            rows[link] = _read_proto_table(hw_r.required_sub(link), rows[link])
        hw = tuple((link, rows[link]) for link in NCCL_LINKS)
    consts = NcclConstants(
        algorithms=tuple(algorithms),
        protocols=tuple(protocols),
        base_latency_us=base,
        hw_latency_us=hw,
        channels=r.integer("channels", default.channels, minimum=1),
        nic_speeds_gbps=_positive_list(r, "nic_speeds_gbps", default.nic_speeds_gbps, None),
        nics_per_node=r.integer("nics_per_node", default.nics_per_node, minimum=0),
        gpus_per_process=r.integer("gpus_per_process", default.gpus_per_process, minimum=1),
        tree_per_channel_max_bw_gbps=_positive_triple(
            r, "tree_per_channel_max_bw_gbps", default.tree_per_channel_max_bw_gbps
        ),
        ll_max_bw_gbps=_positive_triple(r, "ll_max_bw_gbps", default.ll_max_bw_gbps),
        ll128_per_channel_max_bw_gbps=r.number(
            "ll128_per_channel_max_bw_gbps", default.ll128_per_channel_max_bw_gbps, positive=True
        ),
        nvls_efficiency=r.number("nvls_efficiency", default.nvls_efficiency, positive=True, at_most=1.0),
        net_efficiency=r.number("net_efficiency", default.net_efficiency, positive=True, at_most=1.0),
        tree_net_factor=r.number("tree_net_factor", default.tree_net_factor, positive=True),
        net_latency_reference_ns=r.number("net_latency_reference_ns", default.net_latency_reference_ns),
        **{key: r.number(key, getattr(default, key), nonnegative=True) for key in _NCCL_NONNEGATIVE},
    )
    r.finish()
    return consts


def spec_from_dict(data: Mapping[str, Any], *, path: str | os.PathLike[str] | None = None) -> HardwareSpec:
    """Build and validate a :class:`HardwareSpec` from a parsed TOML document.

    Raises:
        SpecError: naming ``path`` and the offending key, for a missing,
            unknown, mistyped or out-of-range value.
    """
    path_s = os.fspath(path) if path is not None else None
    r = _Reader(data, "", path_s, _TOP_KEYS)
    device = _read_device(r.required_sub("device", _DEVICE_KEYS))

    net = r.raw("network")
    if not isinstance(net, list) or not net:
        raise r.error("network", "must be a non-empty array of tables ([[network]])")
    coll = data.get("collectives")
    astra = isinstance(coll, Mapping) and coll.get("model") == "astra"
    dims = tuple(_read_dim(_Reader(t, f"network[{i}]", path_s, _DIM_KEYS), astra=astra) for i, t in enumerate(net))
    names = [d.name for d in dims]
    if len(set(names)) != len(names):
        raise r.error("network", f"dimension names must be unique, got {names}")

    compute = ComputeSettings()
    compute_r = r.sub("compute", frozenset({"mode", "duration_scale", "dtype", "interference"}))
    if compute_r is not None:
        compute = ComputeSettings(
            mode=compute_r.string("mode", "measured", choices=COMPUTE_MODES),
            duration_scale=compute_r.number("duration_scale", 1.0, positive=True),
            dtype=compute_r.string("dtype", None),
            interference=compute_r.boolean("interference", False),
        )
        compute_r.finish()
        if compute.dtype is not None and compute.dtype not in dict(device.peak_flops_per_s):
            raise compute_r.error("dtype", f"{compute.dtype!r} is not in device.peak_flops_per_s")

    model = "alpha_beta"
    coll_r = r.sub("collectives", frozenset({"model"}))
    if coll_r is not None:
        model = coll_r.string("model", "alpha_beta", choices=COLLECTIVE_MODELS)
        coll_r.finish()

    astra = None
    astra_r = r.sub("astra", frozenset(AstraSettings.__dataclass_fields__))
    if astra_r is not None:
        astra = _read_astra(astra_r)
    if (model == "astra" or compute.mode == "astra") and astra is None:
        raise r.error("astra", "is required when collectives.model or compute.mode is 'astra'")

    nccl = NcclConstants()
    nccl_r = r.sub("nccl", frozenset(NcclConstants.__dataclass_fields__))
    if nccl_r is not None:
        nccl = _read_nccl(nccl_r)
    if model == "nccl":
        for i, dim in enumerate(dims):
            if dim.nccl_link is None:
                raise SpecError(f"key network[{i}].nccl_link: is required for collectives.model = 'nccl'", path=path_s)

    spec = HardwareSpec(
        name=r.string("name"),
        description=r.string("description", ""),
        device=device,
        network=dims,
        compute=compute,
        collective_model=model,
        astra=astra,
        nccl=nccl,
        fit_to_world_size=r.boolean("fit_to_world_size", False),
        path=path_s,
    )
    r.used.add("perturb")  # replay's --hw reads its [perturb] table (tracekit.cli._perturb.read_perturbation)
    # plan ranks specs by cost with it (tracekit.replayer.orchestration.planning.report.spec_price)
    r.used.add("price_per_gpu_hour_usd")
    r.finish()
    return spec


def read_spec_file(path: str | os.PathLike[str]) -> HardwareSpec:
    """Read a spec from a TOML file.

    Raises:
        SpecError: the file is missing, is not valid TOML, or a key is bad.
    """
    p = Path(path)
    try:
        from tracekit.io import read_input_bytes

        text = read_input_bytes(p)
    except OSError as exc:
        raise SpecError(f"cannot read hardware spec: {exc.strerror or exc}", path=p) from None
    try:
        data = tomllib.loads(text.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(f"not a valid TOML file: {exc}", path=p) from None
    except RecursionError:
        raise SpecError("not a valid TOML file: arrays or tables nested too deeply", path=p) from None
    with malformed_input("hardware spec", p, SpecError):
        return spec_from_dict(data, path=p)
