"""ASTRA-sim text workloads: real files, per-parallelism schedules, process groups, units, bad input, CLI."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tracekit.converters.text_workload import (
    convert_text_workload,
    parse_text_workload,
    read_text_workload,
)
from tracekit.errors import ConfigError, ConversionError
from tracekit.io import read_traceset
from tracekit.model import CollectiveType, NodeType
from tracekit.checks.validate import validate_traceset

from cli_inprocess import run as inprocess_run  # noqa: E402

AR, AG, A2A = CollectiveType.ALL_REDUCE, CollectiveType.ALL_GATHER, CollectiveType.ALL_TO_ALL


run = inprocess_run  # what a command prints and returns: in-process (tests/cli_inprocess.py)


def shape(trace):
    """(name, data deps) of every node: the schedule in one comparable value."""
    return [(n.name, list(n.data_deps)) for n in trace.nodes]


def comms(trace):
    return [(n.name, n.comm_type, n.comm_bytes, n.pg_name) for n in trace.nodes if n.is_comm]


# ----- the replay formula for DATA workloads ------------------------------------------------
# ASTRA-sim analytical, congestion-unaware ring all-reduce (docs/design.md section 4, values
# printed by the simulator): X(m) = floor(h*latency + m/B), B = bw * 2^30 / 1e9 bytes/ns,
# R(m) = 3 floor(m / local_mem_bw), T = e + (p-1)(X(C/p) + e + R(C/p)) + (p-1)(X(C/p) + e).


def ring_all_reduce_ns(size: int, p: int, *, bw_gbps=50, latency_ns=500, endpoint_ns=10, local_mem_gbps=1600) -> int:
    bytes_per_ns = bw_gbps * 2**30 / 1e9
    chunk = size / p
    x = math.floor(latency_ns + chunk / bytes_per_ns)
    r = 3 * math.floor(chunk / local_mem_gbps)
    return endpoint_ns + (p - 1) * (x + endpoint_ns + r) + (p - 1) * (x + endpoint_ns)


def data_parallel_total_ns(layers, allreduce_ns) -> int:
    """End of one DATA pass when collectives never delay each other (congestion-unaware).

    Forward runs all F; backward from the last layer runs W_l then I_l (no I_0); the
    all-reduce of layer l starts when W_l ends.  Total = max(compute end,
    max_l(end of W_l + allreduce_ns(size_l))).

    REPLAY-WIRING: once tracekit.replayer.simulation.engine exists, replaying
    convert_text_workload(Resnet50, p) on an ASTRA-sim-compatible spec (ring, 50 GB/s,
    500 ns, endpoint 10 ns, local-mem 1600 GB/s, one dataset split, collectives free to
    overlap) should end at data_parallel_total_ns(layers, lambda s: ring_all_reduce_ns(s, p)).
    """
    t = sum(layer.fwd_time for layer in layers) * 1000  # file values are microseconds
    end = 0
    for i in reversed(range(len(layers))):
        t += layers[i].wg_time * 1000
        end = max(end, t + allreduce_ns(layers[i].wg_comm.comm_bytes))
        if i:
            t += layers[i].ig_time * 1000
    return max(end, t)


def test_ring_all_reduce_formula_matches_astra_sim_reference():
    assert [ring_all_reduce_ns(2**20, p) for p in (4, 8, 16)] == [33_829, 43_025, 53_710]


# ----- Resnet50 DATA (bundled) --------------------------------------------------------------


@pytest.fixture(scope="module")
def resnet(test_data_dir):
    return read_text_workload(test_data_dir / "Resnet50_DataParallel.txt")


def test_resnet_one_pass_has_215_nodes_summing_to_1082450(resnet):
    ts = convert_text_workload(resnet, 4)
    assert ts.world_size == 4 and ts.process_groups == {"0": (0, 1, 2, 3)}
    for rank in range(4):
        nodes = ts[rank].nodes
        assert len(nodes) == 215
        assert [n.id for n in nodes] == list(range(215))  # ids restart on every rank
        assert sum(n.duration_ns for n in nodes) == 1_082_450_000  # the file's values are microseconds
        assert sum(n.type == NodeType.COMP_NODE for n in nodes) == 161
        # one all-reduce per layer, last layer first, sizes from the wg column
        assert [(n.comm_type, n.comm_bytes, n.pg_name) for n in nodes if n.is_comm] == [
            (AR, layer.wg_comm.comm_bytes, None) for layer in reversed(resnet.layers)
        ]
    assert sum(n.comm_bytes for n in ts[0].nodes if n.is_comm) == 102_011_648
    assert validate_traceset(ts).ok


def test_resnet_time_unit_ns_reads_astra_sim_1_cycles(resnet):
    ts = convert_text_workload(resnet, 1, time_unit="ns")
    assert sum(n.duration_ns for n in ts[0].nodes) == 1_082_450
    with pytest.raises(ConfigError, match="time unit"):
        convert_text_workload(resnet, 1, time_unit="ms")


def test_resnet_passes_chain_through_weight_gradient_all_reduce(resnet):
    ts = convert_text_workload(resnet, 2, passes=3)
    nodes = ts[1].nodes
    assert len(nodes) == 3 * 215
    by_id = {n.id: n for n in nodes}
    second_fwd0 = nodes[215]
    assert second_fwd0.name == "COMP_NODE_conv1_FWD"
    (dep,) = second_fwd0.data_deps
    assert by_id[dep].name == "COMM_COLL_NODE_conv1_ALLREDUCE" and dep == 214
    second_fwd1 = nodes[216]
    assert {by_id[d].name for d in second_fwd1.data_deps} == {
        "COMP_NODE_conv1_FWD",
        "COMM_COLL_NODE_layer_64_1_conv4_ALLREDUCE",
    }


def test_resnet_critical_path_equals_the_data_parallel_formula(resnet):
    """With collectives free to overlap, the replay total is the graph's longest path."""
    p = 4
    trace = convert_text_workload(resnet, p)[0]
    weights = np.array([ring_all_reduce_ns(n.comm_bytes, p) if n.is_comm else n.duration_ns for n in trace.nodes])
    length, _ = trace.graph().longest_path(weights)
    expected = data_parallel_total_ns(resnet.layers, lambda s: ring_all_reduce_ns(s, p))
    assert length == expected
    # compute alone is the file's 1,082,450 us; the last all-reduce (conv1, 37,632 B) is exposed
    assert data_parallel_total_ns(resnet.layers, lambda s: 0) == 1_082_450_000
    assert expected == 1_082_450_000 + ring_all_reduce_ns(37_632, p)


