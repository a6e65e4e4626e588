"""Selection: bypass edges, one iteration, CPU-op removal, rank subsets."""

from __future__ import annotations


import pytest
from _tfhelpers import coll, comp, convert_pytorch, one_rank

from tracekit.errors import ConfigError, TransformError
from tracekit.model import ExecutionTrace, Node, NodeType
from tracekit.sets.traceset import TraceSet
from tracekit.transforms import DropCpuOps, KeepIteration, KeepRanks, RemoveNodes, parse_rank_list
from tracekit.transforms.bypass import remove_nodes


def test_bypass_edges_keep_order_through_removed_chains():
    # 0 -> 1 -> 2 -> 4, 0 -> 3 -> 4; remove 1, 2, 3: 4 must wait for 0 (once)
    t = ExecutionTrace([comp(0), comp(1, [0]), comp(2, [1]), comp(3, [0]), comp(4, [2, 3], ctrl=[2])])
    out = remove_nodes(t, {1, 2, 3})
    assert [n.id for n in out.nodes] == [0, 4]
    assert list(out.nodes[1].data_deps) == [0]
    assert list(out.nodes[1].ctrl_deps) == []  # 2's control parent is none
    assert list(t.nodes[4].data_deps) == [2, 3]  # input untouched


def test_remove_nodes_by_name_and_type():
    ts = one_rank(
        [comp(0, name="aten::mm"), comp(1, [0], name="aten::relu"), coll(2, [1]), comp(3, [2], name="aten::relu")]
    )
    out = RemoveNodes(name_pattern="relu", node_types=("COMP",)).apply(ts)[0]
    assert [n.id for n in out.nodes] == [0, 2]
    assert list(out.nodes[1].data_deps) == [0]
    with pytest.raises(ConfigError, match="unknown node type 'KERNEL'"):
        RemoveNodes(node_types=("KERNEL",))
    with pytest.raises(ConfigError, match="needs a name pattern or node types"):
        RemoveNodes()


def test_drop_cpu_ops_keeps_device_and_comm_nodes():
    ts = one_rank([comp(0, cpu=True), comp(1, [0]), comp(2, [1], cpu=True), coll(3, [2]), comp(4, [3], cpu=True)])
    out = DropCpuOps().apply(ts)[0]
    assert [n.id for n in out.nodes] == [1, 3]
    assert list(out.nodes[1].data_deps) == [1]


def test_keep_ranks_renumbers_cuts_groups_and_drops_p2p_to_removed_peers():
    from tracekit.model.groups import pg_init_node
    from tracekit.model import Attr

    def rank(r):
        send = Node(
            3,
            "send",
            NodeType.COMM_SEND_NODE,
            [2],
            attrs=[
                Attr("comm_src", r, "int32_val"),
                Attr("comm_dst", (r + 1) % 4, "int32_val"),
                Attr("comm_tag", 0, "int32_val"),
                Attr("comm_size", 8, "int64_val"),
            ],
        )
        return ExecutionTrace(
            [
                pg_init_node(0, {"0": (), "1": (0, 1), "2": (2, 3)}),
                comp(1, [], 10),
                coll(2, [1], pg="1" if r < 2 else "2"),
                send,
                comp(4, [3], 5),
            ]
        )

    ts = TraceSet([rank(r) for r in range(4)])
    out = KeepRanks((1, 2)).apply(ts)
    assert out.ranks == (0, 1)
    assert out.process_groups == {"0": (0, 1), "1": (0,), "2": (1,)}
    # the one-member groups' collectives are gone, the send of old rank 2 to old rank 3 too
    assert [n.id for n in out[1].nodes] == [0, 1, 4]
    assert list(out[1].nodes[2].data_deps) == [1]
    # old rank 1 sends to old rank 2 = new rank 1
    sends = [n for n in out[0].nodes if n.type == NodeType.COMM_SEND_NODE]
    assert [(n.comm_src, n.comm_dst) for n in sends] == [(0, 1)]
    with pytest.raises(TransformError, match="loses ranks"):
        KeepRanks((1, 2), partial="error").apply(ts)
    with pytest.raises(TransformError, match=r"ranks \[9\] are not in the trace set"):
        KeepRanks((0, 9)).apply(ts)


def test_parse_rank_list():
    assert parse_rank_list("0-3,8,10-11") == (0, 1, 2, 3, 8, 10, 11)
    for bad in ("", "3-1", "a", "1,,2"):
        with pytest.raises(ConfigError):
            parse_rank_list(bad)


def test_keep_iteration_refuses_missing_annotation():
    ts = one_rank([comp(0), comp(1, [0])])
    with pytest.raises(TransformError, match=r"rank 0: no iteration 3: no node is named like 'ProfilerStep#N'"):
        KeepIteration(3).apply(ts)
    with pytest.raises(ConfigError, match="iteration must be an integer >= 0"):
        KeepIteration(-1)


def test_keep_iteration_window_and_dangling_deps():
    ts = one_rank(
        [
            comp(0, name="ProfilerStep#1", cpu=True),
            comp(1, [0], ctrl=[0]),
            comp(2, [1]),
            comp(3, [2], name="ProfilerStep#2", cpu=True),
            comp(4, [2, 3], ctrl=[3]),
        ]
    )
    out = KeepIteration(2).apply(ts)[0]
    assert [n.id for n in out.nodes] == [3, 4]
    assert list(out.nodes[1].data_deps) == [3]
    with pytest.raises(TransformError, match=r"no iteration 5: it has ProfilerStep#N markers for N in \[1, 2\]"):
        KeepIteration(5).apply(ts)


@pytest.mark.realdata
def test_keep_iteration_on_param_resnet(real_dir):
    ts = convert_pytorch([str(real_dir / "pytorch/param-resnet/resnet_et.json.gz")])
    assert len(ts[0]) == 14347
    names = [n.name for n in ts[0].nodes]
    assert [x for x in names if x.startswith("ProfilerStep#")] == ["ProfilerStep#6", "ProfilerStep#7", "ProfilerStep#8"]
    one = KeepIteration(7).apply(ts)[0]
    kept = [n.name for n in one.nodes]
    # one iteration: one forward, backward and optimizer annotation (the ET holds three of each)
    assert kept.count("## forward ##") == 1 and kept.count("## backward ##") == 1
    assert kept.count("Optimizer.step#SGD.step") == 1
    assert kept.count("autograd::engine::evaluate_function: LogSoftmaxBackward0") == 1
    assert len(one) == 4783
    ids = {n.id for n in one.nodes}
    assert all(d in ids for n in one.nodes for d in n.data_deps + n.ctrl_deps)
