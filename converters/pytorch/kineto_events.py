"""Kineto's vocabulary and values: normalized categories, exact microsecond -> nanosecond times, typed events.

The values :mod:`.kineto_reader` builds from one Kineto file (it re-exports every public name here):
:class:`KinetoEvent` (complete ``X`` events), :class:`FlowEvent`, :class:`ProcessGroupConfig` and
:class:`KinetoTrace`.  Time: Chrome-trace ``ts``/``dur`` are microseconds (Chrome Trace Event Format spec,
"JSON Object Format"); :func:`us_to_ns` turns ints, floats and decimal text into exact integer ns.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = [
    "CATEGORY_ALIASES",
    "DEVICE_CATEGORIES",
    "FlowEvent",
    "KinetoEvent",
    "KinetoTrace",
    "ProcessGroupConfig",
    "normalize_category",
    "us_to_ns",
]

# Old (pre-schemaVersion libkineto) category spellings -> current ones.
CATEGORY_ALIASES: Mapping[str, str] = {
    "Kernel": "kernel",
    "Runtime": "cuda_runtime",
    "Driver": "cuda_driver",
    "Operator": "cpu_op",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "User annotation": "user_annotation",
    "user annotation": "user_annotation",
    "gpu_user_annotation": "gpu_user_annotation",
    "GPU user annotation": "gpu_user_annotation",
    "Python": "python_function",
    "python_function": "python_function",
    "Trace": "Trace",
    "cpu_instant_event": "cpu_instant_event",
    "Instant": "cpu_instant_event",
}

#: Categories of work executed on an accelerator (timeline of a device stream).
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})

_KNOWN_ARG_KEYS_EXTERNAL = ("External id", "external id")


def normalize_category(cat: Any) -> str:
    """The current libkineto name of category ``cat`` (``""`` when absent).

    Unknown categories are returned unchanged (e.g. ``mtia_runtime``,
    ``cuda_sync``), so that later stages can decide what to do with them.
    """
    if cat is None:
        return ""
    cat = str(cat)
    alias = CATEGORY_ALIASES.get(cat)
    if alias is not None:
        return alias
    return cat


# ----------------------------------------------------------------------------- time
_DECIMAL = re.compile(r"\s*([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?\s*\Z")


def _decimal_text_to_ns(text: str) -> int | None:
    """Exact ``round(value_us * 1000)`` of a decimal string (half away from zero); None if not decimal."""
    m = _DECIMAL.match(text)
    if m is None:
        return None
    sign, int_part, frac_part, exp = m.groups()
    frac_part = frac_part or ""
    if not int_part and not frac_part:
        return None
    digits = int((int_part or "") + frac_part or "0")
    # value_us = digits * 10**(exp - len(frac)); value_ns = that * 10**3
    shift = (int(exp) if exp else 0) - len(frac_part) + 3
    if shift >= 0:
        ns = digits * 10**shift
    else:
        q, r = divmod(digits, 10**-shift)
        ns = q + (1 if 2 * r >= 10**-shift else 0)
    return -ns if sign == "-" else ns


def us_to_ns(value: Any) -> int:
    """Microseconds (int, float or decimal string) -> exact integer nanoseconds.

    Floats are converted through their shortest round-trip decimal text
    (Python ``repr``), which gives back the text Kineto wrote whenever
    ``|value| < 2**43`` µs (a double's spacing there is below 1 ns);
    :func:`read_kineto` re-parses files with larger float timestamps so that
    their values arrive with their original text.  Sub-nanosecond digits round
    half away from zero.

    Raises:
        ValueError: NaN, infinity, a bool, None or a non-numeric string.
    """
    kind = type(value)
    if kind is int:
        return value * 1000
    if kind is _ExactFloat:
        ns = _decimal_text_to_ns(value.text)
    elif kind is float:
        if not math.isfinite(value):
            raise ValueError(f"non-finite time {value!r}")
        if value.is_integer():
            return int(value) * 1000
        ns = _decimal_text_to_ns(repr(value))
    elif kind is str:
        ns = _decimal_text_to_ns(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        return int(value) * 1000
    else:
        raise ValueError(f"time must be a number of microseconds, got {value!r}")
    if ns is None:
        raise ValueError(f"time must be a number of microseconds, got {value!r}")
    return ns


# ----------------------------------------------------------------------------- values
@dataclass(frozen=True, slots=True)
class ProcessGroupConfig:
    """One process group from Kineto ``distributedInfo.pg_config``.

    Attributes:
        pg_name: the group's name as the collectives reference it (``"0"`` = default group).
        ranks: global ranks in the group; empty when the file does not list them.
        pg_size: number of ranks (from ``pg_size``, else ``len(ranks)``; 0 if unknown).
        pg_desc: description (``default_pg``, ``undefined``...), ``""`` if absent.
        backend_config: e.g. ``cuda:nccl``, ``""`` if absent.
    """

    pg_name: str
    ranks: tuple[int, ...] = ()
    pg_size: int = 0
    pg_desc: str = ""
    backend_config: str = ""


@dataclass(frozen=True, slots=True, eq=False)
class KinetoEvent:
    """One complete (``ph`` ``X``) Kineto event.

    Attributes:
        index: position of the event in the file's ``traceEvents`` (stable identity).
        category: normalized category (see :func:`normalize_category`).
        name: event name (operator, runtime call, kernel name...).
        pid, tid: process and thread (for device events: device and stream lane);
            ints in practice, strings for synthetic rows such as ``"Spans"``.
        start_ns: start time, integer ns on the file's clock.
        duration_ns: duration, integer ns (>= 0).
        correlation: ``args.correlation`` (runtime call <-> device activity), or None.
        external_id: ``args["External id"]`` (``"external id"`` in old files), or None.
        rf_id: ``args["Record function id"]`` (equals ET ``rf_id``), or None.
        args: the raw ``args`` object (read only by convention).
    """

    index: int
    category: str
    name: str
    pid: int | str
    tid: int | str
    start_ns: int
    duration_ns: int
    correlation: int | None = None
    external_id: int | None = None
    rf_id: int | None = None
    args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def end_ns(self) -> int:
        """End time, integer ns on the file's clock: ``start_ns + duration_ns``."""
        return self.start_ns + self.duration_ns

    @property
    def is_device(self) -> bool:
        """True for work executed on a device stream (kernel, memcpy, memset)."""
        return self.category in DEVICE_CATEGORIES

    @property
    def stream(self) -> int | None:
        """Device stream of a device event (``args.stream``, else the ``tid`` lane), or None."""
        s = self.args.get("stream")
        if isinstance(s, int) and not isinstance(s, bool):
            return s
        if self.is_device and isinstance(self.tid, int):
            return self.tid
        return None

    @property
    def device(self) -> int | None:
        """Device index of a device event (``args.device``, else ``pid``), or None."""
        d = self.args.get("device")
        if isinstance(d, int) and not isinstance(d, bool):
            return d
        if self.is_device and isinstance(self.pid, int):
            return self.pid
        return None


@dataclass(frozen=True, slots=True)
class FlowEvent:
    """One flow event (``ph`` ``s`` start, ``f`` finish, ``t`` step).

    Kineto draws ``ac2g`` (CPU launch -> GPU activity; ``async_gpu`` in old files)
    and ``fwdbwd`` (forward op -> backward op) flows.  Flows are decorations: the
    converter links through ids, and unbalanced flows are tolerated.

    Attributes:
        phase: ``"s"``, ``"f"`` or ``"t"``.
        flow_id: the ``id`` that pairs a flow's start and finish.
        category: the flow's ``cat`` (``ac2g``, ``fwdbwd``...).
        pid, tid: the lane of the event the flow point binds to.
        ts_ns: the flow point's time, integer ns on the file's clock (from ``ts`` in µs).
    """

    phase: str
    flow_id: int | str
    category: str
    pid: int | str
    tid: int | str
    ts_ns: int


@dataclass(frozen=True, slots=True, eq=False)
class KinetoTrace:
    """One Kineto file, parsed.

    Attributes:
        path: the file it came from (for messages), or None.
        events: complete events, in file order.
        flows: flow events, in file order.
        schema_version: ``schemaVersion`` (None in old files).
        rank, world_size, backend: from ``distributedInfo`` (None when absent).
        process_groups: ``distributedInfo.pg_config`` entries.
        device_properties: ``deviceProperties`` entries (raw dicts).
        base_time_ns: ``baseTimeNanoseconds`` (None when absent).
        process_names, thread_names: from ``M`` events, keyed by pid and (pid, tid).
        n_raw_events: number of entries in ``traceEvents`` (all phases).
        memory_events: ``[memory]`` allocation events (:class:`.kineto_memory.MemoryEvent`), file order.
        memory_baseline: ``{device: bytes}`` live before a tracekit capture began (:mod:`.kineto_memory`).
    """

    path: str | None
    events: tuple[KinetoEvent, ...]
    flows: tuple[FlowEvent, ...] = ()
    schema_version: int | None = None
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    process_groups: tuple[ProcessGroupConfig, ...] = ()
    device_properties: tuple[Mapping[str, Any], ...] = ()
    base_time_ns: int | None = None
    process_names: Mapping[Any, str] = field(default_factory=dict)
    thread_names: Mapping[tuple[Any, Any], str] = field(default_factory=dict)
    n_raw_events: int = 0
    memory_events: tuple[Any, ...] = ()
    memory_baseline: Mapping[str, int] = field(default_factory=dict)

    def of_category(self, *categories: str) -> list[KinetoEvent]:
        """Events whose normalized category is one of ``categories``, in file order."""
        wanted = frozenset(categories)
        return [e for e in self.events if e.category in wanted]

    def category_counts(self) -> dict[str, int]:
        """Number of complete events per normalized category."""
        counts: dict[str, int] = {}
        for e in self.events:
            counts[e.category] = counts.get(e.category, 0) + 1
        return counts


# Files whose float timestamps exceed this are re-parsed keeping each float's text (kineto_reader).
# A double holds every 3-decimal (ns) value exactly below 2**43 µs (ulp 2**-10 < 0.001);
# above it, distinct ns values can share one double.
_EXACT_FLOAT_LIMIT_US = 2.0**43


class _ExactFloat(float):
    """A float that remembers the decimal text it was parsed from."""

    __slots__ = ("text",)
    text: str


def _exact_float(text: str) -> float:
    if sum(c.isdigit() for c in text) > 15:
        value = _ExactFloat(text)
        value.text = text
        return value
    return float(text)
