"""Summaries of traces: node counts by type and collective, compute time, bytes by collective."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.model.attrs import COMM_SIZE, COMM_TYPE, IS_CPU_OP, NUM_OPS, TENSOR_SIZE
from tracekit.model import CollectiveType, ExecutionTrace, NodeType

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.sets.traceset import TraceSet


OP_CLASS = "op_class"  # converter extra: a view op, or a host op whose kernels carry its work (tracekit.costs.opcost)
RANGE_DURATION_NS = "range_duration_ns"  # converter extra: measured span of a ProfilerStep#N marker, ns
_COMM = (COMM_TYPE, COMM_SIZE)
_COST = (NUM_OPS, TENSOR_SIZE, OP_CLASS, IS_CPU_OP)


def _type_name(t: int) -> str:
    return NodeType(t).name if t in NodeType._value2member_map_ else f"UNKNOWN_{t}"


def _coll_name(t: Any) -> str:
    if t is None:
        return "MISSING"
    return CollectiveType(t).name if t in CollectiveType._value2member_map_ else f"UNKNOWN_{t}"


@dataclass(frozen=True)
class CostCoverage:
    """How much of a rank's compute has a cost (FLOPs/bytes from :mod:`tracekit.costs.opcost`).

    A COMP node counts as costed when it has ``num_ops`` or ``tensor_size`` > 0, or an ``op_class``
    (a view op, or a host op whose work its kernels carry).  Measured compute time is the device nodes'
    (``is_cpu_op`` false) when the rank has any, else the host ops' (a CPU capture).

    Attributes:
        side: ``device`` or ``host``: which nodes the shares below are over.
        comp_nodes, costed_nodes: COMP nodes on that side, and those with a cost.
        compute_ns, costed_ns: their measured time, ns.
        total_flops: sum of ``num_ops`` over all COMP nodes.
        compute_device: the metadata's ``compute_device`` (None when not recorded).
    """

    side: str
    comp_nodes: int
    costed_nodes: int
    compute_ns: int
    costed_ns: int
    total_flops: int
    compute_device: str | None

    @property
    def node_share(self) -> float | None:
        """Share of the side's COMP nodes with a cost (num_ops, tensor_size or op_class); None without COMP nodes."""
        return self.costed_nodes / self.comp_nodes if self.comp_nodes else None

    @property
    def time_share(self) -> float | None:
        """Share of measured compute time with a cost; None when nothing was measured."""
        return self.costed_ns / self.compute_ns if self.compute_ns > 0 else None


def cost_coverage(trace: ExecutionTrace) -> CostCoverage:
    """:class:`CostCoverage` of one rank (vectorized over the node columns)."""
    cols = trace.columns()
    cols.prefetch_attrs(list(_COST))
    _, ops = NUM_OPS.column(cols)
    _, nbytes = TENSOR_SIZE.column(cols)
    has_class = np.asarray(_present(cols, OP_CLASS), dtype=bool)
    cpu_present, cpu = IS_CPU_OP.column(cols)
    comp = cols.types == NodeType.COMP_NODE
    parts, flops = _cost_parts(comp, ops, nbytes, has_class, cpu_present & ~cpu, cols.duration_ns)
    return _coverage(parts, flops, trace)


def _cost_parts(
    comp: np.ndarray, ops: np.ndarray, nbytes: np.ndarray, has_class: np.ndarray, device: np.ndarray, dur: np.ndarray
) -> tuple[np.ndarray, int]:
    """Per side (row 0 device, row 1 host): COMP nodes, costed ones, their ns, costed ns (int64[2, 4]); and FLOPs.

    ``device``: bool[N], nodes with ``is_cpu_op`` false.
    """
    costed = (ops > 0) | (nbytes > 0) | has_class
    parts = np.zeros((2, 4), dtype=np.int64)
    for row, side in enumerate((comp & device, comp & ~device)):
        both = side & costed
        parts[row] = (int(side.sum()), int(both.sum()), int(dur.sum(where=side)), int(dur.sum(where=both)))
    return parts, int(ops[comp].sum())


