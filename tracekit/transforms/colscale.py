"""Columnar scaling: compute time, message sizes and retargeting on the encoded records of a rank (issue 17).

The same results as the per-node functions of :mod:`tracekit.transforms.scale`
(checked by ``tests/transforms/test_columnar_equal.py`` against digests of the
object path's outputs), decided on :class:`~tracekit.graph.NodeColumns` and
written with :mod:`tracekit.transforms._records`: a measured duration is
re-encoded in place (``duration_micros`` and, when not a whole microsecond,
``duration_nanos``), so no ``Node`` object is built for it.  Nodes whose change
lies in attributes that need more than that (roofline inputs of untimed nodes,
unusual attribute kinds) are decoded one by one and changed with the object
path's function: few in traces with measured durations.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Iterable

import numpy as np

from tracekit.errors import TransformError, ValidationError
from tracekit.model import MAX_DURATION_NS, MAX_TIME_NS, ExecutionTrace, Node
from tracekit.transforms._deplists import _unique, member
from tracekit.transforms._records import Edit, Records, rewrite, varint_fields

FIELD_DURATION_MICROS = 7
FIELD_DURATION_NANOS = 1001
FEW_NODES = 4096  # up to this many candidates are decoded one by one rather than scanned by column


def is_encoded(trace: ExecutionTrace) -> bool:
    """True when ``trace`` still holds the encoded records it was read (or rewritten) from.

    The columns saturate out-of-range times, so before a columnar rewrite uses them, a node whose duration
    exceeds :data:`~tracekit.model.MAX_DURATION_NS` or whose start exceeds ``MAX_TIME_NS`` is decoded, which
    raises the reader's error for it (the same message the per-node path gives).

    Raises:
        TraceFormatError: a node's time is out of range (names the node and the value in ns).
    """
    if getattr(trace, "_nodes", True) is not None or getattr(trace, "_encoded", None) is None:
        return False
    cols = trace.columns()
    bad = np.flatnonzero((cols.duration_ns > MAX_DURATION_NS) | (cols.start_time_ns > MAX_TIME_NS))
    if len(bad):
        trace.node_at(int(bad[0]))  # raises TraceFormatError naming the node and its value
    return True


def flag_column(cols: Any, name: str) -> np.ndarray:
    """``bool(node.get_attr(name))`` of every node (False where absent), bool[N]."""
    try:
        present, values = cols.attr_bool(name)
        return present & values
    except ValidationError:  # a non-numeric value: truthiness as Python sees it
        present, vals = cols.attr(name)
        return np.fromiter((bool(v) for v in vals), dtype=bool, count=len(vals))


def present_column(cols: Any, name: str) -> np.ndarray:
    """bool[N]: the node has attribute ``name``."""
    try:
        return cols.attr_int(name)[0]
    except ValidationError:
        return cols.attr(name)[0]


def _changed(old: Node, new: Node) -> Node | None:
    return None if new == old else new


def name_matches(cols: Any, pattern: re.Pattern | None) -> np.ndarray:
    """bool[N]: ``pattern.search(name)`` per node (all True without a pattern); each distinct name tested once."""
    if pattern is None:
        return np.ones(len(cols), dtype=bool)
    cache: dict[str, bool] = {}
    out = np.empty(len(cols), dtype=bool)
    for i, name in enumerate(cols.names):
        hit = cache.get(name)
        if hit is None:
            hit = cache[name] = pattern.search(name) is not None
        out[i] = hit
    return out


def scaled_ints(values: np.ndarray, k: float, ids: np.ndarray) -> np.ndarray:
    """``round(v * k)`` (half to even) of int64 ``values``, as :func:`tracekit.transforms.base.scale_int`.

    Raises:
        TransformError: a product that is not finite or needs more than 63 bits (names the first node).
    """
    with np.errstate(over="ignore", invalid="ignore"):  # inf/NaN are reported below, naming the node
        product = values.astype(np.float64) * k
    bad = ~np.isfinite(product) | (np.abs(product) >= 2.0**63)
    if bad.any():
        i = int(np.argmax(bad))
        raise TransformError(
            f"{int(values[i]):,} x {k:g} = {float(product[i]):g} is out of range (more than 2^63)", node_id=int(ids[i])
        )
    return np.round(product).astype(np.int64)


def set_durations(edit: Edit, rows: np.ndarray, new_ns: np.ndarray, ids: np.ndarray) -> None:
    """Add to ``edit``: records ``rows`` (sorted int64[K]) get durations ``new_ns`` (int64[K], nanoseconds).

    Raises:
        TransformError: a duration over :data:`tracekit.model.MAX_DURATION_NS` or negative (names the node).
    """
    bad = (new_ns > MAX_DURATION_NS) | (new_ns < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise TransformError(
            f"duration {int(new_ns[i]):,} ns is out of range (0 to {MAX_DURATION_NS:,} ns)", node_id=int(ids[rows[i]])
        )
    edit.drops.append((rows, FIELD_DURATION_MICROS))
    edit.drops.append((rows, FIELD_DURATION_NANOS))
    micros = new_ns // 1000
    has_us = micros > 0
    edit.inserts.append((rows[has_us], FIELD_DURATION_MICROS, varint_fields(FIELD_DURATION_MICROS, micros[has_us])))
    odd = new_ns % 1000 != 0
    edit.inserts.append((rows[odd], FIELD_DURATION_NANOS, varint_fields(FIELD_DURATION_NANOS, new_ns[odd])))


def replace_nodes(
    edit: Edit, trace: ExecutionTrace, rows: Iterable[int], change: Callable[[Node], Node | None]
) -> dict[int, Node]:
    """Add to ``edit``: each record of ``rows`` decoded, passed to ``change`` and re-encoded when it returns a node.

    Returns:
        position -> new node, for the records replaced.

    Errors of ``change`` get the node id filled in.

    Raises:
        TracekitError: from ``change`` or encoding.
    """
    from tracekit._codec import node_to_pb

    picked, bodies, new_nodes = [], [], {}
    for i in rows:
        node = trace.node_at(int(i))
        try:
            new = change(node)
        except TransformError as exc:
            raise exc.with_context(node_id=node.id)
        if new is None:
            continue
        try:
            bodies.append(node_to_pb(new).SerializeToString())
        except (TypeError, ValueError) as exc:
            raise TransformError(f"cannot encode node: {exc}", node_id=node.id) from None
        picked.append(int(i))
        new_nodes[int(i)] = new
    if picked:
        edit.replace_record(np.asarray(picked, dtype=np.int64), bodies)
    return new_nodes


def scale_compute_encoded(
    trace: ExecutionTrace, k: float, types: frozenset, pattern: re.Pattern | None, cpu: bool | None
) -> ExecutionTrace:
    """:class:`~tracekit.transforms.scale.ScaleCompute` on an encoded trace (see the module docstring).

    Raises:
        TransformError: a scaled value out of range (names the node).
    """
    from tracekit.transforms.scale import scaled_compute

    cols = trace.columns()
    sel = np.isin(cols.types, np.asarray(sorted(int(t) for t in types), dtype=np.int16))
    if cpu is not None:
        sel &= flag_column(cols, "is_cpu_op") == cpu
    if pattern is not None and sel.any():
        sel &= name_matches(cols, pattern)
    dur = cols.duration_ns
    timed = np.flatnonzero(sel & (dur > 0))
    new = scaled_ints(dur[timed], k, cols.ids[timed])
    changed = new != dur[timed]
    edit = Edit()
    set_durations(edit, timed[changed], new[changed], cols.ids)
    untimed = np.flatnonzero(sel & (dur <= 0))
    if len(untimed) > FEW_NODES:  # many: look at the roofline attributes first (a column pass)
        roofline = np.zeros(len(cols), dtype=bool)
        for name in ("num_ops", "tensor_size"):
            roofline |= present_column(cols, name)
        untimed = untimed[roofline[untimed]]
    replaced = replace_nodes(edit, trace, untimed.tolist(), lambda n: _changed(n, scaled_compute(n, k)))
    if edit.empty():
        return trace
    out = rewrite(Records.of(trace), edit, trace.metadata)
    new_dur = dur.copy()
    new_dur[timed[changed]] = new[changed]
    carry_columns(out, patched_columns(cols, new_dur, replaced))
    return out


def patched_columns(cols: Any, duration_ns: np.ndarray, replaced: dict[int, Node]) -> Any:
    """``cols`` with other durations and, at the positions of ``replaced``, those nodes' attributes.

    For rewrites that change durations and attributes only (ids, names, types, dependencies kept).
    """
    if not replaced:
        return dataclasses.replace(cols, duration_ns=duration_ns, _attr_cache={})
    rows = sorted(replaced)

    def attr_fn(name: str) -> tuple[np.ndarray, list[Any]]:
        present, values = cols.attr(name)
        present, values = present.copy(), list(values)
        for i in rows:
            v = replaced[i].get_attr(name)
            present[i], values[i] = v is not None, v
        return present, values

    def attr_num_fn(name: str, ints_only: bool = False, bools: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
        fast = cols.attr_num_fn(name, ints_only, bools) if cols.attr_num_fn is not None else None
        if fast is None:
            return None
        present, values = fast[0].copy(), fast[1].copy()
        for i in rows:
            v = replaced[i].get_attr(name)
            if v is not None and (
                (isinstance(v, bool) and not bools)
                or not isinstance(v, (int, float))
                or (ints_only and isinstance(v, float))
            ):
                return None
            present[i], values[i] = v is not None, int(v) if v is not None else 0
        return present, values

    return dataclasses.replace(cols, duration_ns=duration_ns, attr_fn=attr_fn, attr_num_fn=attr_num_fn, _attr_cache={})


def carry_columns(trace: ExecutionTrace, cols: Any) -> None:
    """Give ``trace`` (just rewritten) columns derived from its input's, so the next step does not decode again.

    Only for rewrites that change the given columns' arrays and nothing an attribute or name
    reader sees (the readers of the input's columns keep reading the input's bytes).
    """
    if hasattr(trace, "_columns") and getattr(trace, "_columns", None) is None:
        try:
            trace._adopt_columns(cols)
        except AttributeError:  # the model's internals changed: the columns are decoded on first use instead
            pass


def rewrite_some(trace: ExecutionTrace, rows: np.ndarray, change: Callable[[Node], Node | None]) -> ExecutionTrace:
    """``trace`` with the nodes at ``rows`` (bool[N]) passed through ``change`` (None: unchanged), decoded one by one.

    Raises:
        TracekitError: from ``change`` (with the node id) or encoding.
    """
    edit = Edit()
    replace_nodes(edit, trace, np.flatnonzero(rows).tolist(), change)
    return trace if edit.empty() else rewrite(Records.of(trace), edit, trace.metadata)


# ----------------------------------------------------------------------------- integer attributes in place
_VARINT_INT_FIELDS = {7: "int32_val", 9: "int64_val", 11: "uint32_val", 13: "uint64_val"}  # AttributeProto
_ATTR_FIELD = 10


def int_attr_slots(rec: Records, rows: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The first attribute ``name`` of each record of ``rows`` when it is a plain varint integer.

    Returns:
        ``(rows, tag offsets, value field numbers, values uint64)`` of the records whose first ``name``
        attribute has no doc string and exactly one value field, of kind int32/int64/uint32/uint64
        with a non-negative value; other records are left out (the caller decodes those).
    """
    from tracekit._columnar import walk_fields

    key = name.encode()
    t = rec.fields(int(rows[0]), int(rows[-1]) + 1) if len(rows) else None
    if t is None:
        return rows, rows, rows, rows.astype(np.uint64)
    sel = (t.field == _ATTR_FIELD) & (t.wt == 2) & member(t.msg, rows)
    msg, at, nxt = t.msg[sel], t.at[sel], t.nxt[sel]
    body = nxt - at - 2  # tag (1 byte) + 1-byte length: attribute messages under 128 bytes
    start = at + 2
    small = (body < 128) & (rec.buf[at + 1] == body)
    big_msg = msg[~small]
    msg, at, start, end = msg[small], at[small], start[small], nxt[small]
    parts: list[tuple[np.ndarray, ...]] = []

    def visit(m, field, wt, value, size, pos) -> None:
        parts.append((m, field, wt, value, size))

    walk_fields(rec.buf, start, end, visit)
    m, field, wt, value, size = (np.concatenate(x) for x in zip(*parts)) if parts else (np.zeros(0, np.int64),) * 5
    is_name = (field == 1) & (size == len(key))
    hit = np.zeros(len(msg), dtype=bool)
    if is_name.any():
        cand = m[is_name]
        where = value[is_name].astype(np.int64)
        raw = rec.buf[where[:, None] + np.arange(len(key))]
        hit[cand[(raw == np.frombuffer(key, dtype=np.uint8)).all(axis=1)]] = True
    order_first = _first_hit_per_record(msg, hit)
    n_value = np.bincount(m[(field >= 3)], minlength=len(msg))
    has_doc = np.bincount(m[field == 2], minlength=len(msg)) > 0
    vsel = field >= 3
    vfield = np.zeros(len(msg), dtype=np.int64)
    vval = np.zeros(len(msg), dtype=np.uint64)
    vwt = np.full(len(msg), -1, dtype=np.int64)
    vfield[m[vsel]], vval[m[vsel]], vwt[m[vsel]] = field[vsel], value[vsel], wt[vsel]
    ok = order_first & (n_value == 1) & ~has_doc & (vwt == 0) & np.isin(vfield, list(_VARINT_INT_FIELDS))
    ok &= (vval < np.uint64(2**63)) & ~member(msg, _unique(big_msg))  # records with long attributes: decoded
    return msg[ok], at[ok], vfield[ok], vval[ok]


