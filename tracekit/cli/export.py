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
    help="Hardware spec: one with an [astra] table (e.g. from `tracekit hw import-astra`), or a preset or TOML "
    "whose network is turned into ASTRA-sim's (what ASTRA-sim cannot express is listed on stderr).",
)
@click.option("--name", default="workload", show_default=True, help="File prefix of the traces in the folder.")
@click.option(
    "--target",
    type=click.Choice(["518bd51", "c459ab6"]),
    default=None,
    help="ASTRA-sim build to write for: 518bd51 (master; no METADATA nodes, groups only in the comm-group file, "
    "no empty rank file) or c459ab6 (keeps the process_group:init nodes).  Default: the spec's [astra] build, "
    "else 518bd51.",
)
def astra(traces: str, out_dir: str, hw: str, name: str, target: str | None) -> None:
    """Write TRACES and the ASTRA-sim config of SPEC so AstraSim_Analytical_* runs them directly.

    The folder this writes is what runs in ASTRA-sim as written; other sets
    tracekit writes (converted captures, generated jobs) load there but may
    not finish.  The inverse of `tracekit hw import-astra`: importing the
    written system.json and network.yml gives the spec back.  Collectives ASTRA-sim cannot issue
    (reduce, gather, scatter, barrier) are written as broadcasts, which ASTRA-sim
    replays for their recorded duration as tracekit's ASTRA-compatible model does.
    For ASTRA-sim master (518bd51, the default) the traces carry no METADATA node
    and communicator groups are declared in <name>.comm_groups.json only.
    Prints the command line that runs the export.

    \b
    Example:
      tracekit export astra out/job -o astra_run --hw ring.toml
      tracekit export astra out/job -o astra_run --hw dgx-h100
      sh astra_run/run.sh
    """
    import os

    from tracekit.cli._outdir import check_output_folder

    if not name or name in (".", "..") or "/" in name or os.sep in name or name.startswith("."):
        raise click.UsageError(
            f"--name {name!r}: must be a plain file name (not empty, no '/', not starting with '.') so the traces "
            "land in the output folder as visible files"
        )
    check_output_folder(out_dir)
    hold_output_prefix(os.path.join(out_dir, name))
    from tracekit.io import read_traceset
    from tracekit.replayer.simulation.astra_export import export_astra
    from tracekit.replayer.simulation.specs import load_spec

    from tracekit.sets.classset import find_class_set
    from tracekit.sets.classstream import StreamedClassSet

    spec = load_spec(hw)
    classes = find_class_set(traces)  # a class set: one member's trace at a time, not every rank up front
    traceset = StreamedClassSet(classes) if classes is not None else read_traceset(traces)
    from tracekit.cli._common import progress

    bar = lambda items, total: progress(items, "writing ASTRA-sim rank files", total=total)  # noqa: E731
    result = export_astra(traceset, spec, out_dir, name=name, target=target, progress=bar)
    console = err_console()
    for note in result.notes:  # what the spec says that ASTRA-sim cannot: said even with -q
        console.print(f"not expressible in ASTRA-sim: {note}", markup=False, highlight=False, soft_wrap=True)
    if not state().quiet:
        changes = f"{result.metadata_removed} METADATA node(s) removed" if result.metadata_removed else ""
        if result.idle_ranks:
            changes += (", " if changes else "") + f"idle rank(s) {list(result.idle_ranks)[:8]} given one 0-us node"
        console.print(
            f"wrote {len(traceset)} rank file(s), {result.system.name}, {result.network.name}, "
            f"{result.memory.name} and {result.comm_groups.name} to {out_dir} for ASTRA-sim {result.target}"
            f"{' (' + changes + ')' if changes else ''}; run with:",
            markup=False,
            highlight=False,
        )
    sys.stdout.write(" ".join(result.argv) + "\n")


COMMANDS = [export]
