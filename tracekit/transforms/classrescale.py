"""Transforms of rank-class sets without per-rank traces (issue 17): class-wise steps and :class:`Rescale`.

A class set (:mod:`tracekit.sets.classset`) stores one representative trace per class
of ranks and, per member, the values of a few *slots* (``pg_name``,
``comm_src``, ``comm_dst`` attributes that differ between members).  Class-wise
steps (:data:`tracekit.transforms.classwise.CLASSWISE_TRANSFORMS`) run on each representative.
:class:`~tracekit.transforms.rescale.Rescale` runs on the classes and the manifest:

1. the new grid, groups and per-rank group maps are computed from the old
   groups and the grids alone (:func:`~tracekit.transforms.layout.map_group`
   and :func:`~tracekit.transforms.layout.map_peer` per new rank: no trace);
2. new rank ``r`` copies old rank ``t(r)`` (as :class:`Rescale` does), so it
   joins the new class of ``t(r)``'s old class; the lowest such rank is the
   new representative, whose trace is the one trace regridded;
3. every renamable value ``u`` of the old representative (a group name, or a
   peer on its own or the far side of a send/recv) is followed through each
   member: its value in template ``t`` (the slot value, or ``u``) and then its
   mapped value for ``r``; values that differ between members become the new
   slots.

Refused (TransformError, the caller may expand the job instead): a value used
both as an own and a far peer, two values that map to one in the
representative but not in a member, or members whose ZeRO all-gathers do not
all span (or all not span) data-parallel replicas.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from tracekit.model.attrs import COMM_DST, COMM_SRC, PG_NAME
from tracekit.errors import TransformError
from tracekit.model.groups import DEFAULT_PG, canonical_pg_name, is_pg_init, pg_init_node
from tracekit.model import INT_KINDS, Attr, ExecutionTrace, NodeType
from tracekit.transforms.classstate import ClassState
from tracekit.transforms.layout import DIMS, GroupNames, Grid, LLM_CONFIG_ATTR, map_group, map_peer, remap_nodes
from tracekit.transforms.rescale import Rescale, _template, dp_spanning

_SEND, _RECV = NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE
#: ``progress(items, total) -> items``: wraps an iteration to show how far it got (a CLI progress bar).
Progress = Callable[[Iterable[int], int], Iterable[int]]


def load_classes(cs: Any) -> list[ClassState]:
    """The classes of a :class:`~tracekit.sets.classset.ClassSet`, representatives read from their files."""
    return [ClassState(cs.read_representative(c), c.ranks, c.slots, c.values) for c in cs.classes]


def write_classes(output: str | os.PathLike[str], world_size: int, classes: Iterable[ClassState]):
    """Write ``classes`` as a class set at prefix ``output``; returns the manifest path (see write_class_set)."""
    from tracekit.sets.classset import write_class_set
    from tracekit.wire.io import encode_trace

    def items():
        for c in classes:
            members = [
                (r, tuple(Attr(s.name, v, s.kind) for s, v in zip(c.slots, vals))) for r, vals in zip(c.ranks, c.values)
            ]
            yield encode_trace(c.trace), c.slots, members

    return write_class_set(output, world_size, items())


def _grid(cfg: dict | None, world_size: int, groups: dict[str, tuple[int, ...]]) -> Grid:
    """The rank grid of the job, as :func:`tracekit.transforms.layout.grid_of` decides it."""
    if cfg is not None:
        grid = Grid(*(int(cfg["parallel"].get(k, 1)) for k in DIMS))
        if grid.world_size != world_size:
            raise TransformError(f"llm_config says {grid.world_size} ranks but the class set has {world_size}")
        return grid
    world = tuple(range(world_size))
    if any(tuple(v) != world for v in groups.values()):
        raise TransformError(
            f"the class set has process groups other than all ranks and no {LLM_CONFIG_ATTR!r} "
            f"metadata saying how ranks are laid out (tp/cp/dp/pp)"
        )
    return Grid(dp=world_size)


def _renamables(trace: ExecutionTrace) -> dict[tuple[str, str | None, Any], str]:
    """``(name, kind, value) -> role`` of the representative's renamable values: ``"pg"``, ``"own"`` or ``"peer"``.

    Raises:
        TransformError: a peer value used both for the own side and the far side.
    """
    out: dict[tuple[str, str | None, Any], str] = {}
    for n in trace.nodes:
        if not n.is_comm or is_pg_init(n):
            continue
        for a in n.attrs:
            if a.name == PG_NAME:
                role = "pg"
            elif a.name in (COMM_SRC, COMM_DST) and n.type in (_SEND, _RECV):
                own = (a.name == COMM_SRC) == (n.type == _SEND)
                role = "own" if own else "peer"
            else:
                continue
            key = (a.name, a.kind, a.value)
            if out.setdefault(key, role) != role:
                raise TransformError(
                    f"{a.name} {a.value!r} is both an own and a far peer: the rescaled job cannot "
                    f"be kept as rank classes",
                    node_id=n.id,
                )
    return out


def _member_value(cls: ClassState, index: int, key: tuple[str, str | None, Any]) -> Any:
    """Value of the representative's attribute ``key`` in member ``ranks[index]`` (its slot value, or unchanged)."""
    for k, s in enumerate(cls.slots):
        if (s.name, s.kind, s.value) == key:
            return cls.values[index][k]
    return key[2]