# ----- every real file ----------------------------------------------------------------------

REAL_FILES = {
    # file: (tp, nodes per rank at 8 ranks, compute us, collectives, comm bytes, groups incl. "0")
    "Resnet50_DataParallel.txt": (None, 215, 1_082_450, 54, 102_011_648, 1),
    "MLP_ModelParallel.txt": (None, 29, 195_206, 11, 856_832, 1),
    "MLP_HybridParallel_Data_Model.txt": (2, 36, 236_649, 17, 1_304_064, 7),
    "MLP_HybridParallel_Model_Data.txt": (2, 36, 236_649, 17, 1_304_064, 7),
    "DLRM_HybridParallel.txt": (None, 32, 51_378, 9, 3_388_416, 1),
    "Transformer_HybridParallel.txt": (None, 242, 548_942_542, 70, 3_531_489_280, 7),
}


def test_the_real_folder_has_exactly_these_files(real_dir):
    assert sorted(p.name for p in (real_dir / "text").iterdir()) == sorted(REAL_FILES)


@pytest.mark.parametrize("name", sorted(REAL_FILES))
def test_every_real_text_workload_converts(real_dir, name):
    tp, nodes, compute_us, n_comms, comm_bytes, n_groups = REAL_FILES[name]
    ts = convert_text_workload(real_dir / "text" / name, 8, tp=tp)
    assert validate_traceset(ts).ok
    assert len(ts.process_groups) == n_groups
    for trace in ts:
        assert len(trace) == nodes
        assert sum(n.duration_ns for n in trace.nodes) == compute_us * 1000
        assert sum(n.is_comm for n in trace.nodes) == n_comms
        assert sum(n.comm_bytes for n in trace.nodes if n.is_comm) == comm_bytes


