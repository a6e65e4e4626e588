"""Replay commands: ``tracekit replay`` (simulate on a hardware spec) and ``tracekit timeline`` (measured)."""

from __future__ import annotations

from typing import Any

import click

from tracekit.cli._common import CONTEXT_SETTINGS, err_console, out_console, progress_callback, state
from tracekit.cli._perturb import check_samples, perturb_options, read_perturbation, run_samples
from tracekit.cli._options import (
    FACTOR,
    MAX_TOP,
    FloatRange,
    IntRange,
    comm_groups_option,
    compute_options,
    deprecated_alias,
    emit_json,
    json_option,
    load_comm_groups,
    traces_argument,
)
from tracekit.cli._render import _fmt_bytes, _fmt_ns, rank_ranges  # noqa: E402 - one place for human units
from tracekit.cli._result_doc import _compact, _result_doc, _write_result_json
from tracekit.fmt import fmt_ns_exact  # noqa: E402
from tracekit.fmt import fmt_pct as _pct  # noqa: E402


def _bw(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f}"


def _rank_rows(result: Any, top: int) -> tuple[list[tuple[list[int], Any]], int]:
    """Ranks with equal figures grouped, slowest first: ``([(ranks, stats)], groups in all)``."""
    groups: dict[tuple, list] = {}
    for r in result.ranks:
        key = (r.iteration_time_ns, r.compute_ns, r.comm_ns, r.exposed_comm_ns, r.comm_wait_ns, r.idle_ns, r.nodes)
        groups.setdefault(key, [[], r])[0].append(r.rank)
    rows = sorted(groups.values(), key=lambda g: (-g[1].iteration_time_ns, g[0][0]))
    return [(ranks, stats) for ranks, stats in rows[:top]], len(rows)


def _comm_rows(result: Any, top: int) -> tuple[list[dict[str, Any]], int]:
    """Collective summary rows that differ only in their group merged, most total time first.

    Mean times within 0.01 % of each other count as equal (the table prints 4-6 digits): float noise such as
    19,841.18 vs 19,841.20 ns, or 799.249 vs 799.250 us, printed as separate identical rows.
    """
    merged: dict[tuple, list[dict[str, Any]]] = {}
    for row in result.collective_summary():
        same = merged.setdefault((row["kind"], row["comm_bytes"], row["group_size"], row["algorithm"]), [])
        m = next((m for m in same if abs(m["mean_time_ns"] - row["mean_time_ns"]) <= 1e-4 * m["mean_time_ns"]), None)
        if m is None:
            same.append(dict(row, groups=[row["pg_name"]]))
        else:
            m["count"] += row["count"]
            m["total_time_ns"] += row["total_time_ns"]
            m["mean_time_ns"] = m["total_time_ns"] / m["count"]
            m["groups"].append(row["pg_name"])
    rows = sorted((m for same in merged.values() for m in same), key=lambda m: -m["total_time_ns"])
    return rows[:top], len(rows)


