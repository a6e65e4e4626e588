"""Perturbations (issue 30.3): slow ranks, delayed nodes, degraded/removed links, seeded jitter; hand-computed."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.errors import ConfigError, SpecError
from tracekit.model import CollectiveType
from tracekit.replayer.simulation.perturb import LinkFault, Perturbation
from tracekit.replayer.simulation.run import replay_with_traces

from ._engine_kit import coll, comp, make_spec, one_dim, traceset

MiB = 1 << 20
AR = CollectiveType.ALL_REDUCE


def _dp_job(p: int, compute_ns: int, nbytes: int, tail_ns: int = 0):
    """Data parallel: each rank computes ``compute_ns`` (a GPU kernel), all-reduces ``nbytes``, then ``tail_ns``."""
    per_rank = []
    for _ in range(p):
        nodes = [comp(1, compute_ns, stream=7), coll(2, AR, nbytes, [1], stream=9)]
        if tail_ns:
            nodes.append(comp(3, tail_ns, [2], stream=7))
        per_rank.append(nodes)
    return traceset(per_rank)


def _run(ts, spec, pert=None):
    return replay_with_traces(ts, spec, perturb=pert)[0]


def test_one_slow_rank_of_64_delays_the_step_by_its_extra_compute():
    """Rank 17 of a 64-rank data-parallel step at compute x1.5: the all-reduce starts and ends exactly 0.5 x 3 ms
    later on every rank; rank 17's optimizer step after it (400 us) takes 0.5 x 400 us longer too."""
    compute_ns, tail_ns = 3_000_000, 400_000
    ts = _dp_job(64, compute_ns, 64 * MiB, tail_ns)
    spec = make_spec(
        [
            {"topology": "switch", "size": 8, "bandwidth_gbps": 300.0, "latency_ns": 700.0},
            {"topology": "switch", "size": 8, "bandwidth_gbps": 25.0, "latency_ns": 3000.0},
        ],
        fit=False,
    )
    base = _run(ts, spec)
    slow = _run(ts, spec, Perturbation(slow=((17, 1.5),)))
    # the all-reduce ends exactly 0.5 x compute later; the step also pays rank 17's slower optimizer step
    assert slow.collectives[0].end_ns - base.collectives[0].end_ns == 0.5 * compute_ns
    assert slow.iteration_time_ns - base.iteration_time_ns == 0.5 * compute_ns + 0.5 * tail_ns
    # the others wait for rank 17 in the collective: their own compute is unchanged
    assert slow.ranks[17].compute_ns == round(1.5 * (compute_ns + tail_ns))
    assert slow.ranks[3].compute_ns == compute_ns + tail_ns
    assert slow.ranks[3].comm_wait_ns - base.ranks[3].comm_wait_ns == 0.5 * compute_ns


def test_a_link_at_half_bandwidth_slows_a_ring_all_reduce_to_its_closed_form():
    """Ring all-reduce, p ranks: 2(p-1) a + 2(p-1)/p n / B alone; one rank's link at B/2: the ring moves at its
    slowest link, 2(p-1) a + 2 x 2(p-1)/p n / B."""
    p, n, a, bw = 8, 64 * MiB, 700.0, 150.0
    ts = traceset([[coll(1, AR, n)] for _ in range(p)])
    spec = one_dim(p, bw, a, "ring")
    base = _run(ts, spec)
    assert base.iteration_time_ns == round(2 * (p - 1) * a + 2 * (p - 1) / p * n / bw)
    half = _run(ts, spec, Perturbation(links=(LinkFault(3, 0, 0.5),)))
    assert half.iteration_time_ns == round(2 * (p - 1) * a + 2 * 2 * (p - 1) / p * n / bw)


def test_a_removed_link_is_rerouted_where_the_topology_allows():
    p, n, a, bw = 8, 64 * MiB, 700.0, 150.0
    ts = traceset([[coll(1, AR, n)] for _ in range(p)])
    # a ring dimension: the other way round, sharing links (factor 0.5)
    ring = _run(ts, one_dim(p, bw, a, "ring"), Perturbation(links=(LinkFault(2, 0, 0.0),)))
    assert ring.iteration_time_ns == round(2 * (p - 1) * a + 2 * 2 * (p - 1) / p * n / bw)
    # a switch with one link per rank: nowhere to go
    with pytest.raises(SpecError, match="rank 2 into dimension 0 .*no other path"):
        _run(ts, one_dim(p, bw, a, "switch"), Perturbation(links=(LinkFault(2, 0, 0.0),)))


