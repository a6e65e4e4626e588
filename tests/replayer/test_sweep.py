"""Replay sweeps: grid building, exact values against closed forms and direct replays, output files,
the CLI, and the same numbers on the local process pool and on a local Ray instance."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from dataclasses import replace

import pytest
from click.testing import CliRunner

from tracekit.converters.generators import LLMConfig, ModelSpec, ParallelSpec, generate_llm
from tracekit.errors import ConfigError, SpecError
from tracekit.replayer import ReplayOptions, replay
from tracekit.replayer.simulation.specs import load_spec
from tracekit.replayer.orchestration.sweep import SweepAxis, build_cases, parse_vary, run_sweep, write_sweep

MIB = 1 << 20


@pytest.fixture(scope="module")
def llm64():
    """A 64-rank generated LLM iteration (dp 8 x tp 2 x pp 4, 4 layers), 9,632 nodes."""
    model = ModelSpec("tiny", num_layers=4, hidden_size=1024, num_heads=16, seq_length=1024, vocab_size=32000)
    ts = generate_llm(LLMConfig(model, ParallelSpec(dp=8, tp=2, pp=4), global_batch_size=32), hardware=(312e12, 2e12))
    assert ts.world_size == 64
    return ts


SIXTEEN = [
    parse_vary("network[1].bandwidth_gbps=12.5,25,50,100"),
    parse_vary("compute.duration_scale=0.5,1"),
    parse_vary("collective_model=alpha_beta,nccl"),
]


# ----------------------------------------------------------------------------- parsing and grids
def test_parse_vary_keeps_strings_and_resolves_aliases():
    assert parse_vary("network[1].bandwidth_gbps=25, 50,100") == SweepAxis(
        "network[1].bandwidth_gbps", ("25", "50", "100")
    )
    assert parse_vary("collective_model=nccl").key == "collectives.model"


@pytest.mark.parametrize(
    "text, words",
    [
        ("network[1].bandwidth_gbps", "expected KEY=V1"),
        ("=1,2", "expected KEY=V1"),
        ("compute.duration_scale=1,,2", "empty value"),
        ("network[x].size=1", "bad key part 'network[x]'"),
        ("options.check=true", "replay options that can vary"),
        ("compute.duration_scale=1,1", "lists a value twice"),
    ],
)
def test_parse_vary_rejects(text, words):
    with pytest.raises(ConfigError, match=words.replace("[", r"\[")):
        parse_vary(text)


def test_grid_is_the_product_with_first_axis_slowest_and_typed_values():
    cases = build_cases(["dgx-h100"], SIXTEEN, 64)
    assert len(cases) == 16
    assert [c.index for c in cases] == list(range(16))
    assert cases[0].params == (
        ("network[1].bandwidth_gbps", 12.5),
        ("compute.duration_scale", 0.5),
        ("collectives.model", "alpha_beta"),
    )
    assert cases[5].params == (
        ("network[1].bandwidth_gbps", 25.0),
        ("compute.duration_scale", 0.5),
        ("collectives.model", "nccl"),
    )
    base = load_spec("dgx-h100").fitted(64)
    assert base.dim_sizes == (8, 8)
    c = cases[5].spec
    assert c.network[1].bandwidth_gbps == 25.0 and c.network[0] == base.network[0]
    assert c.compute.duration_scale == 0.5 and c.collective_model == "nccl"
    assert c == replace(
        base,
        network=(base.network[0], replace(base.network[1], bandwidth_gbps=25.0)),
        compute=replace(base.compute, duration_scale=0.5),
        collective_model="nccl",
    )


def test_two_specs_add_an_hw_axis_and_options_axes_set_replay_options():
    cases = build_cases(["dgx-a100", "dgx-h100"], [parse_vary("options.streams=trace,single")], 16)
    assert [c.params for c in cases] == [
        (("hw", "dgx-a100"), ("options.streams", "trace")),
        (("hw", "dgx-a100"), ("options.streams", "single")),
        (("hw", "dgx-h100"), ("options.streams", "trace")),
        (("hw", "dgx-h100"), ("options.streams", "single")),
    ]
    assert cases[1].options == ReplayOptions(streams="single")
    assert cases[2].spec == load_spec("dgx-h100").fitted(16)


def test_bad_points_fail_before_any_replay_naming_the_key():
    with pytest.raises(ConfigError, match=r"network\[2\].bandwidth_gbps: spec 'dgx-h100' has 2 network entries"):
        build_cases(["dgx-h100"], [parse_vary("network[2].bandwidth_gbps=1,2")], 64)
    with pytest.raises(
        SpecError,
        match=r"sweep point 0 \(network\[1\].bandwidth_gbps=-1.0\): key "
        r"network\[1\].bandwidth_gbps: must be positive",
    ):
        build_cases(["dgx-h100"], [parse_vary("network[1].bandwidth_gbps=-1,2")], 64)
    with pytest.raises(SpecError, match=r"key network\[1\].bandwith_gbps: unknown key"):
        build_cases(["dgx-h100"], [parse_vary("network[1].bandwith_gbps=1")], 64)
    with pytest.raises(ConfigError, match="'fast' is not a float"):
        build_cases(["dgx-h100"], [parse_vary("compute.duration_scale=fast")], 64)
    with pytest.raises(SpecError, match=r"sweep point 1 \(options.collective_model=astra\): key astra: is required"):
        build_cases(["dgx-h100"], [parse_vary("options.collective_model=alpha_beta,astra")], 64)
    with pytest.raises(ConfigError, match="given twice: compute.duration_scale"):
        build_cases(["dgx-h100"], [parse_vary("compute.duration_scale=1"), parse_vary("compute.duration_scale=2")], 8)
    with pytest.raises(SpecError, match="no hardware preset named 'dgx-z'"):
        build_cases(["dgx-z"], [], 8)


# ----------------------------------------------------------------------------- values
def test_real_allreduce_sweep_matches_the_ring_closed_form(real_dir):
    """ASTRA-sim's 4-rank 1 MiB all-reduce, alpha-beta ring on one switch dimension:
    T = 2(p-1) a + 2(p-1)/p n / B (Thakur et al. 2005), p = 4, n = 1 MiB."""
    prefix = real_dir / "chakra" / "astra-sim-allreduce-4npus" / "all_reduce"
    result = run_sweep(
        prefix,
        ["dgx-h100"],
        [parse_vary("network[0].bandwidth_gbps=100,450"), parse_vary("network[0].latency_ns=0,600")],
        options=ReplayOptions(collective_model="alpha_beta"),  # the closed form is alpha-beta's (preset: nccl)
        executor="serial",
    )
    got = {tuple(v for _, v in row.params): row.iteration_time_ns for row in result.rows}
    for (bw, lat), t in got.items():
        assert t == round(6 * lat + 1.5 * MIB / bw)  # integer ns, rounded to the nearest
    assert got[(100.0, 0.0)] == 15729  # 15,728.64 ns
    assert got[(450.0, 600.0)] == 7095  # 7,095.25 ns
    assert all(r.compute_ns == 0 and r.node_count == 4 for r in result.rows)
    assert result.world_size == 4 and result.source.endswith("all_reduce")


def test_rows_equal_direct_replays(llm64):
    axes = [parse_vary("network[1].bandwidth_gbps=25,100"), parse_vary("compute.duration_scale=0.5,1")]
    result = run_sweep(llm64, ["dgx-h100"], axes, executor="serial")
    cases = build_cases(["dgx-h100"], axes, 64)
    for row, case in zip(result.rows, cases):
        direct = replay(llm64, case.spec)
        assert row.iteration_time_ns == direct.iteration_time_ns
        slow = max(direct.ranks, key=lambda r: (r.iteration_time_ns, -r.rank))
        assert (row.slowest_rank, row.compute_ns, row.exposed_comm_ns) == (
            slow.rank,
            slow.compute_ns,
            slow.exposed_comm_ns,
        )
        assert row.compute_ns + row.exposed_comm_ns + row.comm_wait_ns + row.other_idle_ns == pytest.approx(
            row.iteration_time_ns, rel=1e-12
        )
        assert row.node_count == 9632
    times = [r.iteration_time_ns for r in result.rows]
    # faster scale-out network and faster compute both shorten the iteration
    assert times[2] < times[0] and times[3] < times[1] and times[0] < times[1] and times[2] < times[3]


def test_write_sweep_files(llm64, tmp_path):
    result = run_sweep(llm64, ["dgx-h100"], [parse_vary("network[1].bandwidth_gbps=25,50,100")], executor="serial")
    paths = write_sweep(result, tmp_path / "out")
    rows = list(csv.DictReader(io.StringIO(paths["csv"].read_text())))
    assert [r["network[1].bandwidth_gbps"] for r in rows] == ["25.0", "50.0", "100.0"]
    assert [float(r["iteration_time_ns"]) for r in rows] == [r.iteration_time_ns for r in result.rows]
    doc = json.loads(paths["json"].read_text())
    assert doc["format"] == "tracekit.sweep" and doc["parameters"] == ["network[1].bandwidth_gbps"]
    assert [r["iteration_time_ns"] for r in doc["rows"]] == [r.iteration_time_ns for r in result.rows]
    html = paths["html"].read_text()
    assert "network[1].bandwidth_gbps" in html and not (tmp_path / "out" / "plotly.min.js").exists()
    # self-contained: the plotting library inlined, no script loaded from a file or the network; titled
    assert "<script src" not in html and "Plotly.newPlot" in html and "plotly.js (basic - minified) v4.1.1" in html
    assert "<title>Sweep of &lt;in-memory&gt; (64 ranks)</title>" in html
    titled = write_sweep(result, tmp_path / "titled", title="H100 links")
    assert "<title>H100 links</title>" in titled["html"].read_text()


def test_process_pool_equals_serial_from_a_path(llm64, tmp_path):
    from tracekit.io import write_traceset

    write_traceset(llm64, tmp_path / "job")
    axes = [parse_vary("network[1].bandwidth_gbps=25,100"), parse_vary("collective_model=alpha_beta,nccl")]
    pooled = run_sweep(str(tmp_path / "job"), ["dgx-h100"], axes, executor="process", max_workers=2)
    serial = run_sweep(llm64, ["dgx-h100"], axes, executor="serial")
    assert pooled.rows == serial.rows
    assert pooled.rows[0].iteration_time_ns != pooled.rows[1].iteration_time_ns


def test_ray_equals_local_pool_on_sixteen_variants(llm64):
    ray = pytest.importorskip("ray")
    pooled = run_sweep(llm64, ["dgx-h100"], SIXTEEN, executor="process", max_workers=2)
    assert len(pooled.rows) == 16 and len({r.iteration_time_ns for r in pooled.rows}) == 16
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        on_ray = run_sweep(llm64, ["dgx-h100"], SIXTEEN, executor="ray")
    finally:
        ray.shutdown()
    assert on_ray.executor == "ray"
    assert on_ray.rows == pooled.rows
    assert [r.iteration_time_ns for r in on_ray.rows] == [r.iteration_time_ns for r in pooled.rows]


# ----------------------------------------------------------------------------- CLI
def test_cli_sweep(real_dir, tmp_path):
    from tracekit.cli import cli

    prefix = real_dir / "chakra" / "astra-sim-allreduce-4npus" / "all_reduce"
    out = tmp_path / "sweep"
    res = CliRunner().invoke(
        cli,
        [
            "-q",
            "sweep",
            str(prefix),
            "--hw",
            "dgx-h100",
            "--vary",
            "network[0].bandwidth_gbps=100,450",
            "--collective-model",
            "alpha_beta",
            "--executor",
            "serial",
            "-o",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "19.3290" in res.stdout and "7.0950" in res.stdout  # 19,328.64 ns and 7,095.25 ns rounded to ns, in us
    rows = list(csv.DictReader(io.StringIO((out / "sweep.csv").read_text())))
    assert [float(r["iteration_time_ns"]) for r in rows] == [19329, 7095]


def test_cli_sweep_bad_vary_is_one_line(real_dir, tmp_path):
    prefix = real_dir / "chakra" / "astra-sim-allreduce-4npus" / "all_reduce"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracekit.cli._main",
            "sweep",
            str(prefix),
            "--hw",
            "dgx-h100",
            "--vary",
            "network[3].size=1",
            "-o",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "tracekit: error: sweep parameter network[3].size: spec 'dgx-h100' has 1 network entries (indexes 0..0) "
        "for this trace set"
    ]
    assert proc.stdout == "" and not (tmp_path / "o").exists()
