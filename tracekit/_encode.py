"""Compiled writers of ``.et`` node records (issue 17): framing, record splicing, batch encoding.

Three kernels (:func:`tracekit._jit.kernel`), each writing into one preallocated
``uint8`` buffer in two passes (lengths, then bytes), so no Python object is
built per record:

* :func:`frame_records` frames many message bodies at once (varint length +
  body), for writing a trace whose records are held encoded;
* :func:`splice_records` rewrites records by walking their top-level fields:
  unchanged fields are copied as they are, dropped fields skipped, new field
  bytes inserted at their canonical place (before the first field with a
  greater number), replaced fields swapped for new bytes;
* :func:`encode_node_columns` (through :func:`tracekit.io.encode_nodes`) writes
  whole ``Node`` records from columns.

Wire rules (https://protobuf.dev/programming-guides/encoding/): a tag is
``varint(field << 3 | wire_type)``; varints are little-endian base-128; wire
types 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 (3/4, groups, do not
occur in ``Node``); proto3 repeated integers are written packed.

Kernels report a malformed record by returning ``-(record + 1)``; the Python
callers turn that into :class:`~tracekit.errors.TraceFormatError`.
"""

from __future__ import annotations

import numpy as np

from tracekit._jit import kernel

DROP_ALL = np.uint64(1) << np.uint64(63)  # drop bit: every original field of the record
_U7 = np.uint64(7)
_U127 = np.uint64(0x7F)
_U128 = np.uint64(0x80)


def varint_lens(values: np.ndarray) -> np.ndarray:
    """Byte length of the varint of each of ``values`` (non-negative ints), int64[K]."""
    v = np.asarray(values).astype(np.uint64)
    lens = np.ones(len(v), dtype=np.int64)
    for k in range(1, 10):
        lens += v >= np.uint64(1) << np.uint64(7 * k)
    return lens


@kernel
def _put_varint(out, at, value):  # pragma: no cover - compiled
    v = np.uint64(value)
    while v >= _U128:
        out[at] = np.uint8((v & _U127) | _U128)
        v = v >> _U7
        at += 1
    out[at] = np.uint8(v)
    return at + 1


@kernel
def _read_varint(buf, p, end):  # pragma: no cover - compiled
    """``(value, next position)``; next position -1 when the varint is cut or longer than 10 bytes."""
    v = np.uint64(0)
    shift = np.uint64(0)
    while p < end:
        b = np.uint64(buf[p])
        p += 1
        v |= (b & _U127) << shift
        if b < _U128:
            return v, p
        shift += _U7
        if shift >= np.uint64(70):
            return v, -1
    return v, -1


@kernel
def _field_end(buf, p, end, wt):  # pragma: no cover - compiled
    """Position just past a field's value starting at ``p`` (after its tag), -1 when malformed."""
    if wt == 0:
        _, q = _read_varint(buf, p, end)
        return q
    if wt == 1:
        return p + 8 if p + 8 <= end else -1
    if wt == 5:
        return p + 4 if p + 4 <= end else -1
    if wt == 2:
        n, q = _read_varint(buf, p, end)
        if q < 0 or n > np.uint64(end - q):
            return -1
        return q + np.int64(n)
    return -1


@kernel
def frame_records(buf, starts, ends, out):  # pragma: no cover - compiled
    """Write ``varint(len) + buf[starts[i]:ends[i]]`` for every record into ``out``; returns bytes written.

    ``out`` must hold ``sum(len + varint_lens(len))`` bytes.
    """
    at = 0
    for i in range(len(starts)):
        s = starts[i]
        e = ends[i]
        at = _put_varint(out, at, e - s)
        out[at : at + e - s] = buf[s:e]
        at += e - s
    return at


@kernel
def _splice_one(
    buf, s, end, bits, drop_fields, ins, ins_field, ins_a, ins_b, rep, rep_at, rep_a, rep_b, extra, out, at, write
):  # noqa: E501  # pragma: no cover - compiled
    """One record's new body at ``out[at:]`` (``write`` False: only measured); returns the end, -1 if malformed."""
    k, kend = ins
    r, rend = rep
    p = s
    if bits & DROP_ALL:
        p = end
    while p < end:
        tag, q = _read_varint(buf, p, end)
        if q < 0:
            return -1
        f = np.int64(tag >> np.uint64(3))
        q2 = _field_end(buf, q, end, np.int64(tag & _U7))
        if q2 < 0:
            return -1
        while k < kend and ins_field[k] < f:
            n = ins_b[k] - ins_a[k]
            if write:
                out[at : at + n] = extra[ins_a[k] : ins_b[k]]
            at += n
            k += 1
        if r < rend and rep_at[r] == p:
            n = rep_b[r] - rep_a[r]
            if write:
                out[at : at + n] = extra[rep_a[r] : rep_b[r]]
            at += n
            r += 1
        else:
            dropped = False
            for j in range(len(drop_fields)):
                if drop_fields[j] == f and (bits >> np.uint64(j)) & np.uint64(1):
                    dropped = True
            if not dropped:
                if write:
                    out[at : at + q2 - p] = buf[p:q2]
                at += q2 - p
        p = q2
    while k < kend:
        n = ins_b[k] - ins_a[k]
        if write:
            out[at : at + n] = extra[ins_a[k] : ins_b[k]]
        at += n
        k += 1
    return at


@kernel
def splice_records(
    buf,
    starts,
    ends,
    keep,
    bits,
    drop_fields,
    ins_ptr,
    ins_field,
    ins_a,
    ins_b,
    rep_ptr,
    rep_at,
    rep_a,
    rep_b,
    extra,
    body,
    out,
):  # noqa: E501  # pragma: no cover - compiled
    """Edited records (see the module docstring), framed, into ``out``.

    Args:
        buf: uint8 source bytes; starts, ends: int64[N] record bodies in ``buf``; keep: bool[N].
        bits: uint64[N] drop bits: bit j drops every field numbered ``drop_fields[j]``, :data:`DROP_ALL` all.
        ins_ptr: int64[N+1] CSR of inserts (sorted by field number then order given): ``ins_field`` field
            number (0: at the start), bytes ``extra[ins_a:ins_b]``.
        rep_ptr: int64[N+1] CSR of replacements (sorted by offset): the field whose tag is at ``rep_at``
            becomes ``extra[rep_a:rep_b]``.
        body: int64[N] filled with each kept record's new body length when ``out`` is empty (the first
            pass; returns the framed total), else read, and ``out`` written (returns bytes written).

    Returns:
        Bytes (needed or written), or ``-(i + 1)`` when record ``i`` is malformed.
    """
    measure = len(out) == 0
    total = 0
    for i in range(len(starts)):
        if not keep[i]:
            continue
        ins = (ins_ptr[i], ins_ptr[i + 1])
        rep = (rep_ptr[i], rep_ptr[i + 1])
        args = (bits[i], drop_fields, ins, ins_field, ins_a, ins_b, rep, rep_at, rep_a, rep_b, extra)
        if measure:
            n = _splice_one(buf, starts[i], ends[i], *args, out, 0, False)
            if n < 0:
                return -(i + 1)
            body[i] = n
            total += n + _varint_len(n)
        else:
            total = _put_varint(out, total, body[i])
            total = _splice_one(buf, starts[i], ends[i], *args, out, total, True)
    return total


@kernel
def _varint_len(value):  # pragma: no cover - compiled
    v = np.uint64(value)
    n = 1
    while v >= _U128:
        v = v >> _U7
        n += 1
    return n
