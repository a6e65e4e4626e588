"""Selection transforms: keep one iteration, drop CPU-only nodes, keep a rank subset, remove nodes.

* :class:`KeepIteration` -- the nodes of one training step, marked by a node
  named ``ProfilerStep#N`` (what ``torch.profiler`` records per step) or by
  another marker name template;
* :class:`DropCpuOps` -- host-only COMP nodes (``is_cpu_op`` true) removed;
* :class:`RemoveNodes` -- nodes selected by name pattern and/or node type removed;
* :class:`KeepRanks` -- a subset of ranks, renumbered 0..k-1, groups cut to it.

Removal keeps the order the removed nodes imposed through bypass edges
(:mod:`tracekit.transforms.bypass`); the iteration cut drops the edges to
other iterations instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tracekit.model.attrs import COMM_DST, COMM_SRC, IS_CPU_OP
from tracekit.errors import ConfigError, TransformError
from tracekit.model.groups import PG_INIT_NAME, canonical_pg_name, is_pg_init
from tracekit.model import ExecutionTrace, Node, NodeType
from tracekit.transforms.base import Transform, copy_metadata, map_traces
from tracekit.transforms.bypass import drop_dangling, remove_nodes


def _node_types(names: tuple[str, ...] | None) -> frozenset[NodeType] | None:
    if names is None:
        return None
    out = set()
    for name in names:
        key = str(name).upper()
        if not key.endswith("_NODE"):
            key += "_NODE"
        try:
            out.add(NodeType[key])
        except KeyError:
            raise ConfigError(
                f"unknown node type {name!r}; choose from {', '.join(t.name for t in NodeType)}"
            ) from None
    return frozenset(out)


def _compile(pattern: str | None) -> re.Pattern | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"bad name pattern {pattern!r}: {exc}") from None


# ----------------------------------------------------------------------------- one iteration
@dataclass(frozen=True)
class KeepIteration(Transform):
    """Keep the nodes of one iteration.

    The iteration starts at the node named ``marker.format(n=iteration)``
    (default ``ProfilerStep#N``).  Kept: every node from the marker up to the
    next marker node in file order (PyTorch's ET lists a step's ops,
    including the autograd thread's backward roots, in that window), the
    marker's control-dependency subtree, device nodes (``is_cpu_op`` false)
    whose measured start lies between the marker's start and the next
    marker's, and the ``process_group:init`` node.  Dependencies on nodes of
    other iterations are dropped.

    Raises (from :meth:`apply`):
        TransformError: a rank has no marker node for ``iteration``; the
            message lists the markers it has (or says none was found).
    """

    iteration: int
    marker: str = "ProfilerStep#{n}"

    def __post_init__(self) -> None:
        if isinstance(self.iteration, bool) or not isinstance(self.iteration, int) or self.iteration < 0:
            raise ConfigError(f"iteration must be an integer >= 0, got {self.iteration!r}")
        if "{n}" not in self.marker:
            raise ConfigError(f"marker {self.marker!r} must contain {{n}} (the iteration number)")
        try:
            self.marker.format(n=0)
        except (IndexError, KeyError, ValueError, AttributeError):
            raise ConfigError(
                f"marker {self.marker!r}: {{n}} is the only field it may hold (write {{{{ and }}}} for braces)"
            ) from None

    def apply(self, traceset):
        """Every rank cut to iteration ``iteration`` (class docstring); ranks and groups unchanged.

        Raises:
            TransformError: a rank has no marker for ``iteration`` (names the rank and the markers it has).
            ValidationError: ``is_cpu_op`` breaks the bool rule (read when markers carry start times).
        """
        return map_traces(traceset, self._one)

    def _one(self, trace: ExecutionTrace) -> ExecutionTrace:
        prefix, _, suffix = self.marker.partition("{n}")
        pat = re.compile(re.escape(prefix) + r"(\d+)" + re.escape(suffix) + r"$")
        nodes = trace.nodes
        markers = [(i, int(m.group(1))) for i, n in enumerate(nodes) if (m := pat.match(n.name))]
        want = [i for i, k in markers if k == self.iteration]
        if not want:
            have = sorted({k for _, k in markers})
            what = (
                f"it has {prefix}N markers for N in {have}"
                if have
                else f"no node is named like {self.marker.replace('{n}', 'N')!r} (the iteration annotation is missing)"
            )
            raise TransformError(f"no iteration {self.iteration}: {what}", rank=trace.rank, path=trace.path)
        lo = want[0]
        later = [i for i, _ in markers if i > lo]
        hi = later[0] if later else len(nodes)
        keep: set[int] = {nodes[i].id for i in range(lo, hi)}
        # control subtree of the marker
        children: dict[int, list[int]] = {}
        for n in nodes:
            for p in n.ctrl_deps:
                children.setdefault(p, []).append(n.id)
        stack = [nodes[lo].id]
        while stack:
            for c in children.get(stack.pop(), ()):
                if c not in keep:
                    keep.add(c)
                    stack.append(c)
        t0 = nodes[lo].start_time_ns
        if t0 > 0:
            t1 = nodes[hi].start_time_ns if hi < len(nodes) and nodes[hi].start_time_ns > 0 else None
            for n in nodes:
                if n.is_cpu_op is not True and n.start_time_ns >= t0 and (t1 is None or n.start_time_ns < t1):
                    keep.add(n.id)
        return drop_dangling(trace, lambda n: n.id in keep or is_pg_init(n))


# ----------------------------------------------------------------------------- node removal
@dataclass(frozen=True)
class DropCpuOps(Transform):
    """Remove host-only COMP nodes (``is_cpu_op`` true), keeping the order they imposed (bypass edges).

    Communication, metadata and device nodes stay.
    """

    def apply(self, traceset):
        """Every rank without its host-only COMP nodes (bypass edges keep their order).

        Raises:
            ValidationError: ``is_cpu_op`` breaks the bool rule (e.g. the integer 5; names the node).
        """

        def one(t: ExecutionTrace) -> ExecutionTrace:
            from tracekit.transforms.colscale import is_encoded
            from tracekit.transforms.colselect import remove_rows

            if is_encoded(t):
                cols = t.columns()
                out = remove_rows(t, (cols.types == int(NodeType.COMP_NODE)) & IS_CPU_OP.column(cols)[1])
                if out is not None:
                    return out
            return remove_nodes(t, lambda n: n.type == NodeType.COMP_NODE and n.is_cpu_op is True)

        return map_traces(traceset, one)


@dataclass(frozen=True)
class RemoveNodes(Transform):
    """Remove nodes whose name matches ``name_pattern`` (``re.search``) and/or whose type is in ``node_types``.

    Both given: a node must match both.  Dependencies through removed nodes
    are kept (bypass edges).  The ``process_group:init`` node is never removed.

    Raises:
        ConfigError: neither criterion given, a bad pattern or an unknown type name.
    """

    name_pattern: str | None = None
    node_types: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.name_pattern is None and self.node_types is None:
            raise ConfigError("RemoveNodes needs a name pattern or node types")
        _compile(self.name_pattern)
        _node_types(self.node_types)

    def apply(self, traceset):
        """Every rank without the selected nodes (class docstring); dependencies through them become bypass edges."""
        pat, types = _compile(self.name_pattern), _node_types(self.node_types)

        def drop(n: Node) -> bool:
            if PG_INIT_NAME in n.name:
                return False
            return (pat is None or pat.search(n.name) is not None) and (types is None or n.type in types)

        def one(t: ExecutionTrace) -> ExecutionTrace:
            from tracekit.transforms.colscale import is_encoded, name_matches
            from tracekit.transforms.colselect import remove_rows

            if is_encoded(t):
                cols = t.columns()
                sel = name_matches(cols, pat) & ~name_matches(cols, re.compile(re.escape(PG_INIT_NAME)))
                if types is not None:
                    sel &= np.isin(cols.types, [int(x) for x in types])
                out = remove_rows(t, sel)
                if out is not None:
                    return out
            return remove_nodes(t, drop)

        return map_traces(traceset, one)


# ----------------------------------------------------------------------------- rank subset
def parse_rank_list(text: str) -> tuple[int, ...]:
    """Ranks from ``"0-7"``, ``"0,2,4"`` or ``"0-3,8-11"``.

    Raises:
        ConfigError: malformed text, a range ending before it starts, or a rank past ``MAX_RANKS - 1``.
    """
    from tracekit.model.node import MAX_RANKS

    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not m:
            raise ConfigError(f"bad rank list {text!r}: expected e.g. 0-7 or 0,2,4")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ConfigError(f"bad rank range {part!r} in {text!r}: end before start")
        if hi >= MAX_RANKS or len(out) + hi - lo >= MAX_RANKS:  # before a list of 10^11 ranks is built
            raise ConfigError(
                f"bad rank list {text!r}: rank {hi:,} is out of range (tracekit handles ranks 0 to {MAX_RANKS - 1:,})"
            )
        out.extend(range(lo, hi + 1))
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class KeepRanks(Transform):
    """Keep a subset of ranks, renumbered ``0..k-1`` in the order given (sorted).

    Process groups are cut to the kept ranks and renamed to their numbers in
    the new world.  A collective whose group loses members is kept on the
    smaller group (``partial="shrink"``, a what-if on the sub-job) or refused
    (``partial="error"``); a group left with one member makes its
    collectives local no-ops that are removed.  Sends and receives whose peer
    is dropped are removed (bypass edges).

    Raises:
        ConfigError: empty or bad rank list, bad ``partial``.
        TransformError: a rank is not in the trace set; ``partial="error"``
            and a collective's group is cut.
    """

    ranks: tuple[int, ...]
    partial: str = "shrink"

    def __post_init__(self) -> None:
        ranks = parse_rank_list(self.ranks) if isinstance(self.ranks, str) else tuple(self.ranks)
        if not ranks:
            raise ConfigError("KeepRanks needs at least one rank")
        for r in ranks:
            if isinstance(r, bool) or not isinstance(r, int) or r < 0:
                raise ConfigError(f"ranks must be integers >= 0, got {r!r}")
        if self.partial not in ("shrink", "error"):
            raise ConfigError(f"partial must be 'shrink' or 'error', got {self.partial!r}")
        object.__setattr__(self, "ranks", tuple(sorted(set(ranks))))

    def apply(self, traceset):
        """The kept ranks as a new :class:`~tracekit.sets.traceset.TraceSet` of ``len(ranks)`` ranks (class doc).

        Raises:
            TransformError: a rank is not in ``traceset``; ``partial="error"`` and a collective's group is cut.
        """
        from tracekit.sets.traceset import TraceSet

        cut = self.cut(traceset.ranks, traceset.process_groups)
        out = {new: self.rank_trace(traceset[old], old, cut) for old, new in cut.new_of.items()}
        return TraceSet(out, cut.new_groups)

    def cut(self, ranks: "list[int] | tuple[int, ...]", groups: dict[str, tuple[int, ...]]) -> "RankCut":
        """The renumbering and the cut groups of a job with ``ranks`` and process ``groups`` (no trace read).

        Raises:
            TransformError: a kept rank is not among ``ranks``.
        """
        missing = [r for r in self.ranks if r not in set(ranks)]
        if missing:
            raise TransformError(f"ranks {missing} are not in the trace set (it has ranks {min(ranks)}..{max(ranks)})")
        new_of = {old: new for new, old in enumerate(self.ranks)}
        cut = {name: tuple(new_of[r] for r in members if r in new_of) for name, members in groups.items()}
        world = len(self.ranks)
        new_groups = {
            name: () if len(members) == world and name == "0" else members for name, members in cut.items() if members
        }
        return RankCut(new_of, dict(groups), cut, new_groups)

    def rank_trace(self, trace: ExecutionTrace, old: int, cut: "RankCut") -> ExecutionTrace:
        """Old rank ``old``'s ``trace`` as new rank ``cut.new_of[old]`` (what :meth:`apply` does per rank).

        Raises:
            TransformError: ``partial="error"`` and a collective's group is cut (names the rank and node).
        """
        from tracekit.model.groups import pg_init_node

        new_of = cut.new_of
        nodes = []
        drop: set[int] = set()
        for n in trace.nodes:
            if is_pg_init(n):
                nodes.append(pg_init_node(n.id, dict(cut.new_groups)))
                continue
            if n.type == NodeType.COMM_COLL_NODE:
                key = canonical_pg_name(n.pg_name)
                full, kept = cut.groups.get(key, ()), cut.cut.get(key, ())
                if len(kept) < len(full) and self.partial == "error":
                    raise TransformError(
                        f"collective {n.name!r} on group {key!r} {list(full)} loses ranks outside the kept subset",
                        rank=old,
                        node_id=n.id,
                    )
                if len(kept) <= 1:
                    drop.add(n.id)
                nodes.append(n)
            elif n.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
                src, dst = n.comm_src, n.comm_dst
                if (src is not None and src not in new_of) or (dst is not None and dst not in new_of):
                    drop.add(n.id)
                    nodes.append(n)
                    continue
                c = n.replace()
                if src is not None:
                    c = c.with_attr(COMM_SRC, new_of[src])
                if dst is not None:
                    c = c.with_attr(COMM_DST, new_of[dst])
                nodes.append(c)
            else:
                nodes.append(n)
        t = ExecutionTrace(nodes, copy_metadata(trace.metadata), rank=new_of[old])
        return remove_nodes(t, drop)


@dataclass(frozen=True)
class RankCut:
    """What :class:`KeepRanks` does to the job as a whole (:meth:`KeepRanks.cut`).

    Attributes:
        new_of: old rank -> new rank (``0..k-1`` in the order of the old ranks).
        groups: the old process groups (name -> old ranks).
        cut: name -> the new ranks of the group's kept members (possibly empty).
        new_groups: the groups of the new job (kept members >= 1; the world group ``"0"`` as ``()`` when whole).
    """

    new_of: dict[int, int]
    groups: dict[str, tuple[int, ...]]
    cut: dict[str, tuple[int, ...]]
    new_groups: dict[str, tuple[int, ...]]


__all__ = ["DropCpuOps", "KeepIteration", "KeepRanks", "RankCut", "RemoveNodes", "parse_rank_list"]
