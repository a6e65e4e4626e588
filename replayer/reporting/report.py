"""The HTML report of a replay, of a comparison of two replays, and of a sweep.

One self-contained file each (see :mod:`.html_page`: plotly.js inlined, no
network needed to open it), written atomically.

The replay report (:func:`build_report_html`) has: the summary table, the
per-rank stacked bars (compute, exposed communication, waiting for peers,
other idle), the timeline of ranks and streams with the critical path
(first ranks only; needs the result's schedule), the critical path's
longest steps, the collective table with achieved algorithm and bus
bandwidth (nccl-tests definitions, see :mod:`tracekit.replayer.results.result`), the hardware spec
and the provenance.  Large jobs are reduced (binned rank bars, a per-rank
table replaced by percentiles, merged timeline spans, top collective
groups) and the page says where.

Entry points: :func:`write_report` (also used by ``tracekit replay --html``),
:func:`write_diff_report`, :func:`write_sweep_report` (both in :mod:`.compare_pages`, importable from here),
:func:`load_result`.
"""

from __future__ import annotations

import logging
import os
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from tracekit.errors import ReplayError, TracekitError

from tracekit.fmt import fmt_bytes, fmt_gbps, fmt_ns, fmt_pct
from tracekit.replayer.reporting.compare_pages import (  # the diff and sweep pages, importable from here
    build_diff_html,
    build_sweep_html,
    diff_headline,
    diff_tables,
    write_diff_report,
    write_sweep_report,
)
from tracekit.replayer.reporting.html_page import Cell, Page, cell, note, para, table

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.results.result import ReplayResult
    from tracekit.sets.traceset import TraceSet

log = logging.getLogger(__name__)

#: Ranks listed one by one in the per-rank table; above this the table shows percentiles.
MAX_RANK_ROWS = 64
#: Collective groups listed (largest total time first).
MAX_COLLECTIVE_ROWS = 50
#: Critical-path steps listed (longest first).
MAX_PATH_ROWS = 15


def load_result(path: str | os.PathLike[str]) -> "ReplayResult":
    """Read a replay result JSON file (``tracekit replay --json``).

    Raises:
        ReplayError: not JSON, or not a replay result (names ``path``; a ``.et``/``.et.gz`` name is called a
            Chakra trace and the ``tracekit replay`` command that makes a result is shown).
        OSError: the file cannot be read.
    """
    from tracekit.replayer.results.result import ReplayResult

    from tracekit.io import read_input_bytes

    data = read_input_bytes(path)
    try:
        return ReplayResult.from_json(data)
    except TracekitError as exc:
        if str(path).endswith((".et", ".et.gz")) and "not JSON" in exc.message:
            exc.message = (
                "not a tracekit replay result: by its name a Chakra .et trace (protobuf); this command takes a "
                f"replay result: tracekit replay {path} --hw HW -o result.json"
            )
        raise exc.with_context(path=path)


def as_result(result: "ReplayResult | dict[str, Any]") -> "ReplayResult":
    """``result`` itself, or :meth:`ReplayResult.from_dict` of a dict.

    Raises:
        ReplayError: not a result or its dict.
    """
    from tracekit.replayer.results.result import ReplayResult

    if isinstance(result, ReplayResult):
        return result
    if isinstance(result, dict):
        return ReplayResult.from_dict(result)
    raise ReplayError(f"expected a ReplayResult or its dict, got {type(result).__name__}")


# ----- pieces of the replay report ------------------------------------------------------------------


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def summary_values(r: "ReplayResult") -> list[tuple[str, str, Any, str]]:
    """The summary table's rows: ``(label, key, raw value, text)``; means are over ranks, times ns."""
    from tracekit.replayer.results.compact import collective_counts

    ranks = r.ranks
    n_coll, n_pairs = collective_counts(r)
    it = r.iteration_time_ns
    rows: list[tuple[str, str, Any, str]] = [
        ("iteration time", "iteration_time_ns", it, fmt_ns(it)),
        ("ranks", "world_size", r.provenance.world_size, f"{r.provenance.world_size:,}"),
        ("nodes replayed", "node_count", r.node_count, f"{r.node_count:,}"),
        ("collectives", "collectives", n_coll, f"{n_coll:,}"),
        ("send/recv pairs", "send_recv_pairs", n_pairs, f"{n_pairs:,}"),
    ]
    for label, key in (
        ("compute", "compute_ns"),
        ("communication", "comm_ns"),
        ("exposed communication", "exposed_comm_ns"),
        ("waiting for peers", "comm_wait_ns"),
        ("other idle", "other_idle_ns"),
    ):
        v = _mean([getattr(s, key) for s in ranks])
        rows.append((f"{label} (mean per rank)", f"mean_{key}", v, f"{fmt_ns(v)} ({fmt_pct(v, it)})"))
    cp = r.critical_path
    rows += [
        (
            "critical path: compute",
            "critical_path_compute_ns",
            cp.compute_ns,
            f"{fmt_ns(cp.compute_ns)} ({fmt_pct(cp.compute_ns, cp.length_ns)})",
        ),
        (
            "critical path: communication",
            "critical_path_comm_ns",
            cp.comm_ns,
            f"{fmt_ns(cp.comm_ns)} ({fmt_pct(cp.comm_ns, cp.length_ns)})",
        ),
        ("critical path: steps", "critical_path_steps", len(cp.steps), f"{len(cp.steps):,}"),
        ("hardware", "spec_name", r.provenance.spec_name, r.provenance.spec_name),
        ("collective model", "collective_model", r.provenance.collective_model, r.provenance.collective_model),
    ]
    return rows


