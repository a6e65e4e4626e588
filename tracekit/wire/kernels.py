"""Compiled loops of the `.et` read path: record framing, the node field walk, attributes by name, name groups.

Each kernel walks the protobuf wire format of many records in one call
(https://protobuf.dev/programming-guides/encoding/): varints of up to 10
bytes, wire types 0 (varint), 1 (64-bit), 2 (length-delimited), 5 (32-bit),
repeated scalars packed or not, the last value of a singular field wins,
fields of unknown number skipped.  Kernels write into arrays the caller
allocates (so tracemalloc and the caller see all memory) and report a bad
record with a code and its index: :mod:`tracekit.wire.framing`,
:mod:`tracekit.wire.columnar` and :mod:`tracekit.wire.attrsource` turn the code into
a :class:`~tracekit.errors.TraceFormatError` naming file, rank and node.
Every read is bounds-checked by the walk itself (numba does not check).
The kernels are lazy (:func:`tracekit.jit.kernel`): numba (about 0.5 s to
import) is imported by the first kernel call, not by importing this module.
The wire primitives (codes, varints, fields) live in :mod:`tracekit.wire._prim`
and the attribute message helpers in :mod:`tracekit.wire._attrwire`; the codes and
kinds are re-exported here.
"""

from __future__ import annotations

import numpy as np

from tracekit.wire._attrwire import (
    _attr_value,
    _check_attr,
    _key_table,
    _name_hash,
    _other_attr,
    _same_key,
    _simple_attr,
)
from tracekit.jit import inline, kernel
from tracekit.wire._prim import (  # re-exported: the codes and kinds callers read as tracekit.wire.kernels.X
    _I64_MAX,
    ABSENT as ABSENT,
    BAD_TAG as BAD_TAG,
    BOOL as BOOL,
    EMPTY_RECORD as EMPTY_RECORD,
    FLOAT as FLOAT,
    INT,
    LONG_PREFIX as LONG_PREFIX,
    LONG_VARINT as LONG_VARINT,
    NONE as NONE,
    OK,
    OTHER as OTHER,
    PACKED_TRUNCATED,
    PAST_END as PAST_END,
    REASONS as REASONS,
    RECORD_OVER_LIMIT,
    RECORD_PAST_FILE,
    STRING as STRING,
    TRUNCATED_PREFIX,
    TRUNCATED_VARINT,
    field_at,
    varint,
)

COLUMNS, DEP_IDS, ATTRS_ONLY = 0, 1, 2  # what walk_nodes fills
_MAX_DURATION_NS = 2**53  # tracekit.model.node.MAX_DURATION_NS (a test checks they agree)
_MAX_TIME_NS = 2**62  # tracekit.model.node.MAX_TIME_NS


