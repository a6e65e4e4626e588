"""Column-wise decoding of encoded node records (see :class:`tracekit.io.EncodedNodes`).

Builds :class:`tracekit.graph.NodeColumns` straight from the record bytes with
numpy, without a Python object per node: all records are walked field by field
in lockstep (one vectorized step decodes the k-th field of every record), so
the cost is a few numpy passes per field position instead of a Python loop per
node.  The protobuf wire rules followed (https://protobuf.dev/programming-guides/encoding/):
varints of up to 10 bytes, wire types 0 (varint), 1 (64-bit), 2 (length-
delimited), 5 (32-bit); repeated scalars packed or not; the last value of a
singular field wins; fields of unknown number or unexpected wire type are
skipped.  Names and attribute values are decoded on first use; attribute
messages are framed on the first attribute access (or by validation), which
raises TraceFormatError for a corrupt one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracekit.errors import TraceFormatError
from tracekit.graph import NodeColumns

CHUNK_RECORDS = 1 << 18  # records decoded per batch: bounds the temporary arrays

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


def _packed_varints(buf: np.ndarray, owner: np.ndarray, start: np.ndarray, size: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode packed varint payloads: ``(owner per value, value uint64, byte offset)``."""
    total = int(size.sum())
    if total == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, np.zeros(0, dtype=_U64), z
    first = np.cumsum(size) - size
    idx = np.repeat(start - first, size) + np.arange(total, dtype=np.int64)
    b = buf[idx]
    term = b < 0x80
    ends = np.cumsum(size) - 1
    if not term[ends].all():
        i = int(np.argmax(~term[ends]))
        raise _Corrupt(int(owner[i]), "packed varint list is truncated")
    group_start = np.flatnonzero(np.concatenate(([True], term[:-1])))
    gid = np.cumsum(np.concatenate(([0], term[:-1].astype(np.int64))))
    k = np.arange(total, dtype=np.int64) - group_start[gid]
    if k.max(initial=0) > 9:
        raise _Corrupt(int(np.repeat(owner, size)[int(np.argmax(k > 9))]), "varint longer than 10 bytes")
    vals = np.bitwise_or.reduceat((b & _LOW7).astype(_U64) << (7 * k).astype(_U64), group_start)
    return np.repeat(owner, size)[group_start], vals, idx[group_start]


def _csr(n: int, owner: np.ndarray, at: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((at, owner))
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=n), out=ptr[1:])
    return ptr, values[order]


_I64_MAX = np.uint64(2**63 - 1)


