"""Rich rendering of library results for people (tables on a console)."""

from __future__ import annotations

from typing import Any

from tracekit.fmt import fmt_bytes as _fmt_bytes  # noqa: F401 - the one number formatter, re-exported
from tracekit.fmt import fmt_ns as _fmt_ns


#: send/recv columns of the communication table: counted by node type (``collectives`` counts collectives only)
_P2P = {"SEND": "COMM_SEND_NODE", "RECV": "COMM_RECV_NODE"}


def _summary_rows(summary: Any, top: int) -> tuple[list[tuple[str, Any]], int]:
    """Ranks whose summaries are equal but for rank and file share a row: ``([(ranks text, summary)], rows)``."""
    groups: dict[tuple, list] = {}
    for ranks, s in summary.rank_groups():
        key = (
            s.version,
            s.nodes,
            s.data_deps,
            s.ctrl_deps,
            s.compute_ns,
            tuple(sorted(s.nodes_by_type.items())),
            tuple(sorted(s.collectives.items())),
            tuple(sorted(s.comm_bytes_by_collective.items())),
        )
        groups.setdefault(key, [[], s])[0].extend(ranks)
    rows = [(rank_ranges(ranks, limit=3), s) for ranks, s in groups.values()]
    return rows[:top], len(rows)


def render_summary(console: Any, summary: Any, *, top: int = 16) -> None:
    """Print a :class:`tracekit.checks.summary.TraceSetSummary` as tables.

    Ranks with equal summaries share a row (their files: the first one);
    at most ``top`` rows per table.
    """
    from rich.table import Table

    rows, distinct = _summary_rows(summary, top)
    title = f"{summary.ranks} rank(s), {summary.nodes:,} nodes"
    if distinct < len(summary.per_rank):
        title += f" ({distinct} distinct)"
    if distinct > len(rows):
        title += f": the first {len(rows)} rows (--top N for more)"
    head = Table(title=title, show_header=True)
    for col in ("rank", "file", "version", "nodes", "data deps", "ctrl deps", "compute"):
        head.add_column(col, justify="right" if col not in ("file", "version") else "left")
    for ranks, s in rows:
        head.add_row(
            ranks,
            str(s.path or ""),
            s.version,
            f"{s.nodes:,}",
            f"{s.data_deps:,}",
            f"{s.ctrl_deps:,}",
            _fmt_ns(s.compute_ns),
        )
    console.print(head)
    types = Table(title="nodes by type", show_header=True)
    all_types = sorted({k for _, s in rows for k in s.nodes_by_type})
    types.add_column("rank", justify="right")
    for t in all_types:
        types.add_column(t, justify="right")
    for ranks, s in rows:
        types.add_row(ranks, *[f"{s.nodes_by_type.get(t, 0):,}" for t in all_types])
    console.print(types)
    colls = sorted({k for _, s in rows for k in s.comm_bytes_by_collective})
    if colls:
        ct = Table(title="communication: count / bytes", show_header=True)
        ct.add_column("rank", justify="right")
        for c in colls:
            ct.add_column(c, justify="right")
        for ranks, s in rows:
            ct.add_row(
                ranks,
                *[
                    f"{s.collectives.get(c, 0) if c not in _P2P else s.nodes_by_type.get(_P2P[c], 0):,} / "
                    f"{_fmt_bytes(s.comm_bytes_by_collective.get(c, 0))}"
                    for c in colls
                ],
            )
        console.print(ct)
    groups = summary.rank_groups()
    if any(s.steps for _, s in groups):
        st = Table(title="steps (measured ProfilerStep#N duration)", show_header=True)
        st.add_column("rank", justify="right")
        st.add_column("steps", justify="left")
        for ranks, s in groups:
            steps = ", ".join(f"{k.split('#')[1]}: {_fmt_ns(v)}" for k, v in s.steps.items()) or "-"
            st.add_row(rank_ranges(list(ranks), limit=3), steps)
        console.print(st)
    if len(summary.process_groups) > 1:
        pg = Table(
            title=f"process groups ({len(summary.process_groups)}"
            f"{f'; the first {top}' if len(summary.process_groups) > top else ''})",
            show_header=True,
        )
        pg.add_column("pg_name")
        descs = summary.process_group_descs
        if descs:
            pg.add_column("pg_desc")
        pg.add_column("ranks")
        for name, ranks in list(summary.process_groups.items())[:top]:
            text = ", ".join(map(str, ranks[:16])) + (f" ... ({len(ranks):,} ranks)" if len(ranks) > 16 else "")
            pg.add_row(name, descs.get(name, ""), text) if descs else pg.add_row(name, text)
        console.print(pg)
    render_cost_coverage(console, summary, top=top)


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{100.0 * x:.1f}%"


def render_cost_coverage(console: Any, summary: Any, *, top: int = 16) -> None:
    """Print the FLOPs/bytes coverage of compute per rank (:class:`tracekit.checks.summary.CostCoverage`); ranks with
    equal coverage share a row (a 4,096-rank class set printed 4,096 rows), at most ``top`` rows."""
    from rich.table import Table

    groups: dict[Any, list] = {}
    for ranks, s in summary.rank_groups():
        if s.cost is not None:
            groups.setdefault(s.cost, [[], s])[0].extend(ranks)
    if not groups:
        return
    rows = list(groups.values())
    title = "compute with a cost (FLOPs/bytes)"
    if len(rows) > top:
        title += f": the first {top} of {len(rows)} rows (--top N for more)"
    table = Table(title=title, show_header=True)
    for col in ("rank", "device", "side", "nodes with cost", "measured time with cost", "FLOPs"):
        table.add_column(col, justify="left" if col in ("device", "side") else "right")
    for ranks, s in rows[:top]:
        c = s.cost
        table.add_row(
            rank_ranges(ranks, limit=3),
            c.compute_device or "-",
            c.side,
            f"{c.costed_nodes:,}/{c.comp_nodes:,} ({_share(c.node_share)})",
            f"{_fmt_ns(c.costed_ns)}/{_fmt_ns(c.compute_ns)} ({_share(c.time_share)})",
            fmt_flops(c.total_flops),
        )
    console.print(table)


def fmt_flops(flops: float) -> str:
    """A FLOP count in the largest SI unit that keeps it >= 1: ``"2,338.6 GFLOP"``, ``"3.5 MFLOP"``, ``"0"``
    (a CPU capture's few MFLOP printed as "0.0" GFLOP read as none)."""
    for scale, unit in ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP")):
        if flops >= scale:
            return f"{flops / scale:,.1f} {unit}"
    return f"{flops:,.0f}"


def rank_ranges(ranks: list[int], limit: int = 6) -> str:
    """Ranks as ranges for people: ``0-63, 128-191`` (at most ``limit`` ranges, then ``... (N ranks)``)."""
    ranks = sorted(ranks)
    spans: list[tuple[int, int]] = []
    for r in ranks:
        if spans and r == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], r)
        else:
            spans.append((r, r))
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans[:limit])
    if len(spans) > limit:
        text += f", ... ({len(ranks)} ranks)"
    return text
