"""NCCL-like model: latency + bytes / bandwidth per (algorithm, protocol), fastest wins.

Expected values are worked by hand from the constants of NCCL's src/graph/tuning.cc
(baseLat, hwLat, bandwidth factors) as documented in tracekit.replayer.nccl_model.
"""

from __future__ import annotations

import tomllib

import pytest

from tracekit.model import CollectiveType as C
from tracekit.replayer.collectives import make_collective_model
from tracekit.replayer.hardware import load_spec, spec_from_dict
from tracekit.replayer.nccl_model import NcclModel


def nccl_spec(nodes: int = 1, **nccl):
    data = load_spec("dgx-a100").to_dict()
    data["collectives"]["model"] = "nccl"
    if nccl:
        data["nccl"] = nccl
    return spec_from_dict(data).with_world_size(8 * nodes)


def test_large_all_reduce_in_one_node_picks_ring_simple():
    spec = nccl_spec()
    model = make_collective_model(spec)
    assert isinstance(model, NcclModel)
    n = 1 << 30
    c = model.collective_cost(C.ALL_REDUCE, n, tuple(range(8)))
    assert c.algorithm == "nccl:ring/Simple"
    # latency 8.4 + 14 steps x 3.4 us (NVLink ring Simple) = 56 us; algBw = 300 GB/s x 8 / 14.
    assert c.fixed_ns == pytest.approx(56_000.0)
    assert c.time_alone_ns(spec) == pytest.approx(56_000 + n * 14 / (8 * 300), rel=1e-12)
    assert c.wire_bytes[0][0] == 0


def test_small_all_reduce_in_one_node_picks_ring_ll():
    spec = nccl_spec()
    c = make_collective_model(spec).collective_cost(C.ALL_REDUCE, 1024, tuple(range(8)))
    # ring/LL: 3.6 + 14 x 0.47 = 10.18 us; bandwidth 300 / 4 x 8 / 14.
    # (tree/LL would be 4.4 + 2 x 7 x 0.52 = 11.68 us plus 1024 B at 110 / 3.8 / 2 x 0.9 GB/s.)
    assert c.algorithm == "nccl:ring/LL"
    assert c.time_alone_ns(spec) == pytest.approx(10_180 + 1024 * 14 / (8 * 75), rel=1e-9)


def test_small_all_reduce_across_two_nodes_picks_tree_ll():
    spec = nccl_spec(nodes=2)
    c = make_collective_model(spec).collective_cost(C.ALL_REDUCE, 1024, tuple(range(16)))
    # tree/LL: 4.4 + 2 x (7 x 0.52 x 1.8 + 1 x 5.0) = 27.504 us; busBw = min(0.9 x 25, 110) / 3.8,
    # algBw = busBw / 2 x treeCorrection[LL][log2(1024 / 64) = 4] = 0.9.
    # ring/LL would be 3.6 + 28 x 0.47 x 1.8 + 2 x 2.7 = 32.688 us + 1024 / (25 / 4 x 16 / 30).
    assert c.algorithm == "nccl:tree/LL"
    alg_bw = 22.5 / 3.8 * 0.5 * 0.9
    assert c.time_alone_ns(spec) == pytest.approx(27_504 + 1024 / alg_bw, rel=1e-9)
    assert c.wire_bytes[0][0] == 1            # bytes on the slower (IB) dimension


def test_large_all_reduce_across_nodes_has_plateau_latency():
    spec = nccl_spec(nodes=2, algorithms=["ring"], protocols=["Simple"])
    n = 1 << 30
    c = make_collective_model(spec).collective_cost(C.ALL_REDUCE, n, tuple(range(16)))
    # (8.4 + 28 x 3.4 + 2 x 9.6) x 1.9 = 233.32 us; algBw = 25 x 16 / 30.
    assert c.algorithm == "nccl:ring/Simple"
    assert c.fixed_ns == pytest.approx(233_320.0)
    assert c.time_alone_ns(spec) == pytest.approx(233_320 + n * 30 / (16 * 25), rel=1e-12)


def test_all_gather_ring_only():
    spec = nccl_spec()
    model = make_collective_model(spec)
    n = 1 << 30
    c = model.collective_cost(C.ALL_GATHER, n, tuple(range(8)))
    # 7 steps: Simple latency 8.4 + 7 x 3.4 = 32.2 us, algBw = 300 x 8 / 7.
    assert c.algorithm == "nccl:ring/Simple"
    assert c.time_alone_ns(spec) == pytest.approx(32_200 + n * 7 / (8 * 300), rel=1e-12)
    # 16 MiB: LL128 (10 + 7 x 1.9 = 23.3 us, 0.92 x 300 GB/s) beats Simple (32.2 us, 300 GB/s).
    n = 1 << 24
    c = model.collective_cost(C.ALL_GATHER, n, tuple(range(8)))
    assert c.algorithm == "nccl:ring/LL128"
    assert c.time_alone_ns(spec) == pytest.approx(23_300 + n * 7 / (8 * 276), rel=1e-12)


def test_constants_come_from_the_spec():
    base = {"ring": [3.6, 10.0, 8.4], "tree": [4.4, 4.4, 0.0]}
    spec = nccl_spec(base_latency_us={**base, "ring": [100.0, 100.0, 0.0]}, protocols=["Simple"])
    c = make_collective_model(spec).collective_cost(C.ALL_REDUCE, 1024, tuple(range(8)))
    assert c.algorithm == "nccl:ring/Simple"
    assert c.fixed_ns == pytest.approx(14 * 3.4 * 1000)
    assert spec_from_dict(tomllib.loads(spec.to_toml())) == spec


def test_all_to_all_and_p2p():
    spec = nccl_spec()
    model = make_collective_model(spec)
    c = model.collective_cost(C.ALL_TO_ALL, 8000, tuple(range(8)))
    assert c.algorithm == "nccl:p2p"
    assert c.time_alone_ns(spec) == pytest.approx((8.4 + 3.4) * 1000 + 7000 / 300)
    c = model.p2p_cost(3000, 0, 5)
    assert (c.algorithm, c.time_alone_ns(spec)) == ("nccl:p2p", pytest.approx(700 + 10.0))
