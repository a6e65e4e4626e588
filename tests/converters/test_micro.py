"""Microbenchmark generators: exact sizes, types, groups and dependencies; shared builder helpers; CLI."""

from __future__ import annotations

from collections import Counter

import pytest

from tracekit.converters.generators.build import (
    ProcessGroups,
    RankTraceBuilder,
    parse_collective,
    parse_ranks,
    parse_size,
)
from tracekit.converters.generators.micro import (
    CHAKRA_SHAPES,
    chakra_shape,
    collective_bench,
    send_recv_bench,
)
from tracekit.errors import ConfigError
from tracekit.io import read_traceset, write_traceset
from tracekit.model import CollectiveType, NodeType
from tracekit.checks.validate import validate_traceset

from cli_inprocess import run as inprocess_run  # noqa: E402

MIB64 = 64 * 2**20


run = inprocess_run  # what a command prints and returns: in-process (tests/cli_inprocess.py)


def attr_kinds(node):
    return {a.name: a.kind for a in node.attrs}


# ----- helpers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("4096", 4096),
        ("64MiB", 67_108_864),
        ("64mib", 67_108_864),
        ("64M", 67_108_864),
        ("1GB", 1_000_000_000),
        ("1GiB", 1_073_741_824),
        ("1.5KiB", 1536),
        ("2 MB", 2_000_000),
        ("0", 0),
        ("1TB", 10**12),
    ],
)
def test_parse_size_decimal_and_binary_units(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text, needle",
    [
        ("-1MiB", "negative"),
        ("12XB", "unknown size unit"),
        ("0.3B", "whole number"),
        ("MiB", "cannot read"),
    ],
)
def test_parse_size_rejects(text, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_size(text)


def test_parse_ranks_ranges_and_steps():
    assert parse_ranks("0-3,8-14:2") == (0, 1, 2, 3, 8, 10, 12, 14)
    assert parse_ranks("5,1") == (5, 1)
    with pytest.raises(ConfigError, match="twice"):
        parse_ranks("0-3,2")
    with pytest.raises(ConfigError, match="empty"):
        parse_ranks("3-1")


def test_parse_collective_spellings():
    assert parse_collective("all_reduce") is CollectiveType.ALL_REDUCE
    assert parse_collective("ALL-TO-ALL") is CollectiveType.ALL_TO_ALL
    assert parse_collective("reducescatter") is CollectiveType.REDUCE_SCATTER
    with pytest.raises(ConfigError, match="all_gather"):
        parse_collective("allreduc")


def test_process_groups_number_distinct_rank_sets():
    g = ProcessGroups(8)
    assert g.add(range(4), "tp 0") == "1"
    assert g.add([3, 2, 1, 0]) == "1"  # same set, same name
    assert g.add(range(8)) == "0"  # all ranks is the default group
    assert g.add([4, 5, 6, 7], "tp 1") == "2"
    assert g.mapping() == {"0": tuple(range(8)), "1": (0, 1, 2, 3), "2": (4, 5, 6, 7)}
    with pytest.raises(ConfigError, match="outside"):
        g.add([7, 8])


def test_builder_attribute_kinds_follow_chakra_conventions():
    b = RankTraceBuilder(rank=3)
    c = b.comp("gemm", duration_ns=1500, num_ops=2 * 4096**3, tensor_bytes=3 * 2 * 4096**2)
    s = b.send("s", 1024, dst=4, tag=7, deps=[c, None])
    b.collective("ar", CollectiveType.ALL_REDUCE, MIB64, deps=[s])
    comp, send, coll = b.nodes
    assert attr_kinds(comp) == {"is_cpu_op": "bool_val", "num_ops": "int64_val", "tensor_size": "uint64_val"}
    assert comp.num_ops == 137_438_953_472 and comp.tensor_bytes == 100_663_296
    assert attr_kinds(send) == {
        "is_cpu_op": "bool_val",
        "comm_src": "int32_val",
        "comm_dst": "int32_val",
        "comm_tag": "int32_val",
        "comm_size": "int64_val",
    }  # no pg_name: all ranks
    assert (send.comm_src, send.comm_dst, send.comm_tag, list(send.data_deps)) == (3, 4, 7, [0])
    assert attr_kinds(coll)["comm_type"] == "int64_val" and attr_kinds(coll)["comm_size"] == "int64_val"
    assert [n.id for n in b.nodes] == [0, 1, 2]
    with pytest.raises(ConfigError, match="negative"):
        b.collective("bad", CollectiveType.ALL_REDUCE, -1)


# ----- collectives ------------------------------------------------------------------------


def test_all_reduce_with_compute_and_iterations(tmp_path):
    ts = collective_bench(8, "all_reduce", parse_size("64MiB"), compute_ns=2500, iterations=3)
    assert validate_traceset(ts).ok
    paths = write_traceset(ts, tmp_path / "ar")
    assert [p.name for p in paths] == [f"ar.{r}.et" for r in range(8)]
    back = read_traceset(tmp_path / "ar")
    for rank in range(8):
        nodes = back[rank].nodes
        assert [n.type for n in nodes] == [NodeType.COMP_NODE, NodeType.COMM_COLL_NODE] * 3
        assert [list(n.data_deps) for n in nodes] == [[], [0], [1], [2], [3], [4]]
        assert [n.duration_ns for n in nodes if n.type == NodeType.COMP_NODE] == [2500] * 3
        colls = [n for n in nodes if n.is_comm]
        assert {(n.comm_type, n.comm_bytes, n.pg_name) for n in colls} == {
            (CollectiveType.ALL_REDUCE, 67_108_864, None)
        }  # all ranks: no pg_name (ASTRA-sim's convention)


@pytest.mark.parametrize("ctype", list(CollectiveType))
def test_every_collective_type_has_its_wire_number(ctype, tmp_path):
    ts = collective_bench(4, ctype.name.lower(), 1_000_000)
    write_traceset(ts, tmp_path / "c")
    node = read_traceset(tmp_path / "c")[2].nodes[0]
    assert node.get_attr("comm_type") == int(ctype) and node.comm_bytes == 1_000_000


def test_collective_on_a_subgroup_declares_it():
    ts = collective_bench(8, CollectiveType.ALL_GATHER, 2**20, group=parse_ranks("0-7:2"))
    assert ts.process_groups["1"] == (0, 2, 4, 6)
    assert validate_traceset(ts).ok
    for rank in range(8):
        nodes = ts[rank].nodes
        assert nodes[0].name == "process_group:init" and nodes[0].type == NodeType.METADATA_NODE
        assert ts[rank].process_groups() == {"0": (), "1": (0, 2, 4, 6)}
        colls = [n for n in nodes if n.is_comm]
        if rank % 2 == 0:
            assert [(n.comm_type, n.comm_bytes, n.pg_name) for n in colls] == [
                (CollectiveType.ALL_GATHER, 1_048_576, "1")
            ]
        else:
            assert colls == []


def test_collective_rejects_bad_parameters():
    with pytest.raises(ConfigError, match=r"\[8, 9\].*outside 0\.\.7"):
        collective_bench(8, "all_reduce", 1, group=range(6, 10))
    with pytest.raises(ConfigError, match="iterations"):
        collective_bench(8, "all_reduce", 1, iterations=0)
    with pytest.raises(ConfigError, match="positive"):
        collective_bench(0, "all_reduce", 1)


# ----- send/recv --------------------------------------------------------------------------


def _messages(ts, node_type):
    return Counter(
        (n.comm_src, n.comm_dst, n.comm_tag, n.comm_bytes) for t in ts for n in t.nodes if n.type == node_type
    )


def test_ring_each_rank_sends_to_next_and_every_send_has_its_recv():
    ts = send_recv_bench(4, "ring", 2**20, iterations=2)
    assert validate_traceset(ts).ok
    sends, recvs = _messages(ts, NodeType.COMM_SEND_NODE), _messages(ts, NodeType.COMM_RECV_NODE)
    assert sends == recvs
    assert set(sends) == {(r, (r + 1) % 4, it, 1_048_576) for r in range(4) for it in range(2)}
    rank1 = ts[1].nodes
    assert [(n.type, list(n.data_deps)) for n in rank1] == [
        (NodeType.COMM_SEND_NODE, []),
        (NodeType.COMM_RECV_NODE, []),
        (NodeType.COMM_SEND_NODE, [0, 1]),
        (NodeType.COMM_RECV_NODE, [0, 1]),
    ]


def test_pairwise_exchange_visits_every_peer_in_order():
    p = 4
    ts = send_recv_bench(p, "pairwise", 4096, compute_ns=100)
    assert _messages(ts, NodeType.COMM_SEND_NODE) == _messages(ts, NodeType.COMM_RECV_NODE)
    for r in range(p):
        nodes = ts[r].nodes
        assert len(nodes) == 1 + 2 * (p - 1)
        assert [n.comm_dst for n in nodes if n.type == NodeType.COMM_SEND_NODE] == [(r + k) % p for k in (1, 2, 3)]
        assert [n.comm_src for n in nodes if n.type == NodeType.COMM_RECV_NODE] == [(r - k) % p for k in (1, 2, 3)]
        assert [list(n.data_deps) for n in nodes] == [[], [0], [0], [1, 2], [1, 2], [3, 4], [3, 4]]


def test_pingpong_orders_send_and_recv():
    ts = send_recv_bench(3, "pingpong", 8, iterations=2)
    a, b = ts[0].nodes, ts[1].nodes
    assert [n.type for n in a] == [NodeType.METADATA_NODE] + [NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE] * 2
    assert [n.type for n in b] == [NodeType.METADATA_NODE] + [NodeType.COMM_RECV_NODE, NodeType.COMM_SEND_NODE] * 2
    assert [list(n.data_deps) for n in a[1:]] == [[], [1], [2], [3]]
    assert len(ts[2]) == 1
    assert _messages(ts, NodeType.COMM_SEND_NODE) == _messages(ts, NodeType.COMM_RECV_NODE)
    with pytest.raises(ConfigError, match="exactly 2"):
        send_recv_bench(3, "pingpong", 8, group=[0, 1, 2])
    with pytest.raises(ConfigError, match="unknown send/recv pattern"):
        send_recv_bench(3, "tree", 8)


# ----- Chakra et_generator shapes ---------------------------------------------------------


def test_chakra_shapes_all_validate():
    assert {
        "one_comp_node",
        "two_comp_nodes_independent",
        "two_comp_nodes_dependent",
        "one_comm_coll_node_allreduce",
        "one_comm_coll_node_alltoall",
        "one_comm_coll_node_allgather",
        "one_comm_coll_node_reducescatter",
        "one_remote_mem_load_node",
        "one_remote_mem_store_node",
        "one_metadata_node_all_types",
    } <= set(CHAKRA_SHAPES)
    for name in CHAKRA_SHAPES:
        assert validate_traceset(chakra_shape(name, 2)).ok, name


def test_chakra_shape_values():
    dep = chakra_shape("two_comp_nodes_dependent", 3)[2].nodes
    assert [(n.id, list(n.data_deps), n.duration_ns) for n in dep] == [(0, [], 5000), (1, [0], 5000)]
    rs = chakra_shape("one_comm_coll_node_reducescatter", 2, comm_bytes=12345)[1].nodes
    assert [(n.type, n.get_attr("comm_type"), n.comm_bytes) for n in rs] == [(NodeType.COMM_COLL_NODE, 7, 12345)]
    load = chakra_shape("one_remote_mem_load_node", 1)[0].nodes[0]
    assert (load.type, load.tensor_bytes) == (NodeType.MEM_LOAD_NODE, 1024)
    with pytest.raises(ConfigError, match="one_comp_node"):
        chakra_shape("no_such_shape", 2)


def test_metadata_node_with_every_attribute_kind_round_trips(tmp_path):
    ts = chakra_shape("one_metadata_node_all_types", 1)
    write_traceset(ts, tmp_path / "md")
    node = read_traceset(tmp_path / "md")[0].nodes[0]
    assert len(node.attrs) == 31  # 15 kinds x (value, list) + is_cpu_op (ASTRA-sim completes only CPU-op METADATA)
    assert node.get_attr("is_cpu_op") is True
    assert {(a.name, a.kind) for a in node.attrs} == {(a.name, a.kind) for a in ts[0].nodes[0].attrs}
    assert node.get_attr("sfixed64") == -9876543210 and list(node.get_attr("bytes_list")) == [b"12345", b"12345"]


# ----- CLI --------------------------------------------------------------------------------


def test_cli_generate_micro_all_reduce(tmp_path):
    proc = run(
        "generate",
        "micro",
        "--collective",
        "all_reduce",
        "--size",
        "64MiB",
        "--ranks",
        8,
        "--compute-us",
        "2.5",
        "--iterations",
        2,
        "-o",
        tmp_path / "ar",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    ts = read_traceset(tmp_path / "ar")
    assert ts.world_size == 8
    assert [n.comm_bytes for n in ts[7].nodes if n.is_comm] == [67_108_864, 67_108_864]
    assert [n.duration_ns for n in ts[7].nodes if not n.is_comm] == [2500, 2500]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--collective", "allreduc", "--size", "1MiB"], "unknown collective 'allreduc'"),
        (["--collective", "all_reduce", "--size", "-64MiB"], "must not be negative"),
        (["--collective", "all_reduce", "--size", "1MiB", "--group", "0-9"], "outside 0..7"),
        (["--collective", "all_reduce", "--pattern", "ring", "--size", "1MiB"], "exactly one of"),
    ],
)
def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path, args, needle):
    proc = run("generate", "micro", *args, "--ranks", 8, "-o", tmp_path / "x")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []
