"""Writing a hardware spec as the TOML document :mod:`.spec_toml` reads back (split from it for size)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit.replayer.simulation.nccl_constants import NcclConstants

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.hardware import HardwareSpec


def spec_to_dict(spec: HardwareSpec) -> dict[str, Any]:
    """The spec as the TOML document :func:`spec_from_dict` reads back (units in key names: GB/s, ns, us, FLOP/s).

    Round trip: ``spec_from_dict(spec_to_dict(s)) == s`` (``path`` is not written).
    """
    d = spec.device
    out: dict[str, Any] = {"name": spec.name}
    if spec.description:
        out["description"] = spec.description
    out["fit_to_world_size"] = spec.fit_to_world_size
    out["device"] = {"name": d.name, "peak_flops_per_s": dict(d.peak_flops_per_s)}
    if d.default_dtype is not None:
        out["device"]["default_dtype"] = d.default_dtype
    out["device"].update(
        mem_bandwidth_gbps=d.mem_bandwidth_gbps,
        compute_efficiency=d.compute_efficiency,
        memory_efficiency=d.memory_efficiency,
    )
    compute: dict[str, Any] = {"mode": spec.compute.mode, "duration_scale": spec.compute.duration_scale}
    if spec.compute.dtype is not None:
        compute["dtype"] = spec.compute.dtype
    if spec.compute.interference:
        compute["interference"] = True
    out["compute"] = compute
    out["collectives"] = {"model": spec.collective_model}
    if spec.astra is not None:
        a = spec.astra
        astra: dict[str, Any] = {
            "endpoint_delay_ns": a.endpoint_delay_ns,
            "local_mem_bw_gbps": a.local_mem_bw_gbps,
            "preferred_dataset_splits": a.preferred_dataset_splits,
            "active_chunks_per_dimension": a.active_chunks_per_dimension,
            "collective_optimization": a.collective_optimization,
            "bandwidth_convention": a.bandwidth_convention,
            "roofline_enabled": a.roofline_enabled,
            "build": a.build,
        }
        optional = {"peak_perf_tflops": a.peak_perf_tflops, "network_backend": a.network_backend}
        astra.update({k: v for k, v in optional.items() if v not in (None, "congestion_unaware")})  # defaults
        out["astra"] = astra
    if spec.nccl != NcclConstants():
        n = spec.nccl
        out["nccl"] = {
            "algorithms": list(n.algorithms),
            "protocols": list(n.protocols),
            "base_latency_us": {a: list(v) for a, v in n.base_latency_us},
            "hw_latency_us": {link: {a: list(v) for a, v in rows} for link, rows in n.hw_latency_us},
        }
        for key in NcclConstants.__dataclass_fields__:
            if key not in out["nccl"]:
                value = getattr(n, key)
                out["nccl"][key] = list(value) if isinstance(value, tuple) else value
    dims = []
    for dim in spec.network:
        row: dict[str, Any] = {
            "name": dim.name,
            "topology": dim.topology,
            "size": dim.size,
            "bandwidth_gbps": dim.bandwidth_gbps,
            "latency_ns": dim.latency_ns,
        }
        if dim.nccl_link is not None:
            row["nccl_link"] = dim.nccl_link
        if dim.fabric is not None:
            row.update(fabric=dim.fabric, nodes_per_leaf=dim.nodes_per_leaf, oversubscription=dim.oversubscription)
        row["algorithms"] = dict(dim.algorithms)
        dims.append(row)
    out["network"] = dims
    return out
