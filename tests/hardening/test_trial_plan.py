"""``tracekit plan`` tried as a new user would, with bad input (issue 29).

Found: ``--global-batch 0`` planned the model's own batch (512) and exited 0; ``--global-batch -5`` / ``--seq 0``
/ ``--gpus 0`` named no option (``global batch size must be positive``, ``... and GPUs per node at least 1``); a
JSON model that was a list leaked ``pop expected at most 1 argument``, an unknown field
``ModelSpec.__init__() got an unexpected keyword argument``, a bad field value named no file; a JSON model setting
a field ``generate llm`` has no option for (``"activation": "swiglu"`` on gpt3-1.3b) was planned as given while the
printed command line generated the preset's model (plan 1.956 s, the command's replay 1.714 s); ``--hw X --hw X``
planned twice and wrote ``DIR/X/`` twice, and two spec files of the same name wrote one folder.
"""

from __future__ import annotations

import json

import pytest
from _hardkit import one_line_error, run

# one layout, simulated serially in about a second (the 1.7B row of Narayanan et al. 2021 with its knobs fixed)
FIXED = ["--tp", "1", "--pp", "1", "--recompute", "full", "--no-sp", "--zero", "0", "--micro-batch", "1"]
ROW = ["plan", "--model", "megatron-1.7B", "--gpus", "32", "--hw", "dgx-a100", *FIXED, "--executor", "serial"]


@pytest.mark.parametrize(
    ("option", "value"), [("--global-batch", "0"), ("--global-batch", "-5"), ("--seq", "0"), ("--gpus", "0")]
)
def test_a_batch_sequence_or_gpu_count_below_one_names_the_option(option, value, tmp_path):
    args = list(ROW)
    if option == "--gpus":
        args[args.index("--gpus") + 1] = value
    else:
        args += [option, value]
    res = run(*args, "-o", tmp_path / "out")
    line = one_line_error(res, 1)
    assert line.startswith(f"tracekit: error: Invalid value for '{option}': {value} is not in the range x>=1 (see ")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("[1, 2]", "not a JSON object of model fields (got list)"),
        ('{"nosuch": 1}', "unknown field 'nosuch'; fields: preset, name, num_layers,"),
        ('{"num_layers": "abc"}', "num layers must be an integer, got 'abc'"),
        ('{"num_layers": -4}', "num layers must be positive, got -4"),
        ('{"preset": "nope"}', "key preset: unknown model preset 'nope'; choose one of gpt3-175b,"),
        (
            '{"activation": "swiglu", "num_layers": 4}',
            "activation 'swiglu' differs from preset gpt3-1.3b's 'gelu' and generate llm has no option for it",
        ),
        ('{"num_experts": 8}', "num_experts 8 differs from preset gpt3-1.3b's 0"),
    ],
)
def test_a_bad_json_model_is_one_line_naming_the_option_and_file(tmp_path, document, message):
    model = tmp_path / "model.json"
    model.write_text(document)
    res = run("plan", "--model", model, "--gpus", "8", "--hw", "dgx-a100", *FIXED, "--executor", "serial")
    assert one_line_error(res, 1).startswith(f"tracekit: error: --model {model}: {message}")


