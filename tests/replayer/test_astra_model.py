"""ASTRA-sim compatibility: imported ASTRA-sim configs reproduce its analytical backend to the ns."""

from __future__ import annotations

import dataclasses

import json
import tomllib

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.errors import SpecError
from tracekit.model import CollectiveType as C
from tracekit.replayer.simulation.astra_config import import_astra_config
from tracekit.replayer.simulation.astra_model import AstraModel
from tracekit.replayer.simulation.collectives import UnsupportedCollectiveError
from tracekit.replayer.simulation.collective_models import make_collective_model
from tracekit.replayer.simulation.specs import spec_from_dict
from tracekit.model import Attr, Node, NodeType
from tracekit.replayer import ReplayOptions, replay
from tests.replayer._engine_kit import comp, traceset

MIB = 1 << 20


@pytest.fixture(scope="module")
def astra_dir(test_data_dir):
    return test_data_dir / "astra"


def imported(astra_dir, topology: str, p: int, splits: int = 1):
    result = import_astra_config(
        astra_dir / f"system_ring_splits{splits}.json",
        astra_dir / f"network_{topology}_{p}.yml",
        astra_dir / "no_memory_expansion.json",
    )
    return result.spec


# Every reference value in docs/design.md section 4 (printed by ASTRA-sim's analytical backend):
# 1 MiB per rank, 50 GB/s, 500 ns, endpoint-delay 10, local-mem-bw 1600.
REFERENCE = [
    ("ring", 4, C.ALL_REDUCE, 1, 33_829),
    ("ring", 8, C.ALL_REDUCE, 1, 43_025),
    ("ring", 16, C.ALL_REDUCE, 1, 53_710),
    ("switch", 4, C.ALL_REDUCE, 1, 36_829),
    ("switch", 8, C.ALL_REDUCE, 1, 50_025),
    ("switch", 16, C.ALL_REDUCE, 1, 68_710),
    ("ring", 4, C.REDUCE_SCATTER, 1, 17_653),
    ("ring", 8, C.REDUCE_SCATTER, 1, 22_368),
    ("ring", 16, C.REDUCE_SCATTER, 1, 27_760),
    ("ring", 4, C.REDUCE_SCATTER, 4, 22_240),
]


@pytest.mark.parametrize("topology, p, comm_type, splits, expected_ns", REFERENCE)
def test_astra_reference_values(astra_dir, topology, p, comm_type, splits, expected_ns):
    spec = imported(astra_dir, topology, p, splits)
    model = make_collective_model(spec)
    assert isinstance(model, AstraModel)
    cost = model.collective_cost(comm_type, MIB, tuple(range(p)))
    assert cost.fixed_ns == expected_ns
    assert cost.time_alone_ns(spec) == expected_ns
    assert (cost.shares_bandwidth, cost.wire_bytes, cost.algorithm) == (False, (), "astra:ring")


def test_hand_computed_terms_for_the_other_collectives(astra_dir):
    """B = 50 * 2^30 / 1e9 = 53.6870912 B/ns: X(256 KiB) on a ring = floor(500 + 4882.8125) = 5382,
    X(1 MiB) = floor(500 + 19531.25) = 20031, R(256 KiB) = 3 * floor(262144 / 1600) = 489."""
    model = make_collective_model(imported(astra_dir, "ring", 4))
    assert model.message_ns(0, 262_144, 1) == 5382
    assert model.message_ns(0, MIB, 1) == 20_031
    assert model.reduction_ns(262_144) == 489
    group = (0, 1, 2, 3)
    assert model.collective_cost(C.ALL_GATHER, MIB, group).fixed_ns == 10 + 3 * (20_031 + 10)  # 60,133
    assert model.collective_cost(C.ALL_TO_ALL, MIB, group).fixed_ns == 10 + 6 * (5382 + 10)  # 32,362
    assert model.p2p_cost(MIB, 0, 1).fixed_ns == 20_031
    assert model.p2p_cost(MIB, 0, 2).fixed_ns == int(2 * 500 + MIB / 53.6870912)  # 2 hops


