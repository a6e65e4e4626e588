"""Alpha-beta collective costs against hand-computed closed forms, to the nanosecond."""

from __future__ import annotations

import math

import pytest

from tracekit.errors import ReplayError, SpecError
from tracekit.model import CollectiveType as C
from tracekit.replayer.simulation.collectives import AlphaBetaModel, CommCost
from tracekit.replayer.simulation.collective_models import make_collective_model
from tracekit.replayer.simulation.specs import load_spec, spec_from_dict

MIB = 1 << 20


def one_dim(topology: str, size: int, *, bw: float = 50.0, lat: float = 500.0, **algorithms: str):
    return spec_from_dict(
        {
            "name": "t",
            "device": {"name": "d", "peak_flops_per_s": {"bf16": 1e12}, "mem_bandwidth_gbps": 100.0},
            "network": [
                {
                    "name": "x",
                    "topology": topology,
                    "size": size,
                    "bandwidth_gbps": bw,
                    "latency_ns": lat,
                    "algorithms": algorithms,
                }
            ],
        }
    )


def two_dim(**algorithms: str):
    dims = [
        {
            "name": "nvlink",
            "topology": "switch",
            "size": 8,
            "bandwidth_gbps": 300.0,
            "latency_ns": 700.0,
            "algorithms": algorithms,
        },
        {
            "name": "ib",
            "topology": "switch",
            "size": 4,
            "bandwidth_gbps": 25.0,
            "latency_ns": 3000.0,
            "algorithms": algorithms,
        },
    ]
    return spec_from_dict(
        {
            "name": "t2",
            "device": {"name": "d", "peak_flops_per_s": {"bf16": 1e12}, "mem_bandwidth_gbps": 100.0},
            "network": dims,
        }
    )


def cost(spec, comm_type, n, group) -> tuple[CommCost, float]:
    c = make_collective_model(spec).collective_cost(comm_type, n, tuple(group))
    return c, c.time_alone_ns(spec)


# Hand-computed: a = 500 ns, B = 50 GB/s = 50 B/ns, n = 1 MiB: n/B = 20,971.52 ns.
@pytest.mark.parametrize("topology", ["ring", "switch", "fully_connected"])
@pytest.mark.parametrize(
    "p, expected_ns",
    [
        (4, 3 * 2 * 500 + 1.5 * 20971.52),  # 34,457.28
        (8, 7 * 2 * 500 + 1.75 * 20971.52),  # 43,700.16
        (16, 15 * 2 * 500 + 1.875 * 20971.52),
    ],
)  # 54,321.60
def test_ring_all_reduce_closed_form(topology, p, expected_ns):
    c, t = cost(one_dim(topology, p), C.ALL_REDUCE, MIB, range(p))
    assert t == pytest.approx(expected_ns, abs=1e-6)
    assert c.algorithm == "ring"
    assert c.wire_bytes == ((0, 2 * (p - 1) / p * MIB),)
    assert c.fixed_ns == 2 * (p - 1) * 500


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8, 16, 64])
@pytest.mark.parametrize("n", [1, 4096, 3_000_001, 1 << 30])
@pytest.mark.parametrize("a, B", [(500.0, 50.0), (700.0, 300.0), (0.0, 25.0)])
def test_ring_all_reduce_formula_many_sizes(p, n, a, B):
    _, t = cost(one_dim("switch", p, bw=B, lat=a), C.ALL_REDUCE, n, range(p))
    assert t == pytest.approx(2 * (p - 1) * a + 2 * (p - 1) / p * n / B, rel=1e-12, abs=1e-9)