def _coverage(parts: np.ndarray, flops: int, trace: ExecutionTrace) -> CostCoverage:
    """The :class:`CostCoverage` of :func:`_cost_parts` sums: the device side when the rank has device nodes."""
    row = 0 if parts[0, 0] else 1
    device = trace.metadata.get_attr("compute_device")
    comp_nodes, costed_nodes, compute_ns, costed_ns = (int(x) for x in parts[row])
    return CostCoverage(
        "device" if row == 0 else "host",
        comp_nodes,
        costed_nodes,
        compute_ns,
        costed_ns,
        flops,
        device if isinstance(device, str) else None,
    )


def _present(cols: Any, name: str) -> np.ndarray:
    """bool[N]: nodes with attribute ``name`` (without boxing its values when no node has it, or all are numbers)."""
    num = cols.attr_num_fn if name not in cols._attr_cache else None
    fast = num(name) if num is not None else None
    return fast[0] if fast is not None else np.asarray(cols.attr(name)[0], dtype=bool)


@dataclass(frozen=True)
class TraceSummary:
    """Summary of one rank.

    Attributes:
        nodes_by_type: NodeType name -> count.
        collectives: CollectiveType name -> count of COMM_COLL nodes.
        comm_bytes_by_collective: CollectiveType name -> summed comm_size (bytes);
            send/recv under ``SEND``/``RECV``.
        compute_ns: summed duration of COMP nodes, nanoseconds.
        cost: :class:`CostCoverage` (FLOPs/bytes coverage of compute).
        steps: ``ProfilerStep#N`` markers (nodes named so with a ``range_duration_ns``
            attribute, written by the PyTorch converters) -> measured step duration, ns.
    """

    rank: int | None
    path: str | None
    version: str
    nodes: int
    data_deps: int
    ctrl_deps: int
    nodes_by_type: dict[str, int]
    collectives: dict[str, int]
    comm_bytes_by_collective: dict[str, int]
    compute_ns: int
    cost: CostCoverage | None = None
    steps: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class TraceSetSummary:
    """Summary of a trace set (see :func:`summarize_traceset`).

    Attributes:
        ranks: number of traces in the set.
        process_groups: pg_name -> ranks, as resolved by :attr:`TraceSet.process_groups`.
        per_rank: one :class:`TraceSummary` per trace, in rank order (a class set's: a sequence made on demand).
        process_group_descs: pg_name -> ``pg_desc`` declared in the traces.
    """

    ranks: int
    process_groups: dict[str, list[int]]
    per_rank: Sequence[TraceSummary] = field(default_factory=list)
    #: pg_name -> pg_desc as declared in the traces (``tp_0``, a renamed group's original name); empty ones left out
    process_group_descs: dict[str, str] = field(default_factory=dict)

    @property
    def nodes(self) -> int:
        """Nodes over all ranks."""
        return sum(len(ranks) * s.nodes for ranks, s in self.rank_groups())

    def rank_groups(self) -> list[tuple[Sequence[int], TraceSummary]]:
        """``[(ranks, summary of the first)]``: ranks known to share a summary but for rank and file (a class set's
        classes, :class:`~tracekit.checks.member_summaries.MemberSummaries`), else each rank alone; tables and totals
        read these, so a class set costs its classes, not its ranks."""
        groups = getattr(self.per_rank, "groups", None)
        if groups is not None:
            return list(groups)
        return [((s.rank if s.rank is not None else i,), s) for i, s in enumerate(self.per_rank)]

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready values (per rank: every :class:`TraceSummary` field; times in ns, sizes in bytes)."""
        return {
            "ranks": self.ranks,
            "nodes": self.nodes,
            "process_groups": self.process_groups,
            "process_group_descs": self.process_group_descs,
            "per_rank": [asdict(s) for s in self.per_rank],
        }


def _comm_totals(cols: Any, comm: np.ndarray, collectives: Counter[str], comm_bytes: Counter[str]) -> None:
    """Count collectives and sum ``comm_size`` per collective over the comm nodes at positions ``comm``."""
    types = cols.types
    _, ctype = COMM_TYPE.raw(cols)
    _, csize = COMM_SIZE.raw(cols)
    p2p = {int(NodeType.COMM_SEND_NODE): "SEND", int(NodeType.COMM_RECV_NODE): "RECV"}
    coll = int(NodeType.COMM_COLL_NODE)
    names: dict[Any, str] = {}  # collective name per comm_type value (one enum lookup per distinct value)
    for p, t in zip(comm.tolist(), types[comm].tolist()):
        key = p2p.get(t)
        if key is None:
            v = ctype[p]
            try:
                key = names.get((type(v), v)) or names.setdefault((type(v), v), _coll_name(v))
            except TypeError:  # an unhashable (repeated) value
                key = _coll_name(v)
        if t == coll:
            collectives[key] += 1
        size = csize[p]
        comm_bytes[key] += int(size) if isinstance(size, (int, float)) else 0


def _comm_totals_fast(cols: Any, comm: np.ndarray, collectives: Counter[str], comm_bytes: Counter[str]) -> bool:
    """:func:`_comm_totals` vectorized when ``comm_type`` holds integers only and ``comm_size`` numbers.

    Returns False (nothing counted) when the attributes need the general path.
    Keys are added in order of first occurrence, as the general path does.
    """
    num = getattr(cols, "attr_num_fn", None)
    if num is None:
        return False
    ctype = num(COMM_TYPE, ints_only=True) if COMM_TYPE not in cols._attr_cache else None
    csize = num(COMM_SIZE) if ctype is not None and COMM_SIZE not in cols._attr_cache else None
    if ctype is None or csize is None:
        return False
    key = _comm_keys(cols.types[comm], ctype[0][comm], ctype[1][comm])
    if key is None:
        return False
    totals: dict[int, list[int]] = {}
    _add_totals(key, csize[1][comm], totals)
    _count_totals(totals, collectives, comm_bytes)
    return True


def _comm_keys(t: np.ndarray, present: np.ndarray, value: np.ndarray) -> np.ndarray | None:
    """One int64 key per comm node of types ``t``: 0 SEND, 1 RECV, 2 COLL without comm_type, 4 * comm_type + 3
    otherwise (``present``/``value``: its ``comm_type``); None for a comm_type past +-2^60."""
    present = present & (t == int(NodeType.COMM_COLL_NODE))
    if present.any() and not -(2**60) <= int(value[present].min()) <= int(value[present].max()) < 2**60:
        return None
    return np.where(present, value * 4 + 3, t.astype(np.int64) - int(NodeType.COMM_SEND_NODE))


def _add_totals(key: np.ndarray, nbytes: np.ndarray, totals: dict[int, list[int]]) -> None:
    """Add count and summed ``nbytes`` per key of :func:`_comm_keys` to ``totals`` (new keys in order of first
    occurrence)."""
    if not len(key):
        return
    if int(key.min()) >= 0 and int(key.max()) < 1 << 12:  # the usual collective numbers: counted in place
        counts = np.bincount(key)
        sums = np.zeros(len(counts), dtype=np.int64)
        np.add.at(sums, key, nbytes)
        keys = np.flatnonzero(counts)
        first = np.array([int(np.argmax(key == k)) for k in keys.tolist()], dtype=np.int64)
        counts, sums = counts[keys], sums[keys]
    else:
        keys, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        counts = np.bincount(inverse.reshape(-1), minlength=len(keys))
        sums = np.zeros(len(keys), dtype=np.int64)
        np.add.at(sums, inverse.reshape(-1), nbytes)
    for r in np.argsort(first, kind="stable").tolist():
        entry = totals.setdefault(int(keys[r]), [0, 0])
        entry[0] += int(counts[r])
        entry[1] += int(sums[r])


def _count_totals(totals: dict[int, list[int]], collectives: Counter[str], comm_bytes: Counter[str]) -> None:
    """Count :func:`_add_totals` sums under their collective names."""
    names = {0: "SEND", 1: "RECV", 2: "MISSING"}
    for k, (count, nbytes) in totals.items():
        name = names.get(k) or _coll_name((k - 3) // 4)
        if k >= 2:
            collectives[name] += count
        comm_bytes[name] += nbytes


def _steps(cols: Any) -> dict[str, int]:
    """``ProfilerStep#N`` markers -> measured step duration (ns), from ``range_duration_ns``."""
    steps: dict[str, int] = {}
    ranged, span = cols.attr_int(RANGE_DURATION_NS)
    if ranged.any():
        names = cols.names
        for p in np.flatnonzero(ranged).tolist():
            if names[p].startswith("ProfilerStep#"):
                steps[names[p]] = int(span[p])
    return steps


