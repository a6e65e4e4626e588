"""The send/recv part of the folding proof (:mod:`.folding`, point 2), pair by pair or in bulk.

:func:`plan_p2p` matches every send with its receive (:func:`tracekit.sets.rendezvous.p2p_pairs`: keys
``(src, dst, tag)`` ascending, the k-th send with the k-th receive) and folds each pair onto its image
``((rep[src], send position), (rep[dst], recv position))``.  A pipeline-parallel job has a few hundred
thousand pairs, each the only one of its key; for such a job the same pairs, images, checks and folded
instances are computed with numpy (:func:`_bulk`), and anything unusual (a key with several sends or
none, a peer outside the job, an image node used twice) leaves it to the pair-by-pair loop, which gives
the same result and raises the :class:`~.folding.NotFoldable` that says why.
"""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.replayer.simulation.fold_arrays import (
    as_buffer,
    dense_unique,
    few_codes,
    key_order,
    sorted_unique,
    stable_order_by_rank,
)
from tracekit.sets.rendezvous import p2p_pairs

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.folding import _Planner

__all__ = ["plan_p2p"]

_FIRST = itemgetter(0)


def plan_p2p(planner: "_Planner") -> None:
    """Every matched send/recv pair of the job folded into ``planner`` (its ``folded``, ``unfolded``, orders).

    Raises:
        NotFoldable: an unmatched send/recv, a peer outside the job, or a pair that does not map onto its
            representatives' pair.
    """
    if not _bulk(planner):
        _pair_by_pair(planner)


def _pair_by_pair(planner: "_Planner") -> None:
    from tracekit.replayer.simulation.fold_types import NotFoldable

    world, rep, scans = planner.world, planner.rep, planner.scans
    sends: dict[tuple[int, int, int], list[int]] = {}
    recvs: dict[tuple[int, int, int], list[int]] = {}
    for r, s in scans.items():
        sends.update(((r, peer, tag), v) for (peer, tag), v in s.sends.items())
        recvs.update(((peer, r, tag), v) for (peer, tag), v in s.recvs.items())
    for (src, dst, tag), _, sp, rp in p2p_pairs(sends, recvs):
        if not (0 <= src < world and 0 <= dst < world):
            raise NotFoldable(f"a send/recv names rank {src if not 0 <= src < world else dst}, outside the job")
        if sp is None or rp is None:
            raise NotFoldable(f"unmatched sends/recvs from rank {src} to rank {dst} with tag {tag}")
        nbytes, pg = scans[src].p2p_attr[sp]
        ranks = (src, dst)
        image = ((rep[src], sp), (rep[dst], rp))
        key = ("p2p", None, nbytes, planner.costs.key("p2p", None, nbytes, ranks))
        fid = planner._fold(image, key, ("p2p", None, nbytes, pg, ranks, tag, (rep[src], rep[dst])))
        planner.unfolded.append(("p2p", None, nbytes, pg, ranks, (sp, rp), fid))
        planner.order_by_u[src].append(sp)
        planner.order_by_u[dst].append(rp)
        planner.u_by_m[src].append(len(planner.unfolded) - 1)
        planner.u_by_m[dst].append(len(planner.unfolded) - 1)


def _table(planner: "_Planner", recv: bool) -> np.ndarray | None:
    """int64[4, n]: ``(src, dst, tag, position)`` of every send (or receive), sorted by key; None when some key
    has more than one (the pair-by-pair loop handles that)."""
    from tracekit.replayer.simulation.scan_tables import sorted_p2p_table

    parts = []
    for r, s in planner.scans.items():  # rows by (peer, tag): the ranks' sends in order already (key_order)
        table = sorted_p2p_table(s, recv)
        if table is None:
            return None
        peers, tags, positions = table
        if not len(peers):
            continue
        a = np.empty((4, len(peers)), dtype=np.int64)
        a[0 if recv else 1] = peers
        a[1 if recv else 0] = r
        a[2] = tags
        a[3] = positions
        parts.append(a)
    if not parts:
        return np.zeros((4, 0), dtype=np.int64)
    t = np.concatenate(parts, axis=1)
    order = key_order(t[0], t[1], t[2], identity=None)
    return t if order is None else t[:, order]


