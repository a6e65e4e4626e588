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


def test_replay_draws_its_stages_on_a_terminal(terminal):
    """replay: one bar per stage, with counts (ranks read of the job, events simulated), on stderr only."""
    r = CliRunner().invoke(cli, ["replay", JOB, "--hw", "dgx-h100"])
    assert r.exit_code == 0, r.output
    drawn = terminal.getvalue()
    assert "replay: reading and digesting ranks" in drawn and "/4" in drawn  # k of the job's 4 ranks
    assert "replay: simulating events" in drawn
    assert "replay:" not in r.stdout and r.stdout.startswith("iteration time")
    terminal.seek(0)
    terminal.truncate(0)
    r = CliRunner().invoke(cli, ["-q", "replay", JOB, "--hw", "dgx-h100"])
    assert r.exit_code == 0 and "replay:" not in terminal.getvalue()


def test_replay_draws_no_bar_when_stderr_is_not_a_terminal():
    r = CliRunner().invoke(cli, ["replay", JOB, "--hw", "dgx-h100"])
    assert r.exit_code == 0 and "replay:" not in r.stderr and "iteration time" in r.stdout


def test_a_new_stage_replaces_the_bar(terminal):
    with common.progress_callback("stage one") as update:
        update(1, 4)
        update(0, None, "stage two")
        update(3, None)
    drawn = terminal.getvalue()
    assert "stage one" in drawn and "stage two" in drawn and "3/?" in drawn  # an unknown total: the count done
