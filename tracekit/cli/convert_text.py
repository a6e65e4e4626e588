"""``tracekit convert text``: ASTRA-sim text workloads to per-rank Chakra traces."""

from __future__ import annotations

import click

from tracekit.cli._common import CONTEXT_SETTINGS, err_console, hold_output_prefix, path_span, state
from tracekit.cli._options import COUNT, emit_json, json_option


@click.command("text", context_settings=CONTEXT_SETTINGS)
@click.argument("workload", metavar="FILE")
@click.option("--ranks", "num_ranks", type=COUNT, required=True, help="Number of ranks (NPUs) to write.")
@click.option(
    "-o", "--output", "prefix", required=True, metavar="PREFIX", help="Output prefix: writes PREFIX.<rank>.et."
)
@click.option("--passes", type=COUNT, default=1, show_default=True, help="Training passes (iterations) per rank.")
@click.option(
    "--tp",
    type=COUNT,
    default=None,
    help="Model-parallel group size for HYBRID_DATA_MODEL / HYBRID_MODEL_DATA "
    "(HYBRID_TRANSFORMER reads it from the file).",
)
@click.option(
    "--time-unit",
    type=click.Choice(["us", "ns"]),
    default="us",
    show_default=True,
    help="Unit of the file's compute times: us = as Chakra's text converter stores them and ASTRA-sim 2 "
    "replays them; ns = ASTRA-sim 1.0 cycles.",
)
@json_option()
def text(
    workload: str, num_ranks: int, prefix: str, passes: int, tp: int | None, time_unit: str, as_json: bool
) -> None:
    """Convert an ASTRA-sim text workload (DATA, MODEL, HYBRID_*, MICRO) into Chakra traces.

    \b
    Example:
      tracekit convert text Resnet50_DataParallel.txt --ranks 8 -o out/resnet
      tracekit convert text MLP_HybridParallel_Data_Model.txt --ranks 8 --tp 2 -o out/mlp
    """
    hold_output_prefix(prefix)
    from tracekit.converters.text_workload import convert_text_workload
    from tracekit.io import write_traceset

    traceset = convert_text_workload(workload, num_ranks, passes=passes, tp=tp, time_unit=time_unit)
    paths = write_traceset(traceset, prefix)
    if as_json:
        emit_json(
            {
                "prefix": prefix,
                "files": [str(p) for p in paths],
                "nodes_per_rank": {r: len(traceset[r]) for r in traceset.ranks},
            }
        )
    elif not state().quiet:
        nodes = len(traceset[traceset.ranks[0]])
        err_console().print(
            f"wrote {len(paths)} trace(s), {nodes:,} nodes per rank: {path_span(paths)}", markup=False, highlight=False
        )


COMMANDS = [text]