def _bulk(planner: "_Planner") -> bool:
    """Fold the pairs with numpy when every key has one send and one receive; False (nothing changed) otherwise."""
    sends, recvs = _table(planner, False), _table(planner, True)
    if sends is None or recvs is None or sends.shape != recvs.shape or not (sends[:3] == recvs[:3]).all():
        return False
    n = sends.shape[1]
    if n == 0:
        return True
    src, dst, tag, sp = sends
    rp = recvs[3]
    world = planner.world
    if src.min() < 0 or dst.min() < 0 or src.max() >= world or dst.max() >= world:
        return False
    rep = np.asarray(planner.rep, dtype=np.int64)
    rep_index = np.searchsorted(np.asarray(planner.reps, dtype=np.int64), rep)  # ascending like the ranks
    span = int(max(sp.max(), rp.max())) + 1
    a, b = rep_index[src] * span + sp, rep_index[dst] * span + rp  # image nodes as numbers
    ua, first, inv = _unique(a, len(planner.reps) * span)
    if not (b == b[first][inv]).all():  # a send node paired with two receive nodes
        return False
    ub, first_b, inv_b = _unique(b, len(planner.reps) * span)
    if not (a == a[first_b][inv_b]).all() or len(ub) != len(ua) or np.intersect1d(ua, ub).size:
        return False
    nb, pg_codes, pg_names = _pair_attrs(planner, src, sp)  # per pair, as arrays (UnfoldedTable.extend_pairs)
    cost_of, cid = _cost_ids(planner, nb, src, dst)
    if not ((nb == nb[first][inv]).all() and (cid == cid[first][inv]).all()):
        return False  # same image, other size or cost: the pair-by-pair loop names it
    rep_l = planner.rep
    head = first.tolist()  # per image (ascending node number): its first pair
    src_l, dst_l, sp_l, rp_l, tags, nbytes = (dict(zip(head, x[first].tolist())) for x in (src, dst, sp, rp, tag, nb))
    pgs = dict(zip(head, [pg_names[c] for c in pg_codes[first].tolist()]))
    images = {h: ((rep_l[src_l[h]], sp_l[h]), (rep_l[dst_l[h]], rp_l[h])) for h in head}
    node_fid = planner.node_fid
    if any(images[h][0] in node_fid or images[h][1] in node_fid for h in head):
        return False
    order = sorted(range(len(head)), key=head.__getitem__)  # images in first-seen order get the next indices
    base = len(planner.folded)
    new_index = [0] * len(head)
    from tracekit.replayer.simulation.fold_types import FoldedInstance

    for j, u in enumerate(order):
        h = head[u]
        new_index[u] = base + j
        s, d = src_l[h], dst_l[h]
        planner.folded.append(
            FoldedInstance("p2p", None, nbytes[h], pgs[h], (s, d), list(images[h]), tags[h], (rep_l[s], rep_l[d]))
        )
        planner.folded_key.append((images[h], ("p2p", None, nbytes[h], cost_of[(nbytes[h], s, d)])))
        node_fid[images[h][0]] = node_fid[images[h][1]] = base + j
    fids = np.asarray(new_index, dtype=np.int64)[inv]
    first_u = len(planner.unfolded)
    planner.unfolded.extend_pairs(nb, (pg_codes, pg_names), src, dst, (sp, rp), fids)
    _extend_orders(planner, src, dst, sp, rp, first_u)
    return True


