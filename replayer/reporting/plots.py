"""Plotly figures of replay results: per-rank time breakdown, diffs and sweeps (the rank/stream timeline is in
:mod:`tracekit.replayer.reporting.timeline_plot`).

Each function takes result values (:class:`~tracekit.replayer.results.result.ReplayResult`
or its parts) and returns a :class:`PlotlyFigure`-compatible
``plotly.graph_objects.Figure`` plus, where data had to be reduced to keep
the page small, a sentence saying how (the page prints it next to the plot).
Times are plotted in milliseconds.

Categories of a rank's time are those of :class:`~tracekit.replayer.results.result.RankStats`:
compute, exposed communication, waiting for peers (``comm_wait_ns``) and
other idle time (``other_idle_ns``); they add up to the rank's iteration
time exactly (integer ns).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from tracekit.errors import ReplayError

from tracekit.fmt import fmt_ns

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from tracekit.replayer.reporting.diff import ResultDiff
    from tracekit.replayer.results.result import RankStats

#: (label, colour) of the rank-time categories, in stacking order.
CATEGORIES = (
    ("compute", "#4c78a8"),
    ("exposed communication", "#e45756"),
    ("waiting for peers", "#f2a93b"),
    ("other idle", "#c7c7c7"),
)
CRITICAL_COLOUR = "#d62728"
_NS_PER_MS = 1e6


@dataclass(frozen=True)
class Figure:
    """A figure and how its data was reduced (``note`` is "" when nothing was)."""

    figure: "go.Figure"
    note: str = ""


def _go():
    import plotly.graph_objects as go

    return go


def rank_categories_ns(stats: "RankStats") -> tuple[int, int, int, int]:
    """``(compute, exposed comm, waiting for peers, other idle)`` of one rank, ns; they sum to its iteration time."""
    return stats.categories_ns()


def rank_breakdown_figure(
    ranks: Sequence["RankStats"], *, max_bars: int = 256, iteration_time_ns: float | None = None
) -> Figure:
    """Stacked bars per rank: compute, exposed communication, waiting for peers, other idle (ms).

    With more than ``max_bars`` ranks, consecutive ranks are binned
    (``ceil(ranks / max_bars)`` per bar) and each bar shows the bin's mean per
    category; the note says so.  A dashed line marks ``iteration_time_ns``.

    Raises:
        ReplayError: ``max_bars`` < 1.
    """
    if max_bars < 1:
        raise ReplayError(f"max_bars must be at least 1, got {max_bars}")
    go = _go()
    values = np.array([rank_categories_ns(r) for r in ranks], dtype=np.float64).reshape(-1, 4) / _NS_PER_MS
    rank_ids = np.array([r.rank for r in ranks], dtype=np.int64)
    n = len(rank_ids)
    note = ""
    if n > max_bars:
        per = math.ceil(n / max_bars)
        heads = np.arange(0, n, per)
        counts = np.diff(np.append(heads, n))
        values = np.add.reduceat(values, heads, axis=0) / counts[:, None]
        labels = [f"{rank_ids[h]}-{rank_ids[h + c - 1]}" for h, c in zip(heads.tolist(), counts.tolist())]
        note = (
            f"{n:,} ranks shown as {len(heads):,} bars of {per} consecutive ranks each (the last may be "
            f"smaller); each bar is the mean of its ranks."
        )
        x_title = "ranks (binned)"
    else:
        labels = [str(r) for r in rank_ids.tolist()]
        x_title = "rank"
    fig = go.Figure()
    for (name, colour), col in zip(CATEGORIES, values.T):
        fig.add_trace(
            go.Bar(
                x=labels,
                y=col,
                name=name,
                marker_color=colour,
                hovertemplate="%{x}: %{y:.4f} ms<extra>" + name + "</extra>",
            )
        )
    if iteration_time_ns is not None:
        fig.add_hline(
            y=iteration_time_ns / _NS_PER_MS,
            line_dash="dash",
            line_color="#333",
            annotation_text="iteration time",
            annotation_position="top left",
        )
    fig.update_layout(
        barmode="stack",
        xaxis_title=x_title,
        yaxis_title="time (ms)",
        xaxis_type="category",
        legend_orientation="h",
        legend_y=1.12,
        legend_traceorder="normal",
        margin=dict(l=60, r=20, t=40, b=50),
        height=380,
    )
    return Figure(fig, note)


# ----- diff and sweep ----------------------------------------------------------------------------


def diff_figure(diff: "ResultDiff") -> Figure:
    """Horizontal bars: each category's change from run A to run B, in percent of A.

    Percentages make small categories that moved visible next to large ones
    that did not; the hover shows both values.  Green: B is faster, red: slower.
    """
    go = _go()
    cats = list(reversed(diff.categories))  # first category on top
    pct = [100.0 * c.delta_ns / c.a_ns if c.a_ns else 0.0 for c in cats]
    text = [f"{c.name}: {fmt_ns(c.a_ns)} -> {fmt_ns(c.b_ns)}" for c in cats]
    colours = ["#54a24b" if p < 0 else "#e45756" if p > 0 else "#bbbbbb" for p in pct]
    fig = go.Figure(
        go.Bar(
            x=pct,
            y=[c.name for c in cats],
            orientation="h",
            marker_color=colours,
            text=[f"{p:+.2f}%" for p in pct],
            textposition="auto",
            hovertext=text,
            hoverinfo="text",
            name="change",
        )
    )
    fig.update_layout(
        xaxis_title=f"change from {diff.a_label} to {diff.b_label} (% of {diff.a_label})",
        margin=dict(l=220, r=60, t=30, b=50),
        height=60 + 34 * len(cats),
        showlegend=False,
    )
    return Figure(fig)


@dataclass(frozen=True)
class SweepPoint:
    """One sweep row reduced to what the plot shows (ns).

    ``compute_ns + exposed_comm_ns + comm_wait_ns + other_idle_ns`` is the
    slowest rank's time, which equals ``iteration_time_ns``.
    """

    value: Any
    iteration_time_ns: float
    slowest_rank: int
    compute_ns: float
    exposed_comm_ns: float
    comm_wait_ns: float
    other_idle_ns: float


def sweep_points(rows: Sequence[tuple[Any, Any]]) -> list[SweepPoint]:
    """``[(parameter value, ReplayResult or its dict), ...]`` -> :class:`SweepPoint` per row, in input order.

    The breakdown is that of the slowest rank (:func:`~.results.slowest_rank`), whose
    categories add up to the iteration time.

    Raises:
        ReplayError: a row is not a (value, result) pair or its result is malformed/empty.
    """
    from tracekit.replayer.results.result import ReplayResult, slowest_rank

    out = []
    for i, item in enumerate(rows):
        try:
            value, res = item
        except (TypeError, ValueError):
            raise ReplayError(f"sweep row {i} is not a (parameter value, result) pair: {item!r:.80}") from None
        if isinstance(res, dict):
            res = ReplayResult.from_dict(res)
        if not isinstance(res, ReplayResult):
            raise ReplayError(
                f"sweep row {i} ({value!r}): expected a ReplayResult or its dict, got {type(res).__name__}"
            )
        if not res.ranks:
            raise ReplayError(f"sweep row {i} ({value!r}): the result has no ranks")
        slow = slowest_rank(res.ranks)
        c = rank_categories_ns(slow)
        out.append(SweepPoint(value, res.iteration_time_ns, slow.rank, *c))
    return out


def sweep_figure(rows: Sequence[tuple[Any, Any]], parameter: str) -> Figure:
    """Iteration time against a swept parameter, stacked by the slowest rank's breakdown (ms).

    ``rows``: ``[(parameter value, ReplayResult or its dict), ...]`` in the
    order to plot (numbers are plotted on a category axis in that order, so
    uneven grids stay readable).  ``parameter`` labels the x axis.

    Raises:
        ReplayError: see :func:`sweep_points`; also for no rows.
    """
    if not rows:
        raise ReplayError("a sweep plot needs at least one row")
    go = _go()
    points = sweep_points(rows)
    x = [str(p.value) for p in points]
    fig = go.Figure()
    series = (
        ("compute", [p.compute_ns for p in points]),
        ("exposed communication", [p.exposed_comm_ns for p in points]),
        ("waiting for peers", [p.comm_wait_ns for p in points]),
        ("other idle", [p.other_idle_ns for p in points]),
    )
    for (name, colour), (_, ys) in zip(CATEGORIES, series):
        fig.add_trace(
            go.Bar(
                x=x,
                y=np.asarray(ys) / _NS_PER_MS,
                name=name,
                marker_color=colour,
                hovertemplate="%{x}: %{y:.4f} ms<extra>" + name + "</extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=np.asarray([p.iteration_time_ns for p in points]) / _NS_PER_MS,
            mode="lines+markers+text",
            name="iteration time",
            line=dict(color="#222"),
            text=[fmt_ns(p.iteration_time_ns) for p in points],
            textposition="top center",
        )
    )
    fig.update_layout(
        barmode="stack",
        xaxis_title=parameter,
        yaxis_title="time (ms)",
        xaxis_type="category",
        legend_orientation="h",
        legend_y=1.12,
        legend_traceorder="normal",
        margin=dict(l=60, r=20, t=40, b=60),
        height=420,
    )
    return Figure(fig, "Bars: the slowest rank's time by category (it sets the iteration time).")


__all__ = [
    "CATEGORIES",
    "Figure",
    "SweepPoint",
    "diff_figure",
    "rank_breakdown_figure",
    "rank_categories_ns",
    "sweep_figure",
    "sweep_points",
]  # timeline_figure, timeline_ranks: see __getattr__
