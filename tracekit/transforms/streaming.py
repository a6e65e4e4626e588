"""Streaming passes over one rank file: validate and transform a `.et` file larger than memory.

Both passes read the file once with :func:`tracekit.wire.stream.iter_nodes` (one node
decoded at a time) and keep only compact per-file state:

* the ids seen so far in an :class:`IdSet` (a bitmap over the id range, 1 bit
  per possible id, while ids are dense; a sorted ``uint64`` array with a
  small insertion buffer once they are not), so memory is about
  ``max_id / 8`` bytes, not the file size;
* per check, at most :data:`tracekit.checks.validate.MAX_PER_CHECK` issues plus a count.

What a single pass can and cannot decide.  Dependencies that point to
*earlier* nodes (the file is in topological order, as every writer of ours
and Chakra's converter produce) are checked on the spot, and then the graph
is acyclic by construction.  A dependency on an id not seen yet is either a
forward reference or dangling; it is remembered (up to ``max_pending`` of
them) and resolved at the end of the file against all ids.  If there were
forward references, the cycle check needs the whole graph: the report says
so (check ``cycle``, a warning) instead of guessing.

Transforms (:func:`transform_stream`) that can stream:

==================================  =========================================================
``ScaleCompute``, ``ScaleComm``,    per-node maps: each node is rewritten on its own
``Retarget``                        (applied to chunks of nodes)
``DropCpuOps``, ``RemoveNodes``     node removal with bypass edges (:mod:`tracekit.transforms.bypass`):
                                    streamable when dependencies point to earlier nodes; the
                                    bypass of each removed node is kept (memory grows with the
                                    removed nodes, not with the file)
``Pipeline`` of the above           stage after stage, node by node
==================================  =========================================================

Not streamable, because they need the whole graph or the whole job:
``Compact`` (chain merging and transitive reduction look both ways),
``KeepIteration`` (finds iteration boundaries first), ``KeepRanks`` and
``Rescale`` (rewrite ranks, groups and peers of the whole job).  They raise
:class:`~tracekit.errors.TransformError` saying to run without streaming.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence, cast

import numpy as np

from tracekit.errors import TracekitError, TransformError
from tracekit.model import ExecutionTrace, Node, NodeType
from tracekit.checks.validate import ERROR, MAX_PER_CHECK, WARNING, Issue, ValidationReport, comm_issues

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.transforms.base import Transform
    from tracekit.transforms.pipeline import Pipeline

#: Transforms applied node by node (class names in tracekit.transforms).
MAP_TRANSFORMS = ("ScaleCompute", "ScaleComm", "Retarget")
#: Transforms that remove nodes with bypass edges.
REMOVE_TRANSFORMS = ("DropCpuOps", "RemoveNodes")
STREAMABLE_TRANSFORMS = MAP_TRANSFORMS + REMOVE_TRANSFORMS + ("Pipeline",)
DEFAULT_MAX_PENDING = 1_000_000
CHUNK_NODES = 4096


# ----------------------------------------------------------------------------- id set
class IdSet:
    """A set of uint64 node ids with small memory for the usual dense ids.

    Bitmap mode: bit ``i`` set when id ``i`` was added; grows by doubling.
    When an id would need a bitmap larger than ``64 x (ids added) + 2^23``
    bits (ids are sparse, e.g. hashes), the set switches to a sorted uint64
    array (8 bytes per id) with an insertion buffer merged when it reaches an
    eighth of the array (amortised O(n log n) over all insertions).
    """

    __slots__ = ("_bits", "_count", "_sorted", "_buffer")

    def __init__(self) -> None:
        self._bits: bytearray | None = bytearray(1 << 17)
        self._count = 0
        self._sorted = np.empty(0, dtype=np.uint64)
        self._buffer: set[int] = set()

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        """Memory held by the structure (bitmap or arrays), bytes."""
        if self._bits is not None:
            return len(self._bits)
        return self._sorted.nbytes + 72 * len(self._buffer)

    def __contains__(self, node_id: int) -> bool:
        bits = self._bits
        if bits is not None:
            byte = node_id >> 3
            return byte < len(bits) and bool(bits[byte] & (1 << (node_id & 7)))
        if node_id in self._buffer:
            return True
        s = self._sorted
        i = int(np.searchsorted(s, np.uint64(node_id)))
        return i < len(s) and int(s[i]) == node_id

    def add(self, node_id: int) -> bool:
        """Add ``node_id``; False when it was already there."""
        if node_id in self:
            return False
        self._count += 1
        bits = self._bits
        if bits is not None:
            byte = node_id >> 3
            if byte >= len(bits):
                need = byte + 1
                if need * 8 > 64 * self._count + (1 << 23):
                    self._to_sorted()
                    self._buffer.add(node_id)
                    self._maybe_merge()
                    return True
                bits.extend(bytes(max(need, 2 * len(bits)) - len(bits)))
            bits[byte] |= 1 << (node_id & 7)
            return True
        self._buffer.add(node_id)
        self._maybe_merge()
        return True

    def _to_sorted(self) -> None:
        assert self._bits is not None  # called only while the set is a bitmap
        bits = np.unpackbits(np.frombuffer(bytes(self._bits), dtype=np.uint8), bitorder="little")
        self._sorted = np.flatnonzero(bits).astype(np.uint64)
        self._bits = None

    def _maybe_merge(self) -> None:
        if len(self._buffer) * 8 >= max(len(self._sorted), 1 << 14):
            self._sorted = np.union1d(self._sorted, np.fromiter(self._buffer, dtype=np.uint64, count=len(self._buffer)))
            self._buffer.clear()


# ----------------------------------------------------------------------------- validation
class _Capped:
    """Issues of one check: the first ``MAX_PER_CHECK`` kept, the rest counted."""

    def __init__(self) -> None:
        self.items: list[tuple[int, Issue]] = []  # (position, issue)
        self.count = 0

    def add(self, pos: int, issue: Issue) -> None:
        """Keep ``issue`` (found at node position ``pos``) among the first ones of its check."""
        self.count += 1
        self.items.append((pos, issue))
        if len(self.items) > 4 * MAX_PER_CHECK:
            self._trim()

    def _trim(self) -> None:
        self.items.sort(key=lambda pi: pi[0])
        del self.items[MAX_PER_CHECK:]

    def emit(self, report: ValidationReport, check: str, path: str | None, rank: int | None) -> None:
        """Add the kept issues to ``report`` in file order, plus one line counting the rest."""
        self._trim()
        report.add(*(issue for _, issue in self.items))
        if self.count > MAX_PER_CHECK:
            rest = self.count - MAX_PER_CHECK
            report.add(Issue(check, self.items[0][1].severity, f"... {rest:,} more like this", path, rank, count=rest))


def validate_stream(
    path: str | os.PathLike[str], *, rank: int | None = None, max_pending: int = DEFAULT_MAX_PENDING
) -> ValidationReport:
    """Validate one `.et`/`.et.gz` file in a single streaming pass with bounded memory.

    Runs the per-trace checks of :func:`tracekit.checks.validate.validate_trace`
    (``unique-ids``, ``dangling-dep``, ``node-type``, ``negative-duration``,
    ``cycle``, ``comm-attrs``) with the same messages, so a file whose
    dependencies point to earlier nodes gets the same report both ways.
    See the module docstring for forward references.

    Args:
        path: the file (rank parsed from ``<prefix>.<rank>.et`` unless given).
        max_pending: most dependencies on not-yet-seen ids remembered for the
            end-of-file check; beyond it the report says the file needs a
            full pass (check ``dangling-dep``, error).

    Returns:
        The report; ``checked_nodes`` counts the nodes read.

    Raises:
        TraceFormatError: a bad record (as :func:`tracekit.wire.stream.iter_nodes`).
    """
    from tracekit.wire.stream import iter_nodes
    from tracekit.wire.framing import rank_from_path

    spath = os.fspath(path)
    scan = _StreamScan(spath, rank if rank is not None else rank_from_path(spath), max_pending)
    for pos, node in enumerate(iter_nodes(spath)):
        scan.visit(pos, node)
    return scan.report()


class _StreamScan:
    """What :func:`validate_stream` gathers node by node, and the report made of it at the end."""

    def __init__(self, path: str, rank: int | None, max_pending: int) -> None:
        self.path, self.rank, self.max_pending = path, rank, max_pending
        self.seen = IdSet()
        self.dup, self.dangling, self.ctrl_dangling, self.types, self.negative, self.comm = (
            _Capped() for _ in range(6)
        )
        self.duplicate_ids: set[int] = set()
        # forward (or dangling) deps: owner position, dep id, owner id, is_data
        self.pending: tuple[list[int], list[int], list[int], list[bool]] = ([], [], [], [])
        self.overflow = 0
        self.n = 0

    def visit(self, pos: int, node: Node) -> None:
        """Check one node (``pos``: its position in the file)."""
        spath, rank, seen = self.path, self.rank, self.seen
        self.n += 1
        nid = node.id
        for is_data, deps in ((True, node.data_deps), (False, node.ctrl_deps)):
            for d in deps:
                if d in seen:
                    continue
                if len(self.pending[0]) < self.max_pending:
                    for column, value in zip(self.pending, (pos, d, nid, is_data)):
                        column.append(value)  # type: ignore[attr-defined]
                else:
                    self.overflow += 1
        if not seen.add(nid) and nid not in self.duplicate_ids:
            self.duplicate_ids.add(nid)
            self.dup.add(nid, Issue("unique-ids", ERROR, f"duplicate node id {nid}", spath, rank, nid))
        t = int(node.type)
        if t < 0 or t > max(NodeType):
            self.types.add(pos, Issue("node-type", ERROR, f"unknown node type {t}", spath, rank, nid))
        if node.duration_ns < 0:
            self.negative.add(
                pos, Issue("negative-duration", ERROR, f"negative duration {node.duration_ns} ns", spath, rank, nid)
            )
        if NodeType.COMM_SEND_NODE <= t <= NodeType.COMM_COLL_NODE:
            for issue in comm_issues(nid, t, node.get_attr, spath, rank):
                self.comm.add(pos, issue)

    def _resolve_pending(self) -> int:
        """Sort the remembered dependencies into dangling ones; returns how many data deps point forward."""
        forward = 0
        spath, rank = self.path, self.rank
        for pos, d, owner, is_data in zip(*self.pending):
            if d in self.seen:
                forward += is_data
            elif is_data:
                self.dangling.add(pos, Issue("dangling-dep", ERROR, f"data dep {d} does not exist", spath, rank, owner))
            else:
                self.ctrl_dangling.add(
                    pos, Issue("dangling-dep", WARNING, f"ctrl dep {d} does not exist", spath, rank, owner)
                )
        return forward

    def report(self) -> ValidationReport:
        """The report, checks in the order of :func:`tracekit.checks.validate.validate_trace`."""
        spath, rank = self.path, self.rank
        forward = self._resolve_pending()
        report = ValidationReport(checked_ranks=1, checked_nodes=self.n)
        self.dup.emit(report, "unique-ids", spath, rank)
        both = _Capped()
        for cap in (self.dangling, self.ctrl_dangling):
            for pos, issue in cap.items:
                both.add(pos, issue)
            both.count += cap.count - len(cap.items)
        if both.count:
            # data before ctrl as in validate_trace: keep each group's own order
            both.items.sort(key=lambda pi: (pi[1].severity != ERROR, pi[0]))
            report.add(*(issue for _, issue in both.items[:MAX_PER_CHECK]))
            if both.count > MAX_PER_CHECK:
                rest = both.count - MAX_PER_CHECK
                report.add(
                    Issue(
                        "dangling-dep",
                        both.items[0][1].severity,
                        f"... {rest:,} more like this",
                        spath,
                        rank,
                        count=rest,
                    )
                )
        if self.overflow:
            report.add(
                Issue(
                    "dangling-dep",
                    ERROR,
                    f"{self.overflow:,} dependencies on later or missing nodes beyond the "
                    f"{self.max_pending:,} a streaming pass remembers; validate this file with a full pass "
                    f"(without --stream)",
                    spath,
                    rank,
                )
            )
        self.types.emit(report, "node-type", spath, rank)
        self.negative.emit(report, "negative-duration", spath, rank)
        if forward or self.overflow:
            report.add(
                Issue(
                    "cycle",
                    WARNING,
                    f"{forward:,} data dependencies point to later nodes, so a streaming pass cannot rule "
                    f"out cycles; run a full validation (without --stream) for the cycle check",
                    spath,
                    rank,
                )
            )
        self.comm.emit(report, "comm-attrs", spath, rank)
        return report


# ----------------------------------------------------------------------------- transforms
@dataclass(frozen=True)
class StreamStats:
    """What a streaming transform did: nodes read, written and removed; output path."""

    path: Path
    nodes_in: int
    nodes_out: int
    nodes_removed: int


def streamable(transform: "Transform") -> bool:
    """Whether :func:`transform_stream` can run ``transform`` (see module docstring)."""
    return all(type(step).__name__ in MAP_TRANSFORMS + REMOVE_TRANSFORMS for step in _stages(transform))


def _chunks(nodes: Iterable[Node], size: int) -> Iterator[list[Node]]:
    buf: list[Node] = []
    for node in nodes:
        buf.append(node)
        if len(buf) >= size:
            yield buf
            buf = []
    if buf:
        yield buf


def _apply_chunk(transform: "Transform", chunk: list[Node], rank: int) -> Sequence[Node]:
    from tracekit.sets.traceset import TraceSet

    out = transform.apply(TraceSet({rank: ExecutionTrace(chunk, rank=rank)}, {}))
    return out[rank].nodes


def _map_stage(nodes: Iterable[Node], transform: "Transform", rank: int) -> Iterator[Node]:
    for chunk in _chunks(nodes, CHUNK_NODES):
        yield from _apply_chunk(transform, chunk, rank)


def _remove_stage(
    nodes: Iterable[Node], transform: "Transform", rank: int, counter: list[int], where: dict[str, Any]
) -> Iterator[Node]:
    """Node removal with bypass edges, one pass (same output as tracekit.transforms.bypass.remove_nodes).

    Which nodes go is decided by the transform itself on each chunk (nodes
    missing from its output); dependencies are then rewired here.
    """
    kept = IdSet()
    removed: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}

    def resolve(deps: list[int], self_id: int, kind: str) -> list[int]:
        """``deps`` with removed nodes replaced by their bypass, duplicates and ``self_id`` dropped."""
        out: dict[int, None] = {}
        for d in deps:
            if d in kept:
                out[d] = None
            elif d in removed:
                out.update(dict.fromkeys(removed[d][0 if kind == "data" else 1]))
            elif d != self_id:
                raise TransformError(
                    f"{kind} dep {d} names no earlier node (a later or missing one): streaming "
                    f"{type(transform).__name__} needs dependencies that point to earlier nodes; run it "
                    f"without streaming",
                    path=where.get("path"),
                    rank=rank,
                    node_id=self_id,
                )
        out.pop(self_id, None)
        return list(out)

    for chunk in _chunks(nodes, CHUNK_NODES):
        stripped = [
            Node(n.id, n.name, n.type, [], [], n.start_time_ns, n.duration_ns, n.inputs, n.outputs, n.attrs)
            for n in chunk
        ]
        stays = {n.id for n in _apply_chunk(transform, stripped, rank)}
        for node in chunk:
            nid = node.id
            if nid not in stays:
                removed[nid] = (
                    tuple(resolve(node.data_deps, nid, "data")),
                    tuple(resolve(node.ctrl_deps, nid, "ctrl")),
                )
                counter[0] += 1
                continue
            data_ok = all(d in kept or d == nid for d in node.data_deps)
            ctrl_ok = all(d in kept or d == nid for d in node.ctrl_deps)
            if not (data_ok and ctrl_ok):
                node = node.replace(
                    data_deps=resolve(node.data_deps, nid, "data"), ctrl_deps=resolve(node.ctrl_deps, nid, "ctrl")
                )
            kept.add(nid)
            yield node


def _stages(transform: "Transform") -> list["Transform"]:
    """The steps of ``transform``, nested Pipelines flattened (matched by class name: no import of the transforms)."""
    if type(transform).__name__ != "Pipeline":
        return [transform]
    return [leaf for step in cast("Pipeline", transform).steps for leaf in _stages(step)]


def transform_stream(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], transform: "Transform", *, rank: int | None = None
) -> StreamStats:
    """Apply a streamable transform to one rank file, node by node, writing ``dst`` atomically.

    The output holds the same nodes, in the same order, as
    ``transform.apply`` on the whole trace would give (for removals: when
    dependencies point to earlier nodes), and its metadata carries the
    ``tracekit_provenance`` record (:func:`tracekit.transforms.base.stamp_provenance`)
    with ``src`` as input.

    Raises:
        TransformError: the transform cannot stream (names it and says why),
            or a removal meets a dependency on a later node.
        TraceFormatError: a bad input record.
    """
    from tracekit.output import atomic_output
    from tracekit.wire.io import encode_metadata, encode_node
    from tracekit.wire.stream import iter_nodes, read_metadata
    from tracekit.wire.framing import rank_from_path
    from tracekit.transforms.base import stamp_provenance
    from tracekit.sets.traceset import TraceSet

    spath = os.fspath(src)
    rank = rank if rank is not None else (rank_from_path(spath) or 0)
    from tracekit.output import note_input

    note_input(spath)
    stages = _stages(transform)
    bad = [type(s).__name__ for s in stages if type(s).__name__ not in MAP_TRANSFORMS + REMOVE_TRANSFORMS]
    if bad:
        raise TransformError(
            f"{', '.join(bad)} cannot stream (it needs the whole graph or job); streamable: "
            f"{', '.join(STREAMABLE_TRANSFORMS)}; run it without streaming",
            path=spath,
            rank=rank,
        )
    steps = [s.describe() for s in stages]
    metadata = read_metadata(spath)
    stamped = stamp_provenance(TraceSet({rank: ExecutionTrace([], metadata, rank=rank)}, {}), steps, spath)
    metadata = stamped[rank].metadata

    counts = [0]  # nodes read
    where = {"path": spath}

    def source() -> Iterator[Node]:
        for node in iter_nodes(spath):
            counts[0] += 1
            yield node

    removed = [0]
    nodes: Iterable[Node] = source()
    for stage in stages:
        if type(stage).__name__ in MAP_TRANSFORMS:
            nodes = _map_stage(nodes, stage, rank)
        else:
            nodes = _remove_stage(nodes, stage, rank, removed, where)
    written = 0
    with atomic_output(dst, "wb") as fh:
        fh.write(encode_metadata(metadata))
        for node in nodes:
            try:
                fh.write(encode_node(node))
            except TracekitError as exc:
                raise exc.with_context(rank=rank, path=spath) from None
            written += 1
    return StreamStats(Path(dst), counts[0], written, removed[0])


__all__ = [
    "IdSet",
    "MAP_TRANSFORMS",
    "REMOVE_TRANSFORMS",
    "STREAMABLE_TRANSFORMS",
    "StreamStats",
    "streamable",
    "transform_stream",
    "validate_stream",
]
