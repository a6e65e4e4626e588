"""The names PyTorch gives communication ops, shared by the ET path (:mod:`.collectives`) and the Kineto path
(:mod:`.kineto_comms`): collective kind by name, the c10d and ``record_param_comms`` names that are not
communication, the gloo records that implement a c10d op, and which c10d argument carries the data.

Argument positions follow the c10d op schemas in PyTorch's ``torch/csrc/distributed/c10d/Ops.cpp``.
"""

from __future__ import annotations

from tracekit.model import CollectiveType, NodeType

__all__ = [
    "C10D_DATA_ARG",
    "C10D_NON_COMM",
    "COMM_KINDS",
    "GLOO_IMPL",
    "RPC_NON_COMM",
    "comm_family",
    "normalized_comm_name",
]

#: Collective kind by normalized name (prefix and trailing "_" removed, lower case).
COMM_KINDS: dict[str, CollectiveType | NodeType] = {}
for _names, _kind in (
    (("all_reduce", "allreduce", "allreduce_coalesced", "all_reduce_coalesced"), CollectiveType.ALL_REDUCE),
    (("reduce",), CollectiveType.REDUCE),
    (
        (
            "all_gather",
            "allgather",
            "_allgather_base",
            "allgather_base",
            "all_gather_base",
            "all_gather_into_tensor",
            "allgather_into_tensor_coalesced",
            "allgather_coalesced",
            "all_gather_into_tensor_coalesced",
        ),
        CollectiveType.ALL_GATHER,
    ),
    (("gather",), CollectiveType.GATHER),
    (("scatter",), CollectiveType.SCATTER),
    (("broadcast",), CollectiveType.BROADCAST),
    (
        ("all_to_all", "alltoall", "alltoall_base", "all_to_allv", "alltoallv", "all_to_all_single"),
        CollectiveType.ALL_TO_ALL,
    ),
    (
        (
            "reduce_scatter",
            "_reduce_scatter_base",
            "reduce_scatter_base",
            "reduce_scatter_tensor",
            "reduce_scatter_tensor_coalesced",
        ),
        CollectiveType.REDUCE_SCATTER,
    ),
    (("barrier", "monitored_barrier"), CollectiveType.BARRIER),
    (("send",), NodeType.COMM_SEND_NODE),
    (("recv", "recv_any_source", "recvanysource", "recv_anysource"), NodeType.COMM_RECV_NODE),
):
    for _n in _names:
        COMM_KINDS[_n] = _kind

#: c10d dispatcher ops that are not communication.
C10D_NON_COMM = frozenset(
    {
        "wait",
        "_register_process_group",
        "_resolve_process_group",
        "_wait_tensor",
        "wait_tensor",
        "fake",
        "_set_sequence_number_for_group",
    }
)
#: record_param_comms names that are not a collective.
RPC_NON_COMM = frozenset({"wait", "init", "split", "comm_split"})

#: Which gloo:* records implement a c10d op.
GLOO_IMPL: dict[str, frozenset[str]] = {
    "reduce_scatter": frozenset({"all_reduce", "reduce_scatter"}),
    "_reduce_scatter_base": frozenset({"all_reduce", "reduce_scatter"}),
    "reduce_scatter_tensor_coalesced": frozenset({"all_reduce", "reduce_scatter"}),
}

#: Input argument that carries the data each rank contributes, per c10d op; a
#: second index is the fallback when the first is empty (scatter on non-roots).
C10D_DATA_ARG: dict[str, tuple[int, ...]] = {
    "allreduce": (0,),
    "allreduce_coalesced": (0,),
    "broadcast": (0,),
    "reduce": (0,),
    "allgather": (1,),
    "_allgather_base": (1,),
    "allgather_into_tensor_coalesced": (1,),
    "allgather_coalesced": (1,),
    "reduce_scatter": (1,),
    "_reduce_scatter_base": (1,),
    "reduce_scatter_tensor_coalesced": (1,),
    "alltoall": (1,),
    "alltoall_base": (1,),
    "gather": (1,),
    "scatter": (1, 0),
    "send": (0,),
    "recv": (0,),
    "recv_any_source": (0,),
    "barrier": (),
    "monitored_barrier": (),
}


def normalized_comm_name(name: str) -> str:
    """``c10d::_allgather_base_`` -> ``_allgather_base``; ``nccl:all_reduce`` -> ``all_reduce``."""
    for prefix in ("c10d::", "nccl:", "gloo:"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return name.lower() if not name.startswith("_") else name


def comm_family(name: str) -> str | None:
    """``"c10d"``, ``"nccl"``, ``"gloo"``, ``"rpc"`` (record_param_comms) or None for other ops."""
    if name.startswith("c10d::"):
        return "c10d"
    if name.startswith("nccl:"):
        return "nccl"
    if name.startswith("gloo:"):
        return "gloo"
    if name == "record_param_comms":
        return "rpc"
    return None