def test_real_transformer_groups_and_blocking_input_gradient(real_dir):
    ts = convert_text_workload(real_dir / "text" / "Transformer_HybridParallel.txt", 8)
    assert ts.process_groups == {
        "0": tuple(range(8)),
        "1": (0, 1, 2, 3),
        "2": (4, 5, 6, 7),
        "3": (0, 4),
        "4": (1, 5),
        "5": (2, 6),
        "6": (3, 7),
    }
    nodes = ts[5].nodes
    assert nodes[0].name == "process_group:init"
    pgs = {(n.name.rsplit("_", 1)[1], n.pg_name) for n in nodes if n.is_comm}
    assert pgs == {("ALLGATHER", "2"), ("ALLREDUCE", "2"), ("ALLREDUCE", "4")}  # fwd/ig on model, wg on data
    by_id = {n.id: n for n in nodes}
    wg_q1 = next(n for n in nodes if n.name == "COMP_NODE_Q1_BWD_WG")
    (ig_comm,) = [by_id[d] for d in wg_q1.data_deps]  # W waits for the ig all-reduce
    assert (ig_comm.name, ig_comm.pg_name, ig_comm.comm_bytes) == ("COMM_COLL_NODE_Q1_ALLREDUCE", "2", 8_388_608)
    emb = [n for n in nodes if n.name == "COMM_COLL_NODE_Embedding_ALLGATHER"]
    assert [(n.comm_type, n.comm_bytes) for n in emb] == [(AG, 8_388_608)]


def test_real_transformer_rejects_a_conflicting_tp(real_dir):
    path = real_dir / "text" / "Transformer_HybridParallel.txt"
    with pytest.raises(ConfigError, match="--tp 2 disagrees .* 4"):
        convert_text_workload(path, 8, tp=2)
    with pytest.raises(ConfigError, match="divide the 6 ranks"):
        convert_text_workload(path, 6)


# ----- schedules on small hand-made workloads -----------------------------------------------

TWO_LAYERS = "x -1 10 ALLGATHER 64 1 NONE 0 100 ALLREDUCE 640 5\ny -1 20 NONE 0 2 ALLREDUCE 128 200 ALLREDUCE 1280 5\n"


def test_data_schedule_exact():
    wl = parse_text_workload(
        "DATA\n3\n"
        "a -1 10 NONE 0 1 NONE 0 100 ALLREDUCE 1000 0\n"
        "b -1 20 ALLGATHER 7 2 NONE 0 200 ALLREDUCE 2000 0\n"
        "c -1 30 NONE 0 3 NONE 0 300 ALLREDUCE 3000 0\n"
    )
    trace = convert_text_workload(wl, 1, passes=2)[0]
    one_pass = [
        ("COMP_NODE_a_FWD", []),
        ("COMP_NODE_b_FWD", [0]),
        ("COMP_NODE_c_FWD", [1]),
        ("COMP_NODE_c_BWD_WG", [2]),
        ("COMM_COLL_NODE_c_ALLREDUCE", [3]),
        ("COMP_NODE_c_BWD_IG", [3]),
        ("COMP_NODE_b_BWD_WG", [5]),
        ("COMM_COLL_NODE_b_ALLREDUCE", [6]),
        ("COMP_NODE_b_BWD_IG", [6]),
        ("COMP_NODE_a_BWD_WG", [8]),
        ("COMM_COLL_NODE_a_ALLREDUCE", [9]),
    ]
    assert shape(trace)[:11] == one_pass
    assert shape(trace)[11:14] == [
        ("COMP_NODE_a_FWD", [10]),
        ("COMP_NODE_b_FWD", [11, 7]),
        ("COMP_NODE_c_FWD", [12, 4]),
    ]
    assert [n.duration_ns for n in trace.nodes[:11]] == [
        10_000,
        20_000,
        30_000,
        300_000,
        0,
        3_000,
        200_000,
        0,
        2_000,
        100_000,
        0,
    ]
    assert [c[1:] for c in comms(trace)[:3]] == [(AR, 3000, None), (AR, 2000, None), (AR, 1000, None)]


