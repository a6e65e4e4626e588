"""Communication operators in a PyTorch Execution Trace: which ops are one collective, of what kind and size.

PyTorch records one collective at several levels, nested or side by side:

* the dispatcher op ``c10d::allreduce_``, ``c10d::send``, ... (every backend);
* NCCL: ``record_param_comms`` (its inputs/attrs carry the collective name,
  sequence number, process group, message sizes and dtype) with a child
  ``nccl:all_reduce`` record function;
* gloo: ``gloo:all_reduce`` record functions, which the observer may place
  beside (not under) the dispatcher op, and which run a list-form
  ``reduce_scatter`` as one ``gloo:all_reduce`` per rank.

:func:`plan_comms` folds each such family into one :class:`CommOp`, so the
converter emits exactly one COMM node per communication operation.  A
``record_param_comms`` named ``wait`` is not a collective; it is returned in
:attr:`CommPlan.waits` with the sequence number it waits for.  A name that
looks like communication but is not known raises
:class:`~tracekit.errors.ConversionError` naming it -- never a silent compute
node.

Sizes (``comm_bytes``) follow the convention of Chakra/ASTRA-sim cost models
(docs/design.md section 4): the bytes each rank contributes -- the tensor for
all-reduce/broadcast/reduce/send/recv, the per-rank input for all-gather and
gather, the full input buffer for reduce-scatter and all-to-all, 0 for a
barrier.  When ``record_param_comms`` gives ``in_msg_nelems`` and ``dtype`` they
are authoritative; otherwise sizes come from the input tensor shapes and dtypes.
Argument positions follow the c10d op schemas in PyTorch's
``torch/csrc/distributed/c10d/Ops.cpp``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from tracekit.errors import ConversionError
from tracekit.model import CollectiveType, NodeType
from tracekit.workloads.units import torch_dtype_bytes

from tracekit.converters.pytorch.et_splits import split_bytes

from tracekit.converters.pytorch.comm_names import (
    C10D_DATA_ARG,
    C10D_NON_COMM,
    COMM_KINDS,
    GLOO_IMPL,
    RPC_NON_COMM,
    comm_family,
    normalized_comm_name,
)
from tracekit.converters.pytorch.et_groups import ProcessGroups, read_process_groups
from tracekit.converters.pytorch.et_reader import EtOp, EtTrace
from tracekit.converters.pytorch.et_tensors import (
    first_device as _first_device,
    input_arg as _arg,
    is_tensor_value as _is_tensor_value,
    last_bool as _last_bool,
    tensor_bytes,
)

__all__ = [
    "CommOp",
    "CommPlan",
    "ProcessGroups",
    "comm_family",
    "normalized_comm_name",
    "plan_comms",
    "read_process_groups",
    "tensor_bytes",
]


@dataclass(frozen=True)
class CommOp:
    """One communication operation, merged from all the ET ops that record it.

    Attributes:
        node_id: ET id of the op the COMM node stands for (the outermost one).
        name: that op's name.
        node_type: COMM_COLL_NODE, COMM_SEND_NODE or COMM_RECV_NODE.
        comm_type: the collective (None for send/recv).
        comm_bytes: bytes per rank (see the module docstring).
        pg_name: process group name ("0" = default group).
        members: ET ids folded into this op (outermost first).
        backend_ops: ids of the ``nccl:*``/``gloo:*`` records among them (where
            the transfer itself is timed).
        comm_src, comm_dst, comm_tag: global ranks and tag for send/recv.
        async_op: the op's ``asyncOp`` argument when recorded, else None.
        device: device of the data ("cpu", "cuda:0", "" when unknown).
        seq: NCCL sequence number from record_param_comms, when recorded.
        dtype: element type name, when known.
        send_split_bytes, recv_split_bytes: an all-to-all-v's bytes sent to / received from each group member
            (:mod:`.et_splits`, :mod:`tracekit.model.uneven`); empty when even or not recorded.
    """

    node_id: int
    name: str
    node_type: NodeType
    comm_type: CollectiveType | None
    comm_bytes: int
    pg_name: str
    members: tuple[int, ...]
    backend_ops: tuple[int, ...] = ()
    comm_src: int | None = None
    comm_dst: int | None = None
    comm_tag: int | None = None
    async_op: bool | None = None
    device: str = ""
    seq: int | None = None
    dtype: str | None = None
    send_split_bytes: tuple[int, ...] = ()
    recv_split_bytes: tuple[int, ...] = ()

    @property
    def blocks_host(self) -> bool:
        """True when the issuing thread waits for completion (CPU data and not ``async_op``)."""
        return self.device.startswith("cpu") and self.async_op is not True


@dataclass
class CommPlan:
    """Result of :func:`plan_comms`.

    Attributes:
        comms: communication ops in issue (rf_id) order.
        member_of: ET id -> ``node_id`` of the CommOp it is folded into.
        waits: ET id of a ``record_param_comms`` "wait" -> sequence number waited for.
    """

    comms: list[CommOp] = field(default_factory=list)
    member_of: dict[int, int] = field(default_factory=dict)
    waits: dict[int, int] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """Number of ops per kind name (``ALL_REDUCE``, ..., ``SEND``, ``RECV``)."""
        out: dict[str, int] = {}
        for c in self.comms:
            key = c.comm_type.name if c.comm_type is not None else c.node_type.name.split("_")[1]
            out[key] = out.get(key, 0) + 1
        return out


# ----- record_param_comms ---------------------------------------------------------------
@dataclass(frozen=True)
class _RpcInfo:
    name: str
    seq: int | None
    pg_name: str | None
    nbytes: int | None
    dtype: str | None
    group_size: int | None


def _rpc_info(op: EtOp, backend_pg: Mapping[int, str], where: str) -> _RpcInfo:
    vals = op.inputs.values
    name = op.extra.get("collective_name")
    top_strs = [v for v in vals if isinstance(v, str)]
    if name is None:
        name = top_strs[0] if top_strs else None
    if not isinstance(name, str) or not name:
        raise ConversionError(f"{where}record_param_comms without a collective name")
    seq = next((v for v in vals if isinstance(v, int) and not isinstance(v, bool)), None)
    pg_name = op.extra.get("pg_name")
    if pg_name is None:
        for v in vals:  # 1.1.x values carry ("0", "default_pg"); 1.0.x a backend id
            if isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v):
                pg_name = v[0] or None
                break
        else:
            ints = [v for v in vals if isinstance(v, int) and not isinstance(v, bool)]
            if len(ints) >= 2 and ints[1] in backend_pg:
                pg_name = backend_pg[ints[1]]
    nbytes = dtype = None
    nelems = op.extra.get("in_msg_nelems")
    dtype = op.extra.get("dtype")
    if isinstance(nelems, int) and isinstance(dtype, str):
        size = torch_dtype_bytes(dtype)
        if size is None:
            raise ConversionError(f"{where}record_param_comms dtype {dtype!r} has no known size")
        nbytes = nelems * size
    gsize = op.extra.get("pg_size")
    return _RpcInfo(name, seq, pg_name, nbytes, dtype, gsize if isinstance(gsize, int) else None)


# ----- planning -----------------------------------------------------------------------
@dataclass
class _Draft:
    head: EtOp
    family: str
    kind: CollectiveType | NodeType
    members: list[int]
    backend: list[int]
    rpc: _RpcInfo | None = None
    gloo_left: int = 1
    gloo_kinds: frozenset[str] = frozenset()


def _kind_of(name: str, where: str) -> CollectiveType | NodeType:
    kind = COMM_KINDS.get(normalized_comm_name(name))
    if kind is None:
        raise ConversionError(f"{where}unknown communication op {name!r}")
    return kind


def plan_comms(
    et: EtTrace,
    *,
    rank: int | None = None,
    groups: Mapping[str, tuple[int, ...]] | None = None,
    backend_pg: Mapping[int, str] | None = None,
) -> CommPlan:
    """Find the communication operations of an ET and describe each one.

    Args:
        et: the trace.
        rank: this trace's global rank (needed for send/recv peers).
        groups: ``pg_name -> ranks`` (empty tuple = all ranks), from
            ``## process_group:init ##``.
        backend_pg: NCCL backend id -> pg_name (old ``record_param_comms``
            identify the group by backend id).

    Returns:
        :class:`CommPlan`: one :class:`CommOp` per operation in ``rf_id`` order (``comm_bytes`` in bytes per
        the module docstring), the folded ET ids, and the ``wait`` records.

    Raises:
        ConversionError: an unknown communication op or collective name, a
            ``record_param_comms`` without a collective name or with a
            ``dtype`` of unknown size, a tensor of unknown element size
            (:func:`.et_tensors.tensor_bytes`), a send/recv without ``rank``
            or without a peer, or a group that cannot be determined; naming
            the ET path and node id.
    """
    groups = dict(groups or {})
    backend_pg = dict(backend_pg or {})
    plan = CommPlan()
    drafts: dict[int, _Draft] = {}
    order: list[int] = []
    pending_c10d: list[_Draft] = []
    for op in et.ops:
        found = _comm_kind(op, et, backend_pg, plan)
        if found is None:
            continue
        family, kind, rpc = found
        owner = _ancestor_draft(op, et.by_id, plan, drafts)
        if owner is None and family == "gloo":
            gname = normalized_comm_name(op.name)
            for d in reversed(pending_c10d):
                if d.gloo_left > 0 and (gname in d.gloo_kinds or COMM_KINDS.get(gname) == d.kind):
                    owner = d
                    break
        if owner is not None:
            owner.members.append(op.id)
            plan.member_of[op.id] = owner.head.id
            if family in ("nccl", "gloo"):
                owner.backend.append(op.id)
                if family == "gloo":
                    owner.gloo_left -= 1
            if rpc is not None and owner.rpc is None:
                owner.rpc = rpc
            continue
        draft = _new_draft(op, family, kind, rpc)
        if family == "c10d":
            pending_c10d.append(draft)
            if len(pending_c10d) > 32:
                pending_c10d.pop(0)
        drafts[op.id] = draft
        plan.member_of[op.id] = op.id
        order.append(op.id)

    for head_id in order:
        plan.comms.append(_finish(drafts[head_id], et, rank, groups))
    return plan


def _comm_kind(
    op: EtOp, et: EtTrace, backend_pg: Mapping[int, str], plan: CommPlan
) -> tuple[str, CollectiveType | NodeType, _RpcInfo | None] | None:
    """(family, kind, record_param_comms info) of a communication op; None for other ops (a
    ``record_param_comms`` wait is noted in ``plan.waits``)."""
    family = comm_family(op.name)
    if family is None:
        return None
    if family == "c10d" and normalized_comm_name(op.name) in C10D_NON_COMM:
        return None
    rpc = None
    if family == "rpc":
        rpc = _rpc_info(op, backend_pg, f"{et.path}: node {op.id}: ")
        if rpc.name.lower() in RPC_NON_COMM:
            if rpc.name.lower() == "wait" and rpc.seq is not None:
                plan.waits[op.id] = rpc.seq
            return None
        kind = COMM_KINDS.get(normalized_comm_name(rpc.name))
        if kind is None:
            raise ConversionError(
                f"unknown collective name {rpc.name!r} in record_param_comms", path=et.path, node_id=op.id
            )
        return family, kind, rpc
    try:
        return family, _kind_of(op.name, ""), None
    except ConversionError as exc:
        raise exc.with_context(path=et.path, node_id=op.id) from None


def _ancestor_draft(op: EtOp, by_id: Mapping[int, EtOp], plan: CommPlan, drafts: Mapping[int, _Draft]) -> _Draft | None:
    """The communication op that ``op`` is nested in (within 64 call-stack levels), or None."""
    pid, seen = op.parent, 0
    while pid in by_id and seen < 64:
        if pid in plan.member_of:
            return drafts[plan.member_of[pid]]
        parent = by_id[pid]
        if parent.is_root:
            return None
        pid, seen = parent.parent, seen + 1
    return None


def _new_draft(op: EtOp, family: str, kind: CollectiveType | NodeType, rpc: _RpcInfo | None) -> _Draft:
    """A new communication headed by ``op``; a c10d op learns which gloo records implement it."""
    draft = _Draft(
        head=op,
        family=family,
        kind=kind,
        members=[op.id],
        backend=[op.id] if family in ("nccl", "gloo") else [],
        rpc=rpc,
    )
    if family == "c10d":
        base = normalized_comm_name(op.name)
        draft.gloo_kinds = GLOO_IMPL.get(base, frozenset())
        if base == "reduce_scatter":  # list form: gloo runs one all_reduce per rank
            value, _, _ = _arg(op, 1)
            inner = (
                value[0]
                if isinstance(value, list) and value and isinstance(value[0], list) and not _is_tensor_value(value[0])
                else value
            )
            draft.gloo_left = len(inner) if isinstance(inner, list) and inner else 1
    return draft


def _data_bytes(draft: _Draft, where: str) -> tuple[int, str]:
    """(bytes, device) of the data this rank contributes, from tensor arguments."""
    head = draft.head
    if draft.rpc is not None and draft.rpc.nbytes is not None and draft.kind != CollectiveType.BARRIER:
        device = _first_device(head.inputs.values)
        return draft.rpc.nbytes, device
    if draft.kind == CollectiveType.BARRIER:
        return 0, _first_device(head.inputs.values)
    if draft.family == "c10d":
        base = normalized_comm_name(head.name)
        args = C10D_DATA_ARG.get(base, (0,))
        for i in args:
            v, s, t = _arg(head, i)
            n = tensor_bytes(v, s, t, where=where)
            if n > 0 or i == args[-1]:
                return n, _first_device(head.inputs.values)
        return 0, _first_device(head.inputs.values)
    # a record_param_comms / nccl:* / gloo:* head: its first input is the tensor (list)
    v, s, t = _arg(head, 0)
    return tensor_bytes(v, s, t, where=where), _first_device(head.inputs.values)


def _resolve_pg(draft: _Draft, groups: Mapping[str, tuple[int, ...]], et: EtTrace) -> str:
    if draft.rpc is not None and draft.rpc.pg_name:
        return str(draft.rpc.pg_name)
    if len(groups) <= 1:
        return next(iter(groups), "0")
    raise ConversionError(
        f"cannot tell which process group {draft.head.name!r} uses; the trace "
        f"declares {sorted(groups)} and the op does not name one",
        path=et.path,
        node_id=draft.head.id,
    )


def _global_rank(group_rank: int, pg: str, groups: Mapping[str, tuple[int, ...]]) -> int:
    ranks = groups.get(pg) or ()
    if ranks and 0 <= group_rank < len(ranks):
        return int(ranks[group_rank])
    return group_rank


def _finish(draft: _Draft, et: EtTrace, rank: int | None, groups: Mapping[str, tuple[int, ...]]) -> CommOp:
    head = draft.head
    where = f"{et.path}: node {head.id} ({head.name}): "
    nbytes, device = _data_bytes(draft, where)
    pg = _resolve_pg(draft, groups, et)
    async_op = _last_bool(head) if draft.family == "c10d" else None
    comm_type: CollectiveType | None = None
    src: int | None = None
    dst: int | None = None
    tag: int | None = None
    if isinstance(draft.kind, CollectiveType):
        node_type, comm_type = NodeType.COMM_COLL_NODE, draft.kind
    else:
        node_type, src, dst, tag = _p2p_ends(draft, et, rank, pg, groups)
    return CommOp(
        node_id=head.id,
        name=head.name,
        node_type=node_type,
        comm_type=comm_type,
        comm_bytes=int(nbytes),
        pg_name=pg,
        members=tuple(draft.members),
        backend_ops=tuple(draft.backend),
        comm_src=src,
        comm_dst=dst,
        comm_tag=tag,
        async_op=async_op,
        device=device,
        seq=draft.rpc.seq if draft.rpc else None,
        dtype=draft.rpc.dtype if draft.rpc else None,
        **_splits(draft, et),
    )


def _splits(draft: _Draft, et: EtTrace) -> dict[str, tuple[int, ...]]:
    """``send_split_bytes``/``recv_split_bytes`` of an all-to-all (:func:`.et_splits.split_bytes`), else none."""
    if draft.kind != CollectiveType.ALL_TO_ALL:
        return {}
    found = split_bytes([et.by_id[i] for i in draft.members])
    return {} if found is None else {"send_split_bytes": found[0], "recv_split_bytes": found[1]}


def _p2p_ends(
    draft: _Draft, et: EtTrace, rank: int | None, pg: str, groups: Mapping[str, tuple[int, ...]]
) -> tuple[NodeType, int, int, int | None]:
    """(node type, global source rank, global destination rank, tag) of a send or recv.

    Raises:
        ConversionError: ``rank`` is unknown, or the op's arguments do not name its peer.
    """
    head = draft.head
    if rank is None:
        raise ConversionError(
            f"{head.name!r} needs this trace's rank to name its peer; pass rank=", path=et.path, node_id=head.id
        )
    peer = tag = None
    if draft.family == "c10d":
        ints = [
            v
            for v, t in zip(head.inputs.values, head.inputs.types)
            if t == "Int" and isinstance(v, int) and not isinstance(v, bool)
        ]
        base = normalized_comm_name(head.name)
        if base in ("send", "recv") and len(ints) >= 2:
            peer, tag = ints[0], ints[1]
    if peer is None:
        raise ConversionError(
            f"cannot tell the peer rank of {head.name!r} (receive from any source?)", path=et.path, node_id=head.id
        )
    peer = _global_rank(peer, pg, groups)
    if draft.kind == NodeType.COMM_SEND_NODE:
        return NodeType.COMM_SEND_NODE, rank, peer, tag
    return NodeType.COMM_RECV_NODE, peer, rank, tag