def _per_rank_section(r: "ReplayResult") -> tuple[str, str]:
    fields = (
        ("iteration time", "iteration_time_ns"),
        ("compute", "compute_ns"),
        ("communication", "comm_ns"),
        ("exposed comm.", "exposed_comm_ns"),
        ("waiting for peers", "comm_wait_ns"),
        ("other idle", "other_idle_ns"),
    )
    rows: list[Sequence[Cell | str]] = []
    if len(r.ranks) <= MAX_RANK_ROWS:
        for s in r.ranks:
            rows.append(
                [cell(s.rank, f"rank.{s.rank}.rank", s.rank)]
                + [cell(fmt_ns(getattr(s, k)), f"rank.{s.rank}.{k}", getattr(s, k)) for _, k in fields]
                + [cell(f"{s.nodes:,}", f"rank.{s.rank}.nodes", s.nodes)]
            )
        return table(["rank"] + [f for f, _ in fields] + ["nodes"], rows, table_id="per-rank"), ""
    for label, key in fields:
        vals = sorted((getattr(s, key), s.rank) for s in r.ranks)
        xs = [v for v, _ in vals]
        rows.append(
            [
                label,
                fmt_ns(xs[0]) + f" (rank {vals[0][1]})",
                fmt_ns(statistics.median(xs)),
                fmt_ns(_mean(xs)),
                fmt_ns(xs[-1]) + f" (rank {vals[-1][1]})",
            ]
        )
    return (
        table(["figure", "min", "median", "mean", "max"], rows, table_id="per-rank"),
        f"{len(r.ranks):,} ranks: the table gives the spread over ranks instead of one row per rank.",
    )


def _collective_section(r: "ReplayResult") -> tuple[str, str]:
    groups = sorted(r.collective_summary(), key=lambda g: -g["total_time_ns"])
    shown = groups[:MAX_COLLECTIVE_ROWS]
    rows = []
    for g in shown:
        rows.append(
            [
                g["kind"],
                cell(fmt_bytes(g["comm_bytes"]), value=g["comm_bytes"]),
                g["pg_name"],
                g["group_size"],
                g["algorithm"],
                f"{g['count']:,}",
                fmt_ns(g["total_time_ns"]),
                fmt_ns(g["mean_time_ns"]),
                fmt_gbps(g["algbw_gbps"]),
                fmt_gbps(g["busbw_gbps"]),
            ]
        )
    head = [
        "collective",
        "bytes per rank",
        "group",
        "ranks",
        "algorithm",
        "count",
        "total time",
        "mean time",
        "algbw",
        "busbw",
    ]
    text = (
        "Rows group identical collectives (kind, bytes, group, algorithm); bandwidths are means over the "
        "group's instances, as nccl-tests defines them (busbw = algbw x 2(p-1)/p for all-reduce, "
        "(p-1)/p for all-gather, reduce-scatter, all-to-all)."
    )
    if len(groups) > len(shown):
        text += f" The {len(shown)} groups with the largest total time of {len(groups):,} are listed."
    if not groups:
        return para("No communication was replayed."), ""
    return table(head, rows, table_id="collectives", left_columns=1), text


