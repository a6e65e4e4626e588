"""Rendering the per-rank compute/communication overlap of ``check-replay`` (:mod:`..results.overlap`)."""

from __future__ import annotations

import html
from typing import Any

from tracekit.replayer.results.overlap import MIN_SAMPLES, RankOverlap

__all__ = ["OVERLAP_COLUMNS", "overlap_cells", "overlap_html", "overlap_lines"]

#: Column titles of the overlap table (text and HTML alike).
OVERLAP_COLUMNS = (
    "rank",
    "overlap ms",
    "overlapped kernels",
    f"ops (>= {MIN_SAMPLES} each)",
    "measured extra ms",
    "model extra ms",
    "explained",
    "replay overlap ms",
    "model on replay ms",
)


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def overlap_cells(o: RankOverlap) -> tuple[str, ...]:
    """One rank's row of :data:`OVERLAP_COLUMNS` as text (ms with 3 decimals; ``-`` for unknown)."""
    explained = "-" if o.explained is None else f"{100 * o.explained:.0f}%"
    return (
        "all ranks" if o.rank < 0 else str(o.rank),
        _ms(o.measured_overlap_ns),
        f"{o.overlapped_kernels} of {o.compute_kernels}",
        str(len(o.ops)) if o.rank >= 0 else "-",
        _ms(o.measured_extra_ns) if o.ops or o.rank < 0 else "-",
        _ms(o.model_extra_ns),
        explained,
        _ms(o.replay_overlap_ns),
        _ms(o.replay_model_extra_ns),
    )


def overlap_lines(overlap: tuple[Any, ...]) -> list[str]:
    """The sentences the table needs: what the columns mean, ranks without device streams, the factor used."""
    if not overlap:
        return []
    no_device = [str(o.rank) for o in overlap if not o.device and o.rank >= 0]
    out = []
    if no_device:
        out.append(
            f"rank(s) {', '.join(no_device)}: no device streams (a CPU capture), so no compute/communication "
            f"device overlap to measure"
        )
    factors = {o.s_c for o in overlap if o.device}
    if factors:
        s_c = factors.pop() if len(factors) == 1 else None
        factor = "no overlap_compute_slowdown for the spec's device" if s_c is None else f"s_c = {s_c}"
        out.append(
            "overlap: time a compute and a communication kernel ran at once on the rank's device (measured "
            f"start/duration per stream); extra: overlapped instances' duration above their op's median "
            f"non-overlapped duration, ops with >= {MIN_SAMPLES} instances each way; model: interference "
            f"slowdown x overlap ({factor}); replay: the measured replay's overlap"
        )
    return out


def overlap_html(overlap: tuple[Any, ...]) -> str:
    """An HTML fragment: the overlap table (one row per rank with device nodes), its notes and each rank's ops."""
    if not overlap:
        return ""
    out = ["<h2>Compute/communication overlap</h2>"]
    out.extend(f"<p>{html.escape(line)}</p>" for line in overlap_lines(overlap))
    rows = [o for o in overlap if o.device]
    if rows:
        out.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in OVERLAP_COLUMNS) + "</tr>")
        out.extend("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in overlap_cells(o)) + "</tr>" for o in rows)
        out.append("</table>")
    for o in rows:
        if not o.ops:
            continue
        out.append(
            f"<h3>rank {o.rank}: measured slowdown under communication</h3><table><tr><th>op</th>"
            "<th>overlapped</th><th>alone</th><th>median overlapped us</th><th>median alone us</th>"
            "<th>measured ratio</th><th>model ratio</th></tr>"
        )
        for op in o.ops:
            model = "-" if op.model_ratio is None else f"{op.model_ratio:.3f}"
            out.append(
                f"<tr><td class='l'>{html.escape(op.name[:80])}</td><td>{op.overlapped}</td><td>{op.alone}</td>"
                f"<td>{op.median_overlapped_ns / 1e3:,.3f}</td><td>{op.median_alone_ns / 1e3:,.3f}</td>"
                f"<td>{op.measured_ratio:.3f}</td><td>{model}</td></tr>"
            )
        out.append("</table>")
    return "\n".join(out)
