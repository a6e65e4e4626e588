"""Rank folding: simulate one representative per class of ranks whose timelines are provably identical.

Data parallelism makes many ranks run the same program: in a generated LLM
job every dp replica of a (tp, pp) position has the same nodes, durations and
dependencies, and differs only in the names of its process groups and the
peers of its sends/recvs.  When the whole replay is symmetric under the
exchange of such ranks, their schedules are equal to the bit, so the engine
simulates one *representative* per class and the results are expanded.

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
3. *Same contention.*  Links are per rank (``(rank, dimension, direction)``,
   replayer/NOTES.md), a folded instance loads its representatives' links
   (duplicates once), and by 1-2 each member's link carries the same
   transfers at the same times as its representative's, so the fluid
   rates are equal.  The engine recomputes rates once per instant
   (:meth:`.engine._Flows.recompute`), so they do not depend on the order of
   same-time events either.  (A link model with links shared between ranks,
   e.g. one NIC per node, would need its own check here.)
4. *Same tie order.*  Same-time events of one rank are taken by node
   position (kept) or by instance index: every rank's communication nodes
   must be in the same order when sorted by their unfolded instance index as
   its representative's when sorted by folded instance index.

Classes are the digest classes; the representative is the lowest rank.
Tests: tests/replayer/test_folding.py replays generated presets both ways
and compares the results.
"""

from __future__ import annotations

import hashlib
import logging
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from tracekit.groups import canonical_pg_name
from tracekit._gc import paused_gc
from tracekit.model import NodeType

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace
    from tracekit.replayer._program import ReplayOptions
    from tracekit.replayer.hardware import HardwareSpec
    from tracekit.traceset import TraceSet

log = logging.getLogger(__name__)

__all__ = ["FoldInfo", "FoldPlan", "RankScan", "plan_folding", "scan_rank"]

_COMM = (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)


@dataclass(frozen=True)
class FoldInfo:
    """What folding did: ``classes`` simulated of ``ranks``; ``reason`` when it did not fold (else None)."""

    classes: int
    ranks: int
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"classes": self.classes, "ranks": self.ranks, "reason": self.reason}


@dataclass
class RankScan:
    """What folding needs of one rank (small; the trace itself may be dropped).

    Attributes:
        rank, path, n: the rank, its file and node count.
        digest: hash of everything rank-local the replay reads (module doc, point 1).
        ids: uint64[n] node ids (kept only for communication nodes' rows: see ``comm_ids``).
        coll: per group name, int64 positions of its collectives in topological order.
        coll_attr: position -> (comm_type, comm_size) of collectives.
        sends, recvs: (peer, tag) -> positions in topological order.
        p2p_attr: position -> (comm_size, pg_name) of sends/recvs.
        comm_count: communication nodes in the rank.
        comm_ids: position -> node id of communication nodes.
    """

    rank: int
    path: str | None
    n: int
    digest: bytes
    coll: dict[str, list[int]]
    coll_attr: dict[int, tuple[int, int]]
    sends: dict[tuple[int, int], list[int]]
    recvs: dict[tuple[int, int], list[int]]
    p2p_attr: dict[int, tuple[int, str]]
    comm_count: int
    comm_ids: dict[int, int]


def _int_or(v: Any, default: int | None) -> int | None:
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return default
    return int(v)


