"""replay --compute auto|measured|roofline|projected and transform --retarget: method printed, fallbacks counted."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.io import read_traceset, write_traceset
from tracekit.model import Attr, ExecutionTrace, Metadata, Node, NodeType
from tracekit.replayer.simulation.specs import load_spec
from tracekit.replayer.orchestration.projected import plan_compute, replay_with_compute
from tracekit.sets.traceset import TraceSet
from tracekit.errors import ConfigError


def _job(device: str | None):
    dev = [Attr("is_cpu_op", False, "bool_val"), Attr("stream", 7)]
    nodes = [
        Node(
            1,
            "aten::mm",
            NodeType.COMP_NODE,
            duration_ns=5_000,
            attrs=[Attr("is_cpu_op", True, "bool_val"), Attr("tid", 1)],
        ),
        # a large bf16 GEMM kernel: 2 x 8192^3 FLOPs, 3 x 8192^2 x 2 bytes, measured 4 ms on the capture device
        Node(
            2,
            "gemm_kernel",
            NodeType.COMP_NODE,
            data_deps=[1],
            ctrl_deps=[1],
            duration_ns=4_000_000,
            attrs=dev
            + [
                Attr("num_ops", 2 * 8192**3),
                Attr("tensor_size", 3 * 8192**2 * 2, "uint64_val"),
                Attr("op_class", "gemm", "string_val"),
                Attr("compute_dtype", "bf16", "string_val"),
            ],
        ),
        Node(3, "unknown_kernel", NodeType.COMP_NODE, data_deps=[2], duration_ns=1_000, attrs=list(dev)),
    ]
    md = Metadata("0.0.4", [Attr("compute_device", device, "string_val")] if device else [])
    return TraceSet([ExecutionTrace(nodes, md, rank=0)])


def test_auto_projects_when_both_devices_are_known_and_counts_every_node():
    result, ts, plan, report = replay_with_compute(_job("NVIDIA A100-SXM4-80GB"), "dgx-h100")
    assert (plan.method, plan.source, plan.target) == ("projected", "a100-80gb", "h100-sxm")
    assert report.nodes == {"projected": 1, "kept_no_cost": 1, "kept_host": 1}
    gemm = ts[0].node_by_id(2).duration_ns
    # large GEMM: 4 ms x (312 x 0.86 x q_A100) / (989.4 x 0.80 x q_H100), between the HBM and peak ratios
    assert 4_000_000 / (989.4 / 312) < gemm < 4_000_000 / (3350 / 2039)
    assert result.iteration_time_ns == pytest.approx(5_000 + gemm + 1_000)
    lines = "\n".join(report.lines())
    assert "projected: 1 nodes" in lines and "kept_no_cost: 1 nodes" in lines


def test_auto_keeps_measured_without_a_device_and_projected_then_refuses():
    plan = plan_compute(_job(None), load_spec("dgx-h100"))
    assert plan.method == "measured" and plan.reason == "the trace records no capture device"
    with pytest.raises(ConfigError, match="cannot project compute: the trace records no capture device"):
        plan_compute(_job(None), load_spec("dgx-h100"), "projected")
    assert (
        plan_compute(_job(None), load_spec("dgx-h100"), "projected", capture_device="a100-80gb").source == "a100-80gb"
    )


def test_cli_prints_the_method_and_roofline_fallbacks(tmp_path):
    write_traceset(_job("NVIDIA A100-SXM4-80GB"), str(tmp_path / "job"))
    runner = CliRunner()
    res = runner.invoke(cli, ["replay", str(tmp_path / "job"), "--hw", "dgx-h100"])
    assert res.exit_code == 0, res.output
    assert "compute projected a100-80gb -> h100-sxm" in res.stdout and "kept_no_cost: 1 nodes" in res.stdout
    res = runner.invoke(cli, ["replay", str(tmp_path / "job"), "--hw", "dgx-h100", "--compute", "roofline"])
    assert res.exit_code == 0, res.output
    # the GEMM has FLOPs/bytes; the host op and the unknown kernel keep their measured time, and say so
    assert "1 nodes by roofline, 2 without FLOPs/bytes kept their measured time" in res.stdout
    res = runner.invoke(cli, ["replay", str(tmp_path / "job"), "--hw", "dgx-h100", "--compute", "measured"])
    assert "compute: measured times (chosen)" in res.stdout
    assert "iteration time 4.006 ms" in res.stdout


def test_cli_retarget_prints_counts_and_moves_the_compute_device(tmp_path):
    write_traceset(_job("NVIDIA A100-SXM4-80GB"), str(tmp_path / "job"))
    runner = CliRunner()
    res = runner.invoke(
        cli, ["transform", str(tmp_path / "job"), "-o", str(tmp_path / "h100"), "--retarget", "a100-80gb:dgx-h100"]
    )
    assert res.exit_code == 0, res.output
    assert "compute projected a100-80gb -> h100-sxm" in res.stdout
    assert "kept_no_cost: 1 nodes" in res.stdout and "kept_host: 1 nodes" in res.stdout
    out = read_traceset(str(tmp_path / "h100"))
    assert out[0].metadata.get_attr("compute_device") == "NVIDIA H100-SXM5-80GB"
    # the retargeted trace replayed on H100: H100 -> H100 is the identity
    back = runner.invoke(cli, ["replay", str(tmp_path / "h100"), "--hw", "dgx-h100"])
    assert f"{out[0].node_by_id(2).duration_ns / 1e6:,.3f} ms" in back.stdout


def test_hw_devices_lists_the_presets_with_sources():
    res = CliRunner().invoke(cli, ["hw", "devices"], terminal_width=400)
    assert res.exit_code == 0, res.output
    for key in ("a100-80gb", "h100-sxm", "mi300x", "host-cpu"):
        assert key in res.stdout
    h100 = next(line for line in res.stdout.splitlines() if "h100-sxm" in line)
    assert "989.4" in h100 and "3,350" in h100 and "132" in h100  # bf16 TFLOP/s, GB/s, SMs
    assert "datasheet" in res.stdout


def test_result_json_records_the_compute_plan_and_reads_back(tmp_path):
    import orjson

    from tracekit.replayer.results.result import ReplayResult

    write_traceset(_job("NVIDIA A100-SXM4-80GB"), str(tmp_path / "job"))
    res = CliRunner().invoke(cli, ["replay", str(tmp_path / "job"), "--hw", "dgx-h100", "-o", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    d = orjson.loads((tmp_path / "r.json").read_bytes())
    assert d["compute_plan"]["method"] == "projected" and d["compute_plan"]["source"] == "a100-80gb"
    assert d["compute_projection"]["methods"]["projected"]["nodes"] == 1
    assert d["compute_projection"]["methods"]["kept_no_cost"]["measured_ns"] == 1_000
    assert ReplayResult.from_dict(d).iteration_time_ns == d["iteration_time_ns"]
