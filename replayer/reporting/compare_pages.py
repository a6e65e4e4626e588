"""The HTML pages comparing replays: the diff of two replays and the sweep over one parameter.

One self-contained file each (see :mod:`.html_page`), written atomically; the single replay's report is in
:mod:`.report`, which re-exports these names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from tracekit.fmt import fmt_bytes, fmt_delta_ns, fmt_gbps, fmt_ns, fmt_ratio
from tracekit.replayer.reporting.html_page import Page, cell, note, para, table

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.reporting.diff import ResultDiff


def diff_tables(diff: "ResultDiff") -> list[tuple[str, list[str], list[list[Any]]]]:
    """``(heading, headers, rows)`` of a diff's tables, as text cells (shared by the HTML and the terminal)."""
    a, b = diff.a_label, diff.b_label
    cats = [
        [
            c.name,
            fmt_ns(c.a_ns),
            fmt_ns(c.b_ns),
            fmt_delta_ns(c.delta_ns),
            fmt_ratio(c.a_ns, c.b_ns),
            "yes" if c.changed else "no",
        ]
        for c in diff.categories
    ]
    colls = [
        [
            f"{c.kind} {fmt_bytes(c.comm_bytes)} pg {c.pg_name} ({c.group_size} ranks) #{c.occurrence}",
            fmt_ns(c.a_time_ns),
            fmt_ns(c.b_time_ns),
            fmt_delta_ns(c.delta_ns),
            f"{fmt_gbps(c.a_busbw_gbps)} -> {fmt_gbps(c.b_busbw_gbps)}",
            c.a_algorithm if c.a_algorithm == c.b_algorithm else f"{c.a_algorithm} -> {c.b_algorithm}",
        ]
        for c in diff.collectives
    ]
    nodes = [[_node_label(n), n.kind, fmt_ns(n.a_ns), fmt_ns(n.b_ns), fmt_delta_ns(n.delta_ns)] for n in diff.nodes]
    return [
        ("Time by category", ["category", a, b, "change", "ratio", "changed"], cats),
        (
            f"Collectives that moved most (of {diff.collectives_matched:,} matched)",
            ["collective", a, b, "change", "busbw", "algorithm"],
            colls,
        ),
        (f"Nodes that moved most (of {diff.nodes_matched:,} matched)", ["node", "kind", a, b, "change"], nodes),
    ]


def _node_label(n: Any) -> str:
    """``r0 aten::mm #3 (node 17)``: rank, op name, occurrence, the node ids in A and B when they differ."""
    ids = f"node {n.node_id}" if n.b_node_id in (None, n.node_id) else f"nodes {n.node_id} / {n.b_node_id}"
    if not n.name:
        return f"r{n.rank} {ids}"
    merged = f", {n.merged} merged" if n.merged > 1 else ""
    return f"r{n.rank} {n.name} #{n.occurrence} ({ids}{merged})"


def diff_headline(diff: "ResultDiff") -> str:
    """One sentence: the iteration time change and the categories that changed, with numbers."""
    it = diff.iteration
    changed = [c for c in diff.changed_categories() if c.name != "iteration time"]
    head = (
        f"Iteration time {fmt_ns(it.a_ns)} on {diff.a_label} -> {fmt_ns(it.b_ns)} on {diff.b_label} "
        f"({fmt_delta_ns(it.delta_ns)}, {fmt_ratio(it.a_ns, it.b_ns)})."
    )
    if not changed:
        return head + " No other category changed."
    parts = [f"{c.name} {fmt_ns(c.a_ns)} -> {fmt_ns(c.b_ns)} ({fmt_delta_ns(c.delta_ns)})" for c in changed]
    return head + " Changed: " + "; ".join(parts) + "."


