"""A rank's encoded node records, rewritten without Python objects per node (issue 17).

Columnar transforms decide *what* changes on :class:`~tracekit.model.graph.NodeColumns`
arrays and express it as an :class:`Edit` of the encoded ``Node`` records: records
to drop, whole fields to drop (e.g. every ``duration_micros``), and new field bytes
to insert (encoded here, vectorized).  :func:`rewrite` splices the records in one
compiled pass (:func:`tracekit.wire.encode.splice_records`), so untouched bytes are
copied as they are and no ``Node`` object is built.

Insertion keeps the canonical field order protobuf serializers write (field
number order): a new field ``F`` goes before the first field (kept or dropped)
whose number is greater than ``F``; several new fields at one place go in field
number order, then in the order they were added.  Wire rules (https://protobuf.dev/programming-guides/encoding/):
tags are ``varint(field << 3 | wire_type)``; varints are little-endian base-128;
repeated integers are written packed (wire type 2: a length, then the varints),
which is what protobuf's own serializer writes for proto3.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracekit.wire.encode import DROP_ALL, put_varints, splice_records, varint_lens
from tracekit.wire.spliced import SplicedNodes, record_array

_U64 = np.uint64


# ----------------------------------------------------------------------------- byte building
def varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varint encodings of ``values`` (uint64[K]): ``(bytes uint8[sum lens], lens int64[K])``, in order."""
    v = np.ascontiguousarray(np.asarray(values).astype(_U64, copy=False))
    lens = varint_lens(v)
    ptr = np.zeros(len(v) + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    out = np.empty(int(ptr[-1]), dtype=np.uint8)
    if len(v):
        put_varints(v, ptr, out)
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
    v = np.ascontiguousarray(np.asarray(values).astype(_U64, copy=False))
    head = tag(field_number, 0)
    lens = varint_lens(v) + len(head)
    out = Blobs.of(np.empty(int(lens.sum()), dtype=np.uint8), lens)
    if len(v):
        for j, byte in enumerate(head):  # each row: the tag bytes, then the value's
            out.data[out.ptr[:-1] + j] = byte
        put_varints(v, out.ptr[:-1] + len(head), out.data)
    return out


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
    """The encoded node records of one rank: ``uint8`` bytes plus ``[starts, ends)`` spans (int64[N])."""

    buf: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    metadata: Any
    rank: int | None
    path: str | None
    source: Any = field(default=None, repr=False)  # the trace's EncodedNodes, kept by an empty edit

    def __len__(self) -> int:
        return len(self.starts)

    @classmethod
    def of(cls, trace: Any) -> "Records":
        """The records of ``trace``: its file bytes when it is untouched since read, else its nodes encoded.

        Raises:
            TracekitError: a node cannot be encoded (from :func:`tracekit.wire.io.encode_trace`).
        """
        encoded = getattr(trace, "_encoded", None)
        if getattr(trace, "_nodes", True) is None and encoded is not None:
            return cls(
                record_array(encoded),
                np.asarray(encoded.starts, dtype=np.int64),
                np.asarray(encoded.ends, dtype=np.int64),
                trace.metadata,
                trace.rank,
                trace.path,
                encoded,
            )
        from tracekit.wire.io import encode_trace
        from tracekit.wire.framing import split_records

        data = encode_trace(trace)
        _, _, starts, ends = split_records(data, path=trace.path, rank=trace.rank)
        return cls(
            np.frombuffer(data, dtype=np.uint8),
            starts.astype(np.int64, copy=False),
            ends.astype(np.int64, copy=False),
            trace.metadata,
            trace.rank,
            trace.path,
        )


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


def _splice_args(rec: Records, edit: Edit) -> tuple[np.ndarray, ...]:
    """The arrays :func:`tracekit.wire.encode.splice_records` takes, from ``edit`` (see its docstring)."""
    n = len(rec)
    keep = np.ones(n, dtype=bool) if edit.keep is None else np.asarray(edit.keep, dtype=bool)
    drop_fields = np.asarray(sorted({f for _, f in edit.drops if f != -1}), dtype=np.int64)
    if len(drop_fields) > 62:
        raise ValueError("more than 62 distinct fields dropped in one edit")
    bits = np.zeros(n, dtype=np.uint64)
    by_rows: dict[int, tuple[np.ndarray, np.uint64]] = {}  # one pass per distinct rows array
    for rows, f in edit.drops:
        bit = DROP_ALL if f == -1 else np.uint64(1) << np.uint64(int(np.searchsorted(drop_fields, f)))
        held = by_rows.get(id(rows))
        by_rows[id(rows)] = (rows, bit if held is None else held[1] | bit)
    for rows, bit in by_rows.values():
        bits[rows] |= bit
    blobs = [b for *_, b in edit.inserts] + [b for *_, b in edit.replaces]
    extra = np.concatenate([b.data for b in blobs] + [np.zeros(0, np.uint8)])
    base = np.cumsum([0] + [len(b.data) for b in blobs])
    ins = edit.inserts
    # inserts by record, then field number, then the order given: each list has one field number, so a
    # list's rank in (field number, order given) breaks ties; a stable sort of sorted runs merges them
    rank = {k: r for r, k in enumerate(sorted(range(len(ins)), key=lambda k: (ins[k][1], k)))}
    used = [k for k in range(len(ins)) if len(ins[k][0])]
    i_own = _cat([np.asarray(ins[k][0], np.int64) for k in used])
    i_fld = _cat([np.full(len(ins[k][0]), ins[k][1], np.int64) for k in used])
    order = None
    if len(used) > 1 or not _ascending(i_own):  # one list of ascending records is in order already
        lst = _cat([np.full(len(ins[k][0]), rank[k], np.int64) for k in used])
        order = np.argsort(i_own * max(len(ins), 1) + lst, kind="stable")
        i_own, i_fld = i_own[order], i_fld[order]
    i_a, i_b = _starts_ends([ins[k][2].ptr + base[k] for k in used], order)
    k0 = len(ins)
    reps = [k for k in range(len(edit.replaces)) if len(edit.replaces[k][0])]
    rep_own = _cat([np.asarray(edit.replaces[k][0], np.int64) for k in reps])
    rep_at = _cat([np.asarray(edit.replaces[k][1], np.int64) for k in reps])
    order = None
    if len(reps) > 1 or not _ascending(rep_own, strict=True):  # by record, then offset
        order = np.lexsort((rep_at, rep_own))
        rep_own, rep_at = rep_own[order], rep_at[order]
    rep_a, rep_b = _starts_ends([edit.replaces[k][2].ptr + base[k0 + k] for k in reps], order)
    return (keep, bits, drop_fields, _ptr(i_own, n), i_fld, i_a, i_b, _ptr(rep_own, n), rep_at, rep_a, rep_b, extra)


_EMPTY = np.zeros(0, dtype=np.int64)


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    """``parts`` concatenated (int64; empty when none; the one part itself when one)."""
    return parts[0] if len(parts) == 1 else np.concatenate([_EMPTY, *parts])


def _ascending(x: np.ndarray, strict: bool = False) -> bool:
    """``x`` ascends (strictly with ``strict``)."""
    return len(x) < 2 or bool(np.all(x[1:] > x[:-1]) if strict else np.all(x[1:] >= x[:-1]))


def _starts_ends(ptrs: list[np.ndarray], order: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Row ``[start, end)`` offsets of several Blobs' absolute ``ptr`` arrays, concatenated, in ``order`` (None: as
    they come)."""
    starts = _cat([p[:-1] for p in ptrs])
    ends = _cat([p[1:] for p in ptrs])
    return (starts, ends) if order is None else (starts[order], ends[order])


def _ptr(owner: np.ndarray, n: int) -> np.ndarray:
    """CSR row pointers (int64[n+1]) of sorted row numbers ``owner``."""
    ptr = np.zeros(n + 1, dtype=np.int64)
    if len(owner):
        np.cumsum(np.bincount(owner, minlength=n), out=ptr[1:])
    return ptr


def rewrite(rec: Records, edit: Edit, metadata: Any = None) -> Any:
    """A new :class:`~tracekit.model.ExecutionTrace` of the edited records (same rank; ``metadata`` or the old one).

    One compiled pass writes them framed into one buffer (:func:`tracekit.wire.encode.splice_records`, walking
    only the edited records); the result keeps them encoded, so writing it copies the bytes.

    Raises:
        TraceFormatError: a record is not a valid ``Node`` message (names the rank and record).
    """
    from tracekit.errors import TraceFormatError

    md = rec.metadata if metadata is None else metadata
    if edit.empty():
        source = rec.source if rec.source is not None else SplicedNodes(rec.buf, rec.starts, rec.ends, rec.rank)
        return _trace_of(source, md, rec.rank)
    args = _splice_args(rec, edit)
    kept = int(np.count_nonzero(args[0]))
    spans = np.empty(2 * kept, dtype=np.int64)  # body starts, then ends, of the kept records in the output
    starts, ends = rec.starts.astype(np.int64, copy=False), rec.ends.astype(np.int64, copy=False)
    splice: Any = splice_records  # a compiled kernel: its arity is checked by numba
    bound = splice(rec.buf, starts, ends, *args, spans, np.zeros(0, np.uint8))
    out = np.empty(max(bound, 1), dtype=np.uint8)
    total = splice(rec.buf, starts, ends, *args, spans, out)
    if total < 0:
        raise TraceFormatError(f"node record {-total - 1} is not a valid Node message", path=rec.path, rank=rec.rank)
    return _trace_of(SplicedNodes(out[:total], spans[:kept], spans[kept:], rec.rank), md, rec.rank)


def _trace_of(encoded: Any, metadata: Any, rank: int | None) -> Any:
    """A trace holding encoded records (no Node objects)."""
    from tracekit.model import ExecutionTrace

    from_encoded = getattr(ExecutionTrace, "_from_encoded", None)
    if from_encoded is not None:
        return from_encoded(encoded, metadata, rank=rank, path=None)
    from tracekit.wire.io import encode_metadata, trace_from_bytes  # the model changed: go through the public reader

    data = encoded.data
    starts, ends = encoded.starts.tolist(), encoded.ends.tolist()
    trace = trace_from_bytes(
        encode_metadata(metadata) + b"".join(_frame(data[s:e]) for s, e in zip(starts, ends)), rank=rank
    )
    return trace.with_metadata(metadata)


def _frame(body: bytes) -> bytes:
    from tracekit.wire.framing import frame

    return frame(body)
