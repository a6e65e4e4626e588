"""Every ASTRA-sim collective algorithm against the real binary: tracekit's replay equals it to the ns, per rank.

The matrix of issue 16: {all-reduce, reduce-scatter, all-gather, all-to-all} x {ring, direct, halvingDoubling,
doubleBinaryTree} x {Ring, Switch, FullyConnected} x p in {2, 3, 4, 8, 16} x preferred-dataset-splits {1, 4}
(480 cases), plus multi-dimension configs.  Each case writes one collective per rank with tracekit's own writer,
runs ASTRA-sim's analytical binary (``reference_tools.astra_sim``) on it and replays the same files with the
spec ``import_astra_config`` makes from the same config files.  The message size, 1,000,003 bytes, is odd so
that every integer division (chunks, pieces, halvings) truncates, and 4 splits make 5 chunks (ASTRA-sim runs
``ceil(D / (D // S))`` chunks).  The endpoint delay is 7, not 10, so that it cannot hide behind a constant.

Where ASTRA-sim itself cannot run a combination, the test states what the binary does and asserts that tracekit
refuses it too:
- halvingDoubling or doubleBinaryTree on 3 NPUs (not a power of two): halving-doubling finishes no rank
  (all-reduce) or two of three (the others); the tree crashes (SIGSEGV).  ``import-astra`` refuses the config.
- halvingDoubling all-to-all: the binary exits 1 ("unknown communication type for HalvingDoubling").  The config
  imports (ASTRA-sim accepts it until an all-to-all runs); the replay of an all-to-all raises SpecError.
"""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from reference_tools import astra_sim
from hypothesis_profiles import FULL
from tracekit.errors import SpecError
from tracekit.io import read_traceset, write_trace
from tracekit.model import Attr, CollectiveType, ExecutionTrace, Node, NodeType
from tracekit.replayer import replay
from tracekit.replayer.simulation.astra_config import import_astra_config
from tracekit.replayer.simulation.collectives import make_collective_model


SIZE = 1_000_003
COLLECTIVES = {
    "all-reduce": CollectiveType.ALL_REDUCE,
    "reduce-scatter": CollectiveType.REDUCE_SCATTER,
    "all-gather": CollectiveType.ALL_GATHER,
    "all-to-all": CollectiveType.ALL_TO_ALL,
}
ALGORITHMS = ("ring", "direct", "halvingDoubling", "doubleBinaryTree")
TOPOLOGIES = ("Ring", "Switch", "FullyConnected")
SIZES = (2, 3, 4, 8, 16)
SPLITS = (1, 4)


def _refused_by_astra(coll: str, alg: str, p: int) -> str | None:
    if alg == "halvingDoubling" and coll == "all-to-all":
        return "exit"
    if alg in ("halvingDoubling", "doubleBinaryTree") and p & (p - 1):
        return "exit" if alg == "doubleBinaryTree" else "unfinished"
    return None


MATRIX = [(c, a, t, p, s) for c in COLLECTIVES for a in ALGORITHMS for t in TOPOLOGIES for p in SIZES for s in SPLITS]


def _representative(coll: str, alg: str, topo: str, p: int, splits: int) -> bool:
    """The cases `make test` runs (the rest are marked slow): each collective x algorithm once (8 ranks, 4 splits,
    topologies in turn), each algorithm at 3 ranks (ASTRA-sim's refusals of non-powers of two), and all-reduce ring
    at every size on a switch without splits."""
    turn = TOPOLOGIES[(list(COLLECTIVES).index(coll) + ALGORITHMS.index(alg)) % len(TOPOLOGIES)]
    return (
        (p, splits, topo) == (8, 4, turn)
        or (coll, p, splits, topo) == ("all-reduce", 3, 1, "Ring")
        or (coll, alg, splits, topo) == ("all-reduce", "ring", 1, "Switch")
    )


RANDOM_FAST = 8  # random multi-dimension configs in `make test` (all of RANDOM_DIM in make test-full)


def _slow_unless(fast: bool, *values, id: str):
    return pytest.param(*values, id=id, marks=() if fast else pytest.mark.slow)


# multi-dimension: (collective, algorithms per dimension, topologies, npus, splits, active chunks, optimization)
MULTI_DIM = [
    ("all-reduce", ["ring", "ring"], ["Ring", "Switch"], [4, 2], 4, 1, "localBWAware"),
    ("all-reduce", ["halvingDoubling", "direct"], ["Ring", "FullyConnected"], [4, 4], 4, 2, "localBWAware"),
    ("all-reduce", ["ring", "halvingDoubling"], ["Switch", "Ring"], [2, 8], 1, 1, "baseline"),
    ("reduce-scatter", ["halvingDoubling", "ring"], ["Ring", "FullyConnected"], [4, 2], 4, 1, "localBWAware"),
    (
        "all-gather",
        ["ring", "direct", "halvingDoubling"],
        ["Ring", "FullyConnected", "Switch"],
        [2, 4, 2],
        4,
        1,
        "localBWAware",
    ),
    ("all-to-all", ["ring", "direct"], ["Ring", "Switch"], [4, 2], 4, 2, "localBWAware"),
    ("all-reduce", ["doubleBinaryTree", "ring"], ["Ring", "Switch"], [4, 4], 4, 2, "localBWAware"),
    (
        "reduce-scatter",
        ["doubleBinaryTree", "doubleBinaryTree"],
        ["FullyConnected", "Switch"],
        [2, 2],
        3,
        2,
        "localBWAware",
    ),
]


