"""Replay commands: ``tracekit replay`` (simulate on a hardware spec) and ``tracekit timeline`` (measured)."""

from __future__ import annotations

from typing import Any

import click

from tracekit.cli._common import CONTEXT_SETTINGS, err_console, out_console, state
from tracekit.cli._options import deprecated_alias, emit_json, json_option, traces_argument
from tracekit.cli._render import _fmt_bytes, _fmt_ns  # noqa: E402 - one place for human units

MAX_RANK_ROWS = 16


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole > 0 else "-"


def _bw(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f}"


def render_result(console: Any, result: Any) -> None:
    """Print a :class:`tracekit.replayer.results.ReplayResult` for people."""
    from rich.table import Table

    prov = result.provenance
    job = result.iteration_time_ns
    console.print(f"[bold]iteration time {_fmt_ns(job)}[/bold] ({job:,.0f} ns) on {prov.spec_name}: "
                  f"{prov.world_size} rank(s), {result.node_count:,} nodes, collective model "
                  f"{prov.collective_model}, compute {prov.compute_mode} x {prov.compute_scale:g}")
    ranks = list(result.ranks)
    title = "per rank"
    if len(ranks) > MAX_RANK_ROWS:
        ranks = sorted(ranks, key=lambda r: (-r.iteration_time_ns, r.rank))[:MAX_RANK_ROWS]
        title = f"per rank: the {MAX_RANK_ROWS} slowest of {len(result.ranks)}"
    table = Table(title=title, caption="compute + exposed comm + waiting + other idle = iteration; "
                                       "(all comm) includes comm overlapped with compute")
    for col in ("rank", "iteration", "compute", "exposed comm", "waiting", "other idle", "(all comm)", "nodes"):
        table.add_column(col, justify="right")
    for r in ranks:
        table.add_row(str(r.rank), _fmt_ns(r.iteration_time_ns), _fmt_ns(r.compute_ns),
                      f"{_fmt_ns(r.exposed_comm_ns)} ({_pct(r.exposed_comm_ns, r.iteration_time_ns)})",
                      _fmt_ns(r.comm_wait_ns), _fmt_ns(r.other_idle_ns), _fmt_ns(r.comm_ns), f"{r.nodes:,}")
    console.print(table)
    summary = result.collective_summary()
    if summary:
        coll = Table(title=f"communication ({len(result.collectives):,} collectives and send/recv pairs)")
        for col in ("kind", "size", "group", "ranks", "algorithm", "count", "mean time", "algbw GB/s",
                    "busbw GB/s"):
            coll.add_column(col, justify="left" if col in ("kind", "group", "algorithm") else "right")
        for row in summary:
            coll.add_row(row["kind"], _fmt_bytes(row["comm_bytes"]), row["pg_name"], str(row["group_size"]),
                         row["algorithm"], f"{row['count']:,}", _fmt_ns(row["mean_time_ns"]),
                         _bw(row["algbw_gbps"]), _bw(row["busbw_gbps"]))
        console.print(coll)
    cp = result.critical_path
    crossed = len({s.rank for s in cp.steps})
    console.print(f"critical path: {_fmt_ns(cp.length_ns)} over {len(cp.steps):,} nodes on {crossed} rank(s): "
                  f"compute {_fmt_ns(cp.compute_ns)} ({_pct(cp.compute_ns, cp.length_ns)}), "
                  f"communication {_fmt_ns(cp.comm_ns)} ({_pct(cp.comm_ns, cp.length_ns)})")
    longest = sorted(cp.steps, key=lambda s: (-(s.end_ns - s.start_ns), s.start_ns))[:5]
    if longest:
        steps = Table(title="longest steps on the critical path")
        for col in ("rank", "node", "name", "kind", "start", "duration"):
            steps.add_column(col, justify="left" if col in ("name", "kind") else "right")
        for s in longest:
            steps.add_row(str(s.rank), str(s.node_id), s.name[:60], s.category, _fmt_ns(s.start_ns),
                          _fmt_ns(s.end_ns - s.start_ns))
        console.print(steps)
    methods = ", ".join(f"{k} {v:,}" for k, v in result.compute_methods)
    if methods:
        console.print(f"compute nodes timed by: {methods}")


@click.command(context_settings=CONTEXT_SETTINGS)
@traces_argument()
@click.option("--hw", "hw", required=True, metavar="SPEC",
              help="Hardware spec: a preset name (see `tracekit hw list`) or a TOML file.")
@click.option("-o", "--output", "json_out", type=click.Path(dir_okay=False), default=None, metavar="RESULT.json",
              help="Write the full result as JSON to this file (input of report and diff).")
@json_option()
@click.option("--with-schedule", is_flag=True, help="Include every node's start and end in the JSON result.")
@click.option("--timeline-out", "timeline_out", type=click.Path(dir_okay=False), default=None,
              help="Write a Chrome trace (open in Perfetto) of the replay to this file.")
