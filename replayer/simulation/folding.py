"""Rank folding: simulate one representative per class of ranks whose timelines are provably identical.

Data parallelism makes many ranks run the same program: in a generated LLM job every dp replica of a (tp, pp)
position has the same nodes, durations and dependencies, and differs only in the names of its process groups and the
peers of its sends/recvs. When the whole replay is symmetric under the exchange of such ranks, their schedules are
equal to the bit, so the engine simulates one *representative* per class and the results are expanded.

What is proven before folding (otherwise the replay runs unfolded and
``ReplayResult.folding`` says why):

1. *Same program.*  Ranks of a class have the same digest (:func:`scan_rank`):
   node count, types, ids, names, measured durations, ``num_ops``/``tensor_size``,
   ``tid``/``stream``/``is_cpu_op``, the dependency graph, and for
   communication nodes ``comm_type``/``comm_size``/``comm_tag`` and measured
   starts (the ``measured`` model prices from them); group names
   and peers are left out.  So every rank-local quantity is a function of
   the node position, equal across the class.
2. *Communication maps onto itself.*  Each communication instance of the
   unfolded job (the k-th collective on a group; a matched send/recv pair)
   is mapped to its *image*: each member replaced by its class representative,
   same node position.  Members of one class in one collective must sit at
   the same position, every representative node must have one image only
   (all instances through it map to the same node set), and all instances
   with one image must have the same type, size and cost
   (:class:`~.collectives.CommCost` equal: fixed time, wire bytes per
   dimension, algorithm).  Then all ranks of a class arrive at their
   instances at the same times, by induction over the events.
3. *Same contention.* Links are per rank (``(rank, dimension, direction)``, replayer/NOTES.md), a folded instance
   loads its representatives' links (duplicates once), and by 1-2 each member's link carries the same transfers at
   the same times as its representative's, so the fluid rates are equal. The engine recomputes rates once per
   instant (:meth:`.engine._Flows.recompute`), so they do not depend on the order of same-time events either. (A
   link model with links shared between ranks, e.g. one NIC per node, would need its own check here.)
4. *Same tie order.* Same-time events of one rank are taken by node position (kept) or by instance index: every
   rank's communication nodes must be in the same order when sorted by their unfolded instance index as its
   representative's when sorted by folded instance index.

Classes are the digest classes; the representative is the lowest rank.
Tests: tests/replayer/test_folding.py replays generated presets both ways
and compares the results.
"""

from __future__ import annotations

import hashlib
import logging
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from tracekit.gc_pause import paused_gc
from tracekit.model.attrs import IS_CPU_OP, NUM_OPS, STREAM, TENSOR_SIZE, TID
from tracekit.sets.rendezvous import collective_instances, comm_table, group_order
from tracekit.replayer.results.result import FoldInfo  # noqa: F401 - re-exported (a value of the result)
from tracekit.replayer.simulation.fold_costs import CostCheck
from tracekit.replayer.simulation.fold_uneven import instance_size, split_attrs
from tracekit.replayer.simulation.unfolded_table import UnfoldedTable
from tracekit.model import NodeType
from tracekit.model.groups import DEFAULT_PG
from tracekit.replayer.simulation.fold_types import FoldedInstance, NotFoldable, RankScan  # noqa: F401 - public here too

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace
    from tracekit.replayer.simulation.program import ReplayOptions
    from tracekit.replayer.simulation.hardware import HardwareSpec

log = logging.getLogger(__name__)

__all__ = ["FoldInfo", "FoldPlan", "RankScan", "plan_folding", "scan_rank"]

_COMM = (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)