def _first_hit_per_record(msg: np.ndarray, hit: np.ndarray) -> np.ndarray:
    """bool[A]: the attribute is a hit and the first hit of its record (``msg`` sorted)."""
    idx = np.flatnonzero(hit)
    out = np.zeros(len(msg), dtype=bool)
    if len(idx):
        firsts = np.concatenate(([True], msg[idx][1:] != msg[idx][:-1]))
        out[idx[firsts]] = True
    return out


def int_attr_blobs(name: str, field_numbers: np.ndarray, values: np.ndarray) -> Any:
    """Encoded attribute fields (``attr`` = 10 of Node) ``name`` = each value, kind by field number."""
    from tracekit.transforms._records import Blobs, concat_rows, varints

    key = name.encode()
    k = len(values)
    vb, vl = varints(values)
    tags = Blobs.of(field_numbers.astype(np.uint8) << np.uint8(3), np.ones(k, dtype=np.int64))
    inner_len = 2 + len(key) + 1 + vl
    head = concat_rows(
        Blobs.const(b"\x52", k),
        Blobs.of(inner_len.astype(np.uint8), np.ones(k, dtype=np.int64)),
        Blobs.const(b"\x0a" + bytes([len(key)]) + key, k),
    )
    return concat_rows(head, tags, Blobs.of(vb, vl))


