"""Results: per-rank figures, the collective table, the critical path, JSON round trips."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.converters.generators.micro import collective_bench
from tracekit.errors import ReplayError
from tracekit.model import CollectiveType
from tracekit.replayer import replay
from tracekit.replayer.results.build import union_length
from tracekit.replayer.results.result import ReplayResult, bus_factor, nccl_tests_size

from tests.replayer._engine_kit import coll, comp, one_dim, traceset

AR, AG, RS = CollectiveType.ALL_REDUCE, CollectiveType.ALL_GATHER, CollectiveType.REDUCE_SCATTER
MiB = 1 << 20


def test_union_length():
    s = np.array([0.0, 5.0, 20.0, 21.0, 30.0])
    e = np.array([10.0, 12.0, 25.0, 22.0, 30.0])
    assert union_length(s, e) == 12 + 5
    assert union_length(np.array([]), np.array([])) == 0.0


def test_nccl_tests_bandwidth_rules():
    assert bus_factor("ALL_REDUCE", 8) == 2 * 7 / 8
    assert bus_factor("ALL_GATHER", 8) == bus_factor("REDUCE_SCATTER", 8) == 7 / 8
    assert bus_factor("BROADCAST", 8) == bus_factor("SEND_RECV", 2) == 1.0
    assert nccl_tests_size("ALL_GATHER", 100, 8) == 800
    assert nccl_tests_size("ALL_REDUCE", 100, 8) == 100


def test_collective_row_bandwidths():
    a, bw, n, p = 0.0, 100.0, 8 * MiB, 8
    result = replay(collective_bench(p, "all_reduce", n), one_dim(p, bw, a))
    (row,) = result.collectives
    t = 2 * (p - 1) / p * n / bw
    assert row.time_ns == round(t)  # integer ns, rounded to the nearest
    assert row.algbw_gbps == pytest.approx(n / t, rel=1e-5)
    # with no latency the ring reaches the link bandwidth exactly: busbw = B
    assert row.busbw_gbps == pytest.approx(bw, rel=1e-5)  # the time is rounded to ns
    ag = replay(collective_bench(p, "all_gather", n), one_dim(p, bw, a)).collectives[0]
    assert ag.busbw_gbps == pytest.approx(bw, rel=1e-5)
    assert ag.algbw_gbps == pytest.approx(n * p / ag.time_ns)


def test_overlap_exposed_and_idle():
    # rank r: compute 10 us on stream 0 and an all-reduce on the comm stream in parallel; then 2 us compute.
    bw, n = 10.0, 200_000  # all-reduce of 2 ranks: 2*(1/2)*n/B = 20 us alone
    ranks = [[comp(0, 10_000), coll(1, AR, n), comp(2, 2_000, deps=[0, 1])] for _ in range(2)]
    result = replay(traceset(ranks), one_dim(2, bw, 0.0))
    r0 = result.rank(0)
    assert r0.iteration_time_ns == pytest.approx(22_000)
    assert r0.compute_ns == 12_000
    assert r0.comm_ns == pytest.approx(20_000)
    assert r0.exposed_comm_ns == pytest.approx(10_000)
    assert r0.idle_ns == pytest.approx(0.0, abs=1e-9)
    cp = result.critical_path
    assert [s.category for s in cp.steps] == ["comm", "compute"]
    assert cp.length_ns == pytest.approx(result.iteration_time_ns)
    assert cp.comm_ns == pytest.approx(20_000) and cp.compute_ns == 2_000


def test_critical_path_crosses_ranks_through_the_late_member():
    # rank 1 computes 5 us before the collective; rank 0 only 1 us. The path: rank 1's compute, the
    # collective (entered by rank 1, the last to arrive), then rank 0's 3 us compute.
    ranks = [
        [comp(0, 1_000), coll(1, AR, 1000, deps=[0]), comp(2, 3_000, deps=[1])],
        [comp(0, 5_000), coll(1, AR, 1000, deps=[0]), comp(2, 1_000, deps=[1])],
    ]
    result = replay(traceset(ranks), one_dim(2, 1.0, 0.0))
    steps = [(s.rank, s.node_id, s.category) for s in result.critical_path.steps]
    assert steps == [(1, 0, "compute"), (1, 1, "comm"), (0, 2, "compute")]
    assert result.critical_path.length_ns == result.iteration_time_ns == 5_000 + 1000 + 3_000
    assert result.critical_path.steps[0].name == "comp0"
    assert result.rank(0).comm_wait_ns == 4_000


def test_json_round_trip(tmp_path):
    result = replay(collective_bench(4, "reduce_scatter", MiB, compute_ns=100, iterations=2), one_dim(4, 5.0, 9.0))
    back = ReplayResult.from_json(result.to_json())
    assert back == result
    assert back.schedule is None
    full = ReplayResult.from_json(result.to_json(include_schedule=True))
    for a, b in zip(full.schedule, result.schedule):
        assert np.array_equal(a.start_ns, b.start_ns) and np.array_equal(a.node_ids, b.node_ids)
        assert np.array_equal(np.isnan(a.xfer_start_ns), np.isnan(b.xfer_start_ns))
    path = tmp_path / "r.json"
    result.write_json(str(path))
    assert ReplayResult.from_json(path.read_bytes()) == result
    d = result.to_dict()
    assert d["provenance"]["spec_name"] == "test" and d["node_count"] == 16
    assert d["compute_methods"] == {"measured": 8}


def test_from_dict_rejects_other_documents():
    with pytest.raises(ReplayError, match="not a tracekit replay result"):
        ReplayResult.from_dict({"format": "x"})
    with pytest.raises(ReplayError, match="format version 99"):
        ReplayResult.from_dict({"format": "tracekit.replay", "format_version": 99})
    with pytest.raises(ReplayError, match="malformed"):
        ReplayResult.from_dict({"format": "tracekit.replay", "format_version": 1})
    with pytest.raises(ReplayError, match="not JSON"):
        ReplayResult.from_json(b"{")
    with pytest.raises(ReplayError, match="no rank 9"):
        replay(collective_bench(2, "all_reduce", 8), one_dim(2, 1.0, 0.0)).rank(9)


def test_collective_summary_groups_rows():
    result = replay(collective_bench(4, "all_reduce", MiB, iterations=3), one_dim(4, 10.0, 100.0))
    (row,) = result.collective_summary()
    assert row["count"] == 3 and row["kind"] == "ALL_REDUCE" and row["group_size"] == 4
    assert row["mean_time_ns"] == pytest.approx(result.collectives[0].time_ns, abs=1)  # each row rounded to ns
