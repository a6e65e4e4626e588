"""Vectorized protobuf field framing over many messages at once (numpy, for :mod:`tracekit.transforms`).

The read path walks records with the compiled loops of :mod:`tracekit._wirekernels`;
:func:`walk_fields` remains for the record rewrites of the columnar transforms.

The rules followed (https://protobuf.dev/programming-guides/encoding/): varints
of up to 10 bytes, wire types 0 (varint), 1 (64-bit), 2 (length-delimited),
5 (32-bit); packed repeated varints.  Every function works on a uint8 view of
the bytes and int64 arrays of positions, one entry per message.
"""

from __future__ import annotations

import numpy as np

_U64 = np.uint64
_SHIFTS = [np.uint64(7 * k) for k in range(10)]
_LOW7 = np.uint8(0x7F)


class _Corrupt(Exception):
    def __init__(self, msg_index: int, reason: str) -> None:
        super().__init__(reason)
        self.msg_index, self.reason = msg_index, reason


def _varint_at(buf: np.ndarray, pos: np.ndarray, limit: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode one varint at each position; ``(values uint64, lengths int64)``.

    Raises:
        _Corrupt: a varint runs past its message end or over 10 bytes.
    """
    last = len(buf) - 1
    b = buf[np.minimum(pos, last)]
    cont = b >= 0x80
    if not cont.any():  # the common case: every varint is one byte
        lens = np.ones(len(pos), dtype=np.int64)
        vals = b.astype(_U64)
    else:
        vals = (b & _LOW7).astype(_U64)
        lens = np.ones(len(pos), dtype=np.int64)
        todo = np.flatnonzero(cont)
        for k in range(1, 10):
            p = pos[todo] + k
            bk = buf[np.minimum(p, last)]
            vals[todo] |= (bk & _LOW7).astype(_U64) << _SHIFTS[k]
            lens[todo] = k + 1
            todo = todo[bk >= 0x80]
            if not len(todo):
                break
        else:
            raise _Corrupt(int(owner[todo[0]]), "varint longer than 10 bytes")
    over = pos + lens > limit
    if over.any():
        raise _Corrupt(int(owner[np.argmax(over)]), "truncated varint")
    return vals, lens


_WIDTH = np.array([0, 8, 0, 0, 0, 4, 0, 0], dtype=np.int64)  # fixed payload bytes by wire type
_VALID_WT = np.array([True, True, True, False, False, True, False, False])


def walk_fields(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, visit=None) -> None:
    """Frame every top-level field of a batch of messages, in lockstep.

    Args:
        buf: uint8 view of the bytes.
        starts, ends: int64[M] message spans.
        visit: called once per step as ``visit(msg, field, wt, value, size, at)``
            with arrays of equal length (one entry per message that still has
            fields): ``msg`` message index (ascending), ``field`` number,
            ``wt`` wire type, ``value`` (the varint for wire type 0, else the
            payload start), ``size`` (payload bytes for wire types 1, 2, 5),
            ``at`` (byte offset of the tag).  Steps visit each message's
            fields in file order.

    Raises:
        _Corrupt: a field runs past its message end, a bad wire type, field 0.
    """
    cur = starts.copy()
    live = np.flatnonzero(cur < ends)
    last = len(buf) - 1
    while len(live):
        c, e = cur[live], ends[live]
        b = buf[c]
        if (b < 0x80).all():  # one-byte tags (fields 1..15): the common case
            field = (b >> 3).astype(np.int64)
            wt = (b & 7).astype(np.int64)
            body = c + 1
        else:
            tag, tl = _varint_at(buf, c, e, live)
            field = (tag >> _U64(3)).astype(np.int64)
            wt = (tag & _U64(7)).astype(np.int64)
            body = c + tl
        ok = _VALID_WT[wt] & (field != 0)
        if not ok.all():
            i = int(np.argmax(~ok))
            raise _Corrupt(int(live[i]), f"invalid field tag (field {int(field[i])}, wire type {int(wt[i])})")
        # wire types 0 and 2 start with a varint (the value, or the payload length)
        m02 = (wt & 5) == 0  # wt 0 or 2
        b1 = buf[np.minimum(body, last)]
        if ((b1 < 0x80) | ~m02).all():
            v = b1.astype(_U64)
            vl = m02.astype(np.int64)
            if ((body >= e) & m02).any():
                i = int(np.argmax((body >= e) & m02))
                raise _Corrupt(int(live[i]), "truncated varint")
        else:
            v = np.zeros(len(live), dtype=_U64)
            vl = np.zeros(len(live), dtype=np.int64)
            v[m02], vl[m02] = _varint_at(buf, body[m02], e[m02], live[m02])
        is2 = wt == 2
        vstart = body + vl
        size = np.where(is2, v.astype(np.int64), _WIDTH[wt])
        value = np.where(m02 & ~is2, v, vstart.astype(_U64))
        nxt = vstart + size
        over = nxt > e
        if over.any():
            i = int(np.argmax(over))
            raise _Corrupt(int(live[i]), f"field {int(field[i])} runs past the end of its message")
        if visit is not None:
            visit(live, field, wt, value, size, c)
        cur[live] = nxt
        live = live[nxt < e]
