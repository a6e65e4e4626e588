"""Compiling a trace set into the flat arrays the replay engine runs on.

A :class:`ReplayProgram` is the whole job as plain Python lists indexed by a
*global node index* (rank offset + position in the rank's file): what kind of
node it is, which resource it runs on, how long it runs, how many data
dependencies it waits for and whom it unblocks (successor CSR), and which
communication *instance* (one collective on one process group, or one matched
send/recv pair) it belongs to.  Everything here is computed with numpy per
rank; the engine then only walks lists.

Resources (per rank, docs/design.md section 4):

=================  ===========================================================
``host thread T``  COMP nodes with ``is_cpu_op`` true; ``T`` = their ``tid``
``compute stream``  other COMP nodes (kernels); ``S`` = their ``stream`` attr
``comm stream S``  COMM_COLL nodes; ``S`` = their ``stream`` attr
``p2p stream S``   COMM_SEND / COMM_RECV nodes (not exclusive: every send
                   and recv is posted as soon as its dependencies are done,
                   as ASTRA-sim does, so a ring of sends and recvs cannot
                   block itself)
``memory``         MEM_LOAD / MEM_STORE nodes
(none)             METADATA and INVALID nodes: no time, no resource
=================  ===========================================================

A missing ``tid`` / ``stream`` means 0.  With ``streams="single"`` every rank
has one resource of each class whatever the attributes say.

Matching (docs/design.md section 4): the k-th collective a rank issues on group G
(in the rank's topological order, as :func:`tracekit.validate.collective_sequences`
lists them) is instance (G, k) on every member; a send from ``src`` to ``dst``
with tag ``t`` is matched with the recv on ``dst`` from ``src`` with tag ``t``
of the same rank in issue order.  Nodes that match nothing keep instance -1
and a note saying why (the deadlock report uses it).
"""

from __future__ import annotations

import logging
from array import array
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.errors import ReplayError, TracekitError, ValidationError
from tracekit.groups import canonical_pg_name
from tracekit.model import MAX_DURATION_NS, CollectiveType, NodeType
from tracekit.validate import collective_sequences

from tracekit.replayer.collectives import CommCost, UnsupportedCollectiveError, make_collective_model
from tracekit.replayer.compute import METHODS, ComputeModel
from tracekit.replayer.measured_comm import measured_comm_cost

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace
    from tracekit.replayer.hardware import HardwareSpec
    from tracekit.traceset import TraceSet

log = logging.getLogger(__name__)

# node kinds
K_TIMED, K_ZERO, K_COLL, K_SEND, K_RECV = range(5)
KIND_NAMES = ("timed", "zero", "collective", "send", "recv")
# resource classes
R_HOST, R_COMPUTE, R_COMM, R_MEMORY, R_P2P = range(5)
RESOURCE_CLASS_NAMES = ("host thread", "compute stream", "comm stream", "memory", "p2p stream")
STREAM_MODES = ("trace", "single")
#: Collective models the engine accepts: the spec's models plus the engine's own "measured".
ENGINE_MODELS = ("alpha_beta", "astra", "nccl", "measured")


@dataclass(frozen=True)
class ReplayOptions:
    """How to replay.

    Attributes:
        collective_model: ``alpha_beta``, ``astra``, ``nccl`` (override the
            spec's ``collectives.model``) or ``measured`` (each member ends
            its measured time after the last member's measured arrival, after
            the last arrival in the replay; members without comparable times:
            the smallest measured ``duration_ns``; :mod:`.measured_comm`; no
            bandwidth sharing).  None = the spec's model.
        compute_scale: factor on measured compute durations (overrides the
            spec's ``compute.duration_scale``); None = the spec's.
        streams: ``trace`` (host threads and streams from the ``tid`` and
            ``stream`` attributes) or ``single`` (one of each per rank).
        check: run the up-front checks (:mod:`.checks`) first.
        fold: simulate one representative per class of ranks with provably
            identical timelines (:mod:`.folding`) and expand the results;
            the result is the unfolded one to the bit.  Falls back to an
            unfolded replay when equivalence cannot be proven
            (``ReplayResult.folding.reason`` says why).
    """

    collective_model: str | None = None
    compute_scale: float | None = None
    streams: str = "trace"
    check: bool = True
    fold: bool = True

    def __post_init__(self) -> None:
        from tracekit.errors import ConfigError

        if self.collective_model is not None and self.collective_model not in ENGINE_MODELS:
            raise ConfigError(f"unknown collective model {self.collective_model!r}; choose one of "
                              f"{', '.join(ENGINE_MODELS)}")
        if self.compute_scale is not None and not (self.compute_scale > 0 and np.isfinite(self.compute_scale)):
            raise ConfigError(f"compute scale must be a positive number, got {self.compute_scale!r}")
        if self.streams not in STREAM_MODES:
            raise ConfigError(f"unknown streams mode {self.streams!r}; choose one of {', '.join(STREAM_MODES)}")


