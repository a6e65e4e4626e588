"""Issue 32, kind 1: one timing rule in every command that times a job, and no knob that silently does nothing.

The trial swept a GPU capture (param-resnet, RTX 2080 Ti) over dgx-a100 / dgx-h100 / h200: 952.995 ms on all three,
since `sweep` never projected compute, while `replay --hw` gave 468.0 / 175.6 / 164.7 ms; `--vary
compute.mode=projected` was refused. A latency sweep under the `nccl` model was flat with no note.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _hardkit import one_line_error, ring_job, run

SAMPLES = Path(__file__).parents[2] / "sample_traces"
ASTRA = Path(__file__).parents[1] / "data" / "astra"


@pytest.fixture(scope="module")
def resnet(real_dir, tmp_path_factory) -> Path:
    from tracekit.converters.pytorch import convert_pytorch
    from tracekit.io import write_traceset

    d = real_dir / "pytorch" / "param-resnet"
    # the ET and Kineto files of param-resnet are of two models (issue 27 refuses the pair): converted anyway, as the
    # trial did
    ts = convert_pytorch(
        [d / "resnet_et.json.gz"], [d / "resnet_kineto.json.gz"], executor="serial", allow_unlinked=True
    )
    prefix = tmp_path_factory.mktemp("resnet") / "job"
    write_traceset(ts, prefix)
    return prefix


@pytest.mark.realdata
def test_a_sweep_over_three_gpus_equals_three_replays_of_a_gpu_capture(resnet, tmp_path):
    from tracekit.replayer.orchestration.projected import replay_with_compute
    from tracekit.replayer.orchestration.sweep import run_sweep

    specs = ["dgx-a100", "dgx-h100", "h200"]
    swept = run_sweep(str(resnet), specs, executor="serial")
    replays = [replay_with_compute(str(resnet), hw)[0].iteration_time_ns for hw in specs]
    assert [r.iteration_time_ns for r in swept.rows] == replays
    # the trial's `replay --hw` runs gave 468.0 / 175.6 / 164.7 ms (not 952.995 ms three times); issue 27's ET-path
    # timing rules (issue nodes of collectives, latency leads) moved them to 468.1 / 179.6 / 168.7; fp32 convolutions
    # as TF32 on Ampere and Hopper (PyTorch's cudnn.allow_tf32 default, tracekit/costs/devices.toml) to these
    assert [round(t / 1e6, 1) for t in replays] == [310.9, 136.1, 131.3]
    assert [r.compute for r in swept.rows] == [
        "projected rtx-2080-ti -> a100-80gb",
        "projected rtx-2080-ti -> h100-sxm",
        "projected rtx-2080-ti -> h200",
    ]
    # told otherwise the same way as replay: --compute measured, or a compute axis (compute.mode was refused)
    res = run("sweep", resnet, "--hw", "dgx-a100", "--vary", "compute.mode=projected,measured", "-o", tmp_path / "s")
    assert res.exit_code == 0, res.stderr
    assert "timed: collective model nccl, compute projected rtx-2080-ti -> a100-80gb (point 0)" in res.stdout
    assert "timed: collective model nccl, compute measured (point 1)" in res.stdout
    assert "952.9950" in res.stdout and "310.9362" in res.stdout


def test_sweep_prints_how_every_point_was_timed_and_refuses_an_unknown_compute_choice(tmp_path):
    prefix = ring_job(tmp_path)
    res = run("sweep", prefix, "--hw", "dgx-h100", "--compute", "measured", "-o", tmp_path / "s", "--no-plot")
    assert res.exit_code == 0, res.stderr
    assert "timed: collective model nccl, compute measured (every point)" in res.stdout
    line = one_line_error(run("sweep", prefix, "--hw", "dgx-h100", "--vary", "compute=fast", "-o", tmp_path / "t"))
    assert line == (
        "tracekit: error: --vary 'compute=fast': compute takes the --compute choices auto, measured, roofline, "
        "projected"
    )
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("model", ["nccl", "alpha_beta", "astra", "measured"])
def test_a_latency_sweep_moves_the_result_or_says_the_model_ignores_it(model, tmp_path):
    from tracekit.replayer.orchestration.sweep import parse_vary, run_sweep

    spec = "dgx-a100"
    if model == "astra":
        spec = tmp_path / "ring.toml"
        res = run(
            "hw", "import-astra", "--system", ASTRA / "Ring.json", "--network", ASTRA / "network_ring_4.yml", "-o", spec
        )
        assert res.exit_code == 0, res.stderr
    from tracekit.replayer import ReplayOptions

    result = run_sweep(
        str(SAMPLES / "chakra" / "all_reduce"),
        [spec],
        [parse_vary("network[0].latency_ns=100,100000")],
        options=ReplayOptions(collective_model=model),
        executor="serial",
    )
    first, last = (r.iteration_time_ns for r in result.rows)
    ignored = (
        f"network[0].latency_ns = 100, 100000 did not move the iteration time under the {model} collective model: "
        "it is unused by it for this job"
    )
    if first == last:  # nccl (collectives take NCCL's latency table) and measured (the trace's own times) today
        assert ignored in result.notes
    else:
        assert last > first and ignored not in result.notes
    if model in ("alpha_beta", "astra"):  # latency is in every message these models price
        assert last > first
    if model == "measured":
        assert first == last


def test_check_replay_says_how_it_timed_the_job(tmp_path):
    capture = SAMPLES / "pytorch" / "dist_ws2"
    job = tmp_path / "job"
    res = run(
        "convert", "pytorch", "--et", f"{capture}/et_rank*.json", "--kineto", f"{capture}/kineto_rank*.json", "-o", job
    )
    assert res.exit_code == 0, res.stderr
    res = run("check-replay", job)
    assert res.exit_code == 0, res.stderr
    assert (
        "timed: collective model measured, compute measured (the traces' own durations; the spec's rates are unused)"
        in res.stdout.splitlines()
    )
