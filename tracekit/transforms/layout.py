"""Rewriting one rank's trace into a resized rank grid (groups, peers, group declarations).

A job's ranks form a grid ``tp x cp x dp x pp`` in Megatron-LM order
(:class:`tracekit.workloads.grid.Grid`).  The grid of a generated trace comes from its ``llm_config`` metadata
(the generator's configuration JSON, ``parallel.{tp,cp,dp,pp}``); a job whose
only process group is all ranks (a plain data-parallel job, e.g. a converted
DDP run) is ``dp = world``.

When a grid dimension is resized, each *new* rank copies the trace of a
*template* old rank (same coordinates, the resized one taken modulo the old
size or, for layer-structured rewrites, chosen by the caller) and its
communication is re-pointed:

* a process group is a product of per-dimension coordinate sets; each set is
  mapped on its own: the template's own coordinate -> the new rank's, the
  whole dimension -> the whole new dimension, the first and last pipeline
  stage (tied-embedding group) -> the new first and last, an aligned block of
  ``e`` consecutive data-parallel ranks (expert-parallel group) -> the new
  rank's block, a stride-``e`` set (expert-data-parallel group) -> the new
  rank's residue class;
* a send/recv peer keeps its offset from the template on every dimension;
* new groups get names ``"1"``, ``"2"``... in sorted order of their members
  (``"0"`` = all ranks) and every rank's ``process_group:init`` declares them.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from tracekit.model.attrs import COMM_DST, COMM_SRC, PG_NAME
from tracekit.errors import TransformError
from tracekit.model.groups import DEFAULT_PG, canonical_pg_name, is_pg_init, pg_init_node
from tracekit.model import ExecutionTrace, Node, NodeType
from tracekit.transforms.base import AttrEdit, copy_metadata, edited_node
from tracekit.workloads.grid import DIMS, Grid

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.sets.traceset import TraceSet

__all__ = [
    "DIMS",
    "LLM_CONFIG_ATTR",
    "Grid",
    "GroupNames",
    "grid_of",
    "llm_config_of",
    "map_group",
    "map_peer",
    "regrid",
    "remap_nodes",
]
LLM_CONFIG_ATTR = "llm_config"


def llm_config_of(traceset: "TraceSet") -> dict[str, Any] | None:
    """The generator configuration stored in rank 0's metadata (``llm_config`` JSON), or None.

    Raises:
        TransformError: the attribute is not JSON, or has no ``parallel`` table.
    """
    return _llm_config(traceset[traceset.ranks[0]])


def _llm_config(trace: ExecutionTrace) -> dict[str, Any] | None:
    """``trace``'s ``llm_config`` metadata as a dict with a ``parallel`` table, or None when it has none.

    Raises:
        TransformError: the attribute is not JSON, or has no ``parallel`` table (names the rank and file).
    """
    raw = trace.metadata.get_attr(LLM_CONFIG_ATTR)
    if raw is None:
        return None
    try:
        cfg = json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        raise TransformError(
            f"metadata attribute {LLM_CONFIG_ATTR!r} is not JSON", rank=trace.rank, path=trace.path
        ) from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("parallel"), dict):
        raise TransformError(
            f"metadata attribute {LLM_CONFIG_ATTR!r} has no 'parallel' table", rank=trace.rank, path=trace.path
        )
    return cfg


def grid_of(traceset: "TraceSet") -> Grid:
    """The rank grid of a trace set (see module docstring).

    Raises:
        TransformError: no ``llm_config`` and process groups other than all
            ranks (the grid cannot be known), or a config that disagrees with
            the number of ranks.
    """
    cfg = llm_config_of(traceset)
    n = len(traceset)
    if cfg is not None:
        p = cfg["parallel"]
        grid = Grid(*(int(p.get(k, 1)) for k in DIMS))
        if grid.world_size != n or traceset.ranks != tuple(range(n)):
            raise TransformError(
                f"llm_config says tp {grid.tp} x cp {grid.cp} x dp {grid.dp} x pp {grid.pp} = "
                f"{grid.world_size} ranks but the trace set has {n} ranks"
            )
        return grid
    if traceset.ranks != tuple(range(n)):
        raise TransformError(f"ranks must be 0..{n - 1} to rewrite the world size, got {list(traceset.ranks)[:8]}...")
    world = tuple(range(n))
    others = {k: v for k, v in traceset.process_groups.items() if tuple(v) != world}
    if others:
        raise TransformError(
            f"the trace set has process groups other than all ranks ({', '.join(sorted(others)[:5])}) and no "
            f"{LLM_CONFIG_ATTR!r} metadata saying how ranks are laid out (tp/cp/dp/pp); the rank-grid "
            f"annotation is missing"
        )
    return Grid(dp=n)


def _map_set(dim: str, values: set[int], x: int, x_new: int, n_old: int, n_new: int) -> list[int]:
    if values == {x}:
        return [x_new]
    if values == set(range(n_old)):
        return list(range(n_new))
    if dim == "pp" and values == {0, n_old - 1} and x in values:
        return [0, n_new - 1]
    e = len(values)
    if dim == "dp" and n_old % e == 0:
        base = x - x % e
        if values == set(range(base, base + e)) and n_new % e == 0:
            nb = x_new - x_new % e
            return list(range(nb, nb + e))
        stride = n_old // e
        if values == set(range(x % stride, n_old, stride)) and n_new % stride == 0:
            return list(range(x_new % stride, n_new, stride))
    raise TransformError(
        f"cannot map a process group whose {dim} coordinates are {sorted(values)} (grid size {n_old} -> {n_new})"
    )


def map_group(
    members: Iterable[int], old: Grid, new: Grid, template: int, new_rank: int, *, whole_job: bool = False
) -> tuple[int, ...]:
    """The new group standing for old group ``members`` on ``new_rank`` (copied from ``template``).

    ``whole_job``: the grid was inferred because every group spans all ranks (no ``llm_config``), so the group
    is the whole new job. Per dimension, a one-rank job's group is both "all ranks" and "this rank"; read as
    the latter, a rescaled 1-rank capture gave each new rank a collective of its own.

    Raises:
        TransformError: the group is not a product of mappable per-dimension sets.
    """
    members = tuple(members)
    if whole_job:
        return _grid_ranks(new, tuple(tuple(range(n)) for n in new.sizes))
    coords = [old.coords(r) for r in members]
    x, xn = old.coords(template), new.coords(new_rank)
    sets = [set(c[i] for c in coords) for i in range(4)]
    if math.prod(len(s) for s in sets) != len(set(members)):
        raise TransformError(f"process group {list(members)[:8]} is not a sub-grid of tp x cp x dp x pp")
    mapped = [_map_set(DIMS[i], sets[i], x[i], xn[i], old.sizes[i], new.sizes[i]) for i in range(4)]
    return _grid_ranks(new, tuple(tuple(m) for m in mapped))


@functools.lru_cache(maxsize=4096)
def _grid_ranks(grid: Grid, coords: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """The sorted ranks of ``grid`` whose (tp, cp, dp, pp) coordinates lie in ``coords``' product: one tuple for
    the many new ranks that map a group onto the same members (a world group of N ranks is listed once, not N
    times: ``transform --dp 4096`` spent 42 of its 64 profiled seconds here)."""
    return tuple(sorted(grid.rank((t, c, d, s)) for t, c, d, s in itertools.product(*coords)))


_DIM_MEMBERS = {
    "tp": "tensor-parallel ranks",
    "cp": "context-parallel ranks",
    "dp": "data-parallel replicas",
    "pp": "pipeline stages",
}


def map_peer(peer: int, old: Grid, new: Grid, template: int, new_rank: int) -> int:
    """A send/recv peer: the same offset from the new rank as from the template, per dimension.

    Raises:
        TransformError: the peer falls outside the new grid.
    """
    p, x, xn = old.coords(peer), old.coords(template), new.coords(new_rank)

    def coord(i: int) -> int:
        if old.sizes[i] == new.sizes[i]:
            return (xn[i] + p[i] - x[i]) % new.sizes[i]
        v = xn[i] + p[i] - x[i]
        if not 0 <= v < new.sizes[i]:
            what = _DIM_MEMBERS[DIMS[i]]
            raise TransformError(
                f"peer rank {peer}: {DIMS[i]} cannot change from {old.sizes[i]} to {new.sizes[i]}: this send/recv pairs "
                f"{what} {x[i]} and {p[i]}, and new rank {new_rank} ({DIMS[i]} coordinate {xn[i]}) would pair with "
                f"{DIMS[i]} coordinate {v}, which a {DIMS[i]} of {new.sizes[i]} does not have (0..{new.sizes[i] - 1})"
            )
        return v

    return new.rank((coord(0), coord(1), coord(2), coord(3)))


class GroupNames:
    """Names for new groups: ``"0"`` for all ranks, then ``"1"``, ``"2"``... by sorted members."""

    def __init__(self, world_size: int, groups: Iterable[tuple[int, ...]]) -> None:
        world = tuple(range(world_size))
        self.world = world
        uniq = sorted({tuple(g) for g in groups if tuple(g) != world})
        self.names: dict[tuple[int, ...], str] = {world: DEFAULT_PG}
        for i, g in enumerate(uniq, start=1):
            self.names[g] = str(i)

    def name(self, members: tuple[int, ...]) -> str:
        """The name given to the group of ``members`` (KeyError for a group not registered)."""
        return self.names[tuple(members)]

    def mapping(self) -> dict[str, tuple[int, ...]]:
        """``{name: members}`` of every group, for a :class:`~tracekit.sets.traceset.TraceSet`."""
        return {name: members for members, name in self.names.items()}

    def declaration(self) -> dict[str, tuple[int, ...]]:
        """For ``pg_init_node``: the all-ranks group as ``()``."""
        return {name: (() if members == self.world else members) for members, name in self.names.items()}


def rank_groups(trace: ExecutionTrace, groups: Mapping[str, tuple[int, ...]]) -> set[str]:
    """Canonical names of the groups this rank's communication nodes use."""
    out = set()
    for n in trace.nodes:
        if n.is_comm and n.pg_name is not None:
            out.add(canonical_pg_name(n.pg_name))
    return out