def test_direct_all_reduce_uses_the_farthest_member(astra_dir):
    data = imported(astra_dir, "ring", 4).to_dict()
    data["network"][0]["algorithms"]["all_reduce"] = "direct"
    model = make_collective_model(spec_from_dict(data))
    # farthest member on a 4-ring: 2 hops; X = floor(1000 + 4882.8125) = 5882.
    assert model.collective_cost(C.ALL_REDUCE, MIB, (0, 1, 2, 3)).fixed_ns == 10 + (5882 + 10 + 489) + (5882 + 10)


def test_si_bandwidth_convention(astra_dir):
    result = import_astra_config(
        astra_dir / "system_ring_splits1.json", astra_dir / "network_ring_4.yml", bandwidth_convention="si"
    )
    model = make_collective_model(result.spec)
    # B = 50 B/ns: X(256 KiB) = floor(500 + 5242.88) = 5742; R = 489.
    assert model.collective_cost(C.ALL_REDUCE, MIB, (0, 1, 2, 3)).fixed_ns == 10 + 3 * (5742 + 10 + 489) + 3 * (
        5742 + 10
    )


def test_import_of_the_upstream_examples(astra_dir):
    result = import_astra_config(
        astra_dir / "Ring.json", astra_dir / "Ring.yml", astra_dir / "no_memory_expansion.json"
    )
    spec = result.spec
    assert spec.world_size == 64
    assert (spec.network[0].topology, spec.network[0].bandwidth_gbps, spec.network[0].latency_ns) == (
        "ring",
        50.0,
        500.0,
    )
    assert spec.astra.endpoint_delay_ns == 10 and spec.astra.local_mem_bw_gbps == 50.0
    assert spec.collective_model == "astra" and spec.compute.mode == "astra" and not spec.fit_to_world_size
    assert result.ignored == (f"{astra_dir / 'Ring.json'}: scheduling-policy = 'LIFO'",)
    assert spec_from_dict(tomllib.loads(spec.to_toml())) == spec
    # 64-rank ring all-reduce of 1 MiB with local-mem-bw 50: X(16384) = floor(500 + 305.17578125) = 805,
    # R(16384) = 3 * floor(16384 / 50) = 981.
    cost = make_collective_model(spec).collective_cost(C.ALL_REDUCE, MIB, tuple(range(64)))
    assert cost.fixed_ns == 10 + 63 * (805 + 10 + 981) + 63 * (805 + 10)


def test_three_dimension_network_needs_one_algorithm_per_dimension(astra_dir):
    with pytest.raises(SpecError) as err:
        import_astra_config(astra_dir / "Ring.json", astra_dir / "Ring_FullyConnected_Switch.yml")
    assert str(err.value) == (
        f"{astra_dir / 'Ring.json'}: key all-reduce-implementation: names 1 algorithm(s) "
        f"but the network has 3 dimension(s)"
    )


