"""Compiled scans of encoded ``Node`` records for readers outside the columns (issue 17).

Each kernel (:func:`tracekit._jit.kernel`) walks the top-level fields of every
record (the wire rules and field walkers of :mod:`tracekit._encode`) and fills
arrays the caller allocates, so no Python object is built per record:

* :func:`type_and_string_attr`: each record's type and, for chosen types, where
  its first attribute of a name holds a string (``pg_name`` for
  :mod:`tracekit.astra_compat`);
* :func:`names_containing`: which records' names hold a byte string
  (``process_group:init`` for :mod:`tracekit.groups`).

Kernels report a malformed record by returning ``-(record + 1)``.
"""

from __future__ import annotations

import numpy as np

from tracekit._encode import _ATTR_FIELD, _U7, _field_end, _names_match, _next_field, _read_varint
from tracekit._jit import kernel


@kernel
def type_and_string_attr(buf, starts, ends, key, wanted, types, at, length):  # pragma: no cover - compiled
    """Each record's ``type`` (field 3) and, for types ``wanted``, where its first attribute named ``key`` holds a
    ``string_val``.

    Args:
        wanted: bool[T]: the record types (wire numbers below T) whose attribute is looked for.

    Fills ``types`` int64[N] (0 when absent, as proto3 reads it; the last ``type`` field wins),
    ``at``/``length`` int64[N]: the string's bytes ``buf[at:at+length]``; ``length`` -1 when there is
    no such attribute (or the type is not wanted), -2 when it holds something other than one
    ``string_val`` (29).  A record's attributes are walked only when its type is wanted, up to the
    first one named ``key``.

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
        length[i] = -1
        at[i] = 0
        if typ >= np.uint64(len(wanted)) or not wanted[np.int64(typ)]:
            continue
        p = starts[i]
        while p < end:
            tag, q = _read_varint(buf, p, end)
            q2 = _field_end(buf, q, end, np.int64(tag & _U7))
            if tag == np.uint64(_ATTR_FIELD << 3 | 2):
                _, pp = _read_varint(buf, q, end)
                named = False
                n_values = 0
                s_at = 0
                s_len = -2
                while pp < q2:
                    t2, r2 = _read_varint(buf, pp, q2)
                    e2 = -1 if r2 < 0 else _field_end(buf, r2, q2, np.int64(t2 & _U7))
                    if e2 < 0:
                        return -(i + 1)
                    if t2 == np.uint64(1 << 3 | 2):
                        _, ds = _read_varint(buf, r2, q2)
                        named = _names_match(buf, ds, e2, key)
                    elif t2 >> np.uint64(3) >= np.uint64(3):
                        n_values += 1
                        if t2 == np.uint64(29 << 3 | 2):
                            _, ds = _read_varint(buf, r2, q2)
                            s_at = ds
                            s_len = e2 - ds
                    pp = e2
                if named:
                    at[i] = s_at
                    length[i] = s_len if n_values == 1 else -2
                    break
            p = q2
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