def _groups_text(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{len(names)} groups"


def render_result(console: Any, result: Any, *, top: int = 8, compute: str | None = None) -> None:
    """Print a :class:`tracekit.replayer.results.result.ReplayResult` for people.

    Ranks with identical figures share a row, as do collectives that differ
    only in their group; the ``top`` slowest / most expensive rows are shown.
    ``compute`` names how compute was timed (:func:`~tracekit.replayer.orchestration.projected.compute_label`; default: the spec's compute mode).
    """
    from rich.text import Text

    prov = result.provenance
    job = result.iteration_time_ns
    console.print(
        Text.assemble(
            (f"iteration time {_fmt_ns(job)}", "bold"),
            f" ({fmt_ns_exact(job)}) on {prov.spec_name}: "
            f"{prov.world_size} rank(s), {result.node_count:,} nodes, collective model "
            f"{prov.collective_model}, compute {compute or prov.compute_mode} x {prov.compute_scale:g}",
        ),
        soft_wrap=True,  # one line however narrow the console: the line a log or a script greps for
    )
    _print_rank_table(console, result, top)
    _print_comm_table(console, result, top)
    _print_critical_path(console, result.critical_path)
    _print_compute_methods(console, result)


def _print_rank_table(console: Any, result: Any, top: int) -> None:
    """The per-rank table of :func:`render_result` (ranks with identical figures share a row)."""
    from rich.table import Table

    rows, distinct = _rank_rows(result, top)
    title = (
        "per rank" if distinct == len(result.ranks) else f"per rank ({len(result.ranks)} ranks, {distinct} distinct)"
    )
    if distinct > len(rows):
        title += f": the {len(rows)} slowest rows (--top N for more)"
    table = Table(
        title=title,
        caption="compute + exposed comm + waiting + other idle = iteration; "
        "(all comm) includes comm overlapped with compute",
    )
    for col in ("rank", "iteration", "compute", "exposed comm", "waiting", "other idle", "(all comm)", "nodes"):
        table.add_column(col, justify="right")
    for ranks, r in rows:
        table.add_row(
            rank_ranges(ranks, limit=3),
            _fmt_ns(r.iteration_time_ns),
            _fmt_ns(r.compute_ns),
            f"{_fmt_ns(r.exposed_comm_ns)} ({_pct(r.exposed_comm_ns, r.iteration_time_ns)})",
            _fmt_ns(r.comm_wait_ns),
            _fmt_ns(r.other_idle_ns),
            _fmt_ns(r.comm_ns),
            f"{r.nodes:,}",
        )
    console.print(table)


def _print_comm_table(console: Any, result: Any, top: int) -> None:
    """The communication table of :func:`render_result` (collectives differing only in group share a row)."""
    from rich.table import Table

    from tracekit.replayer.results.compact import collective_counts

    summary, distinct = _comm_rows(result, top)
    if summary:
        title = f"communication ({sum(collective_counts(result)):,} collectives and send/recv pairs)"
        if distinct > len(summary):
            title += f": the {len(summary)} of {distinct} rows with the most time (--top N for more)"
        coll = Table(title=title)
        for col in ("kind", "size", "group", "ranks", "algorithm", "count", "mean time", "algbw GB/s", "busbw GB/s"):
            coll.add_column(col, justify="left" if col in ("kind", "group", "algorithm") else "right")
        for row in summary:
            coll.add_row(
                row["kind"],
                _fmt_bytes(row["comm_bytes"]),
                _groups_text(row["groups"]),
                str(row["group_size"]),
                row["algorithm"],
                f"{row['count']:,}",
                _fmt_ns(row["mean_time_ns"]),
                _bw(row["algbw_gbps"]),
                _bw(row["busbw_gbps"]),
            )
        console.print(coll)


def _print_critical_path(console: Any, cp: Any) -> None:
    """The critical-path line and its five longest steps (:func:`render_result`)."""
    from rich.table import Table

    crossed = len({s.rank for s in cp.steps})
    console.print(
        f"critical path: {_fmt_ns(cp.length_ns)} over {len(cp.steps):,} nodes on {crossed} rank(s): "
        f"compute {_fmt_ns(cp.compute_ns)} ({_pct(cp.compute_ns, cp.length_ns)}), "
        f"communication {_fmt_ns(cp.comm_ns)} ({_pct(cp.comm_ns, cp.length_ns)})"
    )
    longest = sorted(cp.steps, key=lambda s: (-(s.end_ns - s.start_ns), s.start_ns))[:5]
    if longest:
        steps = Table(title="longest steps on the critical path")
        for col in ("rank", "node", "name", "kind", "start", "duration"):
            steps.add_column(col, justify="left" if col in ("name", "kind") else "right")
        for s in longest:
            steps.add_row(
                str(s.rank),
                str(s.node_id),
                s.name[:60],
                s.category,
                _fmt_ns(s.start_ns),
                _fmt_ns(s.end_ns - s.start_ns),
            )
        console.print(steps)


def _print_compute_methods(console: Any, result: Any) -> None:
    """How compute nodes were timed, and the warning when none has a measured duration (:func:`render_result`)."""
    methods = ", ".join(f"{k} {v:,}" for k, v in result.compute_methods)
    if methods:
        console.print(f"compute nodes timed by: {methods}")
    methods_d = dict(result.compute_methods)
    missing = methods_d.get("missing", 0)
    if missing and not methods_d.get("measured", 0):
        modelled = sum(v for k, v in methods_d.items() if k not in ("measured", "missing"))
        console.print(
            f"[bold red]warning:[/bold red] no compute node has a measured duration (an Execution Trace "
            f"converted without Kineto records no times): {modelled:,} timed by a cost model from their "
            f"FLOPs/bytes, {missing:,} with neither replayed as 0 ns; convert with --kineto for measured "
            f"times"
        )


def render_compute_plan(console: Any, plan: Any, report: Any, result: Any) -> None:
    """Say how compute was timed: the method, why, and (projected) time per method; roofline fallbacks."""
    if plan.method == "projected" and report is not None:
        for line in report.lines():
            console.print(line, markup=False, highlight=False)
        return
    methods = dict(result.compute_methods)
    if plan.method == "roofline":
        kept = methods.get("measured", 0)
        console.print(
            f"compute: roofline on the spec; {methods.get('roofline', 0):,} nodes by roofline, "
            f"{kept:,} without FLOPs/bytes kept their measured time",
            markup=False,
            highlight=False,
        )
    else:
        modelled = sum(v for k, v in methods.items() if k not in ("measured", "missing"))
        rest = f"; {modelled:,} nodes without one timed by roofline on the spec" if modelled else ""
        console.print(f"compute: measured times ({plan.reason}){rest}", markup=False, highlight=False)


@click.command(context_settings=CONTEXT_SETTINGS)
@traces_argument()
@click.option(
    "--hw", required=True, metavar="SPEC", help="Hardware spec: a preset name (see `tracekit hw list`) or a TOML file."
)
@click.option(
    "-o",
    "--output",
    "json_out",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="RESULT.json",
    help="Write the full result as JSON to this file (input of report and diff).",
)
@json_option()
@click.option("--with-schedule", is_flag=True, help="Include every node's start and end in the JSON result.")
@click.option(
    "--per-rank",
    is_flag=True,
    help="Write one row per rank and every collective instance in the JSON result; by default a folded job's "
    "result lists its rank classes (ranks with equal figures as rank ranges) and the collective table.",
)
@click.option(
    "--timeline-out",
    "timeline_out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write a Chrome trace (open in Perfetto) of the replay to this file.",
)
@deprecated_alias("--timeline", "timeline_old")
@click.option(
    "--compute-scale",
    "--scale-compute",
    "compute_scale",
    type=FACTOR,
    default=None,
    metavar="F",
    help="Multiply measured compute durations by F (overrides the spec).",
)
@click.option(
    "--collective-model",
    type=click.Choice(["alpha_beta", "astra", "nccl", "measured"]),
    default=None,
    help="Communication cost model (overrides the spec); 'measured' replays the traces' own collective durations.",
)
@click.option(
    "--streams",
    type=click.Choice(["trace", "single"]),
    default="trace",
    show_default=True,
    help="Resources per rank: from the traces' tid/stream attributes, or one of each.",
)
@click.option("--no-check", is_flag=True, help="Skip the up-front checks (deadlocks are still diagnosed).")
@click.option(
    "--memory-bound",
    type=FloatRange(min=0.001, max=1e6),
    default=None,
    metavar="GB",
    help="Refuse up front a replay estimated to need more memory than this (default: the memory available).",
)
@click.option(
    "--no-fold",
    is_flag=True,
    help="Simulate every rank even where ranks provably run identical timelines (rank folding "
    "gives the same result, faster, reading one rank file at a time).",
)
@click.option(
    "--html-out",
    "html_out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write a self-contained HTML report of the replay to this file.",
)
@deprecated_alias("--html", "html_old")
@click.option(
    "--top",
    type=IntRange(1, MAX_TOP),
    default=8,
    show_default=True,
    help="Rows per summary table (ranks with equal figures and groups with equal costs share a row).",
)
@compute_options
@comm_groups_option()
@perturb_options
def replay(
    traces,
    hw: str,
    json_out: str | None,
    as_json: bool,
    with_schedule: bool,
    per_rank: bool,
    timeline_out: str | None,
    timeline_old: str | None,
    compute_scale: float | None,
    collective_model: str | None,
    streams: str,
    no_check: bool,
    no_fold: bool,
    memory_bound: float | None,
    html_out: str | None,
    html_old: str | None,
    top: int,
    compute: str,
    capture_device: str | None,
    comm_groups: str | None,
    perturb_items: tuple[str, ...],
    samples: int | None,
    **sampling: Any,
) -> None:
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
      tracekit replay out/a100_capture --hw dgx-h100 --compute projected
      tracekit replay out/job --hw dgx-a100 --perturb slow=17:1.5 --perturb link=5/1:0.5
      tracekit replay out/job --hw dgx-a100 --perturb jitter=compute:0.05 --samples 100
    """
    from tracekit.cli._memory import render_replay_memory
    from tracekit.replayer import ReplayOptions
    from tracekit.replayer.orchestration.projected import compute_label, replay_with_compute

    _refuse_old_json(traces, as_json)
    timeline_out, html_out = timeline_out or timeline_old, html_out or html_old
    groups, groups_path = load_comm_groups(traces, comm_groups, whole_job=True)
    options = ReplayOptions(
        collective_model=collective_model,
        compute_scale=compute_scale,
        streams=streams,
        check=not no_check,
        fold=not no_fold,
        summary=not (with_schedule or per_rank or html_out or timeline_out),  # a folded job's result stays small
        memory_bound_gb=memory_bound,
        comm_groups=tuple(groups.items()),
        comm_groups_path=groups_path,
    )
    pert = read_perturbation(hw, perturb_items)
    if samples:
        check_samples(samples, pert, json_out, timeline_out, html_out, with_schedule, per_rank)
        return run_samples(traces, hw, options, pert, samples, as_json=as_json, **sampling)
    console = err_console()
    with progress_callback("replay") as bar:  # stages with counts on a terminal; none with -q or a pipe
        status = None if bar is None else (lambda text, done=0, total=None: bar(done, total, f"replay: {text}"))
        result, traceset, plan, report = replay_with_compute(
            traces, hw, options=options, compute=compute, capture_device=capture_device, status=status, perturb=pert
        )
    written = _write_files(result, traceset, plan, report, html_out, json_out, timeline_out, (with_schedule, per_rank))
    if as_json:
        emit_json(_result_doc(result, with_schedule, plan, report, per_rank))
    else:
        render_result(out_console(), result, top=top, compute=compute_label(plan, result))
        render_compute_plan(out_console(), plan, report, result)
        render_replay_memory(out_console(), result.memory)  # a generated job's peak memory per rank class
    if not state().quiet:
        _say_done(console, result.folding, written)


def _say_done(console: Any, fold: Any, written: list[str]) -> None:
    """The closing stderr lines of ``replay``: rank folding, when it happened, and the files written."""
    if fold is not None and fold.reason is None:
        console.print(
            f"rank folding: simulated {fold.classes} of {fold.ranks} ranks "
            f"(the others run identical timelines; --no-fold to simulate all)"
        )
    for line in written:
        console.print(line, markup=False, highlight=False, soft_wrap=True)  # a path stays whole


def _write_files(
    result: Any,
    traceset: Any,
    plan: Any,
    report: Any,
    html_out: str | None,
    json_out: str | None,
    timeline_out: str | None,
    detail: tuple[bool, bool],
) -> list[str]:
    """Write the files ``replay`` was asked for (HTML report, JSON result, Chrome timeline); the lines saying so.
    ``detail``: ``(--with-schedule, --per-rank)``.

    Files come before anything is printed: a closed stdout (``| head``) must not lose them.
    """
    import gc

    gc.freeze()  # the result (a million rows at 1,024 ranks) is final: reports need not re-traverse it in GC passes
    written = []
    if html_out:
        from tracekit.replayer.reporting.report import write_report

        write_report(result, html_out, traceset=traceset)
        written.append(f"wrote {html_out}")
    if json_out:
        with_schedule, per_rank = detail
        _write_result_json(result, json_out, with_schedule, plan, report, per_rank)
        form = (
            " (rank classes and the collective table; --per-rank for every rank)" if _compact(result, *detail) else ""
        )
        written.append(f"wrote {json_out}{form}")
    if timeline_out:
        from tracekit.replayer.reporting.timeline import replay_timeline, write_chrome_trace

        chrome = replay_timeline(result, traceset)
        write_chrome_trace(chrome, timeline_out)
        other = chrome["otherData"]
        dropped, cap = other["flow_arrows_dropped"], other["flow_arrows_cap"]
        capped = f"; {dropped:,} flow arrows not drawn (cap {cap:,})" if dropped else ""
        written.append(f"wrote {timeline_out} (open it in https://ui.perfetto.dev){capped}")
    return written


def _refuse_old_json(traces, as_json: bool) -> None:
    """``--json FILE`` used to name the result file: say so instead of reading FILE as a trace."""
    from tracekit.errors import ConfigError

    extra = [t for t in ((traces,) if isinstance(traces, str) else traces) if str(t).endswith(".json")]
    if as_json and extra:
        raise ConfigError(f"--json prints the result on stdout and takes no file; write {extra[0]} with -o {extra[0]}")


COMMANDS = [replay]