def test_hybrid_transformer_schedule_and_groups():
    wl = parse_text_workload("HYBRID_TRANSFORMER\tmodel_parallel_NPU_group: 2\t\t\r\n2\t\r\n" + TWO_LAYERS)
    assert wl.model_parallel_size == 2
    ts = convert_text_workload(wl, 4)
    assert ts.process_groups == {"0": (0, 1, 2, 3), "1": (0, 1), "2": (2, 3), "3": (0, 2), "4": (1, 3)}
    assert shape(ts[0])[1:] == [
        ("COMP_NODE_x_FWD", []),
        ("COMM_COLL_NODE_x_ALLGATHER", [1]),
        ("COMP_NODE_y_FWD", [2]),
        ("COMP_NODE_y_BWD_IG", [3]),
        ("COMM_COLL_NODE_y_ALLREDUCE", [4]),
        ("COMP_NODE_y_BWD_WG", [5]),
        ("COMM_COLL_NODE_y_ALLREDUCE", [6]),
        ("COMP_NODE_x_BWD_IG", [6]),
        ("COMP_NODE_x_BWD_WG", [8]),
        ("COMM_COLL_NODE_x_ALLREDUCE", [9]),
    ]  # NONE positions emit nothing here
    assert comms(ts[3]) == [
        ("COMM_COLL_NODE_x_ALLGATHER", AG, 64, "2"),
        ("COMM_COLL_NODE_y_ALLREDUCE", AR, 128, "2"),
        ("COMM_COLL_NODE_y_ALLREDUCE", AR, 1280, "4"),
        ("COMM_COLL_NODE_x_ALLREDUCE", AR, 640, "4"),
    ]


def test_hybrid_data_model_ig_collective_does_not_block_weight_gradient():
    wl = parse_text_workload("HYBRID_DATA_MODEL\n2\n" + TWO_LAYERS)
    ts = convert_text_workload(wl, 4, tp=2)
    # as Chakra's converter: the NONE fwd collective of y is an all-reduce of 0 bytes
    assert shape(ts[0])[1:] == [
        ("COMP_NODE_x_FWD", []),
        ("COMM_COLL_NODE_x_ALLGATHER", [1]),
        ("COMP_NODE_y_FWD", [2]),
        ("COMM_COLL_NODE_y_NONE", [3]),
        ("COMP_NODE_y_BWD_IG", [4]),
        ("COMM_COLL_NODE_y_IG_COMM__ALLREDUCE", [5]),
        ("COMP_NODE_y_BWD_WG", [5]),
        ("COMM_COLL_NODE_y_ALLREDUCE", [7]),
        ("COMP_NODE_x_BWD_IG", [7, 6]),
        ("COMP_NODE_x_BWD_WG", [9]),
        ("COMM_COLL_NODE_x_ALLREDUCE", [10]),
    ]
    assert ts.process_groups == {"0": (0, 1, 2, 3), "1": (0, 1), "2": (2, 3), "3": (0, 2), "4": (1, 3)}
    assert [c[1:] for c in comms(ts[2])] == [
        (AG, 64, "2"),
        (AR, 0, "2"),
        (AR, 128, "2"),
        (AR, 1280, "3"),
        (AR, 640, "3"),
    ]


def test_hybrid_model_data_puts_data_parallelism_innermost():
    ts = convert_text_workload(parse_text_workload("HYBRID_MODEL_DATA\n2\n" + TWO_LAYERS), 8, tp=2)
    groups = ts.process_groups
    assert [groups[str(i)] for i in range(1, 7)] == [(0, 4), (1, 5), (2, 6), (3, 7), (0, 1, 2, 3), (4, 5, 6, 7)]
    assert [c[3] for c in comms(ts[6])] == ["3", "3", "3", "6", "6"]  # model (2,6) x3 (one NONE), data (4..7) x2
    with pytest.raises(ConfigError, match="needs the model-parallel group size"):
        convert_text_workload(parse_text_workload("HYBRID_MODEL_DATA\n2\n" + TWO_LAYERS), 8)


