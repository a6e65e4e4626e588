"""The session's new features tried as a new user would, with bad input (comm-group files, perturbations).

`replay --perturb slow=99999:1.5` on a 4-rank job ran and printed an unperturbed result; `replay --comm-groups`
with a group larger than the job blamed the traces ("no trace for rank(s) 4, 5"); `info --comm-groups FILE`
reported the file beside the set instead of FILE.
"""

from __future__ import annotations

import json

import pytest
from _hardkit import one_line_error, ring_job, run


@pytest.mark.parametrize(
    ("item", "line"),
    [
        ("slow=99999:1.5", "tracekit: error: slow rank 99999: the job has ranks 0-3 only"),
        ("delay=1:5us", "tracekit: error: delayed node 1: the job has nodes 0-0 only (4 ranks per node)"),
    ],
)
def test_a_perturbation_of_a_rank_or_node_outside_the_job_is_refused(tmp_path, item, line):
    prefix = ring_job(tmp_path, 4)
    assert one_line_error(run("replay", prefix, "--hw", "dgx-h100", "--perturb", item)) == line


def test_a_perturbation_outside_the_job_is_refused_by_the_sampled_replays_too(tmp_path):
    prefix = ring_job(tmp_path, 4)
    res = run(
        "replay", prefix, "--hw", "dgx-h100", "--perturb", "slow=7:2", "--perturb", "jitter=compute:0.1",
        "--samples", "2",
    )  # fmt: skip
    assert one_line_error(res) == "tracekit: error: slow rank 7: the job has ranks 0-3 only"


def test_a_perturbation_inside_the_job_still_runs(tmp_path):
    prefix = ring_job(tmp_path, 4)
    assert run("replay", prefix, "--hw", "dgx-h100", "--perturb", "slow=3:1.5").exit_code == 0


@pytest.mark.parametrize(("members", "top"), [([0, 1, 2, 3, 4, 5], 5), ([0, 99], 99)])
def test_a_comm_group_past_the_rank_files_is_the_files_error_in_replay(tmp_path, members, top):
    prefix = ring_job(tmp_path, 4)
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"1": members}))
    res = run("replay", prefix, "--hw", "dgx-h100", "--comm-groups", groups)
    assert one_line_error(res) == (
        f"tracekit: error: {groups}: comm-group '1' names rank {top} but the trace set's rank files stop at rank 3"
    )


def test_info_names_the_comm_group_file_it_was_given(tmp_path):
    prefix = ring_job(tmp_path, 4)
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"1": [0, 1], "2": [2, 3]}))
    res = run("info", prefix, "--comm-groups", groups)
    assert res.exit_code == 0, res.stderr
    last = res.stdout.strip().splitlines()[-1]
    assert last == f"comm groups for ASTRA-sim (--comm-group-configuration): {groups} (2 sub-group(s))"


@pytest.mark.parametrize(
    ("item", "line"),
    [
        ("cp_comm=xx", "tracekit: error: --stack-knob cp_comm=xx: expected one of ring, allgather"),
        ("fp8_recipe=te", "tracekit: error: --stack-knob fp8_recipe=te: expected one of transformer-engine, all"),
    ],
)
def test_a_named_stack_knob_with_an_unknown_value_names_the_option(tmp_path, item, line):
    res = run(
        "generate", "llm", "--model", "llama2-7b", "--tp", "2", "--layers", "2", "--ranks", "4", "--classes",
        "--stack-knob", item, "-o", tmp_path / "job",
    )  # fmt: skip
    assert one_line_error(res) == line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("value", "why"),
    [("-1", "-1.0 is not in the range 0<=x<=1000000.0"), ("nan", "'nan' is not a finite number")],
)
def test_a_bad_moe_skew_names_the_option(tmp_path, value, why):
    res = run(
        "generate", "micro", "--collective", "all_to_all", "--size", "1MiB", "--ranks", "4",
        "--moe-skew", value, "-o", tmp_path / "moe",
    )  # fmt: skip
    line = one_line_error(res).split(" (see ")[0]  # the help hint names CliRunner's program, not tracekit
    assert line == f"tracekit: error: Invalid value for '--moe-skew': {why}"
    assert list(tmp_path.iterdir()) == []


def _spec_with_perturb(tmp_path, table: str):
    from tracekit.replayer.simulation.specs import preset_path

    spec = tmp_path / "spec.toml"
    spec.write_text(preset_path("dgx-h100").read_text() + "\n[perturb]\n" + table + "\n")
    return spec


