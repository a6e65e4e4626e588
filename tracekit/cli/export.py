"""``tracekit export astra``: a trace set plus the ASTRA-sim config files of a spec, ready for the binary."""

from __future__ import annotations

import sys

import click

from tracekit.cli._common import CONTEXT_SETTINGS, SubcommandGroup, err_console, hold_output_prefix, state


@click.group(cls=SubcommandGroup, context_settings=CONTEXT_SETTINGS)
def export() -> None:
    """Write a trace set in the form another tool runs as it is.

    \b
    Example:
      tracekit export astra out/job -o astra_run --hw ring.toml
    """


@export.command("astra", context_settings=CONTEXT_SETTINGS)
@click.argument("traces", metavar="TRACES")
@click.option(
    "-o",
    "--output",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder for the traces, system.json, network.yml, memory.json, the comm groups and run.sh.",
)
@click.option(
    "--hw",
    "hw",
    required=True,
    metavar="SPEC",
    help="Hardware spec with an [astra] table (e.g. from `tracekit hw import-astra`).",
)
@click.option("--name", default="workload", show_default=True, help="File prefix of the traces in the folder.")
def astra(traces: str, out_dir: str, hw: str, name: str) -> None:
    """Write TRACES and the ASTRA-sim config of SPEC so AstraSim_Analytical_* runs them directly.

    The folder this writes is what runs in ASTRA-sim as written; other sets
    tracekit writes (converted captures, generated jobs) load there but may
    not finish.  The inverse of `tracekit hw import-astra`: importing the
    written system.json and network.yml gives the spec back.  Collectives ASTRA-sim cannot issue
    (reduce, gather, scatter, barrier) are written as broadcasts, which ASTRA-sim
    replays for their recorded duration as tracekit's ASTRA-compatible model does.
    Prints the command line that runs the export.

    \b
    Example:
      tracekit export astra out/job -o astra_run --hw ring.toml
      sh astra_run/run.sh
    """
    import os

    hold_output_prefix(os.path.join(out_dir, name))
    from tracekit.io import read_traceset
    from tracekit.replayer.simulation.astra_export import export_astra
    from tracekit.replayer.simulation.hardware import load_spec

    spec = load_spec(hw)
    traceset = read_traceset(traces)
    result = export_astra(traceset, spec, out_dir, name=name)
    if not state().quiet:
        err_console().print(
            f"wrote {len(traceset)} rank file(s), {result.system.name}, {result.network.name}, "
            f"{result.memory.name} and {result.comm_groups.name} to {out_dir}; run with:",
            markup=False,
            highlight=False,
        )
    sys.stdout.write(" ".join(result.argv) + "\n")


COMMANDS = [export]
