"""A rank's encoded node records, rewritten with numpy instead of Python objects per node (issue 17).

Columnar transforms decide *what* changes on :class:`~tracekit.graph.NodeColumns`
arrays and express it as an :class:`Edit` of the encoded ``Node`` records: records
to drop, whole fields to drop (e.g. every ``duration_micros``), and new field bytes
to insert (encoded here, vectorized).  :func:`rewrite` splices the records with a
single gather per batch of records, so untouched bytes are copied as they are and
no ``Node`` object is built.

Insertion keeps the canonical field order protobuf serializers write (field
number order): a new field ``F`` goes before the first kept field whose number is
greater than ``F``.  Wire rules (https://protobuf.dev/programming-guides/encoding/):
tags are ``varint(field << 3 | wire_type)``; varints are little-endian base-128;
repeated integers are written packed (wire type 2: a length, then the varints),
which is what protobuf's own serializer writes for proto3.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracekit._columnar import walk_fields

BATCH_RECORDS = 1 << 16  # records spliced per gather: bounds the temporary index arrays (~8 bytes per output byte)
_U64 = np.uint64


# ----------------------------------------------------------------------------- byte building
def varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varint encodings of ``values`` (uint64[K]): ``(bytes uint8[sum lens], lens int64[K])``, in order."""
    v = np.asarray(values).astype(_U64)
    lens = np.ones(len(v), dtype=np.int64)
    for k in range(1, 10):
        lens += v >= _U64(1) << _U64(7 * k)
    ptr = np.zeros(len(v) + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    out = np.zeros(int(ptr[-1]), dtype=np.uint8)
    for k in range(int(lens.max(initial=0))):
        sel = np.flatnonzero(lens > k)
        byte = ((v[sel] >> _U64(7 * k)) & _U64(0x7F)).astype(np.uint8)
        byte |= np.where(lens[sel] > k + 1, 0x80, 0).astype(np.uint8)
        out[ptr[sel] + k] = byte
    return out, lens


def tag(field_number: int, wire_type: int) -> bytes:
    """The tag bytes of ``field_number`` with ``wire_type``."""
    b, _ = varints(np.asarray([field_number << 3 | wire_type], dtype=_U64))
    return b.tobytes()


@dataclass(frozen=True)
class Blobs:
    """One byte string per row, as a flat array: row ``i`` is ``data[ptr[i]:ptr[i+1]]``."""

    data: np.ndarray  # uint8
    ptr: np.ndarray  # int64[K+1]

    @property
    def lens(self) -> np.ndarray:
        """Byte length of each row, int64[K]."""
        return np.diff(self.ptr)

    def __len__(self) -> int:
        return len(self.ptr) - 1

    @classmethod
    def of(cls, data: np.ndarray, lens: np.ndarray) -> "Blobs":
        """Rows of the given lengths over flat ``data`` (uint8[sum(lens)])."""
        ptr = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        return cls(np.asarray(data, dtype=np.uint8), ptr)

    @classmethod
    def const(cls, raw: bytes, k: int) -> "Blobs":
        """``k`` rows, each ``raw``."""
        return cls.of(np.tile(np.frombuffer(raw, dtype=np.uint8), k), np.full(k, len(raw), dtype=np.int64))

    @classmethod
    def from_list(cls, items: list[bytes]) -> "Blobs":
        """One row per byte string of ``items``."""
        return cls.of(
            np.frombuffer(b"".join(items), dtype=np.uint8),
            np.fromiter((len(x) for x in items), dtype=np.int64, count=len(items)),
        )


def concat_rows(*parts: Blobs) -> Blobs:
    """Row-wise concatenation: row ``i`` of the result is ``parts[0][i] + parts[1][i] + ...``."""
    k = len(parts[0])
    lens = np.zeros(k, dtype=np.int64)
    for p in parts:
        lens += p.lens
    out = Blobs.of(np.zeros(int(lens.sum()), dtype=np.uint8), lens)
    at = out.ptr[:-1].copy()
    for p in parts:
        pl = p.lens
        total = int(pl.sum())
        if total:
            idx = np.repeat(at - p.ptr[:-1], pl) + np.arange(total, dtype=np.int64)
            out.data[idx] = p.data
        at += pl
    return out


def varint_fields(field_number: int, values: np.ndarray) -> Blobs:
    """``field_number`` (wire type 0) = each of ``values`` (non-negative ints), one field per row."""
    b, lens = varints(values)
    return concat_rows(Blobs.const(tag(field_number, 0), len(values)), Blobs.of(b, lens))


def packed_fields(field_number: int, ptr: np.ndarray, values: np.ndarray) -> Blobs:
    """A packed repeated-varint field per row (CSR ``ptr`` int64[K+1], ``values`` uint64[E]); empty rows get nothing."""
    b, vl = varints(values)
    vptr = np.zeros(len(vl) + 1, dtype=np.int64)
    np.cumsum(vl, out=vptr[1:])
    payload_lens = vptr[ptr[1:]] - vptr[ptr[:-1]]
    payload = Blobs.of(b, payload_lens)
    lb, ll = varints(payload_lens)
    head = concat_rows(Blobs.const(tag(field_number, 2), len(payload_lens)), Blobs.of(lb, ll))
    empty = payload_lens == 0
    if empty.any():
        head = Blobs.of(head.data[np.repeat(~empty, head.lens)], np.where(empty, 0, head.lens))
    return concat_rows(head, payload)


# ----------------------------------------------------------------------------- records
@dataclass
class Records:
    """The encoded node records of one rank: bytes plus ``[starts, ends)`` spans (int64[N])."""

    data: bytes
    starts: np.ndarray
    ends: np.ndarray
    metadata: Any
    rank: int | None
    path: str | None
    _buf: np.ndarray | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def buf(self) -> np.ndarray:
        """The bytes as uint8 (a view, no copy)."""
        if self._buf is None:
            self._buf = np.frombuffer(self.data, dtype=np.uint8)
        return self._buf

    @classmethod
    def of(cls, trace: Any) -> "Records":
        """The records of ``trace``: its file bytes when it is untouched since read, else its nodes encoded.

        Raises:
            TracekitError: a node cannot be encoded (from :func:`tracekit.io.encode_trace`).
        """
        encoded = getattr(trace, "_encoded", None)
        if getattr(trace, "_nodes", True) is None and encoded is not None:
            return cls(
                encoded.data,
                np.asarray(encoded.starts, dtype=np.int64),
                np.asarray(encoded.ends, dtype=np.int64),
                trace.metadata,
                trace.rank,
                trace.path,
            )
        from tracekit.io import encode_trace, split_records

        data = encode_trace(trace)
        _, _, starts, ends = split_records(data, path=trace.path, rank=trace.rank)
        return cls(data, starts.astype(np.int64), ends.astype(np.int64), trace.metadata, trace.rank, trace.path)

    def fields(self, lo: int, hi: int) -> "FieldTable":
        """Every top-level field of records ``lo..hi-1`` (see :class:`FieldTable`)."""
        parts: list[tuple[np.ndarray, ...]] = []

        def visit(msg, fnum, wt, value, size, at) -> None:
            parts.append((msg + lo, fnum, wt, at))

        walk_fields(self.buf, self.starts[lo:hi], self.ends[lo:hi], visit)
        if parts:
            msg, fnum, wt, at = (np.concatenate(x) for x in zip(*parts))
        else:
            msg = fnum = wt = at = np.zeros(0, dtype=np.int64)
        order = np.lexsort((at, msg))
        msg, fnum, wt, at = msg[order], fnum[order], wt[order], at[order]
        nxt = np.empty(len(at), dtype=np.int64)
        if len(at):
            nxt[:-1] = at[1:]
            last = np.ones(len(at), dtype=bool)
            last[:-1] = msg[1:] != msg[:-1]
            nxt[last] = self.ends[msg[last]]
        return FieldTable(msg, fnum, wt, at, nxt)


@dataclass(frozen=True)
class FieldTable:
    """Top-level fields of a batch of records, sorted by (record, byte offset); F entries.

    Attributes:
        msg: int64[F] record index; field: int64[F] field number; wt: int64[F] wire type;
        at: int64[F] byte offset of the tag; nxt: int64[F] offset just past the field.
    """

    msg: np.ndarray
    field: np.ndarray
    wt: np.ndarray
    at: np.ndarray
    nxt: np.ndarray

    def insert_point(self, records: np.ndarray, field_number: int, ends: np.ndarray) -> np.ndarray:
        """Offset where a new field ``field_number`` goes in each of ``records`` (sorted int64[K]).

        The offset of the first field with a greater number (a field being dropped too is fine: the
        insertion goes where it was), else the record end.
        """
        later = self.field > field_number
        cand_msg, cand_at = self.msg[later], self.at[later]
        first = np.ones(len(cand_msg), dtype=bool)
        first[1:] = cand_msg[1:] != cand_msg[:-1]
        cand_msg, cand_at = cand_msg[first], cand_at[first]
        idx = np.searchsorted(cand_msg, records)
        idx_c = np.minimum(idx, max(len(cand_msg) - 1, 0))
        hit = (idx < len(cand_msg)) & (cand_msg[idx_c] == records) if len(cand_msg) else np.zeros(len(records), bool)
        return np.where(hit, cand_at[idx_c] if len(cand_msg) else 0, ends[records])


# ----------------------------------------------------------------------------- edits
@dataclass
class Edit:
    """What to change in a :class:`Records`; apply with :func:`rewrite`.

    Attributes:
        keep: bool[N] records to keep (None: all).
        drops: ``(records, field_number)``: remove every occurrence of the field in those records.
        replaces: ``(records, tag_offsets, blobs)``: the field whose tag is at each offset becomes the blob.
        inserts: ``(records, field_number, blobs)``: new field bytes at the canonical place of the field
            number (``field_number`` 0: at the record start); several inserts at one place keep their order.
    """

    keep: np.ndarray | None = None
    drops: list[tuple[np.ndarray, int]] = field(default_factory=list)
    replaces: list[tuple[np.ndarray, np.ndarray, Blobs]] = field(default_factory=list)
    inserts: list[tuple[np.ndarray, int, Blobs]] = field(default_factory=list)

    def empty(self) -> bool:
        """True when applying the edit would change nothing."""
        return (
            (self.keep is None or bool(self.keep.all()))
            and not any(len(d[0]) for d in self.drops)
            and not any(len(r[0]) for r in self.replaces)
            and not any(len(i[0]) for i in self.inserts)
        )

    def replace_record(self, records: np.ndarray, bodies: list[bytes]) -> None:
        """Whole new message bodies for ``records`` (sorted int64[K])."""
        self.drops.append((records, -1))
        self.inserts.append((records, 0, Blobs.from_list(bodies)))


def _batch_rows(records: np.ndarray, lo: int, hi: int) -> slice:
    return slice(int(np.searchsorted(records, lo)), int(np.searchsorted(records, hi)))


def _take_blobs(b: Blobs, rows: slice) -> Blobs:
    p = b.ptr[rows.start : rows.stop + 1]
    return Blobs(b.data[p[0] : p[-1]], p - p[0]) if len(p) else Blobs(b.data[:0], np.zeros(1, np.int64))


def _batch_ops(rec: Records, edit: Edit, lo: int, hi: int):
    """Cuts ``(owner, a, b)`` and inserts ``(owner, pos, seq, Blobs)`` of records ``lo..hi-1``."""
    cuts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    ins: list[tuple[np.ndarray, np.ndarray, np.ndarray, Blobs]] = []
    table: FieldTable | None = None

    def fields() -> FieldTable:
        nonlocal table
        if table is None:
            table = rec.fields(lo, hi)
        return table

    for records, fnum in edit.drops:
        rows = records[_batch_rows(records, lo, hi)]
        if not len(rows):
            continue
        if fnum == -1:
            cuts.append((rows, rec.starts[rows], rec.ends[rows]))
            continue
        t = fields()
        mark = np.zeros(hi - lo, dtype=bool)
        mark[rows - lo] = True
        sel = mark[t.msg - lo] & (t.field == fnum)
        cuts.append((t.msg[sel], t.at[sel], t.nxt[sel]))
    for records, offsets, blobs in edit.replaces:
        span = _batch_rows(records, lo, hi)
        if span.stop == span.start:
            continue
        t = fields()
        at = offsets[span]
        k = np.searchsorted(t.at, at)
        cuts.append((records[span], at, t.nxt[k]))
        ins.append((records[span], at, np.zeros(len(at), np.int64), _take_blobs(blobs, span)))
    for seq, (records, fnum, blobs) in enumerate(edit.inserts, start=1):
        span = _batch_rows(records, lo, hi)
        if span.stop == span.start:
            continue
        r = records[span]
        pos = rec.starts[r] if fnum == 0 else fields().insert_point(r, fnum, rec.ends)
        cuts.append((r, pos, pos))
        ins.append((r, pos, np.full(len(r), seq, np.int64), _take_blobs(blobs, span)))
    return cuts, ins


def _splice_batch(rec: Records, edit: Edit, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Framed output records of ``lo..hi-1``: ``(bytes uint8, body starts, body ends)`` (offsets in the bytes)."""
    keep = np.ones(hi - lo, dtype=bool) if edit.keep is None else edit.keep[lo:hi]
    cuts, ins = _batch_ops(rec, edit, lo, hi)
    kept = np.flatnonzero(keep) + lo
    c_own = np.concatenate([c[0] for c in cuts] + [np.zeros(0, np.int64)]).astype(np.int64)
    c_a = np.concatenate([c[1] for c in cuts] + [np.zeros(0, np.int64)]).astype(np.int64)
    c_b = np.concatenate([c[2] for c in cuts] + [np.zeros(0, np.int64)]).astype(np.int64)
    ck = keep[c_own - lo]
    c_own, c_a, c_b = c_own[ck], c_a[ck], c_b[ck]
    # segments: the complement of the cuts inside each kept record
    o_own = np.concatenate((kept, c_own))
    opens = np.concatenate((rec.starts[kept], c_b))
    closes = np.concatenate((c_a, rec.ends[kept]))
    oo = np.lexsort((opens, o_own))
    co = np.lexsort((closes, np.concatenate((c_own, kept))))
    s_own, s_a, s_b = o_own[oo], opens[oo], closes[co]
    nz = s_b > s_a
    s_own, s_a, s_b = s_own[nz], s_a[nz], s_b[nz]
    i_own = np.concatenate([x[0] for x in ins] + [np.zeros(0, np.int64)]).astype(np.int64)
    i_pos = np.concatenate([x[1] for x in ins] + [np.zeros(0, np.int64)]).astype(np.int64)
    i_seq = np.concatenate([x[2] for x in ins] + [np.zeros(0, np.int64)]).astype(np.int64)
    i_lens = np.concatenate([x[3].lens for x in ins] + [np.zeros(0, np.int64)]).astype(np.int64)
    i_data = np.concatenate([x[3].data for x in ins] + [np.zeros(0, np.uint8)])
    ik = keep[i_own - lo] if len(i_own) else np.zeros(0, bool)
    i_src = np.cumsum(i_lens) - i_lens
    i_own, i_pos, i_seq, i_lens, i_src = i_own[ik], i_pos[ik], i_seq[ik], i_lens[ik], i_src[ik]
    # new body lengths, then the length prefixes
    body = np.zeros(hi - lo, dtype=np.int64)
    np.add.at(body, s_own - lo, s_b - s_a)
    np.add.at(body, i_own - lo, i_lens)
    pb, pl = varints(body[kept - lo])
    p_src = np.cumsum(pl) - pl
    # the pieces in output order: (record, position, kind, seq); the bytes come from [source region | extra]
    base = int(rec.starts[lo]) if hi > lo else 0
    region = rec.buf[base : int(rec.ends[hi - 1])] if hi > lo else rec.buf[:0]
    extra = np.concatenate((pb, i_data))
    own = np.concatenate((kept, s_own, i_own))
    pos = np.concatenate((rec.starts[kept] - 1, s_a, i_pos))
    kind = np.concatenate(
        (np.zeros(len(kept), np.int64), np.ones(len(s_own), np.int64), np.zeros(len(i_own), np.int64))
    )
    seq = np.concatenate((np.zeros(len(kept) + len(s_own), np.int64), i_seq))
    src = np.concatenate((len(region) + p_src, s_a - base, len(region) + len(pb) + i_src))
    lens = np.concatenate((pl, s_b - s_a, i_lens))
    order = np.lexsort((seq, kind, pos, own))
    src, lens = src[order], lens[order]
    total = int(lens.sum())
    idx = np.repeat(src - (np.cumsum(lens) - lens), lens) + np.arange(total, dtype=np.int64)
    out = np.concatenate((region, extra))[idx]
    framed = pl + body[kept - lo]
    ends = np.cumsum(framed)
    return out, ends - body[kept - lo], ends


def rewrite(rec: Records, edit: Edit, metadata: Any = None) -> Any:
    """A new :class:`~tracekit.model.ExecutionTrace` of the edited records (same rank; ``metadata`` or the old one).

    The records are spliced in batches of :data:`BATCH_RECORDS`; the result keeps them
    encoded, so writing it copies the bytes.

    Raises:
        TraceFormatError: a record is not a valid ``Node`` message (from the field walk).
    """
    md = rec.metadata if metadata is None else metadata
    if edit.empty():
        return _trace_of(rec.data, rec.starts, rec.ends, md, rec.rank)
    chunks, starts, ends, base = [], [], [], 0
    for lo in range(0, len(rec), BATCH_RECORDS):
        out, s, e = _splice_batch(rec, edit, lo, min(lo + BATCH_RECORDS, len(rec)))
        chunks.append(out)
        starts.append(s + base)
        ends.append(e + base)
        base += len(out)
    data = np.concatenate(chunks).tobytes() if chunks else b""
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64)  # noqa: E731
    return _trace_of(data, cat(starts), cat(ends), md, rec.rank)


def _trace_of(data: bytes, starts: np.ndarray, ends: np.ndarray, metadata: Any, rank: int | None) -> Any:
    """A trace holding encoded records (no Node objects)."""
    from tracekit.io import EncodedNodes
    from tracekit.model import ExecutionTrace

    from_encoded = getattr(ExecutionTrace, "_from_encoded", None)
    if from_encoded is not None:
        return from_encoded(EncodedNodes(data, starts, ends, None, rank), metadata, rank=rank, path=None)
    from tracekit.io import encode_metadata, trace_from_bytes  # the model changed: go through the public reader

    trace = trace_from_bytes(
        encode_metadata(metadata) + b"".join(_frame(data[s:e]) for s, e in zip(starts.tolist(), ends.tolist())),
        rank=rank,
    )
    return trace.with_metadata(metadata)


def _frame(body: bytes) -> bytes:
    from tracekit.io import frame

    return frame(body)