class _RankZero:
    """The two things :func:`tracekit.transforms.layout.llm_config_of` reads of a trace set."""

    def __init__(self, trace: ExecutionTrace) -> None:
        self.ranks, self._trace = (0,), trace

    def __getitem__(self, rank: int) -> ExecutionTrace:
        return self._trace


@dataclass
class _Job:
    """The old and new layout of a class-set rescale (step 1 of the module docstring)."""

    classes: list[ClassState]
    where: dict[int, tuple[int, int]]  # old rank -> (class index, member index)
    groups: dict[str, tuple[int, ...]]
    plan: Any
    roles: list[dict[tuple[str, str | None, Any], str]]
    new_groups_of: dict[int, dict[str, tuple[int, ...]]]
    names: GroupNames

    def template(self, r: int) -> int:
        """The old rank new rank ``r`` copies."""
        old, new = self.plan.old, self.plan.new
        return old.rank(_template(new.coords(r), old))

    def value(self, ci: int, key: tuple[str, str | None, Any], role: str, r: int) -> Any:
        """The value ``key`` of class ``ci``'s representative takes in new rank ``r``."""
        t = self.template(r)
        v = _member_value(self.classes[ci], self.where[t][1], key)
        if role == "pg":
            return self.names.name(self.new_groups_of[r][canonical_pg_name(str(v))])
        if role == "own":
            return r
        return map_peer(int(v), self.plan.old, self.plan.new, t, r)


def _job(classes: list[ClassState], world_size: int, rescale: Rescale, progress: Progress | None = None) -> _Job:
    from tracekit.model.groups import resolve_groups
    from tracekit.transforms.layout import llm_config_of

    where = {r: (ci, mi) for ci, c in enumerate(classes) for mi, r in enumerate(c.ranks)}
    first = classes[where[0][0]].trace
    groups = resolve_groups(first.process_groups(), world_size)
    cfg = llm_config_of(_RankZero(first))  # type: ignore[arg-type]
    plan = rescale.plan(_grid(cfg, world_size, groups), cfg)
    job = _Job(classes, where, groups, plan, [_renamables(c.trace) for c in classes], {}, GroupNames(1, ()))
    all_new: dict[tuple[int, ...], tuple[int, ...]] = {}  # each new group once (a world group has N members)
    new_ranks: Iterable[int] = range(plan.new.world_size)
    if progress is not None:
        new_ranks = progress(new_ranks, plan.new.world_size)
    for r in new_ranks:
        t = job.template(r)
        ci, mi = where[t]
        used = {
            canonical_pg_name(str(_member_value(classes[ci], mi, key)))
            for key, role in job.roles[ci].items()
            if role == "pg"
        } | {DEFAULT_PG}
        m = {}
        for name in used:
            if name not in groups:
                raise TransformError(f"process group {name!r} is not declared", rank=t)
            try:
                m[name] = map_group(groups[name], plan.old, plan.new, t, r, whole_job=cfg is None)
            except TransformError as exc:
                raise exc.with_context(rank=t) from None
        job.new_groups_of[r] = {k: all_new.setdefault(v, v) for k, v in m.items()}
    job.names = GroupNames(plan.new.world_size, all_new)
    return job


