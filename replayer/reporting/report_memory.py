"""The "Memory per rank class" section of the replay report: a generated job's peak memory (issue 33).

Renders :attr:`tracekit.replayer.results.result.ReplayResult.memory` (the memory model's report,
:mod:`tracekit.replayer.results.memory`): one row per pipeline stage with its terms in GiB, the peak and the
headroom on the spec's device, each cell carrying its exact byte value (``data-key`` / ``data-value``).
"""

from __future__ import annotations

from typing import Any

from tracekit.replayer.reporting.html_page import cell, note, para, table

GIB = float(1 << 30)
TERMS = ("params", "grads", "optimizer", "activations", "working", "comm_buffers", "allocator_margin", "runtime")


def _gib(nbytes: int, key: str) -> Any:
    return cell(f"{nbytes / GIB:,.2f}", key, nbytes)


def memory_parts(memory: dict[str, Any]) -> list[str]:
    """The section's paragraphs and table (HTML strings) for :func:`~.report.build_report_html`."""
    device = memory.get("device")
    total = memory.get("device_memory_bytes") or 0
    rows: list[list[Any]] = []
    for row in memory["classes"]:
        s = row["stage"]
        cells: list[Any] = [str(s), f"{row['ranks']:,}", str(row["layers"]), f"{row['micro_batches_in_flight']:g}"]
        cells += [_gib(row["terms"][t], f"memory.{s}.{t}") for t in TERMS]
        cells.append(_gib(row["device_bytes"], f"memory.{s}.device_bytes"))
        if row["fits"] is not None:
            room = row["headroom_bytes"]
            cells.append(
                cell(f"{room / GIB:,.2f}" if row["fits"] else f"OOM {room / GIB:,.2f}", f"memory.{s}.headroom", room)
            )
        rows.append(cells)
    headers = ["stage", "ranks", "layers", "in flight", *TERMS, "peak"] + (
        ["headroom"] if memory["fits"] is not None else []
    )
    if memory["fits"] is None:
        verdict = "The spec's device records no memory size: peaks only."
    elif memory["fits"]:
        verdict = f"Every rank class fits in the {total / GIB:,.1f} GiB of {device}."
    else:
        short = sum(1 for r in memory["classes"] if not r["fits"])
        verdict = f"Out of memory: {short} of {len(rows)} rank classes exceed the {total / GIB:,.1f} GiB of {device}."
    return [
        para(
            "Peak device memory of each pipeline stage's ranks, GiB: model states by ZeRO stage, activations at "
            "the schedule's peak (Korthikanti et al. 2022), the recomputed layer, communication buffers, a "
            f"{100 * memory['allocator_margin']:g} % allocator margin and the runtime's reserve."
        ),
        note(f"{verdict} Source: {memory.get('source', 'memory model')}."),
        table(headers, rows, table_id="memory", left_columns=1),
    ]


__all__ = ["memory_parts"]
