"""``tracekit check-replay``: replay a converted capture with its measured durations against its measured steps."""

from __future__ import annotations

import click

from tracekit.cli._common import CONTEXT_SETTINGS, out_console, say
from tracekit.cli._options import deprecated_alias, emit_json, json_option, traces_argument
from tracekit.fmt import fmt_ms


@click.command("check-replay", context_settings=CONTEXT_SETTINGS)
@traces_argument()
@click.option(
    "--hw",
    "hw",
    default="dgx-h100",
    show_default=True,
    metavar="SPEC",
    help="Hardware spec (measured durations do not depend on its rates).",
)
@click.option(
    "-o",
    "--output",
    "json_out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the comparison as JSON to this file.",
)
@json_option()
@click.option("--html-out", "html_out", type=click.Path(dir_okay=False), default=None, help="Write an HTML page.")
@deprecated_alias("--html", "html_old")
def check_replay_cmd(
    traces, hw: str, json_out: str | None, as_json: bool, html_out: str | None, html_old: str | None
) -> None:
    """Replay with measured durations; print per rank and step predicted vs measured time and the error.

    Per rank with device kernels, also the measured compute/communication overlap, the measured slowdown of
    overlapped compute kernels against the same op alone, the replay's overlap and the interference model's
    prediction for it (the spec device's overlap_compute_slowdown).

    Each member of a collective ends what it measured after the last member arrived (one host clock;
    else the smallest measured duration of the members), so time a rank waited for slower ranks is not
    counted twice.  A partial job replays each present rank alone, its collectives with
    their measured durations.  An ET converted without Kineto (no durations) is refused with a message.

    \b
    Example:
      tracekit convert pytorch --et 'run/et_rank*.json' --kineto 'run/kineto_rank*.json' -o out/job
      tracekit check-replay out/job --html-out out/check.html
      tracekit check-replay out/job -o out/check.json
    """
    from rich.table import Table

    from tracekit.io import read_traceset
    from tracekit.replayer.results.measured import check_replay
    from tracekit.replayer.reporting.measured_report import (
        rank_label,
        write_comparison_html,
        write_comparison_json,
    )

    from tracekit.cli.replay import _refuse_old_json

    _refuse_old_json(traces, as_json)
    html_out = html_out or html_old
    comparison = check_replay(read_traceset(traces), hw)
    written = []  # files first, then the table; the "wrote" lines last, on stderr (as replay)
    if json_out:
        write_comparison_json(comparison, json_out)
        written.append(f"wrote {json_out}")
    if html_out:
        write_comparison_html(comparison, html_out)
        written.append(f"wrote {html_out}")
    if as_json:
        emit_json(comparison.to_dict())
        for line in written:
            say(line)
        return
    console = out_console()
    for note in comparison.notes:
        console.print(f"note: {note}", markup=False, highlight=False)
    table = Table(title="replay vs measured")
    for col in ("rank", "step", "measured ms", "predicted ms", "error", "largest shift"):
        table.add_column(col, justify="right")
    for r in comparison.rows:
        top = r.contributors[0] if r.contributors else None
        shift = f"{top.name[:30]} {fmt_ms(top.shift_ns, signed=True)}" if top else "-"
        table.add_row(
            rank_label(r.rank),
            "-" if r.step is None else str(r.step),
            f"{r.measured_ns / 1e6:,.3f}",
            f"{r.predicted_ns / 1e6:,.3f}",
            f"{100 * r.error:+.1f}%",
            shift,
        )
    console.print(table)
    # the timing line every timing command prints (replay, sweep): check-replay replays the traces' own times
    console.print(
        "timed: collective model measured, compute measured (the traces' own durations; the spec's rates are unused)",
        markup=False,
        highlight=False,
    )
    _print_overlap(console, comparison.overlap)
    for r in comparison.rows:
        if r.step is None:  # no ProfilerStep: say what the measured time is, the table cannot
            console.print(f"rank {rank_label(r.rank)}: measured = {r.source}", markup=False, highlight=False)
    for line in written:
        say(line)


def _print_overlap(console, overlap) -> None:
    """The per-rank compute/communication overlap table and its notes (ranks with device nodes only)."""
    from rich.table import Table

    from tracekit.replayer.reporting.overlap_report import OVERLAP_COLUMNS, overlap_cells, overlap_lines

    rows = [o for o in overlap if o.device]
    if rows:
        table = Table(title="compute/communication overlap (whole capture)")
        for col in OVERLAP_COLUMNS:
            table.add_column(col, justify="right")
        for o in rows:
            table.add_row(*overlap_cells(o))
        console.print(table)
    for line in overlap_lines(overlap):
        console.print(line, markup=False, highlight=False)


COMMANDS = [check_replay_cmd]