def _ns(micros: np.ndarray, nanos: np.ndarray) -> np.ndarray:
    """Nanoseconds: the extension field when it agrees with the micros, else micros * 1000."""
    use = (nanos != 0) & (nanos // 1000 == micros)
    big = np.where(use, nanos > _I64_MAX, micros > _I64_MAX // 1000)
    out = np.where(use, np.minimum(nanos, _I64_MAX).astype(np.int64),
                   np.minimum(micros, _I64_MAX // 1000).astype(np.int64) * 1000)
    if big.any():  # saturate: validation names the node (a time past int64 never wraps to a negative one)
        out[big] = _I64_MAX
    return out


_KEPT_KEYS = np.array([8, 18, 24, 32, 34, 40, 42, 48, 56, 82, 8008, 8016])  # field * 8 + wire type read here
_SCALARS = (("ids", 1), ("types", 3), ("st_us", 6), ("dur_us", 7), ("dur_ns", 1001), ("st_ns", 1002))


def _decode_batch(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> dict[str, Any]:
    n = len(starts)
    out: dict[str, Any] = {name: np.zeros(n, dtype=_U64) for name, _ in _SCALARS}
    name_s = np.zeros(n, dtype=np.int64)
    name_l = np.zeros(n, dtype=np.int64)
    deps: dict[int, list[tuple[np.ndarray, ...]]] = {4: [], 5: []}
    attrs: list[tuple[np.ndarray, ...]] = []

    other = np.zeros(n, dtype=bool)  # records with fields the columns do not keep (inputs, unknown ones)

    def visit(msg, field, wt, value, size, at) -> None:
        key = field * 8 + wt
        odd = ~np.isin(key, _KEPT_KEYS) | ((key == 3 * 8) & (value >= _U64(2**15)))
        if odd.any():
            other[msg[odd]] = True
        for name, num in _SCALARS:  # singular varints: a later occurrence overwrites (last wins)
            sel = key == num * 8
            if sel.any():
                out[name][msg[sel]] = value[sel]
        sel = key == 2 * 8 + 2
        if sel.any():
            name_s[msg[sel]] = value[sel].astype(np.int64)
            name_l[msg[sel]] = size[sel]
        for num in (4, 5):
            sel = (field == num)
            if sel.any():
                deps[num].append((msg[sel], wt[sel], value[sel], size[sel], at[sel]))
        sel = key == 10 * 8 + 2
        if sel.any():
            attrs.append((msg[sel], value[sel].astype(np.int64), size[sel]))

    walk_fields(buf, starts, ends, visit)
    out["types"] = out["types"].astype(np.int64)
    out["name_s"], out["name_l"] = name_s, name_l
    out["other"] = other
    for key, num in (("data", 5), ("ctrl", 4)):
        if deps[num]:
            msg, wt, value, size, at = (np.concatenate(x) for x in zip(*deps[num]))
        else:
            msg = wt = size = at = np.zeros(0, dtype=np.int64)
            value = np.zeros(0, dtype=_U64)
        packed = wt == 2
        o1, v1, a1 = _packed_varints(buf, msg[packed], value[packed].astype(np.int64), size[packed])
        plain = wt == 0
        out[key] = _csr(n, np.concatenate((o1, msg[plain])), np.concatenate((a1, at[plain])),
                        np.concatenate((v1, value[plain])))
    if attrs:
        a_owner, a_start, a_size = (np.concatenate(x) for x in zip(*attrs))
        order = np.argsort(a_owner, kind="stable")  # steps are in file order: a stable sort keeps it
        a_owner, a_start, a_size = a_owner[order], a_start[order], a_size[order]
    else:
        a_owner = a_start = a_size = np.zeros(0, dtype=np.int64)
    out["attr"] = (a_owner, a_start, a_size)
    return out


def _first_bad_record(encoded: Any, lo: int, found: int, reason: str) -> TraceFormatError:
    """The error for the earliest corrupt record of a batch (error path only).

    The lockstep walk finds *a* corrupt record, not necessarily the first;
    records from the batch start are re-checked one by one with protobuf's
    decoder so the error names the first bad record and the last good node
    before it.
    """
    last = None
    for i in range(lo, found + 1):
        try:
            last = encoded.decode_one(i, last).id
        except TraceFormatError as err:
            return err
    return TraceFormatError(f"undecodable Node message ({reason})", byte_offset=int(encoded.starts[found]),
                            last_good_node_id=last, path=encoded.path, rank=encoded.rank)


def decode_columns(encoded: Any) -> NodeColumns:
    """Node columns of the records in ``encoded`` (a :class:`tracekit.io.EncodedNodes`).

    Raises:
        TraceFormatError: a record cannot be decoded; names the byte offset
            of the record and the id of the last good node before it.
    """
    data: bytes = encoded.data
    buf = np.frombuffer(data, dtype=np.uint8)
    starts, ends = encoded.starts, encoded.ends
    n = len(starts)
    batches = []
    for lo in range(0, max(n, 1), CHUNK_RECORDS):
        s, e = starts[lo:lo + CHUNK_RECORDS], ends[lo:lo + CHUNK_RECORDS]
        try:
            batches.append(_decode_batch(buf, s, e))
        except _Corrupt as exc:
            raise _first_bad_record(encoded, lo, lo + exc.msg_index, exc.reason) from None
    if n == 0:
        batches = batches[:1]

    def cat(key: str) -> np.ndarray:
        return np.concatenate([b[key] for b in batches]) if len(batches) > 1 else batches[0][key]

    def cat_csr(key: str) -> tuple[np.ndarray, np.ndarray]:
        if len(batches) == 1:
            return batches[0][key]
        ptrs, vals, base = [np.zeros(1, dtype=np.int64)], [], 0
        for b in batches:
            ptr, v = b[key]
            ptrs.append(ptr[1:] + base)
            vals.append(v)
            base += int(ptr[-1])
        return np.concatenate(ptrs), np.concatenate(vals)

    ids = cat("ids")
    types = np.clip(cat("types"), -2**15, 2**15 - 1).astype(np.int16)  # out-of-range types saturate, never wrap
    duration = _ns(cat("dur_us"), cat("dur_ns"))
    start = _ns(cat("st_us"), cat("st_ns"))
    if not start.any():  # no measured starts (generated traces): a read-only zero view, no memory
        start = np.broadcast_to(np.int64(0), (n,))
    dptr, dids = cat_csr("data")
    cptr, cids = cat_csr("ctrl")
    off_t = np.int32 if len(data) < 2**31 else np.int64  # byte offsets: 4 bytes for files under 2 GiB
    name_s, name_l = cat("name_s").astype(off_t), cat("name_l").astype(np.int32)
    offsets = np.cumsum([0] + [len(b["ids"]) for b in batches])
    idx_t = np.int32 if n < 2**31 else np.int64  # attribute index arrays: 4 bytes per entry where possible
    a_owner = np.concatenate([(b["attr"][0] + off).astype(idx_t) for b, off in zip(batches, offsets)])
    a_start = np.concatenate([b["attr"][1] for b in batches]).astype(off_t)
    a_size = np.concatenate([b["attr"][2] for b in batches]).astype(np.int32)
    source = _AttrSource(data, buf, n, a_owner, a_start, a_size, ids, encoded)
    source.other = cat("other")  # for tracekit._nodeview: records it must decode with protobuf

    def names_fn() -> list[str]:
        return _names(data, buf, name_s.astype(np.int64), name_l.astype(np.int64), encoded, ids)

    return NodeColumns(ids, types, duration, start, dptr, dids, cptr, cids, names_fn=names_fn,
                       attr_fn=source.values, attr_num_fn=source.numeric, verify_fn=source.verify)


_ARANGE8 = np.arange(8)


def _short_name_groups(buf: np.ndarray, s: np.ndarray, ln: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Group names of at most 16 bytes by content without a Python step per node.

    Returns ``(first index of each group, group of each name)``, or None when
    a name is longer (the caller slices them one by one).
    """
    if len(s) == 0 or int(ln.max()) > 16:
        return None
    last = len(buf) - 1
    head = buf[np.minimum(s[:, None] + _ARANGE8, last)]
    head[_ARANGE8 >= ln[:, None]] = 0
    tail = buf[np.minimum(np.maximum(s + ln - 8, 0)[:, None] + _ARANGE8, last)]
    tail[ln <= 8] = 0
    h, t = head.view(np.uint64).ravel(), tail.view(np.uint64).ravel()
    key = (h * np.uint64(0x9E3779B97F4A7C15)) ^ (t * np.uint64(0xC2B2AE3D27D4EB4F)) ^ ln.astype(np.uint64)
    _, first, group = np.unique(key, return_index=True, return_inverse=True)
    rep = first[group]
    if not ((h == h[rep]) & (t == t[rep]) & (ln == ln[rep])).all():  # a hash collision: no shortcut
        return None
    return first, group


def _names(data: bytes, buf: np.ndarray, s: np.ndarray, ln: np.ndarray, encoded: Any, ids: np.ndarray) -> list[str]:
    """The N node names (UTF-8 decoded; each distinct name decoded once).

    Raises:
        TraceFormatError: a name is not UTF-8 (names the node).
    """
    grouped = _short_name_groups(buf, s, ln)
    if grouped is not None:
        first, group = grouped
        raw = [data[a:a + b] for a, b in zip(s[first].tolist(), ln[first].tolist())]
        where = first.tolist()
    else:
        raw = list(map(data.__getitem__, map(slice, s.tolist(), (s + ln).tolist())))
        where = list(range(len(raw)))
    text = {}
    for r, i in zip(raw, where):
        if r not in text:
            try:
                text[r] = r.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TraceFormatError(f"node name is not valid UTF-8 ({exc.reason})", path=encoded.path,
                                       rank=encoded.rank, node_id=int(ids[i])) from None
    if grouped is not None:
        table = np.empty(len(raw), dtype=object)
        table[:] = [text[r] for r in raw]
        return table[group].tolist()
    return list(map(text.__getitem__, raw))


_VARINT_FIELDS = np.array([7, 9, 11, 13, 15, 17, 27])  # int32 int64 uint32 uint64 sint32 sint64 bool
_FIXED_FIELDS = {3: ("<f8", 8), 5: ("<f4", 4), 19: ("<u4", 4), 21: ("<u8", 8), 23: ("<i4", 4), 25: ("<i8", 8)}


class _AttrSource:
    """Finds attributes by name across all nodes, vectorized over attribute messages."""

    def __init__(self, data: bytes, buf: np.ndarray, n: int, owner: np.ndarray, start: np.ndarray,
                 size: np.ndarray, ids: np.ndarray, encoded: Any) -> None:
        self.data, self.buf, self.n = data, buf, n
        self.owner, self.start, self.size, self.ids, self.encoded = owner, start, size, ids, encoded
        self._verified = False
        self._head: np.ndarray | None = None
        self.other: np.ndarray | None = None  # bool[N], set by decode_columns

    def verify(self) -> None:
        """Frame every attribute message once (first attribute access, or validation).

        Attribute framing costs as much as decoding the nodes themselves, so
        it is not part of reading; any use of attributes runs it first.

        Raises:
            TraceFormatError: a corrupt attribute, naming its node and byte offset.
        """
        if self._verified:
            return
        if len(self.start):
            start = self.start.astype(np.int64)
            rest = np.flatnonzero(~self._canonical(start, start + self.size))
            try:
                walk_fields(self.buf, start[rest], start[rest] + self.size[rest])
            except _Corrupt as exc:
                i = int(rest[exc.msg_index])
                raise TraceFormatError(f"undecodable attribute ({exc.reason})", byte_offset=int(start[i]),
                                       path=self.encoded.path, rank=self.encoded.rank,
                                       node_id=int(self.ids[int(self.owner[i])])) from None
        self._verified = True

    def _name_lengths(self) -> np.ndarray:
        """Per attribute message: the length of a leading one-byte-framed name field (field 1), else 255."""
        if self._head is None:
            s, buf = self.start.astype(np.int64), self.buf
            last = len(buf) - 1
            ln = buf[np.minimum(s + 1, last)]
            ok = (self.size >= 2) & (buf[np.minimum(s, last)] == 0x0A) & (ln < 0x80)
            ok &= self.size >= 2 + ln.astype(np.int64)
            self._head = np.where(ok, ln, np.uint8(255)).astype(np.uint8)
        return self._head

    def _value_tag(self, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per attribute message (all of them): the field after the name, read as a one- or two-byte tag.

        Returns ``(named bool, has_value bool, field int64, wire type int64, body int64, tag_ok bool)``.
        """
        buf, last = self.buf, len(self.buf) - 1
        head = self._name_lengths()
        p = start + 2 + head.astype(np.int64)
        named = (head != 255) & (p <= end)
        has_val = named & (p < end)
        b0 = buf[np.minimum(p, last)].astype(np.int64)
        b1 = buf[np.minimum(p + 1, last)].astype(np.int64)
        two = b0 >= 0x80
        tag = np.where(two, (b0 & 0x7F) | (b1 << 7), b0)
        body = p + 1 + two
        wt = tag & 7
        field = tag >> 3
        tag_ok = (~two | ((b1 < 0x80) & (p + 1 < end))) & (field != 0) & _VALID_WT[wt]
        return named, has_val, field, wt, body, tag_ok

    def _canonical(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """bool[K] over all attribute messages: laid out as ``name`` then at most one well-formed value field.

        These frame correctly by construction; :meth:`verify` walks only the others.
        """
        buf, last = self.buf, len(self.buf) - 1
        named, has_val, _, wt, body, tag_ok = self._value_tag(start, end)
        ok = named & (~has_val | tag_ok)
        fixed = has_val & tag_ok & ((wt == 1) | (wt == 5))
        ok &= ~fixed | (body + _WIDTH[wt] == end)
        for code in (0, 2):
            sel = np.flatnonzero(has_val & tag_ok & (wt == code))
            if not len(sel):
                continue
            b = body[sel]
            try:
                v, vl = _varint_at(buf, np.minimum(b, last), end[sel], sel)
            except _Corrupt:
                ok[sel] = False
                continue
            stop = b + vl + (v.astype(np.int64) if code == 2 else 0)
            ok[sel] &= (b < end[sel]) & (stop == end[sel]) & (v < _U64(2**62) if code == 2 else True)
        return ok

    def _matching(self, name: str) -> np.ndarray:
        """Indexes of attribute messages whose first field is ``name`` (field 1, as writers emit it)."""
        key = name.encode()
        if not len(self.start) or len(key) > 127:
            return self._matching_slow(key)
        s, buf = self.start, self.buf
        cand = np.flatnonzero(self._name_lengths() == len(key))
        if len(key) and len(cand):
            window = buf[s[cand, None] + 2 + np.arange(len(key))]
            cand = cand[(window == np.frombuffer(key, dtype=np.uint8)).all(axis=1)]
        return cand

    def _matching_slow(self, key: bytes) -> np.ndarray:
        from tracekit._proto import et_def_pb2 as pb

        hits = []
        for i, (s, ln) in enumerate(zip(self.start.tolist(), self.size.tolist())):
            if pb.AttributeProto.FromString(self.data[s:s + ln]).name.encode() == key:
                hits.append(i)
        return np.asarray(hits, dtype=np.int64)

    def _first_hits(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(attribute indexes, owning node positions) of the first ``name`` attribute of each node."""
        self.verify()
        hits = self._matching(name)
        owner = self.owner[hits]
        if not len(hits):
            return hits, owner.astype(np.int64)
        first = np.concatenate(([True], owner[1:] != owner[:-1]))  # attrs are sorted by (owner, position)
        return hits[first], owner[first].astype(np.int64)

    def _scalars(self, hits: np.ndarray, key_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Vectorized decode of scalar numeric values laid out as ``name, value`` (the canonical layout).

        Returns ``(fast bool[K], ints int64[K], floats float64[K], kind int8[K])``;
        ``fast`` marks the messages decoded here; ``kind`` is 0 for integers (in
        ``ints``), 1 for bools (in ``ints``), 2 for floating kinds (in
        ``floats``).  The rest (strings, lists, doc strings, uint64 values of
        2^63 or more) go the slow way.
        """
        k = len(hits)
        fast = np.zeros(k, dtype=bool)
        ints = np.zeros(k, dtype=np.int64)
        floats = np.zeros(k, dtype=np.float64)
        kind = np.zeros(k, dtype=np.int8)
        if not k:
            return fast, ints, floats, kind
        buf = self.buf
        s = self.start[hits].astype(np.int64)
        e = s + self.size[hits]
        p = s + 2 + key_len
        cand = np.flatnonzero(p < e)
        if not len(cand):
            return fast, ints, floats, kind
        try:
            tag, tl = _varint_at(buf, p[cand], e[cand], cand)
        except _Corrupt:
            return fast, ints, floats, kind  # leave it to the slow path, which names the node
        field = (tag >> _U64(3)).astype(np.int64)
        wt = (tag & _U64(7)).astype(np.int64)
        body = p[cand] + tl
        is_var = (wt == 0) & np.isin(field, _VARINT_FIELDS)
        if is_var.any():
            vi = np.flatnonzero(is_var)
            try:
                v, vl = _varint_at(buf, body[vi], e[cand][vi], vi)
            except _Corrupt:
                v, vl = None, None
            if v is not None:
                f = field[vi]
                exact = (body[vi] + vl == e[cand][vi]) & ~((f == 13) & (v >= _U64(2**63)))
                signed = v.view(np.int64)
                zig = ((v >> _U64(1)).view(np.int64)) ^ -((v & _U64(1)).view(np.int64))
                val = np.where((f == 15) | (f == 17), zig, signed)
                val = np.where(f == 7, val.astype(np.int32).astype(np.int64), val)  # int32: low 32 bits
                val = np.where(f == 11, (v & _U64(0xFFFFFFFF)).view(np.int64), val)
                idx = cand[vi[exact]]
                ints[idx] = val[exact]
                kind[idx] = np.where(f[exact] == 27, 1, 0)
                fast[idx] = True
        for fnum, (dtype, width) in _FIXED_FIELDS.items():
            sel = np.flatnonzero((field == fnum) & (wt == (1 if width == 8 else 5)) & (body + width == e[cand]))
            if not len(sel):
                continue
            raw = buf[body[sel, None] + np.arange(width)].copy().view(dtype).ravel()
            idx = cand[sel]
            if dtype[1] == "f":
                floats[idx] = raw.astype(np.float64)
                kind[idx] = 2
            elif dtype == "<u8":
                ok = raw < np.uint64(2**63)
                idx = idx[ok]
                ints[idx] = raw[ok].astype(np.int64)
            else:
                ints[idx] = raw.astype(np.int64)
            fast[idx] = True
        return fast, ints, floats, kind

    def numeric(self, name: str, ints_only: bool = False, bools: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
        """``(present bool[N], values int64[N])`` when every ``name`` attribute is a scalar number, else None.

        Floats are truncated toward zero (the integer rule of :func:`tracekit.attrs.as_int`); a bool or
        non-finite float gives None (the per-value rule raises for them) unless ``bools`` (bools as 0/1);
        with ``ints_only`` a floating value gives None too.
        """
        hits, owner = self._first_hits(name)
        present = np.zeros(self.n, dtype=bool)
        out = np.zeros(self.n, dtype=np.int64)
        if not len(hits):
            return present, out
        fast, ints, floats, kind = self._scalars(hits, len(name.encode()))
        if not fast.all() or (not bools and bool((kind == 1).any())) or (ints_only and bool((kind == 2).any())):
            return None  # bools, strings, lists: the per-value rule decides (tracekit.attrs.as_int)
        if not np.isfinite(floats[kind == 2]).all():
            return None
        out[owner] = np.where(kind == 2, np.trunc(floats).astype(np.int64), ints)
        present[owner] = True
        return present, out

    def values(self, name: str) -> tuple[np.ndarray, list[Any]]:
        """``(present bool[N], values list[N])`` of attribute ``name`` (first occurrence per node)."""
        from tracekit._codec import attr_from_pb
        from tracekit._proto import et_def_pb2 as pb

        hits, owner = self._first_hits(name)
        present = np.zeros(self.n, dtype=bool)
        values: list[Any] = [None] * self.n
        if not len(hits):
            return present, values
        fast, ints, floats, kind = self._scalars(hits, len(name.encode()))
        scattered = np.full(self.n, None, dtype=object)  # scalars placed by numpy, not a Python loop
        for code, column, conv in ((0, ints, None), (1, ints, bool), (2, floats, None)):
            sel = fast & (kind == code)
            if sel.any():
                vals = column[sel].tolist()  # Python ints / floats, as the protobuf path gives
                if conv is not None:
                    vals = [conv(v) for v in vals]
                block = np.empty(len(vals), dtype=object)
                block[:] = vals
                scattered[owner[sel]] = block
        values = scattered.tolist()
        data = self.data
        slow = ~fast
        for i, s, ln in zip(owner[slow].tolist(), self.start[hits[slow]].tolist(), self.size[hits[slow]].tolist()):
            try:
                values[i] = attr_from_pb(pb.AttributeProto.FromString(data[s:s + ln])).value
            except Exception as exc:  # noqa: BLE001 - protobuf DecodeError and UnicodeDecodeError
                raise TraceFormatError(f"attribute {name!r} cannot be decoded ({exc})", path=self.encoded.path,
                                       rank=self.encoded.rank, node_id=int(self.ids[i])) from None
        present[owner] = True
        return present, values
