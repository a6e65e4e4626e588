"""Compiled loops of the `.et` read path: record framing, the node field walk, attributes by name, name groups.

Each kernel walks the protobuf wire format of many records in one call
(https://protobuf.dev/programming-guides/encoding/): varints of up to 10
bytes, wire types 0 (varint), 1 (64-bit), 2 (length-delimited), 5 (32-bit),
repeated scalars packed or not, the last value of a singular field wins,
fields of unknown number skipped.  Kernels write into arrays the caller
allocates (so tracemalloc and the caller see all memory) and report a bad
record with a code and its index: :mod:`tracekit._framing`,
:mod:`tracekit._columnar` and :mod:`tracekit._attrsource` turn the code into
a :class:`~tracekit.errors.TraceFormatError` naming file, rank and node.
Every read is bounds-checked by the walk itself (numba does not check).
The kernels are lazy (:func:`tracekit._jit.kernel`): numba (about 0.5 s to
import) is imported by the first kernel call, not by importing this module.
"""

from __future__ import annotations

import numpy as np

from tracekit._jit import inline, kernel

# ----------------------------------------------------------------------------- codes a kernel returns
OK = 0
TRUNCATED_VARINT = 1
LONG_VARINT = 2
BAD_TAG = 3  # field 0, or wire type 3, 4, 6, 7
PAST_END = 4  # a field runs past the end of its message
PACKED_TRUNCATED = 5
EMPTY_RECORD = 6
TRUNCATED_PREFIX = 7
LONG_PREFIX = 8
RECORD_PAST_FILE = 9
RECORD_OVER_LIMIT = 10

REASONS = {
    TRUNCATED_VARINT: "truncated varint",
    LONG_VARINT: "varint longer than 10 bytes",
    PACKED_TRUNCATED: "packed varint list is truncated",
}

# attribute value kinds found by find_attrs (per node); the numbers after FLOAT are the ones numbers do not answer
ABSENT, INT, BOOL, FLOAT, STRING, OTHER, NONE = 0, 1, 2, 3, 4, 5, 6

_I64_MAX = np.uint64(2**63 - 1)
_MAX_DURATION_NS = 2**53  # tracekit.node.MAX_DURATION_NS (a test checks they agree)
_MAX_TIME_NS = 2**62  # tracekit.node.MAX_TIME_NS


@inline
def varint(buf, pos, end):  # pragma: no cover - compiled
    """``(value uint64, next position, code)`` of the varint at ``pos`` (within ``end``)."""
    value = np.uint64(0)
    shift = np.uint64(0)
    for k in range(10):
        if pos + k >= end:
            return value, pos + k, TRUNCATED_VARINT
        b = buf[pos + k]
        value |= np.uint64(b & 0x7F) << shift
        if b < 0x80:
            return value, pos + k + 1, OK
        shift += np.uint64(7)
    return value, pos + 10, LONG_VARINT


@inline
def field_at(buf, pos, end):  # pragma: no cover - compiled
    """One field at ``pos``: ``(code, field, wire type, varint value or payload start, payload size, next)``."""
    b = buf[pos]
    if b < 0x80:
        tag = np.uint64(b)
        pos += 1
    else:
        tag, pos, code = varint(buf, pos, end)
        if code != OK:
            return code, 0, 0, np.uint64(0), 0, pos
    field = np.int64(tag >> np.uint64(3))
    wt = np.int64(tag & np.uint64(7))
    if field == 0 or not (wt == 0 or wt == 1 or wt == 2 or wt == 5):
        return BAD_TAG, field, wt, np.uint64(0), 0, pos
    if wt == 0 or wt == 2:
        if pos < end and buf[pos] < 0x80:  # one-byte value or length: the common case
            value = np.uint64(buf[pos])
            body = pos + 1
        else:
            value, body, code = varint(buf, pos, end)
            if code != OK:
                return code, field, wt, np.uint64(0), 0, body
        if wt == 0:
            return OK, field, wt, value, 0, body
        if value > np.uint64(end - body):
            return PAST_END, field, wt, np.uint64(body), 0, body
        return OK, field, wt, np.uint64(body), np.int64(value), body + np.int64(value)
    width = 8 if wt == 1 else 4
    if pos + width > end:
        return PAST_END, field, wt, np.uint64(pos), 0, pos
    return OK, field, wt, np.uint64(pos), width, pos + width


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
def _check_attr(buf, start, end, err, record):  # pragma: no cover - compiled
    """Frame every field of the attribute message ``start .. end``; a corrupt one goes to ``err[0:5]``
    (code, record, offset, field, wire type)."""
    pos = start
    while pos < end:
        code, field, wt, _, _, pos = field_at(buf, pos, end)
        if code != OK:
            err[0] = code
            err[1] = record
            err[2] = start
            err[3] = field
            err[4] = wt
            return


