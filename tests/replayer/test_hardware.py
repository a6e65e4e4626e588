"""Hardware specs: presets, validation errors naming file and key, fitting, placement, CLI."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.errors import SpecError
from tracekit.replayer.simulation.specs import list_presets, load_spec, read_spec, spec_from_dict
from tracekit.replayer.simulation.placement import p2p_dimension, place_group, rank_coords

MINIMAL = """
name = "tiny"
[device]
name = "dev"
peak_flops_per_s = { bf16 = 100e12 }
mem_bandwidth_gbps = 1000.0
[[network]]
name = "nvlink"
topology = "switch"
size = 4
bandwidth_gbps = 100.0
latency_ns = 500.0
[[network]]
name = "ib"
topology = "switch"
size = 2
bandwidth_gbps = 10.0
latency_ns = 2000.0
"""


def test_presets_listed_and_loaded_with_datasheet_values():
    assert {"dgx-a100", "dgx-h100", "h200"} <= set(list_presets())
    a100 = load_spec("dgx-a100")
    assert [d.name for d in a100.network] == ["nvlink", "ib"]
    assert a100.network[0].bandwidth_gbps == 300.0  # 600 GB/s bidirectional NVLink3
    assert a100.network[1].bandwidth_gbps == 25.0  # 200 Gb/s HDR per GPU
    assert a100.device.peak("bf16") == 312e12
    assert a100.device.mem_bandwidth_gbps == 2039.0
    h100 = load_spec("dgx-h100")
    assert (h100.network[0].bandwidth_gbps, h100.network[1].bandwidth_gbps) == (450.0, 50.0)
    assert h100.device.peak() == 989.4e12
    assert load_spec("h200").device.mem_bandwidth_gbps == 4800.0


@pytest.mark.parametrize("name", ["dgx-a100", "dgx-h100", "h200"])
def test_preset_round_trips_through_toml(name):
    spec = load_spec(name)
    assert spec_from_dict(tomllib.loads(spec.to_toml())) == spec


def test_with_world_size_scales_the_node_dimension():
    spec = load_spec("dgx-h100")
    assert spec.world_size == 32
    assert spec.with_world_size(64).dim_sizes == (8, 8)
    assert spec.with_world_size(8).dim_sizes == (8,)
    assert spec.with_world_size(4).dim_sizes == (4,)
    assert spec.fitted(16).world_size == 16
    with pytest.raises(SpecError, match="world size 12 is not a multiple of the 8 ranks"):
        spec.with_world_size(12)


def test_fitted_refuses_a_fixed_spec_of_another_size(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(MINIMAL)
    spec = read_spec(path)
    assert spec.fitted(8) is spec
    with pytest.raises(SpecError) as err:
        spec.fitted(16)
    assert str(path) in str(err.value) and "has 8 ranks (4 x 2) but the trace set has 16" in str(err.value)


BAD_SPECS = [
    (MINIMAL.replace("[device]", "[devices]"), "key devices: unknown key"),
    (MINIMAL.replace('name = "dev"\n', ""), "key device.name: is required"),
    (
        MINIMAL.replace("bandwidth_gbps = 10.0", "bandwidth_gbps = -10.0"),
        "key network[1].bandwidth_gbps: must be positive",
    ),
    (
        MINIMAL.replace("bandwidth_gbps = 10.0", "bandwith_gbps = 10.0"),
        "key network[1].bandwith_gbps: unknown key (expected one of algorithms, bandwidth_gbps",
    ),
    (
        MINIMAL.replace('topology = "switch"\nsize = 2', 'topology = "torus"\nsize = 2'),
        "key network[1].topology: must be one of",
    ),
    (MINIMAL.replace("size = 4", "size = 0"), "key network[0].size: must be at least 1"),
    (MINIMAL.replace("latency_ns = 500.0", 'latency_ns = "fast"'), "key network[0].latency_ns: must be a number"),
    (
        MINIMAL + '[network.algorithms]\nreduce_scatter = "double_binary_tree"\n',
        "key network[1].algorithms.reduce_scatter: double_binary_tree cannot run reduce_scatter",
    ),
    (
        MINIMAL + '[network.algorithms]\nall_reduce = "butterfly"\n',
        "key network[1].algorithms.all_reduce: must be one of",
    ),
    (MINIMAL + '[collectives]\nmodel = "astra"\n', "key astra: is required"),
    (MINIMAL + '[collectives]\nmodel = "nccl"\n', "key network[0].nccl_link: is required"),
    (MINIMAL + '[collectives]\nmodel = "ns3"\n', "key collectives.model: must be one of"),
    (MINIMAL + "[compute]\nduration_scale = 0\n", "key compute.duration_scale: must be positive"),
    (
        MINIMAL.replace("mem_bandwidth_gbps", "compute_efficiency = 1.5\nmem_bandwidth_gbps"),
        "key device.compute_efficiency: must be at most 1.0",
    ),
    (MINIMAL.replace('name = "tiny"', 'name = "tiny'), "not a valid TOML file"),
]


@pytest.mark.parametrize("text, message", BAD_SPECS)
def test_bad_spec_names_file_and_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        read_spec(path)
    assert str(err.value).startswith(f"{path}: "), str(err.value)
    assert message in str(err.value)


def test_unknown_preset_lists_the_presets():
    with pytest.raises(SpecError, match="no hardware preset named 'dgx-z9'.*dgx-a100"):
        load_spec("dgx-z9")


def test_rank_coordinates_dimension_zero_fastest():
    # ASTRA-sim's own example: npu 47 on 2 x 8 x 4 is [1, 7, 2].
    assert rank_coords(47, (2, 8, 4)) == (1, 7, 2)
    assert rank_coords(13, (8, 4)) == (5, 1)
    with pytest.raises(SpecError, match="rank 32 is outside the 32 ranks"):
        rank_coords(32, (8, 4))


def test_group_placement():
    whole = place_group(tuple(range(32)), (8, 4))
    assert (whole.dims, whole.sizes, whole.regular) == ((0, 1), (8, 4), True)
    node = place_group((8, 9, 10, 11, 12, 13, 14, 15), (8, 4))
    assert (node.dims, node.sizes, node.regular) == ((0,), (8,), True)
    column = place_group((3, 11, 19, 27), (8, 4))
    assert (column.dims, column.sizes, column.coords) == ((1,), (4,), ((0, 1, 2, 3),))
    tp_pairs = place_group((0, 1, 8, 9), (8, 4))
    assert (tp_pairs.dims, tp_pairs.sizes, tp_pairs.regular) == ((0, 1), (2, 2), True)
    odd = place_group((0, 9), (8, 4))
    assert (odd.dims, odd.sizes, odd.regular) == ((0, 1), (2, 2), False)
    assert place_group((5,), (8, 4)).dims == ()
    with pytest.raises(SpecError, match="lists a rank twice"):
        place_group((1, 1), (8, 4))


def test_p2p_dimension_is_outermost_difference():
    assert p2p_dimension(0, 1, (8, 4)) == 0
    assert p2p_dimension(0, 9, (8, 4)) == 1
    assert p2p_dimension(3, 3, (8, 4)) is None


# --- CLI ---


def test_cli_hw_list():
    result = CliRunner(env={"COLUMNS": "200"}).invoke(cli, ["hw", "list"])
    assert result.exit_code == 0, result.output
    for name in ("dgx-a100", "dgx-h100", "h200"):
        assert name in result.stdout
    assert "8 nvlink 450 GB/s 600 ns, 4 ib 50 GB/s 3000 ns" in result.stdout
    assert result.stderr == ""


def test_cli_hw_show_and_toml():
    result = CliRunner(env={"COLUMNS": "200"}).invoke(cli, ["hw", "show", "dgx-a100"])
    assert result.exit_code == 0, result.output
    assert "A100-SXM4-80GB" in result.stdout and "ranks: 32" in result.stdout
    result = CliRunner().invoke(cli, ["hw", "show", "dgx-a100", "--toml"])
    assert result.exit_code == 0
    assert spec_from_dict(tomllib.loads(result.stdout)) == load_spec("dgx-a100")


def test_cli_hw_show_bad_spec_is_one_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(MINIMAL.replace("size = 4", "size = -4"))
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit.cli._main", "hw", "show", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.strip() == f"tracekit: error: {path}: key network[0].size: must be at least 1, got -4"
