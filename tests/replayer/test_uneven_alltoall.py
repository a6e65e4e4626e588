"""Uneven all-to-all (issue 27): per-peer sizes read from the capture, carried, timed per peer, exported with a warning.

param-dlrm's 4th all-to-all is an ``all_to_allv``: in every rank's ET ``record_param_comms`` (node 1103 in
``dlrm_eg_0.json``) the input split sizes are ``[96, 224, 288, 1664, 592, 96, 192, 240]`` floats (to ranks 0..7) and
the output splits 8 x the rank's own entry, so rank r receives ``8 x 4 x split[r]`` bytes: 3,072 (ranks 0, 5) to
53,248 (rank 3).
"""

from __future__ import annotations

import logging
import tarfile

import pytest
from _engine_kit import coll, one_dim, traceset

from tracekit.model import Attr, CollectiveType
from tracekit.replayer import ReplayOptions, replay
from tracekit.model.uneven import (
    RECV_SPLIT_BYTES,
    SEND_SPLIT_BYTES,
    instance_bytes,
    member_wire_bytes,
    uneven_warnings,
    uniform_equivalent_bytes,
)

MIB = 1 << 20
SPLIT_FLOATS = [96, 224, 288, 1664, 592, 96, 192, 240]  # dlrm_eg_<r>.json, record_param_comms "all_to_allv" #4


@pytest.mark.realdata
def test_dlrm_all_to_allv_carries_its_per_rank_sizes(real_dir, tmp_path):
    from tracekit.converters.pytorch import convert_pytorch

    for name in ("dlrm_pytorch_et.tar.gz", "dlrm_kineto.tar.gz"):
        with tarfile.open(real_dir / "pytorch" / "param-dlrm" / name) as tar:
            tar.extractall(tmp_path, filter="data")
    logging.disable(logging.WARNING)
    try:
        ts = convert_pytorch(
            sorted((tmp_path / "dlrm_pytorch_et").glob("dlrm_eg_*.json")),
            sorted((tmp_path / "dlrm_kineto").glob("worker*.json")),
            executor="serial",
        )
    finally:
        logging.disable(logging.NOTSET)
    received = []
    for rank in range(8):
        a2a = [n for n in ts[rank].nodes if n.get_attr("comm_type") == int(CollectiveType.ALL_TO_ALL)]
        assert len(a2a) == 5
        fourth = sorted(a2a, key=lambda n: n.start_time_ns)[3]
        assert list(fourth.get_attr(SEND_SPLIT_BYTES)) == [4 * s for s in SPLIT_FLOATS]
        assert list(fourth.get_attr(RECV_SPLIT_BYTES)) == [4 * SPLIT_FLOATS[rank]] * 8
        assert fourth.get_attr("comm_size") == 4 * sum(SPLIT_FLOATS) == 13_568
        received.append(sum(fourth.get_attr(RECV_SPLIT_BYTES)))
        assert len(uneven_warnings(ts[rank], ts.process_groups)) == 1
    assert (min(received), max(received)) == (3_072, 53_248)
    # the busiest member (rank 3) takes in 7 x 6,656 bytes: a uniform all-to-all of 53,248 bytes moves as much
    members = [
        (r, next(n for n in ts[r].nodes if n.get_attr(RECV_SPLIT_BYTES) and n.id == _fourth_id(ts[r])))
        for r in range(8)
    ]
    assert instance_bytes(members, tuple(range(8)), 13_568) == 53_248


def _fourth_id(trace) -> int:
    a2a = [n for n in trace.nodes if n.get_attr("comm_type") == int(CollectiveType.ALL_TO_ALL)]
    return sorted(a2a, key=lambda n: n.start_time_ns)[3].id


def _a2a(rank: int, send: list[int], recv: list[int]):
    node = coll(1, CollectiveType.ALL_TO_ALL, sum(send))
    return node.replace(
        attrs=[*node.attrs, Attr(SEND_SPLIT_BYTES, send, "int64_list"), Attr(RECV_SPLIT_BYTES, recv, "int64_list")]
    )


def _job(rows: list[list[int]]):
    """4 ranks, one all-to-all each; ``rows[r][j]`` bytes from rank r to rank j."""
    p = len(rows)
    return traceset([[_a2a(r, rows[r], [rows[j][r] for j in range(p)])] for r in range(p)], {"0": range(p)})


