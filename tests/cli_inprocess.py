"""Run the CLI in this process (click's CliRunner) and get a ``subprocess.CompletedProcess``.

For tests of what a command prints and returns; they need no new interpreter (about 2 s each on a loaded
2-core machine). Tests of process-level behaviour (signals, closed streams, --debug tracebacks, a fresh
interpreter) keep ``subprocess``. An exception other than SystemExit is re-raised: a bug is never mistaken
for an exit code.
"""

from __future__ import annotations

import subprocess

from click.testing import CliRunner

from tracekit.cli import cli


def run(*args: object) -> subprocess.CompletedProcess:
    """``tracekit ARGS...`` in-process: returncode, stdout and stderr apart, as ``subprocess.run`` gives them."""
    argv = [str(a) for a in args]
    res = CliRunner().invoke(cli, argv, prog_name="tracekit")
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return subprocess.CompletedProcess(["tracekit", *argv], res.exit_code, res.stdout, res.stderr)
