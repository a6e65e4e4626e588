"""Column-wise decoding of encoded node records (see :class:`tracekit.wire.framing.EncodedNodes`).

Builds :class:`tracekit.model.graph.NodeColumns` straight from the record bytes
with the compiled walk of :func:`tracekit.wire.kernels.walk_nodes` (one pass
for ids, types, times and dependency counts, a second one for the dependency
ids only when a node has more than one on average), without a Python object
per node.  Attribute messages are skipped unread (framed when attributes are
first used), unless attributes are found in the same pass.  The protobuf wire rules followed are
those of :mod:`tracekit.wire.kernels`.  Names are decoded on first use (each
distinct name once); attributes are found by name when asked for
(:mod:`tracekit.wire.attrsource`); a corrupt attribute message is reported on the
first attribute access (or by validation).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracekit.wire.attrsource import _AttrSource, _keys, walk_reason  # noqa: F401 - walk_reason's old home
from tracekit.errors import TraceFormatError
from tracekit.model.graph import NodeColumns

CHUNK_RECORDS = 1 << 18  # a corrupt record is re-checked with protobuf from the start of its chunk of records
ATTR_CHUNK = 1 << 16  # records per call of an attribute consumer (decode_columns): bounds the attribute arrays
AttrChunkFn = Callable[[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray], None]


def _first_bad_record(encoded: Any, lo: int, found: int, reason: str) -> TraceFormatError:
    """The error for the corrupt record ``found`` (error path only).

    Records from ``lo`` are re-checked one by one with protobuf's decoder, so
    the error is protobuf's own message and names the last good node before
    the bad record; when protobuf accepts them all, ``reason`` (from the
    walk) is reported for record ``found``.
    """
    last = None
    for i in range(lo, found + 1):
        try:
            last = encoded.decode_one(i, last).id
        except TraceFormatError as err:
            return err
    return TraceFormatError(
        f"undecodable Node message ({reason})",
        byte_offset=int(encoded.starts[found]),
        last_good_node_id=last,
        path=encoded.path,
        rank=encoded.rank,
    )


def decode_columns(encoded: Any, attrs: Sequence[str] = (), on_attrs: AttrChunkFn | None = None) -> NodeColumns:
    """Node columns of the records in ``encoded`` (a :class:`tracekit.wire.framing.EncodedNodes`).

    Args:
        encoded: the records.
        attrs, on_attrs: optional: attributes found in the same pass, ``ATTR_CHUNK`` records at a
            time: ``on_attrs(lo, hi, kind, values, types, duration_ns)`` is called for the records
            ``lo .. hi-1`` in order (``kind`` int8[K, hi - lo] and ``values`` int64[K, hi - lo] as
            :func:`tracekit.wire.kernels.find_attrs` gives them, reused for the next chunk, read with
            :func:`tracekit.wire.attrsource.numeric_values`; the chunk's node types and durations).  Attribute messages are checked afterwards
            (``verify`` of the columns), as for any attribute read.

    Raises:
        TraceFormatError: a record cannot be decoded; names the byte offset
            of the record and the id of the last good node before it.
    """
    from tracekit.wire import kernels as wk

    data: bytes = encoded.data
    buf = np.frombuffer(data, dtype=np.uint8)
    starts, ends = encoded.starts, encoded.ends
    n = len(starts)
    ids = np.empty(n, dtype=np.uint64)
    types = np.empty(n, dtype=np.int16)
    duration = np.empty(n, dtype=np.int64)
    start = np.empty(n, dtype=np.int64)
    special = np.empty(n, dtype=bool)  # records the node view decodes with protobuf
    name_at = np.empty(n, dtype=starts.dtype)  # byte offsets of the name fields, until names are first used
    attr_at = np.empty(n, dtype=starts.dtype)  # byte offsets of the first attribute fields (searches start there)
    dptr = np.zeros(n + 1, dtype=np.int64)
    cptr = np.zeros(n + 1, dtype=np.int64)
    err = np.zeros(5, dtype=np.int64)  # the first corrupt attribute (code, record, offset, field, wt)
    dids = np.empty(n, dtype=np.uint64)  # a guess: one data dependency per node; control ones rare
    cids = np.empty(0, dtype=np.uint64)
    cols = (ids, types, duration, start, special, dptr, cptr, dids, cids, name_at, attr_at)
    names = list(attrs) if on_attrs is not None else []
    timed = _walk(encoded, buf, cols, err, names, on_attrs)
    np.cumsum(dptr, out=dptr)
    np.cumsum(cptr, out=cptr)
    n_data, n_ctrl = int(dptr[-1]), int(cptr[-1])
    if n_data > len(dids) or n_ctrl > len(cids):  # the guess fell short: a second pass stores the ids
        dids = np.empty(n_data, dtype=np.uint64) if n_data > len(dids) else dids
        cids = np.empty(n_ctrl, dtype=np.uint64)
        wk.walk_nodes(
            buf, starts, ends, ids, types, duration, start, special, dptr, cptr, dids, cids, name_at, attr_at, err,
            wk.DEP_IDS, None,
        )  # fmt: skip
    if n_data < len(dids):
        dids = dids[:n_data] if n_data > len(dids) // 2 else dids[:n_data].copy()
    if not len(cids):  # no control dependencies (generated traces): a read-only zero view, no memory
        cptr = np.broadcast_to(np.int64(0), (n + 1,))
    if not timed:  # no measured starts (generated traces): a read-only zero view
        start = np.broadcast_to(np.int64(0), (n,))
    source = _AttrSource(data, buf, starts, ends, ids, encoded, err if names else None, special, attr_at)

    memo: list[Any] = [name_at, None]  # the name offsets until the names are decoded, then the names

    def names_fn() -> list[str]:
        if memo[1] is None:
            memo[1] = _names(data, buf, memo[0], encoded, ids)
            memo[0] = None
        return memo[1]

    return NodeColumns(
        ids,
        types,
        duration,
        start,
        dptr,
        dids,
        cptr,
        cids,
        names_fn=names_fn,
        attr_fn=source.values,
        attr_num_fn=source.numeric,
        verify_fn=source.verify,
        prefetch_fn=source.prefetch,
        release_fn=source.release,
    )


def _walk(encoded: Any, buf: np.ndarray, cols: tuple, err: np.ndarray, names: list[str], on_attrs: Any) -> bool:
    """The first pass of :func:`decode_columns` (records in chunks when attributes are found too).

    Returns whether any node has a start time.

    Raises:
        TraceFormatError: a record cannot be decoded.
    """
    from tracekit.wire import kernels as wk

    ids, types, duration, start, special, dptr, cptr, dids, cids, name_at, attr_at = cols
    starts, ends = encoded.starts, encoded.ends
    n = len(starts)
    step = ATTR_CHUNK if names else max(n, 1)
    timed = False
    d0 = c0 = 0
    keys, key_ptr, kind_buf, values_buf = _keys(names, min(n, step))
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        kind, values = kind_buf[:, : hi - lo], values_buf[:, : hi - lo]
        if lo:  # the buffers of the chunk before, cleared for this one
            kind_buf.fill(0)
            values_buf.fill(0)
        if hi - lo < kind_buf.shape[1]:  # the last, shorter chunk: contiguous arrays, as the walk is compiled for
            kind, values = kind.copy(), values.copy()
        had_error = bool(err[0])
        code, bad, field, wt, chunk_timed = wk.walk_nodes(
            buf, starts[lo:hi], ends[lo:hi], ids[lo:hi], types[lo:hi], duration[lo:hi], start[lo:hi],
            special[lo:hi], dptr[lo : hi + 1], cptr[lo : hi + 1], dids[min(d0, len(dids)) :],
            cids[min(c0, len(cids)) :], name_at[lo:hi], attr_at[lo:hi], err, wk.COLUMNS,
            (keys, key_ptr, kind, values) if names else None,
        )  # fmt: skip
        if err[0] and not had_error:
            err[1] += lo  # the record index of the first corrupt attribute, counted from the chunk's start
        if code != wk.OK:
            bad += lo
            raise _first_bad_record(encoded, bad - bad % CHUNK_RECORDS, bad, walk_reason(code, field, wt)) from None
        timed = timed or chunk_timed
        if hi - lo < n:
            d0 += int(dptr[lo + 1 : hi + 1].sum())
            c0 += int(cptr[lo + 1 : hi + 1].sum())
        if names:
            on_attrs(lo, hi, kind, values, types[lo:hi], duration[lo:hi])
    return timed


def _names(data: bytes, buf: np.ndarray, name_at: np.ndarray, encoded: Any, ids: np.ndarray) -> list[str]:
    """The N node names (UTF-8 decoded; each distinct name decoded once, :func:`tracekit.wire._names.name_groups`).

    Raises:
        TraceFormatError: a name is not UTF-8 (names the first node that has it).
    """
    from tracekit.wire import _names as _wirenames

    n = len(name_at)
    group = np.empty(n, dtype=np.int32 if n < 2**31 else np.int64)
    slots = 1 << 10
    while True:
        table = np.empty(slots, dtype=np.int64)
        rep_s = np.empty(min(slots // 2, n), dtype=np.int64)
        rep_l = np.empty(len(rep_s), dtype=np.int64)
        count = _wirenames.name_groups(buf, name_at, group, table, rep_s, rep_l)
        if count >= 0:
            break
        slots *= 8
    del table
    text = np.empty(count, dtype=object)
    for g, (s, ln) in enumerate(zip(rep_s[:count].tolist(), rep_l[:count].tolist())):
        try:
            text[g] = data[s : s + ln].decode("utf-8")
        except UnicodeDecodeError as exc:
            first = int(np.argmax(group == g))
            raise TraceFormatError(
                f"node name is not valid UTF-8 ({exc.reason})",
                path=encoded.path,
                rank=encoded.rank,
                node_id=int(ids[first]),
            ) from None
    return text[group].tolist()
