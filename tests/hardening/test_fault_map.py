"""Issue 32's fault map: tests/hardening/REPRODUCTIONS.md names, for every reproduction of the issue text, the
test that reproduces it; this file holds the reproductions no other test had, and the check that keeps the map
honest (every ``file::name`` it names is a test function of that file)."""

from __future__ import annotations

import ast
import io
import json
import re
from pathlib import Path

import pytest
from _hardkit import one_line_error, run
from rich.console import Console

SAMPLES = Path(__file__).parents[2] / "sample_traces"
TESTS = Path(__file__).parents[1]
MAP = Path(__file__).with_name("REPRODUCTIONS.md")


def test_an_et_node_id_of_minus_3_is_one_line_naming_file_and_op(tmp_path):
    # the trial's ET node id -3 was an OverflowError traceback (node ids go into a uint64 column)
    doc = json.loads((SAMPLES / "pytorch" / "single" / "et_rank0.json").read_text())
    op = doc["nodes"][5]
    old, op["id"] = op["id"], -3
    for node in doc["nodes"]:  # the children follow it, so the id alone is wrong
        if node.get("ctrl_deps") == old:
            node["ctrl_deps"] = -3
    et = tmp_path / "et_rank0.json"
    et.write_text(json.dumps(doc))
    line = one_line_error(run("convert", "pytorch", "--et", et, "-o", tmp_path / "out" / "job"))
    assert line == f"tracekit: error: {et}: node id -3 of 'aten::expand' is not a Chakra node id (0 to 2^64-1)"
    assert not (tmp_path / "out").exists()


def test_a_5_000_000_rank_class_manifest_is_one_line_in_every_command(tmp_path):
    # the trial's 5,000,000-rank manifest segfaulted five commands under a memory limit
    prefix = tmp_path / "cl"
    gen = run(
        *("generate", "llm", "--model", "gpt3-1.3b", "--layers", "2", "--tp", "2", "--global-batch", "4"),
        *("--classes", "-o", prefix),
    )
    assert gen.exit_code == 0, gen.stderr
    manifest = tmp_path / "cl.classes.json"
    doc = json.loads(manifest.read_text())
    doc["world_size"] = 5_000_000
    manifest.write_text(json.dumps(doc))
    for args in (
        ("info", manifest),
        ("validate", manifest),
        ("replay", manifest, "--hw", "dgx-a100"),
        ("expand", manifest, "-o", tmp_path / "o" / "x"),
        ("transform", manifest, "--dp", "2", "-o", tmp_path / "o" / "y"),
    ):
        line = one_line_error(run(*args))
        assert line == (
            f"tracekit: error: {manifest}: bad rank-class manifest: world_size 5,000,000 is out of range "
            "(1 to 1,048,576)"
        ), args
    assert not (tmp_path / "o").exists()


def test_transform_dp_draws_a_bar_over_the_new_ranks_on_a_terminal(tmp_path, monkeypatch):
    # the trial rescaled to 1,024 ranks for 254 s with nothing shown
    import tracekit.cli._common as common

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100)
    monkeypatch.setattr(common, "err_console", lambda: console)
    res = run("transform", SAMPLES / "chakra" / "all_reduce", "--dp", "8", "-o", tmp_path / "dp")
    assert res.exit_code == 0, res.stderr
    assert "mapping groups to new ranks" in buffer.getvalue()


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_test_the_fault_map_names_exists():
    refs = re.findall(r"`(tests/[\w/]+\.py)::(test_\w+)`", MAP.read_text())
    assert len(refs) >= 40  # one per reproduction of the issue text at least
    missing = [
        f"{f}::{n}" for f, n in refs if not (TESTS.parent / f).is_file() or n not in _test_names(TESTS.parent / f)
    ]
    assert missing == []


@pytest.mark.parametrize("kind", ["security", "unbounded", "crash", "data loss", "silently wrong", "unclear"])
def test_the_fault_map_lists_every_kind(kind):
    rows = [line for line in MAP.read_text().splitlines() if line.startswith("| ") and f"| {kind} |" in line]
    assert rows, kind


def test_convert_text_with_many_passes_stops_at_sigterm_and_writes_nothing(tmp_path):
    # the trial's `convert text --passes` ran on through SIGTERM (the --passes bound itself:
    # test_input_bounds.py::test_a_count_option_beyond_the_node_budget_is_refused_before_any_work)
    import signal
    import subprocess
    import sys
    import time

    text = SAMPLES / "text" / "Resnet50_DataParallel.txt"
    cmd = [
        sys.executable,
        "-c",
        "from tracekit.cli import main; main()",
        "convert",
        "text",
        str(text),
        "--ranks",
        "2",
        "--passes",
        "150000",
    ]
    proc = subprocess.Popen([*cmd, "-o", str(tmp_path / "o")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(2)  # well inside the build (it runs for minutes)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=20)
    assert proc.returncode in (143, -signal.SIGTERM)
    assert list(tmp_path.iterdir()) == []


def test_readme_and_export_help_say_only_the_export_folder_runs_in_astra_sim_as_written():
    # the README said everything tracekit writes runs in ASTRA-sim as it is; a converted capture finished no rank
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    assert "What runs in ASTRA-sim as written is the folder `tracekit export astra` writes" in readme
    assert "Everything tracekit writes runs in ASTRA-sim" not in readme
    help_text = " ".join(run("export", "astra", "--help").stdout.split())
    assert "The folder this writes is what runs in ASTRA-sim as written" in help_text


def test_analyze_prints_an_event_name_with_escapes_literally(tmp_path):
    # the trial's escape sequences in names reached the terminal raw from analyze too
    doc = json.loads((SAMPLES / "pytorch" / "single" / "kineto_rank0.json").read_text())
    for event in doc["traceEvents"]:
        if event.get("ph") == "X" and event.get("cat") == "cpu_op":
            event["name"] = "aten::mm\x1b[2J\x1b]0;pwned\x07"
    kineto = tmp_path / "k.json"
    kineto.write_text(json.dumps(doc))
    res = run("analyze", kineto)
    assert res.exit_code == 0, res.stderr
    assert "\x1b" not in res.stdout + res.stderr and "\x07" not in res.stdout + res.stderr
    assert "aten::mm\\x1b[2J\\x1b]0;pwned" in res.stdout


def test_no_check_does_not_hide_a_collective_whose_type_differs_across_members(tmp_path):
    # test_trial32_findings.py covers a differing size; the trial named the type too
    from _hardkit import ring_job

    from tracekit.io import read_traceset
    from tracekit.io import write_traceset
    from tracekit.model import ExecutionTrace

    ts = read_traceset(ring_job(tmp_path))
    nodes = [n.with_attr("comm_type", 2) if n.id == 3 else n for n in ts[1].nodes]  # 2: ALL_GATHER in Chakra
    write_traceset(ts.with_traces({0: ts[0], 1: ExecutionTrace(nodes, ts[1].metadata, rank=1)}), tmp_path / "bad")
    line = one_line_error(run("replay", tmp_path / "bad", "--hw", "dgx-a100", "--no-check", "-o", tmp_path / "r.json"))
    assert line == (
        f"tracekit: error: {tmp_path}/bad.1.et: rank 1: collective 0 of process group '0' differs across its members: "
        "rank 0 node 3 is ALL_REDUCE of 1,048,576 B, rank 1 node 3 is ALL_GATHER of 1,048,576 B; every member "
        "must issue the same collective"
    )
    assert not (tmp_path / "r.json").exists()
