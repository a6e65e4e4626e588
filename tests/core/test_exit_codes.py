"""Exit codes (docs/cli.md): 1 bad input, 2 usage (one line, click's code), 3 validate findings, 0 success."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.io import write_trace
from tracekit.model import ExecutionTrace, Node

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--bogus"], "tracekit: error: No such option '--bogus'. Did you mean '--verbose'? (see 'tracekit --help')"),
        (["nosuch"], "tracekit: error: No such command 'nosuch' (see 'tracekit --help')"),
        (["validate"], "tracekit: error: Missing argument 'TRACES...' (see 'tracekit validate --help')"),
        (
            ["validate", "x", "--bogus"],
            "tracekit: error: No such option '--bogus'. Did you mean '--comm-groups'? (see 'tracekit validate --help')",
        ),
        (
            ["bench-coll", "--hw", "dgx-a100", "--ranks", "x"],
            "tracekit: error: Invalid value for '--ranks': expected comma-separated integers, got 'x' "
            "(see 'tracekit bench-coll --help')",
        ),
        (
            ["convert", "text", "a.txt", "--ranks", "two", "-o", "x"],
            "tracekit: error: Invalid value for '--ranks': 'two' is not a valid integer "
            "(see 'tracekit convert text --help')",
        ),
    ],
)
def test_a_usage_error_is_one_line_and_exit_2(args, message):
    res = CliRunner().invoke(cli, args, prog_name="tracekit")
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr == message + "\n"


def test_a_bare_group_still_shows_its_help():
    res = CliRunner().invoke(cli, ["convert"], prog_name="tracekit")
    assert res.exit_code == 2 and "Usage: tracekit convert" in res.output and "pytorch" in res.output


def test_bad_input_exits_1_findings_exit_3_valid_exits_0(tmp_path, samples_dir):
    missing = CliRunner().invoke(cli, ["validate", str(tmp_path / "none")])
    assert missing.exit_code == 1 and missing.stderr.startswith("tracekit: error: ")
    write_trace(ExecutionTrace([Node(id=1), Node(id=2, data_deps=[7])]), tmp_path / "t.0.et")
    found = CliRunner().invoke(cli, ["validate", str(tmp_path / "t")])
    assert found.exit_code == 3
    assert found.stdout.splitlines() == [
        f"error: [dangling-dep] {tmp_path}/t.0.et: rank 0: node 2: data dep 7 does not exist",
        "FAILED (1 errors): 1 ranks, 2 nodes, 0 warnings",
    ]
    ok = CliRunner().invoke(cli, ["validate", str(samples_dir / "chakra" / "all_reduce")])
    assert ok.exit_code == 0 and ok.stdout.startswith("OK: ")


def test_validate_help_and_the_docs_state_the_codes():
    text = " ".join(CliRunner().invoke(cli, ["validate", "--help"]).stdout.split())
    assert (
        "0 when the traces are valid (warnings allowed), 3 when they have errors, 1 when a file cannot be read" in text
        and "2 for a wrong command line" in text
    )
    rows = dict(re.findall(r"^\| (\d+(?: \+ N)?) \| (.+) \|$", (ROOT / "docs" / "cli.md").read_text(), flags=re.M))
    assert set(rows) == {"0", "1", "2", "3", "128 + N"} and rows["3"].startswith("`validate` only")


def test_the_process_exit_code_of_a_usage_error_is_2():
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit.cli._main", "info", "--bogus"], capture_output=True, text=True, timeout=60
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        "tracekit: error: No such option '--bogus'. Did you mean '--comm-groups'? (see 'tracekit info --help')\n"
    )
