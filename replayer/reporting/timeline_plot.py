"""The rank/stream timeline figure of a replay result (Plotly): spans per (rank, resource) row and the critical path.

Part of :mod:`tracekit.replayer.reporting.plots` (the figures of a replay report), split out by concern; the
categories, colours and :class:`~tracekit.replayer.reporting.plots.Figure` are shared from there.  Times are plotted
in milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from tracekit.errors import ReplayError
from tracekit.fmt import fmt_bytes, fmt_ns
from tracekit.replayer.reporting.plots import _NS_PER_MS, CATEGORIES, CRITICAL_COLOUR, Figure, _go

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.results.result import ReplayResult

# engine node kinds (replayer/simulation/program.py K_*)
_K_TIMED, _K_ZERO, _K_COLL, _K_SEND, _K_RECV = range(5)


# ----- timeline -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spans:
    row: np.ndarray  # int64 row index
    start_ns: np.ndarray
    end_ns: np.ndarray
    label: list[str]


def _merge(row: np.ndarray, start: np.ndarray, end: np.ndarray, gap_ns: float) -> tuple[np.ndarray, ...]:
    """Merge spans of one row that overlap or lie closer than ``gap_ns``.

    Returns ``(row, start, end, count, first)`` per merged span, ``first``
    being the index (into the inputs) of its earliest member.
    """
    order = np.lexsort((start, row))
    row, start, end = row[order], start[order], end[order]
    new = np.ones(len(row), dtype=bool)
    bounds = np.flatnonzero(np.diff(row)) + 1
    for lo, hi in zip(np.r_[0, bounds].tolist(), np.r_[bounds, len(row)].tolist()):
        reach = np.maximum.accumulate(end[lo:hi])
        new[lo + 1 : hi] = start[lo + 1 : hi] > reach[:-1] + gap_ns
    heads = np.flatnonzero(new)
    if not len(heads):
        empty = np.zeros(0)
        return row[:0], empty, empty, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    block_end = np.maximum.reduceat(end, heads)
    counts = np.diff(np.append(heads, len(row)))
    return row[heads], start[heads], block_end, counts, order[heads]


def _span_budget_merge(row, start, end, max_spans, makespan_ns):
    """Spans as they are when at most ``max_spans``, else merged with the smallest doubling gap that fits."""
    n = len(row)
    if n <= max_spans or makespan_ns <= 0:
        order = np.lexsort((start, row))
        return (row[order], start[order], end[order], np.ones(n, dtype=np.int64), order), 0.0
    gap = makespan_ns / 4000
    merged = _merge(row, start, end, gap)
    while len(merged[0]) > max_spans and gap < makespan_ns:  # at worst one span per row is left
        gap *= 2
        merged = _merge(row, start, end, gap)
    return merged, gap


def timeline_ranks(result: "ReplayResult", max_ranks: int) -> list[int]:
    """The ranks a timeline shows: the critical path's ranks first (in path order), then the lowest ranks, up
    to ``max_ranks``, returned sorted."""
    chosen: dict[int, None] = {}
    for step in result.critical_path.steps:
        if len(chosen) >= max_ranks:
            break
        chosen.setdefault(step.rank, None)
    for stats in result.ranks:
        if len(chosen) >= max_ranks:
            break
        chosen.setdefault(stats.rank, None)
    return sorted(chosen)


def timeline_figure(
    result: "ReplayResult",
    *,
    max_ranks: int = 16,
    max_spans: int = 20_000,
    names: dict[int, Sequence[str]] | None = None,
) -> Figure:
    """Horizontal spans per (rank, resource) row, zoomable, with the critical path drawn over them.

    Rows are the resources (host threads, compute/comm/p2p streams, memory)
    of the ranks picked by :func:`timeline_ranks`.  Spans: compute nodes;
    communication nodes as "waiting for peers" (arrival to transfer start)
    and "transfer".  When more than ``max_spans`` spans would be drawn, spans
    of one row and category closer than a gap (makespan / 4000, doubled until
    they fit) are merged into one; the note says so.  ``names`` maps rank ->
    node names in file order (else spans are labelled by node id).

    Raises:
        ReplayError: the result carries no schedule (replayed results written
            without ``include_schedule``).
    """
    if result.schedule is None:
        raise ReplayError(
            "the replay result has no schedule (per-node times); write it with the schedule to draw a timeline"
        )
    go = _go()
    by_rank = {s.rank: s for s in result.schedule}
    shown = [r for r in timeline_ranks(result, max_ranks) if r in by_rank]
    coll_label = [f"{c.kind} {fmt_bytes(c.comm_bytes)} pg {c.pg_name} #{c.index}" for c in result.collectives]
    rows_y, row_of, cats = _timeline_rows(by_rank, shown)
    makespan = result.iteration_time_ns
    fig = go.Figure()
    total_in, total_out, gaps = _draw_span_categories(go, fig, cats, max_spans, makespan, names, coll_label)
    _add_critical_path(go, fig, result, by_rank, row_of)
    note_parts = []
    if len(shown) < len(result.ranks):
        note_parts.append(
            f"{len(shown)} of {len(result.ranks):,} ranks shown (the critical path's ranks first, "
            "then the lowest ranks)."
        )
    if total_out < total_in:
        note_parts.append(
            f"{total_in:,} spans drawn as {total_out:,}: spans of one row closer than "
            f"{fmt_ns(max(gaps))} were merged (zoom shows the merged blocks, not their parts)."
        )
    _timeline_layout(fig, rows_y)
    return Figure(fig, " ".join(note_parts))


def _draw_span_categories(
    go: Any,
    fig: Any,
    cats: dict[str, list[tuple]],
    max_spans: int,
    makespan_ns: int,
    names: dict[int, Sequence[str]] | None,
    coll_label: list[str],
) -> tuple[int, int, list[float]]:
    """Draw each span category of :func:`_timeline_rows` (merged to a third of ``max_spans`` each).

    Returns ``(spans in, spans drawn, merge gaps in ns)``.
    """
    total_in = total_out = 0
    gaps = []
    colours = {"compute": CATEGORIES[0][1], "waiting for peers": CATEGORIES[2][1], "transfer": CATEGORIES[1][1]}
    share = max(max_spans // 3, 1)
    for key, parts in cats.items():
        if not parts:
            continue
        row = np.concatenate([p[3] for p in parts])
        lo = np.concatenate([p[4] for p in parts])
        hi = np.concatenate([p[5] for p in parts])
        owner = np.concatenate([np.full(len(p[2]), i) for i, p in enumerate(parts)])
        local = np.concatenate([p[2] for p in parts])
        (m_row, m_lo, m_hi, m_count, m_first), gap = _span_budget_merge(row, lo, hi, share, makespan_ns)
        total_in += len(row)
        total_out += len(m_row)
        if gap:
            gaps.append(gap)
        labels = _span_labels(key, parts, owner, local, m_first, m_count, names, coll_label)
        _add_spans(go, fig, key, colours[key], m_row, m_lo, m_hi, labels, width=9)
    return total_in, total_out, gaps


def _timeline_layout(fig: Any, rows_y: list[str]) -> None:
    """Axes, size and legend of the timeline figure (one y tick per row, first row on top)."""
    height = max(260, 28 * len(rows_y) + 120)
    fig.update_layout(
        height=min(height, 2400),
        xaxis_title="time (ms)",
        hovermode="closest",
        yaxis=dict(
            tickmode="array",
            tickvals=list(range(len(rows_y))),
            ticktext=rows_y,
            autorange="reversed",
            range=[len(rows_y) - 0.5, -0.5],
            zeroline=False,
        ),
        legend_orientation="h",
        legend_y=1.02,
        legend_yanchor="bottom",
        margin=dict(l=160, r=20, t=40, b=50),
        dragmode="zoom",
    )


def _timeline_rows(
    by_rank: dict[int, Any], shown: list[int]
) -> tuple[list[str], dict[tuple[int, int], int], dict[str, list[tuple]]]:
    """Row labels, ``(rank, resource) -> row``, and per span category the parts ``(rank, schedule, node
    positions, rows, starts, ends)`` of the shown ranks."""
    rows_y: list[str] = []
    cats: dict[str, list[tuple]] = {"compute": [], "waiting for peers": [], "transfer": []}
    row_of: dict[tuple[int, int], int] = {}
    for rank in shown:
        s = by_rank[rank]
        used = sorted(set(s.resource[s.resource >= 0].tolist()))
        for res in used:
            row_of[(rank, res)] = len(rows_y)
            rows_y.append(f"r{rank} {s.resource_names[res]}")
        if not len(s.node_ids):
            continue
        row = np.array([row_of.get((rank, int(x)), -1) for x in range(len(s.resource_names))] + [-1], dtype=np.int64)[
            s.resource
        ]
        timed = (s.kind == _K_TIMED) & (s.end_ns > s.start_ns) & (row >= 0)
        comm = (s.kind >= _K_COLL) & ~np.isnan(s.xfer_start_ns) & (row >= 0)
        wait = comm & (s.xfer_start_ns > s.start_ns)
        xfer = comm & (s.end_ns > s.xfer_start_ns)
        for key, mask, lo, hi in (
            ("compute", timed, s.start_ns, s.end_ns),
            ("waiting for peers", wait, s.start_ns, s.xfer_start_ns),
            ("transfer", xfer, s.xfer_start_ns, s.end_ns),
        ):
            idx = np.flatnonzero(mask)
            if len(idx):
                cats[key].append((rank, s, idx, row[idx], lo[idx], hi[idx]))
    return rows_y, row_of, cats


def _span_labels(
    key: str,
    parts: list[tuple],
    owner: np.ndarray,
    local: np.ndarray,
    m_first: np.ndarray,
    m_count: np.ndarray,
    names: dict[int, Sequence[str]] | None,
    coll_label: list[str],
) -> list[str]:
    """Hover labels of merged spans: node names or ids, collective labels, or ``"N nodes merged"``."""
    labels = []
    for first, count in zip(m_first.tolist(), m_count.tolist()):
        rank, s = parts[owner[first]][0], parts[owner[first]][1]
        pos = int(local[first])
        if count > 1:
            labels.append(f"{count} nodes merged")
            continue
        if key == "compute":
            rank_names = names.get(rank) if names else None
            labels.append(rank_names[pos] if rank_names is not None else f"node {int(s.node_ids[pos])}")
        else:
            inst = int(s.instance[pos])
            labels.append(coll_label[inst] if 0 <= inst < len(coll_label) else f"node {int(s.node_ids[pos])}")
    return labels


def _add_spans(
    go, fig, name, colour, row, lo, hi, labels, *, width: float, offset: float = 0.0, showlegend: bool = True
) -> None:
    n = len(row)
    x = np.full(3 * n, np.nan)
    y = np.full(3 * n, np.nan)
    x[0::3] = lo / _NS_PER_MS
    x[1::3] = hi / _NS_PER_MS
    y[0::3] = row + offset
    y[1::3] = row + offset
    fig.add_trace(
        go.Scatter(
            x=x,
            y=y,
            mode="lines",
            name=name,
            line=dict(color=colour, width=width),
            hoverinfo="skip",
            legendgroup=name,
            showlegend=showlegend,
            connectgaps=False,
        )
    )
    # hover text on invisible markers at span midpoints: one label per span keeps the page small
    text = [f"{label}<br>{fmt_ns(e - s)}" for label, s, e in zip(labels, lo.tolist(), hi.tolist())]
    fig.add_trace(
        go.Scatter(
            x=(lo + hi) / 2 / _NS_PER_MS,
            y=row + offset,
            mode="markers",
            text=text,
            marker=dict(size=width, color=colour, opacity=0),
            legendgroup=name,
            showlegend=False,
            name=name,
            hovertemplate="%{text}<extra>" + name + "</extra>",
        )
    )


def _add_critical_path(go, fig, result, by_rank, row_of) -> None:
    steps = result.critical_path.steps
    if not steps:
        return
    pos_maps: dict[int, dict[int, int]] = {}
    rows, lo, hi, labels = [], [], [], []
    for step in steps:
        s = by_rank.get(step.rank)
        if s is None or not any(k[0] == step.rank for k in row_of):
            continue
        pmap = pos_maps.get(step.rank)
        if pmap is None:
            ids = {int(step_.node_id) for step_ in steps if step_.rank == step.rank}
            sel = np.flatnonzero(np.isin(s.node_ids, np.fromiter(ids, dtype=np.uint64)))
            pmap = pos_maps[step.rank] = {int(s.node_ids[p]): int(p) for p in sel}
        pos = pmap.get(step.node_id)
        if pos is None:
            continue
        row = row_of.get((step.rank, int(s.resource[pos])))
        if row is None:
            continue
        rows.append(row)
        lo.append(step.start_ns)
        hi.append(step.end_ns)
        labels.append(f"critical path: r{step.rank} {step.name} ({step.category})")
    if rows:
        _add_spans(
            go,
            fig,
            "critical path",
            CRITICAL_COLOUR,
            np.asarray(rows, dtype=np.float64),
            np.asarray(lo),
            np.asarray(hi),
            labels,
            width=3,
            offset=-0.33,
        )


__all__ = ["timeline_figure", "timeline_ranks"]