def _regrid_one(job: _Job, trace: ExecutionTrace, t: int, r: int) -> ExecutionTrace:
    """Old rank ``t``'s trace as new rank ``r`` (what :func:`tracekit.transforms.layout.regrid` does per rank)."""
    import json

    from tracekit.transforms.base import copy_metadata

    plan, names = job.plan, job.names
    decl = pg_init_node(0, names.declaration())
    gmap = {k: names.name(v) for k, v in job.new_groups_of[r].items()}
    nodes = remap_nodes(
        trace.nodes, group_of=gmap, peer_of=lambda p: map_peer(p, plan.old, plan.new, t, r), new_rank=r, pg_init=decl
    )
    if len(names.names) > 1 and not any(is_pg_init(n) for n in nodes):
        nodes.insert(0, decl.replace(id=max((n.id for n in nodes), default=-1) + 1))
    pg_of = {n.id: n.pg_name for n in trace.nodes if n.is_comm}
    nodes = [plan.node_change(n, dp_spanning(job.groups, plan.old, pg_of.get(n.id))) or n for n in nodes]
    md = copy_metadata(trace.metadata)
    raw = md.get_attr(LLM_CONFIG_ATTR)
    if raw is not None:
        cfg = json.loads(raw)
        for k, v in plan.update.items():
            (cfg if k == "global_batch_size" else cfg["parallel"])[k] = v
        md = md.with_attr(LLM_CONFIG_ATTR, json.dumps(cfg, sort_keys=True), "string_val")
    if md.get_attr("world_size") is not None:  # a converted capture's job size: the new job's, as regrid writes it
        md = md.with_attr("world_size", plan.new.world_size, "int64_val")
    return plan.finish(ExecutionTrace(nodes, md, rank=r))


def _new_slots(job: _Job, ci: int, ranks: list[int]) -> tuple[tuple[Attr, ...], tuple[tuple[Any, ...], ...]]:
    """Slots of the new class of old class ``ci`` (members ``ranks``) and each member's values (step 3)."""
    columns: dict[tuple[str, str, Any], list[Any]] = {}
    for key, role in job.roles[ci].items():
        name, kind, _ = key
        new_kind = "string_val" if role == "pg" else (kind if kind in INT_KINDS else "int64_val")
        col = [job.value(ci, key, role, r) for r in ranks]
        slot = (name, new_kind, col[0])
        if columns.setdefault(slot, col) != col:
            raise TransformError(
                f"{name} values {col[0]!r} of rank {ranks[0]} stand for different values in other "
                f"ranks: the rescaled job cannot be kept as rank classes",
                rank=ranks[0],
            )
    varying = [(slot, col) for slot, col in columns.items() if any(v != col[0] for v in col)]
    slots = tuple(Attr(name, v0, kind) for (name, kind, v0), _ in varying)
    values = tuple(tuple(col[i] for _, col in varying) for i in range(len(ranks)))
    return slots, values


def _check_zero(job: _Job, ci: int, ranks: list[int]) -> None:
    """Every member's ZeRO all-gathers span data-parallel replicas as the representative's do."""
    plan = job.plan
    if plan.zero == 0 or plan.ratio == 1:
        return
    cls = job.classes[ci]
    keys = {
        (a.name, a.kind, a.value)
        for n in cls.trace.nodes
        if n.type == NodeType.COMM_COLL_NODE and n.comm_type is not None and n.comm_type.name == "ALL_GATHER"
        for a in n.attrs
        if a.name == PG_NAME
    }
    for key in keys:
        spans = {
            dp_spanning(job.groups, plan.old, str(_member_value(cls, job.where[job.template(r)][1], key)))
            for r in ranks
        }
        if len(spans) > 1:
            raise TransformError(
                f"all-gathers on group {key[2]!r} span data-parallel replicas in some ranks of the "
                f"class only: the rescaled job cannot be kept as rank classes",
                rank=ranks[0],
            )


def rescale_classes(
    classes: list[ClassState], world_size: int, rescale: Rescale, progress: Progress | None = None
) -> tuple[list[ClassState], int]:
    """:class:`Rescale` on a job stored as rank classes: ``(new classes, new world size)`` (module docstring).

    Only one trace per new class is regridded (from the member its representative copies); ``progress(new ranks,
    count)`` (optional) wraps the pass over the new ranks that maps their groups.

    Raises:
        ConfigError, TransformError: as :meth:`Rescale.apply`, and the refusals of the module docstring.
    """
    job = _job(classes, world_size, rescale, progress)
    members: dict[int, list[int]] = {}
    for r in range(job.plan.new.world_size):
        members.setdefault(job.where[job.template(r)][0], []).append(r)
    out = []
    for ci, ranks in sorted(members.items(), key=lambda kv: kv[1][0]):
        _check_zero(job, ci, ranks)
        t0 = job.template(ranks[0])
        try:
            rep = _regrid_one(job, classes[ci].member_trace(job.where[t0][1]), t0, ranks[0])
            slots, values = _new_slots(job, ci, ranks)
        except TransformError as exc:  # name the file and rank, as the per-rank Rescale does
            raise exc.with_context(path=classes[ci].trace.path, rank=t0) from None
        out.append(ClassState(rep, tuple(ranks), slots, values))
    return out, job.plan.new.world_size