def _p2p_edits(n: Node, peer_of: Callable[[int], int], new_rank: int) -> list[AttrEdit]:
    """A send's or recv's ``comm_src``/``comm_dst`` for ``new_rank``: its own side the rank, the peer mapped."""
    src, dst = n.comm_src, n.comm_dst
    own, peer = (src, dst) if n.type == NodeType.COMM_SEND_NODE else (dst, src)
    own_key, peer_key = (COMM_SRC, COMM_DST) if n.type == NodeType.COMM_SEND_NODE else (COMM_DST, COMM_SRC)
    edits: list[AttrEdit] = []
    if own is not None:
        edits.append((own_key, new_rank, None))
    if peer is not None:
        edits.append((peer_key, peer_of(peer), None))
    return edits


def remap_nodes(
    nodes: Iterable[Node],
    *,
    group_of: Mapping[str, str],
    peer_of: Callable[[int], int],
    new_rank: int,
    pg_init: Node | None,
) -> list[Node]:
    """Nodes with ``pg_name`` renamed through ``group_of``, send/recv peers through ``peer_of(old)``
    (own side set to ``new_rank``), and the ``process_group:init`` node replaced by ``pg_init``.

    Nodes that do not change are shared; changed ones are new nodes (the inputs are not edited).
    """
    out = []
    for n in nodes:
        if is_pg_init(n):
            if pg_init is not None:
                out.append(pg_init.replace(id=n.id, data_deps=list(n.data_deps), ctrl_deps=list(n.ctrl_deps)))
            continue
        if not n.is_comm:
            out.append(n)
            continue
        edits: list[AttrEdit] = []
        pg = n.pg_name
        if pg is not None:
            edits.append((PG_NAME, group_of[canonical_pg_name(pg)], "string_val"))
        if n.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
            try:
                edits += _p2p_edits(n, peer_of, new_rank)
            except TransformError as exc:
                exc.message = f"{'send to' if n.type == NodeType.COMM_SEND_NODE else 'recv from'} {exc.message}"
                raise exc.with_context(node_id=n.id) from None
        c = edited_node(n, edits)
        out.append(c)
    return out


