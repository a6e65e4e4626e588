"""The measured run beside the replay: a report section (and a page) from a measured-trace analysis.

The analysis itself is made from Kineto files by
``tracekit.converters.pytorch.kineto_analysis`` (the CLI runs it; the
replayer never reads a producer's format) and arrives here as its
``to_dict()``.  The section shows per rank the measured window split into
compute, exposed communication and other idle (the replay's categories), the
time by kernel class (:mod:`tracekit.costs.kernels`), idle per stream, launch
overhead and the top kernels; next to a replay it adds the replay's time by the
same kernel classes, so measured and predicted sit side by side.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.costs.kernels import CLASSES, kernel_class

from tracekit.fmt import fmt_ns, fmt_pct
from tracekit.replayer.reporting.html_page import Page, cell, note, para, table

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.results.result import ReplayResult

_K_TIMED, _K_COLL = 0, 2


def replay_time_by_class(result: "ReplayResult") -> dict[str, int] | None:
    """Replayed time by kernel class, summed over ranks (ns): compute nodes by their name's class, transfers
    as ``comm``; None without a schedule with node names."""
    if result.schedule is None or any(s.names is None for s in result.schedule):
        return None
    out = dict.fromkeys(CLASSES, 0)
    for s in result.schedule:
        timed = np.flatnonzero(s.kind == _K_TIMED).tolist()
        dur = (s.end_ns - s.start_ns).tolist()
        names = s.names or ()
        for i in timed:
            out[kernel_class(names[i] if i < len(names) else "")] += int(dur[i])
        comm = (s.kind >= _K_COLL) & ~np.isnan(s.xfer_start_ns)
        out["comm"] += int(np.sum(s.end_ns[comm] - s.xfer_start_ns[comm]))
    return out


def measured_parts(measured: dict[str, Any], result: "ReplayResult | None" = None) -> list[str]:
    """HTML parts of the measured-run section (tables and notes)."""
    ranks = measured["ranks"]
    return [
        para(
            "From the run's own Kineto traces: each rank's window (first to last kernel, or leaf CPU op "
            "in a CPU-only run) split like the replay's ranks. A measured trace cannot tell waiting for "
            "peers from transferring: both count as exposed communication."
        ),
        _rank_table(ranks),
        _class_table(ranks, result),
        _stream_table(ranks),
        *_launch_table(ranks),
        *_kernel_table(ranks),
    ]


def _rank_table(ranks: list[dict[str, Any]]) -> str:
    """Each rank's window split into compute, exposed communication and other idle time."""
    rows = []
    for r in ranks:
        w = r["window_ns"]
        rows.append(
            [
                cell(r["rank"], f"measured.{r['rank']}.rank", r["rank"]),
                "GPU" if r["device"] else "CPU",
                cell(fmt_ns(w), f"measured.{r['rank']}.window_ns", w),
            ]
            + [
                cell(f"{fmt_ns(r[k])} ({fmt_pct(r[k], w)})", f"measured.{r['rank']}.{k}", r[k])
                for k in ("compute_ns", "exposed_comm_ns", "other_idle_ns")
            ]
            + [fmt_ns(r["comm_ns"]), fmt_ns(r["overlap_ns"])]
        )
    return table(
        ["rank", "work", "window", "compute", "exposed comm.", "other idle", "comm (all)", "comm overlapped"],
        rows,
        table_id="measured-ranks",
    )


def _class_table(ranks: list[dict[str, Any]], result: "ReplayResult | None") -> str:
    """Time per kernel class summed over ranks, beside the replay's when there is one."""
    measured_cls = {c: sum(r["time_by_class_ns"].get(c, 0) for r in ranks) for c in CLASSES}
    predicted = replay_time_by_class(result) if result is not None else None
    head = ["kernel class", "measured (sum over ranks)"] + (["replayed (sum over ranks)"] if predicted else [])
    cls_rows = [
        [c, cell(fmt_ns(measured_cls[c]), f"measured.class.{c}", measured_cls[c])]
        + ([cell(fmt_ns(predicted[c]), f"replayed.class.{c}", predicted[c])] if predicted else [])
        for c in CLASSES
    ]
    return table(head, cls_rows, table_id="measured-classes")


def _stream_table(ranks: list[dict[str, Any]]) -> str:
    """Busy and idle time of every stream / thread of every rank."""
    streams = [
        [
            r["rank"],
            s["name"],
            f"{s['events']:,}",
            fmt_ns(s["busy_ns"]),
            f"{fmt_ns(s['idle_ns'])} ({fmt_pct(s['idle_ns'], r['window_ns'])})",
        ]
        for r in ranks
        for s in r["streams"]
    ]
    return table(
        ["rank", "stream / thread", "events", "busy", "idle"], streams, table_id="measured-streams", left_columns=2
    )


def _launch_table(ranks: list[dict[str, Any]]) -> list[str]:
    """Kernel launches per rank (CPU time, delay); no part when no rank recorded launches."""
    launches = [
        [
            r["rank"],
            f"{r['launch']['launches']:,}",
            fmt_ns(r["launch"]["cpu_ns"]),
            fmt_ns(r["launch"]["delay_mean_ns"]),
            fmt_ns(r["launch"]["delay_max_ns"]),
        ]
        for r in ranks
        if r.get("launch")
    ]
    if not launches:
        return []
    return [
        table(
            ["rank", "launches", "launch CPU time", "launch delay (mean)", "launch delay (max)"],
            launches,
            table_id="measured-launch",
        )
    ]


def _kernel_table(ranks: list[dict[str, Any]]) -> list[str]:
    """The note and table of each rank's longest kernels."""
    kernels = [
        [r["rank"], k["name"][:120], k["kernel_class"], f"{k['count']:,}", fmt_ns(k["total_ns"]), fmt_ns(k["mean_ns"])]
        for r in ranks
        for k in r["top_kernels"]
    ]
    top = max((len(r["top_kernels"]) for r in ranks), default=0)
    return [
        note(f"Top kernels: the {top} longest (total time) per rank."),
        table(
            ["rank", "kernel", "class", "count", "total", "mean"], kernels, table_id="measured-kernels", left_columns=3
        ),
    ]


def write_measured_report(measured: dict[str, Any], path: str | os.PathLike[str], *, title: str | None = None) -> Path:
    """A self-contained page of a measured-run analysis alone, written atomically; returns the path.

    Raises:
        KeyError: ``measured`` is not a ``MeasuredAnalysis.to_dict()`` (no ``ranks``).
        TracekitError: ``path`` is an input of the running command, or cannot be written.
        OSError: the folder or temporary file cannot be created.
    """
    from tracekit.io import atomic_output

    n = len(measured["ranks"])
    page = Page(title or f"Measured run: {n} rank(s)", "tracekit analyze")
    page.section("Measured run", *measured_parts(measured), section_id="measured-section")
    with atomic_output(path, "w") as fh:
        fh.write(page.render())
    return Path(path)


__all__ = ["measured_parts", "replay_time_by_class", "write_measured_report"]