def test_model_schedule_ignores_weight_gradient_collectives():
    trace = convert_text_workload(parse_text_workload("MODEL\n2\n" + TWO_LAYERS), 2, passes=2)[0]
    assert shape(trace)[:9] == [
        ("COMP_NODE_x_FWD", []),
        ("COMM_COLL_NODE_x_ALLGATHER", [0]),
        ("COMP_NODE_y_FWD", [1]),
        ("COMM_COLL_NODE_y_NONE", [2]),
        ("COMP_NODE_y_BWD_IG", [3]),
        ("COMM_COLL_NODE_y_ALLREDUCE", [4]),
        ("COMP_NODE_y_BWD_WG", [4]),
        ("COMP_NODE_x_BWD_IG", [6, 5]),
        ("COMP_NODE_x_BWD_WG", [7]),
    ]
    assert shape(trace)[9] == ("COMP_NODE_x_FWD", [8])  # next pass waits for the last W of layer x
    with pytest.raises(ConfigError, match="--tp applies to hybrid workloads only"):
        convert_text_workload(parse_text_workload("MODEL\n2\n" + TWO_LAYERS), 2, tp=2)


def test_dlrm_schedule_exact():
    wl = parse_text_workload(
        "HYBRID_DLRM 1\n4\n"
        "emb -1 10 ALLTOALL 64 1 ALLTOALL 64 100 NONE 0 1\n"
        "b0 -1 20 NONE 0 2 NONE 0 200 ALLREDUCE 8 1\n"
        "t0 -1 30 ALLGATHER 9 3 NONE 0 300 ALLREDUCE 16 1\n"
        "t1 -1 40 NONE 0 4 NONE 0 400 ALLREDUCE 32 1\n"
    )
    trace = convert_text_workload(wl, 2)[0]
    assert shape(trace) == [
        ("COMP_NODE_emb_FWD", []),
        ("COMM_COLL_NODE_emb_ALLTOALL", [0]),
        ("COMP_NODE_b0_FWD", [0, 1]),
        ("COMP_NODE_t0_FWD", [2]),
        ("COMP_NODE_t1_FWD", [3]),
        ("COMP_NODE_t1_BWD_WG", [4]),
        ("COMM_COLL_NODE_t1_ALLREDUCE", [5]),
        ("COMP_NODE_t1_BWD_IG", [5]),
        ("COMP_NODE_t0_BWD_WG", [7]),
        ("COMM_COLL_NODE_t0_ALLREDUCE", [8]),
        ("COMP_NODE_t0_BWD_IG", [8]),
        ("COMM_COLL_NODE_emb_ALLTOALL", [10]),
        ("COMP_NODE_b0_BWD_WG", [10]),
        ("COMM_COLL_NODE_b0_ALLREDUCE", [12]),
        ("COMP_NODE_b0_BWD_IG", [12]),
        ("COMP_NODE_emb_BWD_WG", [14, 11]),
    ]
    assert [c[1:3] for c in comms(trace)] == [(A2A, 64), (AR, 32), (AR, 16), (A2A, 64), (AR, 8)]


@pytest.mark.parametrize("bottom", [None, 3, -1])
def test_dlrm_workload_built_in_code_without_a_valid_bottom_layer_is_a_conversion_error(bottom):
    # found by the type checker: last_bottom_layer is Optional on TextWorkload; a HYBRID_DLRM workload built in
    # code without it crashed with a TypeError (None + 1), and one out of range silently lost the embedding's
    # input-gradient all-to-all; parse_text_workload checks the range, the converter now does too
    import dataclasses

    wl = parse_text_workload(
        "HYBRID_DLRM 1\n4\nemb -1 5 ALLTOALL 8 6 ALLTOALL 8 7 NONE 0 1\n"
        + "".join(f"l{i} -1 5 NONE 0 6 NONE 0 7 NONE 0 1\n" for i in range(3)),
        path="dlrm.txt",
    )
    # the embedding's forward and input-gradient all-to-alls
    assert [c[0] for c in comms(convert_text_workload(wl, 2)[0])] == ["COMM_COLL_NODE_emb_ALLTOALL"] * 2
    with pytest.raises(ConversionError, match=rf"dlrm.txt.*last bottom-MLP layer between 0 and 2, got {bottom}"):
        convert_text_workload(dataclasses.replace(wl, last_bottom_layer=bottom), 2)


