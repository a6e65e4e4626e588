"""Writing trace sets that ASTRA-sim runs as they are.

ASTRA-sim's workload layer (astra-sim c459ab6, ``workload/Workload.cc``) reads
Chakra traces with three rules that tracekit's own readers do not need:

- A communication node whose ``pg_name`` attribute is non-empty names a
  communicator *id*: ASTRA-sim parses it with ``std::stoi`` and looks it up in
  the ``--comm-group-configuration`` JSON (``{"1": [0, 1], ...}``); an id that
  is not in that file, or no file at all, stops the run.  A node without
  ``pg_name`` runs on all NPUs.  So the all-ranks group carries no
  ``pg_name`` and every other group a positive integer id.
- A node is issued only when it is a CPU op, a COMP node, a communication node
  or INVALID; a METADATA node without ``is_cpu_op = true`` is never completed
  and no rank ever finishes.  With ``is_cpu_op`` true and no runtime/num_ops
  it is skipped at once.
- ``<prefix>.comm_groups.json`` (:func:`tracekit.sets.comm_groups.comm_groups_path`) is what
  ``--comm-group-configuration`` expects.

:func:`astra_ready` applies the first two rules to one rank's trace;
:func:`~tracekit.sets.comm_groups.astra_group_ids` decides the ids for a whole set, once;
:func:`write_traceset` writes a set with both applied (the explicit step: the generic writer,
:func:`tracekit.sets.io.write_traceset`, writes a set as it holds it).  Group names and
descriptions of our own readers survive: the ``process_group:init`` node keeps
each group's ``pg_desc`` (a renamed group's old name goes there when it had
no description).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import orjson

from tracekit.model.attrs import IS_CPU_OP, PG_NAME
from tracekit.model.groups import DEFAULT_PG, PG_INIT_NAME, parse_pg_entries
from tracekit.model import IOInfo, NodeType
from tracekit.sets.comm_groups import (  # noqa: F401 - the comm-group file's names, kept importable from here
    COMM_GROUPS_SUFFIX,
    astra_group_ids,
    comm_groups_beside,
    comm_groups_document,
    comm_groups_path,
)

if TYPE_CHECKING:  # pragma: no cover
    import os
    from pathlib import Path

    from tracekit.model import ExecutionTrace, Node

_COMM_TYPES = (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)


def _fixed_node(node: "Node", ids: Mapping[str, str | None]) -> "Node | None":
    """A corrected copy of ``node`` for ASTRA-sim, or None when it is fine as it is."""
    if node.type == NodeType.METADATA_NODE:
        fixed = None
        if node.is_cpu_op is not True:
            fixed = node.with_attr(IS_CPU_OP, True, "bool_val")
        if PG_INIT_NAME in node.name and node.inputs is not None and node.inputs.values:
            values = _renamed_pg_init(node.inputs.values, ids)
            if values is not None:
                fixed = (fixed or node).replace(
                    inputs=IOInfo(values=values, shapes=node.inputs.shapes, types=node.inputs.types)
                )
        return fixed
    if node.type not in _COMM_TYPES:
        return None
    pg = PG_NAME.of(node)
    if pg is None:
        return None
    key = DEFAULT_PG if pg == "" else str(pg)
    target = ids.get(key, key)
    if target == pg:
        return None
    if target is None:
        return node.without_attr(PG_NAME)
    return node.with_attr(PG_NAME, target, "string_val")


def _renamed_pg_init(values: str, ids: Mapping[str, str | None]) -> str | None:
    """The ``process_group:init`` JSON with renamed groups, or None when no name changes."""
    renames = {old: new for old, new in ids.items() if new is not None and new != old}
    if not renames:
        return None
    entries = parse_pg_entries(values)
    if not any(str(e.get("pg_name")) in renames for e in entries):
        return None
    for e in entries:
        old = str(e.get("pg_name"))
        if old in renames:
            e["pg_name"] = renames[old]
            e["pg_desc"] = e.get("pg_desc") or old
    return orjson.dumps(entries).decode()


def astra_ready(trace: "ExecutionTrace", ids: Mapping[str, str | None]) -> "ExecutionTrace":
    """``trace`` with ASTRA-sim's rules applied (see module doc); the same object when nothing changes.

    Only METADATA and communication nodes are looked at, so a trace read from a file that needs no
    change keeps its encoded bytes; on encoded records the types and ``pg_name`` strings are found by
    compiled scans (:func:`_candidates_encoded`) and changed records re-spliced.

    Raises:
        ValidationError: a ``process_group:init`` value that cannot be read.
    """
    encoded = getattr(trace, "_nodes", True) is None and getattr(trace, "_encoded", None) is not None
    candidates = _candidates_encoded(trace, ids) if encoded else _candidates(trace, ids)
    changes = {}
    for pos in candidates:
        fixed = _fixed_node(trace.node_at(pos), ids)
        if fixed is not None:
            changes[pos] = fixed
    return with_changed_nodes(trace, changes)


def with_changed_nodes(trace: "ExecutionTrace", changes: Mapping[int, "Node"]) -> "ExecutionTrace":
    """``trace`` with the node at each position of ``changes`` replaced (the same object when empty).

    On encoded records only the changed records are re-encoded and spliced (no other node is decoded: a
    14,000-node rank costs milliseconds, not the seconds of decoding every node).

    Raises:
        TracekitError: a changed node cannot be encoded (names the node, rank and file).
    """
    if not changes:
        return trace
    if getattr(trace, "_nodes", True) is None and getattr(trace, "_encoded", None) is not None:
        from tracekit.wire.codec import node_to_pb
        from tracekit.errors import TracekitError
        from tracekit.wire.records import Edit, Records, rewrite

        rows = sorted(changes)
        bodies = []
        for i in rows:
            try:
                bodies.append(node_to_pb(changes[i]).SerializeToString())
            except (TypeError, ValueError) as exc:
                raise TracekitError(
                    f"cannot encode node: {exc}", node_id=changes[i].id, rank=trace.rank, path=trace.path
                ) from None
        edit = Edit()
        edit.replace_record(np.asarray(rows, dtype=np.int64), bodies)
        return rewrite(Records.of(trace), edit, trace.metadata).with_label(path=trace.path)
    nodes = [changes.get(i, n) for i, n in enumerate(trace.nodes)]
    return trace.with_nodes(nodes).with_label(path=trace.path)


def _candidates(trace: "ExecutionTrace", ids: Mapping[str, str | None]) -> list[int]:
    """Positions of METADATA nodes and of communication nodes whose group is renamed or dropped."""
    cols = trace.columns()
    types = cols.types.tolist()
    candidates = [i for i, t in enumerate(types) if t == NodeType.METADATA_NODE]
    comm = [i for i, t in enumerate(types) if t in _COMM_TYPES]
    if comm:  # only communication nodes whose group is renamed or dropped (decoding each one is slow)
        present, values = PG_NAME.column(cols)
        renamed: dict[Any, bool] = {}
        for i in comm:
            if present[i]:
                pg = values[i]
                if pg not in renamed:
                    key = DEFAULT_PG if pg == "" else str(pg)
                    renamed[pg] = ids.get(key, key) != pg
                if renamed[pg]:
                    candidates.append(i)
        candidates.sort()
    return candidates


def _candidates_encoded(trace: "ExecutionTrace", ids: Mapping[str, str | None]) -> list[int]:
    """:func:`_candidates` on encoded records, by compiled scans: the types from the trace's columns when it
    has them (else :func:`tracekit.wire.recscan.record_types`), then the ``pg_name`` of its communication records
    compared with the names that change (:func:`tracekit.wire.recscan.string_attr_in`; a ``pg_name`` that is not
    one string is a candidate: :func:`_fixed_node` decides)."""
    from tracekit.wire.spliced import record_array
    from tracekit.wire.recscan import record_types, string_attr_in
    from tracekit.errors import TraceFormatError

    enc = trace._encoded
    buf = record_array(enc)
    starts, ends = np.asarray(enc.starts, dtype=np.int64), np.asarray(enc.ends, dtype=np.int64)
    cols = getattr(trace, "_columns", None)
    if cols is not None:
        types = cols.types
    else:
        types = np.empty(len(starts), np.int64)
        code = record_types(buf, starts, ends, types)
        if code < 0:
            raise TraceFormatError(
                f"node record {-code - 1} is not a valid Node message", path=trace.path, rank=trace.rank
            )
    pick = types == int(NodeType.METADATA_NODE)
    is_comm = np.zeros(len(types), dtype=bool)
    for t in _COMM_TYPES:  # one comparison each (np.isin sorts)
        is_comm |= types == int(t)
    comm = np.flatnonzero(is_comm)
    if len(comm):
        # a group name pg changes when ids.get(key, key) != pg (key "0" for ""): "" and the renamed names
        changing = [b""] + [k.encode("utf-8", "surrogateescape") for k, v in ids.items() if v != k and k != ""]
        lens = np.fromiter((len(c) for c in changing), dtype=np.int64, count=len(changing))
        table_ptr = np.zeros(len(changing) + 1, dtype=np.int64)
        np.cumsum(lens, out=table_ptr[1:])
        table = np.frombuffer(b"".join(changing), dtype=np.uint8)
        flags = np.empty(len(comm), dtype=np.int8)
        key = np.frombuffer(PG_NAME.encode(), np.uint8)
        code = string_attr_in(buf, starts, ends, comm, key, table, table_ptr, flags)
        if code < 0:
            raise TraceFormatError(
                f"node record {int(comm[-code - 1])} is not a valid Node message", path=trace.path, rank=trace.rank
            )
        pick[comm[flags != 0]] = True
    return np.flatnonzero(pick).tolist()


def write_traceset(traceset: Any, prefix: "str | os.PathLike[str]", *, compress: bool = False) -> "list[Path]":
    """Write ``<prefix>.<rank>.et`` (``.et.gz`` with ``compress``) for every rank so ASTRA-sim runs them as they are.

    Each rank's trace goes through :func:`astra_ready` on the way (no ``pg_name`` on all-ranks communication,
    positive integer ids for the other groups, METADATA nodes marked ``is_cpu_op``), one rank at a time, and
    ``<prefix>.comm_groups.json`` lists the groups by those ids; the writing itself is
    :func:`tracekit.sets.io.write_traceset` (atomic, as a unit). :func:`tracekit.io.write_traceset` is this function.

    Returns:
        The paths written, in rank order.

    Raises:
        TracekitError: the prefix holds other rank files, or a trace cannot be encoded (as the generic writer).
    """
    from tracekit.sets.io import write_traceset as write_as_held

    groups = traceset.process_groups
    ids = astra_group_ids(groups, traceset.world_size)
    return write_as_held(
        traceset,
        prefix,
        compress=compress,
        prepare=lambda trace: astra_ready(trace, ids),
        comm_groups=comm_groups_document(groups, ids),
    )
