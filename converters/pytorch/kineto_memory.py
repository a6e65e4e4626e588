"""Measured memory of a capture: the PyTorch profiler's allocation events, the peak and what held it.

With ``profile_memory=True`` the profiler writes one instant event (``ph`` ``i``, name ``[memory]``) per
allocation and free: ``args`` ``Bytes`` (negative for a free), ``Addr``, ``Total Allocated`` and ``Total
Reserved`` (the allocator's totals after the event), ``Device Type`` (c10: 0 CPU, 1 CUDA) and ``Device Id``
(PyTorch profiler docs, "profile_memory"; ``torch/csrc/profiler``).  On CUDA the totals are the caching
allocator's device totals, absolute.  On CPU they count only what was allocated while profiling was on, so
:func:`tracekit.capture.capture` records the bytes of tensors alive when the block began
(``tracekitMemory.baseline_allocated_bytes`` at the top level of the Kineto JSON, a key other readers
ignore) and the peak is that baseline plus the largest total.

:func:`memory_peaks` gives per device the peak, the op running at that moment and the live allocations at
the peak grouped by the op that made them: the innermost profiled op of the allocating thread, skipping
allocation helpers (``aten::empty*``, ``aten::zeros*``, ``aten::resize_``...), so the holder is the op whose
output the memory is (``aten::addmm``, ``aten::native_dropout``...).  Memory live before the capture
(``before the capture``: parameters, gradients, optimizer state) is its own holder.

A converted trace keeps the result as global-metadata attributes (:func:`memory_attrs`; Chakra readers
ignore attributes they do not know) rather than MEM_LOAD/MEM_STORE nodes, which simulators would run as
memory traffic; :func:`peaks_from_metadata` reads them back for ``tracekit analyze`` on a trace set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from tracekit.errors import TraceFormatError
from tracekit.model import Attr

#: The Kineto event name of an allocation or free.
MEMORY_EVENT = "[memory]"
#: Top-level key of a capture's Kineto JSON holding what tracekit.capture measured itself.
CAPTURE_KEY = "tracekitMemory"
#: Holder name of the memory live when the capture began.
BEFORE_CAPTURE = "before the capture"
#: Ops that only allocate for their caller: an allocation inside them belongs to the enclosing op.
ALLOCATION_HELPERS = ("aten::empty", "aten::zeros", "aten::ones", "aten::resize_", "aten::new_", "aten::full")
#: Holders listed per device (the largest).
TOP_HOLDERS = 8


@dataclass(frozen=True, slots=True)
class MemoryEvent:
    """One ``[memory]`` event: ``nbytes`` (negative: a free) at ``addr``, ``total_allocated_bytes`` after it."""

    index: int
    ts_ns: int
    pid: Any
    tid: Any
    addr: int
    nbytes: int
    total_allocated_bytes: int
    device: str


def device_name(device_type: int, device_id: int) -> str:
    """``cpu``, ``cuda:N``, or ``type{T}:N`` for another c10 device type."""
    if device_type == 0:
        return "cpu"
    return f"{'cuda' if device_type == 1 else f'type{device_type}'}:{device_id}"


def memory_event(e: Mapping[str, Any], index: int, ts_ns: int, path: str | None) -> MemoryEvent:
    """The :class:`MemoryEvent` of a raw ``[memory]`` instant event (``traceEvents[index]``).

    Raises:
        TraceFormatError: ``Bytes``, ``Total Allocated`` or ``Device Type`` missing or not an integer (names
            the event index and the value).
    """
    args = e.get("args")
    args = args if isinstance(args, Mapping) else {}
    values = []
    for key in ("Bytes", "Total Allocated", "Device Type"):
        v = args.get(key)
        if isinstance(v, bool) or not isinstance(v, int):
            raise TraceFormatError(f"traceEvents[{index}] ('[memory]'): args {key!r} must be an integer, got {v!r}")
        values.append(v)
    device_id = args.get("Device Id", 0)
    addr = args.get("Addr", 0)
    return MemoryEvent(
        index,
        ts_ns,
        e.get("pid"),
        e.get("tid"),
        addr if isinstance(addr, int) else 0,
        values[0],
        values[1],
        device_name(values[2], device_id if isinstance(device_id, int) else 0),
    )


def capture_baseline(top: Mapping[str, Any], path: str | None) -> dict[str, int]:
    """``tracekitMemory.baseline_allocated_bytes`` of a Kineto document: ``{device: bytes}`` (empty if absent).

    Raises:
        TraceFormatError: the key holds something other than an object of non-negative integers.
    """
    block = top.get(CAPTURE_KEY)
    if block is None:
        return {}
    base = block.get("baseline_allocated_bytes") if isinstance(block, Mapping) else None
    if not isinstance(base, Mapping) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in base.values()
    ):
        raise TraceFormatError(
            f"{CAPTURE_KEY!r} must hold 'baseline_allocated_bytes': {{device: bytes}}, got {block!r:.120}", path=path
        )
    return {str(k): int(v) for k, v in base.items()}


@dataclass(frozen=True)
class MemoryPeak:
    """The measured peak of one device of one rank.

    Attributes:
        device: ``cpu``, ``cuda:0`` ...
        peak_allocated_bytes: the allocator's largest total, plus the capture's baseline on CPU.
        baseline_bytes: memory live before the capture (CPU: measured by the capture; CUDA: the part of the
            total not allocated during it).
        peak_time_ns: when the peak was reached (the trace's clock).
        during: the op running at the peak (``-`` outside any op).
        held_by: ``((holder, bytes), ...)`` largest first: :data:`BEFORE_CAPTURE` and the ops whose
            allocations were live at the peak (at most :data:`TOP_HOLDERS`; the rest as ``other ops``).
        events: allocation and free events of the device.
    """

    device: str
    peak_allocated_bytes: int
    baseline_bytes: int
    peak_time_ns: int
    during: str
    held_by: tuple[tuple[str, int], ...]
    events: int


def _is_helper(name: str) -> bool:
    return name.startswith(ALLOCATION_HELPERS)


def _owners(events: Sequence[MemoryEvent], host_ops: Iterable[Any]) -> dict[int, str]:
    """``{event index: the innermost op (not an allocation helper) running on its thread at its time}``, ``-``
    outside any op: one sweep per thread over the ops by start with a stack of the ops still running."""
    ops: dict[tuple[Any, Any], list[Any]] = {}
    for op in host_ops:
        ops.setdefault((op.pid, op.tid), []).append(op)
    mine: dict[tuple[Any, Any], list[MemoryEvent]] = {}
    for e in events:
        mine.setdefault((e.pid, e.tid), []).append(e)
    out: dict[int, str] = {}
    for key, evs in mine.items():
        thread_ops = sorted(ops.get(key, ()), key=lambda o: (o.start_ns, -o.duration_ns))
        stack: list[Any] = []
        i = 0
        for e in sorted(evs, key=lambda e: (e.ts_ns, e.index)):
            while i < len(thread_ops) and thread_ops[i].start_ns <= e.ts_ns:
                while stack and stack[-1].end_ns < thread_ops[i].start_ns:
                    stack.pop()
                stack.append(thread_ops[i])
                i += 1
            while stack and stack[-1].end_ns < e.ts_ns:
                stack.pop()
            out[e.index] = next(
                (o.name for o in reversed(stack) if o.end_ns >= e.ts_ns and not _is_helper(o.name)), "-"
            )
    return out


def memory_peaks(
    events: Sequence[MemoryEvent], host_ops: Iterable[Any], baseline: Mapping[str, int] | None = None
) -> tuple[MemoryPeak, ...]:
    """Per device, the :class:`MemoryPeak` of a rank's memory events (module docstring), devices sorted.

    Args:
        events: the rank's ``[memory]`` events.
        host_ops: its host ops (objects with ``pid``, ``tid``, ``name``, ``start_ns``, ``end_ns``,
            ``duration_ns``: Kineto ``cpu_op`` events).
        baseline: ``{device: bytes}`` live before the capture (:func:`capture_baseline`).
    """
    baseline = baseline or {}
    owner = _owners(events, host_ops)
    out = []
    for device in sorted({e.device for e in events}):
        mine = sorted((e for e in events if e.device == device), key=lambda e: (e.ts_ns, e.index))
        live: dict[int, tuple[int, str]] = {}
        best, best_live = None, {}
        for e in mine:
            if e.nbytes > 0:
                live[e.addr] = (e.nbytes, owner[e.index])
            else:
                live.pop(e.addr, None)
            if best is None or e.total_allocated_bytes > best.total_allocated_bytes:
                best, best_live = e, dict(live)
        if best is None:
            continue
        held: dict[str, int] = {}
        for nbytes, holder in best_live.values():
            held[holder] = held.get(holder, 0) + nbytes
        base = baseline.get(device, 0)
        before = base + max(best.total_allocated_bytes - sum(held.values()), 0)
        ranked = sorted(held.items(), key=lambda kv: (-kv[1], kv[0]))
        rows = [(BEFORE_CAPTURE, before)] if before else []
        rows += ranked[:TOP_HOLDERS]
        if len(ranked) > TOP_HOLDERS:
            rows.append(("other ops", sum(v for _, v in ranked[TOP_HOLDERS:])))
        out.append(
            MemoryPeak(
                device=device,
                peak_allocated_bytes=base + best.total_allocated_bytes,
                baseline_bytes=before,
                peak_time_ns=best.ts_ns,
                during=owner[best.index],
                held_by=tuple(rows),
                events=len(mine),
            )
        )
    return tuple(out)


def memory_attrs(peaks: Sequence[MemoryPeak]) -> list[Attr]:
    """Global-metadata attributes of a converted trace: one JSON string ``measured_memory`` (a list of the
    peaks' fields) and ``memory_peak_allocated_bytes`` (int64, the largest device peak); none without peaks."""
    if not peaks:
        return []
    doc = [
        {
            "device": p.device,
            "peak_allocated_bytes": p.peak_allocated_bytes,
            "baseline_bytes": p.baseline_bytes,
            "peak_time_ns": p.peak_time_ns,
            "during": p.during,
            "held_by": [list(h) for h in p.held_by],
            "events": p.events,
        }
        for p in peaks
    ]
    return [
        Attr("measured_memory", json.dumps(doc, sort_keys=True), "string_val"),
        Attr("memory_peak_allocated_bytes", max(p.peak_allocated_bytes for p in peaks), "int64_val"),
    ]


def trace_memory_attrs(kineto: Any) -> list[Attr]:
    """:func:`memory_attrs` of a parsed Kineto trace's ``[memory]`` events (its ``cpu_op`` events as the
    holders, its capture baseline); none when the capture recorded no allocations."""
    if not kineto.memory_events:
        return []
    return memory_attrs(memory_peaks(kineto.memory_events, kineto.of_category("cpu_op"), kineto.memory_baseline))


def peaks_from_metadata(metadata: Any) -> tuple[MemoryPeak, ...]:
    """The peaks a converted trace's ``measured_memory`` attribute holds (empty without one).

    Raises:
        TraceFormatError: the attribute is not the JSON :func:`memory_attrs` writes.
    """
    value = None
    for a in getattr(metadata, "attrs", ()) or ():
        if a.name == "measured_memory":
            value = a.value
    if value is None:
        return ()
    try:
        return tuple(
            MemoryPeak(
                device=str(d["device"]),
                peak_allocated_bytes=int(d["peak_allocated_bytes"]),
                baseline_bytes=int(d["baseline_bytes"]),
                peak_time_ns=int(d["peak_time_ns"]),
                during=str(d["during"]),
                held_by=tuple((str(n), int(b)) for n, b in d["held_by"]),
                events=int(d["events"]),
            )
            for d in json.loads(value)
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise TraceFormatError(f"metadata 'measured_memory' is not tracekit's peak list: {exc}") from None


__all__ = [
    "ALLOCATION_HELPERS",
    "BEFORE_CAPTURE",
    "CAPTURE_KEY",
    "MEMORY_EVENT",
    "MemoryEvent",
    "MemoryPeak",
    "capture_baseline",
    "device_name",
    "memory_attrs",
    "memory_event",
    "memory_peaks",
    "peaks_from_metadata",
    "trace_memory_attrs",
]
