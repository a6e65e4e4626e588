"""The ``tracekit`` command line.

Commands are thin: parse options, call one library function, render the
result (data to stdout, progress and logs to stderr through rich).  Each area
owns a submodule here that defines its click commands; heavy imports happen
inside command functions so ``tracekit --help`` stays fast.

Errors: a :class:`tracekit.errors.TracekitError` is printed as one line on
stderr and the process exits with code 1 (2 for usage errors, 3 for
`validate` findings; docs/cli.md); ``--debug`` re-raises it so the
traceback shows.
"""

from __future__ import annotations

import logging
import sys

import click

from tracekit.cli._common import CONTEXT_SETTINGS, LogLineFormatter, State
from tracekit.cli._options import RootGroup

# Submodules that define commands, in the order they are listed by --help.
_COMMAND_MODULES = (
    "tracekit.cli.core",
    "tracekit.cli.convert",
    "tracekit.cli.generate",
    "tracekit.cli.transform",
    "tracekit.cli.replay",
    "tracekit.cli.timeline",
    "tracekit.cli.analyze",
    "tracekit.cli.check_replay",
    "tracekit.cli.report",
    "tracekit.cli.sweep",
    "tracekit.cli.plan",
    "tracekit.cli.hw",
    "tracekit.cli.export",
    "tracekit.cli.classes",
    "tracekit.cli.bench",
)


@click.group(cls=RootGroup, context_settings=CONTEXT_SETTINGS)
@click.option("--debug", is_flag=True, help="Show the full traceback on errors.")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv for debug).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr; no progress bars.")
@click.version_option(package_name="tracekit")
@click.pass_context
def cli(ctx: click.Context, debug: bool, verbose: int, quiet: bool) -> None:
    """Convert, rewrite and replay execution traces of distributed ML training.

    The global options (-q, -v, --debug) may also follow the subcommand.
    Every command that produces data takes --json (machine output on stdout).

    \b
    Example:
      tracekit info sample_traces/chakra/all_reduce.0.et
    """
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogLineFormatter())  # a warning reads "tracekit: warning: ...", as the CLI's own do
    logging.basicConfig(level=level, handlers=[handler])
    ctx.obj = State(debug=debug, quiet=quiet, verbose=verbose)


def _register() -> None:
    from tracekit.cli._groups import collect

    collect(cli, _COMMAND_MODULES)  # an area whose CLI module is not written yet is skipped


_register()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    from tracekit.cli._common import run_cli

    run_cli(cli, argv)
