"""Selection transforms of rank-class sets without per-rank traces (issue 17): :class:`KeepRanks` on the classes.

:class:`~tracekit.transforms.select.KeepIteration` is class-wise (it reads names, control dependencies, times
and ``is_cpu_op``, never a slot) and runs on each representative. :class:`~tracekit.transforms.select.KeepRanks`
changes the manifest:

1. the renumbering and the cut groups follow from the kept ranks and the old groups alone
   (:meth:`KeepRanks.cut`);
2. what a kept member loses depends only on its slot values: a collective is dropped when the member's group is
   cut to one rank, a send/recv when its peer is not kept.  Members of an old class whose values decide the same
   drops (their *signature*) form one new class; its lowest member is the new representative, whose trace is
   the one trace cut (:meth:`KeepRanks.rank_trace` on that member's trace);
3. every slot value is followed through each member (a group name stays, a peer is renumbered); values that
   differ between members become the new slots.

Refused (TransformError, the caller may expand the job instead): a class whose slots stand for values other
than the group names and peers of communication nodes, or two values that map to one in the new representative but not in another member.
"""

from __future__ import annotations

from typing import Any, cast

from tracekit.model.attrs import COMM_DST, COMM_SRC, PG_NAME, as_int, as_str
from tracekit.errors import TransformError
from tracekit.model.groups import canonical_pg_name, is_pg_init
from tracekit.model import Attr, ExecutionTrace, NodeType
from tracekit.transforms.classstate import ClassState
from tracekit.transforms.select import KeepRanks, RankCut

_P2P = (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)
Key = tuple[str, Any, Any]  # (attribute name, wire kind, the representative's value)


def _keys(
    trace: ExecutionTrace, slot_names: set[str]
) -> tuple[dict[Key, str], list[tuple[str, int, Key | None]], set[Key]]:
    """The renamable values of a representative, its collectives, and the other values slots could stand for.

    Returns:
        ``(key -> "pg" or "peer", [(collective name, node id, its pg_name key or None), ...], other keys)``:
        other keys are attributes named like a slot (``slot_names``) that are not a group name or peer of a
        communication node.
    """
    roles: dict[Key, str] = {}
    colls: list[tuple[str, int, Key | None]] = []
    others: set[Key] = set()
    for n in trace.nodes:
        renamable = n.is_comm and not is_pg_init(n)
        if not renamable and not slot_names:
            continue
        pg_key = None
        for a in n.attrs:
            key = (a.name, a.kind, a.value)
            if renamable and a.name == PG_NAME:
                roles[key], pg_key = "pg", key
            elif renamable and a.name in (COMM_SRC, COMM_DST) and n.type in _P2P:
                roles[key] = "peer"
            elif a.name in slot_names:
                others.add(key)
        if n.type == NodeType.COMM_COLL_NODE:
            colls.append((n.name, n.id, pg_key))
    return roles, colls, others


def _member_values(cls: ClassState, index: int, roles: dict[Key, str]) -> dict[Key, Any]:
    """Each renamable key's value in member ``cls.ranks[index]`` (its slot value, or the representative's)."""
    slot = {(s.name, s.kind, s.value): k for k, s in enumerate(cls.slots)}
    return {key: cls.values[index][slot[key]] if key in slot else key[2] for key in roles}


def _signature(values: dict[Key, Any], roles: dict[Key, str], cut: RankCut) -> tuple[bool, ...]:
    """Per key (in ``roles`` order): whether the member loses what carries it (module docstring, step 2)."""
    out = []
    for key, role in roles.items():
        v = values[key]
        if role == "pg":
            out.append(len(cut.cut.get(canonical_pg_name(as_str(PG_NAME, v)), ())) <= 1)
        else:
            out.append(as_int(key[0], v) not in cut.new_of)
    return tuple(out)