class _Scan:
    """The attribute sums of a summary, taken chunk by chunk while a file's columns are built
    (:meth:`ExecutionTrace.scan_columns`): no second pass over the records, no per-node array per attribute.

    ``failed`` when a value needs the general path (a comm_type or count that is not a number, a bool that
    is not 0/1...): the caller then summarizes from the columns as usual.
    """

    names = (*_COMM, RANGE_DURATION_NS, *_COST)

    def __init__(self) -> None:
        self.failed = False
        self.totals: dict[int, list[int]] = {}
        self.parts = np.zeros((2, 4), dtype=np.int64)
        self.flops = 0
        self.ranged: list[tuple[int, int]] = []

    def add(self, lo: int, hi: int, kind: np.ndarray, values: np.ndarray, types: np.ndarray, dur: np.ndarray) -> None:
        """One chunk of records ``lo .. hi-1`` (kinds and values of :attr:`names`, node types, durations in ns)."""
        from tracekit.wire.attrsource import numeric_values

        if self.failed:
            return
        ctype, csize, ranged, ops, nbytes, cpu = (
            numeric_values(kind[k], values[k], ints_only=k == 0, bools=k == 6) for k in (0, 1, 2, 3, 4, 6)
        )
        if ranged is None or ops is None or nbytes is None or cpu is None or bool((cpu[1].view(np.uint64) > 1).any()):
            self.failed = True
            return
        comm = np.flatnonzero((types >= NodeType.COMM_SEND_NODE) & (types <= NodeType.COMM_COLL_NODE))
        if len(comm):
            key = None if ctype is None or csize is None else _comm_keys(types[comm], ctype[0][comm], ctype[1][comm])
            if key is None or csize is None:
                self.failed = True
                return
            _add_totals(key, csize[1][comm], self.totals)
        comp = types == NodeType.COMP_NODE
        parts, flops = _cost_parts(comp, ops[1], nbytes[1], kind[5] != 0, cpu[0] & (cpu[1] == 0), dur)
        self.parts += parts
        self.flops += flops
        self.ranged += zip((lo + np.flatnonzero(ranged[0])).tolist(), ranged[1][ranged[0]].tolist())