def regrid(
    traceset: "TraceSet",
    old: Grid,
    new: Grid,
    template_of: Callable[[int], int],
    *,
    node_fn: Callable[[Node, int, int], Node | None] | None = None,
    config_update: Mapping[str, object] | None = None,
    whole_job: bool = False,
) -> "TraceSet":
    """Every rank of ``new`` as a copy of ``template_of(new_rank)`` (an old rank) with groups and peers re-pointed.

    Args:
        node_fn: optional ``node_fn(node, template, new_rank) -> Node | None``
            applied after re-pointing (None keeps the node; return a copy to change it).
        config_update: keys to change in the ``parallel`` table (and
            ``global_batch_size`` at top level) of the ``llm_config`` metadata.
        whole_job: every group spans all ranks (the grid was inferred: :func:`map_group`).

    Raises:
        TransformError: a group or peer cannot be mapped (names the rank).
    """
    from tracekit.sets.traceset import TraceSet

    old_groups = traceset.process_groups
    templates = {r: template_of(r) for r in range(new.world_size)}
    used: dict[int, set[str]] = {}
    for t in set(templates.values()):
        trace = traceset[t]
        used[t] = rank_groups(trace, old_groups) | {DEFAULT_PG}
    per_rank: dict[int, dict[str, tuple[int, ...]]] = {}
    all_new: set[tuple[int, ...]] = set()
    for r, t in templates.items():
        m = {}
        for name in used[t]:
            try:
                m[name] = map_group(old_groups[name], old, new, t, r, whole_job=whole_job)
            except TransformError as exc:
                raise exc.with_context(rank=t) from None
            except KeyError:
                raise TransformError(f"process group {name!r} is not declared", rank=t) from None
        per_rank[r] = m
        all_new.update(m.values())
    # keep groups nobody uses but that were declared (as mapped from rank templates) out: only used ones
    names = GroupNames(new.world_size, all_new)
    decl = pg_init_node(0, names.declaration())
    out = {}
    for r, t in templates.items():
        trace = traceset[t]
        gmap = {k: names.name(v) for k, v in per_rank[r].items()}
        try:
            nodes = remap_nodes(
                trace.nodes,
                group_of=gmap,
                peer_of=functools.partial(map_peer, old=old, new=new, template=t, new_rank=r),
                new_rank=r,
                pg_init=decl,
            )
        except TransformError as exc:
            raise exc.with_context(path=trace.path, rank=t) from None
        if len(names.names) > 1 and not any(is_pg_init(n) for n in nodes):
            nodes.insert(0, decl.replace(id=max((n.id for n in nodes), default=-1) + 1))
        if node_fn is not None:
            nodes = [node_fn(n, t, r) or n for n in nodes]
        md = copy_metadata(trace.metadata)
        if config_update:
            cfg = _llm_config(trace)  # the template's own record, checked as rank 0's is
            if cfg is not None:
                for k, v in config_update.items():
                    if k == "global_batch_size":
                        cfg[k] = v
                    else:
                        cfg["parallel"][k] = v
                md = md.with_attr(LLM_CONFIG_ATTR, json.dumps(cfg, sort_keys=True), "string_val")
        if md.get_attr("world_size") is not None:  # a converted capture's job size: the new job's (was kept)
            md = md.with_attr("world_size", new.world_size, "int64_val")
        out[r] = ExecutionTrace(nodes, md, rank=r)
    return TraceSet(out, names.mapping())
