"""Columnar scaling: compute time, message sizes and retargeting on the encoded records of a rank (issue 17).

The same results as the per-node functions of :mod:`tracekit.transforms.scale`
(checked by ``tests/transforms/test_columnar_equal.py`` against digests of the
object path's outputs), decided on :class:`~tracekit.model.graph.NodeColumns` and
written with :mod:`tracekit.wire.records`: a measured duration is
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

from tracekit.model.attrs import COMM_SIZE, IS_CPU_OP, NUM_OPS, TENSOR_SIZE
from tracekit.errors import TransformError, ValidationError
from tracekit.model import MAX_DURATION_NS, MAX_TIME_NS, ExecutionTrace, Node
from tracekit.wire.records import Edit, Records, rewrite, varint_fields

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


def type_mask(types: np.ndarray, wanted: Iterable[int]) -> np.ndarray:
    """bool[N]: ``types[i]`` is one of ``wanted`` (a few node types: one comparison pass each, no sort as
    ``np.isin`` makes)."""
    out = np.zeros(len(types), dtype=bool)
    for t in set(int(w) for w in wanted):
        out |= types == t
    return out


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
    from tracekit.wire.codec import node_to_pb

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
    from tracekit.transforms.nodescale import scaled_compute

    cols = trace.columns()
    sel = type_mask(cols.types, types)
    if cpu is not None:
        sel &= flag_column(cols, IS_CPU_OP) == cpu
    if pattern is not None and sel.any():
        sel &= name_matches(cols, pattern)
    dur = cols.duration_ns
    timed = np.flatnonzero(sel & (dur > 0))
    new = scaled_ints(dur[timed], k, cols.ids[timed])
    changed = new != dur[timed]
    edit = Edit()
    set_durations(edit, timed[changed], new[changed], cols.ids)
    untimed = np.flatnonzero(sel & (dur <= 0))
    rec = Records.of(trace)
    patches: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    slow: list[np.ndarray] = []
    for name in ROOFLINE_ATTRS:  # untimed nodes: their roofline inputs scale (scaled_compute)
        (rows, at, fields, values), others, _ = scaled_int_attr(rec, untimed, name, np.full(len(untimed), k), cols.ids)
        slow.append(others)
        if len(rows):
            patches[name] = (rows, values)
            edit.replaces.append((rows, at, int_attr_blobs(name, fields, values)))
    decode = np.union1d(*slow)
    if len(decode):  # their fast replacements are superseded by whole records
        edit.replaces = [_without(r, decode) for r in edit.replaces]
    replaced = replace_nodes(edit, trace, decode.tolist(), lambda n: _changed(n, scaled_compute(n, k)))
    if edit.empty():
        return trace
    out = rewrite(rec, edit, trace.metadata)
    new_dur = dur.copy()
    new_dur[timed[changed]] = new[changed]
    carry_columns(out, patched_columns(cols, new_dur, replaced, patches))
    return out


ROOFLINE_ATTRS = (NUM_OPS, TENSOR_SIZE)


def _without(replace: tuple[np.ndarray, np.ndarray, Any], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, Any]:
    """A replacement entry of an :class:`Edit` without the records ``rows``."""
    from tracekit.wire.records import Blobs

    recs, at, blobs = replace
    keep = ~np.isin(recs, rows)
    idx = np.flatnonzero(keep)
    lens = blobs.lens[idx]
    take = np.repeat(blobs.ptr[:-1][idx] - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))
    return recs[keep], at[keep], Blobs.of(blobs.data[take], lens)


def patched_columns(
    cols: Any,
    duration_ns: np.ndarray,
    replaced: dict[int, Node],
    patches: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
) -> Any:
    """``cols`` with other durations and the roofline attributes (:data:`ROOFLINE_ATTRS`) patched.

    ``patches`` maps an attribute name to ``(rows, new int values)``; ``replaced`` (position -> node)
    gives whole nodes whose roofline attributes are taken.  For rewrites that change durations and
    those attributes only (ids, names, types, dependencies and other attributes kept).
    """
    patches = patches or {}
    if not replaced and not patches:
        return dataclasses.replace(cols, duration_ns=duration_ns, _attr_cache={})
    rows = sorted(replaced)

    def attr_fn(name: str) -> tuple[np.ndarray, list[Any]]:
        present, values = cols.attr(name)
        if name not in ROOFLINE_ATTRS:
            return present, values
        present, values = present.copy(), list(values)
        p_rows, p_vals = patches.get(name, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        for i, v in zip(p_rows.tolist(), p_vals.tolist()):
            values[i] = v
        for i in rows:
            v = replaced[i].get_attr(name)
            present[i], values[i] = v is not None, v
        return present, values

    def attr_num_fn(name: str, ints_only: bool = False, bools: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
        fast = cols.attr_num_fn(name, ints_only, bools) if cols.attr_num_fn is not None else None
        if fast is None or name not in ROOFLINE_ATTRS:
            return fast
        present, values = fast[0].copy(), fast[1].copy()
        if name in patches:
            values[patches[name][0]] = patches[name][1]
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


def int_attr_slots(rec: Records, rows: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The first attribute ``name`` of each record of ``rows`` (int64[K]), found by a compiled field walk.

    Returns:
        ``(tag offsets, value field numbers, values uint64)``, each [K]: offset -1 where the record has
        no such attribute; field number -1 where it is not a plain varint integer (a doc string, not
        exactly one value, a kind other than int32/int64/uint32/uint64, or a negative value): the
        caller decodes those.

    Raises:
        TraceFormatError: a record that is not a valid ``Node`` message.
    """
    from tracekit.wire.encode import int_attr_slots as find
    from tracekit.errors import TraceFormatError

    rows = np.asarray(rows, dtype=np.int64)
    at = np.empty(len(rows), dtype=np.int64)
    fields = np.empty(len(rows), dtype=np.int64)
    values = np.zeros(len(rows), dtype=np.uint64)
    key = np.frombuffer(name.encode(), dtype=np.uint8)
    code = find(rec.buf, rec.starts, rec.ends, rows, key, at, fields, values)
    if code < 0:
        raise TraceFormatError(
            f"node record {int(rows[-code - 1])} is not a valid Node message", path=rec.path, rank=rec.rank
        )
    return at, fields, values


