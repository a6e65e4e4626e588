"""Shared pieces of the CLI: state, error rendering, the stderr console, progress."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, TypeVar

import click

from tracekit.errors import TracekitError

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
EXIT_INPUT_ERROR = 2

T = TypeVar("T")


@dataclass
class State:
    """Global options, available to every command as ``ctx.obj``."""

    debug: bool = False
    quiet: bool = False
    verbose: int = 0


def state() -> State:
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_object(State) if ctx is not None else None
    return obj if obj is not None else State()


def err_console():
    """A rich console on stderr (progress, tables meant for people)."""
    from rich.console import Console

    return Console(stderr=True)


def out_console():
    """A rich console on stdout (data meant for people)."""
    from rich.console import Console

    return Console()


def progress(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate ``items`` with a rich progress bar on stderr (none with ``-q``)."""
    if state().quiet:
        yield from items
        return
    from rich.progress import track

    yield from track(items, description=description, total=total, console=err_console(), transient=True)


def run_cli(group: click.Group, argv: list[str] | None = None) -> None:
    """Run ``group``; render TracekitError as one stderr line with exit code 2."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        group.main(args=argv, prog_name="tracekit", standalone_mode=False)
    except TracekitError as exc:
        if debug:
            raise
        click.echo(f"tracekit: error: {exc}", err=True)
        sys.exit(EXIT_INPUT_ERROR)
    except click.exceptions.Abort:
        click.echo("tracekit: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except OSError as exc:
        if debug:
            raise
        name = getattr(exc, "filename", None)
        where = f"{name}: " if name else ""
        click.echo(f"tracekit: error: {where}{exc.strerror or exc}", err=True)
        sys.exit(EXIT_INPUT_ERROR)


def invoke_for_test(group: click.Group, args: list[str]) -> Any:
    """Helper for CliRunner tests: run with the same error rendering as main()."""
    return run_cli(group, args)
