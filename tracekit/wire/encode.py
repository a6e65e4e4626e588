"""Compiled writers of ``.et`` node records (issue 17): framing, record splicing, batch encoding.

Three kernels (:func:`tracekit.jit.kernel`), each writing into one preallocated
``uint8`` buffer in two passes (lengths or an upper bound, then bytes), so no
Python object is built per record:

* :func:`frame_records` frames many message bodies at once (varint length +
  body), for writing a trace whose records are held encoded;
* :func:`splice_records` rewrites records by walking their top-level fields:
  unchanged fields are copied as they are, dropped fields skipped, new field
  bytes inserted at their canonical place (before the first field with a
  greater number), replaced fields swapped for new bytes;
* :func:`encode_node_columns` (through :func:`tracekit.wire.batch.encode_nodes`) writes
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

# Small helpers of the kernels, inlined into each at numba's IR level: a call from one compiled
# function to another is not inlined otherwise, and costs more than the helper's work.
from tracekit.jit import inline as _inline
from tracekit.jit import intrinsic, kernel

DROP_ALL = np.uint64(1) << np.uint64(63)  # drop bit: every original field of the record
_U7 = np.uint64(7)
_U127 = np.uint64(0x7F)
_U128 = np.uint64(0x80)


def varint_lens(values: np.ndarray) -> np.ndarray:
    """Byte length of the varint of each of ``values`` (non-negative ints), int64[K]."""
    v = np.asarray(values).astype(np.uint64, copy=False)
    lens = np.ones(len(v), dtype=np.int64)
    top = int(v.max()) if len(v) else 0
    for k in range(1, 10):
        if top < 1 << (7 * k):
            break
        lens += v >= np.uint64(1) << np.uint64(7 * k)
    return lens


@intrinsic
def _move_bytes(typingctx, dst, dst_at, src, src_at, count):  # pragma: no cover - compiled
    """``dst[dst_at:dst_at+count] = src[src_at:src_at+count]`` (uint8 arrays) as one ``llvm.memmove``.

    A slice assignment compiles to a generic strided loop with an overlap check, which costs more
    than the copy for the short runs of a record; the bounds are the caller's to keep.
    """
    from numba.core import cgutils, types

    sig = types.void(dst, types.intp, src, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        d, da, s, sa, n = args
        dptr = builder.gep(context.make_array(signature.args[0])(context, builder, d).data, [da])
        sptr = builder.gep(context.make_array(signature.args[2])(context, builder, s).data, [sa])
        cgutils.raw_memmove(builder, dptr, sptr, n, 1)
        return context.get_dummy_value()

    return sig, codegen


@_inline
def _put_varint(out, at, value):  # pragma: no cover - compiled
    v = np.uint64(value)
    while v >= _U128:
        out[at] = np.uint8((v & _U127) | _U128)
        v = v >> _U7
        at += 1
    out[at] = np.uint8(v)
    return at + 1


@_inline
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


@_inline
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


@_inline
def _next_field(buf, p, end):  # pragma: no cover - compiled
    """``(tag, value start, field end)`` of the field whose tag is at ``p``; field end -1 when malformed.

    One-byte tags, lengths and varints (most fields of a ``Node``) are read without the general loop.
    """
    t = buf[p]
    if t < 0x80:
        tag = np.uint64(t)
        q = p + 1
    else:
        tag, q = _read_varint(buf, p, end)
        if q < 0:
            return tag, q, -1
    wt = np.int64(tag & _U7)
    if q < end and buf[q] < 0x80:
        if wt == 2:
            q2 = q + 1 + np.int64(buf[q])
            return tag, q, (q2 if q2 <= end else -1)
        if wt == 0:
            return tag, q, q + 1
    return tag, q, _field_end(buf, q, end, wt)


@kernel
def put_varints(values, ptr, out):  # pragma: no cover - compiled
    """``varint(values[k])`` at ``out[ptr[k]:]`` for every k (``ptr`` from :func:`varint_lens`)."""
    for k in range(len(values)):
        _put_varint(out, ptr[k], values[k])


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
        _move_bytes(out, at, buf, s, e - s)
        at += e - s
    return at


@_inline
def _copy(out, at, src, a, b, write):  # pragma: no cover - compiled
    """``out[at:] = src[a:b]`` when ``write``; returns the position after."""
    if write:
        _move_bytes(out, at, src, a, b - a)
    return at + b - a


@_inline
def _edit_record(
    buf, s, end, b, drop_fields, k, kend, ins_field, ins_a, ins_b, r, rend, rep_at, rep_a, rep_b, extra, out, at, write
):  # pragma: no cover - compiled
    """One record's edited body at ``out[at:]`` (see :func:`splice_records`); the end, or -1 if malformed."""
    p = end if b & DROP_ALL else s
    run = p  # start of the kept bytes not copied yet
    while p < end:
        tag, q, q2 = _next_field(buf, p, end)
        if q2 < 0:
            return -1
        f = np.int64(tag >> np.uint64(3))
        if k < kend and ins_field[k] < f:
            at = _copy(out, at, buf, run, p, write)
            run = p
            while k < kend and ins_field[k] < f:
                at = _copy(out, at, extra, ins_a[k], ins_b[k], write)
                k += 1
        if r < rend and rep_at[r] == p:
            at = _copy(out, at, buf, run, p, write)
            at = _copy(out, at, extra, rep_a[r], rep_b[r], write)
            r += 1
            run = q2
        elif b != np.uint64(0):
            for j in range(len(drop_fields)):
                if drop_fields[j] == f and (b >> np.uint64(j)) & np.uint64(1):
                    at = _copy(out, at, buf, run, p, write)
                    run = q2
                    break
        p = q2
    at = _copy(out, at, buf, run, end, write)
    while k < kend:
        at = _copy(out, at, extra, ins_a[k], ins_b[k], write)
        k += 1
    return at


