"""``tracekit sweep``: replay one trace set on a grid of hardware variants; one table (CSV, JSON) and a plot."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import click

from tracekit.cli._common import CONTEXT_SETTINGS, err_console, out_console, progress_callback, state
from tracekit.cli._options import (
    FACTOR,
    compute_options,
    emit_json,
    check_address,
    executor_options,
    json_option,
    resolve_executor,
    traces_argument,
)

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.orchestration.sweep import SweepResult


@click.command("sweep", context_settings=CONTEXT_SETTINGS)
@traces_argument()
@click.option(
    "--hw",
    "specs",
    multiple=True,
    required=True,
    metavar="SPEC",
    help="Hardware spec: preset name or TOML file; repeat to sweep over specs.",
)
@click.option(
    "--vary",
    "varies",
    multiple=True,
    metavar="KEY=V1,V2,...",
    help="A swept spec key (network[1].bandwidth_gbps, compute.duration_scale, collectives.model, "
    "options.collective_model, compute=measured,projected, ...); repeat for a grid.",
)
@click.option(
    "--collective-model",
    type=click.Choice(["alpha_beta", "astra", "nccl", "measured"]),
    default=None,
    help="Collective model for every point (default: each spec's).",
)
@click.option(
    "--compute-scale",
    "--scale-compute",
    "compute_scale",
    type=FACTOR,
    default=None,
    help="Factor on measured compute durations (same as transform --scale-compute).",
)
@click.option(
    "--streams",
    type=click.Choice(["trace", "single"]),
    default="trace",
    show_default=True,
    help="Streams from the trace's attributes, or one of each per rank.",
)
@click.option("--no-check", is_flag=True, help="Skip the up-front replay checks.")
@compute_options
@executor_options
@click.option("--no-plot", is_flag=True, help="Write the CSV and JSON only.")
@click.option("--title", default=None, help="Title of the sweep.html page (default: the trace set and ranks).")
@click.option(
    "-o",
    "--output",
    "out_dir",
    required=True,
    metavar="DIR",
    help="Output directory: sweep.csv, sweep.json, sweep.html.",
)
@json_option()
def sweep(
    traces: str | tuple[str, ...],
    specs: tuple[str, ...],
    varies: tuple[str, ...],
    collective_model: str | None,
    compute_scale: float | None,
    streams: str,
    no_check: bool,
    compute: str,
    capture_device: str | None,
    executor: str,
    workers: int | None,
    address: str | None,
    no_plot: bool,
    title: str | None,
    out_dir: str,
    as_json: bool,
) -> None:
    """Replay TRACES (a prefix, quoted glob, directory or trace files) on every point of a hardware grid.

    The grid is every --hw spec times the product of the --vary lists.  Keys
    are those of the spec's TOML (see `tracekit hw show SPEC --toml`), with
    network[i] indexing the dimensions after the spec is fitted to the trace
    set's ranks.  Each point replays in a worker; the table (one row per
    point: parameters, iteration time, the slowest rank's breakdown) goes to
    stdout and to DIR/sweep.csv and DIR/sweep.json, the plot to DIR/sweep.html.
    Each point is timed as `tracekit replay --hw SPEC` times it (same --compute
    rule: by default compute is projected from the capture device to the
    point's device); the lines under the table say how.

    \b
    Example:
      tracekit sweep out/gpt3 --hw dgx-h100 --vary 'network[1].bandwidth_gbps=25,50,100' \\
          --vary compute.duration_scale=0.5,1 -o sweep_out
      tracekit sweep out/gpt3 --hw dgx-a100 --hw dgx-h100 --executor ray --address auto -o sweep_out
    """
    from tracekit.cli._outdir import check_output_folder
    from tracekit.replayer import ReplayOptions
    from tracekit.replayer.orchestration.sweep import parse_vary, run_sweep, write_sweep

    check_output_folder(out_dir)

    check_address(executor, address)
    axes = [parse_vary(v) for v in varies]
    options = ReplayOptions(
        collective_model=collective_model, compute_scale=compute_scale, streams=streams, check=not no_check
    )
    points = len(specs) * math.prod(len(a.values) for a in axes)
    executor = resolve_executor(executor, points, workers)
    with progress_callback("replaying sweep points") as callback:
        result = run_sweep(
            traces,
            list(specs),
            axes,
            options=options,
            compute=compute,
            capture_device=capture_device,
            executor=executor,
            max_workers=workers,
            ray_address=address,
            progress=callback,
        )
    paths = write_sweep(result, out_dir, plot=not no_plot, title=title)
    if as_json:
        emit_json(result.to_dict())
    else:
        _print_table(result)
    if not state().quiet:
        err_console().print(
            f"{len(result.rows)} point(s) on {result.world_size} ranks ({executor}); wrote "
            + ", ".join(str(p) for p in paths.values()),
            markup=False,
            highlight=False,
            soft_wrap=True,  # a 'wrote' line stays one line (docs/cli.md), its paths whole
        )


def _print_table(result: SweepResult) -> None:
    from rich.table import Table

    longest = max((r.iteration_time_ns for r in result.rows), default=0.0)
    unit, per = next(((u, d) for u, d in (("s", 1e9), ("ms", 1e6), ("us", 1e3)) if longest >= d), ("ns", 1.0))
    table = Table(title=f"sweep of {result.source} ({result.world_size} ranks), times in {unit}")
    for key in ("#", *result.parameters, "iteration", "compute", "exposed comm", "wait", "slowest rank"):
        table.add_column(key, justify="right")
    for row in result.rows:
        table.add_row(
            str(row.index),
            *(f"{v:g}" if isinstance(v, float) else str(v) for _, v in row.params),
            *(f"{t / per:.4f}" for t in (row.iteration_time_ns, row.compute_ns, row.exposed_comm_ns, row.comm_wait_ns)),
            str(row.slowest_rank),
        )
    out_console().print(table)
    for line in timing_lines(result.rows):
        out_console().print(line, markup=False, highlight=False, soft_wrap=True)
    for note in result.notes:
        out_console().print(note, markup=False, highlight=False, soft_wrap=True)


def timing_lines(rows) -> list[str]:  # type: ignore[no-untyped-def]
    """How the points were timed, one line per distinct (collective model, compute) pair with its points."""
    groups: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        groups.setdefault((row.collective_model, row.compute), []).append(str(row.index))
    if len(groups) == 1:
        (model, compute), _ = next(iter(groups.items()))
        return [f"timed: collective model {model}, compute {compute} (every point)"]
    return [
        f"timed: collective model {m}, compute {c} (point{'s' if len(p) > 1 else ''} {', '.join(p)})"
        for (m, c), p in groups.items()
    ]


COMMANDS = [sweep]