def _critical_path_section(r: "ReplayResult") -> str:
    cp = r.critical_path
    if not cp.steps:
        return para("The replay has no nodes.")
    ranks = sorted({s.rank for s in cp.steps})
    longest = sorted(cp.steps, key=lambda s: -(s.end_ns - s.start_ns))[:MAX_PATH_ROWS]
    rows = [
        [
            s.name,
            s.rank,
            s.node_id,
            s.category,
            fmt_ns(s.start_ns),
            fmt_ns(s.end_ns - s.start_ns),
            fmt_pct(s.end_ns - s.start_ns, cp.length_ns),
        ]
        for s in longest
    ]
    rank_text = ", ".join(map(str, ranks[:32])) + (f" ... ({len(ranks)} ranks)" if len(ranks) > 32 else "")
    return para(
        f"{len(cp.steps):,} steps, {fmt_ns(cp.length_ns)} (compute {fmt_ns(cp.compute_ns)}, "
        f"communication {fmt_ns(cp.comm_ns)}); it runs on ranks {rank_text}. "
        f"It is drawn in red in the timeline. Longest steps:"
    ) + table(["node", "rank", "node id", "category", "start", "duration", "share"], rows, table_id="critical-path")


def _spec_section(r: "ReplayResult", spec_dict: dict[str, Any] | None) -> str:
    p = r.provenance
    origin = ""
    spec = None
    if spec_dict is not None:
        from tracekit.replayer.simulation.specs import spec_from_dict

        spec = spec_from_dict(spec_dict)
        origin = "The spec the replay used (stored in the result)."
    else:
        from tracekit.replayer.simulation.specs import load_spec

        source = p.spec_path if p.spec_path and Path(p.spec_path).is_file() else p.spec_name
        try:
            spec = load_spec(source).fitted(p.world_size)
        except (TracekitError, OSError) as exc:
            return para(
                f"Spec {p.spec_name!r} ({p.spec_path or 'preset'}): the result does not store the spec and "
                f"it cannot be re-loaded now ({exc}).",
                "note",
            )
        origin = (
            f"The result does not store the spec: re-loaded now from {source}, fitted to {p.world_size} ranks "
            f"(it may have changed since the replay). The replay's settings: collective model "
            f"{p.collective_model}, compute {p.compute_mode} x{p.compute_scale:g}, streams {p.streams}."
        )
    d = spec.device
    peaks = ", ".join(f"{k} {v / 1e12:g}" for k, v in d.peak_flops_per_s) or "none"
    dev = table(
        ["device", "peak TFLOP/s", "memory GB/s", "efficiency (compute, memory)"],
        [[d.name, peaks, f"{d.mem_bandwidth_gbps:g}", f"{d.compute_efficiency:g}, {d.memory_efficiency:g}"]],
    )
    net = table(
        ["dimension", "name", "topology", "size", "GB/s per rank", "latency"],
        [
            [i, n.name, n.topology, n.size, f"{n.bandwidth_gbps:g}", fmt_ns(n.latency_ns)]
            for i, n in enumerate(spec.network)
        ],
    )
    return (
        note(origin)
        + para(f"{spec.name}: {spec.description}")
        + dev
        + net
        + "<details><summary>full spec (TOML)</summary>"
        + f"<pre>{_escape(spec.to_toml())}</pre></details>"
    )


def _escape(text: str) -> str:
    import html

    return html.escape(text)


def _provenance_section(r: "ReplayResult") -> str:
    p = r.provenance
    paths = [x or "(in memory)" for x in p.trace_paths]
    shown = paths[:8]
    path_text = "; ".join(shown) + (f"; ... and {len(paths) - len(shown):,} more" if len(paths) > len(shown) else "")
    rows = [
        ["traces", path_text],
        ["ranks", f"{p.world_size:,}"],
        ["hardware spec", p.spec_name],
        ["spec file", p.spec_path or "-"],
        ["collective model", p.collective_model],
        ["compute", f"{p.compute_mode}, durations x{p.compute_scale:g}"],
        ["streams", p.streams],
        ["compute cost methods", ", ".join(f"{k}: {v:,} nodes" for k, v in r.compute_methods) or "-"],
        ["tracekit", p.tracekit_version],
    ]
    return table(["", ""], rows, table_id="provenance", left_columns=2)