def test_a_json_model_whose_fields_the_command_line_can_set_replays_to_the_planned_nanosecond(tmp_path):
    # llama3-8b cut to 4 layers: tp 2, pp 2 interleaved (vp 2), cp 2, dp 2 on 16 H100
    model = tmp_path / "llama4.json"
    model.write_text('{"preset": "llama3-8b", "num_layers": 4, "activation": "swiglu"}')
    args = ["plan", "--model", model, "--gpus", "16", "--hw", "dgx-h100", "--tp", "2", "--pp", "2", "--cp", "2"]
    args += ["--vp", "2", "--micro-batch", "1", "--recompute", "selective", "--zero", "1", "--global-batch", "16"]
    res = run(*args, "--seq", "4096", "--executor", "serial", "--json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    command = doc["generate_command"].split()
    assert command[3:7] == ["--model", "llama3-8b", "--layers", "4"] and "--virtual-stages" in command
    command[command.index("-o") + 1] = str(tmp_path / "best")
    assert run(*command[1:]).exit_code == 0
    replayed = json.loads(run("replay", tmp_path / "best", "--hw", "dgx-h100", "--json").stdout)
    assert replayed["iteration_time_ns"] == round(doc["best"]["step_s"] * 1e9)


def test_the_same_spec_twice_or_two_specs_writing_one_folder_are_refused(tmp_path):
    from tracekit.replayer.simulation.specs import preset_path

    twice = run(*ROW, "--hw", "dgx-a100", "-o", tmp_path / "out")
    assert (
        one_line_error(twice)
        == "tracekit: error: --hw dgx-a100 and --hw dgx-a100: the same spec twice; give each spec once"
    )
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "x.toml").write_text(preset_path("dgx-a100").read_text())
    a, b = tmp_path / "a" / "x.toml", tmp_path / "b" / "x.toml"
    same = run(*ROW, "--hw", a, "--hw", tmp_path / "a" / ".." / "a" / "x.toml")
    assert one_line_error(same).endswith("the same spec twice; give each spec once")
    clash = run(*ROW[:-2], "--hw", a, "--hw", b, "-o", tmp_path / "out")
    line = one_line_error(clash)
    assert line.endswith(f"both would be written to {tmp_path / 'out' / 'x'}; rename one spec file")
    assert not (tmp_path / "out").exists()


def test_overlapped_communication_taking_every_sm_is_refused_not_run_at_full_speed(tmp_path):
    # tp_overlap_comm_sms >= the H100's 132 SMs left the overlapped GEMMs at full speed (0.575 s, as with 0;
    # 131 SMs: 36.2 s): the margin only applied below the SM count
    args = ["generate", "llm", "--model", "llama3-8b", "--layers", "2", "--global-batch", "2", "--tp", "2", "--sp"]
    args += ["--seq", "256", "--stack", "nemo", "--hw", "dgx-h100", "-o", tmp_path / "job"]
    for sms in (132, 1000):
        line = one_line_error(run(*args, "--stack-knob", f"tp_overlap_comm_sms={sms}"))
        assert line == (
            f"tracekit: error: --stack-knob tp_overlap_comm_sms={sms}: the NVIDIA H100-SXM5-80GB has 132 SMs and the "
            "overlapped GEMMs need at least one (give at most 131)"
        )
    assert not list(tmp_path.iterdir())
    assert run(*args, "--stack-knob", "tp_overlap_comm_sms=131").exit_code == 0


def test_a_microbatch_group_size_below_one_names_the_option(tmp_path):
    args = ["generate", "llm", "--model", "llama3-8b", "--layers", "4", "--global-batch", "8", "--pp", "2"]
    args += ["--schedule", "interleaved", "--virtual-stages", "2", "-o", tmp_path / "job"]
    for value in ("0", "-1"):
        line = one_line_error(run(*args, "--microbatch-group-size", value))
        assert line.startswith(f"tracekit: error: Invalid value for '--microbatch-group-size': {value} is not in the")


def test_tf32_without_retarget_is_a_usage_error_not_silently_ignored(tmp_path):
    from _hardkit import ring_job

    prefix = ring_job(tmp_path, 2)
    res = run("transform", prefix, "--scale-compute", "2", "--tf32", "all", "-o", tmp_path / "out")
    assert one_line_error(res, 2).startswith(
        "tracekit: error: --tf32 needs --retarget FROM:TO (it says how the retarget projects fp32 ops)"
    )
    assert not list(tmp_path.glob("out*"))