def test_an_imbalanced_all_to_all_is_slower_by_the_busiest_peers_extra_bytes():
    # balanced: every rank sends 1 MiB to each peer (4 MiB in); imbalanced: every rank sends 2.5 MiB to rank 1 and
    # 0.5 MiB to the others (still 4 MiB in). Rank 1 then takes in 3 x 2.5 = 7.5 MiB over the switch, where every
    # rank moved 3 MiB when balanced: the direct all-to-all (alpha-beta, a + wire / B) takes 4.5 MiB / B longer.
    spec = one_dim(4, 100.0, 1000.0, topology="switch", all_to_all="direct")  # B = 100 bytes/ns
    balanced = _job([[MIB] * 4 for _ in range(4)])
    skewed = _job([[MIB // 2, 5 * MIB // 2, MIB // 2, MIB // 2] for _ in range(4)])
    opts = ReplayOptions(collective_model="alpha_beta")
    t_bal = replay(balanced, spec, options=opts).iteration_time_ns
    t_skew = replay(skewed, spec, options=opts).iteration_time_ns
    assert t_skew - t_bal == pytest.approx(4.5 * MIB / 100.0, abs=1.0)  # 47,185.92 ns
    assert member_wire_bytes([MIB // 2, 5 * MIB // 2, MIB // 2, MIB // 2], [5 * MIB // 2] * 4, 1) == 15 * MIB // 2
    assert uniform_equivalent_bytes(15 * MIB // 2, 4) == 10 * MIB


@pytest.mark.parametrize("model", ["alpha_beta", "nccl", "astra"])
def test_every_model_times_an_uneven_all_to_all_as_the_uniform_one_its_busiest_peer_equals(model, test_data_dir):
    spec = one_dim(4, 100.0, 1000.0, topology="switch", all_to_all="direct")
    if model == "astra":  # ASTRA-sim's own 4-NPU switch config (tests/data/astra)
        from tracekit.replayer.simulation.astra_config import import_astra_config

        d = test_data_dir / "astra"
        spec = import_astra_config(
            d / "system_ring_splits1.json", d / "network_switch_4.yml", d / "no_memory_expansion.json"
        ).spec
    skewed = _job([[MIB // 2, 5 * MIB // 2, MIB // 2, MIB // 2] for _ in range(4)])
    uniform = traceset([[coll(1, CollectiveType.ALL_TO_ALL, 10 * MIB)] for _ in range(4)], {"0": range(4)})
    balanced = traceset([[coll(1, CollectiveType.ALL_TO_ALL, 4 * MIB)] for _ in range(4)], {"0": range(4)})
    opts = ReplayOptions(collective_model=model)
    t = {
        k: replay(v, spec, options=opts).iteration_time_ns
        for k, v in (("skewed", skewed), ("uniform", uniform), ("balanced", balanced))
    }
    assert t["skewed"] == t["uniform"] > t["balanced"]


def test_a_file_without_splits_is_costed_by_comm_size():
    plain = coll(1, CollectiveType.ALL_TO_ALL, 4 * MIB)
    assert instance_bytes([(0, plain), (1, plain)], (0, 1), 4 * MIB) == 4 * MIB


def test_the_astra_export_writes_one_size_and_names_the_imbalance(test_data_dir, tmp_path, caplog):
    from tracekit.replayer.simulation.astra_config import import_astra_config
    from tracekit.replayer.simulation.astra_export import export_astra

    d = test_data_dir / "astra"
    spec = import_astra_config(
        d / "system_ring_splits1.json", d / "network_switch_4.yml", d / "no_memory_expansion.json"
    ).spec
    skewed = _job([[MIB // 2, 5 * MIB // 2, MIB // 2, MIB // 2] for _ in range(4)])
    with caplog.at_level(logging.WARNING):
        export_astra(skewed, spec, tmp_path / "run")
    texts = [r.getMessage() for r in caplog.records if "uneven per-peer sizes" in r.getMessage()]
    assert len(texts) == 4  # one per rank
    assert "sends 524,288 to 2,621,440 bytes per peer" in texts[0]
    # rank 0 moves 3.5 MiB out (uniform 4.67 MiB); rank 1 takes in 7.5 MiB (uniform 10 MiB): the collective's cost
    assert "comm_size 4,194,304 bytes written" in texts[0] and "uniform 4,893,355-byte all-to-all" in texts[0]
    assert "receives 2,621,440 to 2,621,440" not in texts[1] and "uniform 10,485,760-byte all-to-all" in texts[1]