def test_a_spec_files_perturb_table_is_accepted_and_applied(tmp_path):
    """The spec loader refused its own [perturb] table ("key perturb: unknown key"); a 0.5x link of rank 0 into
    dimension 0 makes the 4-rank 1 MiB all-reduce slower than the unperturbed 26,755 ns."""
    import json

    prefix = ring_job(tmp_path, 4)
    spec = _spec_with_perturb(tmp_path, "links = [{ rank = 0, dimension = 0, bandwidth_factor = 0.5 }]")
    plain = run("replay", prefix, "--hw", "dgx-h100", "--json")
    slowed = run("replay", prefix, "--hw", spec, "--json")
    assert plain.exit_code == 0 and slowed.exit_code == 0, slowed.stderr
    assert json.loads(plain.stdout)["iteration_time_ns"] < json.loads(slowed.stdout)["iteration_time_ns"]


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ('slow = "x"', "[perturb] slow must be a list of tables (module doc), got x"),
        ('slow = [{ ranks = [0], factor = "a" }]', "[perturb] slow entry {'ranks': [0], 'factor': 'a'}: factor must be a number, got 'a'"),
        ('seed = "a"', "[perturb] seed: seed must be an integer, got 'a'"),
        ("compute_jitter = -1", "[perturb] compute_jitter must be in [0, 10), got -1.0"),
    ],
)  # fmt: skip
def test_a_bad_perturb_table_names_the_file_the_key_and_the_value(tmp_path, table, says):
    prefix = ring_job(tmp_path, 4)
    spec = _spec_with_perturb(tmp_path, table)
    assert one_line_error(run("replay", prefix, "--hw", spec)) == f"tracekit: error: {spec}: {says}"


def test_a_perturb_value_out_of_range_names_the_item(tmp_path):
    prefix = ring_job(tmp_path, 4)
    res = run("replay", prefix, "--hw", "dgx-h100", "--perturb", "jitter=compute:nan")
    assert (
        one_line_error(res)
        == "tracekit: error: --perturb jitter=compute:nan: compute_jitter must be in [0, 10), got nan"
    )


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (("--perturb", "jitter=comm:0.05", "-o", "s.json"), "--samples 2 prints the step-time distribution only; "
         "-o belongs to a single replay (drop --samples for it)"),
        (("--perturb", "jitter=comm:0.05", "--timeline-out", "s.json"), "--samples 2 prints the step-time "
         "distribution only; --timeline-out belongs to a single replay (drop --samples for it)"),
        (("--perturb", "slow=1:2"), "--samples 2: the perturbation has no jitter (--perturb jitter=compute:SIGMA or "
         "jitter=comm:SIGMA), so every sample would be the same replay"),
    ],
)  # fmt: skip
def test_samples_refuse_what_they_would_silently_ignore(tmp_path, monkeypatch, extra, says):
    """`--samples N -o FILE` wrote no FILE; `--samples N` without jitter ran N identical replays."""
    monkeypatch.chdir(tmp_path)
    prefix = ring_job(tmp_path, 4)
    res = run("replay", prefix, "--hw", "dgx-h100", "--samples", "2", *extra)
    assert one_line_error(res, exit_code=2).split(" (see ")[0] == f"tracekit: error: {says}"
    assert not (tmp_path / "s.json").exists()


@pytest.mark.parametrize("command", [("replay", "--hw", "dgx-h100"), ("validate",), ("info",)])
def test_comm_groups_given_for_a_rank_class_set_are_refused_not_ignored(tmp_path, command):
    """A class set's groups come from its manifest: `--comm-groups FILE` was read by none of the three commands."""
    prefix = tmp_path / "job"
    res = run(
        "generate", "llm", "--model", "llama2-7b", "--tp", "2", "--layers", "1", "--ranks", "4", "--classes",
        "-o", prefix,
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"1": [0, 1]}))
    res = run(command[0], prefix, *command[1:], "--comm-groups", groups)
    assert one_line_error(res, exit_code=2).split(" (see ")[0] == (
        f"tracekit: error: --comm-groups {groups}: TRACES is a rank-class set, whose groups are in its manifest "
        "(the option is for rank files)"
    )


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda d: d["rank_classes"][0].update(ranks=[[0, 10**12]]), "rank_classes[0].ranks[0]: rank range 0-1000000000000 is not within ranks 0-3"),
        (lambda d: d["provenance"].update(world_size=10**12), "provenance.world_size: 1,000,000,000,000 is out of range (1 to 1,048,576)"),
        (lambda d: d["rank_classes"][0].update(ranks=[[3, 0]]), "rank_classes[0].ranks[0]: rank range 3-0 is not within ranks 0-3"),
    ],
)  # fmt: skip
def test_a_compact_result_with_a_rank_range_past_its_world_is_refused_before_expanding_it(tmp_path, change, says):
    """`diff`/`report` of a compact result whose class lists ranks 0-10^12 ran until killed (every rank expanded)."""
    prefix = ring_job(tmp_path, 4)
    good = tmp_path / "good.json"
    assert run("replay", prefix, "--hw", "dgx-h100", "-o", good).exit_code == 0
    doc = json.loads(good.read_text())
    assert "rank_classes" in doc  # the compact form
    change(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    line = one_line_error(run("diff", bad, good))
    assert line == f"tracekit: error: {bad}: malformed replay result: {says}"
