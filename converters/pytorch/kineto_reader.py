"""Reading PyTorch profiler (Kineto) Chrome-trace JSON into typed, normalized events.

This module owns the Kineto *input format*: it turns one Kineto file (``.json``,
``.json.gz``, ``.tar.gz``; with or without ``schemaVersion``; top-level object or
bare event array) into a :class:`KinetoTrace` of :class:`KinetoEvent` values.
Nothing here builds graph nodes (see :mod:`.device_graph` and :mod:`.kineto_convert`).

What is normalized, so that later stages see one vocabulary:

* **Categories.**  Old libkineto layouts (2021/22, no ``schemaVersion``) used
  ``Kernel``, ``Runtime``, ``Driver``, ``Operator``, ``Memcpy``, ``Memset``,
  ``User annotation``; newer ones use ``kernel``, ``cuda_runtime``, ``cuda_driver``,
  ``cpu_op``, ``gpu_memcpy``, ``gpu_memset``, ``user_annotation``.  Every event gets
  the new name in :attr:`KinetoEvent.category` (the file's spelling is not kept).
* **Time.**  Chrome-trace ``ts``/``dur`` are microseconds (the ``displayTimeUnit``
  key only changes display; Chrome Trace Event Format spec, "JSON Object Format").
  Kineto writes integers (µs) or, since 2023, floats with three decimals (ns
  precision).  Both become exact integer nanoseconds: an int is multiplied by
  1000; a float is converted through its shortest round-trip decimal text
  (``repr``) with integer arithmetic, so ``1234.567`` gives exactly ``1234567``
  (``round(x * 1000)`` can be off by one at 1e12 µs magnitudes).
* **Ids.**  ``correlation`` (runtime call <-> GPU activity), ``External id``
  (spelled ``external id`` in old files; links GPU work and runtime calls to the
  CPU op that issued them) and ``Record function id`` (joins Kineto ops to ET
  ``rf_id``) become typed optional fields.
* **Run metadata.**  ``distributedInfo`` (rank, world_size, backend, pg_config)
  and ``deviceProperties``.

Flow events (``ph`` ``s``/``f``) are kept as :class:`FlowEvent`; they are optional
and may be unbalanced (ends without starts are common).  Instant (``i``) events
are ignored; metadata (``M``) events give process and thread names.

Errors: :class:`tracekit.errors.TraceFormatError` for a file that is not Kineto
JSON, has no ``traceEvents`` / zero events, an event with a missing, NaN or
infinite timestamp or duration, or a flow event without an integer or string
``id`` (every flow in ``../shared/real`` has an integer one); each message names
the file, the event index and the bad value.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

from tracekit.converters.pytorch import jsonload, kineto_events
from tracekit.converters.pytorch.kineto_events import (
    _EXACT_FLOAT_LIMIT_US,
    CATEGORY_ALIASES,
    DEVICE_CATEGORIES,
    FlowEvent,
    KinetoEvent,
    KinetoTrace,
    ProcessGroupConfig,
    _exact_float,
    normalize_category,
    us_to_ns,
)
from tracekit.converters.pytorch.kineto_memory import MEMORY_EVENT, MemoryEvent, capture_baseline, memory_event
from tracekit.errors import TraceFormatError
from tracekit.gc_pause import paused_gc
from tracekit.model import MAX_DURATION_NS, MAX_RANKS, MAX_TIME_NS, time_range_error

# The values are defined in kineto_events and re-exported here, where the converters have always found them.
__all__ = [
    *kineto_events.__all__,
    "iter_events_by_thread",
    "load_kineto_json",
    "paused_gc",
    "parse_kineto",
    "read_kineto",
]


# ----------------------------------------------------------------------------- loading
def _read_bytes(path: str) -> bytes:
    try:
        return jsonload.read_json_bytes(path)
    except OSError as exc:
        raise TraceFormatError(f"cannot read Kineto file: {exc.strerror or exc}", path=path) from None


def load_kineto_json(path: str | os.PathLike[str]) -> Any:
    """Load the JSON document of a Kineto file (``.json``, ``.json.gz``, ``.tar.gz``).

    Raises:
        TraceFormatError: unreadable file or invalid JSON, naming the file.
    """
    path = os.fspath(path)
    return jsonload.parse_json_bytes(_read_bytes(path), path=path)


def read_kineto(path: str | os.PathLike[str]) -> KinetoTrace:
    """Read and parse one Kineto trace file.

    Files whose float timestamps are too large for a double to hold their
    nanosecond digits (absolute µs since the epoch with three decimals, as
    written by newer Kineto) are parsed a second time with the standard library
    so that every timestamp keeps its exact decimal text.

    Raises:
        TraceFormatError: see :func:`parse_kineto` and :func:`load_kineto_json`.
    """
    path = os.fspath(path)
    data = _read_bytes(path)
    with paused_gc():
        doc = jsonload.parse_json_bytes(data, path=path)
        if _has_imprecise_floats(doc):
            doc = _parse_json_exact(data, path)
        return parse_kineto(doc, path=path)


def _has_imprecise_floats(doc: Any) -> bool:
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        return False
    limit = _EXACT_FLOAT_LIMIT_US
    for e in events:
        if type(e) is dict:
            ts = e.get("ts")
            if type(ts) is float and abs(ts) >= limit:
                return True
    return False


def _reject_constant(token: str) -> Any:
    raise ValueError(f"bare {token} is not valid JSON")


def _parse_json_exact(data: bytes, path: str) -> Any:
    import json

    try:
        return json.loads(data, parse_float=_exact_float, parse_constant=_reject_constant)
    except ValueError as exc:  # pragma: no cover - orjson accepted the same bytes
        raise TraceFormatError(f"invalid JSON: {exc}", path=path) from None


def _opt_int(value: Any) -> int | None:
    if value is None:
        return None
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


_SCALAR_KEYS = (
    ("pid", (int, str)),
    ("tid", (int, str)),
    ("cat", (str,)),
    ("name", (str,)),
    ("ph", (str,)),
    ("args", (dict,)),
)


def _check_event_types(e: dict, i: int, path: str | None, rank: int | None) -> None:
    """Fields used as keys or text must have their JSON type (an object as ``tid``, a list as ``cat``...)."""
    for key, types in _SCALAR_KEYS:
        value = e.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, types)):
            want = " or ".join({"int": "an integer", "str": "a string", "dict": "an object"}[t.__name__] for t in types)
            raise TraceFormatError(f"traceEvents[{i}]: {key!r} must be {want}, got {value!r:.80}", path=path, rank=rank)


def _process_groups(info: Mapping[str, Any], path: str | None) -> tuple[ProcessGroupConfig, ...]:
    groups = []
    configs = info.get("pg_config") or []
    if not isinstance(configs, list):
        raise TraceFormatError(f"distributedInfo.pg_config must be a list, got {configs!r:.80}", path=path)
    for i, pg in enumerate(configs):
        if not isinstance(pg, Mapping) or "pg_name" not in pg:
            raise TraceFormatError(f"distributedInfo.pg_config[{i}] has no pg_name: {pg!r:.120}", path=path)
        ranks_raw = pg.get("ranks") or ()
        if not isinstance(ranks_raw, (list, tuple)) or not all(
            isinstance(r, int) and not isinstance(r, bool) for r in ranks_raw
        ):
            raise TraceFormatError(
                f"distributedInfo.pg_config[{i}] (pg_name {pg['pg_name']!r}): ranks must be a list "
                f"of integers, got {ranks_raw!r:.120}",
                path=path,
            )
        ranks = tuple(ranks_raw)
        size = _opt_int(pg.get("pg_size"))
        groups.append(
            ProcessGroupConfig(
                pg_name=str(pg["pg_name"]),
                ranks=ranks,
                pg_size=size if size is not None else len(ranks),
                pg_desc=str(pg.get("pg_desc", "")),
                backend_config=str(pg.get("backend_config", "")),
            )
        )
    return tuple(groups)


def _document(doc: Any, path: str | None) -> tuple[list[Any], Mapping[str, Any]]:
    """The ``traceEvents`` list and the top-level object (empty for a bare event list)."""
    top: Mapping[str, Any]
    if isinstance(doc, list):
        raw_events, top = doc, {}
    elif isinstance(doc, Mapping):
        if "traceEvents" not in doc:
            raise TraceFormatError(
                f"not a Kineto trace: no 'traceEvents' key (keys: {', '.join(sorted(map(str, doc))[:8]) or 'none'})",
                path=path,
            )
        raw_events, top = doc["traceEvents"], doc
        if not isinstance(raw_events, list):
            raise TraceFormatError(f"'traceEvents' must be a list, got {type(raw_events).__name__}", path=path)
    else:
        raise TraceFormatError(f"not a Kineto trace: top-level JSON is a {type(doc).__name__}", path=path)
    if not raw_events:
        raise TraceFormatError("Kineto trace has zero events ('traceEvents' is empty)", path=path)
    return raw_events, top


def _distributed_info(top: Mapping[str, Any], path: str | None) -> tuple[Mapping[str, Any], int | None]:
    """``distributedInfo`` (empty when absent) and its rank, range-checked."""
    info = top.get("distributedInfo") or {}
    if not isinstance(info, Mapping):
        raise TraceFormatError(f"'distributedInfo' must be an object, got {info!r:.80}", path=path)
    rank = _opt_int(info.get("rank"))
    for key, value in (("rank", rank), ("world_size", _opt_int(info.get("world_size")))):
        if value is not None and not 0 <= value <= MAX_RANKS:
            raise TraceFormatError(f"distributedInfo.{key} {value} is out of range (0 to {MAX_RANKS:,})", path=path)
    return info, rank


def _complete_event(e: dict, i: int, path: str | None, rank: int | None) -> KinetoEvent:
    """``traceEvents[i]``, a complete (``X``) event, with exact ns times and typed ids."""
    name = e.get("name", "")
    try:
        start_ns = us_to_ns(e.get("ts"))
        duration_ns = us_to_ns(e.get("dur", 0))
    except ValueError as exc:
        raise TraceFormatError(f"traceEvents[{i}] ({name!r}): bad timestamp: {exc}", path=path, rank=rank) from None
    if duration_ns < 0:
        raise TraceFormatError(
            f"traceEvents[{i}] ({name!r}): negative duration {e.get('dur')!r} us", path=path, rank=rank
        )
    problem = time_range_error("dur", duration_ns, MAX_DURATION_NS) or time_range_error(
        "ts", abs(start_ns), MAX_TIME_NS
    )
    if problem:
        raise TraceFormatError(f"traceEvents[{i}] ({name!r}): {problem}"[:300], path=path, rank=rank)
    args = e.get("args")
    if args is None:
        args = {}
    elif type(args) is not dict:
        raise TraceFormatError(f"traceEvents[{i}] ({name!r}): 'args' is not an object", path=path, rank=rank)
    cat = e.get("cat")
    category = CATEGORY_ALIASES.get(cat, cat) if cat is not None else ""
    ext = args.get("External id")
    if ext is None:
        ext = args.get("external id")
    return KinetoEvent(
        index=i,
        category=category,
        name=str(name),
        pid=e.get("pid", 0),
        tid=e.get("tid", 0),
        start_ns=start_ns,
        duration_ns=duration_ns,
        correlation=_opt_int(args.get("correlation")),
        external_id=_opt_int(ext),
        rf_id=_opt_int(args.get("Record function id")),
        args=args,
    )


def _memory_ts_ns(e: dict[str, Any], i: int, path: str | None, rank: int | None) -> int:
    """The exact ns time of ``traceEvents[i]``, a ``[memory]`` instant event.

    Raises:
        TraceFormatError: a missing, non-numeric or out-of-range ``ts`` (names the event index).
    """
    try:
        ts_ns = us_to_ns(e.get("ts"))
    except ValueError as exc:
        raise TraceFormatError(f"traceEvents[{i}] ('[memory]'): bad timestamp: {exc}", path=path, rank=rank) from None
    problem = time_range_error("ts", abs(ts_ns), MAX_TIME_NS)
    if problem:
        raise TraceFormatError(f"traceEvents[{i}] ('[memory]'): {problem}"[:300], path=path, rank=rank)
    return ts_ns


def _flow_event(e: dict[str, Any], i: int, path: str | None, rank: int | None) -> FlowEvent:
    """``traceEvents[i]``, a flow (``s``/``f``/``t``) event.

    Raises:
        TraceFormatError: its ``id`` (which pairs a flow's start and finish) is missing or not an integer or a
            string, or its ``ts`` is bad or out of range.
    """
    flow_id = e.get("id")
    if isinstance(flow_id, bool) or not isinstance(flow_id, (int, str)):
        raise TraceFormatError(
            f"traceEvents[{i}] (flow, ph {e.get('ph')!r}): 'id' must be an integer or a string, got {flow_id!r:.80}",
            path=path,
            rank=rank,
        )
    try:
        ts_ns = us_to_ns(e.get("ts"))
    except ValueError as exc:
        raise TraceFormatError(
            f"traceEvents[{i}] (flow {e.get('id')!r}): bad timestamp: {exc}", path=path, rank=rank
        ) from None
    if abs(ts_ns) > MAX_TIME_NS:
        raise TraceFormatError(
            f"traceEvents[{i}] (flow {e.get('id')!r}): {time_range_error('ts', abs(ts_ns), MAX_TIME_NS)}"[:300],
            path=path,
            rank=rank,
        )
    return FlowEvent(
        phase=e["ph"],
        flow_id=flow_id,
        category=normalize_category(e.get("cat")),
        pid=e.get("pid", 0),
        tid=e.get("tid", 0),
        ts_ns=ts_ns,
    )


def parse_kineto(doc: Any, *, path: str | None = None) -> KinetoTrace:
    """Parse a loaded Kineto JSON document (dict with ``traceEvents``, or a bare event list).

    Returns:
        :class:`KinetoTrace`; ``ts``/``dur`` (µs, Chrome Trace Event Format) become exact integer ns.

    Raises:
        TraceFormatError: not a Kineto document, zero events, an event that is
            not an object or whose ``pid``/``tid``/``cat``/``name``/``ph``/``args``
            has the wrong JSON type, an event with a missing/NaN/infinite/negative
            ``ts`` or ``dur`` or one beyond the model's time range
            (``MAX_TIME_NS``, ``MAX_DURATION_NS``), a malformed
            ``distributedInfo`` (not an object, ``rank``/``world_size`` outside
            0..``MAX_RANKS``, a ``pg_config`` entry without ``pg_name`` or with
            non-integer ranks) or ``deviceProperties`` that is not a list (names
            the event index, its name and the value).
    """
    raw_events, top = _document(doc, path)
    info, rank = _distributed_info(top, path)
    events: list[KinetoEvent] = []
    flows: list[FlowEvent] = []
    process_names: dict[Any, str] = {}
    thread_names: dict[tuple[Any, Any], str] = {}
    memory: list[MemoryEvent] = []
    for i, e in enumerate(raw_events):
        if type(e) is not dict:
            raise TraceFormatError(f"traceEvents[{i}] is not an object: {e!r:.80}", path=path, rank=rank)
        _check_event_types(e, i, path, rank)
        ph = e.get("ph")
        if ph == "X":
            events.append(_complete_event(e, i, path, rank))
        elif ph in ("s", "f", "t"):
            flows.append(_flow_event(e, i, path, rank))
        elif ph == "M":
            args = e.get("args") or {}
            if e.get("name") == "process_name" and "name" in args:
                process_names[e.get("pid")] = str(args["name"])
            elif e.get("name") == "thread_name" and "name" in args:
                thread_names[(e.get("pid"), e.get("tid"))] = str(args["name"])
        elif ph == "i" and e.get("name") == MEMORY_EVENT:
            memory.append(memory_event(e, i, _memory_ts_ns(e, i, path, rank), path))
        # other instants, 'C' counters and other phases carry no work to convert.

    base = top.get("baseTimeNanoseconds")
    dev_props = top.get("deviceProperties") or []
    if not isinstance(dev_props, list):
        raise TraceFormatError(f"'deviceProperties' must be a list of objects, got {dev_props!r:.80}", path=path)
    return KinetoTrace(
        path=path,
        events=tuple(events),
        flows=tuple(flows),
        schema_version=_opt_int(top.get("schemaVersion")),
        rank=rank,
        world_size=_opt_int(info.get("world_size")),
        backend=str(info["backend"]) if info.get("backend") is not None else None,
        process_groups=_process_groups(info, path),
        device_properties=tuple(p for p in dev_props if isinstance(p, Mapping)),
        base_time_ns=_opt_int(base),
        process_names=process_names,
        thread_names=thread_names,
        n_raw_events=len(raw_events),
        memory_events=tuple(memory),
        memory_baseline=capture_baseline(top, path),
    )


def iter_events_by_thread(events: Iterable[KinetoEvent]) -> dict[tuple[Any, Any], list[KinetoEvent]]:
    """Group events by (pid, tid), each list sorted by (start_ns, longer first, file index); raises nothing."""
    lanes: dict[tuple[Any, Any], list[KinetoEvent]] = {}
    for e in events:
        lanes.setdefault((e.pid, e.tid), []).append(e)
    for lane in lanes.values():
        lane.sort(key=lambda e: (e.start_ns, -e.duration_ns, e.index))
    return lanes