def test_literal_values_to_the_nanosecond():
    """Each literal below was computed by hand from the formula in the module table."""
    spec8 = one_dim("switch", 8, all_reduce="direct", reduce_scatter="ring")
    cases = [
        (one_dim("switch", 4), C.ALL_REDUCE, MIB, range(4), 34_457.28),
        (spec8, C.ALL_REDUCE, MIB, range(8), 2 * 500 + 1.75 * 20971.52),  # direct: 37,700.16
        (one_dim("switch", 8, all_reduce="halving_doubling"), C.ALL_REDUCE, MIB, range(8), 39_700.16),
        (one_dim("switch", 8, all_reduce="double_binary_tree"), C.ALL_REDUCE, MIB, range(8), 23_971.52),
        (one_dim("switch", 4), C.REDUCE_SCATTER, MIB, range(4), 1500 + 15_728.64),  # 17,228.64
        (one_dim("switch", 4), C.REDUCE_SCATTER_BLOCK, MIB, range(4), 17_228.64),
        (one_dim("switch", 4), C.ALL_GATHER, MIB // 4, range(4), 17_228.64),  # n in = 256 KiB
        (one_dim("switch", 4), C.ALL_TO_ALL, MIB, range(4), 500 + 15_728.64),  # direct
        (one_dim("switch", 4, all_to_all="ring"), C.ALL_TO_ALL, MIB, range(4), 1500 + 1.5 * 20971.52),
        (one_dim("switch", 4), C.BROADCAST, MIB, range(4), 1500 + 20_971.52),  # ring chain
        (one_dim("switch", 8, broadcast="double_binary_tree"), C.BROADCAST, MIB, range(8), 1500 + 20_971.52),
        (one_dim("switch", 4), C.GATHER, MIB, range(4), 500 + 3 * 20_971.52),  # direct, root
        (one_dim("switch", 8), C.BARRIER, 0, range(8), 1500.0),  # dissemination
        (one_dim("switch", 8), C.ALL_REDUCE, 0, range(8), 7000.0),  # latency only
    ]
    for spec, comm_type, n, group, expected in cases:
        _, t = cost(spec, comm_type, n, group)
        assert round(t, 6) == round(expected, 6), (comm_type, spec.network[0].algorithms)


def test_ring_topology_hops_for_strided_groups():
    # Every other rank of an 8-rank ring: ring neighbours are 2 hops apart, a = 1000 ns.
    _, t = cost(one_dim("ring", 8), C.ALL_REDUCE, MIB, (0, 2, 4, 6))
    assert t == pytest.approx(6 * 1000 + 1.5 * 20971.52, abs=1e-6)  # 37,457.28
    # Direct on a ring topology waits for the farthest member: 4 hops on an 8-ring.
    _, t = cost(one_dim("ring", 8, all_reduce="direct"), C.ALL_REDUCE, MIB, range(8))
    assert t == pytest.approx(2 * 4 * 500 + 1.75 * 20971.52, abs=1e-6)
    # On a switch the same groups cost one latency per step.
    _, t = cost(one_dim("switch", 8), C.ALL_REDUCE, MIB, (0, 2, 4, 6))
    assert t == pytest.approx(34_457.28, abs=1e-6)


def test_direct_does_not_get_faster_with_more_ranks():
    """Bytes injected per rank grow towards 2n with p, whatever the algorithm."""
    spec = one_dim("switch", 64, all_reduce="direct")
    times = [cost(spec, C.ALL_REDUCE, MIB, range(p))[1] for p in (2, 4, 8, 16, 32, 64)]
    assert times == sorted(times)


def test_hierarchical_all_reduce_two_dimensions():
    """RS on NVLink (p0 = 8), AR on IB (p1 = 4) on n/8, AG on NVLink; n = 128 MiB."""
    spec = two_dim()
    n = 1 << 27
    c, t = cost(spec, C.ALL_REDUCE, n, range(32))
    expected = (
        7 * 700
        + 7 / 8 * n / 300  # reduce-scatter, dimension 0
        + 2 * 3 * 3000
        + 2 * 3 / 4 * (n / 8) / 25  # all-reduce, dimension 1
        + 7 * 700
        + 7 * (n / 8) / 300
    )  # all-gather, dimension 0
    assert t == pytest.approx(expected, rel=1e-12)
    assert round(t) == 1_817_370  # by hand: 9,800 + 18,000 + 782,936.75 + 1,006,632.96
    assert c.algorithm == "hierarchical(ring,ring)"
    assert c.wire_bytes == ((0, 2 * 7 / 8 * n), (1, 1.5 * n / 8))
    assert c.fixed_ns == 2 * 7 * 700 + 6 * 3000


def test_hierarchical_reduce_scatter_and_all_gather():
    spec = two_dim()
    n = 1 << 27
    _, t = cost(spec, C.REDUCE_SCATTER, n, range(32))
    assert t == pytest.approx(7 * 700 + 7 / 8 * n / 300 + 3 * 3000 + 3 / 4 * (n / 8) / 25, rel=1e-12)
    # all-gather, n in per rank: outermost first (IB moves 3n), then NVLink on 4n in.
    _, t = cost(spec, C.ALL_GATHER, n, range(32))
    assert t == pytest.approx(3 * 3000 + 3 * n / 25 + 7 * 700 + 7 * (4 * n) / 300, rel=1e-12)


def test_groups_on_one_dimension_and_irregular_groups():
    spec = two_dim()
    n = MIB
    c, t = cost(spec, C.ALL_REDUCE, n, (3, 11, 19, 27))  # one GPU per node: IB only
    assert (c.algorithm, c.wire_bytes) == ("ring", ((1, 1.5 * n),))
    assert t == pytest.approx(6 * 3000 + 1.5 * n / 25, rel=1e-12)
    c, t = cost(spec, C.ALL_REDUCE, n, (0, 9))  # not a product: flat on IB
    assert c.algorithm == "flat:ring"
    assert t == pytest.approx(2 * 3000 + n / 25, rel=1e-12)
    c, t = cost(spec, C.ALL_REDUCE, n, (5,))
    assert (c.algorithm, t) == ("local", 0.0)


def test_p2p_cost():
    spec = one_dim("ring", 8)
    model = make_collective_model(spec)
    c = model.p2p_cost(MIB, 0, 3)
    assert c.time_alone_ns(spec) == pytest.approx(3 * 500 + 20971.52, abs=1e-6)
    assert c.wire_bytes == ((0, float(MIB)),)
    assert model.p2p_cost(MIB, 0, 7).time_alone_ns(spec) == pytest.approx(500 + 20971.52, abs=1e-6)
    assert model.p2p_cost(MIB, 2, 2).time_alone_ns(spec) == 0.0
    spec2 = two_dim()
    c = make_collective_model(spec2).p2p_cost(1000, 0, 9)
    assert c.wire_bytes == ((1, 1000.0),) and c.time_alone_ns(spec2) == pytest.approx(3000 + 40.0)


def test_alpha_beta_on_the_h100_preset_is_fitted():
    from dataclasses import replace

    assert load_spec("dgx-h100").collective_model == "nccl"  # the preset's default since issue 28
    spec = replace(load_spec("dgx-h100"), collective_model="alpha_beta").fitted(16)
    model = make_collective_model(spec)
    assert isinstance(model, AlphaBetaModel)
    c = model.collective_cost(C.ALL_REDUCE, 1 << 30, tuple(range(16)))
    assert c.algorithm == "hierarchical(ring,ring)"
    n = 1 << 30
    expected = 2 * (7 * 600 + 7 / 8 * n / 450) + 2 * 3000 + n / 8 / 50
    assert c.time_alone_ns(spec) == pytest.approx(expected, rel=1e-12)


def test_errors():
    model = make_collective_model(one_dim("switch", 4))
    with pytest.raises(SpecError, match="rank 4 is outside the 4 ranks"):
        model.collective_cost(C.ALL_REDUCE, 10, (0, 4))
    with pytest.raises(ReplayError, match="must not be negative, got -1"):
        model.collective_cost(C.ALL_REDUCE, -1, (0, 1))
    with pytest.raises(ReplayError, match="unknown collective type 42"):
        model.collective_cost(42, 10, (0, 1))
    assert math.isclose(model.collective_cost(0, MIB, (0, 1)).fixed_ns, 1000.0)


# --- properties ---

from hypothesis import given, settings, strategies as st  # noqa: E402

from tracekit.replayer.simulation.placement import rank_coords  # noqa: E402
from hypothesis_profiles import examples  # noqa: E402

KINDS = [
    C.ALL_REDUCE,
    C.REDUCE_SCATTER,
    C.ALL_GATHER,
    C.ALL_TO_ALL,
    C.BROADCAST,
    C.REDUCE,
    C.GATHER,
    C.SCATTER,
    C.BARRIER,
]


@settings(max_examples=examples(200), deadline=None)
@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=4), data=st.data())
def test_rank_coords_round_trip(sizes, data):
    world = math.prod(sizes)
    rank = data.draw(st.integers(0, world - 1))
    coords = rank_coords(rank, tuple(sizes))
    assert sum(c * math.prod(sizes[:i]) for i, c in enumerate(coords)) == rank


