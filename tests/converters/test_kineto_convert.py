"""Kineto-only conversion on small synthetic traces with hand-computed results."""

from __future__ import annotations

import orjson
import pytest

from tracekit.converters.pytorch.kineto_convert import convert_kineto, convert_kineto_rank
from tracekit.errors import ConversionError
from tracekit.model import CollectiveType, NodeType
from tracekit.checks.validate import validate_trace


def X(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def K(name, ts, dur, stream=7, **args):
    return X("kernel", name, ts, dur, pid=0, tid=stream, stream=stream, device=0, **args)


def write(tmp_path, events, name="kineto_rank0.json", **top):
    p = tmp_path / name
    p.write_bytes(orjson.dumps({"schemaVersion": 1, "traceEvents": events, **top}))
    return p


def by_name(trace):
    return {n.name: n for n in trace.nodes}


def test_host_nesting_exclusive_durations_and_chain(tmp_path):
    t = convert_kineto_rank(
        write(
            tmp_path,
            [
                X("cpu_op", "outer", 0, 10.5),  # children 1..3 (2 us) and 5..8.25 (3.25 us)
                X("cpu_op", "inner1", 1, 2),
                X("cpu_op", "inner2", 5, 3.25),
                X("cpu_op", "leaf", 6, 1),  # inside inner2
                X("cpu_op", "next", 11, 1),
            ],
        )
    )
    n = by_name(t)
    assert n["outer"].duration_ns == 10500 - 2000 - 3250 == 5250
    assert n["inner2"].duration_ns == 3250 - 1000
    assert n["leaf"].duration_ns == 1000
    # pre-order chain outer -> inner1 -> inner2 -> leaf -> next, ctrl parent = enclosing op
    order = ["outer", "inner1", "inner2", "leaf", "next"]
    for a, b in zip(order, order[1:]):
        assert list(n[b].data_deps) == [n[a].id]
    assert list(n["leaf"].ctrl_deps) == [n["inner2"].id] and list(n["next"].ctrl_deps) == []
    assert t.rank == 0 and t.nodes[0].type == NodeType.METADATA_NODE
    assert sum(x.duration_ns for x in t.nodes if x.is_cpu_op) == 10500 + 1000
    assert validate_trace(t).ok


def test_kernel_depends_on_launch_and_stream_predecessor(tmp_path):
    t = convert_kineto_rank(
        write(
            tmp_path,
            [
                X("cpu_op", "aten::mm", 0, 10),
                X("cuda_runtime", "cudaLaunchKernel", 1, 2, correlation=11),
                X("cuda_runtime", "cudaLaunchKernel", 4, 2, correlation=12),
                K("gemm", 5, 3.001, correlation=11),
                K("relu", 8.5, 1, correlation=12),
                X("cuda_runtime", "cudaDeviceSynchronize", 7, 3, correlation=13),
                X("cpu_op", "aten::item", 10.5, 1),
            ],
        )
    )
    n = by_name(t)
    launches = [x for x in t.nodes if x.name == "cudaLaunchKernel"]
    assert list(n["gemm"].data_deps) == [launches[0].id]
    assert sorted(n["relu"].data_deps) == sorted([launches[1].id, n["gemm"].id])
    assert n["gemm"].duration_ns == 3001 and n["gemm"].stream == 7 and n["gemm"].is_cpu_op is False
    # relu (started 8.5) finished inside the sync: the wait attaches to the first host node after the
    # sync that starts after relu started, i.e. aten::item
    assert n["relu"].id in n["aten::item"].data_deps
    assert all(d < x.id for x in t.nodes for d in x.data_deps)  # forward in time -> acyclic
    assert validate_trace(t).ok


def nccl_events(coll="allreduce", nelems=1024, dtype="Float", pg="0", **extra):
    return [
        X("cpu_op", "c10d::allreduce_", 0, 20),
        X(
            "cpu_op",
            "record_param_comms",
            1,
            18,
            **{
                "Collective name": coll,
                "In msg nelems": nelems,
                "Out msg nelems": nelems,
                "dtype": dtype,
                "Group size": 2,
                "Process Group Name": pg,
                "Process Group Ranks": "[0, 1]",
                **extra,
            },
        ),
        X("user_annotation", "nccl:all_reduce", 2, 10),
        X("cuda_runtime", "cudaLaunchKernel", 3, 2, correlation=21),
        K(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            10,
            40,
            stream=40,
            correlation=21,
        ),
    ]


def test_nccl_kernel_becomes_comm_coll_with_record_param_comms_args(tmp_path):
    info = {
        "rank": 1,
        "world_size": 2,
        "backend": "nccl",
        "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}],
    }
    t = convert_kineto_rank(write(tmp_path, nccl_events(dtype="BFloat16"), distributedInfo=info))
    (comm,) = [x for x in t.nodes if x.is_comm]
    assert comm.name.startswith("ncclDevKernel_AllReduce")
    assert comm.type == NodeType.COMM_COLL_NODE and comm.comm_type == CollectiveType.ALL_REDUCE
    assert comm.comm_bytes == 1024 * 2 and comm.pg_name == "0" and comm.duration_ns == 40000
    assert t.rank == 1 and t.process_groups() == {"0": (0, 1)}
    # host ops of the family stay compute nodes (their host time is real)
    assert {x.name for x in t.nodes if x.type == NodeType.COMP_NODE} >= {"c10d::allreduce_", "nccl:all_reduce"}
    assert validate_trace(t).ok


def test_send_recv_peers_from_record_param_comms(tmp_path):
    ev = nccl_events(coll="send", nelems=8, **{"Dst Rank": 1})
    ev[0]["name"] = "c10d::send"
    ev[2]["name"] = "nccl:send"
    t = convert_kineto_rank(write(tmp_path, ev, distributedInfo={"rank": 0, "world_size": 2}))
    (comm,) = [x for x in t.nodes if x.is_comm]
    assert comm.type == NodeType.COMM_SEND_NODE
    assert (comm.comm_src, comm.comm_dst, comm.comm_bytes) == (0, 1, 32)


def test_gloo_collective_on_host_folds_worker_record(tmp_path):
    t = convert_kineto_rank(
        write(
            tmp_path,
            [
                X(
                    "cpu_op",
                    "c10d::allreduce_",
                    0,
                    5,
                    **{"Input Dims": [[[10]], [], [], []], "Input type": ["TensorList", "", "", ""]},
                ),
                X(
                    "user_annotation",
                    "gloo:all_reduce",
                    6,
                    50,
                    tid=2,
                    **{"Input Dims": [[10]], "Input type": ["float"]},
                ),
                X("cpu_op", "aten::add", 7, 1),
            ],
            distributedInfo={"rank": 0, "world_size": 2},
        )
    )
    names = [x.name for x in t.nodes]
    assert "gloo:all_reduce" not in names  # folded into the COMM node
    (comm,) = [x for x in t.nodes if x.is_comm]
    assert (comm.name, comm.comm_bytes, comm.comm_type) == ("c10d::allreduce_", 40, CollectiveType.ALL_REDUCE)


def test_unknown_collective_name_is_an_error(tmp_path):
    p = write(tmp_path, nccl_events(coll="allfoo"), distributedInfo={"rank": 0})
    with pytest.raises(ConversionError, match=r"kineto_rank0\.json: rank 0: unknown collective name 'allfoo'"):
        convert_kineto_rank(p)


def test_metadata_only_trace_has_nothing_to_convert(tmp_path):
    p = write(
        tmp_path,
        [
            {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "x"}},
            X("Trace", "PyTorch Profiler (0)", 0, 5, pid="Spans", tid="PyTorch Profiler"),
        ],
    )
    with pytest.raises(ConversionError, match=r"nothing to convert: .*only Trace x1"):
        convert_kineto_rank(p)