def test_three_dimension_import(astra_dir, tmp_path):
    system = tmp_path / "sys3.json"
    system.write_text((astra_dir / "Ring.json").read_text().replace('["ring"]', '["ring", "direct", "ring"]'))
    spec = import_astra_config(system, astra_dir / "Ring_FullyConnected_Switch.yml").spec
    assert spec.dim_sizes == (2, 8, 4)
    assert [d.topology for d in spec.network] == ["ring", "fully_connected", "switch"]
    assert [d.algorithm("all_reduce") for d in spec.network] == ["ring", "direct", "ring"]
    # A communicator group on one dimension (the 8-rank fully connected one, ranks 0, 2, 4, ... 14): ASTRA-sim
    # runs a group smaller than the network as one ring whatever the config names, hand-offs 10 ns (the binary
    # printed 79,271 ns on every member). B = 100 * 2^30 / 1e9: X(131072) = floor(500 + 1220.703125) = 1720;
    # R = 3 * floor(131072 / 50) = 7863.
    # Measured on c459ab6 ([astra] build = "c459ab6"; 518bd51 runs the configured algorithm, astra_groups.py).
    spec = dataclasses.replace(spec, astra=dataclasses.replace(spec.astra, build="c459ab6"))
    model = make_collective_model(spec)
    cost = model.collective_cost(C.ALL_REDUCE, MIB, tuple(range(0, 16, 2)))
    assert cost.fixed_ns == 10 + 7 * (1720 + 10 + 7863) + 7 * (1720 + 10) == 79_271
    assert cost.algorithm == "astra:ring(group)"


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda s: s.replace('"endpoint-delay": 10', '"endpoint-delay": "ten"'),
            "key endpoint-delay: must be an integer",
        ),
        (lambda s: s.replace('"local-mem-bw": 50,', ""), "key local-mem-bw: is required"),
        (
            lambda s: s.replace('["ring"],\n  "all-gather', '["oneRing"],\n  "all-gather'),
            "key all-reduce-implementation: algorithm 'oneRing' is not supported",
        ),
        (lambda s: s.replace('"boost-mode": 0', '"boost-mode": 1'), "key boost-mode: only 0 is supported"),
        (lambda s: s.replace("{", "{{"), "not valid JSON"),
    ],
)
def test_bad_system_json_names_file_and_key(astra_dir, tmp_path, edit, message):
    system = tmp_path / "sys.json"
    system.write_text(edit((astra_dir / "Ring.json").read_text()))
    with pytest.raises(SpecError) as err:
        import_astra_config(system, astra_dir / "Ring.yml")
    assert str(err.value).startswith(f"{system}: ") and message in str(err.value)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "topology: [ Torus ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n",
            "key topology[0]: 'Torus' is not supported",
        ),
        (
            "topology: [ Ring ]\nnpus_count: [ 4, 2 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n",
            "must have one entry per dimension",
        ),
        (
            "topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 0 ]\nlatency: [ 500 ]\n",
            "key bandwidth[0]: must be a number from 1e-06 to 1e18 (GB/s), got 0",
        ),
        ("topology: [ Ring ]\nnpus_count: [ 4 ]\nlatency: [ 500 ]\n", "key bandwidth: is required"),
        ("topology: [ Ring\n", "not valid YAML"),
    ],
)
def test_bad_network_yaml_names_file_and_key(astra_dir, tmp_path, text, message):
    network = tmp_path / "net.yml"
    network.write_text(text)
    with pytest.raises(SpecError) as err:
        import_astra_config(astra_dir / "Ring.json", network)
    assert str(err.value).startswith(f"{network}: ") and message in str(err.value)


def test_remote_memory_other_than_none_is_refused(astra_dir, tmp_path):
    mem = tmp_path / "mem.json"
    mem.write_text('{"memory-type": "PER_NPU_MEMORY_EXPANSION"}')
    with pytest.raises(SpecError, match="key memory-type: only NO_MEMORY_EXPANSION"):
        import_astra_config(astra_dir / "Ring.json", astra_dir / "Ring.yml", mem)


def test_unsupported_collectives_and_algorithms(astra_dir):
    model = make_collective_model(imported(astra_dir, "ring", 4))
    for comm_type in (C.BROADCAST, C.REDUCE, C.GATHER, C.SCATTER, C.BARRIER):
        with pytest.raises(UnsupportedCollectiveError, match="measured duration"):
            model.collective_cost(comm_type, MIB, (0, 1, 2, 3))
    spec = imported(astra_dir, "ring", 4)
    data = spec.to_dict()
    data["network"][0]["algorithms"]["all_reduce"] = "halving_doubling"
    # ASTRA-sim's halving-doubling, 1 MiB on a 4-ring (printed by the binary: 32,833 ns): messages 512 KiB to the
    # neighbour, 256 KiB (reduced) two hops away, then back: 10 + (10265 + 10) + (5882 + 10 + 489) + (5882 + 10)
    # + (10265 + 10)
    model = make_collective_model(spec_from_dict(data))
    assert model.collective_cost(C.ALL_REDUCE, MIB, (0, 1, 2, 3)).fixed_ns == 32_833
    data["network"][0]["size"] = 3
    with pytest.raises(
        SpecError,
        match=r"key network\[0\].algorithms.all_reduce: ASTRA-sim's halving_doubling "
        r"needs a power-of-two",
    ):
        make_collective_model(spec_from_dict(data))
    data["network"][0]["size"] = 4
    data["network"][0]["algorithms"]["all_to_all"] = "halving_doubling"
    with pytest.raises(SpecError, match="halving-doubling has no all-to-all"):
        make_collective_model(spec_from_dict(data)).collective_cost(C.ALL_TO_ALL, MIB, (0, 1, 2, 3))


