"""Process groups: how a trace declares which ranks form each communicator.

The declaration follows PyTorch's Execution Trace, which ASTRA-sim reads: a
METADATA node named ``process_group:init`` (PyTorch writes
``## process_group:init ##``) whose ``inputs.values`` holds a JSON list like::

    [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [], "group_size": 4, "group_count": 1}]

``ranks`` empty means all ranks.  A collective names its group in its
``pg_name`` attribute; no attribute, ``""`` and ``"0"`` mean the default
(all-ranks) group.  Files tracekit writes leave ``pg_name`` out for that group
and give the others positive integer names (ASTRA-sim's communicator ids; see
:mod:`tracekit.interop.astra`).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any, Mapping

import orjson

from tracekit.model.attrs import IS_CPU_OP
from tracekit.errors import ValidationError
from tracekit.model import Attr, IOInfo, Node, NodeType

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace

PG_INIT_NAME = "process_group:init"
DEFAULT_PG = "0"


def is_pg_init(node: Node) -> bool:
    """True for the METADATA node that declares process groups."""
    return PG_INIT_NAME in node.name and node.type in (NodeType.METADATA_NODE, NodeType.COMP_NODE, 0)


def canonical_pg_name(pg_name: str | None) -> str:
    """The group key a collective refers to: ``""``/None mean the default group ``"0"``."""
    return DEFAULT_PG if not pg_name else str(pg_name)


def pg_init_node(
    node_id: int,
    groups: Mapping[str, tuple[int, ...] | list[int]],
    descriptions: Mapping[str, str] | None = None,
    *,
    world_size: int | None = None,
) -> Node:
    """A METADATA node declaring ``groups`` (pg_name -> ranks; empty = all ranks).

    Entries have PyTorch ET's ``process_group:init`` fields (``pg_name``, ``pg_desc``, ``backend_config``,
    ``ranks``, ``group_size``, ``group_count``); ``descriptions`` (pg_name -> ``pg_desc``) fill ``pg_desc``
    ("" when absent).  A group of all ranks (``ranks`` empty) has ``group_size`` = ``world_size``, as PyTorch
    writes its default group (:func:`default_group_size` reads it back); 0 only when the world size is unknown
    (None).  The node is marked ``is_cpu_op`` so that ASTRA-sim completes it.
    """
    entries = []
    for name, ranks in groups.items():
        ranks = [int(r) for r in ranks]
        entries.append(
            {
                "pg_name": str(name),
                "pg_desc": (descriptions or {}).get(name, ""),
                "backend_config": "",
                "ranks": ranks,
                "group_size": len(ranks) if ranks else (world_size or 0),
                "group_count": len(groups),
            }
        )
    values = orjson.dumps(entries).decode()
    # is_cpu_op: ASTRA-sim never completes a METADATA node that is not a CPU op (see tracekit.interop.astra)
    return Node(
        id=node_id,
        name=PG_INIT_NAME,
        type=NodeType.METADATA_NODE,
        inputs=IOInfo(values=values, shapes="[[]]", types='["String"]'),
        attrs=[Attr(IS_CPU_OP, True, "bool_val")],
    )


def parse_pg_entries(
    text: str, *, path: str | None = None, rank: int | None = None, node_id: int | None = None
) -> list[dict[str, Any]]:
    """The entries (one dict per group, each with ``pg_name``) of a ``process_group:init`` value.

    Accepts the list itself, a one-element list wrapping the JSON string (as in
    PyTorch ET ``inputs.values``), a JSON-encoded string of either, or a
    ``{pg_name: ranks or entry}`` object.  Chakra's own PyTorch converter
    (mlcommons/chakra 21585d8) writes the wrapping list as a Python repr
    (``['[{"pg_name": "0", ...}]']``); that form is read too
    (``ast.literal_eval``, literals only).

    Raises:
        ValidationError: not a list of objects with ``pg_name``.
    """
    try:
        value = _loads_literal(text)
        while isinstance(value, str):
            value = _loads_literal(value)
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
            value = _loads_literal(value[0])
    except ValueError as exc:
        raise ValidationError(
            f"process_group:init value is neither JSON nor a Python literal: {exc}; value {text[:120]!r}",
            path=path,
            rank=rank,
            node_id=node_id,
        ) from None
    if isinstance(value, dict):
        value = [dict(v, pg_name=k) if isinstance(v, dict) else {"pg_name": k, "ranks": v} for k, v in value.items()]
    if not isinstance(value, list):
        raise ValidationError(
            f"process_group:init value must be a list, got {type(value).__name__}",
            path=path,
            rank=rank,
            node_id=node_id,
        )
    for entry in value:
        if not isinstance(entry, dict) or "pg_name" not in entry:
            raise ValidationError(
                f"process_group:init entry without pg_name: {entry!r}"[:200], path=path, rank=rank, node_id=node_id
            )
    return value


#: the last few group lists parsed, by their text: every rank of a job declares the same list, whose size grows
#: with the ranks (parsing it on each of N ranks made checking a job quadratic in N: 70 % of an unfolded
#: 2,048-rank replay)
_PARSED: dict[str, dict[str, tuple[int, ...]]] = {}
_PARSED_KEEP = 8


def parse_pg_json(
    text: str, *, path: str | None = None, rank: int | None = None, node_id: int | None = None
) -> dict[str, tuple[int, ...]]:
    """Parse the group list of a ``process_group:init`` node (forms: :func:`parse_pg_entries`).

    Returns:
        pg_name -> ranks (an empty tuple means all ranks); a new dict on every call.

    Raises:
        ValidationError: not a list of objects with ``pg_name`` and ``ranks``.
    """
    return dict(_parse_shared(text, path=path, rank=rank, node_id=node_id))


def _parse_shared(
    text: str, *, path: str | None = None, rank: int | None = None, node_id: int | None = None
) -> dict[str, tuple[int, ...]]:
    """:func:`parse_pg_json` without the copy: an equal text read before gives the same dict (not to be mutated)."""
    if type(text) is str and text in _PARSED:
        return _PARSED[text]
    groups = _parse_pg_json(text, path=path, rank=rank, node_id=node_id)
    if type(text) is str:
        if len(_PARSED) >= _PARSED_KEEP:
            del _PARSED[next(iter(_PARSED))]
        _PARSED[text] = groups
    return groups


def _parse_pg_json(
    text: str, *, path: str | None = None, rank: int | None = None, node_id: int | None = None
) -> dict[str, tuple[int, ...]]:
    """:func:`parse_pg_json`, parsed."""
    groups: dict[str, tuple[int, ...]] = {}
    for entry in parse_pg_entries(text, path=path, rank=rank, node_id=node_id):
        ranks = entry.get("ranks", [])
        if not isinstance(ranks, list) or not all(isinstance(r, int) for r in ranks):
            raise ValidationError(
                f"process group {entry['pg_name']!r}: ranks must be a list of ints, got {ranks!r}",
                path=path,
                rank=rank,
                node_id=node_id,
            )
        from tracekit.model.node import MAX_RANKS

        if any(isinstance(r, bool) or not 0 <= r < MAX_RANKS for r in ranks):
            bad = next(r for r in ranks if isinstance(r, bool) or not 0 <= r < MAX_RANKS)
            raise ValidationError(
                f"process group {entry['pg_name']!r}: rank {bad!r} is out of range (0 to {MAX_RANKS - 1:,}); a job "
                "of that many ranks cannot be held",
                path=path,
                rank=rank,
                node_id=node_id,
            )
        groups[str(entry["pg_name"])] = tuple(ranks)
    return groups


def pg_descriptions(trace: "ExecutionTrace") -> dict[str, str]:
    """pg_name -> ``pg_desc`` of the groups the trace declares (empty descriptions left out).

    Raises:
        ValidationError: a ``process_group:init`` value that cannot be parsed (names path, rank and node).
    """
    out: dict[str, str] = {}
    names = trace.columns().names
    for pos in [i for i, name in enumerate(names) if PG_INIT_NAME in name]:
        node = _one_node(trace, pos)
        if node.inputs is not None and node.inputs.values:
            for e in parse_pg_entries(node.inputs.values, path=trace.path, rank=trace.rank, node_id=node.id):
                if e.get("pg_desc"):
                    out[str(e["pg_name"])] = str(e["pg_desc"])
    return out


def _loads_literal(text: str) -> Any:
    """JSON, or failing that a Python literal (Chakra's converter writes ``str(list)``).

    Raises:
        ValueError: neither.
    """
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise ValueError(str(exc)) from None


def groups_from_trace(trace: "ExecutionTrace") -> dict[str, tuple[int, ...]]:
    """Process groups declared by the trace's ``process_group:init`` node(s), if any.

    Returns:
        pg_name -> ranks (an empty tuple means all ranks); later nodes override earlier ones.

    Raises:
        ValidationError: a ``process_group:init`` value that cannot be parsed (names path, rank and node).
    """
    return dict(shared_groups(trace))


def shared_groups(trace: "ExecutionTrace") -> dict[str, tuple[int, ...]]:
    """:func:`groups_from_trace` without the copy, for per-rank passes over a whole job: **not to be mutated**.

    Every rank of a job declares the same group list, whose length grows with the ranks (3,600 groups at 4,096
    ranks of tp2 pp4); ranks whose ``process_group:init`` record (or value text) equals one read just before get
    the very same dict, so a caller merging the ranks' declarations skips a repeat with an ``is`` test
    (:class:`GroupsMerger`) instead of comparing every group again (which made checking a job quadratic in ranks).

    Raises:
        ValidationError: as :func:`groups_from_trace`.
    """
    cols = getattr(trace, "_columns", None)  # while a replay keeps the rank's columns (NodeColumns.keep_attrs)
    memo = cols.memo if cols is not None else None
    if memo is not None and "groups" in memo:
        return memo["groups"]  # type: ignore[no-any-return]
    found: list[dict[str, tuple[int, ...]]] = []
    for pos in _pg_init_positions(trace):  # decode only the candidates
        parsed = _parsed_record(trace, pos)
        if parsed is None:  # not read before: decode the node, parse its list
            node = _one_node(trace, pos)
            parsed = {}
            if node.inputs is not None and node.inputs.values:
                parsed = _parse_shared(node.inputs.values, path=trace.path, rank=trace.rank, node_id=node.id)
            _remember_record(trace, pos, parsed)
        found.append(parsed)
    groups = found[0] if len(found) == 1 else {k: v for parsed in found for k, v in parsed.items()}
    if memo is not None:
        memo["groups"] = groups
    return groups


class GroupsMerger:
    """The declared groups of many ranks merged into one ``pg_name -> ranks`` dict (:attr:`groups`).

    A declaration that is the very object merged just before (:func:`shared_groups` of ranks with equal
    records) is skipped in O(1); any other is compared group by group.
    """

    __slots__ = ("groups", "_last")

    def __init__(self, groups: Mapping[str, tuple[int, ...]] | None = None) -> None:
        self.groups: dict[str, tuple[int, ...]] = dict(groups) if groups is not None else {}
        self._last: Mapping[str, tuple[int, ...]] | None = None

    def add(self, declared: Mapping[str, tuple[int, ...]]) -> str | None:
        """Merge one rank's declaration (``pg_name -> ranks``, ranks a tuple).

        Returns:
            None, or the name of the first group ``declared`` gives other ranks than the merged ones (then
            ``declared`` is merged only up to that group; ``groups[name]`` is the earlier declaration).
        """
        if declared is self._last:
            return None
        merged = self.groups
        for name, ranks in declared.items():
            old = merged.setdefault(name, ranks)
            if old is not ranks and old != ranks:
                return name
        self._last = declared
        return None


#: the groups of the last few ``process_group:init`` records read from files, by the record's bytes: every rank
#: of a job holds the same record, whose size grows with the ranks (487 KB a rank at 4,096 ranks)
_BY_RECORD: list[tuple[bytes, dict[str, tuple[int, ...]]]] = []


def _record_span(trace: "ExecutionTrace", pos: int) -> tuple[Any, int, int] | None:
    """``(data, start, end)`` of the encoded record at ``pos`` of a trace read from a file; None for others."""
    encoded = getattr(trace, "_encoded", None)
    if getattr(trace, "_nodes", True) is not None or encoded is None or getattr(encoded, "array", None) is not None:
        return None
    if not isinstance(encoded.data, bytes):
        return None
    return encoded.data, int(encoded.starts[pos]), int(encoded.ends[pos])


def _parsed_record(trace: "ExecutionTrace", pos: int) -> dict[str, tuple[int, ...]] | None:
    """The groups of an equal record read before (compared in place, at memory speed: no copy, no hash)."""
    span = _record_span(trace, pos)
    if span is None:
        return None
    data, start, end = span
    for record, parsed in reversed(_BY_RECORD):
        if len(record) == end - start and data.startswith(record, start):
            return parsed
    return None


def _remember_record(trace: "ExecutionTrace", pos: int, parsed: dict[str, tuple[int, ...]]) -> None:
    span = _record_span(trace, pos)
    if span is not None:
        data, start, end = span
        if len(_BY_RECORD) >= _PARSED_KEEP:
            del _BY_RECORD[0]
        _BY_RECORD.append((data[start:end], parsed))


def default_group_size(trace: "ExecutionTrace") -> int | None:
    """The ``group_size`` the trace's ``process_group:init`` gives the default group (all ranks), or None.

    PyTorch's Execution Trace writes the default group as ``{"pg_name": "0", "ranks": [], "group_size": N}``:
    ``ranks`` empty (all ranks) and N the job's world size, so one rank's file still says how many ranks the
    job had.

    Raises:
        ValidationError: a ``process_group:init`` value that cannot be parsed (names path, rank and node).
    """
    size = None
    for pos in _pg_init_positions(trace):
        node = _one_node(trace, pos)
        if node.inputs is None or not node.inputs.values:
            continue
        for e in parse_pg_entries(node.inputs.values, path=trace.path, rank=trace.rank, node_id=node.id):
            value = e.get("group_size")
            if str(e["pg_name"]) == DEFAULT_PG and not e.get("ranks") and type(value) is int and value > 0:
                size = value
    return size


def _one_node(trace: "ExecutionTrace", pos: int) -> Any:
    """The node at ``pos``, decoded alone (``node_at`` of a file's trace decodes 4,096 nodes ahead from the first
    position, for index loops: 15 ms a rank file for one ``process_group:init`` node)."""
    return trace.nodes[pos : pos + 1][0]


def _pg_init_positions(trace: "ExecutionTrace") -> list[int]:
    """Positions of the nodes whose name contains :data:`PG_INIT_NAME`.

    On encoded records (a trace read from a file, or rewritten on records) there are none when the
    records' bytes do not hold the name at all (one substring search); else a compiled byte search
    (:func:`tracekit.wire.recscan.names_containing`) finds them without decoding the names; when some name
    is not ASCII the names are decoded (which checks their UTF-8, raising TraceFormatError).
    """
    encoded = getattr(trace, "_encoded", None)  # tracekit.wire.framing.EncodedNodes
    if getattr(trace, "_nodes", True) is None and encoded is not None and len(encoded.starts):
        found = encoded.names_containing(PG_INIT_NAME)
        if found is not None:
            return list(found)
    return [i for i, name in enumerate(trace.columns().names) if PG_INIT_NAME in name]


def resolve_groups(declared: Mapping[str, tuple[int, ...]], world_size: int) -> dict[str, tuple[int, ...]]:
    """Expand declared groups for a world of ``world_size`` ranks.

    Empty rank lists become all ranks; the default group ``"0"`` (all ranks)
    is always present.

    Raises:
        ValidationError: a group names a rank outside the world.
    """
    world = tuple(range(world_size))
    groups: dict[str, tuple[int, ...]] = {DEFAULT_PG: world}
    for name, ranks in declared.items():
        ranks = tuple(ranks) if ranks else world
        bad = [r for r in ranks if r < 0 or r >= world_size]
        if bad:
            raise ValidationError(
                f"process group {name!r} names ranks {bad[:16]} outside the world of {world_size} ranks"
            )
        groups[name] = ranks
    return groups
