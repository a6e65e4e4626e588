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
    missing = [f"{f}::{n}" for f, n in refs if not (TESTS.parent / f).is_file() or n not in _test_names(TESTS.parent / f)]
    assert missing == []


@pytest.mark.parametrize("kind", ["security", "unbounded", "crash", "data loss", "silently wrong", "unclear"])
def test_the_fault_map_lists_every_kind(kind):
    rows = [line for line in MAP.read_text().splitlines() if line.startswith("| ") and f"| {kind} |" in line]
    assert rows, kind