def _cost_ids(
    planner: "_Planner", nb: np.ndarray, src: np.ndarray, dst: np.ndarray
) -> tuple[dict[tuple[int, int, int], Any], np.ndarray]:
    """The cost of each distinct ``(bytes, src, dst)`` and per pair a number that is equal for equal costs.

    Raises:
        NotFoldable: a pair cannot be costed (as pair by pair).
    """
    world = planner.world
    sizes, nb_code = few_codes(nb)
    pairs, pair_code = sorted_unique(src * world + dst)  # the pairs are sorted by (src, dst, tag)
    _, first, inverse = _unique(pair_code * len(sizes) + nb_code, len(pairs) * len(sizes))
    cost_of: dict[tuple[int, int, int], Any] = {}
    cost_ids: dict[Any, int] = {}  # equal costs, one number (CommCost is a frozen dataclass: hashable)
    numbers = []
    for j in first.tolist():
        k = (int(nb[j]), int(src[j]), int(dst[j]))
        cost_of[k] = planner.costs.key("p2p", None, k[0], (k[1], k[2]))
        numbers.append(cost_ids.setdefault(cost_of[k], len(cost_ids)))
    return cost_of, np.asarray(numbers, dtype=np.int64)[inverse]


def _unique(values: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(values, return_index=True, return_inverse=True)`` (the inverse flat), by counting when the
    range is small (:func:`.fold_arrays.dense_unique`)."""
    found = dense_unique(values, size)
    if found is not None:
        return found
    distinct, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    return distinct, first, inverse.reshape(-1)


def _pair_attrs(planner: "_Planner", src: np.ndarray, sp: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Each pair's comm size and group (a code into the names) from its send's rank (``src`` ascending: one run
    per rank): ``(int64 sizes, int64 codes, names)``."""
    from tracekit.replayer.simulation.scan_tables import pair_attr_arrays

    nbytes = np.empty(len(src), dtype=np.int64)
    codes = np.empty(len(src), dtype=np.int64)
    index: dict[str, int] = {}
    cuts = (np.flatnonzero(np.diff(src)) + 1).tolist()
    for lo, hi in zip([0, *cuts], [*cuts, len(src)]):
        sizes, own, names = pair_attr_arrays(planner.scans[int(src[lo])])
        at = sp[lo:hi]
        nbytes[lo:hi] = sizes[at]
        to_global = np.asarray([index.setdefault(g, len(index)) for g in names], dtype=np.int64)
        codes[lo:hi] = to_global[own[at]]
    return nbytes, codes, list(index)


def _extend_orders(
    planner: "_Planner", src: np.ndarray, dst: np.ndarray, sp: np.ndarray, rp: np.ndarray, first_u: int
) -> None:
    """Each rank's send and receive positions, and their pairs' unfolded instance numbers (pair ``j`` is instance
    ``first_u + j``), appended in pair order (as the pair-by-pair loop appends them: a pair's send before its
    receive).  Rank by rank, merging its sends and its receives (each in pair order), so no array of twice the pairs
    is made."""
    world = planner.world
    ascending = len(src) < 2 or bool((src[1:] >= src[:-1]).all())  # the pairs are sorted by (src, dst, tag)
    send_order = np.arange(len(src), dtype=np.int64) if ascending else stable_order_by_rank(src, world)
    recv_order = stable_order_by_rank(dst, world)
    send_at = np.concatenate(([0], np.cumsum(np.bincount(src, minlength=world)))).tolist()
    recv_at = np.concatenate(([0], np.cumsum(np.bincount(dst, minlength=world)))).tolist()
    for r in range(world):
        sends, recvs = send_order[send_at[r] : send_at[r + 1]], recv_order[recv_at[r] : recv_at[r + 1]]
        if not len(sends) and not len(recvs):
            continue
        pairs = np.concatenate((sends, recvs))
        positions = np.concatenate((sp[sends], rp[recvs]))
        if len(sends) and len(recvs):
            merged = np.argsort(pairs, kind="stable")  # sends first: a pair from a rank to itself sends, then receives
            pairs, positions = pairs[merged], positions[merged]
        planner.order_by_u[r].frombytes(as_buffer(positions))
        planner.u_by_m[r].frombytes(as_buffer(pairs + first_u))