def _check_partial(rank: int, values: dict[Key, Any], colls: list[tuple[str, int, Key | None]], cut: RankCut) -> None:
    """``partial="error"``: refuse a collective whose group (as this member sees it) loses ranks."""
    for name, node_id, pg_key in colls:
        group = canonical_pg_name(None if pg_key is None else as_str(PG_NAME, values[pg_key]))
        full = cut.groups.get(group, ())
        if len(cut.cut.get(group, ())) < len(full):
            raise TransformError(
                f"collective {name!r} on group {group!r} {list(full)} loses ranks outside the kept subset",
                rank=rank,
                node_id=node_id,
            )


def _new_slots(
    rep: ExecutionTrace, roles: dict[Key, str], members: list[dict[Key, Any]], cut: RankCut, rank: int
) -> tuple[tuple[Attr, ...], tuple[tuple[Any, ...], ...]]:
    """Slots of a new class (members' value maps, representative first) and each member's values (step 3)."""
    present = {(a.name, a.kind, a.value) for n in rep.nodes if n.is_comm for a in n.attrs}
    columns: dict[Key, list[Any]] = {}
    for key, role in roles.items():
        name, kind, _ = key
        col = [v[key] if role == "pg" else cut.new_of.get(cast(int, as_int(name, v[key]))) for v in members]
        slot = (name, kind, col[0])
        if slot not in present:
            continue  # carried only by dropped nodes
        if columns.setdefault(slot, col) != col:
            raise TransformError(
                f"{name} values {col[0]!r} of new rank {cut.new_of[rank]} stand for different values in other "
                f"ranks: the cut job cannot be kept as rank classes",
                rank=rank,
            )
    varying = [(slot, col) for slot, col in columns.items() if any(v != col[0] for v in col)]
    slots = tuple(Attr(name, v0, kind) for (name, kind, v0), _ in varying)
    values = tuple(tuple(col[i] for _, col in varying) for i in range(len(members)))
    return slots, values


def keep_ranks_classes(classes: list[ClassState], world_size: int, step: KeepRanks) -> tuple[list[ClassState], int]:
    """:class:`KeepRanks` on a job stored as rank classes: ``(new classes, new world size)`` (module docstring).

    One trace per new class is decoded and cut (the new representative's); the others follow from slot values.

    Raises:
        TransformError: as :meth:`KeepRanks.apply`, and the refusals of the module docstring.
    """
    from tracekit.model.groups import resolve_groups

    declared: dict[str, tuple[int, ...]] = {}
    for c in classes:
        declared.update(c.trace.process_groups())
    cut = step.cut(tuple(range(world_size)), resolve_groups(declared, world_size))
    groups: dict[tuple[int, tuple[bool, ...]], list[tuple[int, dict[Key, Any]]]] = {}
    keys = []
    for ci, cls in enumerate(classes):
        roles, colls, others = _keys(cls.trace, {s.name for s in cls.slots})
        if any((s.name, s.kind, s.value) in others for s in cls.slots):  # a slot carried by no node: no effect
            raise TransformError(
                "a rank class varies attributes other than group names and peers: expand the class set first "
                "(tracekit expand)",
                rank=cls.ranks[0],
            )
        keys.append(roles)
        for index, rank in enumerate(cls.ranks):
            if rank not in cut.new_of:
                continue
            values = _member_values(cls, index, roles)
            if step.partial == "error":
                _check_partial(rank, values, colls, cut)
            groups.setdefault((ci, _signature(values, roles, cut)), []).append((index, values))
    out = []
    for (ci, _), members in sorted(groups.items(), key=lambda kv: classes[kv[0][0]].ranks[kv[1][0][0]]):
        cls = classes[ci]
        first = cls.ranks[members[0][0]]
        rep = step.rank_trace(cls.member_trace(members[0][0]), first, cut)
        slots, slot_values = _new_slots(rep, keys[ci], [v for _, v in members], cut, first)
        ranks = tuple(cut.new_of[cls.ranks[i]] for i, _ in members)
        out.append(ClassState(rep, ranks, slots, slot_values))
    return out, len(step.ranks)