@_inline
def _bound(starts, ends, ins_ptr, ins_a, ins_b, rep_ptr, rep_a, rep_b, i):  # pragma: no cover - compiled
    """An upper bound of record ``i``'s edited body length: its old length plus every new byte for it."""
    bound = ends[i] - starts[i]
    for k in range(ins_ptr[i], ins_ptr[i + 1]):
        bound += ins_b[k] - ins_a[k]
    for r in range(rep_ptr[i], rep_ptr[i + 1]):
        bound += rep_b[r] - rep_a[r]
    return bound


@_inline
def _total_bound(starts, ends, keep, ins_ptr, ins_a, ins_b, rep_ptr, rep_a, rep_b):  # pragma: no cover - compiled
    """An upper bound of the bytes the kept records take edited and framed (:func:`_bound` plus prefixes)."""
    at = 0
    for i in range(len(starts)):
        if keep[i]:
            bound = _bound(starts, ends, ins_ptr, ins_a, ins_b, rep_ptr, rep_a, rep_b, i)
            at += bound + _varint_len(bound)
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
    spans,
    out,
):  # pragma: no cover - compiled
    """Edited records (see the module docstring), framed, into ``out``, in one walk of the edited records.

    Args:
        buf: uint8 source bytes; starts, ends: int64[N] record bodies in ``buf``; keep: bool[N].
        bits: uint64[N] drop bits: bit j drops every field numbered ``drop_fields[j]``, :data:`DROP_ALL` all.
        ins_ptr: int64[N+1] CSR of inserts (sorted by field number then order given): ``ins_field`` field
            number (0: at the start), bytes ``extra[ins_a:ins_b]``.
        rep_ptr: int64[N+1] CSR of replacements (sorted by offset): the field whose tag is at ``rep_at``
            becomes ``extra[rep_a:rep_b]``.
        spans: int64[2K] for the K kept records: ``spans[j]`` and ``spans[K + j]`` are filled with the body
            start and end in ``out`` of the j-th kept record (when ``out`` is written).
        out: empty: nothing is walked, the return is an upper bound of the bytes needed; else at least
            that many bytes, written.

    An edited record's body is written after room for the length prefix of its upper bound (old
    length plus the new bytes) and moved back when its real prefix is shorter; runs of kept fields
    are copied in one piece; a record with nothing to change is copied whole.

    Returns:
        Bytes (bound, or written), or ``-(i + 1)`` when record ``i`` is malformed.
    """
    if len(out) == 0:
        return _total_bound(starts, ends, keep, ins_ptr, ins_a, ins_b, rep_ptr, rep_a, rep_b)
    at = 0
    j = 0
    m = len(spans) // 2
    for i in range(len(starts)):
        if not keep[i]:
            continue
        s = starts[i]
        end = ends[i]
        k = ins_ptr[i]
        kend = ins_ptr[i + 1]
        r = rep_ptr[i]
        rend = rep_ptr[i + 1]
        b = bits[i]
        if b == np.uint64(0) and k == kend and r == rend:
            at = _put_varint(out, at, end - s)
            spans[j] = at
            at = _copy(out, at, buf, s, end, True)
            spans[m + j] = at
            j += 1
            continue
        begin = at + _varint_len(_bound(starts, ends, ins_ptr, ins_a, ins_b, rep_ptr, rep_a, rep_b, i))
        stop = _edit_record(
            buf, s, end, b, drop_fields, k, kend, ins_field, ins_a, ins_b, r, rend, rep_at, rep_a, rep_b, extra,
            out, begin, True,
        )  # fmt: skip
        if stop < 0:
            return -(i + 1)
        length = stop - begin
        at = _put_varint(out, at, length)
        if at < begin:  # the prefix is shorter than the room left for it: move the body back
            _move_bytes(out, at, out, begin, length)
        spans[j] = at
        at += length
        spans[m + j] = at
        j += 1
    return at


