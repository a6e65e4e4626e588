"""Derive the `.et` bytes of many similar ranks from one encoded representative.

In generated jobs many ranks have the same nodes except for a few attribute
values: the ``pg_name`` of their groups and the peer ranks of their sends and
receives.  Encoding every rank separately costs a few microseconds per node
(a GPT-3 175B iteration on 1,024 ranks has about 37 million nodes), so a
generator builds and encodes one representative per class and asks this
module for the others.

How: in the protobuf wire format a ``Node``'s attribute is one
length-delimited field (number 10) holding an ``AttributeProto``, so its
bytes are exactly the encoding of a ``Node`` that holds only that attribute,
and they appear verbatim in the representative's records.  A
:class:`RankTemplate` finds every such attribute in the representative's
records (:func:`tracekit.wire.framing.split_records`), and for another rank replaces
each by the encoding of that rank's value.  Replacing a value by one of
another encoded length is fine: the only other bytes that change are the
varint length prefixes of the records holding it, which the template also
keeps as slots.

A replacement is exact when the two ranks' traces are equal up to the listed
attribute values; :func:`tracekit.converters.generators.llm` tests this by
comparing with ranks built directly.
"""

from __future__ import annotations

import re
from typing import Mapping

import numpy as np

from tracekit.errors import ConfigError
from tracekit.wire.io import encode_trace
from tracekit.wire.framing import split_records
from tracekit.model import Attr, ExecutionTrace, Metadata, Node, NodeType


def attr_bytes(attr: Attr) -> bytes:
    """The bytes ``attr`` occupies inside an encoded Node (field tag, length and AttributeProto)."""
    node = Node(id=0, name="", type=NodeType.INVALID_NODE, attrs=[attr])
    data = encode_trace(ExecutionTrace([node], Metadata(version="")))
    _, _, starts, ends = split_records(data)
    return data[int(starts[0]) : int(ends[0])]


def _varint(n: int) -> bytes:
    """Protobuf varint of a record length (the prefix :func:`tracekit.wire.framing.frame` writes)."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _varint_len(n: int) -> int:
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


class RankTemplate:
    """The encoded trace of a representative rank, ready to be specialised.

    Args:
        data: the representative's `.et` bytes (:func:`tracekit.wire.io.encode_trace`).
        attrs: key -> the representative's :class:`Attr` for each varying
            value (e.g. ``("pg", "tp") -> Attr("pg_name", "3", "string_val")``).

    Raises:
        ConfigError: two keys have the same encoded attribute but would be
            specialised differently (detected in :meth:`for_rank`).
    """

    def __init__(self, data: bytes, attrs: Mapping[object, Attr]) -> None:
        self.data = data
        self._keys_by_bytes: dict[bytes, list[object]] = {}
        for key, attr in attrs.items():
            self._keys_by_bytes.setdefault(attr_bytes(attr), []).append(key)
        # The bytes split at every varying attribute and at the length prefix of every record
        # holding one: consts[0] slot[0] consts[1] slot[1] ... consts[n].
        self._consts: list[bytes] = []
        self._slot_old: list[bytes] = []  # representative's bytes in each slot
        self._prefix_slots: list[int] = []  # slot index of each re-framed record's prefix
        self._record_hits: list[tuple[int, list[bytes]]] = []  # (body length, attrs in the record)
        if not self._keys_by_bytes:
            self._consts.append(data)
            return
        _, _, starts, ends = split_records(data)
        pattern = re.compile(b"|".join(re.escape(p) for p in sorted(self._keys_by_bytes, key=len, reverse=True)))
        matches = [(m.start(), m.end(), m.group()) for m in pattern.finditer(data)]
        record_of = (
            np.searchsorted(starts, np.asarray([s for s, _, _ in matches], dtype=np.int64), side="right") - 1
            if matches
            else np.zeros(0, dtype=np.int64)
        )
        cursor, current = 0, -1
        for (s, e, b), rec in zip(matches, record_of.tolist()):
            if rec < 0 or e > int(ends[rec]):
                continue  # not inside a node record (the metadata)
            if rec != current:
                body_start, body_end = int(starts[rec]), int(ends[rec])
                prefix_start = body_start - _varint_len(body_end - body_start)
                self._consts.append(data[cursor:prefix_start])
                self._prefix_slots.append(len(self._slot_old))
                self._slot_old.append(data[prefix_start:body_start])
                self._record_hits.append((body_end - body_start, []))
                cursor, current = body_start, rec
            self._consts.append(data[cursor:s])
            self._slot_old.append(b)
            self._record_hits[-1][1].append(b)
            cursor = e
        self._consts.append(data[cursor:])

    def for_rank(self, attrs: Mapping[object, Attr]) -> bytes:
        """The `.et` bytes of a rank whose varying values are ``attrs`` (same keys as the template's)."""
        replace: dict[bytes, bytes] = {}
        for old, keys in self._keys_by_bytes.items():
            new = {attr_bytes(attrs[k]) for k in keys}
            if len(new) != 1:
                raise ConfigError(f"rank template: keys {keys} share a value in the representative but not here")
            replace[old] = new.pop()
        if all(old == new for old, new in replace.items()):
            return self.data
        values = [replace.get(old, old) for old in self._slot_old]
        delta = {old: len(new) - len(old) for old, new in replace.items()}
        if any(delta.values()):
            for slot, (length, hits) in zip(self._prefix_slots, self._record_hits):
                values[slot] = _varint(length + sum(delta[h] for h in hits))
        out: list[bytes] = [b""] * (2 * len(values) + 1)
        out[0::2] = self._consts
        out[1::2] = values
        return b"".join(out)