def scan_rank(trace: "ExecutionTrace") -> RankScan:
    """Digest and communication table of one trace (module doc, point 1).

    Raises:
        ValidationError: the trace's graph cannot be built (duplicate ids, cycle).
    """
    from tracekit.replayer._program import _bool_attr

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
    for name in ("num_ops", "tensor_size", "tid", "stream"):
        present, values = cols.attr_int(name)
        put(present)
        put(np.where(present, values, 0).astype(np.int64))
    put(_bool_attr(cols, "is_cpu_op") if n else np.zeros(0, dtype=bool))
    h.update("\0".join(cols.names).encode("utf-8", "surrogatepass"))
    put(np.asarray(graph.pred_ptr, dtype=np.int64))
    put(np.asarray(graph.pred_pos, dtype=np.int64))
    comm = np.flatnonzero(np.isin(types, [int(t) for t in _COMM]))
    put(np.asarray(cols.start_time_ns, dtype=np.int64)[comm])  # the measured model's input (measured_comm)
    coll: dict[str, list[int]] = {}
    coll_attr: dict[int, tuple[int, int]] = {}
    sends: dict[tuple[int, int], list[int]] = {}
    recvs: dict[tuple[int, int], list[int]] = {}
    p2p_attr: dict[int, tuple[int, str]] = {}
    comm_ids: dict[int, int] = {}
    if len(comm):
        _, ctype = cols.attr("comm_type")
        _, csize = cols.attr("comm_size")
        _, tag_v = cols.attr("comm_tag")
        _, src_v = cols.attr("comm_src")
        _, dst_v = cols.attr("comm_dst")
        _, pg_v = cols.attr("pg_name")
        facts = []
        for p in graph.in_topological_order(comm):
            t = int(types[p])
            comm_ids[p] = int(cols.ids[p])
            ct = 0 if ctype[p] is None else _int_or(ctype[p], -2)  # missing: ALL_REDUCE, 0 bytes (validate)
            cs = 0 if csize[p] is None else _int_or(csize[p], -2)
            if t == NodeType.COMM_COLL_NODE:
                coll.setdefault(canonical_pg_name(pg_v[p]), []).append(p)
                coll_attr[p] = (ct, cs)
                facts.append((p, ct, cs))
            else:
                tag = _int_or(tag_v[p], 0)
                size = max(_int_or(csize[p], 0) or 0, 0)
                p2p_attr[p] = (size, canonical_pg_name(pg_v[p]))
                if t == NodeType.COMM_SEND_NODE:
                    sends.setdefault((_int_or(dst_v[p], -1), tag), []).append(p)
                else:
                    recvs.setdefault((_int_or(src_v[p], -1), tag), []).append(p)
                facts.append((p, tag, size))
        h.update(repr(facts).encode())
    return RankScan(trace.rank if trace.rank is not None else 0, trace.path, n, h.digest(), coll, coll_attr,
                    sends, recvs, p2p_attr, len(comm), comm_ids)


@dataclass
class FoldedInstance:
    """One instance of the folded program: nodes ``(representative rank, position)``."""

    kind: str
    comm_type: int | None
    comm_bytes: int
    pg_name: str
    ranks: tuple[int, ...]
    nodes: list[tuple[int, int]]
    seq: int
    link_ranks: tuple[int, ...]


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
    """

    rep_of: np.ndarray
    reps: tuple[int, ...]
    folded: list[FoldedInstance]
    unfolded: list[tuple[str, int | None, int, str, tuple[int, ...], tuple[int, ...], int]]
    scans: dict[int, RankScan] = field(repr=False)

    def members(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for r, rep in enumerate(self.rep_of.tolist()):
            out.setdefault(rep, []).append(r)
        return out


bulk_objects = paused_gc  # many acyclic rows per unfolded instance (see tracekit._gc)


class NotFoldable(Exception):
    """Folding cannot be proven; ``args[0]`` says why."""


def _astra_foldable(groups: dict[str, tuple[int, ...]], rep: list[int], world: int, spec: "HardwareSpec") -> None:
    """Raise NotFoldable where ASTRA-sim's members of one collective may end apart (replayer/astra_skew.py)."""
    from tracekit.replayer.astra_model import AstraModel
    from tracekit.replayer.astra_skew import ends_apart_when_together

    model = AstraModel(spec)
    for name, members in groups.items():
        if len({rep[r] for r in members if r < world}) > 1:
            raise NotFoldable(f"ASTRA-sim model: group {name!r} spans classes whose members may arrive apart "
                              f"and then end apart")
        if ends_apart_when_together(model, tuple(sorted(members))):
            raise NotFoldable(f"ASTRA-sim model: the ring of group {name!r} has links of unequal hops, so its "
                              f"members end apart")


