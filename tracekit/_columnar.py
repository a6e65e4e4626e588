"""Column-wise decoding of encoded node records (see :class:`tracekit.io.EncodedNodes`).

Builds :class:`tracekit.graph.NodeColumns` straight from the record bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracekit._codec import attr_from_pb, ns_from_wire
from tracekit.graph import NodeColumns, csr_from_lists


def decode_columns(encoded: Any) -> NodeColumns:
    """Node columns of the records in ``encoded`` (a :class:`tracekit.io.EncodedNodes`).

    Raises:
        TraceFormatError: a record cannot be decoded (names the byte offset).
    """
    msgs = []
    last = None
    for i in range(len(encoded)):
        m = encoded.decode_one(i, last)
        msgs.append(m)
        last = m.id
    n = len(msgs)
    ids = np.fromiter((m.id for m in msgs), dtype=np.uint64, count=n)
    types = np.fromiter((m.type for m in msgs), dtype=np.int32, count=n)
    dur = np.fromiter((ns_from_wire(m.duration_micros, m.duration_nanos) for m in msgs), dtype=np.int64, count=n)
    start = np.fromiter((ns_from_wire(m.start_time_micros, m.start_time_nanos) for m in msgs), dtype=np.int64, count=n)
    dptr, dids = csr_from_lists([m.data_deps for m in msgs])
    cptr, cids = csr_from_lists([m.ctrl_deps for m in msgs])

    def attr_fn(name: str):
        values: list[Any] = [None] * n
        for i, m in enumerate(msgs):
            for a in m.attr:
                if a.name == name:
                    values[i] = attr_from_pb(a).value
                    break
        present = np.fromiter((v is not None for v in values), dtype=bool, count=n)
        return present, values

    return NodeColumns(ids, types, dur, start, dptr, dids, cptr, cids,
                       names_fn=lambda: [m.name for m in msgs], attr_fn=attr_fn)