def _random_configs(n: int, seed: int = 16) -> list[dict]:
    """Seeded multi-dimension configs: 2-3 dimensions, every algorithm, every knob varied (endpoint delay >= 1:
    with 0 ASTRA-sim asserts in its event queue; sizes >= 1000: tiny chunks with 3 active chunks trip its chunk-id
    assertion)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        coll = rng.choice(list(COLLECTIVES))
        algs, npus = [], []
        for _ in range(rng.choice([2, 3])):
            alg = rng.choice(
                ["ring", "direct", "doubleBinaryTree"] + ([] if coll == "all-to-all" else ["halvingDoubling"])
            )
            algs.append(alg)
            npus.append(rng.choice([2, 4, 8] if alg in ("halvingDoubling", "doubleBinaryTree") else [2, 3, 4, 5]))
        out.append(
            dict(
                coll=coll,
                algs=algs,
                topos=[rng.choice(TOPOLOGIES) for _ in algs],
                npus=npus,
                splits=rng.choice([1, 2, 3, 4, 5]),
                active=rng.choice([1, 1, 2, 3]),
                optimization=rng.choice(["localBWAware", "baseline"]),
                e=rng.choice([1, 7, 25]),
                bws=[rng.choice([12.5, 50.0, 200.0]) for _ in algs],
                lats=[rng.choice([0.0, 100.0, 1700.0]) for _ in algs],
                mem=rng.choice([800, 1600, 5000]),
                size=rng.choice([1000, 65_537, 3_000_001]),
            )
        )
    return out


RANDOM_DIM = _random_configs(32)


def _write_case(
    d,
    coll,
    algs,
    topos,
    npus,
    splits,
    active=1,
    optimization="localBWAware",
    *,
    e=7,
    bws=None,
    lats=None,
    mem=1600,
    size=SIZE,
    per_collective=None,
):
    """Traces (one collective per rank, no pg_name: a world collective) and the ASTRA-sim config files."""
    d.mkdir(parents=True, exist_ok=True)
    world = 1
    for n in npus:
        world *= n
    for rank in range(world):
        node = Node(
            0,
            f"{coll}_{size}",
            NodeType.COMM_COLL_NODE,
            attrs=[
                Attr("is_cpu_op", False, "bool_val"),
                Attr("comm_type", int(COLLECTIVES[coll])),
                Attr("comm_size", size),
            ],
        )
        write_trace(ExecutionTrace([node]), d / f"coll.{rank}.et")
    system = {
        "scheduling-policy": "LIFO",
        "endpoint-delay": e,
        "active-chunks-per-dimension": active,
        "preferred-dataset-splits": splits,
        "collective-optimization": optimization,
        "local-mem-bw": mem,
        "boost-mode": 0,
    }
    for key in COLLECTIVES:
        system[f"{key}-implementation"] = list((per_collective or {}).get(key, algs))
    (d / "system.json").write_text(json.dumps(system))
    (d / "network.yml").write_text(
        f"topology: {json.dumps(list(topos))}\nnpus_count: {json.dumps(list(npus))}\n"
        f"bandwidth: {json.dumps(bws or [50.0] * len(npus))}\n"
        f"latency: {json.dumps(lats or [500.0] * len(npus))}\n"
    )
    return d / "coll", world


def _run_binary(d, prefix):
    try:
        return astra_sim(
            prefix, system=d / "system.json", network=(d / "network.yml").read_text(), workdir=d, timeout_s=60
        )
    except pytest.fail.Exception as exc:
        return exc  # ASTRA-sim exited non-zero: the refused cases expect it


@pytest.fixture(scope="module")
def binary_results(request, tmp_path_factory):
    """ASTRA-sim's per-rank output for every matrix case (two at a time: the machine has 2 cores)."""
    root = tmp_path_factory.mktemp("astra_matrix")
    everything = request.config.getoption("--run-slow") or FULL
    cases = {}
    for i, (coll, alg, topo, p, splits) in enumerate(MATRIX):
        if not (everything or _representative(coll, alg, topo, p, splits)):
            continue  # a slow case, not collected: ASTRA-sim is not run for it
        d = root / f"m{i}"
        prefix, _ = _write_case(d, coll, [alg], [topo], [p], splits)
        cases[(coll, alg, topo, p, splits)] = (d, prefix)
    for i, (coll, algs, topos, npus, splits, active, opt) in enumerate(MULTI_DIM):
        d = root / f"md{i}"
        prefix, _ = _write_case(d, coll, algs, topos, npus, splits, active, opt)
        cases[("multi", i)] = (d, prefix)
    for i, cfg in enumerate(RANDOM_DIM if everything else RANDOM_DIM[:RANDOM_FAST]):
        d = root / f"r{i}"
        prefix, _ = _write_case(d, **cfg)
        cases[("random", i)] = (d, prefix)
    with ThreadPoolExecutor(2) as pool:
        futures = {key: pool.submit(_run_binary, d, prefix) for key, (d, prefix) in cases.items()}
        return {key: (cases[key][0], cases[key][1], f.result()) for key, f in futures.items()}