@inline
def _attr_field(buf, a, end, i, err, found, key_fp, scratch):  # pragma: no cover - compiled
    """One attribute message of record ``i``: stored when its name is one of ``found``'s, else framed (the
    first corrupt one goes to ``err[0:5]``)."""
    keys, key_ptr, kind, values = found
    if len(key_ptr) > 1 and _match_attr(buf, a, end, i, keys, key_ptr, key_fp, kind, values, scratch):
        return
    if err[0] == OK:
        _check_attr(buf, a, end, err, i)


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
    buf, starts, ends, ids, types, duration, start, special, dptr, cptr, dids, cids, name_at, err, fill, found
):
    """Decode the node columns of every record (see :func:`tracekit._columnar.decode_columns`).

    Without ``fill``: ids, types (int16, saturating), duration, start (ns), ``special`` (fields the columns
    do not keep, times past the model's limits), ``name_at`` (offset of the last name field, -1 for none),
    dependency counts at ``dptr[i + 1]`` / ``cptr[i + 1]``, ids as far as ``dids`` / ``cids`` hold them.
    With ``fill``: only the dependency ids, at the CSR offsets.  ``found``: None (attribute messages
    skipped unread: :func:`check_attrs`), or ``(keys, key_ptr, kind, values)`` of :func:`find_attrs`
    filled in the same pass, the first corrupt attribute to ``err[0:5]`` (code, record, offset, field, wt).
    Returns ``(code, record index, field, wire type, any start time)``; code OK when every record frames.
    """
    timed = False
    total_d = total_c = 0
    scratch = np.zeros(1, dtype=np.float64)
    if found is not None:
        key_fp = _key_prefixes(found[0], found[1])
    for i in range(len(starts)):
        pos = np.int64(starts[i])
        end = np.int64(ends[i])
        if fill:
            if dptr[i] == dptr[i + 1] and cptr[i] == cptr[i + 1]:
                continue
            total_d, total_c = dptr[i], cptr[i]
        node_id = typ = st_us = du_us = st_ns = du_ns = np.uint64(0)
        odd = False
        nd = nc = 0
        name = -1
        while pos < end:
            code, field, wt, value, size, nxt = field_at(buf, pos, end)
            if code != OK:
                return code, i, field, wt, timed
            if field == 5 or field == 4:  # data_deps, ctrl_deps
                out, k = (dids, total_d + nd) if field == 5 else (cids, total_c + nc)
                code, got = _dep_field(buf, wt, value, nxt, out, k)
                if code != OK:
                    return code, i, field, wt, timed
                odd = odd or got < 0
                nd, nc = (nd + max(got, 0), nc) if field == 5 else (nd, nc + max(got, 0))
            elif fill:
                pass
            elif wt == 0:
                if field == 1:
                    node_id = value
                elif field == 3:
                    typ = value
                elif field == 6:
                    st_us = value
                elif field == 7:
                    du_us = value
                elif field == 1001:
                    du_ns = value
                elif field == 1002:
                    st_ns = value
                else:
                    odd = True
            elif wt == 2 and field == 10:
                if found is not None:
                    _attr_field(buf, np.int64(value), nxt, i, err, found, key_fp, scratch)
            elif wt == 2 and field == 2:  # the name: decoded by name_groups when names are first used
                name = pos
            else:
                odd = True
            pos = nxt
        if fill:
            continue
        ids[i] = node_id
        name_at[i] = name
        types[i] = max(-(2**15), min(2**15 - 1, np.int64(typ)))
        duration[i] = _ns(du_us, du_ns)
        start[i] = _ns(st_us, st_ns)
        timed = timed or start[i] != 0
        special[i] = odd or typ >= np.uint64(2**15) or duration[i] > _MAX_DURATION_NS or start[i] > _MAX_TIME_NS
        dptr[i + 1] = nd
        cptr[i + 1] = nc
        total_d += nd
        total_c += nc
    return OK, -1, 0, 0, timed


