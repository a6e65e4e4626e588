"""Attribute values of every node, found by name (:func:`tracekit._wirekernels.find_attr`).

Used by :mod:`tracekit._columnar` (``NodeColumns.attr``/``attr_int``) and
:mod:`tracekit._nodeview` (per-node attribute decoding).  One compiled pass
over the records finds each node's first attribute of a name and decodes
scalar numbers and strings; lists, bytes and irregular messages are decoded
with protobuf, which is the reference for what a value is.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from tracekit.errors import TraceFormatError


class _AttrSource:
    """Finds attributes by name across all nodes of one file's records.

    Args:
        data, buf: the file's bytes and a uint8 view of them.
        starts, ends: the node records' message spans.
        ids: uint64[N] node ids (for error messages).
        encoded: the :class:`tracekit.io.EncodedNodes` (path and rank for error messages).
        attr_error: the first corrupt attribute message found by the node walk
            (code, record, byte offset, field, wire type; code 0 when none).
        special: bool[N], records the node view decodes with protobuf.
    """

    def __init__(
        self,
        data: bytes,
        buf: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        ids: np.ndarray,
        encoded: Any,
        attr_error: np.ndarray,
        special: np.ndarray,
    ) -> None:
        self.data, self.buf, self.starts, self.ends = data, buf, starts, ends
        self.n = len(starts)
        self.ids, self.encoded, self.attr_error, self.special = ids, encoded, attr_error, special

    def verify(self) -> None:
        """Raise for a corrupt attribute message (first attribute access, or validation).

        The node walk frames every attribute message; the error waits until
        attributes are used, so reading ids, types and times of a file with
        one bad attribute still works.

        Raises:
            TraceFormatError: a corrupt attribute, naming its node and byte offset.
        """
        code, record, offset, field, wt = (int(x) for x in self.attr_error)
        if code:
            from tracekit._columnar import walk_reason

            raise TraceFormatError(
                f"undecodable attribute ({walk_reason(code, field, wt)})",
                byte_offset=offset,
                path=self.encoded.path,
                rank=self.encoded.rank,
                node_id=int(self.ids[record]),
            )

    def _find(self, name: str, aux: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(kind int8[N], ints int64[N], floats float64[N], aux int64[N or 0])`` of :func:`find_attr`."""
        from tracekit import _wirekernels as wk

        self.verify()
        n = self.n
        kind = np.zeros(n, dtype=np.int8)
        ints = np.empty(n, dtype=np.int64)
        floats = np.empty(n, dtype=np.float64)
        extra = np.empty(n if aux else 0, dtype=np.int64)
        key = np.frombuffer(name.encode(), dtype=np.uint8)
        wk.find_attr(self.buf, self.starts, self.ends, key, kind, ints, floats, extra)
        return kind, ints, floats, extra

    def numeric(self, name: str, ints_only: bool = False, bools: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
        """``(present bool[N], values int64[N])`` when every ``name`` attribute is a scalar number, else None.

        Floats are truncated toward zero (the integer rule of :func:`tracekit.attrs.as_int`); a bool or
        non-finite float gives None (the per-value rule raises for them) unless ``bools`` (bools as 0/1);
        with ``ints_only`` a floating value gives None too.

        Raises:
            TraceFormatError: a corrupt attribute message (see :meth:`verify`).
        """
        from tracekit import _wirekernels as wk

        kind, ints, floats, _ = self._find(name, aux=False)
        count = np.bincount(kind, minlength=wk.NONE + 1)
        if count[wk.STRING] or count[wk.OTHER] or count[wk.NONE]:
            return None  # strings, lists, empty values: the per-value rule decides (tracekit.attrs.as_int)
        if (count[wk.BOOL] and not bools) or (count[wk.FLOAT] and ints_only):
            return None
        present = kind != wk.ABSENT
        if count[wk.FLOAT]:
            is_float = kind == wk.FLOAT
            if not np.isfinite(floats[is_float]).all():
                return None
            ints = np.where(is_float, np.trunc(np.where(is_float, floats, 0.0)).astype(np.int64), ints)
        ints[~present] = 0
        return present, ints

    def values(self, name: str) -> tuple[np.ndarray, list[Any]]:
        """``(present bool[N], values list[N])`` of attribute ``name`` (first occurrence per node; None where absent).

        Raises:
            TraceFormatError: a corrupt attribute message, or a value that does not decode (names the node).
        """
        from tracekit import _wirekernels as wk

        kind, ints, floats, aux = self._find(name, aux=True)
        present = kind != wk.ABSENT
        scattered = np.full(self.n, None, dtype=object)  # scalars placed by numpy, not a Python loop
        for code, column in ((wk.INT, ints), (wk.BOOL, ints), (wk.FLOAT, floats)):
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
            for i, s, ln in zip(strings.tolist(), ints[strings].tolist(), aux[strings].tolist()):
                raw = data[s : s + ln]
                value = text.get(raw)
                if value is None:
                    try:
                        value = text[raw] = raw.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        raise TraceFormatError(
                            f"attribute {name!r} cannot be decoded ({exc})",
                            path=self.encoded.path,
                            rank=self.encoded.rank,
                            node_id=int(self.ids[i]),
                        ) from None
                values[i] = value
        for i in np.flatnonzero(kind == wk.OTHER).tolist():
            values[i] = self._decode_other(name, i, (int(ints[i]), int(aux[i])))
        return present, values

    def _decode_other(self, name: str, i: int, span: tuple[int, int]) -> Any:
        """The value of the attribute message at ``span`` of node ``i``, decoded with protobuf."""
        from tracekit._codec import attr_from_pb
        from tracekit._proto import et_def_pb2 as pb

        s, ln = span
        try:
            return attr_from_pb(pb.AttributeProto.FromString(self.data[s : s + ln])).value
        except (DecodeError, UnicodeDecodeError) as exc:  # a corrupt value: named as a format error
            raise TraceFormatError(
                f"attribute {name!r} cannot be decoded ({exc})",
                path=self.encoded.path,
                rank=self.encoded.rank,
                node_id=int(self.ids[i]),
            ) from None
