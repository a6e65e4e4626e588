"""Compiled name grouping of the `.et` read path: the records grouped by their name bytes.

The node walk (:func:`tracekit.wire.kernels.walk_nodes`) notes where each
record's ``name`` field is; when the names are first used,
:func:`name_groups` groups the records by those bytes, so that
:mod:`tracekit.wire.columnar` decodes each distinct name once.
"""

from __future__ import annotations

import numpy as np

from tracekit.jit import inline, kernel
from tracekit.wire.kernels import field_at


@inline
def _same(buf, a, b, length):  # pragma: no cover - compiled
    for k in range(length):
        if buf[a + k] != buf[b + k]:
            return False
    return True


@kernel
def name_groups(buf, name_at, group, table, rep_s, rep_l):  # pragma: no cover - compiled
    """Group the records by name bytes (an open-addressing table of ``len(table)`` slots, a power of two).

    ``name_at``: per record the offset of its ``name`` field (-1 for none, an empty name), as
    :func:`walk_nodes` found it (the field frames).  Writes ``group[i]`` (the group of record i)
    and per group the span of its first name (``rep_s``, ``rep_l``).  Returns the number of
    groups, or -1 when they outgrow half the table (the caller retries with a larger one).
    """
    mask = len(table) - 1
    table[:] = -1
    groups = 0
    n = len(buf)
    for i in range(len(name_at)):
        s = ln = 0
        if name_at[i] >= 0:
            _, _, _, value, ln, _ = field_at(buf, np.int64(name_at[i]), n)
            s = np.int64(value)
        h = np.uint64(1469598103934665603) ^ np.uint64(ln)  # FNV-1a over the length and the bytes
        for k in range(ln):
            h = (h ^ np.uint64(buf[s + k])) * np.uint64(1099511628211)
        slot = np.int64(h & np.uint64(mask))
        while True:
            g = table[slot]
            if g < 0:
                if 2 * (groups + 1) > len(table) or groups >= len(rep_s):
                    return -1
                table[slot] = groups
                rep_s[groups] = s
                rep_l[groups] = ln
                group[i] = groups
                groups += 1
                break
            if rep_l[g] == ln and _same(buf, rep_s[g], s, ln):
                group[i] = g
                break
            slot = (slot + 1) & mask
    return groups
