"""Attribute messages (``Node.attr``, field 10) on the wire: framing them and finding them by name.

Helpers inlined into the kernels ``check_attrs`` and ``find_attrs`` of
:mod:`tracekit.wire.kernels`.  Most attribute messages are a name and one
value field: :func:`_simple_attr` frames those with a few byte tests; any
other message (a doc string, repeated or missing fields, a name of 128 bytes
or more, a corrupt one) is walked field by field (:func:`_other_attr`).
Names wanted are found through a small hash table (:func:`_key_table`), so a
message whose name is not wanted costs one table lookup.

The kernels call these helpers directly, never through another helper: a
helper taking arrays inlined into a helper costs numba far more than its
work (measured on 1 M nodes of 5 attributes: 0.23 s for ``find_attrs`` with
the lookup written in the kernel, 0.40-0.60 s with it in a helper), so the
lookup is written out in ``find_attrs``.
"""

from __future__ import annotations

import numpy as np

from tracekit.jit import inline
from tracekit.wire._prim import _I64_MAX, ABSENT, BOOL, FLOAT, INT, NONE, OK, OTHER, STRING, field_at, varint

_SLOTS = 128  # hash table slots of _key_table (a power of two)


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


@inline
def _simple_attr(buf, a, end):  # pragma: no cover - compiled
    """Frame the attribute message ``a .. end`` when it is a name (under 128 bytes) and one value field
    (number 3 to 32) ending the message, the usual layout.

    Returns ``(ok, name start, name length, value field, wire type, value, size)``, the values as
    :func:`_attr_fields` gives them; ``ok`` False for any other message (nothing read then).
    """
    if a + 2 >= end or buf[a] != 0x0A or buf[a + 1] >= 0x80:
        return False, a, 0, 0, 0, np.uint64(0), 0
    p = a + 2 + np.int64(buf[a + 1])
    if p >= end:
        return False, a, 0, 0, 0, np.uint64(0), 0
    tag = np.int64(buf[p])
    if tag < 0x80:
        p += 1
    elif p + 1 < end and buf[p + 1] < 0x80:  # a two-byte tag: fields 16 to 32 (bool_val, string_val...)
        tag = (tag & 0x7F) | (np.int64(buf[p + 1]) << 7)
        p += 2
    else:
        return False, a, 0, 0, 0, np.uint64(0), 0
    vf, wt = tag >> 3, tag & 7
    if vf < 3 or vf > 32:
        return False, a, 0, 0, 0, np.uint64(0), 0
    if wt == 1 or wt == 5:
        width = 8 if wt == 1 else 4
        return p + width == end, a + 2, np.int64(buf[a + 1]), vf, wt, np.uint64(p), width
    if wt != 0 and wt != 2:
        return False, a, 0, 0, 0, np.uint64(0), 0
    if p < end and buf[p] < 0x80:  # a one-byte value or length: the common case
        value, body, code = np.uint64(buf[p]), p + 1, np.int64(OK)  # int64 like varint's code (pycc types it strictly)
    else:
        value, body, code = varint(buf, p, end)
    if code != OK:
        return False, a, 0, 0, 0, np.uint64(0), 0
    if wt == 0:
        return body == end, a + 2, np.int64(buf[a + 1]), vf, wt, value, 0
    return value == np.uint64(end - body), a + 2, np.int64(buf[a + 1]), vf, wt, np.uint64(body), np.int64(value)


@inline
def _other_attr(buf, a, end, i, err, keys, key_ptr, kind, values, table, scratch):  # pragma: no cover - compiled
    """An attribute message of record ``i`` of another layout than :func:`_simple_attr`'s, walked field by field:
    framed (the first corrupt one goes to ``err[0:5]``), its value stored when its name is one of the keys of
    :func:`tracekit.wire.kernels.find_attrs` (``table``: their :func:`_key_table`) and the first of that name."""
    nm_s, nm_l, vf, vwt, vv, vsize, odd = _attr_fields(buf, a, end)
    if nm_l < 0:  # does not frame: the error's details (code, field, wire type)
        if err[0] == OK:
            _check_attr(buf, a, end, err, i)
        return
    k = _key_of(buf, nm_s, nm_l, keys, key_ptr, table)
    if k >= 0 and kind[k, i] == ABSENT:
        kind[k, i], values[k, i] = _attr_value(buf, vf, vwt, vv, vsize, odd, scratch)


@inline
def _name_hash(data, at, length):  # pragma: no cover - compiled
    """A slot of ``_SLOTS`` for the name ``data[at : at + length]``, from its length and four of its bytes."""
    x = np.uint64(length)
    if length:
        x |= np.uint64(data[at]) << np.uint64(8)
        x |= np.uint64(data[at + length - 1]) << np.uint64(16)
        x |= np.uint64(data[at + (length >> 1)]) << np.uint64(24)
        x |= np.uint64(data[at + ((3 * length) >> 2)]) << np.uint64(32)
    return np.int64((x * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(57)) & (_SLOTS - 1)


@inline
def _key_table(keys, key_ptr):  # pragma: no cover - compiled
    """int64[_SLOTS]: the key (index + 1) in each :func:`_name_hash` slot of the K names of ``find_attrs``;
    0 for none, -1 where two keys share the slot (compared one by one then)."""
    table = np.zeros(_SLOTS, dtype=np.int64)
    for k in range(len(key_ptr) - 1):
        h = _name_hash(keys, key_ptr[k], key_ptr[k + 1] - key_ptr[k])
        table[h] = k + 1 if table[h] == 0 else -1
    return table


@inline
def _key_of(buf, at, length, keys, key_ptr, table):  # pragma: no cover - compiled
    """The index of the key equal to the name ``buf[at : at + length]`` (keys are distinct), or -1."""
    if len(key_ptr) < 2:
        return -1
    slot = table[_name_hash(buf, at, length)]
    if slot > 0:
        ks = key_ptr[slot - 1]
        return slot - 1 if key_ptr[slot] - ks == length and _same_key(buf, at, keys, ks, length) else -1
    if slot < 0:
        for k in range(len(key_ptr) - 1):
            if key_ptr[k + 1] - key_ptr[k] == length and _same_key(buf, at, keys, key_ptr[k], length):
                return k
    return -1


@inline
def _same_key(buf, at, keys, ks, length):  # pragma: no cover - compiled
    """Whether ``buf[at : at + length]`` equals ``keys[ks : ks + length]``."""
    for j in range(length):
        if buf[at + j] != keys[ks + j]:
            return False
    return True