@kernel
def check_attrs(buf, starts, ends, err):  # pragma: no cover - compiled
    """Frame every attribute message (field 10) of every record; the first corrupt one goes to ``err[0:5]``
    (code, record, offset, field, wire type).  The records themselves frame (the node walk checked them)."""
    for i in range(len(starts)):
        pos = np.int64(starts[i])
        end = np.int64(ends[i])
        while pos < end:
            code, field, wt, value, size, nxt = field_at(buf, pos, end)
            if code != OK:
                break
            if field == 10 and wt == 2:
                _check_attr(buf, np.int64(value), nxt, err, i)
                if err[0] != OK:
                    return
            pos = nxt


# ----------------------------------------------------------------------------- attributes by name
@inline
def _attr_fields(buf, a, end):  # pragma: no cover - compiled
    """Walk the attribute message ``a .. end``: ``(name start, name length, value field, wire type, value, size, odd)``.

    The name and value are the last of their fields (protobuf's rule); ``odd``
    marks a name or doc string of the wrong wire type; name length -1 for a
    message that does not frame.
    """
    nm_s = a
    nm_l = 0
    vf = 0
    vwt = 0
    vv = np.uint64(0)
    vsize = 0
    odd = False
    p = a
    if a + 2 <= end and buf[a] == 0x0A and buf[a + 1] < 0x80 and buf[a + 1] <= end - a - 2:  # a name < 128 bytes
        nm_s = a + 2
        nm_l = np.int64(buf[a + 1])
        p = nm_s + nm_l
    while p < end:
        code, field, wt, value, size, p = field_at(buf, p, end)
        if code != OK:
            return a, -1, 0, 0, vv, 0, True
        if field == 1:
            if wt == 2:
                nm_s = np.int64(value)
                nm_l = size
            else:
                odd = True
        elif field == 2:
            odd = odd or wt != 2
        elif field >= 3 and field <= 32:
            vf, vwt, vv, vsize = field, wt, value, size
    return nm_s, nm_l, vf, vwt, vv, vsize, odd


@inline
def _attr_value(buf, vf, vwt, vv, vsize, odd, scratch):  # pragma: no cover - compiled
    """``(kind, value)`` of an attribute's value field (from :func:`_attr_fields`).

    ``value`` by kind: INT and BOOL the integer (bools as their varint);
    FLOAT the float64 bits; STRING the text's offset * 2^20 + its byte length
    (texts under 1 MiB); OTHER (lists, bytes, longer texts, uint64 values past
    int64, anything irregular) nothing: the caller decodes the record with
    protobuf.
    """
    if odd:
        return OTHER, 0
    if vf == 0:
        return NONE, 0
    if vwt == 2:
        if vf == 29 and vsize < 2**20:
            return STRING, np.int64(vv) * 2**20 + vsize
        return OTHER, 0
    if vwt == 0:
        if vf == 9 or (vf == 13 and vv <= _I64_MAX):
            return INT, np.int64(vv)
        if vf == 7 or vf == 11:
            low = np.int64(vv & np.uint64(0xFFFFFFFF))
            return INT, (low - 2**32 if vf == 7 and low >= 2**31 else low)
        if vf == 15 or vf == 17:
            return INT, np.int64(vv >> np.uint64(1)) ^ -np.int64(vv & np.uint64(1))
        if vf == 27:
            return BOOL, np.int64(vv)
        return OTHER, 0
    q = np.int64(vv)
    u = np.uint64(0)
    for k in range(vsize):
        u |= np.uint64(buf[q + k]) << np.uint64(8 * k)
    if vf == 3 and vwt == 1:
        return FLOAT, buf[q : q + 8].view(np.int64)[0]
    if vf == 5 and vwt == 5:
        scratch[0] = np.float64(buf[q : q + 4].view(np.float32)[0])
        return FLOAT, scratch.view(np.int64)[0]
    if vwt == 1 and (vf == 25 or (vf == 21 and u <= _I64_MAX)):
        return INT, np.int64(u)
    if vwt == 5 and (vf == 19 or vf == 23):
        low = np.int64(u)
        return INT, (low - 2**32 if vf == 23 and low >= 2**31 else low)
    return OTHER, 0


