"""Rich rendering of library results for people (tables on a console)."""

from __future__ import annotations

from typing import Any


def _fmt_ns(ns: float) -> str:
    """Nanoseconds for people: s, ms, us or ns with three decimals."""
    if ns >= 1e9:
        return f"{ns / 1e9:,.3f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:,.3f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:,.3f} us"
    return f"{ns:,.0f} ns"


def _fmt_bytes(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def render_summary(console: Any, summary: Any) -> None:
    """Print a :class:`tracekit.summary.TraceSetSummary` as tables."""
    from rich.table import Table

    head = Table(title=f"{summary.ranks} rank(s), {summary.nodes:,} nodes", show_header=True)
    for col in ("rank", "file", "version", "nodes", "data deps", "ctrl deps", "compute"):
        head.add_column(col, justify="right" if col not in ("file", "version") else "left")
    for s in summary.per_rank:
        head.add_row(str(s.rank), str(s.path or ""), s.version, f"{s.nodes:,}", f"{s.data_deps:,}",
                     f"{s.ctrl_deps:,}", _fmt_ns(s.compute_ns))
    console.print(head)
    types = Table(title="nodes by type", show_header=True)
    all_types = sorted({k for s in summary.per_rank for k in s.nodes_by_type})
    types.add_column("rank", justify="right")
    for t in all_types:
        types.add_column(t, justify="right")
    for s in summary.per_rank:
        types.add_row(str(s.rank), *[f"{s.nodes_by_type.get(t, 0):,}" for t in all_types])
    console.print(types)
    colls = sorted({k for s in summary.per_rank for k in s.comm_bytes_by_collective})
    if colls:
        ct = Table(title="communication: count / bytes", show_header=True)
        ct.add_column("rank", justify="right")
        for c in colls:
            ct.add_column(c, justify="right")
        for s in summary.per_rank:
            ct.add_row(str(s.rank), *[
                f"{s.collectives.get(c, 0) if c not in ('SEND', 'RECV') else '-'} / "
                f"{_fmt_bytes(s.comm_bytes_by_collective.get(c, 0))}" for c in colls])
        console.print(ct)
    if len(summary.process_groups) > 1:
        n_pg = len(summary.process_groups)
        pg = Table(title="process groups" + (f" (the first 50 of {n_pg:,}; --json lists all)" if n_pg > 50 else ""),
                   show_header=True)
        pg.add_column("pg_name")
        pg.add_column("ranks")
        for name, ranks in list(summary.process_groups.items())[:50]:
            text = ", ".join(map(str, ranks[:16])) + (f" ... ({len(ranks):,} ranks)" if len(ranks) > 16 else "")
            pg.add_row(name, text)
        console.print(pg)