@settings(max_examples=examples(150), deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    alg=st.sampled_from(["ring", "direct", "halving_doubling"]),
    p=st.integers(2, 32),
    n1=st.integers(0, 1 << 32),
    n2=st.integers(0, 1 << 32),
)
def test_cost_grows_with_size_and_time_alone_is_fixed_plus_bytes(kind, alg, p, n1, n2):
    algs = {
        k: alg
        for k in (
            "all_reduce",
            "reduce_scatter",
            "all_gather",
            "all_to_all",
            "broadcast",
            "reduce",
            "gather",
            "scatter",
        )
    }
    spec = one_dim("switch", p, bw=37.5, lat=900.0, **algs)
    model = make_collective_model(spec)
    lo, hi = sorted((n1, n2))
    c_lo = model.collective_cost(kind, lo, tuple(range(p)))
    c_hi = model.collective_cost(kind, hi, tuple(range(p)))
    assert c_lo.time_alone_ns(spec) <= c_hi.time_alone_ns(spec)
    assert c_hi.time_alone_ns(spec) == c_hi.fixed_ns + sum(b for _, b in c_hi.wire_bytes) / 37.5


@settings(max_examples=examples(100), deadline=None)
@given(n=st.integers(1, 1 << 34), nodes=st.integers(2, 8))
def test_hierarchical_all_reduce_never_beats_its_slowest_phase_alone(n, nodes):
    spec = two_dim().with_world_size(8 * nodes)
    c = make_collective_model(spec).collective_cost(C.ALL_REDUCE, n, tuple(range(8 * nodes)))
    ib_only = 2 * (nodes - 1) * 3000 + 2 * (nodes - 1) / nodes * (n / 8) / 25
    assert c.time_alone_ns(spec) >= ib_only
