"""Peak memory per rank class for people: the table ``generate llm`` and ``replay`` print, and its verdict line.

The numbers come from :func:`tracekit.workloads.memory.memory_report` (a JSON-ready dict); this module only
renders it.  Sizes are GiB (2^30 bytes), as ``nvidia-smi`` and ``torch.cuda.memory_summary`` print them.
"""

from __future__ import annotations

from typing import Any

GIB = float(1 << 30)


def gib(nbytes: float) -> str:
    """``nbytes`` in GiB with one decimal (``74.0 GiB``)."""
    return f"{nbytes / GIB:,.1f} GiB"


def _num(nbytes: float) -> str:
    """``nbytes`` in GiB, one decimal, no unit (the table's title gives it)."""
    return f"{nbytes / GIB:,.1f}"


def device_memory_of(hw: str | None) -> tuple[str, int] | None:
    """``(device key, memory bytes)`` of a replayer spec's device (``--hw``, matched to ``tracekit/costs/devices.toml``
    by name), or None without one or when no entry there records its memory.

    Raises:
        SpecError: an unknown preset or an invalid spec file.
    """
    if hw is None:
        return None
    from tracekit.costs.devices import device_model
    from tracekit.replayer.simulation.specs import load_spec

    device = device_model(load_spec(hw))  # the devices.toml entry of the spec's device, with its memory
    if not device.memory_bytes:
        return None
    return device.key, int(device.memory_bytes)


def verdict(report: dict[str, Any], device: str | None) -> str:
    """One line: the largest peak and whether every class fits (``OOM: ... short by N GiB``)."""
    rows = report["classes"]
    worst = max(rows, key=lambda r: r["device_bytes"])
    need = f"peak {gib(worst['device_bytes'])} per rank (stage {worst['stage']})"
    if report["fits"] is None:
        return f"memory: {need}; give --hw for a device to check it against"
    total = gib(report["device_memory_bytes"])
    if report["fits"]:
        least = min(r["headroom_bytes"] for r in rows)
        return f"memory: fits on {device} ({total}): {need}, at least {gib(least)} free on every rank"
    short = [r for r in rows if not r["fits"]]
    return (
        f"memory: OOM on {device} ({total}): {need} is {gib(-worst['headroom_bytes'])} more than the device "
        f"holds; {len(short)} of {len(rows)} rank classes do not fit"
    )


def render_memory(console: Any, report: dict[str, Any], device: str | None) -> None:
    """Print the per-class table and the verdict line of a :func:`~tracekit.workloads.memory.memory_report`."""
    from rich.table import Table

    title = "peak memory per rank class, GiB (model states + activations + buffers + 5 % allocator margin + runtime)"
    table = Table(title=title)
    cols = ("stage", "ranks", "layers", "in flight", "params", "grads", "optimizer", "activations", "other", "peak")
    for col in (*cols, "headroom" if report["fits"] is not None else ""):
        if col:
            table.add_column(col, justify="right")
    for row in report["classes"]:
        t = row["terms"]
        other = t["working"] + t["comm_buffers"] + t["allocator_margin"] + t["runtime"]
        cells = [
            str(row["stage"]),
            f"{row['ranks']:,}",
            str(row["layers"]),
            f"{row['micro_batches_in_flight']:g}",
            *(_num(t[k]) for k in ("params", "grads", "optimizer", "activations")),
            _num(other),
            _num(row["device_bytes"]),
        ]
        if row["fits"] is not None:
            cells.append(_num(row["headroom_bytes"]) if row["fits"] else f"OOM {_num(row['headroom_bytes'])}")
        table.add_row(*cells)
    console.print(table)
    console.print(verdict(report, device), soft_wrap=True)


def render_replay_memory(console: Any, memory: dict[str, Any] | None) -> None:
    """:func:`render_memory` of a replay result's ``memory`` (:mod:`tracekit.replayer.results.memory`); nothing
    when the replayed traces carry no generator configuration."""
    if memory is not None:
        render_memory(console, memory, memory.get("device"))