_INT32_MAX = {"int32_val": 2**31 - 1, "uint32_val": 2**32 - 1}


def scale_comm_encoded(
    trace: ExecutionTrace, factors: np.ndarray, change: Callable[[Node], Node | None]
) -> ExecutionTrace:
    """``comm_size`` of each node times ``factors`` (float64[N]; 1.0 = unchanged), as ``change`` does per node.

    Plain integer ``comm_size`` attributes are re-encoded in place; other nodes with a factor are decoded
    and passed to ``change`` (which raises what the node path raises).

    Raises:
        TransformError: a scaled size out of range (names the node).
    """
    rows = np.flatnonzero(factors != 1.0)
    if not len(rows):
        return trace
    rec = Records.of(trace)
    fast, at, vfield, old = int_attr_slots(rec, rows, "comm_size")
    ids = trace.columns().ids
    new = np.zeros(0, dtype=np.int64)
    if len(fast):
        with np.errstate(over="ignore", invalid="ignore"):  # inf/NaN are reported below, naming the node
            product = old.astype(np.float64) * factors[fast]
        if not (np.isfinite(product) & (np.abs(product) < 2.0**63)).all():
            _scaled_each(old, factors[fast], ids[fast])  # raises for the first bad row
        new = np.round(product).astype(np.int64)
    kinds = np.asarray([_VARINT_INT_FIELDS[int(f)] for f in vfield.tolist()], dtype=object)
    limit = np.asarray([_INT32_MAX.get(k, 2**63 - 1) for k in kinds.tolist()], dtype=np.int64)
    fits = new <= limit
    fast, at, vfield, old, new = fast[fits], at[fits], vfield[fits], old[fits], new[fits]
    slow = np.setdiff1d(rows, fast)
    edit = Edit()
    moved = new != old.astype(np.int64)
    if moved.any():
        edit.replaces.append((fast[moved], at[moved], int_attr_blobs("comm_size", vfield[moved], new[moved])))
    replace_nodes(edit, trace, slow.tolist(), change)
    return trace if edit.empty() else rewrite(rec, edit, trace.metadata)


def _scaled_each(old: np.ndarray, factors: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Row by row :func:`scaled_ints` (factors differ per row); raises for the first out-of-range row."""
    return np.asarray(
        [
            int(scaled_ints(np.asarray([int(v)]), float(k), ids[i : i + 1])[0])
            for i, (v, k) in enumerate(zip(old.tolist(), factors.tolist()))
        ],
        dtype=np.int64,
    )
