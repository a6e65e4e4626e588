"""Progress bars (issue 17.5): drawn on a terminal for info and validate, off with -q and when stderr is a pipe."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

import tracekit.cli._common as common
from tracekit.cli import cli

JOB = str(Path(__file__).resolve().parents[2] / "sample_traces" / "chakra" / "all_reduce")


@pytest.fixture
def terminal(monkeypatch):
    """stderr as a 100-column terminal whose output is kept."""
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100)
    monkeypatch.setattr(common, "err_console", lambda: console)
    return buffer


@pytest.mark.parametrize(("command", "label"), [("info", "reading ranks"), ("validate", "checking ranks")])
def test_info_and_validate_draw_a_bar_on_a_terminal(terminal, command, label):
    r = CliRunner().invoke(cli, [command, JOB])
    assert r.exit_code == 0, r.output
    drawn = terminal.getvalue()
    assert label in drawn and "4/4" not in r.stdout  # the bar goes to stderr only
    terminal.seek(0)
    terminal.truncate(0)
    r = CliRunner().invoke(cli, ["-q", command, JOB])
    assert r.exit_code == 0 and label not in terminal.getvalue()


def test_no_bar_when_stderr_is_not_a_terminal():
    r = CliRunner().invoke(cli, ["validate", JOB])
    assert r.exit_code == 0
    assert "checking ranks" not in r.stderr
    assert r.stdout.startswith("OK: 4 ranks")
