"""Collective planning: folding, kinds, byte sizes, peers, errors; the dist_ws4 gloo job."""

from __future__ import annotations

import pytest

from _pytorch_synth import et_doc, node, pg_init, roots, tensor
from tracekit.converters.pytorch.collectives import plan_comms, read_process_groups, tensor_bytes
from tracekit.converters.pytorch.et_reader import parse_et, read_et
from tracekit.errors import ConversionError
from tracekit.model import CollectiveType, NodeType


def test_tensor_bytes_closed_forms():
    assert tensor_bytes([1, 2, 0, 26122, 4, "cpu"], [26122], "Tensor(float)") == 104_488
    assert tensor_bytes([1, 2, 0, 6, 2, "cuda:0"], [2, 3], "Tensor(c10::BFloat16)") == 12
    nested = [[tensor(1, 1, 128), tensor(2, 2, 128)], [tensor(3, 3, 64, 8)]]
    assert (
        tensor_bytes(
            nested,
            [[[128], [128]], [[64]]],
            "GenericList[GenericList[Tensor(float),Tensor(float)],GenericList[Tensor(long int)]]",
        )
        == 2 * 128 * 4 + 64 * 8
    )
    # unknown dtype falls back to the recorded element size
    assert tensor_bytes([1, 2, 0, 10, 2, "cpu"], [10], "Tensor(weird)") == 20


def _gloo_et():
    big = tensor(30, 31, 4096)
    shard = [tensor(40 + i, 41 + i, 128) for i in range(0, 8, 2)]
    return et_doc(
        roots()
        + [
            pg_init(3, 2, 1, 4),
            node(
                10,
                "c10d::allreduce_",
                2,
                2,
                values=[[big], "<Object>", "<Object>", "<None>", True, -1],
                shapes=[[[4096]], [], [], [], [], []],
                types=["GenericList[Tensor(float)]", "Object", "Object", "None", "Bool", "Int"],
            ),
            node(11, "gloo:all_reduce", 2, 3, values=[big], shapes=[[4096]], types=["Tensor(float)"]),
            node(
                12,
                "c10d::reduce_scatter_",
                2,
                4,
                values=[[tensor(50, 51, 128)], [shard], "<Object>", "<Object>", False, -1],
                shapes=[[[128]], [[[128]] * 4], [], [], [], []],
                types=[
                    "GenericList[Tensor(float)]",
                    "GenericList[GenericList[Tensor(float),Tensor(float),Tensor(float),Tensor(float)]]",
                    "Object",
                    "Object",
                    "Bool",
                    "Int",
                ],
            ),
            *[
                node(13 + i, "gloo:all_reduce", 12, 5 + i, values=[shard[i]], shapes=[[128]], types=["Tensor(float)"])
                for i in range(4)
            ],
            node(
                20,
                "c10d::send",
                2,
                10,
                values=[[tensor(60, 61, 32)], "<Object>", 3, 7],
                shapes=[[[32]], [], [], []],
                types=["GenericList[Tensor(float)]", "Object", "Int", "Int"],
            ),
            node(21, "gloo:send", 20, 11, values=[tensor(60, 61, 32)], shapes=[[32]], types=["Tensor(float)"]),
            node(
                22,
                "c10d::barrier",
                2,
                12,
                values=[tensor(70, 71, 1, 1), "<Object>", [], False, -1],
                shapes=[[1], [], [], [], []],
                types=["Tensor(unsigned char)", "Object", "GenericList[]", "Bool", "Int"],
            ),
            node(23, "gloo:barrier", 2, 13),
        ]
    )


def test_gloo_family_folds_into_one_op_each():
    et = parse_et(_gloo_et(), path="g.json")
    groups = read_process_groups(et)
    assert groups.groups == {"0": ()} and groups.node_id == 3
    plan = plan_comms(et, rank=1, groups=groups.groups)
    got = [(c.node_id, c.node_type, c.comm_type, c.comm_bytes, c.members, c.async_op) for c in plan.comms]
    assert got == [
        (10, NodeType.COMM_COLL_NODE, CollectiveType.ALL_REDUCE, 16384, (10, 11), True),
        (12, NodeType.COMM_COLL_NODE, CollectiveType.REDUCE_SCATTER, 4 * 128 * 4, (12, 13, 14, 15, 16), False),
        (20, NodeType.COMM_SEND_NODE, None, 128, (20, 21), None),
        (22, NodeType.COMM_COLL_NODE, CollectiveType.BARRIER, 0, (22, 23), False),
    ]
    send = plan.comms[2]
    assert (send.comm_src, send.comm_dst, send.comm_tag) == (1, 3, 7)
    assert plan.counts() == {"ALL_REDUCE": 1, "REDUCE_SCATTER": 1, "SEND": 1, "BARRIER": 1}
    assert not plan.comms[0].blocks_host and plan.comms[1].blocks_host