def build_report_html(
    result: "ReplayResult | dict[str, Any]",
    *,
    traceset: "TraceSet | None" = None,
    max_timeline_ranks: int = 16,
    max_timeline_spans: int = 20_000,
    max_rank_bars: int = 256,
    title: str | None = None,
    measured: dict[str, Any] | None = None,
) -> str:
    """The replay report as one HTML document (see module doc).

    Args:
        result: a :class:`ReplayResult` or its ``to_dict()`` (a ``"spec"`` key, when present, is the spec shown).
        traceset: the replayed trace set, if at hand: timeline spans then show node names (only the
            timeline's ranks are read).
        max_timeline_ranks, max_timeline_spans, max_rank_bars: size limits (see :mod:`.plots`).
        title: page title (default names the spec and the iteration time).
        measured: the measured run's analysis (``MeasuredAnalysis.to_dict()`` of
            ``tracekit.converters.pytorch.kineto_analysis``): adds a section with it beside the replay
            (:mod:`.report_measured`).

    Raises:
        ReplayError: ``result`` is not a replay result.
    """
    from tracekit.replayer.reporting.plots import rank_breakdown_figure

    spec_dict = result.get("spec") if isinstance(result, dict) else None
    r = as_result(result)
    p = r.provenance
    page = Page(
        title or f"Replay on {p.spec_name}: {fmt_ns(r.iteration_time_ns)} per iteration",
        f"{p.world_size:,} ranks, {r.node_count:,} nodes, collective model {p.collective_model}; "
        f"tracekit {p.tracekit_version}",
    )
    rows = [[label, cell(text, key, value)] for label, key, value, text in summary_values(r)]
    page.section("Summary", table(["", "value"], rows, table_id="summary"), section_id="summary-section")
    bars = rank_breakdown_figure(r.ranks, max_bars=max_rank_bars, iteration_time_ns=r.iteration_time_ns)
    per_rank_table, per_rank_note = _per_rank_section(r)
    page.section(
        "Time per rank",
        para(
            "Each bar is one rank's iteration: compute, communication not hidden "
            "behind compute, waiting for peers to reach a collective, and other idle "
            "time."
        ),
        note(bars.note),
        page.figure(bars.figure),
        note(per_rank_note),
        per_rank_table,
        section_id="ranks-section",
    )
    _timeline_section(page, r, traceset, max_timeline_ranks, max_timeline_spans)
    if measured is not None:
        from tracekit.replayer.reporting.report_measured import measured_parts

        page.section("Measured run (Kineto)", *measured_parts(measured, r), section_id="measured-section")
    if r.memory is not None:  # a generated job: its peak memory per rank class (issue 33)
        from tracekit.replayer.reporting.report_memory import memory_parts

        page.section("Memory per rank class", *memory_parts(r.memory), section_id="memory-section")
    page.section("Critical path", _critical_path_section(r), section_id="critical-path-section")
    coll_table, coll_note = _collective_section(r)
    page.section("Collectives", note(coll_note), coll_table, section_id="collectives-section")
    page.section("Hardware", _spec_section(r, spec_dict), section_id="hardware-section")
    page.section("Provenance", _provenance_section(r), section_id="provenance-section")
    return page.render()


def _timeline_section(
    page: Page, r: "ReplayResult", traceset: "TraceSet | None", max_ranks: int, max_spans: int
) -> None:
    """The "Timeline" section of :func:`build_report_html` (a note instead when the result has no schedule)."""
    from tracekit.replayer.reporting.timeline_plot import timeline_figure, timeline_ranks

    if r.schedule is not None:
        names: dict[int, Sequence[str]] = {s.rank: s.names for s in r.schedule if s.names is not None}
        if traceset is not None:
            for rank in timeline_ranks(r, max_ranks):
                if rank not in names and rank in traceset.ranks:
                    names[rank] = traceset[rank].columns().names
        tl = timeline_figure(r, max_ranks=max_ranks, max_spans=max_spans, names=names or None)
        page.section(
            "Timeline",
            para(
                "Rows are each shown rank's host threads and streams; drag to zoom, "
                "double-click to reset. Red: the critical path."
            ),
            note(tl.note),
            page.figure(tl.figure),
            section_id="timeline-section",
        )
    else:
        page.section(
            "Timeline",
            para(
                "This result was written without its per-node schedule, so no timeline "
                "can be drawn (write the result with the schedule, or use "
                "tracekit replay --html).",
                "note",
            ),
            section_id="timeline-section",
        )


def write_report(result: "ReplayResult | dict[str, Any]", path: str | os.PathLike[str], **options: Any) -> Path:
    """Write :func:`build_report_html` of ``result`` to ``path`` atomically; returns the path.

    ``options`` are :func:`build_report_html`'s keywords (``traceset=``, ``max_timeline_ranks=``, ...).

    Raises:
        ReplayError: ``result`` is not a replay result.
        OSError: the file cannot be written.
    """
    from tracekit.io import atomic_output

    text = build_report_html(result, **options)
    with atomic_output(path, "w") as fh:
        fh.write(text)
    log.info("wrote %s (%d bytes)", path, len(text.encode()))
    return Path(path)


__all__ = [
    "as_result",
    "build_diff_html",
    "build_report_html",
    "build_sweep_html",
    "diff_headline",
    "diff_tables",
    "load_result",
    "summary_values",
    "write_diff_report",
    "write_report",
    "write_sweep_report",
]
