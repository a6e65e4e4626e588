"""Silently wrong results (issue 11, items 6-10): each input built here, each right value asserted."""

from __future__ import annotations

import json
import math

import pytest

from _hardkit import leftovers, one_line_error, raw_et, ring_job, run
from _pytorch_synth import cpu, et_doc, kineto_doc, mlp_et, mlp_kineto, node, roots, write

LIMIT = "9,007,199,254,740,992"  # MAX_DURATION_NS = 2^53


# ----------------------------------------------------------------------------- 6. time overflow
@pytest.mark.parametrize("micros", [2**63 - 1, 2**64 - 1, 2**53 // 1000 + 1])
def test_out_of_range_et_durations_are_input_errors_naming_the_node(tmp_path, micros):
    raw_et(tmp_path / "job.0.et", dict(id=7, name="gemm", type=4, duration_micros=micros))
    shown = f"{micros * 1000:,} ns"
    expected = (
        f"tracekit: error: {tmp_path}/job.0.et: rank 0: node 7: duration {shown} is out of range (0 to {LIMIT} ns)"
    )
    for args in (
        ("dump", tmp_path / "job.0.et"),
        ("transform", tmp_path / "job", "-o", tmp_path / "out" / "x", "--scale-compute", "2"),
    ):
        assert one_line_error(run(*args)) == expected
    line = one_line_error(run("replay", tmp_path / "job", "--hw", "dgx-a100"))
    saturated = "more than 2^63-1 ns" if micros * 1000 >= 2**63 - 1 else shown
    assert line == (
        f"tracekit: error: 1 problem(s) found before replay: error: [time-range] {tmp_path}/job.0.et: "
        f"rank 0: node 7: duration {saturated} is out of range (0 to {LIMIT} ns)"
    )
    assert "[time-range]" in run("validate", tmp_path / "job").stdout
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_a_kineto_duration_of_2_64_is_refused_not_wrapped(tmp_path):
    doc = kineto_doc([cpu("aten::mm", 10, 2**64 - 1, rf=1, ext=1)])
    write(tmp_path / "k.json", doc)
    line = one_line_error(
        run("convert", "pytorch", "--kineto", tmp_path / "k.json", "-o", tmp_path / "o" / "j", "--executor", "serial")
    )
    assert line == (
        f"tracekit: error: {tmp_path}/k.json: rank 0: traceEvents[0] ('aten::mm'): dur "
        f"18,446,744,073,709,551,615,000 ns is out of range (0 to {LIMIT} ns)"
    )
    assert not (tmp_path / "o").exists()


def test_tracekit_json_times_are_bounded(tmp_path):
    doc = json.loads(run("dump", ring_job(tmp_path, 1).with_name("job.0.et")).stdout)
    doc["nodes"][1]["duration_ns"] = 2**63 - 1
    (tmp_path / "t.0.json").write_text(json.dumps(doc))
    line = one_line_error(run("load", tmp_path / "t.0.json", "-o", tmp_path / "t.0.et"))
    assert line == (
        f"tracekit: error: {tmp_path}/t.0.json: rank 0: node 2: duration_ns 9,223,372,036,854,775,807 ns "
        f"is out of range (0 to {LIMIT} ns)"
    )
    assert not (tmp_path / "t.0.et").exists()


def test_scaling_out_of_range_names_the_node_and_replay_never_goes_negative(tmp_path):
    prefix = ring_job(tmp_path, 2, duration_ns=10**9)
    line = one_line_error(run("transform", prefix, "-o", tmp_path / "o" / "x", "--scale-comm", "1e308"))
    assert (
        line
        == f"tracekit: error: {prefix}.0.et: rank 0: node 3: 1,048,576 x 1e+308 = inf is out of range (more than 2^63)"
    )
    line = one_line_error(run("replay", prefix, "--hw", "dgx-a100", "--scale-compute", "1e10"))
    assert line == (
        f"tracekit: error: {prefix}.0.et: rank 0: node 2: compute time is out of range (more than {LIMIT} "
        f"ns): measured 1,000,000,000 ns, compute scale 1e+10, measured model"
    )
    res = run("replay", prefix, "--hw", "dgx-a100", "--scale-compute", "1e6", "-o", tmp_path / "r.json")
    assert res.exit_code == 0, res.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["iteration_time_ns"] > 1e15  # 1 s x 1e6 plus the all-reduce, never wrapped negative
    assert not (tmp_path / "o").exists() and leftovers(tmp_path) == []


# ----------------------------------------------------------------------------- 7. ET parent self-loops and cycles
def test_self_parented_et_operators_are_an_error_with_counts(tmp_path):
    doc = et_doc(roots() + [node(10, "aten::mm", 10, 1), node(11, "aten::add", 11, 2), node(12, "aten::relu", 2, 3)])
    write(tmp_path / "et.json", doc)
    line = one_line_error(run("convert", "pytorch", "--et", tmp_path / "et.json", "-o", tmp_path / "o" / "j"))
    assert line == (
        f"tracekit: error: {tmp_path}/et.json: node 10: 2 of 5 operators name themselves as their parent: "
        f"10 ('aten::mm'), 11 ('aten::add'); only the [pytorch|profiler|execution_trace|process] root "
        f"may, so they would be dropped as roots (the ET is corrupt)"
    )
    assert not (tmp_path / "o").exists()


def test_a_parent_cycle_is_an_error_naming_its_ids(tmp_path):
    # 14's parent is 16, whose parent is 15, whose parent is 14: its own grandchild
    doc = et_doc(
        roots()
        + [
            node(10, "ProfilerStep#1", 2, 1),
            node(14, "aten::a", 16, 2),
            node(15, "aten::b", 14, 3),
            node(16, "aten::c", 15, 4),
        ]
    )
    write(tmp_path / "et.json", doc)
    line = one_line_error(run("convert", "pytorch", "--et", tmp_path / "et.json", "-o", tmp_path / "o" / "j"))
    assert line == (
        f"tracekit: error: {tmp_path}/et.json: node 14: parent cycle: 14 -> 16 -> 15 -> 14 (each id's "
        f"parent is the next); the call-stack parents must form a tree, so these 3 operators have no "
        f"root (the ET is corrupt)"
    )


# ----------------------------------------------------------------------------- 8. ET and Kineto of different runs
def _other_run_kineto() -> dict:
    events = [cpu("ProfilerStep#1", 0, 1000, rf=1, ext=1, cat="user_annotation", pid=999)]
    events += [cpu(f"aten::conv{i % 5}", 20 * i, 10, rf=i, ext=i, pid=999) for i in range(2, 40)]
    return kineto_doc(events)


def test_et_and_kineto_of_different_runs_stop_the_conversion(tmp_path):
    write(tmp_path / "et.json", mlp_et())
    write(tmp_path / "k.json", _other_run_kineto())
    args = [
        "convert",
        "pytorch",
        "--et",
        tmp_path / "et.json",
        "--kineto",
        tmp_path / "k.json",
        "-o",
        tmp_path / "o" / "j",
        "--executor",
        "serial",
    ]
    line = one_line_error(run(*args))
    assert line == (
        f"tracekit: error: {tmp_path}/et.json: the ET and the Kineto trace {tmp_path}/k.json look "
        f"like different runs: ET pid 7 is not a Kineto host pid (999); only 20.0% of the ET's operator "
        f"names occur in Kineto; only 1 of 5 ET host ops (20.0%) linked, so their times would come from "
        f"another run; give the files of one run, or --allow-unlinked to convert anyway"
    )
    assert not (tmp_path / "o").exists()
    res = run(*args, "--allow-unlinked")
    assert res.exit_code == 0 and (tmp_path / "o" / "j.0.et").exists()


def test_the_same_run_converts_without_complaint(tmp_path):
    write(tmp_path / "et.json", mlp_et())
    doc = mlp_kineto()
    for e in doc["traceEvents"]:
        e["pid"] = 7
    write(tmp_path / "k.json", doc)
    res = run(
        "convert",
        "pytorch",
        "--et",
        tmp_path / "et.json",
        "--kineto",
        tmp_path / "k.json",
        "-o",
        tmp_path / "o" / "j",
        "--executor",
        "serial",
    )
    assert res.exit_code == 0, res.stderr
    assert "rf_id: 5/5 host ops (100.0%)" in res.stdout


# ----------------------------------------------------------------------------- 9. folding after the rank-count check
def test_identical_rank_files_still_count_as_all_their_ranks(tmp_path, test_data_dir):
    assert (
        run(
            "generate", "micro", "--collective", "all_reduce", "--size", "1MiB", "--ranks", "8", "-o", tmp_path / "ar"
        ).exit_code
        == 0
    )
    assert (
        run(
            "hw",
            "import-astra",
            "--system",
            test_data_dir / "astra" / "system_ring_splits1.json",
            "--network",
            test_data_dir / "astra" / "network_ring_8.yml",
            "-o",
            tmp_path / "a8.toml",
        ).exit_code
        == 0
    )
    folded = run("replay", tmp_path / "ar", "--hw", tmp_path / "a8.toml", "-o", tmp_path / "f.json")
    unfolded = run("replay", tmp_path / "ar", "--hw", tmp_path / "a8.toml", "--no-fold", "-o", tmp_path / "u.json")
    assert folded.exit_code == unfolded.exit_code == 0, folded.stderr
    f, u = (json.loads((tmp_path / n).read_text()) for n in ("f.json", "u.json"))
    assert f["iteration_time_ns"] == u["iteration_time_ns"] == 43025  # the unfolded value; folding must not change it
    spec16 = (tmp_path / "a8.toml").read_text().replace("size = 8", "size = 16")
    (tmp_path / "a16.toml").write_text(spec16)
    line = one_line_error(run("replay", tmp_path / "ar", "--hw", tmp_path / "a16.toml"))
    assert line.endswith(
        "has 16 ranks (16) but the trace set has 8; set fit_to_world_size = true or change the network sizes"
    )


# ----------------------------------------------------------------------------- 10. absurd spec values
@pytest.mark.parametrize("latency", [".nan", ".inf", "-.inf", "1.0e+308"])
def test_import_astra_rejects_non_finite_and_absurd_values(tmp_path, test_data_dir, latency):
    (tmp_path / "net.yml").write_text(
        f"topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50.0 ]\nlatency: [ {latency} ]\n"
    )
    line = one_line_error(
        run(
            "hw",
            "import-astra",
            "--system",
            test_data_dir / "astra" / "system_ring_splits1.json",
            "--network",
            tmp_path / "net.yml",
            "-o",
            tmp_path / "a.toml",
        )
    )
    value = {".nan": "nan", ".inf": "inf", "-.inf": "-inf", "1.0e+308": "1e308"}[latency]
    assert (
        line
        == f"tracekit: error: {tmp_path}/net.yml: key latency[0]: must be a number from 0 to 1e18 (ns), got {value}"
    )
    assert not (tmp_path / "a.toml").exists()


def test_spec_toml_numbers_are_bounded_and_replay_json_is_finite(tmp_path):
    text = run("hw", "show", "dgx-a100", "--toml").stdout
    (tmp_path / "big.toml").write_text(text.replace("mem_bandwidth_gbps = 2039.0", "mem_bandwidth_gbps = 1e300"))
    line = one_line_error(run("hw", "show", tmp_path / "big.toml"))
    assert line == (
        f"tracekit: error: {tmp_path}/big.toml: key device.mem_bandwidth_gbps: must be at most 1e18 in "
        f"magnitude, got 1e300"
    )
    (tmp_path / "edge.toml").write_text(text.replace("latency_ns = ", "latency_ns = 1e18 #"))
    prefix = ring_job(tmp_path, 2)
    assert run("replay", prefix, "--hw", tmp_path / "edge.toml", "-o", tmp_path / "r.json").exit_code == 0
    body = (tmp_path / "r.json").read_text()
    assert "NaN" not in body and "Infinity" not in body
    assert math.isfinite(json.loads(body)["iteration_time_ns"])


# ----------------------------------------------------------------------------- node types that do not fit the columns
def test_out_of_range_node_types_are_reported_not_wrapped(tmp_path):
    from _hardkit import raw_et

    raw_et(tmp_path / "ty.0.et", dict(id=1, name="a", type=70000, duration_micros=5))  # 70000 wrapped to 4464 before
    line = one_line_error(run("replay", tmp_path / "ty.0.et", "--hw", "dgx-a100"))
    assert line == (
        f"tracekit: error: 1 problem(s) found before replay: error: [node-type] {tmp_path}/ty.0.et: rank 0: "
        f"node 1: unknown node type 32767 or more"
    )
    doc = json.loads(run("dump", ring_job(tmp_path, 1).with_name("job.0.et")).stdout)
    doc["nodes"][1]["type"] = 2**63 - 1
    (tmp_path / "t.0.json").write_text(json.dumps(doc))
    assert one_line_error(run("info", tmp_path / "t.0.json")) == (
        f"tracekit: error: {tmp_path}/t.0.json: node 2: node type 9223372036854775807 is out of range (0 to 32767)"
    )