# ----------------------------------------------------------------------------- framing
@kernel
def frame(buf, starts, ends, first_may_be_empty, partial, limit):  # pragma: no cover - compiled
    """Split length-prefixed records (varint32 length + message).

    Args:
        buf: uint8 bytes.  starts, ends: int arrays filled with the message spans as far
            as they hold them (pass empty arrays to count only); records past them are counted.
        first_may_be_empty: record 0 is the metadata (an empty one is valid).
        partial: stop at an incomplete last record instead of failing (streaming).
        limit: records longer than this fail with RECORD_OVER_LIMIT (partial mode).

    Returns:
        ``(code, records, prefix offset of the bad record, its length, its body offset, end of the last record)``.
    """
    n = len(buf)
    room = min(len(starts), len(ends))
    pos = 0
    k = 0
    while pos < n:
        at = pos
        length = 0
        shift = 0
        while True:
            if pos >= n:
                if partial:
                    return OK, k, at, 0, 0, at
                return TRUNCATED_PREFIX, k, at, 0, 0, at
            b = buf[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 35:
                return LONG_PREFIX, k, at, 0, 0, at
        if length == 0 and (k > 0 or not first_may_be_empty):
            return EMPTY_RECORD, k, at, 0, pos, at
        if partial and length > limit:
            return RECORD_OVER_LIMIT, k, at, length, pos, at
        if length > n - pos:
            if partial:
                return OK, k, at, 0, 0, at
            return RECORD_PAST_FILE, k, at, length, pos, at
        if k < room:
            starts[k] = pos
            ends[k] = pos + length
        pos += length
        k += 1
    return OK, k, 0, 0, 0, pos


# ----------------------------------------------------------------------------- node columns
@inline
def _ns(micros, nanos):  # pragma: no cover - compiled
    """Nanoseconds: the extension field when it agrees with the micros, else micros * 1000 (saturating)."""
    if nanos != 0 and nanos // np.uint64(1000) == micros:
        return np.int64(nanos) if nanos <= _I64_MAX else np.int64(_I64_MAX)
    if micros > _I64_MAX // np.uint64(1000):
        return np.int64(_I64_MAX)
    return np.int64(micros) * 1000


@inline
def _dep_field(buf, wt, value, end, out, k):  # pragma: no cover - compiled
    """One ``data_deps``/``ctrl_deps`` field, stored from ``out[k]`` as far as ``out`` holds it.

    Returns ``(code, count)``; count -1 for a wire type dependencies never have (the field is kept by protobuf only).
    """
    if wt == 0:
        if k < len(out):
            out[k] = value
        return OK, 1
    if wt == 2:
        return _packed(buf, np.int64(value), end, out, k)
    return OK, -1


@inline
def _packed(buf, pos, end, out, k):  # pragma: no cover - compiled
    """Count the packed varints of ``pos .. end``, storing them from ``out[k]`` as far as ``out`` holds them.

    Returns ``(code, count)``.
    """
    count = 0
    while pos < end:
        value, pos, code = varint(buf, pos, end)
        if code != OK:
            return (PACKED_TRUNCATED if code == TRUNCATED_VARINT else code), count
        if k + count < len(out):
            out[k + count] = value
        count += 1
    return OK, count


@kernel  # pragma: no cover - compiled
def walk_nodes(
    buf, starts, ends, ids, types, duration, start, special, dptr, cptr, dids, cids, name_at, attr_at, err, mode, found
):
    """Decode the node columns of every record (see :func:`tracekit.wire.columnar.decode_columns`).

    ``mode`` COLUMNS: ids, types (int16, saturating), duration, start (ns), ``special`` (fields the columns do
    not keep, times past the model's limits), ``name_at`` / ``attr_at`` (offset of the last name field, -1 for
    none / of the first attribute field, the record's end for none), dependency counts at ``dptr[i + 1]`` /
    ``cptr[i + 1]``, ids as far as ``dids`` / ``cids`` hold them.  DEP_IDS: the dependency ids only, at the
    CSR offsets.  ATTRS_ONLY: ``found`` only.  ``found``: None (attribute messages skipped unread), or ``(keys,
    key_ptr, kind, values)`` of :func:`find_attrs` filled in the same pass, the first corrupt one to ``err``.
    Returns ``(code, record index, field, wire type, any start time)``; code OK when every record frames.
    """
    timed, total_d, total_c = False, 0, 0
    scalars = np.zeros(8, dtype=np.uint64)  # the varint fields kept: id 1, type 3, start 6, duration 7, ns 4/5
    if found is not None:
        keys, key_ptr, kind, values = found
        table, scratch = _key_table(keys, key_ptr), np.zeros(1, dtype=np.float64)
    for i in range(len(starts)):
        pos, end = np.int64(starts[i]), np.int64(ends[i])
        if mode == DEP_IDS:
            if dptr[i] == dptr[i + 1] and cptr[i] == cptr[i + 1]:
                continue
            total_d, total_c = dptr[i], cptr[i]
        scalars[:] = 0
        odd, nd, nc, name, first_attr = False, 0, 0, -1, end
        while pos < end:
            code, field, wt, value, size, nxt = field_at(buf, pos, end)
            if code != OK:
                return code, i, field, wt, timed
            if wt == 2 and field == 10:  # an attribute: written out here, see the docstring of tracekit.wire._attrwire
                first_attr = min(first_attr, pos)
                if found is not None:
                    a = np.int64(value)
                    simple, nm_s, nm_l, vf, vwt, vv, vsize = _simple_attr(buf, a, nxt)
                    slot = table[_name_hash(buf, nm_s, nm_l)] if simple else -1
                    k, ks = slot - 1, key_ptr[max(slot - 1, 0)]
                    if (
                        slot > 0
                        and key_ptr[slot] - ks == nm_l
                        and kind[k, i] == ABSENT
                        and _same_key(buf, nm_s, keys, ks, nm_l)
                    ):
                        if vwt == 0 and (vf == 9 or vf == 13) and vv <= _I64_MAX:  # int64_val, uint64_val: the usual
                            kind[k, i], values[k, i] = INT, np.int64(vv)
                        else:
                            kind[k, i], values[k, i] = _attr_value(buf, vf, vwt, vv, vsize, False, scratch)
                    elif slot < 0:  # another layout, or a slot two keys share: walked field by field
                        _other_attr(buf, a, nxt, i, err, keys, key_ptr, kind, values, table, scratch)
            elif mode == ATTRS_ONLY:
                pass
            elif field == 5 or field == 4:  # data_deps, ctrl_deps
                out, k = (dids, total_d + nd) if field == 5 else (cids, total_c + nc)
                code, got = _dep_field(buf, wt, value, nxt, out, k)
                if code != OK:
                    return code, i, field, wt, timed
                odd = odd or got < 0
                nd, nc = (nd + max(got, 0), nc) if field == 5 else (nd, nc + max(got, 0))
            elif mode == DEP_IDS:
                pass
            elif wt == 0 and (field == 1 or field == 3 or field == 6 or field == 7):
                scalars[field] = value
            elif wt == 0 and (field == 1001 or field == 1002):  # duration_ns, start_ns (extension fields)
                scalars[field - 997] = value
            elif wt == 2 and field == 2:  # the name: decoded by name_groups when names are first used
                name = pos
            else:
                odd = True
            pos = nxt
        if mode != COLUMNS:
            continue
        ids[i], typ, name_at[i], attr_at[i] = scalars[1], scalars[3], name, first_attr
        types[i] = max(-(2**15), min(2**15 - 1, np.int64(typ)))
        duration[i] = _ns(scalars[7], scalars[4])
        start[i] = _ns(scalars[6], scalars[5])
        timed = timed or start[i] != 0
        special[i] = odd or typ >= np.uint64(2**15) or duration[i] > _MAX_DURATION_NS or start[i] > _MAX_TIME_NS
        dptr[i + 1], cptr[i + 1] = nd, nc
        total_d, total_c = total_d + nd, total_c + nc
    return OK, -1, 0, 0, timed


@kernel
def check_attrs(buf, starts, ends, err):  # pragma: no cover - compiled
    """Frame every attribute message (field 10) of every record; the first corrupt one goes to ``err[0:5]``
    (code, record, offset, field, wire type).  The records themselves frame (the node walk checked them);
    ``starts`` may be where their first attribute fields are, as for :func:`find_attrs`."""
    for i in range(len(starts)):
        pos = np.int64(starts[i])
        end = np.int64(ends[i])
        while pos < end:
            code, field, wt, value, size, nxt = field_at(buf, pos, end)
            if code != OK:
                break
            if field == 10 and wt == 2:
                a = np.int64(value)
                simple, _, _, _, _, _, _ = _simple_attr(buf, a, nxt)  # the usual layout frames in a few byte tests
                if not simple:
                    _check_attr(buf, a, nxt, err, i)
                    if err[0] != OK:
                        return
            pos = nxt


@kernel
def find_attrs(buf, starts, ends, keys, key_ptr, kind, values, err):  # pragma: no cover - compiled
    """The first attribute of each name of ``keys`` in every record (kinds and values: :func:`_attr_value`).

    Args:
        keys: the K names' UTF-8 bytes, concatenated; key_ptr: int64[K + 1] offsets into them.
        kind: int8[K, N], zeroed (ABSENT); values: int64[K, N].
        err: int64[5]: the first corrupt attribute message (code, record, offset, field, wire type), as
            :func:`check_attrs` finds it (every attribute message is framed here too).

    The records frame (the node walk checked them): :func:`walk_nodes` in mode ATTRS_ONLY.  ``starts`` may be
    where each record's first attribute field is (``attr_at`` of the walk): fields before it are not attributes.
    """
    u64, i64 = np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
    # no_at: a fresh empty array (a slice of starts would be read-only with it: walk_nodes writes name_at/attr_at)
    no_bool, no_i16, no_at = np.empty(0, dtype=np.bool_), np.empty(0, dtype=np.int16), np.empty_like(starts[:0])
    found = (keys, key_ptr, kind, values)
    walk_nodes(
        buf, starts, ends, u64, no_i16, i64, i64, no_bool, i64, i64, u64, u64, no_at, no_at, err, ATTRS_ONLY, found
    )