_INT_LIMIT = {7: 2**31 - 1, 11: 2**32 - 1}  # int32_val, uint32_val; the 64-bit kinds hold any scaled value


def scaled_int_attr(
    rec: Records, rows: np.ndarray, name: str, factors: np.ndarray, ids: np.ndarray
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray, np.ndarray]:
    """Attribute ``name`` of the records ``rows`` (sorted int64[K]) times ``factors`` (float64[K]), where plain.

    Returns:
        ``((rows, tag offsets, field numbers, new values int64), others, absent)``: the records whose
        attribute is a plain integer whose scaled value fits its kind and changes; ``others`` (int64)
        the records whose attribute is there but not plain or would overflow its kind (decode those);
        ``absent`` (int64) those without the attribute.

    Raises:
        TransformError: a scaled value out of range (names the node).
    """
    at, fields, old = int_attr_slots(rec, rows, name)
    plain = fields >= 0
    with np.errstate(over="ignore", invalid="ignore"):  # inf/NaN are reported below, naming the node
        product = old[plain].astype(np.float64) * factors[plain]
    if not (np.isfinite(product) & (np.abs(product) < 2.0**63)).all():
        _scaled_each(old[plain], factors[plain], ids[rows[plain]])  # raises for the first bad row
    new = np.round(product).astype(np.int64)
    limit = np.full(len(new), 2**63 - 1, dtype=np.int64)
    for f, top in _INT_LIMIT.items():
        limit[fields[plain] == f] = top
    fits = new <= limit
    p_rows, p_at, p_fields, p_old = rows[plain], at[plain], fields[plain], old[plain]
    moved = fits & (new != p_old.astype(np.int64))
    fast = (p_rows[moved], p_at[moved], p_fields[moved], new[moved])
    others = np.sort(np.concatenate((rows[~plain & (at >= 0)], p_rows[~fits])))
    return fast, others, rows[at < 0]


def int_attr_blobs(name: str, field_numbers: np.ndarray, values: np.ndarray) -> Any:
    """Encoded attribute fields (``attr`` = 10 of Node) ``name`` = each value, kind by field number."""
    from tracekit.wire.records import Blobs, concat_rows, varints

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
    (fast, at, vfield, new), others, absent = scaled_int_attr(rec, rows, COMM_SIZE, factors[rows], trace.columns().ids)
    edit = Edit()
    if len(fast):
        edit.replaces.append((fast, at, int_attr_blobs(COMM_SIZE, vfield, new)))
    replace_nodes(edit, trace, np.union1d(others, absent).tolist(), change)
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
