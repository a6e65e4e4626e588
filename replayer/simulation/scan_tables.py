"""Send/receive tables of rank scans as arrays, and class members' scans that do not copy them (issue 34 item 2).

A member of a rank class (:func:`.class_replay.member_scan`) has its representative's communication with peers and
group names renamed.  Built as dicts, the renamed send/receive tables cost ~0.7 kB per send/recv node and member
(1.4 GB for GPT-3 175B with 64 interleaved micro-batches on 2,048 ranks) while the fold proof only reads them once,
as arrays (:func:`.fold_p2p._table`).  :class:`MemberScan` keeps the representative's scan and the renaming and
gives the arrays (:func:`p2p_table`) and the sizes and group names by position (:func:`pair_attr_arrays`) from the
representative's; the dicts themselves are built on first access only (the pair-by-pair fallback reads them), with
the same contents as :func:`.class_replay.member_scan` built eagerly before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.replayer.simulation.fold_types import RankScan

if TYPE_CHECKING:  # pragma: no cover
    import numpy.typing as npt

__all__ = ["MemberScan", "P2PTable", "p2p_table", "pair_attr_arrays", "sorted_p2p_table"]

#: ``(peers, tags, positions)``, int64 arrays of equal length: one row per (peer, tag) key of a send or receive table
P2PTable = tuple["npt.NDArray[np.int64]", "npt.NDArray[np.int64]", "npt.NDArray[np.int64]"]

_LAZY = ("sends", "recvs", "p2p_attr")


class MemberScan(RankScan):
    """A class member's :class:`~.folding.RankScan`: its representative's with ``pg``/``src``/``dst`` renamings.

    ``sends``/``recvs``/``p2p_attr`` are built on first access (module doc); every other field is set.
    Made by :meth:`renamed`; :func:`dataclasses.replace` of one gives an ordinary, fully built scan.
    """

    @classmethod
    def renamed(
        cls, scan: RankScan, rank: int, path: str | None, pg: dict[str, str], src: dict[int, int], dst: dict[int, int]
    ) -> "MemberScan":
        """``scan``'s member ``rank`` (``pg``: group names, ``src``/``dst``: receive sources and send
        destinations, representative's value -> member's)."""
        out = object.__new__(cls)
        out.__dict__.update(
            rank=rank,
            path=path,
            n=scan.n,
            digest=scan.digest,
            coll={pg.get(k, k): v for k, v in scan.coll.items()},
            coll_attr=scan.coll_attr,
            comm_count=scan.comm_count,
            comm_ids=scan.comm_ids,
            uneven=scan.uneven,
            splits=scan.splits,
            _renamed=(scan, pg, src, dst),
        )
        return out

    def __getattr__(self, name: str) -> Any:
        """Build ``sends``/``recvs``/``p2p_attr`` on first access (as the eager renaming did) and keep them."""
        renamed = self.__dict__.get("_renamed")
        if name not in _LAZY or renamed is None:
            raise AttributeError(name)
        scan, pg, src, dst = renamed
        if name == "sends":
            value: Any = {(dst.get(peer, peer), tag): v for (peer, tag), v in scan.sends.items()}
        elif name == "recvs":
            value = {(src.get(peer, peer), tag): v for (peer, tag), v in scan.recvs.items()}
        else:
            value = {p: (size, pg.get(group, group)) for p, (size, group) in scan.p2p_attr.items()}
        self.__dict__[name] = value
        return value


def _own_table(scan: RankScan, recv: bool) -> P2PTable | None:
    """:func:`p2p_table` of a scan from its own dict (cached on the scan: class members share their
    representative's)."""
    cache = scan.__dict__.setdefault("_p2p_tables", {})
    if recv not in cache:
        table = scan.recvs if recv else scan.sends
        if table and set(map(len, table.values())) != {1}:
            cache[recv] = None
        else:
            peers, tags = (list(x) for x in zip(*table)) if table else ([], [])
            cache[recv] = (
                np.asarray(peers, dtype=np.int64),
                np.asarray(tags, dtype=np.int64),
                np.asarray([v[0] for v in table.values()], dtype=np.int64),
            )
    return cache[recv]


def p2p_table(scan: RankScan, recv: bool) -> P2PTable | None:
    """The receive (``recv``) or send table of ``scan`` in the dict's key order, or None when a key has several
    positions.  A :class:`MemberScan`'s is its representative's with the peers renamed, unless the renaming joins
    two keys (then from the built dict, as before)."""
    renamed = scan.__dict__.get("_renamed")
    if renamed is None or "sends" in scan.__dict__:
        return _own_table(scan, recv)
    base, _, src, dst = renamed
    table = _own_table(base, recv)
    if table is None:
        return None
    rename = src if recv else dst
    _, tags, positions = table
    distinct, inverse = _peer_codes(base, recv)
    mapped = [rename.get(p, p) for p in distinct]
    if len(set(mapped)) != len(distinct):  # two keys would become one: the dict decides
        return _own_table(scan, recv)
    return np.asarray(mapped, dtype=np.int64)[inverse], tags, positions


def sorted_p2p_table(scan: RankScan, recv: bool) -> P2PTable | None:
    """:func:`p2p_table` with the rows ordered by ``(peer, tag)``.  A member whose renaming keeps its
    representative's peers in order takes the representative's order (found once); another is sorted itself."""
    table = p2p_table(scan, recv)
    if table is None:
        return None
    peers, tags, positions = table
    renamed = scan.__dict__.get("_renamed")
    if renamed is not None and "sends" not in scan.__dict__:
        base, _, src, dst = renamed
        rename = src if recv else dst
        mapped = [rename.get(p, p) for p in _peer_codes(base, recv)[0]]
        if all(a < b for a, b in zip(mapped, mapped[1:])):  # ascending as the representative's peers
            order = _own_order(base, recv)
            return peers[order], tags[order], positions[order]
        order = np.lexsort((tags, peers))
    else:
        order = _own_order(scan, recv)
    return peers[order], tags[order], positions[order]


def _own_order(scan: RankScan, recv: bool) -> "npt.NDArray[np.int64]":
    """The order by ``(peer, tag)`` of the scan's own table (cached on the scan)."""
    cache = scan.__dict__.setdefault("_p2p_orders", {})
    if recv not in cache:
        table = _own_table(scan, recv)
        assert table is not None  # sorted_p2p_table asked for it after p2p_table gave one
        cache[recv] = np.lexsort((table[1], table[0]))
    return cache[recv]


def _peer_codes(scan: RankScan, recv: bool) -> "tuple[list[int], npt.NDArray[np.int64]]":
    """The distinct peers of a scan's own table and each row's index among them (cached on the scan)."""
    cache = scan.__dict__.setdefault("_peer_codes", {})
    if recv not in cache:
        table = _own_table(scan, recv)
        assert table is not None  # p2p_table asked for it after _own_table gave one
        distinct, inverse = np.unique(table[0], return_inverse=True)
        cache[recv] = (distinct.tolist(), inverse.reshape(-1))
    return cache[recv]


def pair_attr_arrays(scan: RankScan) -> "tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], list[str]]":
    """``scan.p2p_attr`` as arrays over node positions: ``(comm sizes, group codes, group names)``; the send/recv at
    position ``p`` has ``sizes[p]`` bytes on group ``names[codes[p]]`` (other positions hold 0).  Made once per
    scan; a :class:`MemberScan` has its representative's arrays and its renamed names."""
    renamed = scan.__dict__.get("_renamed")
    if renamed is None or "p2p_attr" in scan.__dict__:
        return _own_attr_arrays(scan)
    base, pg, _, _ = renamed
    sizes, codes, names = _own_attr_arrays(base)
    return sizes, codes, [pg.get(g, g) for g in names]


def _own_attr_arrays(scan: RankScan) -> "tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], list[str]]":
    """:func:`pair_attr_arrays` from the scan's own dict (cached on the scan)."""
    found = scan.__dict__.get("_attr_arrays")
    if found is None:
        attrs = scan.p2p_attr
        span = max(attrs, default=-1) + 1
        sizes = np.zeros(span, dtype=np.int64)
        codes = np.zeros(span, dtype=np.int64)
        index: dict[str, int] = {}
        if attrs:
            at = np.fromiter(attrs, dtype=np.int64, count=len(attrs))
            sizes[at] = [v[0] for v in attrs.values()]
            codes[at] = [index.setdefault(v[1], len(index)) for v in attrs.values()]
        found = scan.__dict__["_attr_arrays"] = (sizes, codes, list(index))
    return found
