"""Issue 32, kind 7: the first run is fast and says what it compiles; the suite passes with SIGINT ignored.

The trial's fresh clone took 8 min for `make demo` (numba warm-up 232 s + ahead-of-time build 148 s, both before
the demo, silent for minutes), and `make test` failed its Ctrl-C test whenever it was started with SIGINT ignored
(`nohup make test`, `make test &`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_runs_the_demo_first_and_the_ahead_of_time_build_after_it_in_the_background(tmp_path):
    # `make -n` prints the recipe without running it; the install stamp exists in a developer's checkout
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", "demo"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    lines = [line for line in out.splitlines() if "tracekit.cli.demo" in line or "build_aot" in line]
    assert lines == [
        ".venv/bin/python -m tracekit.cli.demo --out demo_out",
        ".venv/bin/python tools/build_aot.py --background",
    ]
    install = (ROOT / "Makefile").read_text().split("$(STAMP): pyproject.toml", 1)[1].split("\n\n", 1)[0]
    assert "build_aot" not in install  # the install step compiles nothing


def test_the_demo_says_what_it_compiles_on_a_first_run(tmp_path, monkeypatch, capsys):
    from tracekit.cli import demo

    fresh = tmp_path / "clone"
    (fresh / "tracekit" / "__pycache__").mkdir(parents=True)
    monkeypatch.setattr(demo, "ROOT", fresh)
    demo._say_what_compiles()
    assert capsys.readouterr().out.startswith("first run on this machine: numba compiles tracekit's kernels")
    (fresh / "tracekit" / "__pycache__" / "_framing.frame_offsets-40.py311.nbi").touch()  # numba's cache index
    demo._say_what_compiles()
    assert capsys.readouterr().out == ""


def _sigint_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_the_ctrl_c_test_passes_when_the_suite_starts_with_sigint_ignored():
    # what `nohup make test` and `make test &` do: SIGINT is ignored in pytest and every process it starts
    test = "tests/hardening/test_trial_leftovers_ux.py::" + (
        "test_ctrl_c_mid_run_is_one_error_line_and_exit_1_and_after_the_command_finished_changes_nothing"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", test],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=_sigint_ignored,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "1 passed" in proc.stdout