def _classwise(step: Any) -> bool:
    """A step :func:`transform_classes` runs on each representative alone."""
    from tracekit.transforms.classwise import CLASSWISE_TRANSFORMS
    from tracekit.transforms.select import KeepIteration

    return isinstance(step, KeepIteration) or type(step).__name__ in CLASSWISE_TRANSFORMS


def _on_manifest(step: Any) -> bool:
    """A step :func:`transform_classes` runs on the classes and the manifest together."""
    from tracekit.transforms.select import KeepRanks

    return isinstance(step, (Rescale, KeepRanks))


def supports(steps: Iterable[Any]) -> bool:
    """Whether :func:`transform_classes` can run ``steps`` (each class-wise, :class:`Rescale` or ``KeepRanks``)."""
    return all(_classwise(s) or _on_manifest(s) for s in steps)


def runs_on_classes(steps: Iterable[Any]) -> bool:
    """Whether a class set given ``steps`` should go through :func:`transform_classes`: it can, and a step needs
    it (a :class:`Rescale`, ``KeepRanks`` or ``KeepIteration``, which the plain per-class path does not take)."""
    from tracekit.transforms.classwise import CLASSWISE_TRANSFORMS

    steps = list(steps)
    return supports(steps) and any(type(s).__name__ not in CLASSWISE_TRANSFORMS for s in steps)


def transform_classes(
    cs: Any,
    steps: Iterable[Any],
    output: str | os.PathLike[str],
    *,
    source: str | None = None,
    progress: Progress | None = None,
) -> tuple[Any, int, int]:
    """Run ``steps`` (class-wise transforms, :class:`Rescale`, ``KeepRanks``) on a class set; write the result as one.

    Returns:
        ``(manifest path, nodes in, nodes out)`` counted over every rank.

    Raises:
        TracekitError: a step :func:`supports` does not take, or as the steps raise.
    """
    classes = load_classes(cs)
    return run_on_classes(
        classes, cs.world_size, steps, output, source=source, path=str(cs.manifest), progress=progress
    )


def rank_files_as_classes(traceset: Any) -> list[ClassState]:
    """Each rank of a per-rank trace set as a class of its own (no slots): the input of :func:`run_on_classes`
    for ``transform --dp`` of per-rank files, whose output then has one class per distinct input rank."""
    return [ClassState(traceset[r], (r,), (), ()) for r in traceset.ranks]


def run_on_classes(
    classes: list[ClassState],
    world: int,
    steps: Iterable[Any],
    output: str | os.PathLike[str],
    *,
    source: str | None = None,
    path: str | None = None,
    progress: Progress | None = None,
) -> tuple[Any, int, int]:
    """:func:`transform_classes` on classes in memory (``world`` ranks; ``path`` names the input in errors;
    ``progress`` as :func:`rescale_classes` takes it)."""
    from dataclasses import replace

    from tracekit.sets.traceset import TraceSet
    from tracekit.transforms.base import stamp_provenance
    from tracekit.transforms.classselect import keep_ranks_classes

    steps = list(steps)
    nodes_in = sum(len(c.trace) * len(c.ranks) for c in classes)
    for step in steps:
        if isinstance(step, Rescale):
            classes, world = rescale_classes(classes, world, step, progress)
        elif _on_manifest(step):
            classes, world = keep_ranks_classes(classes, world, step)
        elif _classwise(step):
            classes = [
                replace(c, trace=step.apply(TraceSet({c.ranks[0]: c.trace}, c.trace.process_groups()))[c.ranks[0]])
                for c in classes
            ]
        else:
            raise TransformError(
                f"{type(step).__name__} needs every rank: expand the class set first (tracekit expand)",
                path=path,
            )
    described = [s.describe() for s in steps]
    classes = [
        replace(
            c,
            trace=stamp_provenance(TraceSet({c.ranks[0]: c.trace}, c.trace.process_groups()), described, source)[
                c.ranks[0]
            ],
        )
        for c in classes
    ]
    nodes_out = sum(len(c.trace) * len(c.ranks) for c in classes)
    return write_classes(output, world, classes), nodes_in, nodes_out