@kernel
def find_attrs(buf, starts, ends, keys, key_ptr, kind, values, err):  # pragma: no cover - compiled
    """The first attribute of each name of ``keys`` in every record (kinds and values: :func:`_attr_value`).

    Args:
        keys: the K names' UTF-8 bytes, concatenated; key_ptr: int64[K + 1] offsets into them.
        kind: int8[K, N], zeroed (ABSENT); values: int64[K, N].
        err: int64[5]: the first corrupt attribute message (code, record, offset, field, wire type), as
            :func:`check_attrs` finds it (every attribute message is framed here too).
    """
    scratch = np.zeros(1, dtype=np.float64)
    key_fp = _key_prefixes(keys, key_ptr)
    for i in range(len(starts)):
        pos = np.int64(starts[i])
        end = np.int64(ends[i])
        while pos < end:
            code, field, wt, value, size, nxt = field_at(buf, pos, end)
            if code != OK:
                break
            if field == 10 and wt == 2:
                _attr_field(buf, np.int64(value), nxt, i, err, (keys, key_ptr, kind, values), key_fp, scratch)
            pos = nxt


@inline
def _match_attr(buf, a, end, i, keys, key_ptr, key_fp, kind, values, scratch):  # pragma: no cover - compiled
    """Store the attribute message ``a .. end`` of record ``i`` under its key when it is the first of a wanted name
    (``key_fp``: the keys' :func:`_prefix`, compared before their bytes).

    Returns False when the message does not frame (nothing stored).
    """
    nm_s, nm_l, vf, vwt, vv, vsize, odd = _attr_fields(buf, a, end)
    if nm_l < 0:
        return False
    w = _prefix(buf, nm_s, nm_l)
    for k in range(len(key_fp)):
        ks = key_ptr[k]
        if key_fp[k] == w and key_ptr[k + 1] - ks == nm_l and _same_key(buf, nm_s + 8, keys, ks + 8, nm_l - 8):
            if kind[k, i] == ABSENT:  # the keys are distinct names: one matches at most
                kind[k, i], values[k, i] = _attr_value(buf, vf, vwt, vv, vsize, odd, scratch)
            break
    return True


@inline
def _prefix(data, at, length):  # pragma: no cover - compiled
    """The first (up to) 8 bytes of ``data[at : at + length]`` as a little-endian uint64."""
    w = np.uint64(0)
    for j in range(min(length, 8)):
        w |= np.uint64(data[at + j]) << np.uint64(8 * j)
    return w


@inline
def _key_prefixes(keys, key_ptr):  # pragma: no cover - compiled
    """uint64[K]: :func:`_prefix` of each key (K names of ``find_attrs``)."""
    out = np.empty(len(key_ptr) - 1, dtype=np.uint64)
    for k in range(len(out)):
        out[k] = _prefix(keys, key_ptr[k], key_ptr[k + 1] - key_ptr[k])
    return out


@inline
def _same_key(buf, at, keys, ks, length):  # pragma: no cover - compiled
    for j in range(length):
        if buf[at + j] != keys[ks + j]:
            return False
    return True
