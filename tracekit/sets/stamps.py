"""Rank-class stamps: the metadata attribute that marks a per-rank `.et` file as a member of a rank class.

``tracekit expand`` (:meth:`tracekit.sets.classset.ClassSet.expand`) and the generators stamp each per-rank file
with its class's key (a hash of the representative's node records) and the rank's slot values, so a replay of
the per-rank files derives members from their class's first file instead of decoding them
(``tracekit.replayer.simulation.class_replay``). The stamp is appended to the GlobalMetadata record; node records
are untouched.
"""

from __future__ import annotations

from typing import Any, Sequence

from tracekit.model import Attr

__all__ = ["RANK_CLASS_ATTR", "class_key", "read_rank_class", "stamp_rank_class"]

#: GlobalMetadata attribute of a per-rank file written from a class: JSON ``{"key", "slots", "values"}``
#: (``key``: hash of the class representative's node records; ``values``: this rank's slot values).
RANK_CLASS_ATTR = "tracekit_rank_class"


def _first_record(data: bytes) -> tuple[int, int]:
    """``(start, end)`` of the metadata message (after its varint length prefix); (0, -1) when malformed."""
    length, shift, i = 0, 0, 0
    while i < min(len(data), 5):
        b = data[i]
        length |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return (i, i + length) if i + length <= len(data) else (0, -1)
        shift += 7
    return 0, -1


def class_key(data: bytes) -> str:
    """The class key of a representative's `.et` bytes: a BLAKE2b hash of its node records."""
    import hashlib

    _, end = _first_record(data)
    return hashlib.blake2b(data[max(end, 0) :], digest_size=16).hexdigest()


def stamp_rank_class(data: bytes, key: str, slots: Sequence[Attr], values: Sequence[Any]) -> bytes:
    """``data`` with :data:`RANK_CLASS_ATTR` appended to its metadata (node records untouched).

    Appending a repeated field's encoding to a protobuf message appends to that field (protobuf encoding
    guide, "Concatenating messages"), so the metadata keeps every other byte.
    """
    import orjson

    from tracekit._proto import et_def_pb2 as pb
    from tracekit.wire.framing import frame

    start, end = _first_record(data)
    doc = {"key": key, "slots": [[a.name, a.kind, a.value] for a in slots], "values": list(values)}
    extra = pb.GlobalMetadata(attr=[pb.AttributeProto(name=RANK_CLASS_ATTR, string_val=orjson.dumps(doc).decode())])
    return frame(data[start:end] + extra.SerializeToString()) + data[end:]


def read_rank_class(data: bytes) -> tuple[str, tuple[Attr, ...], tuple[Any, ...], int] | None:
    """``(key, slots, this rank's values, offset of the node records)`` of a stamped file's bytes, else None."""
    import orjson
    from google.protobuf.message import DecodeError

    from tracekit._proto import et_def_pb2 as pb

    start, end = _first_record(data)
    if end < 0:
        return None
    md = pb.GlobalMetadata()
    try:
        md.ParseFromString(data[start:end])
        found = [a.string_val for a in md.attr if a.name == RANK_CLASS_ATTR]
        if not found:
            return None
        doc = orjson.loads(found[-1])
        slots = tuple(Attr(str(n), v, str(kind)) for n, kind, v in doc["slots"])
        values = tuple(doc["values"])
        key = str(doc["key"])
    except (DecodeError, ValueError, KeyError, TypeError):  # a malformed stamp (orjson's error is a ValueError;
        return None  # a wrong shape a Key/Type/ValueError): the file is read the ordinary way, which reports it
    if len(values) != len(slots):
        return None
    return key, slots, values, end