def plan_folding(scans: dict[int, RankScan], groups: dict[str, tuple[int, ...]], spec: "HardwareSpec",
                 options: "ReplayOptions") -> FoldPlan:
    """Classes, the folded instances, and the map back to the unfolded job (module doc, points 2-4).

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
    reps = tuple(sorted(set(rep_of.tolist())))
    if len(reps) == world:
        raise NotFoldable("no two ranks have identical programs")
    rep = rep_of.tolist()
    if (options.collective_model or spec.collective_model) == "astra":
        _astra_foldable(groups, rep, world, spec)
    costs = _CostCheck(spec, options)

    unfolded: list = []
    folded: list[FoldedInstance] = []
    node_fid: dict[tuple[int, int], int] = {}
    folded_key: list[tuple] = []
    order_by_u: list[array] = [array("q") for _ in range(world)]

    def add(kind: str, ctype: int | None, nbytes: int, pg: str, ranks: tuple[int, ...],
            positions: tuple[int, ...], seq: int) -> None:
        if kind == "p2p":
            image = ((rep[ranks[0]], positions[0]), (rep[ranks[1]], positions[1]))
            link = (rep[ranks[0]], rep[ranks[1]])
        else:
            seen: dict[int, int] = {}
            for m, p in zip(ranks, positions):
                if seen.setdefault(rep[m], p) != p:
                    raise NotFoldable(f"ranks of one class sit at different positions in collective #{seq} "
                                      f"of group {pg!r}")
            image = tuple(sorted(seen.items()))
            link = tuple(rep[m] for m in ranks)
        key = (kind, ctype, nbytes, costs.key(kind, ctype, nbytes, ranks))
        fid = node_fid.get(image[0])
        if fid is None:
            for node in image:
                if node in node_fid:
                    raise NotFoldable(f"representative rank {node[0]} node position {node[1]} would join two "
                                      f"different folded communications")
            fid = len(folded)
            folded.append(FoldedInstance(kind, ctype, nbytes, pg, ranks, list(image), seq, link))
            folded_key.append((image, key))
            for node in image:
                node_fid[node] = fid
        elif folded_key[fid] != (image, key):
            raise NotFoldable(f"{'send/recv' if kind == 'p2p' else 'collective'} #{seq} on group {pg!r} "
                              f"(ranks {list(ranks)[:8]}) does not map onto its representatives' communication "
                              f"(different members, size or cost)")
        unfolded.append((kind, ctype, nbytes, pg, ranks, positions, fid))
        for m, p in zip(ranks, positions):
            order_by_u[m].append(p)

    def add_group(pg: str, ranks: tuple[int, ...], lists: list[list[int]]) -> None:
        """``add`` for every collective of one group at once (same checks, same order)."""
        first: dict[int, list[int]] = {}
        for m, lst in zip(ranks, lists):
            f = first.setdefault(rep[m], lst)
            if f is not lst and f != lst:
                k = next(i for i, (a, b) in enumerate(zip(f, lst)) if a != b)
                raise NotFoldable(f"ranks of one class sit at different positions in collective #{k} "
                                  f"of group {pg!r}")
        img_reps = sorted(first)
        img_lists = [first[r] for r in img_reps]
        attr0 = scans[ranks[0]].coll_attr
        link = tuple(rep[m] for m in ranks)
        cost_keys: dict[tuple[int, int], tuple] = {}
        for k, positions in enumerate(zip(*lists)):
            image = tuple(zip(img_reps, [lst[k] for lst in img_lists]))
            ctype, csize = attr0[positions[0]]
            nbytes = max(csize, 0)
            key = cost_keys.get((ctype, nbytes))
            if key is None:
                key = cost_keys[(ctype, nbytes)] = ("collective", ctype, nbytes,
                                                    costs.key("collective", ctype, nbytes, ranks))
            fid = node_fid.get(image[0])
            if fid is None:
                for node in image:
                    if node in node_fid:
                        raise NotFoldable(f"representative rank {node[0]} node position {node[1]} would join two "
                                          f"different folded communications")
                fid = len(folded)
                folded.append(FoldedInstance("collective", ctype, nbytes, pg, ranks, list(image), k, link))
                folded_key.append((image, key))
                for node in image:
                    node_fid[node] = fid
            elif folded_key[fid] != (image, key):
                raise NotFoldable(f"collective #{k} on group {pg!r} (ranks {list(ranks)[:8]}) does not map onto "
                                  f"its representatives' communication (different members, size or cost)")
            unfolded.append(("collective", ctype, nbytes, pg, ranks, positions, fid))
        for m, lst in zip(ranks, lists):
            order_by_u[m].extend(lst)

    # collectives, in the engine's order (see _program._match_collectives)
    issuers: dict[str, list[int]] = {}
    for r, s in scans.items():
        for g in s.coll:
            issuers.setdefault(g, []).append(r)
    for name in sorted(issuers, key=lambda s: (len(s), s)):
        members = groups.get(name)
        if members is None:
            raise NotFoldable(f"process group {name!r} is not declared")
        outside = set(issuers[name]) - set(members)
        if outside:
            raise NotFoldable(f"rank {min(outside)} issues collectives on group {name!r} it is not a member of")
        lists = [scans[m].coll.get(name, []) for m in members]
        depth = {len(v) for v in lists}
        if len(depth) != 1:
            raise NotFoldable(f"members of group {name!r} issue different numbers of collectives on it")
        add_group(name, tuple(members), lists)
    # sends/recvs, in the engine's order (see _program._match_p2p)
    keys = set()
    for r, s in scans.items():
        keys.update((r, peer, tag) for peer, tag in s.sends)
        keys.update((peer, r, tag) for peer, tag in s.recvs)
    for src, dst, tag in sorted(keys):
        if not (0 <= src < world and 0 <= dst < world):
            raise NotFoldable(f"a send/recv names rank {src if not 0 <= src < world else dst}, outside the job")
        s_list = scans[src].sends.get((dst, tag), [])
        r_list = scans[dst].recvs.get((src, tag), [])
        if len(s_list) != len(r_list):
            raise NotFoldable(f"unmatched sends/recvs from rank {src} to rank {dst} with tag {tag}")
        for sp, rp in zip(s_list, r_list):
            nbytes, pg = scans[src].p2p_attr[sp]
            add("p2p", None, nbytes, pg, (src, dst), (sp, rp), tag)
    # every communication node matched; tie order kept (module doc, point 4)
    by_fid: dict[int, array] = {r: array("q") for r in reps}
    for f in folded:
        for r, p in f.nodes:
            by_fid[r].append(p)
    for m in range(world):
        if len(order_by_u[m]) != scans[m].comm_count:
            raise NotFoldable(f"rank {m} has communication nodes that match nothing")
        if order_by_u[m] != by_fid[rep[m]]:
            raise NotFoldable(f"rank {m} meets its communications in another order than its representative "
                              f"rank {rep[m]} (group numbering)")
    return FoldPlan(rep_of, reps, folded, unfolded, scans)


class _CostCheck:
    """A comparable key for the cost of an instance (equal keys: equal costs)."""

    def __init__(self, spec: "HardwareSpec", options: "ReplayOptions") -> None:
        from tracekit.replayer.collectives import make_collective_model

        self.measured = (options.collective_model or spec.collective_model) == "measured"
        self.model = None if self.measured else make_collective_model(spec)
        self.cache: dict[tuple, Any] = {}

    def key(self, kind: str, ctype: int | None, nbytes: int, ranks: tuple[int, ...]) -> Any:
        if self.measured:
            return "measured"  # the members' measured starts and durations: equal by the digest
        ck = (kind, ctype, nbytes, ranks)
        found = self.cache.get(ck)
        if found is not None:
            return found
        from tracekit.model import CollectiveType
        from tracekit.replayer.collectives import UnsupportedCollectiveError

        try:
            if kind == "p2p":
                cost = self.model.p2p_cost(nbytes, ranks[0], ranks[1])
            else:
                cost = self.model.collective_cost(CollectiveType(ctype), nbytes, ranks)
        except UnsupportedCollectiveError:
            cost = "measured"  # priced from the members' durations: equal by the digest
        except Exception as exc:  # the unfolded replay reports it with its context
            raise NotFoldable(f"cannot cost a communication ({exc})") from None
        if not isinstance(cost, str) and len(set(cost.member_ns)) > 1:
            raise NotFoldable("members of a collective finish at different times (ASTRA-sim's double binary tree)")
        self.cache[ck] = cost
        return cost


# ----- replaying folded and expanding the result ------------------------------------------------


def replay_folded(traceset: "TraceSet", fitted: "HardwareSpec", options: "ReplayOptions", plan: FoldPlan,
                  *, world_paths: tuple[str | None, ...] | None = None):
    """Simulate the plan's representatives and expand to every rank.

    ``traceset`` needs the representatives' traces only.  Returns the
    :class:`~.results.ReplayResult` (with ``folding`` set).
    """
    from tracekit.replayer._program import compile_program
    from tracekit.replayer.engine import simulate

    program = compile_program(traceset, fitted, options, plan=plan)
    log.info("replaying %d nodes of %d representative ranks for %d ranks (%s, %s model)", program.n,
             len(program.layouts), len(plan.rep_of), fitted.name, program.model_name)
    schedule = simulate(program)
    return expand_result(program, schedule, traceset, plan, world_paths=world_paths)


_ROW_FIELDS = ("index", "kind", "comm_bytes", "pg_name", "ranks", "node_ids", "algorithm", "start_ns", "end_ns",
               "time_ns", "algbw_gbps", "busbw_gbps")  # CollectiveRow's fields, in order


def expand_result(program, sched, traceset: "TraceSet", plan: FoldPlan, *,
                  world_paths: tuple[str | None, ...] | None = None):
    """The unfolded job's :class:`~.results.ReplayResult` from the folded simulation.

    Per rank: the representative's figures and schedule (node ids equal by the
    digest; ``instance`` renumbered to the unfolded collective table).
    Collective rows: one per unfolded instance, its transfer times those of
    its folded image.  Critical path: the folded one (a valid path of the
    unfolded job: a representative's timeline is each member's).
    """
    from dataclasses import fields
    from dataclasses import replace as dc_replace
    from importlib.metadata import PackageNotFoundError, version

    from tracekit.model import CollectiveType
    from tracekit.replayer.results import (CollectiveRow, Provenance, RankSchedule, ReplayResult, _rank_stats,
                                           bus_factor, nccl_tests_size, round_schedule, schedule_names)

    sched = round_schedule(sched)
    world = len(plan.rep_of)
    inst = np.asarray(program.instance_of, dtype=np.int64)
    xfer_start_of_node = np.full(program.n, np.nan)
    has = inst >= 0
    if len(sched.xfer_start_ns):
        xfer_start_of_node[has] = sched.xfer_start_ns[inst[has]]
    lay_of = {lay.rank: lay for lay in program.layouts}
    rep_stats = {r: _rank_stats(lay_of[r], sched, program, xfer_start_of_node) for r in plan.reps}
    rep = plan.rep_of.tolist()
    ranks = tuple(dc_replace(rep_stats[rep[m]], rank=m) for m in range(world))
    # collective table of the unfolded job
    rows = []
    all_members: list[int] = []  # per (instance, member): the member, its node position, and the row count
    all_positions: list[int] = []
    row_sizes = array("q")
    # a communication timed per member (no single transfer: ASTRA-compatible broadcast) has NaN here; its row
    # reports 0 ns and no bandwidth (its members' schedules carry the times)
    xs = np.nan_to_num(sched.xfer_start_ns, nan=0.0).astype(np.int64).tolist()
    xe = np.nan_to_num(sched.xfer_end_ns, nan=0.0).astype(np.int64).tolist()
    algorithms = [i.cost.algorithm for i in program.instances]
    scans = plan.scans
    comm_ids = [scans[m].comm_ids for m in range(world)]
    factors: dict[tuple[str, int | None, int, int], tuple[str, float, float]] = {}
    new_row, set_attr = object.__new__, object.__setattr__
    fast_rows = tuple(f.name for f in fields(CollectiveRow)) == _ROW_FIELDS
    timing: dict[tuple[int, int], tuple] = {}  # (folded instance, members) -> the row's kind, times and bandwidths
    for u, (kind, ctype, nbytes, pg, members, positions, fid) in enumerate(plan.unfolded):
        p = len(members)
        tk = timing.get((fid, p))
        if tk is None:
            fk = (kind, ctype, nbytes, p)
            found = factors.get(fk)
            if found is None:  # the nccl-tests size and bus factor depend on these only
                name = "SEND_RECV" if kind == "p2p" else CollectiveType(ctype).name
                found = factors[fk] = (name, nccl_tests_size(name, nbytes, p), bus_factor(name, p))
            name, size, factor = found
            s, e = xs[fid], xe[fid]
            t = e - s
            alg_bw = size / t if t > 0 else None
            tk = timing[(fid, p)] = (name, algorithms[fid], s, e, t, alg_bw,
                                     alg_bw * factor if alg_bw is not None else None)
        name, algorithm, s, e, t, alg_bw, bus_bw = tk
        node_ids = tuple([comm_ids[m][q] for m, q in zip(members, positions)])
        if fast_rows:  # all fields set at once: a frozen __init__ costs one object.__setattr__ per field
            row = new_row(CollectiveRow)
            set_attr(row, "__dict__", {
                "index": u, "kind": name, "comm_bytes": nbytes, "pg_name": pg, "ranks": members,
                "node_ids": node_ids, "algorithm": algorithm, "start_ns": s, "end_ns": e, "time_ns": t,
                "algbw_gbps": alg_bw, "busbw_gbps": bus_bw})
        else:  # pragma: no cover - CollectiveRow changed shape
            row = CollectiveRow(u, name, nbytes, pg, members, node_ids, algorithm, s, e, t, alg_bw, bus_bw)
        rows.append(row)
        all_members.extend(members)
        all_positions.extend(positions)
        row_sizes.append(p)
    member_inst = _member_instances(all_members, all_positions, row_sizes)
    # per-rank schedules: the representative's arrays, the member's instance numbers
    schedules = []
    names_of = {r: schedule_names(traceset, r) for r in plan.reps}
    for m in range(world):
        lay = lay_of[rep[m]]
        lo, hi = lay.offset, lay.offset + lay.n
        inst_m = np.full(lay.n, -1, dtype=np.int64)
        pairs = member_inst.get(m)
        if pairs is not None:
            inst_m[pairs[0]] = pairs[1]
        schedules.append(RankSchedule(m, lay.ids, lay.kind, lay.resource, lay.resource_names,
                                      sched.start_ns[lo:hi], sched.end_ns[lo:hi], xfer_start_of_node[lo:hi],
                                      inst_m, *names_of[rep[m]]))
    counts: dict[str, int] = {}
    for m in range(world):
        for name, c in program.rank_compute_methods.get(rep[m], {}).items():
            counts[name] = counts.get(name, 0) + c
    from tracekit.replayer.compute import METHODS

    spec = program.spec
    try:
        tk_version = version("tracekit")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        tk_version = "unknown"
    paths = world_paths if world_paths is not None else tuple(scans[m].path for m in range(world))
    prov = Provenance(
        trace_paths=paths, spec_name=spec.name, spec_path=spec.path,
        collective_model=program.model_name, compute_mode=spec.compute.mode,
        compute_scale=spec.compute.duration_scale, streams=program.options.streams,
        world_size=world, tracekit_version=tk_version)
    return ReplayResult(
        iteration_time_ns=max((r.iteration_time_ns for r in ranks), default=0),
        ranks=ranks,
        collectives=tuple(rows),
        critical_path=_folded_critical_path(program, sched, traceset, plan, member_inst),
        provenance=prov,
        compute_methods=tuple((k, counts[k]) for k in METHODS if k in counts),
        node_count=sum(scans[m].n for m in range(world)),
        schedule=tuple(schedules),
        folding=FoldInfo(len(plan.reps), world, None),
    )


def _member_instances(members: list[int], positions: list[int],
                      row_sizes: "array[int]") -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per member rank: int64 arrays of its node positions and their unfolded instance numbers, in instance order.

    ``members``/``positions`` list every instance's members in instance order, ``row_sizes`` how many each.
    """
    m = np.asarray(members, dtype=np.int64)
    if not len(m):
        return {}
    u = np.repeat(np.arange(len(row_sizes), dtype=np.int64), np.frombuffer(row_sizes, dtype=np.int64))
    order = np.argsort(m, kind="stable")  # stable: each member's instances stay in instance order
    m_sorted = m[order]
    pos, u = np.asarray(positions, dtype=np.int64)[order], u[order]
    cuts = np.flatnonzero(np.diff(m_sorted)) + 1
    heads = np.concatenate(([0], cuts)).tolist()
    tails = np.concatenate((cuts, [len(m_sorted)])).tolist()
    return {int(m_sorted[a]): (pos[a:b], u[a:b]) for a, b in zip(heads, tails)}