def test_counters_only_trace_has_nothing_to_convert(tmp_path):
    p = write(
        tmp_path,
        [
            X("cuda_runtime", "cudaLaunchKernel", 1, 1, correlation=1),
            X("cuda_profiler_range", "range", 1, 5, pid=0, tid=0),
        ],
    )
    with pytest.raises(ConversionError, match="1 kernel launches but no kernel.*CUPTI range-profiler"):
        convert_kineto_rank(p)


def test_fwdbwd_flow_is_a_cross_thread_edge(tmp_path):
    t = convert_kineto_rank(
        write(
            tmp_path,
            [
                X("cpu_op", "aten::mul", 0, 2, tid=1),
                X("cpu_op", "MulBackward0", 10, 2, tid=2),
                {"ph": "s", "id": 5, "pid": 1, "tid": 1, "ts": 0, "cat": "fwdbwd", "name": "fwdbwd"},
                {"ph": "f", "id": 5, "pid": 1, "tid": 2, "ts": 10, "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"},
                {"ph": "f", "id": 6, "pid": 1, "tid": 2, "ts": 10, "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"},
            ],
        )
    )
    n = by_name(t)
    assert list(n["MulBackward0"].data_deps) == [n["aten::mul"].id]


def test_rank_from_file_name_and_duplicate_ranks(tmp_path):
    a = write(tmp_path, [X("cpu_op", "a", 0, 1)], name="trace_rank3.json")
    assert convert_kineto_rank(a).rank == 3
    b = write(tmp_path, [X("cpu_op", "a", 0, 1)], name="other_rank3.json")
    with pytest.raises(ConversionError, match="rank 3 appears twice"):
        convert_kineto([a, b])
    ts = convert_kineto([a, write(tmp_path, [X("cpu_op", "b", 0, 1)], name="x_rank1.json")])
    assert ts.ranks == (1, 3)
