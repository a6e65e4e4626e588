"""Import an ASTRA-sim configuration (system JSON + network YAML [+ remote memory JSON]) as a spec.

ASTRA-sim takes three files (its ``inputs/system/*.json``,
``inputs/network/analytical/*.yml`` and ``inputs/remote_memory/analytical/
*.json``); :func:`import_astra_config` turns them into one
:class:`~.hardware.HardwareSpec` that selects the ASTRA-sim-compatible
collective model and compute rules, so single collectives replay to the
nanosecond as ASTRA-sim's analytical congestion-unaware backend gives them.

Mapping (system JSON key -> spec key):

- ``endpoint-delay`` -> ``astra.endpoint_delay_ns``
- ``preferred-dataset-splits``, ``active-chunks-per-dimension``,
  ``collective-optimization`` -> same-named ``astra`` keys
- ``local-mem-bw`` (GB/s) -> ``astra.local_mem_bw_gbps`` and ``device.mem_bandwidth_gbps``
- ``roofline-enabled``, ``peak-perf`` (TFLOP/s) -> ``astra.roofline_enabled``,
  ``astra.peak_perf_tflops`` and ``device.peak_flops_per_s.fp32``
- ``all-reduce-implementation`` etc. (one algorithm per dimension; a string
  ``"ring_direct"`` is split on ``_``) -> ``network[i].algorithms``;
  ``ring``, ``direct``, ``halvingDoubling``, ``doubleBinaryTree``; refused
  with the reason (``astra_model.astra_refusal``) where ASTRA-sim itself fails
  (halving-doubling or tree on a dimension whose size is not a power of two);
  a halving-doubling all-to-all is accepted but refused when an all-to-all
  is replayed, as ASTRA-sim exits only then
- known keys that change nothing for single congestion-unaware collectives
  (``scheduling-policy``, ``intra-dimension-scheduling``,
  ``inter-dimension-scheduling``, ``boost-mode`` = 0, tracing and memory
  bookkeeping keys) and keys this importer does not know are reported in
  :attr:`AstraImport.ignored`, never dropped silently.

Network YAML: ``topology`` (``Ring``, ``Switch``, ``FullyConnected``),
``npus_count``, ``bandwidth`` (GB/s as written; the astra model applies
ASTRA-sim's conversion, see ``bandwidth_convention``) and ``latency`` (ns),
one entry per dimension.  Remote memory JSON: only ``NO_MEMORY_EXPANSION``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from tracekit.errors import SpecError, malformed_input
from tracekit.replayer.simulation.astra_values import checked_number
from tracekit.replayer.simulation.spec_toml import MAX_DATASET_SPLITS, MAX_NPUS, MIN_SPEC_POSITIVE

from tracekit.replayer.simulation.astra_model import astra_refusal
from tracekit.replayer.simulation.hardware import (
    ASTRA_BUILDS,
    AstraSettings,
    ComputeSettings,
    DeviceSpec,
    HardwareSpec,
    NetworkDim,
    DEFAULT_ALGORITHMS,
)

_TOPOLOGIES = {"Ring": "ring", "Switch": "switch", "FullyConnected": "fully_connected"}
_ALGORITHMS = {
    "ring": "ring",
    "direct": "direct",
    "halvingDoubling": "halving_doubling",
    "doubleBinaryTree": "double_binary_tree",
}
_IMPLEMENTATION_KEYS = {
    "all-reduce-implementation": "all_reduce",
    "reduce-scatter-implementation": "reduce_scatter",
    "all-gather-implementation": "all_gather",
    "all-to-all-implementation": "all_to_all",
}
_USED_KEYS = {
    "endpoint-delay",
    "preferred-dataset-splits",
    "active-chunks-per-dimension",
    "collective-optimization",
    "local-mem-bw",
    "roofline-enabled",
    "peak-perf",
    *_IMPLEMENTATION_KEYS,
}


@dataclass(frozen=True)
class AstraImport:
    """Result of an import: the spec, and the input keys it did not use.

    Attributes:
        spec: the hardware spec.
        ignored: ``("file: key = value", ...)`` for every key that does not
            affect the spec.
    """

    spec: HardwareSpec
    ignored: tuple[str, ...]


def _load_mapping(path: Path, kind: str) -> dict[str, Any]:
    """The top-level object of an ASTRA-sim config file; ``kind`` is ``"JSON"`` or ``"YAML"``.

    Raises:
        SpecError: unreadable file, invalid JSON/YAML, or not an object/mapping at the top.
    """
    from tracekit.io import read_input_bytes

    parse: Callable[[str], Any]
    if kind == "JSON":
        parse, errors = json.loads, (json.JSONDecodeError, UnicodeDecodeError)
    else:
        import yaml

        parse, errors = _yaml_without_aliases, (yaml.YAMLError, UnicodeDecodeError)
    try:
        data = parse(read_input_bytes(path).decode("utf-8"))
    except OSError as exc:
        raise SpecError(f"cannot read ASTRA-sim config: {exc.strerror or exc}", path=path) from None
    except errors as exc:
        raise SpecError(f"not valid {kind}{_parse_error_where(exc)}", path=path) from None
    except RecursionError:
        raise SpecError(f"not valid {kind}: nested too deeply", path=path) from None
    if not isinstance(data, dict):
        raise SpecError(f"expected a {kind} {'object' if kind == 'JSON' else 'mapping'} at the top level", path=path)
    return data


def _yaml_without_aliases(text: str) -> Any:
    """``yaml.safe_load`` refusing aliases (``*name``): ASTRA-sim's network files use none, and nested aliases
    expand exponentially (a "billion laughs" file of a few hundred bytes grew to 6.4 GB).

    Raises:
        yaml.YAMLError: the text is not YAML, or it uses an alias (with its line and column).
    """
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[no-untyped-def]
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(
                    None, None, "YAML aliases (*name) are not accepted in an ASTRA-sim config", event.start_mark
                )
            return super().compose_node(parent, index)

    return yaml.load(text, Loader=NoAliases)  # noqa: S506 - a SafeLoader subclass


def _parse_error_where(exc: Exception) -> str:
    """`` at line L, column C: problem`` of a JSON or YAML parse error, on one line (1-based, as editors count).

    PyYAML's report spans lines (the problem, the context, the offending line with a caret); its marks
    (``problem_mark``, ``context_mark``: 0-based line and column) say the same in one line.
    """
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        text = f" at line {mark.line + 1}, column {mark.column + 1}: {getattr(exc, 'problem', None) or exc}"
        context, cmark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and cmark is not None:
            text += f" ({context} at line {cmark.line + 1}, column {cmark.column + 1})"
        return text
    if isinstance(exc, json.JSONDecodeError):
        return f" at line {exc.lineno}, column {exc.colno}: {exc.msg}"
    return ": " + " ".join(str(exc).split())


def _load_json(path: Path) -> dict[str, Any]:
    return _load_mapping(path, "JSON")


def _load_yaml(path: Path) -> dict[str, Any]:
    return _load_mapping(path, "YAML")


def _number(
    data: dict,
    key: str,
    path: Path,
    *,
    required: bool = True,
    default: Any = None,
    **bounds: Any,
) -> Any:
    """``data[key]`` checked by :func:`~.astra_values.checked_number` with ``bounds``; ``default`` when absent."""
    if key not in data:
        if required:
            raise SpecError(f"key {key}: is required", path=path)
        return default
    return checked_number(data[key], key, path, **bounds)


def _list(data: dict, key: str, path: Path) -> list:
    if key not in data:
        raise SpecError(f"key {key}: is required", path=path)
    value = data[key]
    if not isinstance(value, list) or not value:
        raise SpecError(f"key {key}: must be a non-empty list, got {value!r}", path=path)
    return value


def _read_network(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    data = _load_yaml(path)
    topo = _list(data, "topology", path)
    npus = _list(data, "npus_count", path)
    bw = _list(data, "bandwidth", path)
    lat = _list(data, "latency", path)
    if not len(topo) == len(npus) == len(bw) == len(lat):
        raise SpecError(
            f"keys topology, npus_count, bandwidth, latency: must have one entry per dimension; "
            f"got {len(topo)}, {len(npus)}, {len(bw)}, {len(lat)}",
            path=path,
        )
    dims = []
    for i, (t, n, b, l) in enumerate(zip(topo, npus, bw, lat)):
        if t not in _TOPOLOGIES:
            raise SpecError(
                f"key topology[{i}]: {t!r} is not supported; expected one of {', '.join(_TOPOLOGIES)}", path=path
            )
        checked_number(n, f"npus_count[{i}]", path, integer=True, least=1, most=MAX_NPUS)
        checked_number(b, f"bandwidth[{i}]", path, least=MIN_SPEC_POSITIVE, unit="GB/s")
        checked_number(l, f"latency[{i}]", path, unit="ns")
        dims.append({"topology": _TOPOLOGIES[t], "size": n, "bandwidth_gbps": float(b), "latency_ns": float(l)})
    ignored = [
        f"{path}: {k} = {data[k]!r}" for k in data if k not in ("topology", "npus_count", "bandwidth", "latency")
    ]
    return dims, ignored


def _implementations(data: dict, key: str, n_dims: int, path: Path) -> list[str]:
    value = data[key]
    if isinstance(value, str):
        value = value.split("_")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"key {key}: must be a list of algorithm names, got {value!r}", path=path)
    if len(value) != n_dims:
        raise SpecError(
            f"key {key}: names {len(value)} algorithm(s) but the network has {n_dims} dimension(s)", path=path
        )
    out = []
    for name in value:
        if name not in _ALGORITHMS:
            raise SpecError(
                f"key {key}: algorithm {name!r} is not supported; expected one of {', '.join(_ALGORITHMS)}", path=path
            )
        out.append(_ALGORITHMS[name])
    return out


def import_astra_config(
    system: str | os.PathLike[str],
    network: str | os.PathLike[str],
    remote_memory: str | os.PathLike[str] | None = None,
    *,
    name: str | None = None,
    bandwidth_convention: str = "gib",
    build: str = "518bd51",
    network_backend: str = "congestion_unaware",
) -> AstraImport:
    """Read an ASTRA-sim config trio into a spec using the ASTRA-sim-compatible models.

    Args:
        system: system JSON (``inputs/system/*.json``).
        network: analytical network YAML (``inputs/network/analytical/*.yml``).
        remote_memory: optional remote memory JSON; only ``NO_MEMORY_EXPANSION``.
        name: spec name (default: ``astra:<system stem>+<network stem>``).
        bandwidth_convention: ``gib`` (ASTRA-sim's analytical backend as
            measured in docs/design.md: link GB/s x 2^30 / 1e9 bytes/ns) or ``si``.
        build: the ASTRA-sim build the model follows where builds differ (``[astra] build``: ``518bd51``, the
            default, or ``c459ab6``).
        network_backend: ``congestion_unaware`` or ``congestion_aware`` (which ASTRA-sim analytical
            binary the spec follows; ``astra.network_backend``).

    Returns:
        :class:`AstraImport` with the spec (``fit_to_world_size`` false: the
        network has exactly ``prod(npus_count)`` ranks) and the ignored keys.

    Raises:
        SpecError: naming the file and key of a missing, mistyped or unsupported value.
    """
    with malformed_input("ASTRA-sim config", f"{system} + {network}", SpecError):
        imported = _import_astra_config(Path(system), Path(network), remote_memory, name, bandwidth_convention)
    if build not in ASTRA_BUILDS:
        raise SpecError(f"unknown ASTRA-sim build {build!r}; choose one of {', '.join(ASTRA_BUILDS)}")
    astra = replace(imported.spec.astra, build=build) if imported.spec.astra is not None else None
    imported = AstraImport(replace(imported.spec, astra=astra), imported.ignored)
    if network_backend == "congestion_unaware":
        return imported
    return _with_backend(imported, network_backend, Path(network))


def _with_backend(imported: AstraImport, network_backend: str, network: Path) -> AstraImport:
    """``imported`` with ``astra.network_backend`` set (checked as the spec TOML checks it).

    Raises:
        SpecError: an unknown backend, or a network the congestion-aware backend refuses.
    """
    from tracekit.replayer.simulation.astra_congestion import NETWORK_BACKENDS, aware_refusal

    spec = imported.spec
    if network_backend not in NETWORK_BACKENDS:
        raise SpecError(f"network backend must be one of {', '.join(NETWORK_BACKENDS)}, got {network_backend!r}")
    reason = aware_refusal(spec)
    if reason:
        raise SpecError(f"network backend congestion_aware: {reason}", path=network)
    assert spec.astra is not None  # an imported spec always has its [astra] table
    astra = replace(spec.astra, network_backend=network_backend)
    return AstraImport(replace(spec, astra=astra), imported.ignored)


def _collective_algorithms(
    sys_data: dict[str, Any], dims: list[dict[str, Any]], sys_path: Path
) -> list[dict[str, str]]:
    """Per network dimension, collective -> algorithm from the ``*-implementation`` keys (defaults elsewhere).

    Raises:
        SpecError: an algorithm tracekit cannot model on its dimension, or a custom (Chakra ET) implementation.
    """
    n_dims = len(dims)
    algorithms = [dict(DEFAULT_ALGORITHMS) for _ in dims]
    for key, coll in _IMPLEMENTATION_KEYS.items():
        if key in sys_data:
            for i, alg in enumerate(_implementations(sys_data, key, n_dims, sys_path)):
                reason = astra_refusal(coll, alg, n_dims, dims[i]["size"])
                if reason and not (coll == "all_to_all" and alg == "halving_doubling"):
                    raise SpecError(
                        f"key {key}: dimension {i} ({dims[i]['size']} NPUs): {reason}; tracekit cannot model it",
                        path=sys_path,
                    )
                algorithms[i][coll] = alg

    for key in sorted(k for k in sys_data if k.endswith("-implementation-custom")):
        raise SpecError(
            f"key {key}: custom collective algorithms (Chakra ET files) are not modelled; tracekit cannot replay them",
            path=sys_path,
        )
    return algorithms


def _refuse_unmodelled(sys_data: dict[str, Any], sys_path: Path) -> None:
    """Raise SpecError for ``model-shared-bus`` or ``replay-only`` set to 1 (ASTRA-sim modes not modelled)."""
    if sys_data.get("model-shared-bus", 0) not in (0, False):
        raise SpecError(
            f"key model-shared-bus: only 0 is modelled (1 times every memory hand-off with ASTRA-sim's "
            f"LogGP bus model), got {sys_data['model-shared-bus']!r}",
            path=sys_path,
        )
    if sys_data.get("replay-only", 0) not in (0, False):
        raise SpecError(
            f"key replay-only: only 0 is modelled (1 replays every node with its recorded duration, "
            f"1 ns when zero, instead of simulating it), got {sys_data['replay-only']!r}",
            path=sys_path,
        )


def _remote_memory_ignored(mem_path: Path) -> list[str]:
    """The keys of an ASTRA-sim remote-memory config that are ignored (``path: key = value`` lines).

    Raises:
        SpecError: its ``memory-type`` is not ``NO_MEMORY_EXPANSION``, or it is not a JSON object.
    """
    mem = _load_json(mem_path)
    kind = mem.get("memory-type")
    if kind != "NO_MEMORY_EXPANSION":
        raise SpecError(f"key memory-type: only NO_MEMORY_EXPANSION is supported, got {kind!r}", path=mem_path)
    return [f"{mem_path}: {k} = {v!r}" for k, v in mem.items() if k != "memory-type"]


def _import_astra_config(
    sys_path: Path,
    net_path: Path,
    remote_memory: str | os.PathLike[str] | None,
    name: str | None,
    bandwidth_convention: str,
) -> AstraImport:
    dims, ignored = _read_network(net_path)
    sys_data = _load_json(sys_path)
    algorithms = _collective_algorithms(sys_data, dims, sys_path)
    _refuse_unmodelled(sys_data, sys_path)
    optimization = sys_data.get("collective-optimization", "localBWAware")
    if optimization not in ("localBWAware", "baseline"):
        raise SpecError(
            f"key collective-optimization: must be localBWAware or baseline, got {optimization!r}", path=sys_path
        )
    if sys_data.get("boost-mode", 0) not in (0, False):
        raise SpecError(f"key boost-mode: only 0 is supported, got {sys_data['boost-mode']!r}", path=sys_path)
    roofline = _number(sys_data, "roofline-enabled", sys_path, integer=True, most=1, required=False, default=0)
    peak_tflops = _number(
        sys_data, "peak-perf", sys_path, least=MIN_SPEC_POSITIVE, zero_ok=True, unit="TFLOP/s", required=False
    )
    if roofline and not peak_tflops:
        raise SpecError("key peak-perf: a positive value is required when roofline-enabled is 1", path=sys_path)
    local_mem_bw = _number(sys_data, "local-mem-bw", sys_path, least=MIN_SPEC_POSITIVE, unit="GB/s")
    chunks: dict[str, Any] = {"integer": True, "least": 1, "most": MAX_DATASET_SPLITS, "required": False, "default": 1}
    astra = AstraSettings(
        endpoint_delay_ns=_number(sys_data, "endpoint-delay", sys_path, integer=True, unit="ns"),
        local_mem_bw_gbps=float(local_mem_bw),
        preferred_dataset_splits=_number(sys_data, "preferred-dataset-splits", sys_path, **chunks),
        active_chunks_per_dimension=_number(sys_data, "active-chunks-per-dimension", sys_path, **chunks),
        collective_optimization=optimization,
        bandwidth_convention=bandwidth_convention,
        roofline_enabled=bool(roofline),
        peak_perf_tflops=float(peak_tflops) if peak_tflops else None,
    )
    ignored += [f"{sys_path}: {k} = {v!r}" for k, v in sys_data.items() if k not in _USED_KEYS and k != "boost-mode"]

    if remote_memory is not None:
        ignored += _remote_memory_ignored(Path(remote_memory))

    peaks = (("fp32", float(peak_tflops) * 1e12),) if peak_tflops else ()
    device = DeviceSpec(
        name="astra-sim NPU",
        peak_flops_per_s=peaks,
        default_dtype="fp32" if peaks else None,
        mem_bandwidth_gbps=float(local_mem_bw),
    )
    network = tuple(
        NetworkDim(name=f"dim{i}", algorithms=tuple(sorted(algorithms[i].items())), **d) for i, d in enumerate(dims)
    )
    spec = HardwareSpec(
        name=name or f"astra:{sys_path.stem}+{net_path.stem}",
        description=f"imported from ASTRA-sim config {sys_path.name} + {net_path.name}",
        device=device,
        network=network,
        compute=ComputeSettings(mode="astra"),
        collective_model="astra",
        astra=astra,
        fit_to_world_size=False,
    )
    return AstraImport(spec, tuple(ignored))
