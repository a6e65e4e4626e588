"""NCCL-like model: latency + bytes / bandwidth per (algorithm, protocol), fastest wins.

Expected values are worked by hand from the constants of NCCL's src/graph/tuning.cc (NVIDIA/nccl
v2.30.7-1: baseLatencies, hwLatencies, llMaxBws, perChMaxTreeBws, treeCorrectionFactor) and the
dgx-a100 / dgx-h100 presets' [nccl] tables, as documented in tracekit.replayer.simulation.nccl_model.
"""

from __future__ import annotations

import tomllib

import pytest

from tracekit.model import CollectiveType as C
from tracekit.replayer.simulation.collective_models import make_collective_model
from tracekit.replayer.simulation.specs import load_spec, spec_from_dict
from tracekit.replayer.simulation.nccl_model import NcclModel


def nccl_spec(nodes: int = 1, preset: str = "dgx-a100", **nccl):
    data = load_spec(preset).to_dict()
    data["collectives"]["model"] = "nccl"
    data["nccl"].update(nccl)
    return spec_from_dict(data).with_world_size(8 * nodes)


def test_large_all_reduce_in_one_node_picks_ring_simple():
    spec = nccl_spec()
    model = make_collective_model(spec)
    assert isinstance(model, NcclModel)
    n = 1 << 30
    c = model.collective_cost(C.ALL_REDUCE, n, tuple(range(8)))
    assert c.algorithm == "nccl:ring/Simple"
    # latency 56 (preset's ring Simple base) + 14 steps x 3.4 us (NVLink ring Simple) = 103.6 us;
    # busBw 12 channels x 18.33 = 219.96 GB/s, algBw x 8 / 14.
    assert c.fixed_ns == pytest.approx(103_600.0)
    assert c.time_alone_ns(spec) == pytest.approx(103_600 + n * 14 / (8 * 219.96), rel=1e-12)
    assert c.wire_bytes[0][0] == 0


def test_small_all_reduce_in_one_node_picks_ring_ll():
    spec = nccl_spec()
    c = make_collective_model(spec).collective_cost(C.ALL_REDUCE, 1024, tuple(range(8)))
    # ring/LL: 6.6 + 14 x 1.5 = 27.6 us; busBw min(llMaxBw 87.7, 219.96 / 2) = 87.7, algBw x 8 / 14.
    # (tree/LL: 6.8 + 2 x 7 x 1.5 = 27.8 us, slower.)
    assert c.algorithm == "nccl:ring/LL"
    assert c.time_alone_ns(spec) == pytest.approx(27_600 + 1024 * 14 / (8 * 87.7), rel=1e-9)


def test_small_all_reduce_across_two_nodes_picks_tree_ll():
    spec = nccl_spec(nodes=2)
    c = make_collective_model(spec).collective_cost(C.ALL_REDUCE, 1024, tuple(range(16)))
    # tree/LL: 6.8 + 2 x (7 x 1.5 + 1 x 5.0) = 37.8 us; busBw min(0.92 x min(219.96, 2 x 8 NICs x 24),
    # 12 x 23.6) = 202.36, LL: min(202.36 / 3.8, llMaxBw 39.0) = 39.0; algBw 39 / 2 x
    # treeCorrection[LL][log2(1024/64)] 0.9.  ring/LL would be 6.6 + 28 x max(1.5, 1.0) + 2 x 2.7 = 54 us.
    assert c.algorithm == "nccl:tree/LL"
    assert c.time_alone_ns(spec) == pytest.approx(37_800 + 1024 / (39.0 * 0.5 * 0.9), rel=1e-9)
    assert c.wire_bytes[0][0] == 1  # bytes on the slower (IB) dimension


def test_large_all_reduce_across_nodes_uses_every_nic_rail():
    n = 1 << 30
    spec = nccl_spec(nodes=2)
    c = make_collective_model(spec).collective_cost(C.ALL_REDUCE, n, tuple(range(16)))
    # tree/Simple: busBw 0.92 x min(219.96, 2 x 8 NICs x 24 GB/s (NCCL's speed for a 25 GB/s HDR port)),
    # algBw half of it (treeCorrection 1 at 1 GiB); latency 8.4 + 2 x (7 x 4.0 + 1 x 14) = 92.4 us.
    # ring/Simple (busBw min(219.96, 8 x 24) = 192, algBw 192 x 16 / 30 = 102.4 > 101.18) loses on its latency,
    # (56 + 28 x 3.4 + 2 x 14) x 1.4 (plateau) = 250.88 us.
    assert c.algorithm == "nccl:tree/Simple"
    assert c.fixed_ns == pytest.approx(92_400.0)
    assert c.time_alone_ns(spec) == pytest.approx(92_400 + n / (0.92 * 219.96 * 0.5), rel=1e-12)
    ring = make_collective_model(nccl_spec(nodes=2, algorithms=["ring"]))
    c = ring.collective_cost(C.ALL_REDUCE, n, tuple(range(16)))
    assert c.time_alone_ns(spec) == pytest.approx(250_880 + n * 30 / (16 * 192), rel=1e-12)
    # The same job through one NIC per node: tree/Simple wins with busBw 0.92 x 2 x 24, algBw half of it
    # (latency 8.4 + 2 x (7 x 4.0 + 1 x 14) = 92.4 us): 4.3x slower.
    one = nccl_spec(nodes=2, nics_per_node=1)
    c1 = make_collective_model(one).collective_cost(C.ALL_REDUCE, n, tuple(range(16)))
    assert c1.algorithm == "nccl:tree/Simple"
    assert c1.time_alone_ns(one) == pytest.approx(92_400 + n / (0.92 * 48 * 0.5), rel=1e-12)


