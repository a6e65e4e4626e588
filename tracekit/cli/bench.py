"""``tracekit bench-coll``: nccl-tests-style bandwidth curves of the collective models."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from tracekit.cli._common import CONTEXT_SETTINGS, err_console, out_console, state
from tracekit.cli._options import json_option


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}", param_hint="'--ranks'") from None
    if not values:
        raise click.BadParameter("expected at least one rank count", param_hint="'--ranks'")
    from tracekit.model.node import check_rank_count

    for p in values:  # an absurd count is bad input (exit 1), refused before any curve is costed
        if p > 1:  # 0, 1 and negatives: the model's "needs at least 2 ranks"
            check_rank_count(p, f"bench-coll --ranks {p}")
    return values


@click.command("bench-coll", context_settings=CONTEXT_SETTINGS)
@click.option("--hw", "spec_name", required=True, metavar="SPEC", help="Hardware spec: preset name or TOML file.")
@click.option(
    "--collective",
    default="all_reduce",
    show_default=True,
    type=click.Choice(["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all"]),
    help="Collective to cost (as the nccl-tests binary <collective>_perf).",
)
@click.option(
    "--ranks",
    "ranks_text",
    default="8",
    show_default=True,
    metavar="P1,P2,...",
    help="Rank counts; the spec's outermost dimension is resized to each.",
)
@click.option(
    "--collective-model",
    "models",
    multiple=True,
    type=click.Choice(["nccl", "alpha_beta", "astra"]),
    help="Collective model; repeat for several (default: nccl and alpha_beta).",
)
@click.option(
    "--model", "models_old", multiple=True, hidden=True, type=click.Choice(["nccl", "alpha_beta", "astra"])
)  # the first spelling, kept working
@click.option(
    "--sizes",
    default="8B:8GiB",
    show_default=True,
    metavar="MIN:MAX[:F] | A,B,...",
    help="Sizes in nccl-tests terms: powers of F (default 2) from MIN to MAX, or a list.",
)
@click.option(
    "--nccl-tests",
    "nccl_tests",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    metavar="FILE",
    help="all_reduce_perf-style output to overlay; repeat for several.",
)
@click.option(
    "-o",
    "--output",
    "output",
    default=None,
    metavar="PLOT",
    help="Write the plot: .html (self-contained) or .png (needs Chromium).",
)
@json_option()
def bench_coll(
    spec_name: str,
    collective: str,
    ranks_text: str,
    models: tuple[str, ...],
    models_old: tuple[str, ...],
    sizes: str,
    nccl_tests: tuple[str, ...],
    output: str | None,
    as_json: bool,
) -> None:
    """Print the nccl-tests table (size, time, algbw, busbw) of each model, and plot it.

    Each point is one collective on ranks 0..P-1 of the spec fitted to P ranks,
    alone on the machine.  busbw follows nccl-tests' doc/PERFORMANCE.md.
    With --nccl-tests, the file's out-of-place rows are listed and plotted too.

    \b
    Example:
      tracekit bench-coll --hw dgx-h100 --collective all_reduce --ranks 8,16,64
      tracekit bench-coll --hw dgx-a100 --ranks 8 --nccl-tests my_run.txt -o busbw.html
    """
    from tracekit.replayer.orchestration.bench_coll import (
        check_plot_path,
        format_table,
        model_curves,
        read_nccl_tests,
        size_range,
        write_plot,
    )
    from tracekit.replayer.simulation.specs import load_spec

    models = models + models_old
    if output:
        check_plot_path(output)
    from tracekit.errors import TracekitError

    try:
        size_list = size_range(sizes)
    except TracekitError as exc:  # the option named as the other options' errors name theirs
        raise TracekitError(f"--sizes {sizes}: {exc.message}") from None
    spec = load_spec(spec_name)
    rows = model_curves(spec, collective, _int_list(ranks_text), list(models) or ["nccl", "alpha_beta"], size_list)
    for path in nccl_tests:
        run = read_nccl_tests(path, collective=collective)
        rows += list(run.rows)
    if as_json:
        out_console().file.write(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    else:
        out_console().file.write(format_table(rows))
    if output:
        title = f"{collective} on {spec.name}"
        path = write_plot(rows, output, title=title)
        if not state().quiet:
            err_console().print(f"wrote {path}")


COMMANDS = [bench_coll]