def build_diff_html(diff: "ResultDiff", *, title: str | None = None) -> str:
    """The comparison page of :func:`tracekit.replayer.reporting.diff.diff_results`."""
    from tracekit.replayer.reporting.html_page import Cell
    from tracekit.replayer.reporting.plots import diff_figure

    page = Page(title or f"Replay comparison: {diff.a_label} vs {diff.b_label}", diff_headline(diff))
    fig = diff_figure(diff)
    for i, (heading, headers, rows) in enumerate(diff_tables(diff)):
        if i == 0:
            rows = [
                [
                    Cell(
                        str(x),
                        css="changed" if (j == 5 and x == "yes") else "",
                        key=f"category.{diff.categories[k].name}.delta_ns" if j == 3 else None,
                        value=diff.categories[k].delta_ns if j == 3 else None,
                    )
                    for j, x in enumerate(row)
                ]
                for k, row in enumerate(rows)
            ]
            page.section(heading, page.figure(fig.figure), table(headers, rows, table_id="categories"))
        elif rows:
            page.section(heading, table(headers, rows, left_columns=1))
        elif i == 1:
            page.section(heading, para("No collective moved.", "note"))
        else:
            page.section(
                heading,
                para("No node moved." if diff.nodes_matched else "Nodes were not compared (see the notes).", "note"),
            )
    if diff.notes:
        page.section("Notes", *[note(t) for t in diff.notes])
    return page.render()


def write_diff_report(diff: "ResultDiff", path: str | os.PathLike[str], **options: Any) -> Path:
    """Write :func:`build_diff_html` atomically; returns the path.

    Raises:
        TracekitError: ``path`` is an input of the running command, or cannot be written.
        OSError: the folder or temporary file cannot be created.
    """
    from tracekit.io import atomic_output

    with atomic_output(path, "w") as fh:
        fh.write(build_diff_html(diff, **options))
    return Path(path)


def build_sweep_html(rows: Sequence[tuple[Any, Any]], parameter: str, *, title: str | None = None) -> str:
    """A page with :func:`tracekit.replayer.reporting.plots.sweep_figure` and its table.

    ``rows``: ``[(parameter value, ReplayResult or its dict), ...]``.

    Raises:
        ReplayError: see :func:`tracekit.replayer.reporting.plots.sweep_points`.
    """
    from tracekit.replayer.reporting.plots import sweep_figure, sweep_points

    fig = sweep_figure(rows, parameter)
    points = sweep_points(rows)
    page = Page(title or f"Sweep over {parameter}", f"{len(points)} replays")
    body = [
        [
            cell(p.value, "sweep.value", p.value),
            cell(fmt_ns(p.iteration_time_ns), f"sweep.{i}.iteration_time_ns", p.iteration_time_ns),
            p.slowest_rank,
            fmt_ns(p.compute_ns),
            fmt_ns(p.exposed_comm_ns),
            fmt_ns(p.comm_wait_ns),
            fmt_ns(p.other_idle_ns),
        ]
        for i, p in enumerate(points)
    ]
    page.section(
        "Iteration time",
        note(fig.note),
        page.figure(fig.figure),
        table(
            [
                parameter,
                "iteration time",
                "slowest rank",
                "compute",
                "exposed comm.",
                "waiting for peers",
                "other idle",
            ],
            body,
            table_id="sweep",
        ),
    )
    return page.render()


def write_sweep_report(
    rows: Sequence[tuple[Any, Any]], parameter: str, path: str | os.PathLike[str], **options: Any
) -> Path:
    """Write :func:`build_sweep_html` atomically; returns the path.

    Raises:
        ReplayError: see :func:`tracekit.replayer.reporting.plots.sweep_points`.
        TracekitError: ``path`` is an input of the running command, or cannot be written.
        OSError: the folder or temporary file cannot be created.
    """
    from tracekit.io import atomic_output

    text = build_sweep_html(rows, parameter, **options)
    with atomic_output(path, "w") as fh:
        fh.write(text)
    return Path(path)


__all__ = [
    "build_diff_html",
    "build_sweep_html",
    "diff_headline",
    "diff_tables",
    "write_diff_report",
    "write_sweep_report",
]
