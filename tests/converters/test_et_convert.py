"""Graph semantics of the ET (+ Kineto) conversion on hand-built traces."""

from __future__ import annotations

from _pytorch_synth import cpu, et_doc, kineto_doc, mlp_et, mlp_kineto, node, pg_init, roots, tensor
from tracekit.converters.pytorch.et_convert import convert_et
from tracekit.converters.pytorch.et_reader import parse_et
from tracekit.converters.pytorch.kineto_reader import parse_kineto
from tracekit.converters.pytorch.linker import link
from tracekit.model import CollectiveType, NodeType


def _convert(et_d, k_d=None, rank=0):
    et = parse_et(et_d, path="et.json")
    k = parse_kineto(k_d, path="k.json") if k_d is not None else None
    res = convert_et(et, rank=rank, kineto=k, linkage=link(et, k) if k is not None else None)
    res.trace.graph().topological_order()  # acyclic (raises naming the cycle otherwise)
    return res, {n.id: n for n in res.trace.nodes}


def test_exclusive_durations_chain_and_ctrl_deps():
    res, n = _convert(mlp_et(), mlp_kineto())
    # ProfilerStep#1 [0,100) is a range: duration 0 (its span kept in range_duration_ns).  Own time:
    # linear 50-(8+30) = 12 plus the step's uncovered [0,10) before it = 22; relu 20 plus the uncovered
    # [60,70) before it and the step's tail [90,100) after it = 40 (host_timing's rule).
    assert {i: n[i].duration_ns for i in (10, 11, 12, 13, 14)} == {10: 0, 11: 22_000, 12: 8_000, 13: 30_000, 14: 40_000}
    assert n[10].get_attr("range_duration_ns") == 100_000
    assert n[11].get_attr("host_gap_ns") == 10_000 and n[14].get_attr("host_gap_ns") == 20_000
    assert n[13].start_time_ns == 25_000
    assert [list(n[i].data_deps) for i in (10, 11, 12, 13, 14)] == [[], [10], [11], [12], [13]]
    assert [list(n[i].ctrl_deps) for i in (10, 11, 12, 13, 14)] == [[], [10], [11], [11], [10]]
    assert all(n[i].is_cpu_op for i in n) and res.node_counts == {"COMP_NODE": 5}


def test_without_kineto_durations_are_zero_and_order_kept():
    res, n = _convert(mlp_et())
    assert all(x.duration_ns == 0 for x in n.values())
    assert list(n[14].data_deps) == [13] and res.link is None


def test_cross_thread_edges_only_at_hand_overs():
    et = et_doc(
        roots((1, 2))
        + [
            node(10, "a", 2, 1),
            node(11, "b", 3, 2, tid=2),
            node(12, "c", 3, 3, tid=2),
            node(13, "d", 2, 4),
            node(14, "e", 3, 5, tid=2),
        ]
    )
    ev = [
        cpu("a", 0, 10, rf=1),
        cpu("b", 20, 10, rf=2, tid=200),
        cpu("c", 30, 10, rf=3, tid=200),
        cpu("d", 50, 10, rf=4),
        cpu("e", 55, 10, rf=5, tid=200),
    ]  # e overlaps d: no hand-over
    _, n = _convert(et, kineto_doc(ev))
    assert list(n[11].data_deps) == [10]  # a ended before b started
    assert list(n[12].data_deps) == [11]
    assert list(n[13].data_deps) == [10, 12]  # own thread, then hand-over from c
    assert list(n[14].data_deps) == [12]  # d still running when e started


def _gloo(async_first: bool):
    buf = tensor(30, 31, 1024)
    return et_doc(
        roots()
        + [
            pg_init(3, 2, 1, 2),
            node(
                10,
                "c10d::allreduce_",
                2,
                2,
                values=[[buf], "<Object>", "<Object>", "<None>", async_first, -1],
                shapes=[[[1024]], [], [], [], [], []],
                types=["GenericList[Tensor(float)]", "Object", "Object", "None", "Bool", "Int"],
            ),
            node(11, "gloo:all_reduce", 2, 3, values=[buf], shapes=[[1024]], types=["Tensor(float)"]),
            node(
                12,
                "aten::mul",
                2,
                4,
                values=[tensor(40, 41, 8), tensor(42, 43, 8)],
                shapes=[[8], [8]],
                types=["Tensor(float)", "Tensor(float)"],
            ),
            node(13, "aten::div_", 2, 5, values=[buf, 2], shapes=[[1024], []], types=["Tensor(float)", "Int"]),
        ]
    )


