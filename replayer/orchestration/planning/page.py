"""The HTML page of a plan: step time against peak memory for every layout tried, and the ranked table.

One plotly scatter (the report pages' self-contained :class:`~tracekit.replayer.reporting.html_page.Page`,
plotly.js inlined): simulated layouts at their replayed step time, the fastest marked; layouts pruned by their
bound or dominated at their bound (a lower bound: they are at least that slow), greyed; layouts pruned by
memory at their bound when it was computed, greyed, right of the memory cap (a dashed line).  Hovering a point
shows its layout and, for a pruned one, the reason.  Below, the simulated layouts ranked with their figures,
each value also in ``data-key``/``data-value`` attributes for tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.orchestration.planning.search import Candidate, PlanResult

GIB = float(1 << 30)
#: (status, legend name, colour, marker symbol) of the scatter's series, drawn in this order.
SERIES = (
    ("memory", "pruned: does not fit", "#d9d9d9", "x"),
    ("dominated", "pruned: dominated", "#bdbdbd", "diamond-open"),
    ("bound", "pruned: bound", "#9e9e9e", "circle-open"),
    ("simulated", "simulated", "#4c78a8", "circle"),
)


def _y_s(c: "Candidate") -> float | None:
    """Where a candidate sits on the time axis: its replayed step time, else its bound (s); None without either."""
    if c.simulated is not None:
        return c.simulated.step_ns / 1e9
    return None if c.bound is None else c.bound.step_ns / 1e9


def plotted(result: "PlanResult") -> list["Candidate"]:
    """The candidates the scatter draws (those with a time: simulated or bounded), in result order."""
    return [c for c in result.candidates if _y_s(c) is not None]


def plan_figure(result: "PlanResult") -> Any:
    """The time-vs-memory scatter (module doc) as a plotly figure."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for status, name, colour, symbol in SERIES:
        points = [c for c in plotted(result) if c.status == status]
        if not points:
            continue
        fig.add_trace(
            go.Scatter(
                x=[c.peak_bytes / GIB for c in points],
                y=[_y_s(c) for c in points],
                mode="markers",
                name=f"{name} ({len(points)})",
                marker=dict(color=colour, symbol=symbol, size=7 if status == "simulated" else 6),
                text=[c.layout.label + (f"<br>{c.reason}" if c.reason else "") for c in points],
                hovertemplate="%{text}<br>%{x:.1f} GiB, %{y:.3f} s<extra></extra>",
            )
        )
    if result.ranked:
        best = result.best
        fig.add_trace(
            go.Scatter(
                x=[best.peak_bytes / GIB],
                y=[_y_s(best)],
                mode="markers",
                name="chosen",
                marker=dict(color="#e45756", symbol="star", size=14),
                text=[best.layout.label],
                hovertemplate="%{text}<br>%{x:.1f} GiB, %{y:.3f} s<extra>chosen</extra>",
            )
        )
    fig.add_vline(x=result.cap_bytes / GIB, line_dash="dash", line_color="#e45756")
    fig.update_layout(
        xaxis_title="peak memory per rank (GiB)",
        yaxis_title="step time (s; pruned: lower bound)",
        legend_orientation="h",
        legend_y=1.12,
        margin=dict(l=60, r=20, t=40, b=60),
        height=520,
    )
    return fig


def _ranked_table(result: "PlanResult") -> str:
    from tracekit.replayer.reporting.html_page import cell, table

    keys = (
        ("step_s", "step (s)", "{:.3f}"),
        ("tokens_per_s", "tokens/s", "{:,.0f}"),
        ("tflops_per_gpu", "TFLOP/s per GPU", "{:.1f}"),
        ("mfu", "MFU", "{:.1%}"),
        ("peak_memory_gib", "peak GiB", "{:.1f}"),
        ("headroom_gib", "headroom GiB", "{:.1f}"),
        ("exposed_comm_s", "exposed comm (s)", "{:.3f}"),
        ("bubble_s", "idle/bubble (s)", "{:.3f}"),
        ("bound_s", "bound (s)", "{:.3f}"),
    )
    body = []
    for i, c in enumerate(result.ranked):
        fig = result.figures(c)
        row = [cell(i + 1, f"plan.{i}.rank", i + 1), cell(c.layout.label, f"plan.{i}.label", c.layout.label, left=True)]
        row += [cell(fmt.format(fig[k]), f"plan.{i}.{k}", fig[k]) for k, _, fmt in keys]
        body.append(row)
    return table(["#", "layout", *(label for _, label, _ in keys)], body, table_id="ranked")


def build_plan_html(result: "PlanResult") -> str:
    """The whole page (module doc)."""
    from tracekit.replayer.reporting.html_page import Page, note, para

    req, base = result.request, result.request.base
    counts = result.counts()
    page = Page(
        f"Layouts of {base.model.name} on {req.gpus} GPUs ({req.spec_name})",
        f"global batch {base.global_batch_size}, sequence {base.model.seq_length}; "
        f"{counts['enumerated']} layouts: {counts['simulated']} simulated, {counts['bound']} pruned by bound, "
        f"{counts['memory']} by memory, {counts['dominated']} dominated",
    )
    shown = len(plotted(result))
    page.section(
        "Step time against peak memory",
        note(
            f"{shown} of {len(result.candidates)} layouts drawn (pruned ones at their lower bound, greyed); "
            f"dashed: the memory cap {result.cap_bytes / GIB:.1f} GiB."
        ),
        page.figure(plan_figure(result)),
        section_id="scatter",
    )
    parts = [_ranked_table(result)]
    if result.ranked:
        parts.append(para("Chosen layout: " + result.generate_command(result.best)))
    page.section("Simulated layouts, fastest first", *parts, section_id="ranked-section")
    return page.render()


__all__ = ["SERIES", "build_plan_html", "plan_figure", "plotted"]