def _folded_critical_path(program, sched, traceset: "TraceSet", plan: FoldPlan,
                          member_inst: dict[int, tuple[np.ndarray, np.ndarray]]):
    """:func:`.results._critical_path` of the unfolded job, walked on the folded schedule.

    The walk keeps the actual rank it is on; at a communication it moves to
    the first member (in the unfolded instance's member order) that arrived
    last, exactly as the unfolded walk does, and reads that member's times at
    its representative.
    """
    from tracekit.replayer._program import K_COLL, K_TIMED
    from tracekit.replayer.results import CriticalPath, PathStep

    if program.n == 0:
        return CriticalPath((), 0, 0, 0)
    kind = program.kind
    reason = sched.reason.tolist()
    start = sched.start_ns
    instance_of = program.instance_of
    offset = {lay.rank: lay.offset for lay in program.layouts}
    lay_of = {lay.rank: lay for lay in program.layouts}
    rep = plan.rep_of.tolist()
    u_at: dict[int, dict[int, int]] = {}
    g = int(np.argmax(sched.end_ns))
    lay, p = program.locate(g)
    a = lay.rank
    raw: list[tuple[int, int, str, float, float]] = []
    while g >= 0:
        k = kind[g]
        if k >= K_COLL and instance_of[g] >= 0:
            if a not in u_at:
                pos_u = member_inst.get(a)
                u_at[a] = {} if pos_u is None else dict(zip(pos_u[0].tolist(), pos_u[1].tolist()))
            u = u_at[a][p]
            _, _, _, _, members, positions, fid = plan.unfolded[u]
            t = sched.xfer_start_ns[fid]
            for m, q in zip(members, positions):
                if start[offset[rep[m]] + q] == t:
                    break
            else:  # pragma: no cover - the last arrival always matches
                m, q = members[0], positions[0]
            raw.append((m, q, "comm", int(t), int(sched.xfer_end_ns[fid])))
            a, p = m, q
            g = reason[offset[rep[a]] + p]
        else:
            if k == K_TIMED:
                raw.append((a, p, "compute", int(sched.start_ns[g]), int(sched.end_ns[g])))
            g = reason[g]
        if g >= 0:
            p = g - offset[rep[a]]
    raw.reverse()
    names_cache: dict[int, list[str]] = {}
    steps = []
    compute = comm = 0
    for a, p, category, s, e in raw:
        r = rep[a]
        if r not in names_cache:
            names_cache[r] = traceset[r].columns().names
        steps.append(PathStep(a, int(lay_of[r].ids[p]), names_cache[r][p], category, s, e))
        if category == "compute":
            compute += e - s
        else:
            comm += e - s
    return CriticalPath(tuple(steps), compute + comm, compute, comm)