def test_blocking_collective_sits_on_the_thread():
    res, n = _convert(_gloo(False))
    assert n[10].type == NodeType.COMM_COLL_NODE and n[10].comm_type == CollectiveType.ALL_REDUCE
    assert (n[10].comm_bytes, n[10].pg_name) == (4096, "0")
    assert 11 not in n  # gloo:all_reduce is folded, not a compute node
    assert list(n[12].data_deps) == [10] and list(n[13].data_deps) == [12]
    assert res.trace.process_groups() == {"0": ()}
    assert res.comm_counts == {"ALL_REDUCE": 1}


def test_async_collective_branches_and_is_joined_by_its_reader():
    _, n = _convert(_gloo(True))
    assert list(n[10].data_deps) == []  # first op on the thread
    assert list(n[12].data_deps) == []  # the host does not wait for the async all-reduce
    assert sorted(n[13].data_deps) == [10, 12]  # div_ reads the reduced buffer


def test_kernels_follow_launch_and_stream_order_and_nccl_kernel_is_the_comm():
    et = et_doc(
        roots()
        + [
            pg_init(3, 2, 1, 2),
            node(10, "aten::mm", 2, 2),
            node(
                11,
                "c10d::allreduce_",
                2,
                3,
                values=[[tensor(5, 6, 256, 4, "cuda:0")], "<Object>", "<Object>", "<None>", -1],
                shapes=[[[256]], [], [], [], []],
                types=["GenericList[Tensor(float)]", "Object", "Object", "None", "Int"],
            ),
            node(12, "nccl:all_reduce", 11, 4),
            node(13, "aten::item", 2, 5),
        ]
    )

    def rt(name, ts, corr):
        return {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": name,
            "pid": 100,
            "tid": 100,
            "ts": ts,
            "dur": 2,
            "args": {"correlation": corr},
        }

    def kern(name, ts, dur, corr):
        return {
            "ph": "X",
            "cat": "kernel",
            "name": name,
            "pid": 0,
            "tid": 7,
            "ts": ts,
            "dur": dur,
            "args": {"correlation": corr, "stream": 7, "device": 0},
        }

    ev = [
        cpu("aten::mm", 0, 10, rf=2),
        rt("cudaLaunchKernel", 2, 1),
        kern("gemm", 5, 20, 1),
        cpu("c10d::allreduce_", 12, 10, rf=3),
        cpu("nccl:all_reduce", 13, 8, rf=4, cat="user_annotation"),
        rt("cudaLaunchKernel", 14, 2),
        kern("ncclDevKernel_AllReduce_Sum_f32", 26, 30, 2),
        cpu("aten::item", 30, 40, rf=5),
        rt("cudaDeviceSynchronize", 35, 3),
    ]
    ev[-1]["dur"] = 30
    res, n = _convert(et, kineto_doc(ev))
    gemm = next(x for x in n.values() if x.name == "gemm")
    assert list(gemm.data_deps) == [10] and list(gemm.ctrl_deps) == [10] and gemm.stream == 7 and not gemm.is_cpu_op
    comm = n[11]
    assert comm.type == NodeType.COMM_COLL_NODE and comm.stream == 7 and comm.duration_ns == 30_000
    # the thread's time in the call (c10d 12-22 us, nccl:all_reduce inside it) is an issue node cut at the
    # kernel's launch (cudaLaunchKernel ends at 16 us): 4 us before plus the 2 us the thread sat between aten::mm's
    # end and the call (latency after its dependency), 6 us after (issue 27)
    issue = [x for x in n.values() if x.name == "issue:c10d::allreduce_"]
    before, after = sorted(issue, key=lambda x: x.start_time_ns)
    assert (before.duration_ns, after.duration_ns, after.start_time_ns) == (6_000, 6_000, 16_000)
    assert list(before.data_deps) == [10] and list(after.data_deps) == [before.id] and before.is_cpu_op
    assert sorted(comm.data_deps) == sorted([before.id, gemm.id])  # after the launch and the gemm on stream 7
    assert n[13].data_deps[0] == after.id  # NCCL does not block the host: the thread goes on after the call
    assert comm.id in n[13].data_deps  # cudaDeviceSynchronize in aten::item waits for it
    assert not any(x.name.startswith("ncclDevKernel") for x in n.values())
    assert res.node_counts == {"METADATA_NODE": 1, "COMP_NODE": 5, "COMM_COLL_NODE": 1}


def test_ids_unique_and_device_ids_after_et_ids():
    _, n = _convert(mlp_et(), mlp_kineto())
    assert len(n) == 5 and min(n) == 10