@deprecated_alias("--timeline", "timeline_old")
@click.option("--compute-scale", "--scale-compute", "compute_scale", type=float, default=None, metavar="F",
              help="Multiply measured compute durations by F (overrides the spec).")
@click.option("--collective-model", type=click.Choice(["alpha_beta", "astra", "nccl", "measured"]), default=None,
              help="Communication cost model (overrides the spec); 'measured' replays the traces' own "
                   "collective durations.")
@click.option("--streams", type=click.Choice(["trace", "single"]), default="trace", show_default=True,
              help="Resources per rank: from the traces' tid/stream attributes, or one of each.")
@click.option("--no-check", is_flag=True, help="Skip the up-front checks (deadlocks are still diagnosed).")
@click.option("--no-fold", is_flag=True,
              help="Simulate every rank even where ranks provably run identical timelines (rank folding "
                   "gives the same result, faster, reading one rank file at a time).")
@click.option("--html-out", "html_out", type=click.Path(dir_okay=False), default=None,
              help="Write a self-contained HTML report of the replay to this file.")
@deprecated_alias("--html", "html_old")
def replay(traces, hw: str, json_out: str | None, as_json: bool, with_schedule: bool, timeline_out: str | None,
           timeline_old: str | None, compute_scale: float | None, collective_model: str | None, streams: str,
           no_check: bool, no_fold: bool, html_out: str | None, html_old: str | None) -> None:
    """Replay a trace set on a hardware spec and summarise where the time goes.

    Prints the iteration time, per-rank compute / communication / exposed
    communication / idle time, the collectives with their achieved
    bandwidths, and the critical path.

    \b
    Example:
      tracekit replay out/job --hw dgx-h100
      tracekit replay out/job --hw my.toml -o result.json --timeline-out timeline.json
      tracekit replay out/job --hw dgx-a100 --collective-model nccl --compute-scale 0.5
      tracekit replay out/job --hw dgx-h100 --html-out report.html
      tracekit replay out/job --hw dgx-h100 --json | jq .iteration_time_ns
    """
    from tracekit.replayer import ReplayOptions
    from tracekit.replayer.folding import replay_files

    _refuse_old_json(traces, as_json)
    timeline_out = timeline_out or timeline_old
    html_out = html_out or html_old

    options = ReplayOptions(collective_model=collective_model, compute_scale=compute_scale, streams=streams,
                            check=not no_check, fold=not no_fold)
    result, traceset = replay_files(traces, hw, options=options)
    written = []  # files first: a closed stdout (| head) must not lose them
    if html_out:
        from tracekit.replayer.report import write_report

        write_report(result, html_out, traceset=traceset)
        written.append(f"wrote {html_out}")
    if json_out:
        result.write_json(json_out, include_schedule=with_schedule)
        written.append(f"wrote {json_out}")
    if timeline_out:
        from tracekit.replayer.timeline import replay_timeline, write_chrome_trace

        chrome = replay_timeline(result, traceset)
        write_chrome_trace(chrome, timeline_out)
        other = chrome["otherData"]
        capped = (f"; {other['flow_arrows_dropped']:,} flow arrows not drawn (cap {other['flow_arrows_cap']:,})"
                  if other["flow_arrows_dropped"] else "")
        written.append(f"wrote {timeline_out} (open it in https://ui.perfetto.dev){capped}")
    if as_json:
        emit_json(result.to_dict(include_schedule=with_schedule))
    else:
        render_result(out_console(), result)
    fold = result.folding
    console = err_console()
    if state().quiet:
        return
    if fold is not None and fold.reason is None:
        console.print(f"rank folding: simulated {fold.classes} of {fold.ranks} ranks "
                      f"(the others run identical timelines; --no-fold to simulate all)")
    for line in written:
        console.print(line, markup=False, highlight=False)


def _refuse_old_json(traces, as_json: bool) -> None:
    """``--json FILE`` used to name the result file: say so instead of reading FILE as a trace."""
    from tracekit.errors import ConfigError

    extra = [t for t in ((traces,) if isinstance(traces, str) else traces) if str(t).endswith(".json")]
    if as_json and extra:
        raise ConfigError(f"--json prints the result on stdout and takes no file; write {extra[0]} with "
                          f"-o {extra[0]}")


@click.command(context_settings=CONTEXT_SETTINGS)
@traces_argument()
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Chrome trace JSON file to write.")
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
    from tracekit.replayer.timeline import measured_timeline, write_chrome_trace

    traceset = read_traceset(traces)
    trace = measured_timeline(traceset)
    write_chrome_trace(trace, output)
    slices = sum(1 for e in trace["traceEvents"] if e["ph"] == "X")
    if as_json:
        emit_json({"output": output, "slices": slices, "ranks": len(traceset)})
    if not state().quiet:
        err_console().print(f"wrote {output}: {slices:,} slices on {len(traceset)} rank(s)", markup=False,
                            highlight=False)


COMMANDS = [replay, timeline]