@_inline
def _varint_len(value):  # pragma: no cover - compiled
    v = np.uint64(value)
    n = 1
    while v >= _U128:
        v = v >> _U7
        n += 1
    return n


_ATTR_FIELD = 10  # Node.attr


@_inline
def _names_match(buf, a, b, key):  # pragma: no cover - compiled
    if b - a != len(key):
        return False
    for x in range(len(key)):
        if buf[a + x] != key[x]:
            return False
    return True


@kernel
def int_attr_slots(buf, starts, ends, rows, key, at_out, field_out, value_out):  # pragma: no cover - compiled
    """The first attribute named ``key`` (uint8 bytes) of each record of ``rows`` (int64[K]).

    Fills, per row: ``at_out`` the offset of the attribute's tag (-1: no such attribute); ``field_out``
    its value's field number when it is a plain integer (no doc string, exactly one value, of kind
    int32/int64/uint32/uint64 with a value below 2^63), else -1; ``value_out`` that value (uint64).

    Returns:
        0, or ``-(k + 1)`` when the record of row ``k`` is malformed.
    """
    for x in range(len(rows)):
        i = rows[x]
        p = starts[i]
        end = ends[i]
        at_out[x] = -1
        field_out[x] = -1
        while p < end:
            tag, q = _read_varint(buf, p, end)
            q2 = -1 if q < 0 else _field_end(buf, q, end, np.int64(tag & _U7))
            if q2 < 0:
                return -(x + 1)
            if tag == np.uint64(_ATTR_FIELD << 3 | 2):
                _, pp = _read_varint(buf, q, end)
                named = False
                n_values = 0
                doc = False
                vfield = -1
                vwt = -1
                value = np.uint64(0)
                while pp < q2:
                    t2, r2 = _read_varint(buf, pp, q2)
                    e2 = -1 if r2 < 0 else _field_end(buf, r2, q2, np.int64(t2 & _U7))
                    if e2 < 0:
                        return -(x + 1)
                    f2 = np.int64(t2 >> np.uint64(3))
                    w2 = np.int64(t2 & _U7)
                    if f2 == 1 and w2 == 2:
                        ln, ds = _read_varint(buf, r2, q2)
                        named = _names_match(buf, ds, e2, key)
                    elif f2 == 2:
                        doc = True
                    elif f2 >= 3:
                        n_values += 1
                        vfield = f2
                        vwt = w2
                        if w2 == 0:
                            value, _ = _read_varint(buf, r2, q2)
                    pp = e2
                if named:
                    at_out[x] = p
                    plain = n_values == 1 and not doc and vwt == 0 and value < np.uint64(1) << np.uint64(63)
                    if plain and (vfield == 7 or vfield == 9 or vfield == 11 or vfield == 13):  # int32/64, uint32/64
                        field_out[x] = vfield
                        value_out[x] = value
                    break
            p = q2
    return 0