def scan_rank(trace: "ExecutionTrace") -> RankScan:
    """Digest and communication table of one trace (module doc, point 1).

    Raises:
        ValidationError: the trace's graph cannot be built (duplicate ids, cycle).
    """
    from tracekit.replayer.simulation.rank_compile import bool_attr

    cols = trace.columns()
    graph = trace.graph()
    types = np.asarray(cols.types)
    n = len(types)
    h = hashlib.blake2b(digest_size=32)

    def put(arr: Any) -> None:
        a = np.ascontiguousarray(arr)
        h.update(str(a.dtype).encode() + len(a).to_bytes(8, "little"))
        h.update(a.tobytes())

    put(types.astype(np.int64))
    put(np.asarray(cols.ids, dtype=np.uint64))
    put(np.asarray(cols.duration_ns, dtype=np.int64))
    for int_field in (NUM_OPS, TENSOR_SIZE, TID, STREAM):
        present, values = int_field.column(cols)
        put(present)
        put(np.where(present, values, 0).astype(np.int64))
    put(bool_attr(cols, IS_CPU_OP) if n else np.zeros(0, dtype=bool))
    h.update("\0".join(cols.names).encode("utf-8", "surrogatepass"))
    put(np.asarray(graph.pred_ptr, dtype=np.int64))
    put(np.asarray(graph.pred_pos, dtype=np.int64))
    table = comm_table(trace)
    comm = np.asarray(table.order, dtype=np.int64)
    put(np.asarray(cols.start_time_ns, dtype=np.int64)[np.sort(comm)])  # the measured model's input (measured_comm)
    if table.order:  # the communication facts in issue order (group names and peers left out)
        facts = [
            (p, *table.coll_attr[p]) if p in table.coll_attr else (p, table.tag[p], table.p2p_attr[p][0])
            for p in table.order
        ]
        h.update(repr(facts).encode())
    comm_ids = {p: int(cols.ids[p]) for p in table.order}
    return RankScan(
        trace.rank if trace.rank is not None else 0,
        trace.path,
        n,
        h.digest(),
        table.coll,
        table.coll_attr,
        table.sends,
        table.recvs,
        table.p2p_attr,
        len(table.order),
        comm_ids,
        bool(splits := split_attrs(trace, table.coll_attr)),
        splits,
    )


@dataclass
class FoldPlan:
    """A proven folding (module doc).

    Attributes:
        rep_of: int64[N] each rank's representative.
        reps: representatives, ascending.
        folded: the folded program's instances.
        unfolded: per instance of the unfolded job, in its order:
            ``(kind, comm_type, comm_bytes, pg_name, ranks, positions, folded index)``.
        scans: per rank (only ``n``, ``path`` and ``comm_ids`` are used after planning).
        member_u: per rank, int64 arrays ``(node positions, unfolded instances)`` of its communications in
            instance order (the critical path and the schedules' instance numbers read them).
    """

    rep_of: npt.NDArray[np.int64]
    reps: tuple[int, ...]
    folded: list[FoldedInstance]
    unfolded: UnfoldedTable
    scans: dict[int, RankScan] = field(repr=False)
    member_u: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = field(default_factory=list, repr=False)

    def members(self) -> dict[int, list[int]]:
        """The classes: representative rank -> its members, ascending ranks (the representative first)."""
        out: dict[int, list[int]] = {}
        for r, rep in enumerate(self.rep_of.tolist()):
            out.setdefault(rep, []).append(r)
        return out


bulk_objects = paused_gc  # many acyclic rows per unfolded instance (see tracekit.gc_pause)


def _astra_spans_classes(group: str) -> str:
    """Why the ASTRA-sim model does not fold a job where ``group`` spans rank classes."""
    return f"ASTRA-sim model: group {group!r} spans classes whose members may arrive apart and then end apart"


#: the reason for a job of two or more classes: the default group (every rank) spans them
ASTRA_WORLD_SPANS_CLASSES = _astra_spans_classes(DEFAULT_PG)


def _astra_foldable(groups: dict[str, tuple[int, ...]], rep: list[int], world: int, spec: "HardwareSpec") -> None:
    """Raise NotFoldable where ASTRA-sim's members of one collective may end apart (simulation/astra_skew.py)."""
    from tracekit.replayer.simulation.astra_model import AstraModel
    from tracekit.replayer.simulation.astra_skew import ends_apart_when_together

    model = AstraModel(spec)
    for name, members in groups.items():
        if len({rep[r] for r in members if r < world}) > 1:
            raise NotFoldable(_astra_spans_classes(name))
        if ends_apart_when_together(model, tuple(sorted(members))):
            raise NotFoldable(
                f"ASTRA-sim model: the ring of group {name!r} has links of unequal hops, so its members end apart"
            )


def plan_folding(
    scans: dict[int, RankScan], groups: dict[str, tuple[int, ...]], spec: "HardwareSpec", options: "ReplayOptions"
) -> FoldPlan:
    """Classes, the folded instances, and the map back to the unfolded job (module doc, points 2-4).

    Communications are matched by :mod:`tracekit.sets.rendezvous` (the rules the unfolded program uses), in the
    engine's order: collectives group by group, then sends/recvs.

    Args:
        scans: every rank 0..N-1.
        groups: the job's process groups (resolved).
        spec: the effective spec (for costs).

    Raises:
        NotFoldable: a condition fails (the message says which); the caller replays unfolded.
    """
    world = len(scans)
    if sorted(scans) != list(range(world)):
        raise NotFoldable("the trace set is not ranks 0..N-1")
    by_digest: dict[bytes, int] = {}
    rep_of = np.empty(world, dtype=np.int64)
    for r in range(world):
        rep_of[r] = by_digest.setdefault(scans[r].digest, r)
    if len(by_digest) == world:
        raise NotFoldable(NO_TWIN_RANKS)
    if (options.collective_model or spec.collective_model) == "astra":
        _astra_foldable(groups, rep_of.tolist(), world, spec)
    planner = _Planner(scans, rep_of, CostCheck(spec, options))
    planner.collectives(groups)
    planner.p2p()
    planner.check_order()
    member_u = [(np.frombuffer(p, dtype=np.int64), np.frombuffer(u, dtype=np.int64))
                for p, u in zip(planner.order_by_u, planner.u_by_m)]  # fmt: skip
    return FoldPlan(rep_of, planner.reps, planner.folded, planner.unfolded, scans, member_u)