def summarize_trace(trace: ExecutionTrace) -> TraceSummary:
    """Summary of one rank (vectorized over the node columns); times in ns, sizes in bytes.

    A trace whose columns are not built yet is summarized while they are built (:class:`_Scan`).

    Raises:
        TraceFormatError: the trace's records cannot be decoded.
    """
    scan = _Scan()
    scanned = trace.scan_columns(scan.names, scan.add) and not scan.failed
    cols = trace.columns()
    types = cols.types
    collectives: Counter[str] = Counter()
    comm_bytes: Counter[str] = Counter()
    if scanned:
        cols.verify()  # a corrupt attribute message raises, as on any attribute read
        _count_totals(scan.totals, collectives, comm_bytes)
        steps = {cols.names[p]: span for p, span in scan.ranged if cols.names[p].startswith("ProfilerStep#")}
        cost = _coverage(scan.parts, scan.flops, trace)
    else:
        comm = np.flatnonzero((types >= NodeType.COMM_SEND_NODE) & (types <= NodeType.COMM_COLL_NODE))
        cols.prefetch_attrs([*_COMM, RANGE_DURATION_NS] if len(comm) else [RANGE_DURATION_NS])
        if len(comm) and not _comm_totals_fast(cols, comm, collectives, comm_bytes):
            _comm_totals(cols, comm, collectives, comm_bytes)
        steps = _steps(cols)
        cost = cost_coverage(trace)
    return TraceSummary(
        rank=trace.rank,
        path=trace.path,
        version=trace.metadata.version,
        nodes=len(cols),
        data_deps=len(cols.data_ids),
        ctrl_deps=len(cols.ctrl_ids),
        nodes_by_type=_by_type(types),
        collectives=dict(collectives),
        comm_bytes_by_collective=dict(comm_bytes),
        compute_ns=int(cols.duration_ns[types == NodeType.COMP_NODE].sum()),
        cost=cost,
        steps=steps,
    )


