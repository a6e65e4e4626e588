"""`tracekit export astra` writes what `tracekit hw import-astra` reads back: the two are inverses."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.converters.generators import collective_bench
from tracekit.errors import SpecError
from tracekit.io import read_trace
from tracekit.model import CollectiveType
from tracekit.replayer.simulation.astra_config import import_astra_config
from tracekit.replayer.simulation.astra_export import export_astra
from tracekit.replayer.simulation.specs import list_presets, load_spec


@pytest.mark.parametrize(
    "system, network, world",
    [
        ("system_ring_splits4.json", "network_ring_4.yml", 4),
        ("system_ring_splits1.json", "network_switch_8.yml", 8),
        ("3dim", "Ring_FullyConnected_Switch.yml", 64),
    ],
)
def test_export_then_import_gives_the_spec_back(test_data_dir, tmp_path, system, network, world):
    astra = test_data_dir / "astra"
    if system == "3dim":  # one algorithm per dimension, baseline, roofline on
        doc = json.loads((astra / "system_ring_splits1.json").read_text())
        doc.update(
            {
                "all-reduce-implementation": ["ring", "direct", "halvingDoubling"],
                "all-gather-implementation": ["ring", "direct", "ring"],
                "reduce-scatter-implementation": ["direct", "ring", "ring"],
                "all-to-all-implementation": ["ring", "ring", "direct"],
                "collective-optimization": "baseline",
                "preferred-dataset-splits": 8,
                "active-chunks-per-dimension": 2,
                "roofline-enabled": 1,
                "peak-perf": 900,
            }
        )
        (tmp_path / "sys3.json").write_text(json.dumps(doc))
        system = tmp_path / "sys3.json"
    spec = import_astra_config(astra / system, astra / network).spec
    out = export_astra(collective_bench(world, "all_reduce", 4096), spec, tmp_path / "x")
    again = import_astra_config(out.system, out.network, out.memory).spec
    assert replace(again, name=spec.name, description=spec.description) == spec
    assert json.loads(out.memory.read_text()) == {"memory-type": "NO_MEMORY_EXPANSION"}
    assert out.argv[1:] == (
        f"--workload-configuration={tmp_path / 'x' / 'workload'}",
        f"--system-configuration={out.system}",
        f"--network-configuration={out.network}",
        f"--remote-memory-configuration={out.memory}",
        f"--comm-group-configuration={tmp_path / 'x' / 'workload.comm_groups.json'}",
    )


def test_export_writes_unsupported_collectives_as_broadcasts_keeping_the_type(test_data_dir, tmp_path):
    astra = test_data_dir / "astra"
    spec = import_astra_config(astra / "system_ring_splits4.json", astra / "network_ring_4.yml").spec
    export_astra(collective_bench(4, "barrier", 0), spec, tmp_path / "x")
    (node,) = [n for n in read_trace(tmp_path / "x" / "workload.0.et").nodes if n.is_comm]
    assert (node.comm_type, node.get_attr("tracekit_comm_type")) == (CollectiveType.BROADCAST, "BARRIER")


def test_export_from_a_preset_derives_the_astra_config_and_says_what_it_cannot_express(tmp_path):
    out = export_astra(collective_bench(16, "all_reduce", 4096), load_spec("dgx-a100"), tmp_path / "a")
    spec = load_spec("dgx-a100").fitted(16)
    back = import_astra_config(out.system, out.network).spec
    assert back.dim_sizes == spec.dim_sizes == (8, 2)
    # ASTRA-sim reads GB/s as GiB/s: the written value moves the preset's bytes per second
    for ours, theirs in zip(spec.network, back.network):
        assert theirs.bandwidth_gbps * (1 << 30) / 1e9 == pytest.approx(ours.bandwidth_gbps, rel=1e-12)
        assert (theirs.topology, theirs.latency_ns) == (ours.topology, ours.latency_ns)
    assert back.astra.local_mem_bw_gbps == spec.device.mem_bandwidth_gbps
    assert any(n.startswith("collective model nccl") for n in out.notes) and out.target == "518bd51"


@pytest.mark.parametrize("preset", list_presets())
def test_every_preset_exports_and_imports_back(preset, tmp_path):
    out = export_astra(collective_bench(32, "all_reduce", 4096), load_spec(preset), tmp_path / preset)
    spec = load_spec(preset)
    back = import_astra_config(out.system, out.network).spec
    assert back.dim_sizes == spec.dim_sizes and back.world_size == 32
    assert [d.latency_ns for d in back.network] == [d.latency_ns for d in spec.network]
    assert [d.algorithm("all_reduce") for d in back.network] == [d.algorithm("all_reduce") for d in spec.network]
    assert len(out.notes) >= 5 and not out.idle_ranks and out.metadata_removed == 0


def test_export_refuses_specs_astra_cannot_take(test_data_dir, tmp_path):
    astra = test_data_dir / "astra"
    spec = import_astra_config(astra / "system_ring_splits4.json", astra / "network_ring_4.yml").spec
    with pytest.raises(SpecError, match="has 4 ranks but the trace set has 8"):
        export_astra(collective_bench(8, "all_reduce", 4096), spec, tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_cli_export_prints_the_command_line(test_data_dir, tmp_path):
    astra = test_data_dir / "astra"
    runner = CliRunner()
    assert (
        runner.invoke(
            cli,
            [
                "-q",
                "generate",
                "micro",
                "--collective",
                "all_gather",
                "--size",
                "4KiB",
                "--ranks",
                "4",
                "-o",
                str(tmp_path / "ag"),
            ],
        ).exit_code
        == 0
    )
    assert (
        runner.invoke(
            cli,
            [
                "hw",
                "import-astra",
                "--system",
                str(astra / "system_ring_splits4.json"),
                "--network",
                str(astra / "network_ring_4.yml"),
                "-o",
                str(tmp_path / "s.toml"),
            ],
        ).exit_code
        == 0
    )
    res = runner.invoke(
        cli,
        ["-q", "export", "astra", str(tmp_path / "ag"), "-o", str(tmp_path / "x"), "--hw", str(tmp_path / "s.toml")],
    )
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("AstraSim_Analytical_Congestion_Unaware --workload-configuration=")
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == [
        ".tracekit-export.json",  # what the export wrote (it refuses to overwrite files it did not write)
        "memory.json",
        "network.yml",
        "run.sh",
        "system.json",
        "workload.0.et",
        "workload.1.et",
        "workload.2.et",
        "workload.3.et",
        "workload.comm_groups.json",
    ]