#: the reason of a job without two equal ranks (nothing to fold: not worth a warning)
NO_TWIN_RANKS = "no two ranks have identical programs"


class _Planner:
    """The folded instances of :func:`plan_folding`, built group by group with the checks of points 2 and 4."""

    def __init__(self, scans: dict[int, RankScan], rep_of: npt.NDArray[np.int64], costs: "CostCheck") -> None:
        self.scans, self.costs = scans, costs
        self.world = len(scans)
        self.rep = rep_of.tolist()
        self.reps = tuple(sorted(set(self.rep)))
        self.unfolded = UnfoldedTable()
        self.folded: list[FoldedInstance] = []
        self.node_fid: dict[tuple[int, int], int] = {}
        self.folded_key: list[tuple] = []
        self.order_by_u: list[array] = [array("q") for _ in range(self.world)]  # per rank: positions, and
        self.u_by_m: list[array] = [array("q") for _ in range(self.world)]  # their unfolded instances
        self.group_memo: dict[tuple, tuple] = {}  # see add_group
        self.as_array: dict[int, tuple[list[int], array]] = {}  # see _positions

    def _fold(self, image: tuple, key: tuple, inst: tuple) -> int:
        """The folded index of ``image`` (new, or the one it maps onto already, which must have an equal ``key``).

        ``inst``: the :class:`FoldedInstance` fields but ``nodes`` (kind, comm_type, comm_bytes, pg_name, ranks,
        seq, link_ranks).
        """
        node_fid = self.node_fid
        fid = node_fid.get(image[0])
        if fid is None:
            for node in image:
                if node in node_fid:
                    raise NotFoldable(
                        f"representative rank {node[0]} node position {node[1]} would join two "
                        f"different folded communications"
                    )
            fid = len(self.folded)
            kind, ctype, nbytes, pg, ranks, seq, link = inst
            self.folded.append(FoldedInstance(kind, ctype, nbytes, pg, ranks, list(image), seq, link))
            self.folded_key.append((image, key))
            for node in image:
                node_fid[node] = fid
        elif self.folded_key[fid] != (image, key):
            kind, _, _, pg, ranks, seq, _ = inst
            raise NotFoldable(
                f"{'send/recv' if kind == 'p2p' else 'collective'} #{seq} on group {pg!r} "
                f"(ranks {list(ranks)[:8]}) does not map onto its representatives' communication "
                f"(different members, size or cost)"
            )
        return fid

    def collectives(self, groups: dict[str, tuple[int, ...]]) -> None:
        """Every group's collectives, groups in matching order (:func:`tracekit.sets.rendezvous.group_order`)."""
        scans = self.scans
        issuers: dict[str, list[int]] = {}
        for r, s in scans.items():
            for g in s.coll:
                issuers.setdefault(g, []).append(r)
        for name in group_order(list(issuers)):
            members = groups.get(name)
            if members is None:
                raise NotFoldable(f"process group {name!r} is not declared")
            outside = set(issuers[name]) - set(members)
            if outside:
                raise NotFoldable(f"rank {min(outside)} issues collectives on group {name!r} it is not a member of")
            lists = [scans[m].coll.get(name, []) for m in members]
            if len({len(v) for v in lists}) != 1:
                raise NotFoldable(f"members of group {name!r} issue different numbers of collectives on it")
            self.add_group(name, tuple(members), lists)

    def add_group(self, pg: str, ranks: tuple[int, ...], lists: list[list[int]]) -> None:
        """Every collective of one group (all members issue as many): the k-th of each member is instance k."""
        rep = self.rep
        first: dict[int, list[int]] = {}
        for m, lst in zip(ranks, lists):
            f = first.setdefault(rep[m], lst)
            if f is not lst and f != lst:
                k = next(i for i, (a, b) in enumerate(zip(f, lst)) if a != b)
                raise NotFoldable(f"ranks of one class sit at different positions in collective #{k} of group {pg!r}")
        img_reps = sorted(first)
        img_lists = [first[r] for r in img_reps]
        attr0 = self.scans[ranks[0]].coll_attr
        link = tuple(rep[m] for m in ranks)
        # a group whose members' tables are the very lists of an earlier group's (the dp replicas of a tp group)
        # maps instance by instance onto the same folded instances when the costs agree: checked once here
        same = (tuple(img_reps), tuple(map(id, img_lists)), id(lists[0]), id(attr0), self._uneven(ranks))
        seen, base = (None if same[-1] else self.group_memo.get(same)), len(self.unfolded)
        if seen is not None and self._same_costs(seen[1], ranks):
            fids, sizes = seen[0], seen[2]
            self.unfolded.extend_group(sizes[0], sizes[1], pg, ranks, lists, fids)
        else:
            fids, sizes = self._fold_group(pg, ranks, lists, img_reps, img_lists, attr0, link)
            if seen is None:
                self.group_memo[same] = (
                    fids,
                    {(c, b): self.costs.key("collective", c, b, ranks) for c, b in set(zip(*sizes))},
                    sizes,
                )
        numbers = array("q", range(base, len(self.unfolded)))
        for m, lst in zip(ranks, lists):
            self.order_by_u[m].extend(self._positions(lst))
            self.u_by_m[m].extend(numbers)

    def _positions(self, lst: list[int]) -> array:
        """``lst`` as an int64 array, made once per list object (class members share their representative's)."""
        found = self.as_array.get(id(lst))
        if found is None or found[0] is not lst:
            found = self.as_array[id(lst)] = (lst, array("q", lst))
        return found[1]

    def _uneven(self, ranks: tuple[int, ...]) -> bool:
        """Whether a member of the group has all-to-alls with per-peer sizes (sized per instance: fold_uneven)."""
        return any(self.scans[m].splits for m in ranks)

    def _same_costs(self, costs: dict[tuple[int, int], Any], ranks: tuple[int, ...]) -> bool:
        """Whether every (type, size) of a memoized group costs the same on ``ranks`` (point 2)."""
        return all(self.costs.key("collective", c, b, ranks) == cost for (c, b), cost in costs.items())

    def _fold_group(
        self,
        pg: str,
        ranks: tuple[int, ...],
        lists: list[list[int]],
        img_reps: list[int],
        img_lists: list[list[int]],
        attr0: dict[int, tuple[int, int]],
        link: tuple[int, ...],
    ) -> tuple[list[int], tuple[list[int], list[int]]]:
        """Fold a group's instances one by one: their folded indices and ``(comm types, sizes)``."""
        fids: list[int] = []
        ctypes: list[int] = []
        sizes: list[int] = []
        cost_keys: dict[tuple[int, int], tuple] = {}
        for k, member_positions in collective_instances(lists):
            positions = cast("tuple[int, ...]", member_positions)  # no None: all issue as many (collectives())
            image = tuple(zip(img_reps, [lst[k] for lst in img_lists]))
            ctype, csize = attr0[positions[0]]
            nbytes = instance_size(self.scans, ranks, positions, ctype, max(csize, 0))
            key = cost_keys.get((ctype, nbytes))
            if key is None:
                key = cost_keys[(ctype, nbytes)] = (
                    "collective",
                    ctype,
                    nbytes,
                    self.costs.key("collective", ctype, nbytes, ranks),
                )
            fid = self._fold(image, key, ("collective", ctype, nbytes, pg, ranks, k, link))
            self.unfolded.append(("collective", ctype, nbytes, pg, ranks, positions, fid))
            fids.append(fid)
            ctypes.append(ctype)
            sizes.append(nbytes)
        return fids, (ctypes, sizes)

    def p2p(self) -> None:
        """Every matched send/recv pair (:func:`tracekit.sets.rendezvous.p2p_pairs`); an unmatched one refuses."""
        from tracekit.replayer.simulation.fold_p2p import plan_p2p

        plan_p2p(self)

    def check_order(self) -> None:
        """Every communication node matched; tie order kept (module doc, point 4)."""
        by_fid: dict[int, array] = {r: array("q") for r in self.reps}
        for f in self.folded:
            for r, p in f.nodes:
                by_fid[r].append(p)
        for m in range(self.world):
            if len(self.order_by_u[m]) != self.scans[m].comm_count:
                raise NotFoldable(f"rank {m} has communication nodes that match nothing")
            if self.order_by_u[m] != by_fid[self.rep[m]]:
                raise NotFoldable(
                    f"rank {m} meets its communications in another order than its representative "
                    f"rank {self.rep[m]} (group numbering)"
                )