def effective_spec(spec: "HardwareSpec", options: ReplayOptions, world_size: int) -> "HardwareSpec":
    """``spec`` fitted to ``world_size`` with the options' overrides applied.

    Raises:
        SpecError: the spec cannot have ``world_size`` ranks (see ``HardwareSpec.fitted``).
    """
    out = spec.fitted(world_size)
    if options.compute_scale is not None:
        out = replace(out, compute=replace(out.compute, duration_scale=float(options.compute_scale)))
    if options.collective_model not in (None, "measured"):
        out = replace(out, collective_model=options.collective_model)
    return out


@dataclass
class RankLayout:
    """Per-rank facts the results and the timeline need.

    Attributes:
        rank, path: the trace's rank and file.
        offset: global index of the rank's first node.
        ids: uint64[n] node ids (file order).
        kind: int8[n] node kinds (``K_*``).
        resource: int32[n] local resource index, -1 for none.
        resource_names: names of the rank's resources, by local index.
        resource_offset: global id of local resource 0.
    """

    rank: int
    path: str | None
    offset: int
    ids: np.ndarray
    kind: np.ndarray
    resource: np.ndarray
    resource_names: tuple[str, ...]
    resource_offset: int

    @property
    def n(self) -> int:
        return len(self.ids)


@dataclass(slots=True)
class Instance:
    """One communication: a collective on a group, or a matched send/recv pair.

    Attributes:
        kind: ``collective`` or ``p2p``.
        comm_type: CollectiveType number (None for p2p).
        comm_bytes: bytes (``comm_size`` of the lowest-ranked member's node).
        pg_name: process group (p2p: the send's ``pg_name`` or ``"0"``).
        ranks: the members, ascending (p2p: ``(src, dst)``).
        nodes: global node index per member (-1: the member never issues it).
        seq: k for collectives (the k-th on its group), the tag for p2p.
        cost: filled in by :meth:`ReplayProgram.cost_of`.
        link_ranks: whose links the data phase loads, when not ``ranks``
            (a folded program: each member's class representative; see :mod:`.folding`).
    """

    kind: str
    comm_type: int | None
    comm_bytes: int
    pg_name: str
    ranks: tuple[int, ...]
    nodes: list[int]
    seq: int
    cost: CommCost | None = None
    link_ranks: tuple[int, ...] | None = None