def test_a_delayed_node_starts_its_ranks_late():
    """Node 1 (ranks 4-7 of 4 x 2) starts 2 ms late: the all-reduce waits for it; the step ends 2 ms later."""
    compute_ns = 1_000_000
    ts = _dp_job(8, compute_ns, MiB)
    spec = make_spec(
        [
            {"topology": "switch", "size": 4, "bandwidth_gbps": 300.0, "latency_ns": 700.0},
            {"topology": "switch", "size": 2, "bandwidth_gbps": 25.0, "latency_ns": 3000.0},
        ],
        fit=False,
    )
    base = _run(ts, spec)
    late = _run(ts, spec, Perturbation(node_delay_ns=((1, 2_000_000.0),)))
    assert late.iteration_time_ns - base.iteration_time_ns == 2_000_000
    assert late.ranks[0].comm_wait_ns - base.ranks[0].comm_wait_ns == 2_000_000
    assert late.ranks[5].compute_ns == compute_ns


def test_jitter_is_seeded_and_log_normal():
    ts = _dp_job(4, 1_000_000, MiB)
    spec = one_dim(4, 150.0, 700.0, "switch")
    pert = Perturbation(compute_jitter=0.1, comm_jitter=0.1, seed=5)
    a, b = _run(ts, spec, pert), _run(ts, spec, pert)
    assert a == b
    c = _run(ts, spec, pert.with_seed(6))
    assert c.iteration_time_ns != a.iteration_time_ns
    # the step waits for the slowest rank's compute: exp(0.1 z) of the first 4 normals of default_rng(5)
    z = np.random.default_rng(5).standard_normal(4)
    slowest = max(1_000_000 * np.exp(0.1 * z))
    assert a.ranks[0].compute_ns + a.ranks[0].comm_wait_ns == pytest.approx(slowest, abs=1)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"slow": ((1, 0.0),)}, r"factor in \(0, 1,000,000\], got 0.0"),
        ({"node_delay_ns": ((0, -5.0),)}, "a delay of 0 to 9,007,199,254,740,992 ns, got -5.0"),
        ({"compute_jitter": -0.1}, "compute_jitter"),
    ],
)
def test_bad_perturbations_are_refused(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        Perturbation(**kwargs)
    with pytest.raises(ConfigError, match="bandwidth factor"):
        LinkFault(0, 0, 1.5)


# ----- reading perturbations, samples, the CLI ----------------------------------------------------------------


def test_perturb_items_and_table_read_the_same():
    from tracekit.replayer.simulation.perturb_spec import parse_perturbation, perturbation_from_table

    items = ["slow=0-1+5:1.5", "delay=2:50us", "link=5/1:down", "link=3/0:0.5", "jitter=compute:0.05", "seed=7"]
    got = parse_perturbation(items)
    assert got.slow == ((0, 1.5), (1, 1.5), (5, 1.5))
    assert got.node_delay_ns == ((2, 50_000.0),)
    assert got.links == (LinkFault(5, 1, 0.0), LinkFault(3, 0, 0.5))
    assert (got.compute_jitter, got.comm_jitter, got.seed) == (0.05, 0.0, 7)
    table = {
        "seed": 7,
        "compute_jitter": 0.05,
        "slow": [{"ranks": [0, 1, 5], "factor": 1.5}],
        "delay": [{"node": 2, "delay_us": 50.0}],
        "links": [
            {"rank": 5, "dimension": 1, "bandwidth_factor": 0.0},
            {"rank": 3, "dimension": 0, "bandwidth_factor": 0.5},
        ],
    }
    assert perturbation_from_table(table) == got
    with pytest.raises(ConfigError, match="unknown item"):
        parse_perturbation(["wobble=1:2"])
    with pytest.raises(ConfigError, match="unknown key"):
        perturbation_from_table({"slowness": 2})


def test_samples_report_percentiles_and_the_rank_waited_on():
    from tracekit.replayer.orchestration.samples import sample_replays

    ts = _dp_job(8, 1_000_000, MiB)
    spec = one_dim(8, 150.0, 700.0, "switch")
    fixed = sample_replays(ts, spec, Perturbation(slow=((6, 2.0),)), 3)
    assert len(set(fixed.step_ns)) == 1 and fixed.waited_on == ((6, 3),)
    pert = Perturbation(compute_jitter=0.2, seed=11)
    summary = sample_replays(ts, spec, pert, 20)
    singles = [_run(ts, spec, pert.with_seed(11 + i)).iteration_time_ns for i in range(20)]
    assert [round(s) for s in summary.step_ns] == singles
    d = summary.to_dict()
    assert d["median_ns"] == pytest.approx(np.percentile(singles, 50), abs=1)
    assert d["p99_ns"] == pytest.approx(np.percentile(singles, 99), abs=1)
    assert sum(c for _, c in summary.waited_on) == 20


def test_replay_cli_perturbs_and_samples(tmp_path):
    import orjson
    from click.testing import CliRunner

    from tracekit.cli import cli as main
    from tracekit.io import write_traceset

    write_traceset(_dp_job(8, 1_000_000, MiB), str(tmp_path / "dp"))
    runner = CliRunner()
    base = runner.invoke(main, ["replay", str(tmp_path / "dp"), "--hw", "dgx-a100", "--json"])
    slow = runner.invoke(
        main, ["replay", str(tmp_path / "dp"), "--hw", "dgx-a100", "--json", "--perturb", "slow=3:1.5"]
    )
    assert base.exit_code == 0 and slow.exit_code == 0, slow.output
    delta = orjson.loads(slow.stdout)["iteration_time_ns"] - orjson.loads(base.stdout)["iteration_time_ns"]
    assert delta == 500_000
    out = runner.invoke(
        main, ["replay", str(tmp_path / "dp"), "--hw", "dgx-a100", "--perturb", "jitter=compute:0.1", "--samples", "4"]
    )
    assert out.exit_code == 0, out.output
    assert "4 perturbed replays (seeds 0..3)" in out.stdout and "p99" in out.stdout and "waited on" in out.stdout
    bad = runner.invoke(main, ["replay", str(tmp_path / "dp"), "--hw", "dgx-a100", "--perturb", "link=0/0:down"])
    assert bad.exit_code != 0 and "no other path" in bad.output


def test_a_pipeline_file_carries_a_perturb_table(tmp_path):
    from tracekit.replayer.simulation.perturb_spec import parse_perturbation
    from tracekit.transforms.pipeline import load_pipeline

    path = tmp_path / "steps.toml"
    path.write_text(
        '[[transform]]\nkind = "scale_compute"\nfactor = 0.5\n\n'
        "[perturb]\nseed = 3\nslow = [{ ranks = [2], factor = 1.25 }]\n"
    )
    assert len(load_pipeline(path).pipeline.steps) == 1
    assert parse_perturbation([str(path)]) == Perturbation(slow=((2, 1.25),), seed=3)


def test_slow_ranks_and_delays_fold_with_the_perturbed_rank_in_a_class_of_its_own(tmp_path):
    """64 DP ranks, rank 17 x1.5 and node 3 (ranks 24-31 of 8 x 8) 1 ms late: folded = unfolded to the bit, with
    3 classes (rank 17, node 3's ranks, the others); the same from rank files on disk."""
    from tracekit.io import write_traceset
    from tracekit.replayer.simulation.program import ReplayOptions

    ts = _dp_job(64, 3_000_000, 64 * MiB, 400_000)
    spec = make_spec(
        [
            {"topology": "switch", "size": 8, "bandwidth_gbps": 300.0, "latency_ns": 700.0},
            {"topology": "switch", "size": 8, "bandwidth_gbps": 25.0, "latency_ns": 3000.0},
        ],
        fit=False,
    )
    pert = Perturbation(slow=((17, 1.5),), node_delay_ns=((3, 1_000_000.0),))
    folded = replay_with_traces(ts, spec, perturb=pert)[0]
    unfolded = replay_with_traces(ts, spec, options=ReplayOptions(fold=False), perturb=pert)[0]
    assert folded == unfolded
    assert folded.folding is not None and (folded.folding.classes, folded.folding.reason) == (3, None)
    assert folded.ranks[17].compute_ns == round(1.5 * 3_400_000)
    write_traceset(ts, str(tmp_path / "dp"))  # rank files: the gathered (streaming) folded path
    from_disk = replay_with_traces(str(tmp_path / "dp"), spec, perturb=pert)[0]
    assert from_disk.iteration_time_ns == folded.iteration_time_ns and from_disk.folding.classes == 3