def test_a_ray_address_nothing_listens_on_is_refused_at_once_not_retried_for_minutes(tmp_path):
    # ray.init retried 127.0.0.1:1 for more than 200 s (plan and sweep share the Ray start)
    pytest.importorskip("ray")
    import socket

    with socket.socket() as s:  # a port just freed: nothing listens on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from _hardkit import ring_job

    prefix = ring_job(tmp_path, 2)
    for args in (ROW[:-2], ["validate", prefix]):  # planning/pool.py and tracekit.parallel
        res = run(*args, "--executor", "ray", "--address", f"127.0.0.1:{port}")
        assert one_line_error(res) == (
            f"tracekit: error: --address 127.0.0.1:{port}: no Ray cluster answers there (Connection refused); start "
            "one with 'ray start --head' or leave --address out to start a local one"
        )


def test_a_plan_on_ray_is_quiet_with_q_and_times_what_the_serial_plan_times(tmp_path):
    # Ray's own logger printed "Token authentication is enabled for this Ray cluster ..." on stderr under -q
    pytest.importorskip("ray")
    import subprocess
    import sys

    args = [*ROW[:-2], "--zero", "0,1", "--gap", "0", "--json"]
    serial = json.loads(run(*args, "--executor", "serial").stdout)
    tracekit = [sys.executable, "-c", "from tracekit.cli import main; main()"]
    res = subprocess.run([*tracekit, "-q", *args, "--executor", "ray"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    on_ray = json.loads(res.stdout)
    # Ray runs two layouts at a time, so it may simulate one the serial search pruned by bound; the same step times
    assert on_ray["executor"] == "ray" and on_ray["best"]["label"] == serial["best"]["label"]
    timed = {c["label"]: c["step_s"] for c in serial["candidates"] if c["status"] == "simulated"}
    assert timed and all(
        on_ray_c["step_s"] == timed[on_ray_c["label"]]
        for on_ray_c in on_ray["candidates"]
        if on_ray_c["label"] in timed
    )


def test_ring_context_parallelism_without_fused_attention_says_which_knob_to_set(tmp_path):
    args = ["generate", "llm", "--model", "llama3-8b", "--layers", "2", "--global-batch", "2", "--seq", "8192"]
    args += ["--cp", "2", "--stack-knob", "cp_comm=ring", "-o", tmp_path / "job"]
    assert one_line_error(run(*args)) == (
        "tracekit: error: cp=2: ring context parallelism needs fused attention (its online softmax merges the "
        "steps); stack megatron-2021 runs without it here: add --stack-knob fused_attention=true or cp_comm=allgather"
    )
    assert run(*args, "--stack-knob", "fused_attention=true").exit_code == 0


@pytest.mark.parametrize(("value", "message"), [("abc", "--tp 'abc' is not an integer"), ("1,", "--tp '1,': an empty")])
def test_a_bad_knob_list_is_a_usage_error_naming_the_option(tmp_path, value, message):
    args = list(ROW)
    args[args.index("--tp") + 1] = value
    line = one_line_error(run(*args, "-o", tmp_path / "out"), 2)
    assert line.startswith(f"tracekit: error: {message}")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("executor", ["serial", "process", "auto"])
@pytest.mark.parametrize("command", ["plan", "sweep", "validate"])
def test_an_address_without_the_ray_executor_is_a_usage_error(tmp_path, command, executor):
    from _hardkit import ring_job

    if command == "plan":
        args = [a for a in ROW if a not in ("--executor", "serial")]
    else:
        prefix = ring_job(tmp_path, 2)
        args = [command, prefix] + (["--hw", "dgx-a100", "-o", tmp_path / "sw"] if command == "sweep" else [])
    line = one_line_error(run(*args, "--executor", executor, "--address", "127.0.0.1:1"), 2)
    assert line.startswith(f"tracekit: error: --address 127.0.0.1:1 needs --executor ray (got --executor {executor}")


def test_plan_into_a_folder_points_the_command_inside_it_and_replaces_the_earlier_plan(tmp_path):
    out = tmp_path / "out"
    single = run(*ROW, "-o", out)
    assert single.exit_code == 0, single.stderr
    assert f"--classes -o {out / 'best'}" in single.stdout
    assert json.loads((out / "plan.json").read_text())["generate_command"].endswith(f"-o {out / 'best'}")
    (out / "mine").mkdir()
    (out / "mine" / "plan.json").write_text('{"format": "someone else\'s"}')
    both = run(*ROW, "--hw", "dgx-h100", "-o", out)
    assert both.exit_code == 0, both.stderr
    assert f"--classes -o {out / 'dgx-h100' / 'best'}" in both.stdout
    assert sorted(str(p.relative_to(out)) for p in out.rglob("plan.*")) == [
        "dgx-a100/plan.html",
        "dgx-a100/plan.json",
        "dgx-h100/plan.html",
        "dgx-h100/plan.json",
        "mine/plan.json",  # not a plan: left alone
    ]
    again = run(*ROW, "-o", out)
    assert again.exit_code == 0, again.stderr
    assert sorted(str(p.relative_to(out)) for p in out.rglob("plan.*")) == ["mine/plan.json", "plan.html", "plan.json"]


def test_ring_context_parallelism_needs_a_sequence_of_two_cp_equal_chunks(tmp_path):
    args = ["generate", "llm", "--model", "llama3-8b", "--layers", "2", "--global-batch", "2", "--seq", "1000"]
    args += ["--cp", "8", "--stack", "megatron-core", "--classes", "-o", tmp_path / "job"]
    assert one_line_error(run(*args)) == (
        "tracekit: error: sequence length 1000 does not split into 2 x cp = 16 equal chunks: ring context "
        "parallelism (cp=8, cp_comm=ring) needs seq % (2 cp) == 0 (causal load balancing)"
    )
    # the all-gather variant needs cp equal shards only: 1000 = 8 x 125
    assert run(*args, "--stack-knob", "cp_comm=allgather").exit_code == 0


def test_the_planner_skips_ring_layouts_whose_sequence_does_not_split_into_two_cp_chunks():
    import dataclasses

    from tracekit.replayer.orchestration.planning.enumerate import KnobSpace, enumerate_layouts
    from tracekit.workloads.config import LLMConfig, preset
    from tracekit.workloads.stacks import stack

    model = dataclasses.replace(preset("llama3-8b")[0], seq_length=1000)
    space = KnobSpace(tp=(1,), cp=(4, 8), micro_batch=(1,), vp=(1,), recompute=("full",), sp=(False,), zero=(1,))
    ring = LLMConfig(model, global_batch_size=64, stack=stack("megatron-core")[0])
    found = enumerate_layouts(ring, 64, 8, space)
    # cp 4: 1000 = 8 x 125 splits; cp 8: 1000 is not a multiple of 16, so every cp 8 layout goes (pp 1, 2, 4, 8)
    assert {layout.cp for layout in found.layouts} == {4}
    reason = (
        "sequence length 1000 does not split into 2 x cp = 16 equal chunks: ring context parallelism "
        "(cp=8, cp_comm=ring) needs seq % (2 cp) == 0 (causal load balancing)"
    )
    assert found.rejected[reason] == 4
    gathered = dataclasses.replace(ring, stack=stack("megatron-core", cp_comm="allgather")[0])
    assert {layout.cp for layout in enumerate_layouts(gathered, 64, 8, space).layouts} == {4, 8}


@pytest.mark.parametrize(
    ("value", "exit_code", "why"),
    [("0", 1, "0.0 is not in the range 0<x<=1"), ("1.5", 1, "1.5 is not in the range 0<x<=1"),
     ("nan", 1, "'nan' is not a finite number"), ("abc", 2, "'abc' is not a valid float")],
)  # fmt: skip
def test_a_memory_fraction_outside_zero_to_one_is_refused_by_the_option(tmp_path, value, exit_code, why):
    line = one_line_error(run(*ROW, "--max-memory-fraction", value, "-o", tmp_path / "out"), exit_code)
    assert line.startswith(f"tracekit: error: Invalid value for '--max-memory-fraction': {why}")
    assert not (tmp_path / "out").exists()