@_inline
def _put_packed(out, at, tag, ids, lo, hi, write):  # pragma: no cover - compiled
    """A packed repeated-varint field (``tag`` byte) of ``ids[lo:hi]``; nothing when empty."""
    if hi == lo:
        return at
    payload = 0
    for x in range(lo, hi):
        payload += _varint_len(ids[x])
    if not write:
        return at + 1 + _varint_len(payload) + payload
    out[at] = tag
    at = _put_varint(out, at + 1, payload)
    for x in range(lo, hi):
        at = _put_varint(out, at, ids[x])
    return at


@_inline
def _put_uint_field(out, at, tag, value, write):  # pragma: no cover - compiled
    """A varint field (tag bytes in ``tag``, 1 or 2 of them: ``tag`` < 2^14) when ``value`` is not 0."""
    if value == 0:
        return at
    n = _varint_len(tag) + _varint_len(value)
    if write:
        at = _put_varint(out, at, tag)
        return _put_varint(out, at, value)
    return at + n


@kernel
def encode_node_columns(
    ids,
    types,
    duration_ns,
    start_ns,
    name_bytes,
    name_ptr,
    name_codes,
    ctrl_ptr,
    ctrl_ids,
    data_ptr,
    data_ids,
    attr_bytes,
    attr_tab_ptr,
    attr_ptr,
    attr_codes,
    body,
    out,
):  # pragma: no cover - compiled
    """Framed ``Node`` records from columns, in field number order as protobuf writes them.

    Args:
        ids: uint64[N]; types: int64[N]; duration_ns, start_ns: int64[N] (already range-checked).
        name_bytes, name_ptr: the encoded ``name`` fields (tag included, empty for "") of a name table;
            name_codes: int64[N] row of each node in it.
        ctrl_ptr, ctrl_ids / data_ptr, data_ids: CSR dependency lists (int64[N+1], uint64[E]).
        attr_bytes, attr_tab_ptr: encoded ``attr`` fields (tag and length included) of an attribute
            table; attr_ptr, attr_codes: CSR of each node's attribute rows (int64[N+1], int64[A]).
        body: int64[N] filled with body lengths when ``out`` is empty (returns the framed total),
            else read, and ``out`` written (returns bytes written).
    """
    write = len(out) > 0
    at = 0
    for i in range(len(ids)):
        if write:
            at = _put_varint(out, at, body[i])
        begin = at
        at = _put_uint_field(out, at, 1 << 3, ids[i], write)
        c = name_codes[i]
        at = _copy(out, at, name_bytes, name_ptr[c], name_ptr[c + 1], write)
        at = _put_uint_field(out, at, 3 << 3, types[i], write)
        at = _put_packed(out, at, 4 << 3 | 2, ctrl_ids, ctrl_ptr[i], ctrl_ptr[i + 1], write)
        at = _put_packed(out, at, 5 << 3 | 2, data_ids, data_ptr[i], data_ptr[i + 1], write)
        at = _put_uint_field(out, at, 6 << 3, start_ns[i] // 1000, write)
        at = _put_uint_field(out, at, 7 << 3, duration_ns[i] // 1000, write)
        for x in range(attr_ptr[i], attr_ptr[i + 1]):
            a = attr_codes[x]
            at = _copy(out, at, attr_bytes, attr_tab_ptr[a], attr_tab_ptr[a + 1], write)
        if duration_ns[i] % 1000:
            at = _put_uint_field(out, at, 1001 << 3, duration_ns[i], write)
        if start_ns[i] % 1000:
            at = _put_uint_field(out, at, 1002 << 3, start_ns[i], write)
        if not write:
            body[i] = at - begin
            at += _varint_len(at - begin)
    return at


@kernel
def back_to_back(buf, starts, ends):  # pragma: no cover - compiled
    """True when every record ``i > 0`` is preceded, right after record ``i - 1``, by its minimal length varint."""
    for i in range(1, len(starts)):
        n = ends[i] - starts[i]
        p = ends[i - 1]
        if starts[i] - p != _varint_len(n):
            return False
        v, q = _read_varint(buf, p, starts[i])
        if q != starts[i] or v != np.uint64(n):
            return False
    return True
