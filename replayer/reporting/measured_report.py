"""Rendering the replay-vs-measured comparison (:mod:`.measured`): text rows, JSON and a small HTML page."""

from __future__ import annotations

import html
import math
import os

import orjson

from tracekit.fmt import fmt_ms
from tracekit.io import write_bytes_atomic
from tracekit.replayer.results.measured import MeasuredComparison
from tracekit.replayer.reporting.overlap_report import overlap_html

__all__ = ["comparison_html", "rank_label", "write_comparison_html", "write_comparison_json"]


_ms = fmt_ms


def rank_label(rank: int) -> str:
    """How a comparison row's rank is shown: the rank number, or ``all ranks`` for a job row (rank -1).

    A job row (:func:`tracekit.replayer.results.measured.check_replay`, multi-rank traces) measures a step from
    the last rank's start to the last rank's end; its rank field is -1 in the JSON.
    """
    return "all ranks" if rank < 0 else str(rank)


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:+.1f} %"


def write_comparison_json(comparison: MeasuredComparison, path: str | os.PathLike[str]) -> None:
    """Write the comparison as JSON (rows, notes, worst error; times in ns), atomically.

    Raises:
        TracekitError: ``path`` is an input of the running command, or cannot be written.
        OSError: the folder or temporary file cannot be created.
    """
    write_bytes_atomic(
        path, orjson.dumps(comparison.to_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    )


def comparison_html(comparison: MeasuredComparison, title: str = "Replay vs measured") -> str:
    """A self-contained HTML page: notes, one row per rank and step, each row's largest contributors, and the per
    rank compute/communication overlap (:func:`~tracekit.replayer.reporting.overlap_report.overlap_html`)."""
    out = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td.l{text-align:left}"
        ".bad{color:#b00}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for note in comparison.notes:
        out.append(f"<p>{html.escape(note)}</p>")
    out.append(
        "<table><tr><th>rank</th><th>step</th><th>measured</th><th>predicted</th><th>error</th>"
        "<th>measured from</th><th>largest start shifts (node: ms)</th></tr>"
    )
    for r in comparison.rows:
        cls = " class='bad'" if not math.isnan(r.error) and abs(r.error) > 0.05 else ""
        shifts = "; ".join(
            f"{html.escape(c.name[:40])} #{c.node_id}: {c.shift_ns / 1e6:+.3f}" for c in r.contributors[:3]
        )
        out.append(
            f"<tr><td>{rank_label(r.rank)}</td><td>{'-' if r.step is None else r.step}</td><td>{_ms(r.measured_ns)}</td>"
            f"<td>{_ms(r.predicted_ns)}</td><td{cls}>{_pct(r.error)}</td>"
            f"<td class='l'>{html.escape(r.source)}</td><td class='l'>{shifts}</td></tr>"
        )
    out.append("</table>")
    out.append(overlap_html(comparison.overlap))
    out.append("</body></html>")
    return "\n".join(out)


def write_comparison_html(comparison: MeasuredComparison, path: str | os.PathLike[str]) -> None:
    """Write :func:`comparison_html` to ``path`` atomically.

    Raises:
        TracekitError: ``path`` is an input of the running command, or cannot be written.
        OSError: the folder or temporary file cannot be created.
    """
    write_bytes_atomic(path, comparison_html(comparison).encode())