def test_micro_issues_only_weight_gradient_collectives():
    wl = parse_text_workload(
        "MICRO\n2\na -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 100 0\nb -1 5 NONE 0 5 NONE 0 5 ALLGATHER 200 0\n"
    )
    trace = convert_text_workload(wl, 2, passes=3)[1]
    assert [(n.comm_type, n.comm_bytes, list(n.data_deps)) for n in trace.nodes] == [(AR, 100, []), (AG, 200, [])] * 3


# ----- bad input ------------------------------------------------------------------------------

GOOD = "b -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n"


@pytest.mark.parametrize(
    "text, needle",
    [
        (
            "DATA\n2\na -1 1 ALLREDUC 4 1 NONE 0 1 ALLREDUCE 8 1\n" + GOOD,
            "line 3: unknown communication type 'ALLREDUC' in fwd comm type (column 4)",
        ),
        ("DATA\n2\n" + GOOD + "a -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8\n", "line 4: a layer line has 12 columns"),
        (
            "DATA\n2\na -1 1 NONE 0 1 NONE 0 1 ALLREDUCE -8 1\n" + GOOD,
            "line 3: wg comm size (column 11) must not be negative, got -8",
        ),
        (
            "DATA\n2\na -1 1.5 NONE 0 1 NONE 0 1 ALLREDUCE 8 1\n" + GOOD,
            "line 3: fwd compute time (column 3) must be an integer, got '1.5'",
        ),
        (
            "DATA\n2\na -1 1 NONE 4 1 NONE 0 1 ALLREDUCE 8 1\n" + GOOD,
            "line 3: fwd comm type is NONE but fwd comm size is 4",
        ),
        ("DATA\n3\n" + GOOD + GOOD, "line 2: announces 3 layers but the file has 2"),
        ("DATA\n1\n" + GOOD + GOOD, "line 4: more layer lines than the 1 announced"),
        ("DATA\nmany\n" + GOOD, "line 2: expected the number of layers"),
        ("PIPELINE\n1\n" + GOOD, "line 1: unsupported parallelism 'PIPELINE'"),
        ("", "line 1: empty first line"),
        ("DATA extra\n1\n" + GOOD, "line 1: unexpected words after DATA"),
        (
            "HYBRID_TRANSFORMER\n1\n" + GOOD,
            "line 1: HYBRID_TRANSFORMER needs 'model_parallel_NPU_group: <positive int>'",
        ),
        ("HYBRID_DLRM 1\n2\n" + GOOD + GOOD, "line 1: HYBRID_DLRM last bottom layer 1 must be between 0 and 0"),
    ],
)
def test_bad_text_names_file_and_line(text, needle):
    with pytest.raises(ConversionError) as exc:
        parse_text_workload(text, path="w.txt")
    assert str(exc.value) == f"w.txt: {exc.value.message}"
    assert needle in str(exc.value)


def test_astra_sim_only_collective_is_an_error_only_where_it_is_used():
    ignored = parse_text_workload("DATA\n1\na -1 1 ALLREDUCEALLTOALL 4 1 NONE 0 1 ALLREDUCE 8 1\n", path="w.txt")
    assert len(convert_text_workload(ignored, 1)[0]) == 3  # F, W, Wc: fwd column unused by DATA
    used = parse_text_workload("DATA\n1\na -1 1 NONE 0 1 NONE 0 1 ALLREDUCEALLTOALL 8 1\n", path="w.txt")
    with pytest.raises(ConversionError, match=r"^w\.txt: line 3: communication type ALLREDUCEALLTOALL \(wg\)"):
        convert_text_workload(used, 1)


def test_binary_file_is_a_conversion_error(tmp_path):
    p = tmp_path / "w.txt"
    p.write_bytes(b"\xff\xfe\x00DATA")
    with pytest.raises(ConversionError, match="not a text file"):
        read_text_workload(p)


