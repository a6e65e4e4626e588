"""Node removal with bypass edges on encoded records (issue 17): :mod:`tracekit.transforms.bypass` on columns.

Same results as :func:`tracekit.transforms.bypass.remove_nodes` (digests compared in
``tests/transforms/test_columnar_equal.py``): a kept node that waited for a removed
node waits for the removed node's kept ancestors instead (data and control
dependencies separately, through any chain of removed nodes); dependencies on ids
that name no node are dropped from the nodes that change.  Which nodes go is
decided on columns; the kept ancestors of removed nodes are resolved once each
(removed nodes whose dependencies are all kept, the common case, in one vectorized
pass); kept nodes that change get their dependency fields re-encoded; no ``Node``
object is built.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracekit.wire.records import Edit, Records, packed_fields, rewrite
from tracekit.transforms._deplists import DepLists, _lists, _Lookup, _unique, member

FIELD_CTRL_DEPS = 4
FIELD_DATA_DEPS = 5


def _resolve(lists: DepLists, ids: np.ndarray, drop: np.ndarray, lookup: _Lookup) -> dict[int, tuple[int, ...]]:
    """Removed node id -> its kept ancestors (ids, first-occurrence order) through removed nodes, via ``lists``."""
    deps, ptr = lists.ids.tolist(), lists.ptr.tolist()
    pos_a, found_a = lookup(lists.ids)
    pos, found, dropped = pos_a.tolist(), found_a.tolist(), drop.tolist()
    ids_l = ids.tolist()
    memo: dict[int, tuple[int, ...]] = {}
    for start in np.flatnonzero(drop).tolist():
        stack = [start]
        while stack:
            cur = stack[-1]
            cid = ids_l[cur]
            if cid in memo:
                stack.pop()
                continue
            lo, hi = ptr[cur], ptr[cur + 1]
            pending = [
                pos[e] for e in range(lo, hi) if found[e] and dropped[pos[e]] and deps[e] not in memo and deps[e] != cid
            ]
            if pending:
                stack.extend(pending)
                continue
            out: dict[int, None] = {}
            for e in range(lo, hi):
                d = deps[e]
                if found[e] and not dropped[pos[e]]:
                    out[d] = None
                elif d in memo:
                    out.update(dict.fromkeys(memo[d]))
            memo[cid] = tuple(out)
            stack.pop()
    return memo


def _expanded(
    lists: DepLists, rows: np.ndarray, ids: np.ndarray, ok: np.ndarray, memo: dict[int, tuple[int, ...]]
) -> DepLists:
    """New lists of ``rows``: kept deps as they are, removed ones replaced by their kept ancestors, missing dropped,
    deduplicated (first occurrence), without the node's own id."""
    deps, ptr = lists.ids.tolist(), lists.ptr.tolist()
    ok_l = ok.tolist()
    owner: list[int] = []
    vals: list[int] = []
    for k, r in enumerate(rows.tolist()):
        me = int(ids[r])
        seen: dict[int, None] = {}
        for e in range(ptr[r], ptr[r + 1]):
            d = deps[e]
            for x in (d,) if ok_l[e] else memo.get(d, ()):
                if x != me:
                    seen[x] = None
        owner.extend([k] * len(seen))
        vals.extend(seen)
    return _lists(np.asarray(owner, dtype=np.int64), np.asarray(vals, dtype=np.uint64), len(rows))


def remove_rows(trace: Any, drop: np.ndarray) -> Any | None:
    """``trace`` without the nodes where ``drop`` (bool[N]) is set, with bypass edges; the trace itself when
    nothing is dropped; None when node ids repeat (use :func:`tracekit.transforms.bypass.remove_nodes`).
    """
    if not drop.any():
        return trace
    cols = trace.columns()
    ids = cols.ids
    if len(ids) > 1 and not bool(np.all(ids[1:] > ids[:-1])) and len(_unique(ids)) != len(ids):
        return None
    lookup = _Lookup(ids)
    kept_ids = np.sort(ids[~drop])
    edit = Edit(keep=~drop)
    lists = [
        DepLists(np.asarray(p, dtype=np.int64), np.asarray(d, dtype=np.uint64))
        for p, d in ((cols.data_ptr, cols.data_ids), (cols.ctrl_ptr, cols.ctrl_ids))
    ]
    oks = [member(x.ids, kept_ids) for x in lists]
    bad = np.zeros(len(ids), dtype=bool)
    for x, ok in zip(lists, oks):
        bad[x.owners()[~ok]] = True
    rows = np.flatnonzero(bad & ~drop)  # the node path rewrites both lists of these nodes
    if len(rows):
        for fnum, x, ok in zip((FIELD_DATA_DEPS, FIELD_CTRL_DEPS), lists, oks):
            memo = _resolve(x, ids, drop, lookup) if (~ok).any() else {}
            new = _expanded(x, rows, ids, ok, memo)
            edit.drops.append((rows, fnum))
            edit.inserts.append((rows, fnum, packed_fields(fnum, new.ptr, new.ids)))
    return rewrite(Records.of(trace), edit, trace.metadata)
