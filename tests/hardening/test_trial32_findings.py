"""Issue 32, kind 5 (the wrong numbers of the list): sizes that must match are checked, big sets print briefly.

A 1 KiB send paired with a 1 GiB recv passed the replay's checks; `info` printed 4,147 lines for a 4,096-rank
class set (one cost-coverage row per rank).
"""

from __future__ import annotations

from _hardkit import one_line_error, run

from tracekit.io import write_traceset
from tracekit.model import Attr, ExecutionTrace, Node, NodeType
from tracekit.sets.traceset import TraceSet


def _p2p(kind: NodeType, size: int, me: int, peer: int) -> ExecutionTrace:
    send = kind == NodeType.COMM_SEND_NODE
    attrs = [
        Attr.infer("comm_size", size),
        Attr.infer("comm_tag", 0),
        Attr.infer("comm_src", me if send else peer),
        Attr.infer("comm_dst", peer if send else me),
    ]
    return ExecutionTrace([Node(id=1, name="p2p", type=kind, attrs=attrs)])


def test_a_send_and_its_recv_of_different_sizes_are_refused_by_the_replay_checks(tmp_path):
    prefix = tmp_path / "pp"
    write_traceset(
        TraceSet([_p2p(NodeType.COMM_SEND_NODE, 1024, 0, 1), _p2p(NodeType.COMM_RECV_NODE, 1 << 30, 1, 0)]), prefix
    )
    line = one_line_error(run("replay", prefix, "--hw", "dgx-a100", "-o", tmp_path / "r.json"))
    assert line == (
        f"tracekit: error: 1 problem(s) found before replay: error: [p2p-size] {prefix}.0.et: rank 0: node 1: send of "
        "1.00 KiB (1,024 B) to rank 1 with tag 0 pairs with recv node 1 on rank 1 of 1.00 GiB (1,073,741,824 B): "
        "the sizes must be equal"
    )
    assert not (tmp_path / "r.json").exists()
    write_traceset(
        TraceSet([_p2p(NodeType.COMM_SEND_NODE, 1024, 0, 1), _p2p(NodeType.COMM_RECV_NODE, 1024, 1, 0)]),
        tmp_path / "ok",
    )
    assert run("replay", tmp_path / "ok", "--hw", "dgx-a100").exit_code == 0


def test_info_of_a_4096_rank_class_set_prints_a_screenful(tmp_path):
    prefix = tmp_path / "j"
    res = run(
        "generate",
        "llm",
        "--model",
        "gpt3-1.3b",
        "--layers",
        "4",
        "--tp",
        "8",
        "--pp",
        "2",
        "--ranks",
        "4096",
        "--global-batch",
        "256",
        "--classes",
        "-o",
        prefix,
    )
    assert res.exit_code == 0, res.stderr
    res = run("info", prefix)
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) < 60, len(lines)  # was 4,143: one cost-coverage row per rank
    assert sum("0-2047" in line for line in lines) == 4 and sum("2048-4095" in line for line in lines) == 4


def test_transform_dp_writes_the_new_world_size_into_a_captures_metadata(tmp_path):
    from pathlib import Path

    from tracekit.io import read_traceset

    capture = Path(__file__).parents[2] / "sample_traces" / "pytorch" / "dist_ws2"
    job = tmp_path / "job"
    res = run(
        "convert", "pytorch", "--et", f"{capture}/et_rank*.json", "--kineto", f"{capture}/kineto_rank*.json", "-o", job
    )
    assert res.exit_code == 0, res.stderr
    assert run("transform", job, "--dp", "4", "-o", tmp_path / "dp4").exit_code == 0
    assert [t.metadata.get_attr("world_size") for _, t in read_traceset(job).items()] == [2, 2]
    assert [t.metadata.get_attr("world_size") for _, t in read_traceset(tmp_path / "dp4").items()] == [4] * 4  # was 2


def test_no_check_does_not_hide_a_collective_whose_size_differs_across_members(tmp_path):
    from _hardkit import ring_job

    from tracekit.io import read_traceset

    ts = read_traceset(ring_job(tmp_path))
    nodes = [n.with_attr("comm_size", 1 << 30) if n.id == 3 else n for n in ts[1].nodes]
    write_traceset(ts.with_traces({0: ts[0], 1: ExecutionTrace(nodes, ts[1].metadata, rank=1)}), tmp_path / "bad")
    line = one_line_error(run("replay", tmp_path / "bad", "--hw", "dgx-a100", "--no-check", "-o", tmp_path / "r.json"))
    assert line == (
        f"tracekit: error: {tmp_path}/bad.1.et: rank 1: collective 0 of process group '0' differs across its members: "
        "rank 0 node 3 is ALL_REDUCE of 1,048,576 B, rank 1 node 3 is ALL_REDUCE of 1,073,741,824 B; every member "
        "must issue the same collective"
    )
    assert not (tmp_path / "r.json").exists()


def test_the_astra_compatible_replay_refuses_a_reduce_it_cannot_time_instead_of_1_ns(tmp_path):
    from pathlib import Path

    astra = Path(__file__).parents[1] / "data" / "astra"
    spec = tmp_path / "ring4.toml"
    assert (
        run(
            "hw", "import-astra", "--system", astra / "Ring.json", "--network", astra / "network_ring_4.yml", "-o", spec
        ).exit_code
        == 0
    )
    job = tmp_path / "red"
    assert (
        run("generate", "micro", "--collective", "reduce", "--size", "1MiB", "--ranks", "4", "-o", job).exit_code == 0
    )
    line = one_line_error(run("replay", job, "--hw", spec, "-o", tmp_path / "r.json"))
    assert line == (
        f"tracekit: error: {job}.0.et: rank 0: node 0: the astra-compatible model has no reduce (ASTRA-sim simulates "
        "all-reduce, reduce-scatter, all-gather and all-to-all only; it replays a broadcast with its measured "
        "duration); this REDUCE of 1,048,576 B has no measured duration to replay, so the model cannot time it: "
        "choose --collective-model alpha_beta or nccl"
    )  # was: iteration time 1 ns, counted as compute
    assert not (tmp_path / "r.json").exists()