# ----- CLI --------------------------------------------------------------------------------------


def test_cli_convert_text_writes_one_file_per_rank(tmp_path, test_data_dir):
    proc = run(
        "convert",
        "text",
        test_data_dir / "Resnet50_DataParallel.txt",
        "--ranks",
        3,
        "--passes",
        2,
        "-o",
        tmp_path / "out" / "resnet",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and "215" not in proc.stderr and "430 nodes per rank" in proc.stderr
    ts = read_traceset(tmp_path / "out" / "resnet")
    assert ts.ranks == (0, 1, 2) and [len(t) for t in ts] == [430] * 3
    assert sum(n.duration_ns for n in ts[2].nodes) == 2 * 1_082_450_000


@pytest.mark.parametrize(
    "layer, needle",
    [
        ("a -1 1 NONE 0 1 NONE 0 1 ALLREDUC 8 1", "line 3: unknown communication type 'ALLREDUC'"),
        ("a -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8", "line 3: a layer line has 12 columns"),
        ("a -1 1 NONE 0 1 NONE 0 1 ALLREDUCE -8 1", "line 3: wg comm size (column 11) must not be negative"),
    ],
)
def test_cli_bad_text_is_one_line_exit_1_and_no_output(tmp_path, layer, needle):
    src = tmp_path / "bad.txt"
    src.write_text(f"DATA\n1\n{layer}\n")
    out = tmp_path / "out"
    out.mkdir()
    proc = run("convert", "text", src, "--ranks", 2, "-o", out / "bad")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"tracekit: error: {src}: ") and needle in lines[0]
    assert list(out.iterdir()) == []


def test_cli_missing_tp_for_hybrid_is_one_line(tmp_path, test_data_dir):
    src = tmp_path / "h.txt"
    src.write_text("HYBRID_DATA_MODEL\n2\n" + TWO_LAYERS)
    proc = run("convert", "text", src, "--ranks", 4, "-o", tmp_path / "h")
    assert proc.returncode == 1 and "needs the model-parallel group size (--tp)" in proc.stderr
    assert not list(tmp_path.glob("h.*.et"))


def test_resnet_data_replay_on_astra_config_matches_formula(resnet, test_data_dir):
    """Replay of the DATA workload with an imported ASTRA-sim config equals the hand-derived total.

    Derivation (ASTRA-sim analytical semantics, docs/design.md section 4): compute nodes
    take ``duration_micros * 1000`` ns (1 ns when zero; the file's values are microseconds); each weight-gradient all-reduce costs
    the ring formula (checked against ASTRA-sim's reference values above) and, with
    ``active-chunks-per-dimension = 1`` and one dataset split, the rank's collectives run one
    at a time in issue order; the all-reduce of layer l is issued when W_l ends.  So
    ``comm_free = max(end of W_l, comm_free) + AR(size_l)`` over the backward pass, and the
    iteration ends at ``max(compute end, comm_free)``.
    """
    from tracekit.replayer import ReplayOptions, replay
    from tracekit.replayer.simulation.astra_config import import_astra_config

    layers = resnet.layers if hasattr(resnet, "layers") else resnet
    spec = import_astra_config(
        test_data_dir / "astra" / "system_ring_splits1.json", test_data_dir / "astra" / "network_ring_4.yml"
    ).spec

    def compute(d_us: int) -> int:  # duration_micros x 1000, 1 ns when zero
        return d_us * 1000 or 1

    t = sum(compute(layer.fwd_time) for layer in layers)
    comm_free = 0
    for i in reversed(range(len(layers))):
        t += compute(layers[i].wg_time)
        if layers[i].wg_comm.comm_bytes:
            comm_free = max(t, comm_free) + ring_all_reduce_ns(layers[i].wg_comm.comm_bytes, 4)
        if i:
            t += compute(layers[i].ig_time)
    expected = max(t, comm_free)
    result = replay(convert_text_workload(resnet, 4), spec, options=ReplayOptions(collective_model="astra"))
    assert expected == 1_082_454_165
    assert result.iteration_time_ns == expected
