"""Shared pieces of the CLI: state, error rendering, the stderr console, progress."""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, TypeVar

import click

from tracekit.errors import TracekitError
from tracekit.fmt import literal

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
# Exit codes (docs/cli.md "Exit codes"): click's convention for usage, one code for bad input, one for findings.
EXIT_INPUT_ERROR = 1  #: bad input, unreadable or unwritable files, failed checks (a TracekitError or OSError)
EXIT_USAGE = 2  #: the command line itself is wrong (unknown option, missing argument, bad value): click's code
EXIT_FINDINGS = 3  #: `validate` read every file and found errors in the traces
# SIGTERM/SIGHUP end the process with 128 + the signal number (143, 129); Ctrl-C before the command finished is one
# error line and 1; a Ctrl-C after it finished (its output written, its last line printed) changes nothing.
INTERRUPTED = (
    "interrupted (Ctrl-C) before the command finished; its temporary files were removed, no output is half-written"
)

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
    """The global-flag :class:`State` of the running command (defaults when called outside a click context)."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_object(State) if ctx is not None else None
    return obj if obj is not None else State()


PIPE_WIDTH = 120  # columns when output is not a terminal (rich would use 80 and wrap lines people grep)


def _console(stderr: bool) -> "Console":
    # Names printed come from files (node, process group, op and file names): no markup, no emoji codes,
    # so "[/bogus]" or "[link=...]" in a name is printed literally (styles are given as rich Text/style=).
    console = _literal_console_class()(stderr=stderr, markup=False, emoji=False)
    if not console.is_terminal:
        console = _pipe_console_class()(stderr=stderr, width=PIPE_WIDTH, markup=False, emoji=False)
    return console


@functools.lru_cache(maxsize=None)
def _literal_console_class() -> type:
    """A rich Console that prints every string literally (:func:`tracekit.fmt.literal`): a control character or
    escape sequence in a name read from a file is shown as ``\x1b``, never sent to the terminal.

    A ``str`` printed or put in a table is one line (a newline in it shows as ``\n``); what reaches the output
    after layout (rich Text included) has every control character but rich's own line breaks escaped. Rich's own
    styles and cursor controls (progress bars) are added after this and pass unchanged.
    """
    from rich.console import Console
    from rich.segment import Segment

    from tracekit.fmt import literal

    class LiteralConsole(Console):
        def render_str(self, text: str, **kwargs: Any) -> Any:
            return super().render_str(literal(text), **kwargs)

        def _render_buffer(self, buffer: Iterable[Segment]) -> str:
            return super()._render_buffer(
                seg if seg.control else Segment(literal(seg.text, keep_newlines=True), seg.style) for seg in buffer
            )

    return LiteralConsole


@functools.lru_cache(maxsize=None)
def _pipe_console_class() -> type:
    """A rich Console for a pipe or file: message lines (str, Text) printed whole, never wrapped, so grep finds
    them; tables and other renderables keep their 120-column layout."""
    from rich.text import Text

    class PipeConsole(_literal_console_class()):  # type: ignore[misc]
        def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
            if "soft_wrap" not in kwargs and all(isinstance(o, (str, Text)) for o in objects):
                kwargs["soft_wrap"] = True
            super().print(*objects, **kwargs)

    return PipeConsole


def err_console() -> "Console":
    """A rich console on stderr (progress, tables meant for people)."""
    return _console(stderr=True)


def out_console() -> "Console":
    """A rich console on stdout (data meant for people)."""
    return _console(stderr=False)


def say(text: str) -> None:
    """One message line for people on stderr (none with ``-q``), so stdout keeps only data: ``wrote PATH`` after a
    command writes a file is the convention of every writing command (docs/cli.md).  The line is never wrapped
    (``soft_wrap``): a path in it stays whole for a terminal to wrap and for people to copy."""
    if not state().quiet:
        err_console().print(text, markup=False, highlight=False, soft_wrap=True)


def echo_literal(text: str, *, err: bool = False) -> None:
    """``text`` as one plain line on stdout (``err``: stderr), control characters escaped (:func:`literal`): for
    lines that hold names read from files and are printed without a console (validate's findings, warnings)."""
    click.echo(literal(text), err=err)


def show_progress() -> bool:
    """Whether progress bars are drawn: stderr is a terminal and ``-q`` was not given."""
    return not state().quiet and err_console().is_terminal


def progress(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate ``items`` with a rich progress bar on stderr (none with ``-q`` or when stderr is not a terminal)."""
    if not show_progress():
        yield from items
        return
    from rich.progress import track

    yield from track(items, description=description, total=total, console=err_console(), transient=True)


@contextlib.contextmanager
def progress_callback(description: str) -> Iterator[Callable[..., None] | None]:
    """A ``progress(done, total, description=None)`` callback drawing a rich bar on stderr.

    None with ``-q`` or when stderr is not a terminal.  ``total`` None draws a pulsing bar with the count
    done; a new ``description`` starts a new stage (a fresh bar in place of the previous one).
    """
    if not show_progress():
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), _count_column(), TimeElapsedColumn())
    with Progress(*columns, console=err_console(), transient=True) as bar:
        task, current = bar.add_task(description, total=None), description

        def update(done: int, total: int | None, description: str | None = None) -> None:
            """Move the bar to ``done`` of ``total`` units (``description``: this stage's, when it changes)."""
            nonlocal task, current
            if description is not None and description != current:
                bar.remove_task(task)
                task, current = bar.add_task(description, total=total), description
                bar.update(task, completed=done)
                bar.refresh()  # every stage is drawn, however short
                return
            bar.update(task, completed=done, total=total)

        yield update


def _count_column():
    """``done/total`` (``done/?`` when the total is unknown; nothing before the first unit of such a stage)."""
    from rich.progress import MofNCompleteColumn
    from rich.text import Text

    class CountColumn(MofNCompleteColumn):
        def render(self, task):  # type: ignore[no-untyped-def]
            if task.total is None and not task.completed:
                return Text("")
            return super().render(task)

    return CountColumn()


def hold_output_prefix(prefix: str | None) -> None:
    """Hold the output lock of ``prefix`` from now until the command ends (:func:`tracekit.io.hold_prefix`), so a
    second command writing the same prefix is refused at its start, not after both have read their inputs.

    Raises:
        TracekitError: another tracekit command is writing ``prefix``.
    """
    if prefix is None:
        return
    from tracekit.io import hold_prefix

    click.get_current_context().with_resource(hold_prefix(prefix))


def warn_duplicate_ids(traces: Iterable[Any]) -> int:
    """Say on stderr (unless ``-q``) which traces hold duplicate node ids; returns how many traces do.

    A dependency on a duplicated id is ambiguous, so a rewrite of such a trace may tie nodes to the wrong
    one: the line names the file, rank and ids, and points to ``tracekit validate``.
    """
    import numpy as np

    flagged = 0
    for trace in traces:
        ids = trace.columns().ids
        if len(ids) < 2 or bool(np.all(ids[1:] > ids[:-1])):  # ascending ids: none repeats, no graph needed
            continue
        dup = trace.graph().duplicate_ids
        if not len(dup):
            continue
        flagged += 1
        if state().quiet:
            continue
        ids = ", ".join(str(int(i)) for i in dup[:5]) + (f" and {len(dup) - 5:,} more" if len(dup) > 5 else "")
        where = f"{trace.path}: " if trace.path else ""
        echo_literal(
            f"tracekit: warning: {where}rank {trace.rank}: duplicate node id(s) {ids}; a dependency on them is "
            f"ambiguous, so the output may link the wrong node (`tracekit validate` lists every problem)",
            err=True,
        )
    return flagged


def render_error(exc: BaseException) -> str:
    """The one line printed for an input error: ``tracekit: error: <where>: <message>`` (an OSError: its file name and reason)."""
    if isinstance(exc, OSError) and not isinstance(exc, TracekitError):
        name = getattr(exc, "filename", None)
        text = f"{name + ': ' if name else ''}{exc.strerror or exc}"
    else:
        text = str(exc)
    hint = _not_a_trace_hint(exc)
    if hint:
        text = f"{text}; {hint}"
    # one line whatever the message holds (a parser's own multi-line report, e.g. PyYAML's context and caret)
    return "tracekit: error: " + literal(" ".join(part.strip() for part in text.splitlines() if part.strip()))


def _not_a_trace_hint(exc: BaseException) -> str:
    """For an `.et` file that failed to decode at a byte offset: "not a Chakra execution trace?" when the file
    does not start like one (random bytes, another format), so the one line says more than where decoding
    stopped (:func:`tracekit.wire.framing.not_a_trace_hint`)."""
    from tracekit.errors import TraceFormatError

    path = getattr(exc, "path", None)
    if not isinstance(exc, TraceFormatError) or exc.byte_offset is None or not path:
        return ""
    if not str(path).endswith((".et", ".et.gz")):
        return ""
    from tracekit.wire.framing import not_a_trace_hint

    return not_a_trace_hint(path)


class LogLineFormatter(logging.Formatter):
    """Log records as stderr lines: a warning or error as ``tracekit: warning: MESSAGE``, the form of the
    CLI's own warnings and errors; with ``-v``/``-vv``, info and debug records as ``LEVEL logger: MESSAGE``."""

    def format(self, record: logging.LogRecord) -> str:
        """The record's one line (see the class doc)."""
        if record.levelno >= logging.WARNING:
            return f"tracekit: {record.levelname.lower()}: {literal(record.getMessage())}"
        return f"{record.levelname} {record.name}: {literal(record.getMessage())}"


class OneLineUsageError(click.UsageError):
    """A click usage error shown as one ``tracekit: error: ...`` line (click prints usage, hint and error)."""

    def __init__(self, exc: click.ClickException, command_path: str | None = None) -> None:
        super().__init__(exc.format_message(), ctx=getattr(exc, "ctx", None))
        # click's option parser raises some errors without a context ("Option '--hw' requires an argument"):
        # the group that ran the subcommand names it instead
        self.command_path = self.ctx.command_path if self.ctx is not None else command_path
        self.exit_code = exc.exit_code  # type: ignore[misc]  # click declares a ClassVar; keep the wrapped code
        refused = isinstance(exc, click.BadParameter) and not isinstance(exc, click.MissingParameter)
        if refused and isinstance(getattr(getattr(exc, "param", None), "type", None), click.Path):
            # the path parsed; the file system refused it (missing, a directory): bad input, as for TRACES;
            # a path option or argument not given at all stays a usage error
            self.exit_code = EXIT_INPUT_ERROR  # type: ignore[misc]

    def show(self, file: Any = None) -> None:
        """Print the one line on stderr: the message and where to read the usage."""
        message = " ".join(self.format_message().split()).rstrip(".")
        hint = f" (see '{self.command_path} --help')" if self.command_path else ""
        click.echo(f"tracekit: error: {message}{hint}", err=True)


def _one_line(exc: click.ClickException, ctx: click.Context | None = None) -> click.ClickException:
    # NoArgsIsHelpError (a bare group such as `tracekit convert`) shows the group's help, which is what is wanted
    if isinstance(exc, (OneLineUsageError, click.exceptions.NoArgsIsHelpError)):
        return exc
    sub = ctx.invoked_subcommand if ctx is not None else None
    return OneLineUsageError(exc, f"{ctx.command_path} {sub}" if ctx is not None and sub else None)


class SubcommandGroup(click.Group):
    """A nested group (``tracekit convert``, ``hw``, ...): a usage error of its subcommand names the whole
    command path in its one line (``see 'tracekit convert pytorch --help'``); the root
    :class:`TracekitGroup` renders it."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; a usage error becomes a :class:`OneLineUsageError` naming the subcommand."""
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            raise _one_line(exc, ctx) from exc


class TracekitGroup(click.Group):
    """A click group that renders every error as one stderr line.

    A TracekitError or OSError exits with :data:`EXIT_INPUT_ERROR` (1), a usage
    error with :data:`EXIT_USAGE` (2).  With the global ``--debug`` flag an
    input error propagates (traceback).  Because the rendering lives in the
    group, ``click.testing.CliRunner`` sees exactly what a user sees.
    """

    def make_context(
        self,
        info_name: str | None,
        args: list[str],  # type: ignore[override]
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        """Click's context, with a usage error of the group's own options raised as one line."""
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.ClickException as exc:
            raise _one_line(exc) from exc

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; a TracekitError or OSError becomes one stderr line and exit 1, a usage
        error one line and exit 2.

        Inputs are protected (:func:`tracekit.io.protect_inputs`) while the command runs.  With ``--debug``
        the exception propagates with its traceback.
        """
        try:
            from tracekit.io import protect_inputs  # imports the protobuf module: its runtime check is an input error

            with protect_inputs():
                return super().invoke(ctx)
        except click.ClickException as exc:
            raise _one_line(exc, ctx) from exc
        except KeyboardInterrupt:
            obj = ctx.find_object(State)
            if obj is not None and obj.debug:
                raise
            click.echo(f"tracekit: error: {INTERRUPTED}", err=True)
            ctx.exit(EXIT_INPUT_ERROR)
        except (TracekitError, OSError) as exc:
            pipe = _broken_pipe(exc)
            if pipe is not None:  # the reader went away (`| head`): click ends quietly with 1, no error line
                raise pipe from None
            obj = ctx.find_object(State)
            if obj is not None and obj.debug:
                raise
            click.echo(render_error(exc), err=True)
            ctx.exit(EXIT_INPUT_ERROR)


def _broken_pipe(exc: BaseException) -> OSError | None:
    """The EPIPE OSError behind ``exc`` (itself, or the OSError an output helper turned into a TracekitError)."""
    import errno

    for e in (exc, exc.__context__):
        if isinstance(e, OSError) and e.errno == errno.EPIPE:
            return e
    return None


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM/SIGHUP: unwind like Ctrl-C (every writer removes its temporary files), exit 128 + signal."""
    import signal

    signal.signal(signum, signal.SIG_DFL)  # a second signal kills at once
    raise SystemExit(128 + signum)


def install_signal_handlers() -> None:
    """Handle SIGTERM and SIGHUP like SIGINT: the stack unwinds, so no temporary or partial file is left."""
    import signal

    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) in (signal.SIG_DFL, None):
            signal.signal(signum, _terminate)


class _ClosedStream:
    """Stands for a standard stream the shell closed (``>&-``): writing to it is an input error, not a traceback."""

    def __init__(self, name: str) -> None:
        self.name = name

    def write(self, data: Any) -> int:
        """Refuse the write.

        Raises:
            OSError: EBADF, naming the closed stream (rendered as one error line).
        """
        import errno

        raise OSError(errno.EBADF, f"standard {self.name} is closed (give -o FILE, or do not close it)")

    @property
    def buffer(self) -> "_ClosedStream":
        """The stream itself (binary writes are refused the same way)."""
        return self

    def flush(self) -> None:
        """Nothing to flush."""
        pass

    def isatty(self) -> bool:
        """False: a closed stream is no terminal."""
        return False


def run_cli(group: click.Group, argv: list[str] | None = None, *, process: bool = True) -> None:
    """Run ``group`` as the console script does (exits the process). ``process``: this is the command's own
    process, so once the command has finished a Ctrl-C is ignored (False in a test process).

    Raises:
        SystemExit: always, with the command's exit code.
    """
    install_signal_handlers()
    if sys.stdout is None:
        sys.stdout = _ClosedStream("output")  # type: ignore[assignment]
    try:
        group.main(args=argv, prog_name="tracekit", standalone_mode=True)
    except SystemExit:
        if not process:  # inside a test process: leave its Ctrl-C alone
            raise
        import signal

        # the command has finished and said so: a Ctrl-C while the interpreter winds down (freeing a large job
        # takes a while) no longer turns a finished command into exit 130
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise


def invoke_for_test(group: click.Group, args: list[str]) -> Any:
    """Run the CLI inside a CliRunner adapter with the console script's behaviour (kept for older tests)."""
    return run_cli(group, args, process=False)