def _replay_per_rank(d, prefix, world):
    spec = import_astra_config(d / "system.json", d / "network.yml").spec
    result = replay(read_traceset(prefix), spec)
    return spec, [int(r.iteration_time_ns) for r in sorted(result.ranks, key=lambda r: r.rank)]


@pytest.mark.parametrize(
    "coll, alg, topo, p, splits", [_slow_unless(_representative(*c), *c, id="-".join(map(str, c))) for c in MATRIX]
)
def test_matrix_equals_astra_sim_to_the_ns(binary_results, coll, alg, topo, p, splits):
    d, prefix, ranks = binary_results[(coll, alg, topo, p, splits)]
    refused = _refused_by_astra(coll, alg, p)
    if refused == "exit":
        assert isinstance(ranks, BaseException), f"ASTRA-sim was expected to exit non-zero, printed {ranks}"
    elif refused == "unfinished":
        assert not isinstance(ranks, BaseException) and len(ranks) < p  # some ranks never finish
    if refused:
        if p & (p - 1):
            with pytest.raises(SpecError, match="power-of-two"):
                import_astra_config(d / "system.json", d / "network.yml")
            return
        with pytest.raises(SpecError, match="halving-doubling has no all-to-all"):
            _replay_per_rank(d, prefix, p)
        return
    assert not isinstance(ranks, BaseException), str(ranks)
    assert sorted(ranks) == list(range(p)), "every rank finishes"
    expected = [ranks[r].finished_ns for r in range(p)]
    spec, replayed = _replay_per_rank(d, prefix, p)
    assert replayed == expected
    if alg == "doubleBinaryTree" and p > 2:
        assert len(set(expected)) > 1  # the tree's ranks finish at different times, and the replay follows them


@pytest.mark.parametrize(
    "case", range(len(MULTI_DIM)), ids=[f"{c[0]}-{'x'.join(map(str, c[3]))}-{c[6]}" for c in MULTI_DIM]
)
def test_multi_dimension_equals_astra_sim_to_the_ns(binary_results, case):
    _check_multi(*binary_results[("multi", case)])


@pytest.mark.parametrize(
    "case",
    [
        _slow_unless(i < RANDOM_FAST, i, id=f"{c['coll']}-{'x'.join(map(str, c['npus']))}")
        for i, c in enumerate(RANDOM_DIM)
    ],
)
def test_random_multi_dimension_configs_equal_astra_sim_to_the_ns(binary_results, case):
    _check_multi(*binary_results[("random", case)])


def _check_multi(d, prefix, ranks):
    assert not isinstance(ranks, BaseException), str(ranks)
    world = len(list(d.glob("coll.*.et")))
    assert sorted(ranks) == list(range(world)), "every rank finishes"
    _, replayed = _replay_per_rank(d, prefix, world)
    assert replayed == [ranks[r].finished_ns for r in range(world)]


def test_all_reduce_phases_use_the_all_reduce_implementation(tmp_path):
    """An all-reduce's reduce-scatter and all-gather phases run ``all-reduce-implementation``, not the
    reduce-scatter/all-gather ones (binary: 2-D 4x2, halvingDoubling+direct all-reduce, ring elsewhere)."""
    prefix, world = _write_case(
        tmp_path,
        "all-reduce",
        ["ring", "ring"],
        ["Ring", "Switch"],
        [4, 2],
        4,
        per_collective={"all-reduce": ["halvingDoubling", "direct"]},
    )
    ranks = astra_sim(
        prefix, system=tmp_path / "system.json", network=(tmp_path / "network.yml").read_text(), workdir=tmp_path
    )
    _, replayed = _replay_per_rank(tmp_path, prefix, world)
    assert replayed == [ranks[r].finished_ns for r in range(world)]


