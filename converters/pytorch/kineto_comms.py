"""Communication operations in a Kineto trace (no ET): which events are one collective, of what kind and size.

PyTorch records one collective at several levels of one host thread, nested:
``c10d::allreduce_`` > ``record_param_comms`` > ``nccl:all_reduce`` > the launch of
an ``ncclKernel_*``/``ncclDevKernel_*`` kernel.  gloo runs the transfer on its own
worker threads as ``gloo:*`` records beside the dispatcher op (one
``gloo:all_reduce`` per rank for a list-form ``reduce_scatter``).  This module
folds each family into one :class:`KinetoComm`; the converter emits one COMM
node per KinetoComm:

* the NCCL kernel the family launched, when there is one (the transfer runs
  there, on its stream);
* otherwise the family's outermost host event (gloo, or NCCL with one rank),
  which then stands for its whole host subtree and its gloo worker records.

Kind, size and group, in order of authority: ``record_param_comms`` arguments
(``Collective name``, ``In msg nelems`` x ``dtype``, ``Process Group Name``,
``Process Group Ranks``, ``Src Rank``/``Dst Rank``), then the ``nccl:*``/``gloo:*``
record's input shape and type, then the ``c10d::*`` op's data argument.  Byte
sizes follow :mod:`.collectives` (the bytes each rank contributes; the full input
for reduce-scatter and all-to-all).  The vocabulary of collective names is the
one :mod:`.collectives` uses for the ET path.

Errors (:class:`~tracekit.errors.ConversionError`, naming file, rank and the
event): an unknown collective name, a size that cannot be determined, a group
that cannot be determined, a send/recv without its peer.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tracekit.converters.pytorch.comm_names import (
    C10D_DATA_ARG,
    C10D_NON_COMM,
    COMM_KINDS,
    GLOO_IMPL,
    RPC_NON_COMM,
    comm_family,
    normalized_comm_name,
)
from tracekit.converters.pytorch.kineto_args import arg_bytes, concrete_int, input_type_bytes, parse_ranks
from tracekit.converters.pytorch.kineto_reader import KinetoEvent
from tracekit.errors import ConversionError
from tracekit.model import CollectiveType, NodeType

__all__ = ["KinetoComm", "comm_kind", "extract_comms", "is_nccl_kernel"]

# NCCL kernel name prefixes (NCCL < 2.19 ``ncclKernel_``, newer ``ncclDevKernel_``).
_NCCL_KERNEL_PREFIXES = ("ncclKernel_", "ncclDevKernel_", "void ncclKernel_", "void ncclDevKernel_")


def is_nccl_kernel(e: KinetoEvent) -> bool:
    """True for a ``kernel`` event named ``ncclKernel_*`` (NCCL < 2.19) or ``ncclDevKernel_*`` (newer)."""
    return e.category == "kernel" and e.name.startswith(_NCCL_KERNEL_PREFIXES)


def comm_kind(name: str) -> CollectiveType | NodeType | None:
    """Collective type (or COMM_SEND/RECV node type) of a communication op or collective name; None if unknown."""
    base = normalized_comm_name(name)
    kind = COMM_KINDS.get(base)
    if kind is None and base.startswith("_"):  # nccl:_all_gather_base, nccl:_reduce_scatter_base
        kind = COMM_KINDS.get(base.lstrip("_"))
    return kind


@dataclass(frozen=True, slots=True)
class KinetoComm:
    """One communication operation of a Kineto trace.

    Attributes:
        head: index of the outermost host event of the family.
        node_event: index of the event that becomes the COMM node (NCCL kernel or ``head``).
        node_type: COMM_COLL_NODE, COMM_SEND_NODE or COMM_RECV_NODE.
        comm_type: collective type (None for send/recv).
        comm_bytes: bytes each rank contributes (the full input for reduce-scatter and all-to-all; 0 for
            a barrier), as :mod:`.collectives` counts them.
        pg_name: process group name.
        members: host event indices folded into the family (head first).
        folded: host event indices not emitted as nodes because ``node_event`` stands for them.
        extra_kernels: further NCCL kernels launched by the family (emitted as COMP nodes).
        comm_src, comm_dst, comm_tag: global ranks and tag for send/recv.
        pg_source: where ``pg_name`` came from (``record_param_comms``, ``single group``,
            ``identical groups``, ``default``).
    """

    head: int
    node_event: int
    node_type: NodeType
    comm_type: CollectiveType | None
    comm_bytes: int
    pg_name: str
    members: tuple[int, ...]
    folded: tuple[int, ...] = ()
    extra_kernels: tuple[int, ...] = ()
    comm_src: int | None = None
    comm_dst: int | None = None
    comm_tag: int | None = None
    pg_source: str = ""


# ----------------------------------------------------------------------------- folding
@dataclass
class _Draft:
    head: KinetoEvent
    kind: CollectiveType | NodeType
    members: list[KinetoEvent]
    rpc: KinetoEvent | None = None
    gloo_left: int = 1
    gloo_kinds: frozenset[str] = frozenset()
    workers: list[KinetoEvent] | None = None


def _family_kind(e: KinetoEvent, where: str) -> tuple[str, CollectiveType | NodeType | None] | None:
    """(family, kind) of a communication event, None for other events and non-communication ones; the kind is
    None only for an argument-less ``record_param_comms`` marker (family ``rpc``)."""
    family = comm_family(e.name)
    if family is None:
        return None
    if family == "c10d" and normalized_comm_name(e.name) in C10D_NON_COMM:
        return None
    if family == "rpc":
        name = e.args.get("Collective name")
        if name is None:
            return ("rpc", None)  # old PyTorch: an argument-less marker inside a c10d op
        if str(name).lower() in RPC_NON_COMM:
            return None
        kind = comm_kind(str(name))
        if kind is None:
            raise ConversionError(
                f"{where}unknown collective name {name!r} in record_param_comms (traceEvents[{e.index}])"
            )
        return family, kind
    kind = comm_kind(e.name)
    if kind is None:
        raise ConversionError(f"{where}unknown communication op {e.name!r} (traceEvents[{e.index}])")
    return family, kind


def extract_comms(
    lanes: Mapping[Any, Sequence[KinetoEvent]],
    parent_of: Mapping[int, int],
    launched_by: Mapping[int, Sequence[KinetoEvent]],
    *,
    rank: int | None,
    groups: Mapping[str, tuple[int, ...]],
    world_size: int | None = None,
    path: str | None = None,
) -> list[KinetoComm]:
    """Fold the communication events of a Kineto trace into :class:`KinetoComm` operations.

    Args:
        lanes: host events per thread, each sorted by :func:`.device_graph.time_key`.
        parent_of: host event index -> index of its enclosing host event (time containment).
        launched_by: host runtime call index -> device ops it launched (start order).
        rank: this trace's global rank (needed for send/recv peers).
        groups: declared process groups, pg_name -> ranks.
        world_size: ranks in the job (how many gloo all_reduces make a list-form reduce_scatter
            when the trace does not record the input list).
        path: file name for messages.

    Returns:
        communication operations in issue order (start time of their head, ns).

    Raises:
        ConversionError: an unknown collective or communication op name, a
            message size that cannot be determined, a send/recv without
            ``rank`` or without a peer, or a process group that cannot be told
            (several declared groups with different ranks and none named);
            naming ``path``, ``rank`` and the ``traceEvents`` index.
    """
    by_index: dict[int, KinetoEvent] = {}
    for lane in lanes.values():
        for e in lane:
            by_index[e.index] = e
    drafts, owner_of, pending_c10d, gloo_orphans = _nest_families(by_index, parent_of, rank, world_size, path)
    _match_gloo_workers(gloo_orphans, pending_c10d, drafts, owner_of)
    lane_starts = {key: [e.start_ns for e in lane] for key, lane in lanes.items()}
    comms = []
    for head_index in sorted(drafts, key=lambda i: (by_index[i].start_ns, i)):
        d = drafts[head_index]
        key = (d.head.pid, d.head.tid)
        lane, starts = lanes[key], lane_starts[key]
        lo = bisect.bisect_left(starts, d.head.start_ns)
        hi = bisect.bisect_right(starts, d.head.end_ns)
        inside = [e for e in lane[lo:hi] if e.end_ns <= d.head.end_ns]
        comms.append(_finish(d, inside, parent_of, launched_by, rank, groups, path))
    return comms


def _nest_families(
    by_index: Mapping[int, KinetoEvent],
    parent_of: Mapping[int, int],
    rank: int | None,
    world_size: int | None,
    path: str | None,
) -> tuple[dict[int, _Draft], dict[int, int], list[_Draft], list[tuple[KinetoEvent, CollectiveType | NodeType]]]:
    """Pass 1, same-thread nesting: each family's outermost event heads a draft, nested ones join it.

    Events are visited in global time order so heads precede their gloo workers.  Returns
    (drafts by head index, owner head of each member index, the c10d drafts in order, gloo records
    outside any communication op, each with its kind).
    """
    drafts: dict[int, _Draft] = {}
    owner_of: dict[int, int] = {}
    pending_c10d: list[_Draft] = []
    gloo_orphans: list[tuple[KinetoEvent, CollectiveType | NodeType]] = []
    ordered = sorted(by_index.values(), key=lambda e: (e.start_ns, -e.duration_ns, e.index))
    for e in ordered:
        try:
            fk = _family_kind(e, "")
        except ConversionError as exc:
            raise exc.with_context(path=path, rank=rank) from None
        if fk is None:
            continue
        family, kind = fk
        owner = None
        p = parent_of.get(e.index)
        while p is not None:
            if p in owner_of:
                owner = drafts[owner_of[p]]
                break
            p = parent_of.get(p)
        if owner is not None:
            owner.members.append(e)
            owner_of[e.index] = owner.head.index
            if family == "rpc" and owner.rpc is None and kind is not None:
                owner.rpc = e
            if family == "gloo":
                owner.gloo_left -= 1
            continue
        if kind is None:  # argument-less record_param_comms outside any c10d op: nothing to say
            continue
        if family == "gloo":
            gloo_orphans.append((e, kind))
            continue
        d = _Draft(head=e, kind=kind, members=[e], rpc=e if family == "rpc" else None)
        if family == "c10d":
            _expect_gloo(d, world_size)
            pending_c10d.append(d)
        drafts[e.index] = d
        owner_of[e.index] = e.index
    return drafts, owner_of, pending_c10d, gloo_orphans


def _expect_gloo(d: _Draft, world_size: int | None) -> None:
    """Which gloo records implement the c10d op ``d`` heads, and how many (list-form reduce_scatter: one
    all_reduce per rank of the input list, else per rank of the job)."""
    base = normalized_comm_name(d.head.name)
    d.gloo_kinds = GLOO_IMPL.get(base, frozenset())
    if base == "reduce_scatter":
        dims = d.head.args.get("Input Dims")
        inner = dims[1] if isinstance(dims, list) and len(dims) > 1 else None
        if isinstance(inner, list) and inner and isinstance(inner[0], list):
            d.gloo_left = len(inner)
        elif world_size:
            d.gloo_left = world_size


def _match_gloo_workers(
    gloo_orphans: Sequence[tuple[KinetoEvent, CollectiveType | NodeType]],
    pending_c10d: Sequence[_Draft],
    drafts: dict[int, _Draft],
    owner_of: dict[int, int],
) -> None:
    """Pass 2: each gloo worker record -> the latest earlier c10d op of a matching kind with records left;
    a record matching none heads a communication of its own."""
    for g, kind in gloo_orphans:
        gname = normalized_comm_name(g.name)
        match = None
        for d in reversed(pending_c10d):
            if d.head.start_ns > g.start_ns:
                continue
            if d.gloo_left == 0:
                continue
            if gname in d.gloo_kinds or kind == d.kind:
                match = d
                break
        if match is None:
            drafts[g.index] = _Draft(head=g, kind=kind, members=[g])
            owner_of[g.index] = g.index
            continue
        if match.workers is None:
            match.workers = []
        match.workers.append(g)
        if match.gloo_left > 0:
            match.gloo_left -= 1
        owner_of[g.index] = match.head.index


def _descendants(head: KinetoEvent, lane_events: Sequence[KinetoEvent], parent_of: Mapping[int, int]) -> list[int]:
    out = []
    for e in lane_events:
        if e.index == head.index:
            continue
        p = parent_of.get(e.index)
        while p is not None and p != head.index:
            p = parent_of.get(p)
        if p == head.index:
            out.append(e.index)
    return out


def _finish(
    d: _Draft,
    lane_events: Sequence[KinetoEvent],
    parent_of: Mapping[int, int],
    launched_by: Mapping[int, Sequence[KinetoEvent]],
    rank: int | None,
    groups: Mapping[str, tuple[int, ...]],
    path: str | None,
) -> KinetoComm:
    head = d.head
    label = f"{head.name!r} (traceEvents[{head.index}])"
    subtree = _descendants(head, lane_events, parent_of)
    kernels: list[KinetoEvent] = []
    for i in [head.index] + subtree:
        for op in launched_by.get(i, ()):
            if is_nccl_kernel(op):
                kernels.append(op)
    kernels.sort(key=lambda k: (k.start_ns, k.index))

    kind = d.kind
    nbytes = 0 if isinstance(kind, CollectiveType) and kind == CollectiveType.BARRIER else _bytes(d)
    if nbytes is None:
        raise ConversionError(
            f"cannot determine the message size of {label}: no record_param_comms "
            f"sizes and no input shape with a known dtype",
            path=path,
            rank=rank,
        )
    pg_name, pg_source = _group(d, groups, label, path, rank)

    if kernels:
        node_event = kernels[0].index
        folded: tuple[int, ...] = tuple(w.index for w in d.workers or ())
    else:
        node_event = head.index
        folded = tuple(subtree) + tuple(w.index for w in d.workers or ())
    comm_type: CollectiveType | None = None
    src: int | None = None
    dst: int | None = None
    tag: int | None = None
    if isinstance(kind, CollectiveType):
        node_type, comm_type = NodeType.COMM_COLL_NODE, kind
    else:
        node_type, src, dst, tag = _p2p_ends(d, kind, rank, groups.get(pg_name) or (), label, path)
    return KinetoComm(
        head=head.index,
        node_event=node_event,
        node_type=node_type,
        comm_type=comm_type,
        comm_bytes=int(nbytes),
        pg_name=pg_name,
        members=tuple(m.index for m in d.members) + tuple(w.index for w in d.workers or ()),
        folded=folded,
        extra_kernels=tuple(k.index for k in kernels[1:]),
        comm_src=src,
        comm_dst=dst,
        comm_tag=tag,
        pg_source=pg_source,
    )


def _p2p_ends(
    d: _Draft, kind: NodeType, rank: int | None, ranks: tuple[int, ...], label: str, path: str | None
) -> tuple[NodeType, int, int, int | None]:
    """(node type, global source rank, global destination rank, tag) of a send or recv (``ranks``: its group's).

    Raises:
        ConversionError: ``rank`` is unknown, or the events do not name the peer.
    """
    if rank is None:
        raise ConversionError(
            f"{label} needs this trace's rank to name its peer (no distributedInfo.rank; pass rank=)", path=path
        )
    peer, tag = _peer(d)
    if peer is None:
        raise ConversionError(f"cannot tell the peer rank of {label}", path=path, rank=rank)
    if ranks and 0 <= peer < len(ranks) and d.rpc is None:
        peer = int(ranks[peer])  # c10d arguments are group ranks
    if kind == NodeType.COMM_SEND_NODE:
        return kind, rank, peer, tag
    return kind, peer, rank, tag


def _bytes(d: _Draft) -> int | None:
    rpc = d.rpc
    if rpc is not None:
        nelems, dtype = rpc.args.get("In msg nelems"), rpc.args.get("dtype")
        size = input_type_bytes(dtype)
        if isinstance(nelems, int) and size is not None:
            return nelems * size
    backends = [m for m in d.members if comm_family(m.name) in ("nccl", "gloo")] + list(d.workers or ())
    if backends:
        sizes = [arg_bytes(b, 0) for b in backends]
        known = [s for s in sizes if s is not None]
        if len(known) == len(sizes):
            return sum(known)
    head = d.head
    if comm_family(head.name) == "c10d":
        for i in C10D_DATA_ARG.get(normalized_comm_name(head.name), (0,)):
            n = arg_bytes(head, i)
            if n is not None:
                return n
    for m in d.members:
        if comm_family(m.name) == "rpc":
            n = arg_bytes(m, 0)
            if n is not None:
                return n
    return None


def _group(
    d: _Draft, groups: Mapping[str, tuple[int, ...]], label: str, path: str | None, rank: int | None
) -> tuple[str, str]:
    rpc = d.rpc
    if rpc is not None and rpc.args.get("Process Group Name") not in (None, ""):
        return str(rpc.args["Process Group Name"]), "record_param_comms"
    if len(groups) <= 1:
        return (next(iter(groups)) if groups else "0"), ("single group" if groups else "default")
    rank_sets = {tuple(r) for r in groups.values()}
    if len(rank_sets) == 1:
        return ("0" if "0" in groups else sorted(groups)[0]), "identical groups"
    raise ConversionError(
        f"cannot tell which process group {label} uses: the trace declares groups "
        f"{sorted(groups)} with different ranks and the op does not name one",
        path=path,
        rank=rank,
    )


def _peer(d: _Draft) -> tuple[int | None, int | None]:
    rpc = d.rpc
    kind = d.kind
    if rpc is not None:
        key = "Dst Rank" if kind == NodeType.COMM_SEND_NODE else "Src Rank"
        peer = rpc.args.get(key)
        if isinstance(peer, int) and peer >= 0:
            return peer, None
    for m in d.members:
        if comm_family(m.name) == "c10d" and normalized_comm_name(m.name) in ("send", "recv"):
            return concrete_int(m, 2), concrete_int(m, 3)
    return None, None


def declared_groups_from_rpc(events: Sequence[KinetoEvent]) -> dict[str, tuple[int, ...]]:
    """Groups named by ``record_param_comms`` (``Process Group Name`` -> ``Process Group Ranks``, global ranks).

    The first event naming a group wins; ranks given as a list or a ``"[0, 1]"`` string; an unparsable rank list
    is skipped (raises nothing).
    """
    out: dict[str, tuple[int, ...]] = {}
    for e in events:
        if e.name != "record_param_comms":
            continue
        name = e.args.get("Process Group Name")
        ranks = parse_ranks(e.args.get("Process Group Ranks"))
        if name not in (None, "") and ranks is not None:
            out.setdefault(str(name), ranks)
    return out