def _by_type(types: np.ndarray) -> dict[str, int]:
    """NodeType name -> count, in wire-number order."""
    if len(types) and 0 <= int(types.min()) and int(types.max()) < 1 << 10:
        counts = np.bincount(types)
        return {_type_name(t): int(counts[t]) for t in np.flatnonzero(counts).tolist()}
    return {_type_name(int(t)): int(c) for t, c in zip(*np.unique(types, return_counts=True))}


def summarize_traceset(ts: "TraceSet") -> TraceSetSummary:
    """:class:`TraceSetSummary` of every rank of ``ts``.

    Raises:
        ValidationError: a process group is declared differently on two ranks, names a rank outside the
            world, or a ``process_group:init`` value cannot be parsed.
        TraceFormatError: a trace's records cannot be decoded.
    """
    from tracekit.model.groups import pg_descriptions

    groups = {k: list(v) for k, v in ts.process_groups.items()}
    descs: dict[str, str] = {}
    for t in ts:
        descs.update(pg_descriptions(t))
    return TraceSetSummary(
        ranks=len(ts), process_groups=groups, per_rank=[summarize_trace(t) for t in ts], process_group_descs=descs
    )


def _summarize_file(item: tuple[int, str]) -> tuple[TraceSummary, dict[str, tuple[int, ...]], dict[str, str]]:
    from tracekit.model.groups import pg_descriptions
    from tracekit.wire.io import read_trace

    rank, path = item
    trace = read_trace(path, rank=rank)
    return summarize_trace(trace), trace.process_groups(), pg_descriptions(trace)


def summarize_files(
    pairs: Iterable[tuple[int, str | os.PathLike[str]]],
    *,
    executor: str = "serial",
    max_workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    comm_groups: Mapping[str, Sequence[int]] | None = None,
    comm_groups_path: str | None = None,
) -> TraceSetSummary:
    """:func:`summarize_traceset` over rank files, one rank in memory at a time per worker.

    Args:
        pairs: ``(rank, path)`` of every rank file (see :func:`tracekit.sets.io.trace_paths`).
        executor, max_workers: as :func:`tracekit.parallel.parallel_map`.
        progress: called as ``progress(done, total)`` after each rank (see :func:`tracekit.parallel.parallel_map`).
        comm_groups: groups of an ASTRA-sim comm-group file (``comm_groups_path``) added to the declared ones.

    Raises:
        TraceFormatError: a file cannot be read or decoded.
        ValidationError: a ``process_group:init`` value cannot be parsed, a group names a rank outside the world,
            or the comm-group file declares a group with other ranks than the traces.
        ConfigError: an unknown executor.
    """
    from tracekit.model.groups import resolve_groups
    from tracekit.parallel import parallel_map

    results = parallel_map(
        _summarize_file, [(r, str(p)) for r, p in pairs], executor=executor, max_workers=max_workers, progress=progress
    )
    declared: dict[str, tuple[int, ...]] = {}
    descs: dict[str, str] = {}
    for _, file_groups, file_descs in results:
        declared.update(file_groups)
        descs.update(file_descs)
    if comm_groups:
        from tracekit.sets.comm_groups import merge_declared

        declared = merge_declared(declared, comm_groups, comm_groups_path)
    world = max([s.rank or 0 for s, _, _ in results] + [max(r) for r in declared.values() if r], default=-1) + 1
    groups = {k: list(v) for k, v in resolve_groups(declared, world).items()}
    return TraceSetSummary(
        ranks=len(results), process_groups=groups, per_rank=[s for s, _, _ in results], process_group_descs=descs
    )