@dataclass
class ReplayProgram:
    """A trace set compiled for the engine (see module docstring).

    Memory (issue 17: <= 200 bytes a node unfolded): the sequences the
    engine reads for every node (``kind``, ``duration_ns``, ``resource``,
    ``chain_delta``, ``instance_of``) are lists whose items are shared objects
    (small ints, one float per distinct duration), for list-speed access at 8
    bytes a node; the CSR and ``pred_count`` are packed :class:`array.array`.
    ``chain_delta[g]``: global index of ``g``'s chain successor minus ``g``
    (0: none; see :func:`_chain_next`), small, so a cached int.
    """

    spec: "HardwareSpec"
    options: ReplayOptions
    model_name: str
    layouts: list[RankLayout]
    kind: list[int]
    duration_ns: list[float]
    resource: list[int]
    pred_count: array[int]
    succ_ptr: array[int]
    succ: array[int]
    chain_delta: list[int]
    instance_of: list[int]
    instances: list[Instance]
    resource_rank: list[int]
    notes: dict[int, str] = field(default_factory=dict)
    compute_methods: dict[str, int] = field(default_factory=dict)
    #: int64[N] measured durations, for costing; None once the instances are costed.
    measured_ns: np.ndarray | None = None
    roots: list[int] = field(default_factory=list)
    rank_compute_methods: dict[int, dict[str, int]] = field(default_factory=dict)
    #: ``member_ends(instance, arrivals_ns) -> ends_ns | None``: per-member ends of a collective whose
    #: members arrived apart (ASTRA-sim model, see astra_skew); None = all members end together.
    member_ends: Any = None

    @property
    def n(self) -> int:
        return len(self.kind)

    @property
    def n_resources(self) -> int:
        return len(self.resource_rank)

    def locate(self, g: int) -> tuple[RankLayout, int]:
        """``(layout, position)`` of global node index ``g``."""
        offsets = [lay.offset for lay in self.layouts]
        i = int(np.searchsorted(offsets, g, side="right")) - 1
        lay = self.layouts[i]
        return lay, g - lay.offset

    def node_id(self, g: int) -> int:
        lay, pos = self.locate(g)
        return int(lay.ids[pos])

    def rank_of(self, g: int) -> int:
        return self.locate(g)[0].rank


# ----- per-rank compilation ------------------------------------------------------------------


def _bool_attr(cols: Any, name: str) -> np.ndarray:
    present, values = cols.attr(name)
    out = np.zeros(len(present), dtype=bool)
    for i in np.flatnonzero(present).tolist():
        v = values[i]
        out[i] = bool(v) if isinstance(v, (bool, int, float)) else False
    return out


#: comm types ASTRA-sim simulates (all-reduce, all-gather, all-to-all, reduce-scatter; REDUCE_SCATTER_BLOCK
#: is costed as reduce-scatter and exported as one); the others it replays for their duration (broadcast).
_ASTRA_SIMULATED = (0, 2, 6, 7, 8)


