"""``tracekit timeline``: a Chrome trace (Perfetto) of the traces' own measured timing."""

from __future__ import annotations

import click

from tracekit.cli._common import CONTEXT_SETTINGS, err_console, state
from tracekit.cli._options import emit_json, json_option, traces_argument


@click.command(context_settings=CONTEXT_SETTINGS)
@traces_argument()
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Chrome trace JSON file to write.")
@json_option()
def timeline(traces, output: str, as_json: bool) -> None:
    """Write a Chrome trace (Perfetto) of the traces' own measured timing.

    One process per rank, one thread per host thread / stream, each node at its
    measured start_time_ns for its duration_ns.

    \b
    Example:
      tracekit timeline out/job -o measured.json
    """
    from tracekit.io import read_traceset
    from tracekit.replayer.reporting.timeline import measured_timeline, write_chrome_trace

    traceset = read_traceset(traces)
    trace = measured_timeline(traceset)
    write_chrome_trace(trace, output)
    slices = sum(1 for e in trace["traceEvents"] if e["ph"] == "X")
    # an empty timeline says nothing: say why, and what draws one
    empty = (
        f": none of the {sum(len(t) for t in traceset):,} nodes has a measured duration (a replay draws its own "
        f"timeline: tracekit replay TRACES --hw SPEC --timeline-out FILE)"
        if not slices
        else ""
    )
    if as_json:
        emit_json({"output": output, "slices": slices, "ranks": len(traceset)})
    if not state().quiet:
        err_console().print(
            f"wrote {output}: {slices:,} slices on {len(traceset)} rank(s){empty}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


COMMANDS = [timeline]
