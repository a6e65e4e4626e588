"""Compiling a trace set into the flat arrays the replay engine runs on.

A :class:`ReplayProgram` is the whole job as plain Python lists indexed by a *global node index* (rank offset +
position in the rank's file): what kind of node it is, which resource it runs on, how long it runs, how many data
dependencies it waits for and whom it unblocks (successor CSR), and which communication *instance* (one collective
on one process group, or one matched send/recv pair) it belongs to.  Everything here is computed with numpy per
rank; the engine then only walks lists.

Resources (per rank, docs/design.md section 4):

=================  ==============================================================================================
``host thread T``  COMP nodes with ``is_cpu_op`` true; ``T`` = their ``tid``
``compute stream``  other COMP nodes (kernels); ``S`` = their ``stream`` attr
``comm stream S``  COMM_COLL nodes; ``S`` = their ``stream`` attr
``p2p stream S``   COMM_SEND / COMM_RECV nodes (not exclusive: every send and recv is posted as soon as its
                   dependencies are done, as ASTRA-sim does, so a ring of sends and recvs cannot block itself)
``memory``         MEM_LOAD / MEM_STORE nodes
(none)             METADATA and INVALID nodes: no time, no resource
=================  ==============================================================================================

A missing ``tid`` / ``stream`` means 0.  With ``streams="single"`` every rank has one resource of each class
whatever the attributes say.

Matching (docs/design.md section 4; :mod:`tracekit.sets.rendezvous`, the one matcher, via :mod:`.matching`): the k-th
collective a rank issues on group G (in the rank's topological order) is instance (G, k) on every member; a send
from ``src`` to ``dst`` with tag ``t`` is matched with the recv on ``dst`` from ``src`` with tag ``t`` of the same
rank in issue order.  Nodes that match nothing keep instance -1 and a note saying why (the deadlock report uses it).
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import numpy.typing as npt

from tracekit.errors import ReplayError, TracekitError
from tracekit.model import CollectiveType

from tracekit.replayer.simulation.collectives import CommCost, UnsupportedCollectiveError
from tracekit.replayer.simulation.collective_models import make_collective_model
from tracekit.replayer.simulation.collectives import check_replayable
from tracekit.replayer.simulation.compute import METHODS, ComputeModel
from tracekit.replayer.simulation.instance import Instance  # noqa: F401 - public here too
from tracekit.replayer.simulation.matching import match_instances
from tracekit.replayer.simulation.measured_comm import measured_comm_cost
from tracekit.replayer.simulation.rank_twins import CompileTwins
from tracekit.replayer.simulation.rank_compile import (  # noqa: F401 - node kinds and resources, re-exported
    K_COLL,
    K_RECV,
    K_SEND,
    K_TIMED,
    K_ZERO,
    KIND_NAMES,
    R_COMM,
    R_COMPUTE,
    R_HOST,
    R_MEMORY,
    R_P2P,
    RESOURCE_CLASS_NAMES,
    bool_attr,
    chain_next,
    classify,
    compute_durations,
    resources,
    shared_items,
)
from tracekit.replayer.simulation.rank_arrays import RankArrays, compile_rank
from tracekit.wire.sharing import columns_key

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace
    from tracekit.replayer.simulation.hardware import HardwareSpec
    from tracekit.sets.traceset import TraceSet

STREAM_MODES = ("trace", "single")
#: Collective models the engine accepts: the spec's models plus the engine's own "measured".
ENGINE_MODELS = ("alpha_beta", "astra", "nccl", "measured")


@dataclass(frozen=True)
class ReplayOptions:
    """How to replay.

    Attributes:
        collective_model: ``alpha_beta``, ``astra``, ``nccl`` (override the spec's ``collectives.model``) or
            ``measured`` (each member ends its measured time after the last member's measured arrival, after the
            last arrival in the replay; members without comparable times: the smallest measured ``duration_ns``;
            :mod:`.measured_comm`; no bandwidth sharing).  None = the spec's model.
        compute_scale: factor on measured compute durations (overrides the spec's ``compute.duration_scale``).
        streams: ``trace`` (host threads and streams from the ``tid`` and ``stream`` attributes) or ``single``.
        check: run the up-front checks (:mod:`.checks`) first.
        fold: simulate one representative per class of ranks with provably identical timelines (:mod:`.folding`)
            and expand the results; the result is the unfolded one to the bit.  Falls back to an unfolded replay
            when equivalence cannot be proven (``ReplayResult.folding.reason`` says why).
        summary: a folded replay's result keeps the collective table's summary (``collective_rows``) and no
            per-instance rows or per-rank schedules (what the compact result holds; :mod:`.fold_summary`).
        memory_bound_gb: refuse up front a replay estimated to need more (:mod:`.memory_bound`; None: RAM).
        comm_groups: ``((id, ranks), ...)`` of an ASTRA-sim comm-group file (:mod:`tracekit.sets.comm_groups`), added
            to the groups the traces declare; ``comm_groups_path`` names it in errors.
    """

    collective_model: str | None = None
    compute_scale: float | None = None
    streams: str = "trace"
    check: bool = True
    fold: bool = True
    summary: bool = False
    memory_bound_gb: float | None = None
    comm_groups: tuple[tuple[str, tuple[int, ...]], ...] = ()
    comm_groups_path: str | None = None

    def __post_init__(self) -> None:
        from tracekit.errors import ConfigError

        if self.collective_model is not None and self.collective_model not in ENGINE_MODELS:
            raise ConfigError(
                f"unknown collective model {self.collective_model!r}; choose one of {', '.join(ENGINE_MODELS)}"
            )
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
    ids: npt.NDArray[np.uint64]
    kind: npt.NDArray[np.int8]
    resource: npt.NDArray[np.int32]
    resource_names: tuple[str, ...]
    resource_offset: int

    @property
    def n(self) -> int:
        """Nodes of the rank."""
        return len(self.ids)


@dataclass
class ReplayProgram:
    """A trace set compiled for the engine (see module docstring).

    Memory (issue 17: <= 200 bytes a node unfolded): the sequences the
    engine's Python reads for every node (``kind``, ``resource``,
    ``instance_of``) are lists whose items are shared objects (small ints),
    for list-speed access at 8 bytes a node; the CSR, ``pred_count`` and what
    the compiled chain walk reads (``duration_ns`` float64 ns, ``chain_delta``
    int32; :mod:`._chains`) are packed :class:`array.array`, which the engine
    views as numpy arrays.  ``chain_delta[g]``: global index of ``g``'s chain
    successor minus ``g`` (0: none; see :func:`.rank_compile.chain_next`).
    """

    spec: "HardwareSpec"
    options: ReplayOptions
    model_name: str
    layouts: list[RankLayout]
    kind: list[int]
    duration_ns: array[float]
    resource: list[int]
    pred_count: array[int]
    succ_ptr: array[int]
    succ: array[int]
    chain_delta: array[int]
    instance_of: list[int]
    instances: list[Instance]
    resource_rank: list[int]
    notes: dict[int, str] = field(default_factory=dict)
    compute_methods: dict[str, int] = field(default_factory=dict)
    #: int64[N] measured durations, for costing; None once the instances are costed.
    measured_ns: npt.NDArray[np.int64] | None = None
    roots: list[int] = field(default_factory=list)
    rank_compute_methods: dict[int, dict[str, int]] = field(default_factory=dict)
    #: ``member_ends(instance, arrivals_ns) -> ends_ns | None``: per-member ends of a collective whose
    #: members arrived apart (ASTRA-sim model, see astra_skew); None = all members end together.
    member_ends: Callable[[Instance, list[float]], list[int] | None] | None = None
    start_delay_ns: dict[int, float] = field(default_factory=dict)  # perturb.py: {rank: ns}, {(rank, dim): x}
    link_slowdown: dict[tuple[int, int], float] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Nodes of the program (every rank's, global indices ``0..n-1``)."""
        return len(self.kind)

    @property
    def n_resources(self) -> int:
        """Resources (streams, host threads, NIC queues) over every rank."""
        return len(self.resource_rank)

    def locate(self, g: int) -> tuple[RankLayout, int]:
        """``(layout, position)`` of global node index ``g`` (bisects the layouts' offsets, listed once)."""
        offsets = self.__dict__.get("_offsets")
        if offsets is None or len(offsets) != len(self.layouts):
            offsets = self.__dict__["_offsets"] = [lay.offset for lay in self.layouts]
        lay = self.layouts[bisect_right(offsets, g) - 1]
        return lay, g - lay.offset

    def node_id(self, g: int) -> int:
        """The trace node id of global node index ``g`` (``0 <= g < n``)."""
        lay, pos = self.locate(g)
        return int(lay.ids[pos])

    def rank_of(self, g: int) -> int:
        """The rank global node index ``g`` belongs to."""
        return self.locate(g)[0].rank


# ----- costs --------------------------------------------------------------------------------


#: the ``comm_type`` values a collective may have (:class:`~tracekit.model.CollectiveType`)
_KNOWN_COMM_TYPES = frozenset(int(t) for t in CollectiveType)


class _Coster:
    """Costs instances with the collective model (cached), the measured model, or the fallback."""

    def __init__(
        self,
        spec: "HardwareSpec",
        model_name: str,
        measured: npt.NDArray[np.int64],
        compute: ComputeModel,
        starts: npt.NDArray[np.int64] | None = None,
    ) -> None:
        self.spec = spec
        self.starts_ns = starts
        self.measured = model_name == "measured"
        self.model = None if self.measured else make_collective_model(spec)
        self.measured_ns = measured
        self.compute = compute
        self._cache: dict[tuple[str | int | None, int, tuple[int, ...]], CommCost] = {}

    def cost(self, inst: Instance, program: ReplayProgram) -> CommCost:
        """The cost of ``inst`` (every member present), cached by (type, bytes, ranks) unless it depends on durations.

        Raises ReplayError for an unknown ``comm_type``, the model's TracekitErrors with the first member's rank/node.
        """
        present = [g for g in inst.nodes if g >= 0]
        if self.measured:
            assert self.starts_ns is not None, "the measured model is costed with the nodes' start times"
            if inst.kind != "p2p" and inst.comm_type not in _KNOWN_COMM_TYPES:
                # the model never reads the type, but the result's collective table names it (build_result)
                lay, pos = program.locate(present[0])
                raise ReplayError(
                    f"unknown comm_type {inst.comm_type!r}", path=lay.path, rank=lay.rank, node_id=int(lay.ids[pos])
                )
            starts, durations = self.starts_ns, self.measured_ns
            return measured_comm_cost([int(starts[g]) for g in present], [int(durations[g]) for g in present])
        assert self.model is not None  # every model but "measured" has one
        key: tuple[str | int | None, int, tuple[int, ...]]
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
                assert inst.comm_type is not None  # a collective's (rendezvous: a missing one reads as ALL_REDUCE)
                cost = self.model.collective_cost(CollectiveType(inst.comm_type), inst.comm_bytes, inst.ranks)
        except UnsupportedCollectiveError as exc:
            where = {"path": program.locate(g0)[0].path, "rank": program.rank_of(g0), "node_id": program.node_id(g0)}
            check_replayable(exc, inst.comm_type, inst.comm_bytes, [int(self.measured_ns[g]) for g in present], where)
            worst = max(self.compute.cost(int(self.measured_ns[g])).duration_ns for g in present)
            return CommCost(float(worst), (), "measured", shares_bandwidth=False)  # not cached: per node durations
        except ValueError:
            raise ReplayError(
                f"unknown comm_type {inst.comm_type!r}", rank=program.rank_of(g0), node_id=program.node_id(g0)
            ) from None
        except TracekitError as exc:
            raise exc.with_context(rank=program.rank_of(g0), node_id=program.node_id(g0))
        self._cache[key] = cost
        return cost


# ----- the whole set ------------------------------------------------------------------------


def compile_program(
    traceset: "TraceSet", spec: "HardwareSpec", options: ReplayOptions, *, plan: Any = None
) -> ReplayProgram:
    """Compile ``traceset`` for replay on ``spec`` (already fitted, see :func:`effective_spec`).

    With ``plan`` (a :class:`tracekit.replayer.simulation.folding.FoldPlan`) only the
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
    parts = _RankParts()
    compiled_ranks = traceset.ranks if plan is None else plan.reps
    for rank in compiled_ranks:
        parts.add(traceset[rank], rank, options.streams, model_name, compute)
    instance_of = np.full(parts.offset, -1, dtype=np.int64)
    notes: dict[int, str] = {}
    instances: list[Instance] = []
    if plan is None:
        match_instances(traceset, parts.layouts, notes, instances, instance_of)
    else:
        for f in plan.folded:
            nodes = [parts.layouts[r].offset + p for r, p in f.nodes]
            iid = len(instances)
            instances.append(
                Instance(f.kind, f.comm_type, f.comm_bytes, f.pg_name, f.ranks, nodes, f.seq, link_ranks=f.link_ranks)
            )
            for g in nodes:
                instance_of[g] = iid
    program = parts.program(
        spec, options, model_name, [parts.layouts[r] for r in compiled_ranks], instance_of, instances, notes
    )
    assert program.measured_ns is not None  # set by parts.program, cleared below
    coster = _Coster(spec, model_name, program.measured_ns, compute, _cat(parts.starts, np.int64))
    for inst in instances:
        if all(g >= 0 for g in inst.nodes):
            inst.cost = coster.cost(inst, program)
    program.measured_ns = None  # only costing reads it: 8 bytes a node less during the replay (issue 17)
    if model_name == "astra":
        from tracekit.replayer.simulation.astra_congestion import astra_engine_hook

        program.member_ends = astra_engine_hook(coster.model)  # None when ``spec`` was not made by effective_spec
    return program


def _cat(parts: list[npt.NDArray[Any]], dtype: Any) -> npt.NDArray[Any]:
    # one array: concatenating into the dtype (astype's unsafe cast) spares a copy of every node's value
    return np.concatenate(parts, dtype=dtype, casting="unsafe") if parts else np.zeros(0, dtype=dtype)


def _packed(values: npt.NDArray[Any], typecode: str) -> array[Any]:
    """``values`` as an :class:`array.array` of ``typecode`` (``i``: int32, ``q``: int64), bytes copied."""
    out = array(typecode)
    out.frombytes(np.ascontiguousarray(values, dtype=np.dtype(typecode)).data.cast("B"))  # no copy
    return out


def _small_ints(values: npt.NDArray[np.int64], bound: int) -> list[int]:
    """``values.tolist()`` (ints in ``[-1, bound)``) with one int object per value, by table look-up (no sort)."""
    table = np.empty(bound + 1, dtype=object)
    table[:] = list(range(-1, bound))
    return table[values + 1].tolist()


class _RankParts:
    """The per-rank arrays of a program being compiled, concatenated by :meth:`program`."""

    def __init__(self) -> None:
        self.layouts: dict[int, RankLayout] = {}
        self.kinds: list[np.ndarray] = []
        self.durs: list[np.ndarray] = []
        self.ress: list[np.ndarray] = []
        self.preds: list[np.ndarray] = []
        self.succ_ptrs: list[np.ndarray] = []
        self.succs: list[np.ndarray] = []
        self.chains: list[np.ndarray] = []
        self.measured: list[np.ndarray] = []
        self.starts: list[np.ndarray] = []
        self.resource_rank: list[int] = []
        self.counts: dict[str, int] = {}
        self.rank_counts: dict[int, dict[str, int]] = {}
        self.offset = 0
        self.edges = 0
        self.compiled: dict[int, RankArrays] = {}  # by columns identity (tracekit.wire.sharing.columns_key)
        self.twins: CompileTwins | None = None  # by compile inputs (.rank_twins), for one compile's settings

    def add(self, trace: "ExecutionTrace", rank: int, streams: str, model_name: str, compute: ComputeModel) -> None:
        """Compile one rank (kinds, resources, durations, graph) at the current offset; a rank sharing its
        columns with one compiled already (byte-identical rank files), or equal to one in every input the compile
        reads (:class:`.rank_twins.CompileTwins`: ranks differing only in group names and peers), reuses that
        rank's arrays."""
        key = columns_key(trace)
        arrays = self.compiled.get(key)
        if arrays is None:
            if self.twins is None:
                self.twins = CompileTwins(streams, model_name, compute)
            arrays, token = self.twins.find(trace)  # ranks equal up to what the compile does not read
            if arrays is None:
                arrays = compile_rank(trace, rank, streams, model_name, compute)
                self.twins.add(token, arrays)
            self.compiled[key] = arrays
        self.rank_counts[rank] = dict(arrays.counts)
        for name, c in arrays.counts.items():
            self.counts[name] = self.counts.get(name, 0) + c
        offset = self.offset
        cols = trace.columns()
        lay = self.layouts[rank] = RankLayout(
            rank, trace.path, offset, cols.ids, arrays.kind, arrays.resource, arrays.resource_names,
            len(self.resource_rank),
        )  # fmt: skip
        self.resource_rank.extend([rank] * len(arrays.resource_names))
        self.kinds.append(arrays.kind)
        self.durs.append(arrays.duration_ns)
        self.ress.append(np.where(arrays.resource >= 0, arrays.resource + lay.resource_offset, -1))
        self.preds.append(arrays.pred_count)
        self.succ_ptrs.append(arrays.succ_ptr + self.edges)
        self.succs.append(arrays.succ_pos + offset)
        self.edges += len(arrays.succ_pos)
        self.chains.append(arrays.chain)
        self.measured.append(cols.duration_ns)
        self.starts.append(cols.start_time_ns)
        self.offset += len(arrays.kind)

    def program(
        self,
        spec: "HardwareSpec",
        options: ReplayOptions,
        model_name: str,
        layouts: list[RankLayout],
        instance_of: np.ndarray,
        instances: list[Instance],
        notes: dict[int, str],
    ) -> ReplayProgram:
        """The :class:`ReplayProgram` of the ranks added so far (costs not filled in yet)."""
        pred_count = _cat(self.preds, np.int64)
        index_code = "i" if max(self.offset, self.edges) < 2**31 else "q"  # 4 bytes an index when they fit
        return ReplayProgram(
            spec=spec,
            options=options,
            model_name=model_name,
            layouts=layouts,
            kind=_cat(self.kinds, np.int64).tolist(),
            duration_ns=_packed(_cat(self.durs, np.float64), "d"),
            resource=_small_ints(_cat(self.ress, np.int64), len(self.resource_rank)),
            pred_count=_packed(pred_count.astype(np.int32), "i"),
            succ_ptr=_packed(np.append(_cat(self.succ_ptrs, np.int64), self.edges), index_code),
            succ=_packed(_cat(self.succs, np.int64), index_code),
            chain_delta=_packed(_cat(self.chains, np.int64), "i"),
            instance_of=shared_items(instance_of),
            instances=instances,
            resource_rank=self.resource_rank,
            notes=notes,
            compute_methods={m: self.counts[m] for m in METHODS if m in self.counts},
            measured_ns=_cat(self.measured, np.int64),
            roots=np.flatnonzero(pred_count == 0).tolist(),
            rank_compute_methods=self.rank_counts,
        )