def _group_case(d, coll, npus, topos, bws, lats, groups, *, splits, active, e, size, algs=None):
    """Members run one collective on their communicator group (``pg_name`` = its id); the others nothing."""
    d.mkdir(parents=True, exist_ok=True)
    world = 1
    for n in npus:
        world *= n
    group_of = {r: g for g, members in groups.items() for r in members}
    for rank in range(world):
        nodes = []
        if rank in group_of:
            nodes = [
                Node(
                    0,
                    coll,
                    NodeType.COMM_COLL_NODE,
                    attrs=[
                        Attr("is_cpu_op", False, "bool_val"),
                        Attr("comm_type", int(COLLECTIVES[coll])),
                        Attr("comm_size", size),
                        Attr("pg_name", group_of[rank], "string_val"),
                    ],
                )
            ]
        write_trace(ExecutionTrace(nodes), d / f"coll.{rank}.et")
    system = {
        "scheduling-policy": "LIFO",
        "endpoint-delay": e,
        "active-chunks-per-dimension": active,
        "preferred-dataset-splits": splits,
        "collective-optimization": "localBWAware",
        "local-mem-bw": 1600,
        "boost-mode": 0,
    }
    for key in COLLECTIVES:
        system[f"{key}-implementation"] = algs or ["ring"] * len(npus)
    (d / "system.json").write_text(json.dumps(system))
    (d / "network.yml").write_text(
        f"topology: {json.dumps(topos)}\nnpus_count: {json.dumps(npus)}\n"
        f"bandwidth: {json.dumps(bws)}\nlatency: {json.dumps(lats)}\n"
    )
    return d / "coll"


GROUP_CASES = [
    # ranks 0 and 5 of 4 x 2 differ on both dimensions: the message crosses dimension 0 (the innermost)
    ("all-reduce", [4, 2], ["Ring", "Switch"], [50.0, 12.5], [500.0, 100.0], {"1": [0, 5]}, 1, 1, 7, SIZE, None),
    # a ring with one 2-hop link: its receiver finishes 500 ns after the others
    ("all-reduce", [4, 2], ["Ring", "Switch"], [50.0, 12.5], [500.0, 100.0], {"1": [0, 2, 5]}, 1, 1, 7, SIZE, None),
    # the configured halving-doubling is not used by a group: two groups, 4 splits
    (
        "all-reduce",
        [4, 2],
        ["Ring", "Switch"],
        [50.0, 12.5],
        [500.0, 100.0],
        {"1": [0, 1, 2, 3], "2": [4, 5, 6, 7]},
        4,
        1,
        7,
        SIZE,
        ["halvingDoubling", "ring"],
    ),
    ("all-to-all", [4, 2], ["Ring", "Switch"], [50.0, 12.5], [500.0, 100.0], {"1": [0, 2, 5, 7]}, 3, 2, 7, SIZE, None),
    (
        "reduce-scatter",
        [4, 4],
        ["Ring", "FullyConnected"],
        [50.0, 12.5],
        [500.0, 100.0],
        {"1": [0, 3, 6, 9, 12], "2": [1, 2, 4]},
        5,
        2,
        25,
        65_537,
        None,
    ),
    (
        "all-gather",
        [2, 2, 3],
        ["Switch", "Ring", "FullyConnected"],
        [200.0, 50.0, 12.5],
        [0.0, 1700.0, 100.0],
        {"1": [0, 3, 4, 9, 11], "2": [1, 2, 5, 6]},
        2,
        3,
        1,
        3_000_001,
        None,
    ),
]


@pytest.mark.parametrize(
    "case", range(len(GROUP_CASES)), ids=[f"{c[0]}-{'+'.join(map(str, c[5]['1']))}" for c in GROUP_CASES]
)
def test_communicator_groups_equal_astra_sim_to_the_ns(tmp_path, case):
    """ASTRA-sim runs a group smaller than the network as one ring over its sorted members (hand-offs 10 ns,
    whatever the config names): the model's per-member times equal the binary's."""
    coll, npus, topos, bws, lats, groups, splits, active, e, size, algs = GROUP_CASES[case]
    prefix = _group_case(
        tmp_path, coll, npus, topos, bws, lats, groups, splits=splits, active=active, e=e, size=size, algs=algs
    )
    ranks = astra_sim(
        prefix,
        system=tmp_path / "system.json",
        network=(tmp_path / "network.yml").read_text(),
        comm_groups=groups,
        workdir=tmp_path,
    )
    model = make_collective_model(import_astra_config(tmp_path / "system.json", tmp_path / "network.yml").spec)
    kind = coll.replace("-", "_")
    for members in groups.values():
        expected = [ranks[r].finished_ns for r in members]
        assert list(model.member_finish_ns(kind, size, tuple(members))) == expected
        cost = model.collective_cost(COLLECTIVES[coll], size, tuple(members))
        assert cost.fixed_ns == max(expected) and cost.algorithm == "astra:ring(group)"
