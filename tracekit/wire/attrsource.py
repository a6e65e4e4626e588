"""Attribute values of every node, found by name (:func:`tracekit.wire.kernels.find_attr`).

Used by :mod:`tracekit.wire.columnar` (``NodeColumns.attr``/``attr_int``) and
:mod:`tracekit.wire.nodeview` (per-node attribute decoding).  One compiled pass
over the records finds each node's first attribute of a name and decodes
scalar numbers and strings; lists, bytes and irregular messages are decoded
with protobuf, which is the reference for what a value is.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from tracekit.errors import TraceFormatError
from tracekit.wire import kernels as wk  # light: numba is imported by a kernel's first JIT call, not here


class _AttrSource:
    """Finds attributes by name across all nodes of one file's records.

    Args:
        data, buf: the file's bytes and a uint8 view of them.
        starts, ends: the node records' message spans.
        ids: uint64[N] node ids (for error messages).
        encoded: the :class:`tracekit.wire.framing.EncodedNodes` (path and rank for error messages).
        attr_error: the first corrupt attribute message (code, record, byte offset, field, wire type;
            code 0 when none) when the node walk framed them (it did when it found attributes too),
            else None: they are framed on first use (:meth:`verify`).
        special: bool[N], records the node view decodes with protobuf.
        attr_at: where each record's first attribute field is (the searches start there; ``starts`` is the
            record's start, for protobuf).
    """

    def __init__(
        self,
        data: bytes,
        buf: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        ids: np.ndarray,
        encoded: Any,
        attr_error: np.ndarray | None,
        special: np.ndarray,
        attr_at: np.ndarray,
    ) -> None:
        self.data, self.buf, self.starts, self.ends = data, buf, starts, ends
        self.n = len(starts)
        self.ids, self.encoded, self.attr_error, self.special, self.attr_at = ids, encoded, attr_error, special, attr_at
        self._found: dict[str, tuple[np.ndarray, np.ndarray] | None] = {}  # prefetched; None: no node has it
        # kept (:meth:`prefetch` with keep): name -> (positions int32, kinds int8, values int64) where present
        self._kept: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None
        self._pending: list[str] = []  # names to keep, searched at the first ask of one of them

    def verify(self) -> None:
        """Raise for a corrupt attribute message (first attribute access, or validation).

        Every attribute message is framed once (:func:`tracekit.wire.kernels.check_attrs`, one pass
        over the records, unless the node walk or a search by name did it); the error waits until
        attributes are used, so reading ids, types and times of a file with one bad attribute still works.

        Raises:
            TraceFormatError: a corrupt attribute, naming its node and byte offset.
        """
        if self.attr_error is None:
            err = np.zeros(5, dtype=np.int64)
            wk.check_attrs(self.buf, self.attr_at, self.ends, err)
            self.attr_error = err
        code, record, offset, field, wt = (int(x) for x in self.attr_error)
        if code:
            raise TraceFormatError(
                f"undecodable attribute ({walk_reason(code, field, wt)})",
                byte_offset=offset,
                path=self.encoded.path,
                rank=self.encoded.rank,
                node_id=int(self.ids[record]),
            )

    def prefetch(self, names: list[str], keep: bool = False) -> None:
        """Find several attributes in one pass over the records; each is kept until :meth:`numeric` or
        :meth:`values` takes it (9 bytes per node per name that some node has meanwhile; nothing for a name
        no node has).

        ``keep``: every later ask of these names reads them from the one pass, until :meth:`release` (13 bytes
        per node that has the attribute: several readers of one replay share a search instead of one each).

        Raises:
            TraceFormatError: a corrupt attribute message (see :meth:`verify`).
        """

        if keep:  # searched at the first ask of any of them (a corrupt attribute raises where it did)
            self._pending = [x for x in dict.fromkeys(names) if self._kept is None or x not in self._kept]
            if self._kept is None:
                self._kept = {}
            return
        todo = [x for x in dict.fromkeys(names) if x not in self._found]
        if todo:
            kind, values = self._find_all(todo)
            for k, name in enumerate(todo):
                if len(todo) == 1:
                    self._found[name] = (kind[k], values[k])
                elif int(kind[k].max(initial=wk.ABSENT)) != wk.ABSENT:  # a copy: the others' rows are freed
                    self._found[name] = (kind[k].copy(), values[k].copy())
                else:
                    self._found[name] = None

    def _keep(self) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The kept attributes, the pending names of :meth:`prefetch` with ``keep`` found now in one pass."""

        if self._kept is None:
            self._kept = {}
        kept, todo = self._kept, self._pending
        self._pending = []
        if todo:
            kind, values = self._find_all(todo)
            kept.update(_kept_rows(todo, kind, values))
            for name in todo:
                self._found.pop(name, None)
        return kept

    def release(self) -> None:
        """Forget what :meth:`prefetch` with ``keep`` stored (each name is searched again when asked)."""
        self._kept, self._pending = None, []

    def _find_all(self, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(kind int8[K, N], values int64[K, N])`` of :func:`tracekit.wire.kernels.find_attrs`."""

        checked = self.attr_error is not None
        if checked:
            self.verify()
        err = np.zeros(5, dtype=np.int64)  # the search frames every attribute message too
        keys, key_ptr, kind, values = _keys(names, self.n)
        wk.find_attrs(self.buf, self.attr_at, self.ends, keys, key_ptr, kind, values, err)
        if not checked:
            self.attr_error = err
            self.verify()
        return kind, values

    def _find(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(kind int8[N], values int64[N])`` of attribute ``name``: kept or prefetched, else found now."""
        if self._kept is not None and (name in self._kept or name in self._pending):
            at, kinds, kept = self._keep()[name]
            kind, values = np.zeros(self.n, dtype=np.int8), np.zeros(self.n, dtype=np.int64)
            kind[at], values[at] = kinds, kept
            return kind, values
        if name in self._found:
            found = self._found.pop(name)
            return found if found is not None else (np.zeros(self.n, dtype=np.int8), np.zeros(self.n, dtype=np.int64))
        kind, values = self._find_all([name])
        return kind[0], values[0]

    def numeric(self, name: str, ints_only: bool = False, bools: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
        """``(present bool[N], values int64[N])`` when every ``name`` attribute is a scalar number, else None.

        Floats are truncated toward zero (the integer rule of :func:`tracekit.model.attrs.as_int`); a bool or
        non-finite float gives None (the per-value rule raises for them) unless ``bools`` (bools as 0/1);
        with ``ints_only`` a floating value gives None too.

        Raises:
            TraceFormatError: a corrupt attribute message (see :meth:`verify`).
        """
        kind, ints = self._find(name)
        return numeric_values(kind, ints, ints_only, bools)

    def values(self, name: str) -> tuple[np.ndarray, list[Any]]:
        """``(present bool[N], values list[N])`` of attribute ``name`` (first occurrence per node; None where absent).

        Raises:
            TraceFormatError: a corrupt attribute message, or a value that does not decode (names the node).
        """

        kind, ints = self._find(name)
        present = kind != wk.ABSENT
        if not present.any():  # no node has it (e.g. ``merged_node_ids`` of an unmerged trace)
            return present, [None] * self.n
        scattered = np.full(self.n, None, dtype=object)  # scalars placed by numpy, not a Python loop
        for code, column in ((wk.INT, ints), (wk.BOOL, ints), (wk.FLOAT, ints.view(np.float64))):
            sel = kind == code
            if sel.any():
                vals = column[sel].tolist()  # Python ints / floats, as the protobuf path gives
                block = np.empty(len(vals), dtype=object)
                block[:] = [v != 0 for v in vals] if code == wk.BOOL else vals
                scattered[sel] = block
        values = scattered.tolist()
        data = self.data
        strings = np.flatnonzero(kind == wk.STRING)
        if len(strings):
            text: dict[bytes, str] = {}
            spans = ints[strings]
            for i, s, ln in zip(strings.tolist(), (spans >> 20).tolist(), (spans & 0xFFFFF).tolist()):
                raw = data[s : s + ln]
                value = text.get(raw)
                if value is None:
                    try:
                        value = text[raw] = raw.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        raise self._undecodable(name, i, exc) from None
                values[i] = value
        for i in np.flatnonzero(kind == wk.OTHER).tolist():
            values[i] = self._decode_other(name, i)
        return present, values

    def _decode_other(self, name: str, i: int) -> Any:
        """The value of the first attribute ``name`` of node ``i``, its record decoded with protobuf."""
        from tracekit.wire.codec import attr_from_pb
        from tracekit._proto import et_def_pb2 as pb

        s, e = int(self.starts[i]), int(self.ends[i])
        try:
            for a in pb.Node.FromString(self.data[s:e]).attr:
                if a.name == name:
                    return attr_from_pb(a).value
        except (DecodeError, UnicodeDecodeError) as exc:  # a corrupt value: named as a format error
            raise self._undecodable(name, i, exc) from None
        return None  # pragma: no cover - the walk found the attribute

    def _undecodable(self, name: str, i: int, exc: Exception) -> TraceFormatError:
        """The error for attribute ``name`` of node ``i`` whose value cannot be decoded (file, rank, node id)."""
        return TraceFormatError(
            f"attribute {name!r} cannot be decoded ({exc})",
            path=self.encoded.path,
            rank=self.encoded.rank,
            node_id=int(self.ids[i]),
        )


def _kept_rows(names: list[str], kind: np.ndarray, values: np.ndarray) -> dict[str, tuple[np.ndarray, Any, np.ndarray]]:
    """``name -> (positions int32, kinds, values)`` of the nodes that have each name, compacted (:func:`_narrow`),
    from one :func:`tracekit.wire.kernels.find_attrs` output (``kind``/``values``
    [K, N]): one nonzero pass and segment reductions for all K names, not K passes."""
    rows, at = np.nonzero(kind != wk.ABSENT)  # row-major: by name, positions ascending
    bounds = np.searchsorted(rows, np.arange(len(names) + 1)).tolist()
    at32 = at.astype(np.int32)
    kinds, vals = kind[rows, at], values[rows, at]
    starts = [lo for lo, hi in zip(bounds, bounds[1:]) if hi > lo]
    if starts:  # per name that some node has: its lowest and highest kind and value
        lows = zip(np.minimum.reduceat(kinds, starts).tolist(), np.maximum.reduceat(kinds, starts).tolist())
        spans = zip(np.minimum.reduceat(vals, starts).tolist(), np.maximum.reduceat(vals, starts).tolist())
    out: dict[str, tuple[np.ndarray, Any, np.ndarray]] = {}
    for name, lo, hi in zip(names, bounds, bounds[1:]):
        if hi == lo:
            out[name] = (at32[lo:hi], kinds[lo:hi], vals[lo:hi])
            continue
        (k_lo, k_hi), (v_lo, v_hi) = next(lows), next(spans)
        out[name] = (at32[lo:hi], *_narrow(kinds[lo:hi], vals[lo:hi], k_lo == k_hi, v_lo, v_hi))
    return out


def _narrow(kinds: np.ndarray, values: np.ndarray, one: bool, lo: int, hi: int) -> tuple[Any, np.ndarray]:
    """A kept attribute's kinds and values in less memory, losslessly: one kind when all are alike (``one``: a
    numpy scalar, broadcast when placed back), integer and bool values in the narrowest integer type holding
    ``lo``..``hi`` (``is_cpu_op`` and ``stream``, on nearly every node, drop from 9 to 1 byte a node)."""
    if one and int(kinds[0]) in (wk.INT, wk.BOOL):
        for dtype in (np.int8, np.int16, np.int32):
            info = np.iinfo(dtype)
            if info.min <= lo and hi <= info.max:
                values = values.astype(dtype)
                break
    return (kinds[:1].copy()[0] if one else kinds), values


def numeric_values(
    kind: np.ndarray, ints: np.ndarray, ints_only: bool = False, bools: bool = False
) -> tuple[np.ndarray, np.ndarray] | None:
    """``(present bool[N], values int64[N])`` of one name's ``find_attrs`` output when every value is a scalar
    number, else None (the rules of :meth:`_AttrSource.numeric`; ``ints``, zero where absent as
    :func:`tracekit.wire.columnar._keys` allocates it, is returned or overwritten).
    """

    top = int(kind.max()) if len(kind) else wk.ABSENT
    if top <= wk.INT:  # integers only (the usual case): one reduction decides
        return kind != wk.ABSENT, ints
    if top >= wk.STRING and bool((kind >= wk.STRING).any()):  # STRING, OTHER, NONE (kinds 4-6)
        return None  # strings, lists, empty values: the per-value rule decides (tracekit.model.attrs.as_int)
    has_float = bool((kind == wk.FLOAT).any())
    if (not bools and bool((kind == wk.BOOL).any())) or (ints_only and has_float):
        return None
    present = kind != wk.ABSENT
    if has_float:
        is_float = kind == wk.FLOAT
        floats = np.where(is_float, ints.view(np.float64), 0.0)
        if not np.isfinite(floats).all():
            return None
        ints = np.where(is_float, np.trunc(floats).astype(np.int64), ints)
    return present, ints


def walk_reason(code: int, field: int, wt: int) -> str:
    """The words for a walk code of :mod:`tracekit.wire.kernels` (field number and wire type where they matter)."""

    if code == wk.BAD_TAG:
        return f"invalid field tag (field {field}, wire type {wt})"
    if code == wk.PAST_END:
        return f"field {field} runs past the end of its message"
    return wk.REASONS[code]


def _keys(names: list[str], m: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(keys, key_ptr, kind int8[K, m], values int64[K, m])`` for the walks of :mod:`tracekit.wire.kernels`
    (kinds ABSENT and values 0 until found)."""
    packed = _PACKED.get(tuple(names))
    if packed is None:  # a few name lists per process (the replay's, one per single name asked)
        keys = [x.encode() for x in names]
        key_ptr = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum([len(k) for k in keys], out=key_ptr[1:])
        key_bytes = np.frombuffer(b"".join(keys) or b"\0", dtype=np.uint8)
        if len(_PACKED) >= 256:
            _PACKED.clear()
        packed = _PACKED[tuple(names)] = (key_bytes, key_ptr)
    key_bytes, key_ptr = packed
    k = len(names)
    return key_bytes, key_ptr, np.zeros((k, m), dtype=np.int8), np.zeros((k, m), dtype=np.int64)


#: :func:`_keys`' packed names by name list (shared: the kernels only read them; the AOT exports' argument key
#: wants ``key_ptr`` writeable, as it was made)
_PACKED: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}