def test_h100_nvls_in_one_node_and_ring_when_nvls_is_off():
    n = 8 << 30
    spec = nccl_spec(preset="dgx-h100")
    c = make_collective_model(spec).collective_cost(C.ALL_REDUCE, n, tuple(range(8)))
    # nvls/Simple: latency hwLat(NVLink, NVLS, Simple) = 80 us (preset); busBw 2 x 0.647 x 16 x 23.175.
    assert c.algorithm == "nccl:nvls/Simple"
    bus = 2 * 0.647 * 370.8
    assert c.time_alone_ns(spec) == pytest.approx(80_000 + n * 14 / (8 * bus), rel=1e-9)
    ring = nccl_spec(preset="dgx-h100", algorithms=["ring"])
    c = make_collective_model(ring).collective_cost(C.ALL_REDUCE, n, tuple(range(8)))
    assert c.algorithm == "nccl:ring/Simple"
    assert c.time_alone_ns(ring) == pytest.approx(103_600 + n * 14 / (8 * 370.8), rel=1e-9)


def test_all_gather_ring_only():
    spec = nccl_spec()
    n = 1 << 30  # the gathered output: NCCL's nBytes (sendcount x nRanks); Chakra's comm_size is one rank's piece
    c = make_collective_model(spec).collective_cost(C.ALL_GATHER, n // 8, tuple(range(8)))
    # 7 steps: Simple latency 56 + 7 x 3.4 = 79.8 us, algBw = 219.96 x 8 / 7.
    assert c.algorithm == "nccl:ring/Simple"
    assert c.time_alone_ns(spec) == pytest.approx(79_800 + n * 7 / (8 * 219.96), rel=1e-12)


def test_latency_floor_and_constants_come_from_the_spec():
    spec = nccl_spec(latency_floor_us=40.0)
    c = make_collective_model(spec).collective_cost(C.ALL_REDUCE, 8, tuple(range(8)))
    assert c.time_alone_ns(spec) == pytest.approx(40_000.0)
    spec = nccl_spec(
        base_latency_us={"ring": [100.0, 100.0, 0.0], "tree": [100.0, 100.0, 100.0]}, protocols=["LL", "Simple"]
    )
    c = make_collective_model(spec).collective_cost(C.ALL_REDUCE, 1024, tuple(range(8)))
    assert c.algorithm == "nccl:ring/Simple"
    assert c.fixed_ns == pytest.approx(14 * 3.4 * 1000)
    assert spec_from_dict(tomllib.loads(spec.to_toml())) == spec


def test_bad_nccl_table_names_the_key():
    from tracekit.errors import SpecError

    with pytest.raises(SpecError, match=r"nccl.tree_per_channel_max_bw_gbps: must be a list of 3"):
        nccl_spec(tree_per_channel_max_bw_gbps=[1.0, 2.0])
    with pytest.raises(SpecError, match=r"nccl.base_latency_us.collnet: unknown algorithm"):
        nccl_spec(base_latency_us={"collnet": [1.0, 1.0, 1.0]})


def test_all_to_all_and_p2p():
    spec = nccl_spec()
    model = make_collective_model(spec)
    c = model.collective_cost(C.ALL_TO_ALL, 8000, tuple(range(8)))
    assert c.algorithm == "nccl:p2p"
    assert c.time_alone_ns(spec) == pytest.approx((56 + 3.4) * 1000 + 7000 / 300)
    c = model.p2p_cost(3000, 0, 5)
    assert (c.algorithm, c.time_alone_ns(spec)) == ("nccl:p2p", pytest.approx(700 + 10.0))


@pytest.mark.parametrize("nvlink_gbps", [100.0, 300.0, 600.0])
def test_a_swept_nvlink_bandwidth_moves_the_ring_bus_bandwidth_up_to_the_channels(nvlink_gbps):
    # NCCL fits its channels into the links: busBw = min(link, channels x per-channel) = min(link, 12 x 18.33)
    data = load_spec("dgx-a100").to_dict()
    data["network"][0]["bandwidth_gbps"] = nvlink_gbps
    spec = spec_from_dict(data).with_world_size(8)
    n = 1 << 30
    c = make_collective_model(spec).collective_cost(C.ALL_REDUCE, n, tuple(range(8)))
    assert c.algorithm == "nccl:ring/Simple"
    bus_bw = {100.0: 100.0, 300.0: 219.96, 600.0: 219.96}[nvlink_gbps]
    # latency 56 + 14 x 3.4 = 103.6 us (as above); algBw = busBw x 8 / 14
    assert c.time_alone_ns(spec) == pytest.approx(103_600 + n * 14 / (8 * bus_bw), rel=1e-12)


def test_fabric_beyond_one_leaf_closed_forms():
    """fat_tree, 2 nodes a leaf, up-links 4:1: a ring over 4 nodes keeps min(1, L / r) = 1/2 of its network
    bandwidth, an all-to-all keeps min(1, 1 / (r (N - L) / (N - 1))) = 1 / (4 x 2/3) = 3/8; within a leaf, all."""
    from dataclasses import replace

    from tracekit.model import CollectiveType
    from tracekit.replayer.simulation.specs import load_spec
    from tracekit.replayer.simulation.nccl_model import NcclModel

    base = replace(load_spec("dgx-a100").fitted(32), collective_model="nccl")
    ib = replace(base.network[1], fabric="fat_tree", nodes_per_leaf=2, oversubscription=4.0)
    spec = replace(base, network=(base.network[0], ib))
    flat, tree = NcclModel(base), NcclModel(spec)
    world = tuple(range(32))
    assert tree.shape(tree.placement(world)).net_bw_gbps == pytest.approx(
        0.5 * flat.shape(flat.placement(world)).net_bw_gbps
    )
    two_nodes = tuple(range(16))
    assert tree.shape(tree.placement(two_nodes)) == flat.shape(flat.placement(two_nodes))
    n = 1 << 26
    a2a = tree.collective_cost(CollectiveType.ALL_TO_ALL, n, world).wire_bytes[0][1]
    assert a2a == pytest.approx(flat.collective_cost(CollectiveType.ALL_TO_ALL, n, world).wire_bytes[0][1] / 0.375)


def test_fabric_keys_round_trip_and_are_checked():
    from dataclasses import replace

    from tracekit.errors import SpecError
    from tracekit.replayer.simulation.specs import load_spec
    from tracekit.replayer.simulation.spec_toml import spec_from_dict

    base = load_spec("dgx-a100")
    ib = replace(base.network[1], fabric="rail_optimized", nodes_per_leaf=16, oversubscription=2.0)
    spec = replace(base, network=(base.network[0], ib))
    assert spec_from_dict(spec.to_dict()).network[1] == ib
    doc = spec.to_dict()
    doc["network"][1]["oversubscription"] = 0.5
    with pytest.raises(SpecError, match="oversubscription"):
        spec_from_dict(doc)
    doc["network"][1].update(oversubscription=2.0, nodes_per_leaf=0)
    with pytest.raises(SpecError, match="nodes_per_leaf"):
        spec_from_dict(doc)


def test_network_latency_moves_inter_node_steps_when_the_table_says_what_it_stands_for():
    """azure-nd-a100-v4 states net_latency_reference_ns = 3000: +2 us of IB latency adds 2 us to each of a 2-node
    ring all-reduce's 2(N-1) = 2 inter-node steps (Simple, 1 GiB: the x1.4 plateau factor applies, NCCL's)."""
    from dataclasses import replace

    from tracekit.replayer.orchestration.bench_coll import model_point
    from tracekit.replayer.simulation.specs import load_spec

    spec = replace(load_spec("azure-nd-a100-v4").fitted(16), collective_model="nccl")
    slow = replace(spec, network=(spec.network[0], replace(spec.network[1], latency_ns=5000.0)))
    a, b = (model_point(s, "all_reduce", 16, 1 << 30) for s in (spec, slow))
    assert a.algorithm == b.algorithm == "nccl:ring/Simple"
    assert b.time_us - a.time_us == pytest.approx(2 * 2.0 * 1.4)
    dgx = replace(load_spec("dgx-a100").fitted(16), collective_model="nccl")
    dgx_slow = replace(dgx, network=(dgx.network[0], replace(dgx.network[1], latency_ns=5000.0)))
    assert model_point(dgx, "all_reduce", 16, 1 << 30) == model_point(dgx_slow, "all_reduce", 16, 1 << 30)
