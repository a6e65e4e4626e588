"""Hardware-spec commands: ``tracekit hw list | show | import-astra``."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from tracekit.cli._common import CONTEXT_SETTINGS, SubcommandGroup, err_console, out_console
from tracekit.cli._options import emit_json, json_option

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.hardware import HardwareSpec


@click.group(cls=SubcommandGroup, context_settings=CONTEXT_SETTINGS)
def hw() -> None:
    """Hardware specs: built-in presets, their contents, and ASTRA-sim config import.

    \b
    Example:
      tracekit hw list
      tracekit hw devices
      tracekit hw show dgx-h100
      tracekit hw import-astra --system sys.json --network net.yml -o spec.toml
    """


@hw.command("list", context_settings=CONTEXT_SETTINGS)
@json_option()
def list_cmd(as_json: bool) -> None:
    """List the built-in hardware presets (name, ranks, network, device).

    \b
    Example:
      tracekit hw list
    """
    from rich.table import Table

    from tracekit.replayer.simulation.specs import list_presets, load_spec

    if as_json:
        emit_json(
            [
                {
                    "name": name,
                    "world_size": (s := load_spec(name)).world_size,
                    "device": s.device.name,
                    "collective_model": s.collective_model,
                    "network": [
                        {"name": d.name, "size": d.size, "bandwidth_gbps": d.bandwidth_gbps, "latency_ns": d.latency_ns}
                        for d in s.network
                    ],
                }
                for name in list_presets()
            ]
        )
        return
    table = Table(title="hardware presets")
    for column in ("name", "ranks", "network (per rank)", "device", "model"):
        table.add_column(column)
    for name in list_presets():
        spec = load_spec(name)
        table.add_row(name, str(spec.world_size), _network_line(spec), spec.device.name, spec.collective_model)
    out_console().print(table)


@hw.command("devices", context_settings=CONTEXT_SETTINGS)
def devices_cmd() -> None:
    """List the device presets compute projection uses (tracekit/costs/devices.toml), with their sources.

    \b
    Example:
      tracekit hw devices
      tracekit replay out/job --hw dgx-h100 --capture-device a100-80gb
    """
    from rich.table import Table

    from tracekit.costs.devices import device_presets

    table = Table(title="device presets (peaks dense; efficiency maxima for GEMM / attention / memory)")
    for column in ("key", "name", "bf16 or fp16 TFLOP/s", "fp32 TFLOP/s", "memory GB/s", "units", "max eff", "source"):
        table.add_column(column, overflow="fold")
    for key, dev in device_presets().items():
        peaks = dict(dev.peak_flops_per_s)
        half = peaks.get("bf16", peaks.get("fp16"))
        table.add_row(
            key,
            dev.name,
            f"{half / 1e12:,.1f}" if half else "-",
            f"{peaks.get('fp32', 0) / 1e12:,.1f}",
            f"{dev.mem_bandwidth_bytes_per_s / 1e9:,.0f}",
            str(dev.compute_units),
            f"{dev.gemm_max_efficiency:.2f} / {dev.attention_max_efficiency:.2f} / {dev.memory_max_efficiency:.2f}",
            dev.source,
        )
    out_console().print(table)


def _network_line(spec: HardwareSpec) -> str:
    return ", ".join(f"{d.size} {d.name} {d.bandwidth_gbps:g} GB/s {d.latency_ns:g} ns" for d in spec.network)


@hw.command("show", context_settings=CONTEXT_SETTINGS)
@click.argument("name")
@click.option("--toml", "as_toml", is_flag=True, help="Print the spec as TOML (all defaults filled in).")
@json_option()
def show(name: str, as_toml: bool, as_json: bool) -> None:
    """Show a hardware spec: a preset NAME or a TOML file path.

    \b
    Example:
      tracekit hw show dgx-a100
      tracekit hw show my_cluster.toml --toml
    """
    from tracekit.replayer.simulation.specs import load_spec

    spec = load_spec(name)
    if as_json:
        emit_json(spec.to_dict())
        return
    if as_toml:
        sys.stdout.write(spec.to_toml())
        return
    from rich.table import Table
    from rich.text import Text

    console = out_console()
    console.print(Text.assemble((spec.name, "bold"), f": {spec.description}"))
    d = spec.device
    peaks = ", ".join(f"{k} {v / 1e12:g}" for k, v in d.peak_flops_per_s) or "none"
    console.print(
        f"device: {d.name}; peak TFLOP/s: {peaks}; memory {d.mem_bandwidth_gbps:g} GB/s; "
        f"efficiency compute {d.compute_efficiency:g}, memory {d.memory_efficiency:g}"
    )
    console.print(
        f"ranks: {spec.world_size} (fit to trace set: {'yes' if spec.fit_to_world_size else 'no'}); "
        f"collective model: {spec.collective_model}; compute: {spec.compute.mode} "
        f"(x{spec.compute.duration_scale:g})"
    )
    table = Table(title="network (dimension 0 = innermost)")
    for column in ("dim", "name", "topology", "size", "GB/s per rank", "latency ns", "algorithms"):
        table.add_column(column)
    for i, dim in enumerate(spec.network):
        algs = ", ".join(f"{_SHORT[k]} {v}" for k, v in dim.algorithms)
        table.add_row(
            str(i), dim.name, dim.topology, str(dim.size), f"{dim.bandwidth_gbps:g}", f"{dim.latency_ns:g}", algs
        )
    console.print(table)
    if spec.astra is not None:
        a = spec.astra
        console.print(
            f"astra: endpoint-delay {a.endpoint_delay_ns} ns, local-mem-bw {a.local_mem_bw_gbps:g} GB/s, "
            f"splits {a.preferred_dataset_splits}, active chunks {a.active_chunks_per_dimension}, "
            f"{a.collective_optimization}, bandwidth convention {a.bandwidth_convention}, network {a.network_backend}"
        )


_SHORT = {
    "all_reduce": "ar",
    "reduce_scatter": "rs",
    "all_gather": "ag",
    "all_to_all": "a2a",
    "broadcast": "bcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
}


@hw.command("import-astra", context_settings=CONTEXT_SETTINGS)
@click.option(
    "--system",
    "system",
    required=True,
    type=click.Path(dir_okay=False),
    help="ASTRA-sim system JSON (inputs/system/*.json).",
)
@click.option(
    "--network",
    "network",
    required=True,
    type=click.Path(dir_okay=False),
    help="ASTRA-sim analytical network YAML (inputs/network/analytical/*.yml).",
)
@click.option(
    "--remote-memory",
    "remote_memory",
    type=click.Path(dir_okay=False),
    default=None,
    help="Optional ASTRA-sim remote memory JSON (NO_MEMORY_EXPANSION only).",
)
@click.option("--name", default=None, help="Spec name (default: astra:<system>+<network>).")
@click.option(
    "--bandwidth-convention",
    type=click.Choice(["gib", "si"]),
    default="gib",
    show_default=True,
    help="How ASTRA-sim reads link GB/s: gib = x 2^30/1e9 bytes/ns (the analytical backend "
    "measured in docs/design.md), si = 1 GB/s = 1 byte/ns.",
)
@click.option(
    "--build",
    type=click.Choice(["518bd51", "c459ab6"]),
    default="518bd51",
    show_default=True,
    help="ASTRA-sim build the replay follows where builds differ (sub-world groups, zero-duration compute): "
    "518bd51 = master, c459ab6 = 2025-08.",
)
@click.option(
    "--network-backend",
    type=click.Choice(["congestion_unaware", "congestion_aware"]),
    default="congestion_unaware",
    show_default=True,
    help="Which ASTRA-sim analytical network the spec follows: congestion_unaware (one closed-form time per "
    "message) or congestion_aware (messages hop by hop over FIFO links; 1-D networks only).",
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), default=None, help="Write the spec TOML here (default: stdout)."
)
@json_option()
def import_astra(
    system: str,
    network: str,
    remote_memory: str | None,
    name: str | None,
    bandwidth_convention: str,
    build: str,
    network_backend: str,
    output: str | None,
    as_json: bool,
) -> None:
    """Turn an ASTRA-sim config (system JSON + network YAML) into a hardware spec TOML.

    The spec uses the ASTRA-sim-compatible collective model and compute rules.
    Input keys that do not affect the spec are listed on stderr.

    \b
    Example:
      tracekit hw import-astra --system Ring.json --network Ring.yml -o ring.toml
    """
    from tracekit.io import atomic_output
    from tracekit.replayer.simulation.astra_config import import_astra_config

    result = import_astra_config(
        system,
        network,
        remote_memory,
        name=name,
        bandwidth_convention=bandwidth_convention,
        build=build,
        network_backend=network_backend,
    )
    text = result.spec.to_toml()
    if as_json:
        emit_json({"spec": result.spec.to_dict(), "output": output, "ignored": list(result.ignored)})
        if output is None:
            return
    if output is None:
        sys.stdout.write(text)
    else:
        with atomic_output(output, "w") as fh:
            fh.write(text)
    console = err_console()
    for line in result.ignored:
        console.print(f"ignored: {line}", markup=False, highlight=False)
    if output is not None:
        console.print(f"wrote {output} ({result.spec.world_size} ranks)", markup=False, highlight=False)


COMMANDS = [hw]