def test_cli_import_astra(astra_dir, tmp_path):
    out = tmp_path / "ring4.toml"
    result = CliRunner().invoke(
        cli,
        [
            "hw",
            "import-astra",
            "--system",
            str(astra_dir / "system_ring_splits1.json"),
            "--network",
            str(astra_dir / "network_ring_4.yml"),
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "scheduling-policy" in result.stderr and "wrote" in result.stderr
    from tracekit.replayer.simulation.specs import read_spec

    spec = read_spec(out)
    assert make_collective_model(spec).collective_cost(C.ALL_REDUCE, MIB, (0, 1, 2, 3)).fixed_ns == 33_829
    result = CliRunner().invoke(
        cli,
        [
            "hw",
            "import-astra",
            "--system",
            str(astra_dir / "system_ring_splits1.json"),
            "--network",
            str(astra_dir / "network_switch_8.yml"),
        ],
    )
    assert result.exit_code == 0 and 'topology = "switch"' in result.stdout


@pytest.mark.realdata
def test_real_astra_sim_traces_cost_the_reference_value(real_dir, astra_dir):
    """The collective in ASTRA-sim's own example traces (all_reduce.{0..3}.et: 1 MiB on 4 NPUs)."""
    from tracekit.io import read_traceset

    ts = read_traceset(real_dir / "chakra" / "astra-sim-allreduce-4npus" / "all_reduce")
    spec = imported(astra_dir, "ring", 4).fitted(ts.world_size)
    model = make_collective_model(spec)
    for trace in ts:
        (node,) = [n for n in trace.nodes if n.type == 7]
        assert (node.comm_type, node.comm_bytes) == (C.ALL_REDUCE, MIB)
        cost = model.collective_cost(node.comm_type, node.comm_bytes, ts.group_ranks(node.pg_name or "0"))
        assert cost.fixed_ns == 33_829


@pytest.mark.realdata
def test_real_onecomm_64_on_the_upstream_ring(real_dir, astra_dir, tmp_path):
    import tarfile

    from tracekit.io import read_trace

    with tarfile.open(real_dir / "chakra" / "astra-sim-onecomm-64" / "onecomm_allreduce.tar") as tar:
        members = [m for m in tar.getmembers() if m.name.endswith(".0.et")]
        tar.extractall(tmp_path, members=members, filter="data")
    (path,) = list(tmp_path.rglob("*.0.et"))
    (node,) = [n for n in read_trace(path).nodes if n.type == 7]
    spec = import_astra_config(astra_dir / "Ring.json", astra_dir / "Ring.yml").spec
    cost = make_collective_model(spec).collective_cost(node.comm_type, node.comm_bytes, tuple(range(64)))
    # Hand-computed ring formula for this size (B = 53.6870912 B/ns, local-mem-bw 50, e = 10).
    piece = node.comm_bytes // 64
    x = int(500 + piece / 53.6870912)
    r = 3 * int(piece / 50)
    assert node.comm_type == C.ALL_REDUCE
    assert cost.fixed_ns == 10 + 63 * (x + 10 + r) + 63 * (x + 10)


def test_double_binary_tree_ranks_finish_at_their_own_time(astra_dir):
    """ASTRA-sim's tree all-reduce, 1 MiB on a 4-ring (printed by the binary, e = 10): the top rank (3) finishes
    at 44,522 ns, the inner rank (1) at 67,028, the leaves (0, 2) at 87,069; a compute node after it starts there."""
    data = imported(astra_dir, "ring", 4).to_dict()
    data["network"][0]["algorithms"]["all_reduce"] = "double_binary_tree"
    spec = spec_from_dict(data)
    cost = make_collective_model(spec).collective_cost(C.ALL_REDUCE, MIB, (0, 1, 2, 3))
    assert (cost.fixed_ns, cost.member_ns) == (87_069, (87_069, 67_028, 87_069, 44_522))
    world = Node(
        0,
        "ar",
        NodeType.COMM_COLL_NODE,
        attrs=[Attr("is_cpu_op", False, "bool_val"), Attr("comm_type", 0), Attr("comm_size", MIB)],
    )
    ts = traceset([[Node(0, world.name, world.type, attrs=list(world.attrs)), comp(1, 5_000, [0])] for _ in range(4)])
    result = replay(ts, spec)
    assert [r.iteration_time_ns for r in result.ranks] == [92_069, 72_028, 92_069, 49_522]
    assert result.critical_path.length_ns == result.iteration_time_ns == 92_069
    assert "different times" in result.folding.reason
    assert replay(ts, spec, options=ReplayOptions(fold=False)).ranks == result.ranks


@pytest.mark.parametrize("algorithm", ["halvingDoubling", "doubleBinaryTree"])
def test_cli_import_astra_writes_a_spec_replay_accepts(astra_dir, tmp_path, algorithm):
    """The bug of issue 16: import-astra accepted these and wrote a spec replay rejected."""
    system = json.loads((astra_dir / "system_ring_splits1.json").read_text())
    for key in ("all-reduce", "reduce-scatter", "all-gather", "all-to-all"):
        system[f"{key}-implementation"] = [algorithm]
    (tmp_path / "sys.json").write_text(json.dumps(system))
    out = tmp_path / "spec.toml"
    result = CliRunner().invoke(
        cli,
        [
            "hw",
            "import-astra",
            "--system",
            str(tmp_path / "sys.json"),
            "--network",
            str(astra_dir / "network_ring_4.yml"),
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    from tracekit.replayer.simulation.specs import read_spec

    model = make_collective_model(read_spec(out))
    # the binary's values, 1 MiB on a 4-ring, e = 10: halving-doubling reduce-scatter 16,666; the tree runs a
    # reduce-scatter as its all-reduce, last rank 87,069
    expected = 16_666 if algorithm == "halvingDoubling" else 87_069
    assert model.collective_cost(C.REDUCE_SCATTER, MIB, (0, 1, 2, 3)).fixed_ns == expected


def test_cli_import_astra_refuses_what_astra_sim_cannot_run(astra_dir, tmp_path):
    system = json.loads((astra_dir / "system_ring_splits1.json").read_text())
    system["all-reduce-implementation"] = ["halvingDoubling"]
    (tmp_path / "sys.json").write_text(json.dumps(system))
    (tmp_path / "net.yml").write_text("topology: [Ring]\nnpus_count: [6]\nbandwidth: [50]\nlatency: [500]\n")
    out = tmp_path / "spec.toml"
    result = CliRunner().invoke(
        cli,
        [
            "hw",
            "import-astra",
            "--system",
            str(tmp_path / "sys.json"),
            "--network",
            str(tmp_path / "net.yml"),
            "-o",
            str(out),
        ],
    )
    assert result.exit_code != 0 and not out.exists()
    assert "key all-reduce-implementation: dimension 0 (6 NPUs)" in result.output
    assert "power-of-two" in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("all-reduce-implementation-custom", ["allreduce.et"], "custom collective algorithms"),
        # the binary, 1 MiB ring all-reduce on 4 NPUs: 33,829 ns; with model-shared-bus 1: 58,704; replay-only 1: 1
        ("model-shared-bus", 1, "only 0 is modelled"),
        ("replay-only", 1, "only 0 is modelled"),
    ],
)
def test_import_refuses_what_replay_cannot_model(astra_dir, tmp_path, key, value, message):
    system = json.loads((astra_dir / "system_ring_splits1.json").read_text())
    system[key] = value
    (tmp_path / "sys.json").write_text(json.dumps(system))
    with pytest.raises(SpecError, match=f"key {key}: {message}"):
        import_astra_config(tmp_path / "sys.json", astra_dir / "network_ring_4.yml")
