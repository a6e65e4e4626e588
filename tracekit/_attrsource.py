"""Attribute values of every node, found by name across all attribute messages (vectorized).

Used by :mod:`tracekit._columnar` (``NodeColumns.attr``/``attr_int``) and
:mod:`tracekit._nodeview` (per-node attribute decoding).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from tracekit._wire import _U64, _VALID_WT, _WIDTH, _Corrupt, _varint_at, walk_fields
from tracekit.errors import TraceFormatError

_VARINT_FIELDS = np.array([7, 9, 11, 13, 15, 17, 27])  # int32 int64 uint32 uint64 sint32 sint64 bool
_FIXED_FIELDS = {3: ("<f8", 8), 5: ("<f4", 4), 19: ("<u4", 4), 21: ("<u8", 8), 23: ("<i4", 4), 25: ("<i8", 8)}


class _AttrSource:
    """Finds attributes by name across all nodes, vectorized over attribute messages."""

    def __init__(
        self,
        data: bytes,
        buf: np.ndarray,
        n: int,
        owner: np.ndarray,
        start: np.ndarray,
        size: np.ndarray,
        ids: np.ndarray,
        encoded: Any,
    ) -> None:
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
                raise TraceFormatError(
                    f"undecodable attribute ({exc.reason})",
                    byte_offset=int(start[i]),
                    path=self.encoded.path,
                    rank=self.encoded.rank,
                    node_id=int(self.ids[int(self.owner[i])]),
                ) from None
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
            if pb.AttributeProto.FromString(self.data[s : s + ln]).name.encode() == key:
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

    def _scalars(self, hits: np.ndarray, key_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
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
                values[i] = attr_from_pb(pb.AttributeProto.FromString(data[s : s + ln])).value
            except (DecodeError, UnicodeDecodeError) as exc:  # a corrupt value: named as a format error
                raise TraceFormatError(
                    f"attribute {name!r} cannot be decoded ({exc})",
                    path=self.encoded.path,
                    rank=self.encoded.rank,
                    node_id=int(self.ids[i]),
                ) from None
        present[owner] = True
        return present, values
