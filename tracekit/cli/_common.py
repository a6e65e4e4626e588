"""Shared pieces of the CLI: state, error rendering, the stderr console, progress."""

from __future__ import annotations

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


def path_span(paths) -> str:
    """``first ... last`` of a list of written paths (just the path when there is one)."""
    paths = [str(p) for p in paths]
    if not paths:
        return "(none)"
    return paths[0] if len(paths) == 1 else f"{paths[0]} ... {paths[-1]}"


def state() -> State:
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_object(State) if ctx is not None else None
    return obj if obj is not None else State()


PIPE_WIDTH = 120  # columns when output is not a terminal (rich would use 80 and wrap lines people grep)


def _console(stderr: bool):
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=PIPE_WIDTH)
    return console


def err_console():
    """A rich console on stderr (progress, tables meant for people)."""
    return _console(stderr=True)


def out_console():
    """A rich console on stdout (data meant for people)."""
    return _console(stderr=False)


def progress(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate ``items`` with a rich progress bar on stderr (none with ``-q``)."""
    if state().quiet:
        yield from items
        return
    from rich.progress import track

    yield from track(items, description=description, total=total, console=err_console(), transient=True)


def render_error(exc: BaseException) -> str:
    """The one line printed for an input error."""
    if isinstance(exc, OSError) and not isinstance(exc, TracekitError):
        name = getattr(exc, "filename", None)
        return f"tracekit: error: {name + ': ' if name else ''}{exc.strerror or exc}"
    return f"tracekit: error: {exc}"


class TracekitGroup(click.Group):
    """A click group that renders TracekitError (and OSError) as one stderr line, exit code 2.

    With the global ``--debug`` flag the exception propagates (traceback).
    Because the rendering lives in the group, ``click.testing.CliRunner``
    sees exactly what a user sees.
    """

    def invoke(self, ctx: click.Context) -> Any:
        from tracekit.io import protect_inputs

        try:
            with protect_inputs():
                return super().invoke(ctx)
        except (TracekitError, OSError) as exc:
            obj = ctx.find_object(State)
            if obj is not None and obj.debug:
                raise
            click.echo(render_error(exc), err=True)
            ctx.exit(EXIT_INPUT_ERROR)


def run_cli(group: click.Group, argv: list[str] | None = None) -> None:
    """Run ``group`` as the console script does (exits the process)."""
    group.main(args=argv, prog_name="tracekit", standalone_mode=True)


def invoke_for_test(group: click.Group, args: list[str]) -> Any:
    """Run the CLI inside a CliRunner adapter with the console script's behaviour (kept for older tests)."""
    return run_cli(group, args)
