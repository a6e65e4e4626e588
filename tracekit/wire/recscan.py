"""Compiled scans of encoded ``Node`` records for readers outside the columns (issue 17).

Each kernel (:func:`tracekit.jit.kernel`) walks the top-level fields of every
record (the wire rules and field walkers of :mod:`tracekit.wire.encode`) and fills
arrays the caller allocates, so no Python object is built per record:

* :func:`record_types`: each record's type; :func:`string_attr_in`: whether
  chosen records' first attribute of a name holds one of some strings
  (``pg_name`` for :mod:`tracekit.interop.astra`);
* :func:`names_containing`: which records' names hold a byte string
  (``process_group:init`` for :mod:`tracekit.model.groups`).

Kernels report a malformed record by returning ``-(record + 1)``.
"""

from __future__ import annotations

import numpy as np

from tracekit.wire.encode import _ATTR_FIELD, _names_match, _next_field, _read_varint
from tracekit.jit import inline, kernel

_ATTR_TAG = _ATTR_FIELD << 3 | 2  # the one-byte tag of Node.attr (0x52)


@kernel
def record_types(buf, starts, ends, types):  # pragma: no cover - compiled
    """Each record's ``type`` (field 3) into ``types`` int64[N] (0 when absent, as proto3 reads it; the last wins).

    Returns:
        0, or ``-(i + 1)`` when record ``i`` is malformed.
    """
    for i in range(len(starts)):
        end = ends[i]
        typ = np.uint64(0)
        p = starts[i]
        while p < end:
            tag, q, q2 = _next_field(buf, p, end)
            if q2 < 0:
                return -(i + 1)
            if tag == np.uint64(3 << 3):
                typ, _ = _read_varint(buf, q, end)
            p = q2
        types[i] = np.int64(typ)
    return 0


@inline
def _string_attr(buf, p, end, key):  # pragma: no cover - compiled
    """``(at, length)`` of the string held by the first attribute named ``key`` of the record ``buf[p:end]``.

    ``length`` -1: no such attribute; -2: it holds something other than one ``string_val`` (29);
    -3: the record is malformed.  An attribute field with a one-byte tag and length (the usual case) is
    framed without the general field walk, and a name is compared only when its length is the key's.
    """
    nk = len(key)
    while p < end:
        if buf[p] == _ATTR_TAG and p + 1 < end and buf[p + 1] < 0x80:  # attr = 10, length < 128
            q = p + 2
            q2 = q + np.int64(buf[p + 1])
            if q2 > end:
                return 0, -3
        else:
            tag, q, q2 = _next_field(buf, p, end)
            if q2 < 0:
                return 0, -3
            if tag != np.uint64(_ATTR_TAG):
                p = q2
                continue
            _, q = _read_varint(buf, q, end)
        named = False
        n_values = 0
        s_at = 0
        s_len = -2
        while q < q2:
            t2, r2, e2 = _next_field(buf, q, q2)
            if e2 < 0:
                return 0, -3
            if t2 == np.uint64(1 << 3 | 2):
                ds = r2 + 1 if buf[r2] < 0x80 else _read_varint(buf, r2, q2)[1]
                named = e2 - ds == nk and _names_match(buf, ds, e2, key)
            elif t2 >= np.uint64(3 << 3):
                n_values += 1
                if t2 == np.uint64(29 << 3 | 2):
                    s_at = r2 + 1 if buf[r2] < 0x80 else _read_varint(buf, r2, q2)[1]
                    s_len = e2 - s_at
            q = e2
        if named:
            return s_at, (s_len if n_values == 1 else -2)
        p = q2
    return 0, -1


@kernel
def string_attr_in(buf, starts, ends, rows, key, table, table_ptr, flags):  # pragma: no cover - compiled
    """Whether the first attribute named ``key`` (uint8 bytes) of each record of ``rows`` (int64[K]) holds a string
    of a table (row ``j``: ``table[table_ptr[j]:table_ptr[j+1]]``).

    Fills ``flags`` int8[K]: 1 it holds one ``string_val`` equal to a table row, 2 it holds something
    other than one ``string_val``, 0 otherwise (another string, or no such attribute).

    Returns:
        0, or ``-(k + 1)`` when the record of row ``k`` is malformed.
    """
    for x in range(len(rows)):
        i = rows[x]
        at, length = _string_attr(buf, starts[i], ends[i], key)
        if length == -3:
            return -(x + 1)
        flags[x] = 2 if length == -2 else 0
        if length >= 0:
            for j in range(len(table_ptr) - 1):
                if _names_match(buf, at, at + length, table[table_ptr[j] : table_ptr[j + 1]]):
                    flags[x] = 1
                    break
    return 0


@kernel
def names_containing(buf, starts, ends, needle, hits):  # pragma: no cover - compiled
    """``hits[i]`` (bool[N]): the name (the last field 2) of record ``i`` holds the bytes ``needle`` (uint8, not empty).

    Returns:
        0; 1 when some name has a byte of 0x80 or more (the caller decodes the names, which checks
        their UTF-8); ``-(i + 1)`` when record ``i`` is malformed.
    """
    wide = 0
    m = len(needle)
    for i in range(len(starts)):
        p = starts[i]
        end = ends[i]
        ns = p
        nl = 0
        while p < end:
            tag, q, q2 = _next_field(buf, p, end)
            if q2 < 0:
                return -(i + 1)
            if tag == np.uint64(2 << 3 | 2):
                _, ns = _read_varint(buf, q, end)
                nl = q2 - ns
            p = q2
        hit = False
        for a in range(ns, ns + nl):
            if buf[a] >= 0x80:
                wide = 1
            if not hit and a + m <= ns + nl and buf[a] == needle[0]:
                hit = True
                for x in range(1, m):
                    if buf[a + x] != needle[x]:
                        hit = False
                        break
        hits[i] = hit
    return wide