def _classify(cols: Any, streams: str, *, astra: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Node kind, resource class and resource sub-id (tid/stream) per node.

    ``astra``: ASTRA-sim's hardware resources (astra-sim c459ab6 ``workload/HardwareResource.cc``): one
    CPU, one compute and one communication resource per rank whatever the ``tid``/``stream``
    attributes say, and a send holds the communication resource like a collective (a recv holds none).
    """
    types = cols.types
    n = len(types)
    kind = np.full(n, K_ZERO, dtype=np.int8)
    kind[types == NodeType.COMP_NODE] = K_TIMED
    mem = (types == NodeType.MEM_LOAD_NODE) | (types == NodeType.MEM_STORE_NODE)
    kind[mem] = K_TIMED
    kind[types == NodeType.COMM_COLL_NODE] = K_COLL
    kind[types == NodeType.COMM_SEND_NODE] = K_SEND
    kind[types == NodeType.COMM_RECV_NODE] = K_RECV
    cls = np.full(n, -1, dtype=np.int64)
    sub = np.zeros(n, dtype=np.int64)
    comp = types == NodeType.COMP_NODE
    if n and comp.any():
        is_cpu = _bool_attr(cols, "is_cpu_op")
        cls[comp & is_cpu] = R_HOST
        cls[comp & ~is_cpu] = R_COMPUTE
    cls[mem] = R_MEMORY
    cls[kind == K_COLL] = R_COMM
    cls[(kind == K_SEND) | (kind == K_RECV)] = R_P2P
    if astra:
        cls[kind == K_SEND] = R_COMM
        coll = np.flatnonzero(kind == K_COLL)
        if len(coll):
            _, ctypes = cols.attr("comm_type")
            for i in coll.tolist():
                if ctypes[i] is not None and ctypes[i] not in _ASTRA_SIMULATED:
                    kind[i] = K_TIMED  # ASTRA-sim replays it for its duration on this rank alone
        return kind, cls, sub
    if streams == "trace" and n:
        if (cls == R_HOST).any():
            _, tid = cols.attr_int("tid")
            sub = np.where(cls == R_HOST, tid, sub)
        streamed = (cls == R_COMPUTE) | (cls == R_COMM) | (cls == R_P2P)
        if streamed.any():
            _, stream = cols.attr_int("stream")
            sub = np.where(streamed, stream, sub)
    return kind, cls, sub


def _resources(cls: np.ndarray, sub: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
    """Local resource index per node (-1 for none) and the resources' names."""
    has = cls >= 0
    res = np.full(len(cls), -1, dtype=np.int32)
    if not has.any():
        return res, ()
    subs, sub_idx = np.unique(sub[has], return_inverse=True)
    key = cls[has] * len(subs) + sub_idx.reshape(-1)
    keys, inverse = np.unique(key, return_inverse=True)
    res[has] = inverse.reshape(-1)
    names = []
    for k in keys.tolist():
        c, s = divmod(k, len(subs))
        names.append("memory" if c == R_MEMORY else f"{RESOURCE_CLASS_NAMES[c]} {int(subs[s])}")
    return res, tuple(names)


def _compute_durations(cols: Any, kind: np.ndarray, model: ComputeModel, trace: "ExecutionTrace",
                       counts: dict[str, int]) -> np.ndarray:
    dur = np.zeros(len(kind), dtype=np.float64)
    timed = kind == K_TIMED
    if not timed.any():
        return dur
    measured = cols.duration_ns[timed]
    if model.mode == "measured" and bool(np.all(measured > 0)):
        # every node has a duration, so the roofline inputs cannot matter: skip reading them
        ops = nbytes = np.zeros(len(measured), dtype=np.float64)
    else:
        try:
            ops = cols.attr_int("num_ops")[1][timed].astype(np.float64)
            nbytes = cols.attr_int("tensor_size")[1][timed].astype(np.float64)
        except TracekitError as exc:
            raise exc.with_context(path=trace.path, rank=trace.rank)
    costs = model.costs(ops, nbytes, measured)
    over = np.flatnonzero(costs.duration_ns > MAX_DURATION_NS)
    if len(over):
        pos = int(np.flatnonzero(timed)[over[0]])
        raise ReplayError(f"compute time is out of range (more than {MAX_DURATION_NS:,} ns): measured "
                          f"{int(measured[over[0]]):,} ns, compute scale {model.scale:g}, {model.mode} model",
                          path=trace.path, rank=trace.rank,
                          node_id=int(cols.ids[pos]))
    dur[timed] = costs.duration_ns.astype(np.float64)
    for name, c in costs.counts().items():
        counts[name] = counts.get(name, 0) + c
    return dur


def _chain_next(kind: np.ndarray, res: np.ndarray, graph: Any) -> np.ndarray:
    """For each timed node u: its only successor v when v is timed and runs on u's resource, else -1.

    When v waits for nothing but u by the time u starts, the engine starts v
    right behind u without an event of its own (see :mod:`.engine`).
    """
    n = len(kind)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return out
    outdeg = np.diff(graph.succ_ptr)
    cand = np.flatnonzero((outdeg == 1) & (kind == K_TIMED))
    if not len(cand):
        return out
    v = graph.succ_pos[graph.succ_ptr[cand]]
    ok = (kind[v] == K_TIMED) & (res[v] == res[cand])
    out[cand[ok]] = v[ok]
    return out


# ----- matching ---------------------------------------------------------------------------


def _int_or(values: list[Any], i: int, default: int | None) -> int | None:
    v = values[i]
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return default
    return int(v)


def _match_collectives(ts: "TraceSet", layouts: dict[int, RankLayout], program_notes: dict[int, str],
                       instances: list[Instance], instance_of: np.ndarray, *, astra: bool = False) -> None:
    groups = ts.process_groups
    seqs = collective_sequences(ts)
    names = sorted({g for per in seqs.values() for g in per}, key=lambda s: (len(s), s))
    for name in names:
        members = groups.get(name)
        for rank, per in seqs.items():
            if name in per and (members is None or rank not in members):
                lay = layouts[rank]
                why = (f"its process group {name!r} is not declared (declared: {sorted(groups)})"
                       if members is None else
                       f"rank {rank} is not a member of process group {name!r} {list(members)[:16]}")
                for node_id, _, _ in per[name]:
                    program_notes[_global(ts, lay, node_id)] = why
        if members is None:
            continue
        lists = {r: seqs.get(r, {}).get(name, []) for r in members if r in layouts}
        if astra:  # collectives timed alone (see _classify) are not instances
            lists = {r: [e for e in v if layouts[r].kind[_global(ts, layouts[r], e[0]) - layouts[r].offset] == K_COLL]
                     for r, v in lists.items()}
        depth = max((len(v) for v in lists.values()), default=0)
        for k in range(depth):
            nodes, first = [], None
            for r in members:
                entries = lists.get(r, [])
                if k < len(entries):
                    g = _global(ts, layouts[r], entries[k][0])
                    nodes.append(g)
                    if first is None:
                        first = entries[k]
                else:
                    nodes.append(-1)
            assert first is not None
            iid = len(instances)
            instances.append(Instance("collective", first[1], max(first[2], 0), name, tuple(members), nodes, k))
            for g in nodes:
                if g >= 0:
                    instance_of[g] = iid


def _global(ts: "TraceSet", lay: RankLayout, node_id: int) -> int:
    pos = ts[lay.rank].graph().position_of(node_id)
    return lay.offset + pos


def _match_p2p(ts: "TraceSet", layouts: dict[int, RankLayout], notes: dict[int, str],
               instances: list[Instance], instance_of: np.ndarray) -> None:
    sends: dict[tuple[int, int, int], list[int]] = {}
    recvs: dict[tuple[int, int, int], list[int]] = {}
    pg_of: dict[int, str] = {}
    bytes_of: dict[int, int] = {}
    world = set(layouts)
    for rank, lay in layouts.items():
        p2p = np.flatnonzero((lay.kind == K_SEND) | (lay.kind == K_RECV))
        if not len(p2p):
            continue
        trace = ts[rank]
        cols = trace.columns()
        _, src_v = cols.attr("comm_src")
        _, dst_v = cols.attr("comm_dst")
        _, tag_v = cols.attr("comm_tag")
        _, size_v = cols.attr("comm_size")
        _, pg_v = cols.attr("pg_name")
        for p in trace.graph().in_topological_order(p2p):
            g = lay.offset + p
            tag = _int_or(tag_v, p, 0)
            bytes_of[g] = max(_int_or(size_v, p, 0) or 0, 0)
            pg_of[g] = canonical_pg_name(pg_v[p])
            if lay.kind[p] == K_SEND:
                dst = _int_or(dst_v, p, None)
                if dst is None:
                    raise ReplayError("COMM_SEND node has no comm_dst", path=trace.path, rank=rank,
                                      node_id=int(lay.ids[p]))
                if dst not in world:
                    notes[g] = f"it sends to rank {dst}, which is not in the trace set"
                    continue
                sends.setdefault((rank, dst, tag), []).append(g)
            else:
                src = _int_or(src_v, p, None)
                if src is None:
                    raise ReplayError("COMM_RECV node has no comm_src", path=trace.path, rank=rank,
                                      node_id=int(lay.ids[p]))
                if src not in world:
                    notes[g] = f"it receives from rank {src}, which is not in the trace set"
                    continue
                recvs.setdefault((src, rank, tag), []).append(g)
    for key in sorted(set(sends) | set(recvs)):
        src, dst, tag = key
        s_list, r_list = sends.get(key, []), recvs.get(key, [])
        for k in range(max(len(s_list), len(r_list))):
            if k < len(s_list) and k < len(r_list):
                s, r = s_list[k], r_list[k]
                iid = len(instances)
                instances.append(Instance("p2p", None, bytes_of[s], pg_of[s], (src, dst), [s, r], tag))
                instance_of[s] = instance_of[r] = iid
            elif k < len(s_list):
                notes[s_list[k]] = (f"send #{k} to rank {dst} with tag {tag} has no matching recv on rank {dst} "
                                    f"(rank {dst} posts {len(r_list)} recvs from rank {src} with that tag)")
            else:
                notes[r_list[k]] = (f"recv #{k} from rank {src} with tag {tag} has no matching send on rank {src} "
                                    f"(rank {src} posts {len(s_list)} sends to rank {dst} with that tag)")


# ----- costs --------------------------------------------------------------------------------


class _Coster:
    """Costs instances with the collective model (cached), the measured model, or the fallback."""

    def __init__(self, spec: "HardwareSpec", model_name: str, measured: np.ndarray,
                 compute: ComputeModel, starts: np.ndarray | None = None) -> None:
        self.spec = spec
        self.starts_ns = starts
        self.measured = model_name == "measured"
        self.model = None if self.measured else make_collective_model(spec)
        self.measured_ns = measured
        self.compute = compute
        self._cache: dict[tuple, CommCost] = {}

    def cost(self, inst: Instance, program: ReplayProgram) -> CommCost:
        present = [g for g in inst.nodes if g >= 0]
        if self.measured:
            return measured_comm_cost([int(self.starts_ns[g]) for g in present],
                                      [int(self.measured_ns[g]) for g in present])
        if inst.kind == "p2p":
            key = ("p2p", inst.comm_bytes, inst.ranks)
        else:
            key = (inst.comm_type, inst.comm_bytes, inst.ranks)
        found = self._cache.get(key)
        if found is not None:
            return found
        g0 = present[0]
        try:
            if inst.kind == "p2p":
                cost = self.model.p2p_cost(inst.comm_bytes, inst.ranks[0], inst.ranks[1])
            else:
                cost = self.model.collective_cost(CollectiveType(inst.comm_type), inst.comm_bytes, inst.ranks)
        except UnsupportedCollectiveError:
            worst = max(self.compute.cost(int(self.measured_ns[g])).duration_ns for g in present)
            cost = CommCost(float(worst), (), "measured", shares_bandwidth=False)
            return cost  # depends on the nodes' durations: not cached
        except ValueError:
            raise ReplayError(f"unknown comm_type {inst.comm_type!r}", rank=program.rank_of(g0),
                              node_id=program.node_id(g0)) from None
        except TracekitError as exc:
            raise exc.with_context(rank=program.rank_of(g0), node_id=program.node_id(g0))
        self._cache[key] = cost
        return cost


# ----- the whole set ------------------------------------------------------------------------


def _packed(values: np.ndarray, typecode: str) -> array:
    """``values`` as an :class:`array.array` of ``typecode`` (``i``: int32, ``q``: int64), bytes copied."""
    out = array(typecode)
    out.frombytes(memoryview(np.ascontiguousarray(values, dtype=np.dtype(typecode))).cast("B"))
    return out


def _small_ints(values: np.ndarray, bound: int) -> list:
    """``values.tolist()`` (ints in ``[-1, bound)``) with one int object per value, by table look-up (no sort)."""
    table = np.empty(bound + 1, dtype=object)
    table[:] = list(range(-1, bound))
    return table[values + 1].tolist()


def _shared_items(values: np.ndarray) -> list:
    """``values.tolist()`` with one Python object per distinct value (8 bytes a node instead of 32-40)."""
    if not len(values):
        return []
    uniq, inverse = np.unique(values, return_inverse=True)
    objects = np.empty(len(uniq), dtype=object)
    objects[:] = uniq.tolist()
    return objects[inverse.reshape(-1)].tolist()


def compile_program(traceset: "TraceSet", spec: "HardwareSpec", options: ReplayOptions, *,
                    plan: Any = None) -> ReplayProgram:
    """Compile ``traceset`` for replay on ``spec`` (already fitted, see :func:`effective_spec`).

    With ``plan`` (a :class:`tracekit.replayer.folding.FoldPlan`) only the
    plan's representative ranks are compiled and the communication instances
    are the plan's folded ones (members replaced by their representatives).

    Raises:
        ValidationError: a dependency cycle, a bad attribute value, undeclared process groups.
        ReplayError: a send without ``comm_dst`` / recv without ``comm_src``, a
            collective the model cannot cost.
        SpecError: the cost models reject the spec.
    """
    model_name = options.collective_model or spec.collective_model
    compute = ComputeModel(spec)
    layouts: dict[int, RankLayout] = {}
    kinds, durs, ress, preds, succ_ptrs, succs, chains, measured = [], [], [], [], [], [], [], []
    starts: list[np.ndarray] = []
    resource_rank: list[int] = []
    counts: dict[str, int] = {}
    rank_counts: dict[int, dict[str, int]] = {}
    offset = 0
    compiled_ranks = traceset.ranks if plan is None else plan.reps
    for rank in compiled_ranks:
        trace = traceset[rank]
        cols = trace.columns()
        graph = trace.graph()
        if len(graph.duplicate_ids):
            raise ValidationError(f"duplicate node id {int(graph.duplicate_ids[0])}", path=trace.path,
                                  rank=rank, node_id=int(graph.duplicate_ids[0]))
        graph.topological_order()  # raises ValidationError naming a cycle
        kind, cls, sub = _classify(cols, options.streams, astra=model_name == "astra")
        res, names = _resources(cls, sub)
        rank_counts[rank] = {}
        dur = _compute_durations(cols, kind, compute, trace, rank_counts[rank])
        if model_name == "astra":  # a broadcast-like collective of no runtime: 1 ns (Workload::issue_comm)
            dur[(kind == K_TIMED) & (cols.types == NodeType.COMM_COLL_NODE) & (dur == 0)] = 1
        for name, c in rank_counts[rank].items():
            counts[name] = counts.get(name, 0) + c
        n = len(kind)
        layouts[rank] = RankLayout(rank, trace.path, offset, cols.ids, kind, res, names, len(resource_rank))
        resource_rank.extend([rank] * len(names))
        kinds.append(kind)
        durs.append(dur)
        ress.append(np.where(res >= 0, res + layouts[rank].resource_offset, -1))
        preds.append(np.diff(graph.pred_ptr))
        succ_ptrs.append(graph.succ_ptr[:-1] + (sum(len(s) for s in succs) if succs else 0))
        succs.append(graph.succ_pos + offset)
        chain = _chain_next(kind, res, graph)
        chains.append(np.where(chain >= 0, chain - np.arange(n), 0))
        measured.append(cols.duration_ns)
        starts.append(cols.start_time_ns)
        offset += n
    total_edges = sum(len(s) for s in succs)
    cat = (lambda parts, dt: np.concatenate(parts).astype(dt) if parts else np.zeros(0, dtype=dt))
    instance_of = np.full(offset, -1, dtype=np.int64)
    notes: dict[int, str] = {}
    instances: list[Instance] = []
    if plan is None:
        _match_collectives(traceset, layouts, notes, instances, instance_of, astra=model_name == "astra")
        _match_p2p(traceset, layouts, notes, instances, instance_of)
    else:
        for f in plan.folded:
            nodes = [layouts[r].offset + p for r, p in f.nodes]
            iid = len(instances)
            instances.append(Instance(f.kind, f.comm_type, f.comm_bytes, f.pg_name, f.ranks, nodes, f.seq,
                                      link_ranks=f.link_ranks))
            for g in nodes:
                instance_of[g] = iid
    pred_count = cat(preds, np.int64)
    index_code = "i" if max(offset, total_edges) < 2**31 else "q"  # 4 bytes an index when they fit
    program = ReplayProgram(
        spec=spec, options=options, model_name=model_name,
        layouts=[layouts[r] for r in compiled_ranks],
        kind=cat(kinds, np.int64).tolist(),
        duration_ns=_shared_items(cat(durs, np.float64)),
        resource=_small_ints(cat(ress, np.int64), len(resource_rank)),
        pred_count=_packed(pred_count.astype(np.int32), "i"),
        succ_ptr=_packed(np.append(cat(succ_ptrs, np.int64), total_edges), index_code),
        succ=_packed(cat(succs, np.int64), index_code),
        chain_delta=cat(chains, np.int64).tolist(),
        instance_of=_shared_items(instance_of),
        instances=instances,
        resource_rank=resource_rank,
        notes=notes,
        compute_methods={m: counts[m] for m in METHODS if m in counts},
        measured_ns=cat(measured, np.int64),
        roots=np.flatnonzero(pred_count == 0).tolist(),
        rank_compute_methods=rank_counts,
    )
    coster = _Coster(spec, model_name, program.measured_ns, compute, cat(starts, np.int64))
    for inst in instances:
        if all(g >= 0 for g in inst.nodes):
            inst.cost = coster.cost(inst, program)
    program.measured_ns = None  # only costing reads it: 8 bytes a node less during the replay (issue 17)
    if model_name == "astra" and coster.model is not None:
        from tracekit.replayer.astra_skew import engine_hook

        program.member_ends = engine_hook(coster.model)
    return program