# ----- replaying a job from its files, reading each rank once -----------------------------------


def replay_files(traces: Any, spec: Any, *, options: "ReplayOptions | None" = None,
                 status: "Callable[[str], None] | None" = None):
    """Replay a job given as files (a prefix, glob or directory: :func:`tracekit.io.trace_paths`).

    With folding on, ranks are read one at a time: each is checked (when
    ``options.check``), digested (:func:`scan_rank`) and dropped unless it is
    the first of its class, so memory holds the representatives plus a small
    table per rank.  When folding cannot be proven the whole job is read and
    replayed unfolded (``result.folding.reason`` says why).

    ``status`` (optional) is called with a short description of each phase
    (the CLI shows it on a terminal).

    Returns:
        ``(result, traceset)``: the :class:`~.results.ReplayResult` and the
        trace set that was kept (the representatives only, when folded).

    Raises:
        as :func:`tracekit.replayer.replay`, and TraceFormatError for unreadable files.
    """
    from dataclasses import replace as dc_replace

    from tracekit.groups import resolve_groups
    from tracekit.io import _read_raw, read_trace, read_traceset, trace_from_bytes, trace_paths
    from tracekit.replayer.class_replay import StampedClasses
    from tracekit.replayer import replay
    from tracekit.replayer._program import ReplayOptions, effective_spec
    from tracekit.replayer.checks import ReplayCheckError, check_complete, check_spec_size
    from tracekit.replayer.hardware import HardwareSpec, load_spec
    from tracekit.traceset import TraceSet
    from tracekit.validate import ERROR, cross_rank_checks, check_rank

    from tracekit.classset import find_class_set

    classes = find_class_set(traces)
    if classes is not None:  # stored as rank classes: replayed without deriving every rank
        from tracekit.replayer.class_replay import replay_class_set

        with bulk_objects():
            return replay_class_set(classes, spec, options=options, status=status)
    options = options or ReplayOptions()
    if not isinstance(spec, HardwareSpec):
        spec = load_spec(spec)
    pairs = trace_paths(traces)

    def unfolded(reason: str | None):
        ts = read_traceset(traces)
        result = replay(ts, spec, options=dc_replace(options, fold=False))
        if reason is not None:
            result = dc_replace(result, folding=FoldInfo(len(ts), len(ts), reason))
        return result, ts

    if not options.fold:
        return unfolded(None)
    scans: dict[int, RankScan] = {}
    kept: dict[int, "ExecutionTrace"] = {}
    first: dict[bytes, RankScan] = {}
    findings = []
    declared: dict[str, tuple[int, ...]] = {}
    say = status or (lambda text: None)
    stamped = StampedClasses()  # members of stamped files are derived, not decoded (class_replay.py)
    for rank, path in pairs:
        say(f"reading and digesting rank {rank} of {len(pairs)}")
        spath = str(path)
        data = None if spath.endswith((".json", ".json.gz")) else _read_raw(path)
        derived = stamped.derive(rank, spath, data) if data is not None else None
        if derived is not None and (derived[1] is not None or not options.check):
            scans[rank], f, groups_here = derived
            if options.check:
                findings.append(f)
            for name, ranks in groups_here.items():
                if declared.setdefault(name, ranks) != ranks:
                    return unfolded(None)
            continue
        trace = read_trace(path, rank=rank) if data is None else trace_from_bytes(data, path=spath, rank=rank)
        f = None
        if options.check:
            f = check_rank(trace)
            findings.append(f)
            if any(i.severity == ERROR for i in f.issues):
                return unfolded(None)  # the unfolded replay's checks report it
            groups_here = f.declared_groups
        else:
            groups_here = trace.process_groups()
        for name, ranks in groups_here.items():
            if declared.setdefault(name, ranks) != ranks:
                return unfolded(None)
        scan = scan_rank(trace)
        seen = first.get(scan.digest)
        if seen is None:
            first[scan.digest] = scan
            kept[rank] = trace
        else:  # equal by the digest: share the rank-local tables
            scan.coll_attr, scan.comm_ids = seen.coll_attr, seen.comm_ids
        scans[rank] = scan
        if data is not None:
            stamped.remember(data, scan, f, groups_here)
        del trace, data
    world = max([r for r, _ in pairs] + [max(v) for v in declared.values() if v], default=-1) + 1
    check_complete(scans, world, path=str(traces))
    try:
        groups = resolve_groups(declared, world)
    except Exception:  # noqa: BLE001 - the unfolded replay reports it
        return unfolded(None)
    if options.check:
        report = cross_rank_checks(findings, groups, world)
        if report.errors:
            raise ReplayCheckError(list(report.errors))
    ts = TraceSet(kept, process_groups=declared)
    check_spec_size(ts, spec, world_size=world, ranks=sorted(scans))  # before folding: all ranks count
    fitted = effective_spec(spec, options, world)
    say(f"proving rank folding over {world} ranks")
    try:
        with bulk_objects():
            plan = plan_folding(scans, groups, fitted, options)
    except NotFoldable as exc:
        log.info("not folding: %s", exc)
        del kept, ts, scans
        return unfolded(str(exc))
    paths = tuple(scans[r].path for r in range(world))
    say(f"simulating {len(plan.reps)} representative ranks and expanding to {world}")
    with bulk_objects():
        return replay_folded(ts, fitted, options, plan, world_paths=paths), ts
