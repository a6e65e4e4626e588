"""Report commands: ``tracekit report`` (HTML page of a replay) and ``tracekit diff`` (two replays compared)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, ContextManager

import click

from tracekit.cli._common import CONTEXT_SETTINGS, err_console, out_console, state
from tracekit.cli._options import IntRange, deprecated_alias, emit_json, json_option

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from tracekit.replayer.reporting.diff import ResultDiff


def _say(text: str) -> None:
    """A short message on stderr (suppressed by -q)."""
    if not state().quiet:
        err_console().print(text, markup=False, highlight=False)


def _status(text: str) -> ContextManager[object]:
    """A spinner on stderr with ``text`` while the block runs (nothing with -q)."""
    import contextlib

    if state().quiet:
        return contextlib.nullcontext()
    return err_console().status(text)


@click.command("report", context_settings=CONTEXT_SETTINGS)
@click.argument("result_path", metavar="RESULT.json", type=click.Path(dir_okay=False))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    metavar="HTML",
    help="Write the report here (one self-contained HTML file).",
)
@click.option(
    "--max-ranks",
    type=IntRange(1, 256),
    default=16,
    show_default=True,
    help="Ranks drawn in the timeline (the critical path's ranks first, then the lowest).",
)
@click.option("--title", default=None, help="Page title (default: spec and iteration time).")
@click.option(
    "--screenshot-out",
    "png",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="PNG",
    help="Also save a PNG screenshot of the page (needs Chromium).",
)
@deprecated_alias("--screenshot", "png_old")
@click.option(
    "--kineto",
    "kineto_glob",
    default=None,
    metavar="GLOB",
    help="Kineto traces of the measured run: adds its analysis (as `tracekit analyze`) beside the replay.",
)
@json_option()
def report(
    result_path: str,
    output: str,
    max_ranks: int,
    title: str | None,
    png: str | None,
    png_old: str | None,
    kineto_glob: str | None,
    as_json: bool,
) -> None:
    """Write the HTML report of a replay result (from `tracekit replay -o RESULT.json`).

    The page needs no network: summary, per-rank time bars, a zoomable
    timeline of ranks and streams with the critical path, the collective
    table with achieved bus bandwidth, the hardware spec and the provenance.
    Large jobs are aggregated and the page says where.

    The timeline needs the per-node schedule: replay with --with-schedule.

    \b
    Example:
      tracekit replay out/job --hw dgx-a100 -o out/a100.json --with-schedule
      tracekit report out/a100.json -o out/a100.html
    """
    from tracekit.replayer.reporting.report import load_result, write_report

    png = png or png_old
    with _status(f"reading {result_path}"):
        result = load_result(result_path)
    measured = None
    if kineto_glob is not None:
        from tracekit.cli.analyze import kineto_files
        from tracekit.converters.pytorch.kineto_analysis import analyze_kineto_files

        with _status("analysing the measured run"):
            measured = analyze_kineto_files(kineto_files((kineto_glob,))).to_dict()
    with _status(f"writing {output}"):
        path = write_report(result, output, max_timeline_ranks=max_ranks, title=title, measured=measured)
    size = path.stat().st_size
    _say(f"wrote {path} ({size / 1e6:.1f} MB; iteration time {result.iteration_time_ns / 1e6:.3f} ms)")
    if png is not None:
        from tracekit.replayer.reporting.browser import screenshot_html

        with _status(f"screenshot {png}"):
            screenshot_html(path, png)
        _say(f"wrote {png}")
    if as_json:
        emit_json(
            {"output": str(path), "bytes": size, "screenshot": png, "iteration_time_ns": result.iteration_time_ns}
        )


@click.command("diff", context_settings=CONTEXT_SETTINGS)
@click.argument("a_path", metavar="A.json", type=click.Path(dir_okay=False))
@click.argument("b_path", metavar="B.json", type=click.Path(dir_okay=False))
@click.option(
    "--html-out",
    "html_out",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="HTML",
    help="Also write the comparison as a self-contained HTML page.",
)
@deprecated_alias("--html", "html_old")
@json_option()
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the tables (or the JSON with --json) to this file instead of stdout.",
)
@click.option(
    "--top",
    type=IntRange(0, 1000),
    default=10,
    show_default=True,
    help="Collectives and nodes listed (largest change first).",
)
@click.option("--labels", default=None, metavar="A,B", help="Names for the two runs (default: their spec names).")
def diff(
    a_path: str,
    b_path: str,
    html_out: str | None,
    html_old: str | None,
    as_json: bool,
    output: str | None,
    top: int,
    labels: str | None,
) -> None:
    """Compare two replay results: iteration time, time by category, the collectives and nodes that moved most.

    Changes are B - A.  A category counts as changed when it moved by more
    than 1 ns and one part per million.

    \b
    Example:
      tracekit replay out/job --hw dgx-a100 -o out/a100.json
      tracekit replay out/job --hw dgx-h100 -o out/h100.json
      tracekit diff out/a100.json out/h100.json --html-out out/diff.html
    """
    from tracekit.errors import ConfigError
    from tracekit.replayer.reporting.diff import diff_results
    from tracekit.replayer.reporting.report import load_result, write_diff_report

    html_out = html_out or html_old
    a_label = b_label = None
    if labels is not None:
        parts = labels.split(",")
        if len(parts) != 2 or not all(p.strip() for p in parts):
            raise ConfigError(f"--labels takes two names separated by a comma, got {labels!r}")
        a_label, b_label = (p.strip() for p in parts)
    with _status("reading results"):
        a = load_result(a_path)
        b = load_result(b_path)
    _warn_timing(a_path, b_path, a, b)
    result = diff_results(a, b, top=top, a_label=a_label, b_label=b_label)
    if html_out is not None:  # files first: a closed stdout (| head) must not lose them
        path = write_diff_report(result, html_out)
        _say(f"wrote {path}")
    if as_json:
        import orjson

        text = orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n"
        _emit(text, output)
    else:
        _print_tables(result, output)


def _warn_timing(a_path: str, b_path: str, a: Any, b: Any) -> None:
    """One stderr line (unless ``-q``) when A and B were timed with other compute methods or on other hardware:
    the diff then mixes that change in with the rest."""
    from tracekit.cli._common import echo_literal
    from tracekit.replayer.reporting.diff import timing_differences

    differ = timing_differences(a.provenance, b.provenance)
    if differ and not state().quiet:
        echo_literal(
            f"tracekit: warning: {a_path} and {b_path} were timed differently ({'; '.join(differ)}): "
            "the diff includes that change",
            err=True,
        )


def _emit(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    from tracekit.io import atomic_output

    with atomic_output(output, "w") as fh:
        fh.write(text)
    _say(f"wrote {output}")


def _print_tables(result: ResultDiff, output: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    from tracekit.replayer.reporting.report import diff_headline, diff_tables

    def render(console: Console) -> None:
        """Print the diff's headline and its non-empty tables on ``console``."""
        console.print(diff_headline(result), markup=False, highlight=False)
        for i, (heading, headers, rows) in enumerate(diff_tables(result)):
            if not rows:
                continue
            table = Table(title=heading, title_justify="left")
            for j, h in enumerate(headers):
                table.add_column(h, justify="left" if j == 0 else "right")
            for row in rows:
                style = "bold red" if i == 0 and row[-1] == "yes" else None
                table.add_row(*[str(x) for x in row], style=style)
            console.print(table)
        for text in result.notes:
            console.print(f"note: {text}", markup=False, highlight=False)

    if output is None:
        render(out_console())
        return
    from tracekit.io import atomic_output

    with atomic_output(output, "w") as fh:
        render(Console(file=fh, width=160, color_system=None, markup=False, emoji=False))
    _say(f"wrote {output}")


COMMANDS = [report, diff]
