"""The protobuf wire primitives the compiled read loops share: result codes, attribute value kinds, varints, fields.

Inlined into the kernels of :mod:`tracekit.wire.kernels` and the attribute
helpers of :mod:`tracekit.wire._attrwire`; callers outside the kernels read these
names through :mod:`tracekit.wire.kernels`, which re-exports them.  The wire
rules: https://protobuf.dev/programming-guides/encoding/.
"""

from __future__ import annotations

import numpy as np

from tracekit.jit import inline

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