def test_nccl_record_param_comms_is_authoritative_and_wait_is_not_a_collective():
    extra = {
        "collective_name": "allgather",
        "dtype": "Half",
        "in_msg_nelems": 1000,
        "out_msg_nelems": 8000,
        "pg_name": "5",
        "pg_size": 8,
    }
    doc = et_doc(
        roots()
        + [
            node(10, "c10d::allgather_", 2, 1),
            node(
                11,
                "record_param_comms",
                10,
                2,
                values=[[tensor(1, 1, 1000, 2, "cuda:0")], 42, ["5", "tp"], 0, "allgather", [], [], 0, 1, 8],
                extra=extra,
            ),
            node(12, "nccl:all_gather", 11, 3),
            node(
                13,
                "record_param_comms",
                2,
                4,
                values=[42, ["", ""], 0, "wait", [], [], -1, -1, 1],
                extra={"collective_name": "wait"},
            ),
        ]
    )
    plan = plan_comms(parse_et(doc, path="n.json"), rank=0, groups={"0": (), "5": tuple(range(8))})
    (c,) = plan.comms
    assert (c.comm_type, c.comm_bytes, c.pg_name, c.seq, c.members, c.backend_ops) == (
        CollectiveType.ALL_GATHER,
        2000,
        "5",
        42,
        (10, 11, 12),
        (12,),
    )
    assert plan.waits == {13: 42} and not c.blocks_host


def test_old_record_param_comms_names_group_by_backend_id(real_dir):
    et = read_et(real_dir / "pytorch/chakra-allgather-2rank/1.0.2-chakra.0.0.4.json")
    pgs = read_process_groups(et)
    assert pgs.backend_pg == {82149104: "0"}
    plan = plan_comms(et, rank=0, groups=pgs.groups, backend_pg=pgs.backend_pg)
    assert plan.counts() == {"ALL_GATHER": 10}
    assert {(c.comm_bytes, c.pg_name) for c in plan.comms} == {(4, "0")}
    assert [c.seq for c in plan.comms] == list(range(12, 22)) and len(plan.waits) == 10


@pytest.mark.parametrize(
    "bad, message",
    [
        (
            node(
                10,
                "record_param_comms",
                2,
                1,
                values=[[], 1, ["0", ""], 0, "allshuffle"],
                extra={"collective_name": "allshuffle"},
            ),
            "unknown collective name 'allshuffle'",
        ),
        (node(10, "c10d::all_shuffle_", 2, 1), "unknown communication op 'c10d::all_shuffle_'"),
        (node(10, "nccl:frobnicate", 2, 1), "unknown communication op 'nccl:frobnicate'"),
    ],
)
def test_unknown_communication_op_is_an_error(bad, message):
    with pytest.raises(ConversionError, match=message) as exc:
        plan_comms(parse_et(et_doc(roots() + [bad]), path="u.json"), rank=0)
    assert exc.value.node_id == 10


def test_send_needs_a_rank_and_several_groups_need_a_name():
    et = parse_et(_gloo_et(), path="g.json")
    with pytest.raises(ConversionError, match="needs this trace's rank"):
        plan_comms(et, rank=None, groups={"0": ()})
    with pytest.raises(ConversionError, match="cannot tell which process group"):
        plan_comms(et, rank=0, groups={"0": (), "1": (0, 1)})


# expected per rank of torch-cpu-gloo/dist_ws4 (sizes from the ET tensor shapes, fp32)
WS4 = [
    ("c10d::allreduce_", CollectiveType.ALL_REDUCE, 104_488),
    ("c10d::allreduce_", CollectiveType.ALL_REDUCE, 4096),
    ("c10d::allgather_", CollectiveType.ALL_GATHER, 1024),
    ("c10d::_allgather_base_", CollectiveType.ALL_GATHER, 1024),
    ("c10d::broadcast_", CollectiveType.BROADCAST, 2048),
    ("c10d::reduce_scatter_", CollectiveType.REDUCE_SCATTER, 2048),
    ("c10d::_reduce_scatter_base_", CollectiveType.REDUCE_SCATTER, 2048),
    ("c10d::alltoall_base_", CollectiveType.ALL_TO_ALL, 1024),
]


@pytest.mark.parametrize("rank", range(4))
def test_dist_ws4_every_collective(real_dir, rank):
    et = read_et(real_dir / f"pytorch/torch-cpu-gloo/dist_ws4/et_rank{rank}.json")
    plan = plan_comms(et, rank=rank, groups=read_process_groups(et).groups)
    colls = [(c.name, c.comm_type, c.comm_bytes) for c in plan.comms if c.node_type == NodeType.COMM_COLL_NODE]
    assert colls == WS4 + [("c10d::barrier", CollectiveType.BARRIER, 0)]
    (p2p,) = [c for c in plan.comms if c.node_type != NodeType.COMM_COLL_NODE]
    if rank % 2 == 0:
        assert (p2p.node_type, p2p.comm_src, p2p.comm_dst, p2p.comm_tag, p2p.comm_bytes) == (
            NodeType.COMM_SEND_NODE,
            rank,
            rank + 1,
            0,
            128,
        )
    else:
        assert (p2p.node_type, p2p.comm_src, p2p.comm_dst, p2p.comm_tag, p2p.comm_bytes) == (
            NodeType.COMM_RECV_NODE,
            rank - 1,
            rank,
            0,
            128,
        )
    # every gloo:* record is folded: 7 all_reduce, 2 all_gather, broadcast, all_to_all, send|recv, barrier
    gloo = [op.id for op in et.ops if op.name.startswith("gloo:")]
    assert len(gloo) == 13 and all(g in plan.member_of for g in gloo)
