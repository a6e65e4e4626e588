"""Options shared by several commands, so each name means one thing everywhere (docs/cli.md).

- ``TRACES...``: one or more trace-set specs (a prefix, glob, directory or
  file each; several paths are what a shell glob expands to);
- ``--json``: machine-readable output on stdout (a flag, never a file name);
- ``--executor``/``--workers``/``--address``: where work over ranks or sweep
  points runs, with the same choices and defaults in every command;
- global options (``-q``, ``-v``, ``--debug``) are accepted anywhere on the
  command line (:class:`RootGroup` moves them in front of the subcommand).

docs/cli.md holds the table of every option name and its meaning;
tests/core/test_cli_options.py checks the commands against it.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Callable

import click

from tracekit.cli._common import TracekitGroup

#: Global flags of the root group; accepted after the subcommand too.
GLOBAL_FLAGS = frozenset({"-q", "--quiet", "--debug", "-v", "--verbose"})
_VERBOSE_RUN = re.compile(r"^-v{2,}$")

EXECUTORS = ("auto", "serial", "process", "ray")
EXECUTOR_HELP = (
    "Where work over ranks or sweep points runs: auto (a local process pool when there is enough "
    "work for more than one worker, else this process), serial, process, or ray."
)
#: Largest --workers accepted: 4 x the CPU count (more processes than that only cost memory and start-up time).
MAX_WORKERS = 4 * (os.cpu_count() or 1)
WORKERS_HELP = f"Local pool size, 1 to {MAX_WORKERS} (4 x the CPU count; default: the CPU count, at most 8)."
#: Largest --top of the per-rank tables (replay, info): one row per rank at most, and tracekit handles up to
#: 2^20 ranks (``tracekit.model.node.MAX_RANKS``; not imported here, so ``tracekit --help`` stays light).
MAX_TOP = 1 << 20
ADDRESS_HELP = "Ray cluster address with --executor ray (auto, ray://host:10001); default: start a local Ray."
JSON_HELP = "Print the result as JSON on stdout (machine output; no tables)."
TRACES_HELP = (
    "TRACES is one or more of: a trace-set prefix (dir/job for dir/job.<rank>.et), a quoted glob, "
    "a directory, or trace files (an unquoted shell glob)."
)


class ValueOutOfRange(click.BadParameter):
    """An option value of the right type outside its range: bad input, exit 1 (docs/cli.md "Exit codes"),
    like tracekit's own range checks; a value that does not parse stays click's usage error (exit 2)."""

    exit_code = 1


class IntRange(click.IntRange):
    """:class:`click.IntRange` whose out-of-range values exit 1 (:class:`ValueOutOfRange`); a value that is
    not an integer is a usage error (exit 2), as with every click type."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The integer ``value``, checked against the range.

        Raises:
            click.BadParameter: not an integer (exit 2).
            ValueOutOfRange: outside the range (exit 1).
        """
        number = click.INT.convert(value, param, ctx)
        try:
            return super().convert(number, param, ctx)
        except click.BadParameter as exc:
            raise ValueOutOfRange(exc.message, ctx=ctx, param=param) from exc


class FloatRange(click.FloatRange):
    """:class:`click.FloatRange` that also refuses NaN and infinities (click's range lets NaN through: every
    comparison with it is false); a value outside the range exits 1 (:class:`ValueOutOfRange`), one that does
    not parse is a usage error (exit 2)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The float ``value``, finite and checked against the range.

        Raises:
            click.BadParameter: not a number (exit 2).
            ValueOutOfRange: NaN, infinite, or outside the range (exit 1).
        """
        import math

        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            raise ValueOutOfRange(f"{value!r} is not a finite number.", ctx=ctx, param=param)
        try:
            return super().convert(number, param, ctx)
        except click.BadParameter as exc:
            raise ValueOutOfRange(exc.message, ctx=ctx, param=param) from exc


#: Peak TFLOP/s and memory GB/s a generator's roofline accepts: 1e-6 (a rate below makes a node's time
#: overflow) to 1e6 TFLOP/s (an exaFLOP/s device) and 1e9 GB/s.
PEAK_TFLOPS = FloatRange(1e-6, 1e6)
MEM_BW_GBPS = FloatRange(1e-6, 1e9)


#: A count option (parallel degrees, layers, model sizes, batches, ranks, passes): an integer >= 1; an upper
#: bound is checked where its limit is known (ranks, int64 sizes, a memory estimate).
COUNT = IntRange(min=1)
#: A multiplier option (``--scale-compute``, ``--scale-comm``): a finite float > 0.
FACTOR = FloatRange(min=0, min_open=True)


#: The element types the generators price: :data:`tracekit.workloads.units.TRAINING_DTYPES` (not imported, so
#: ``--help`` stays light; tests/hardening/test_leftovers_of_the_trial.py checks they are equal).
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


def dtype_option(default: str | None, help_text: str) -> Callable:
    """``--dtype``, one of :data:`DTYPES`; another value is click's usage error naming ``--dtype`` and the choices."""
    return click.option(
        "--dtype", type=click.Choice(DTYPES), default=default, show_default=default is not None, help=help_text
    )


def hoist_global_flags(args: list[str]) -> list[str]:
    """``args`` with the global flags moved to the front (they may follow the subcommand); ``--`` stops the scan."""
    front: list[str] = []
    rest: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            rest.extend(args[i:])
            break
        if arg in GLOBAL_FLAGS or _VERBOSE_RUN.match(arg):
            front.append(arg)
        else:
            rest.append(arg)
    return front + rest


class RootGroup(TracekitGroup):
    """The ``tracekit`` group: global flags anywhere, errors as one line (:class:`TracekitGroup`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Parse ``args`` after moving the global flags (``--debug``, ``-q``, ``-v`` ...) in front of the subcommand."""
        return super().parse_args(ctx, hoist_global_flags(list(args)))


def _traces_value(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> Any:
    if not value:
        return None
    from tracekit.io import hold_prefix_shared

    for prefix in sorted({p for v in value if (p := _prefix_of(v)) is not None}):
        ctx.with_resource(hold_prefix_shared(prefix))  # no command writes a set while this one reads it
    return value[0] if len(value) == 1 else tuple(value)


_RANK_FILE = re.compile(r"^(.*)\.\d+\.et(\.gz)?$")


def _prefix_of(spec: str) -> str | None:
    """The trace-set prefix a TRACES value names (a prefix, a manifest, a rank file); None for a folder or glob."""
    if spec.endswith(".classes.json"):
        return spec.removesuffix(".classes.json")
    m = _RANK_FILE.match(spec)
    if m is not None:
        return m.group(1)
    if os.path.isdir(spec) or os.path.isfile(spec) or any(ch in spec for ch in "*?["):
        return None
    return spec


def traces_argument(*, required: bool = True, metavar: str = "TRACES...") -> Callable:
    """The TRACES argument: one spec (a str) or several paths (a tuple), as :func:`tracekit.io.trace_paths` takes."""
    return click.argument("traces", metavar=metavar, nargs=-1, required=required, callback=_traces_value)


def json_option() -> Callable:
    """``--json``: machine output on stdout, stored as ``as_json``."""
    return click.option("--json", "as_json", is_flag=True, help=JSON_HELP)


def executor_options(f: Callable) -> Callable:
    """``--executor``, ``--workers``, ``--address`` with one set of choices and defaults for every command."""
    f = click.option("--address", default=None, metavar="ADDR", help=ADDRESS_HELP)(f)
    f = click.option("--workers", type=IntRange(1, MAX_WORKERS), default=None, help=WORKERS_HELP)(f)
    f = click.option("--executor", type=click.Choice(EXECUTORS), default="auto", show_default=True, help=EXECUTOR_HELP)(
        f
    )
    return f


COMPUTE_HELP = (
    "How compute is timed, the same in every command that times a job: 'projected' moves measured times from "
    "the capture device to the spec's device per op class; 'roofline' times every node with FLOPs/bytes on the "
    "spec; 'measured' keeps the trace's times; 'auto' projects when both devices are known, else keeps the "
    "measured times."
)


def compute_options(f: Callable) -> Callable:
    """``--compute`` and ``--capture-device``: one timing rule for ``replay`` and ``sweep`` (the choices of
    :data:`tracekit.replayer.orchestration.projected.COMPUTE_CHOICES`, not imported so ``--help`` stays light)."""
    f = click.option(
        "--capture-device",
        default=None,
        metavar="NAME",
        help="Device the trace was measured on (a preset of tracekit/costs/devices.toml such as a100-80gb, "
        "or a device name), when the trace does not record it.",
    )(f)
    choices = click.Choice(["auto", "measured", "roofline", "projected"])
    return click.option("--compute", type=choices, default="auto", show_default=True, help=COMPUTE_HELP)(f)


def check_address(executor: str, address: str | None) -> None:
    """Refuse ``--address`` without ``--executor ray``: the other executors never use a Ray cluster, so the
    address would be silently ignored.

    Raises:
        click.UsageError: ``address`` given with ``executor`` other than ``ray`` (exit 2), naming both options.
    """
    if address is not None and executor != "ray":
        raise click.UsageError(
            f"--address {address} needs --executor ray (got --executor {executor}, which runs no Ray)"
        )


def resolve_executor(executor: str, units: int, workers: int | None, *, min_units: int = 2) -> str:
    """The executor ``auto`` stands for: ``process`` from ``min_units`` units of work (and more than one
    worker allowed), else ``serial``; any other choice is returned unchanged.

    Args:
        executor: the ``--executor`` choice.
        units: number of independent work items (ranks, files).
        workers: the ``--workers`` value (None = default).
        min_units: smallest number of items worth a process pool.
    """
    if executor != "auto":
        return executor
    return "process" if units >= min_units and (workers is None or workers > 1) else "serial"


def emit_json(doc: Any) -> None:
    """Write ``doc`` as indented JSON (orjson; numpy values allowed) and a newline on stdout."""
    import orjson

    text = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    sys.stdout.write(text.decode() + "\n")


def write_generated(traceset: Any, prefix: str, as_json: bool) -> None:
    """Write a generated trace set as ``<prefix>.<rank>.et`` and report it: JSON (prefix, files, ranks, nodes) on
    stdout with ``as_json``, else one ``wrote N trace(s)`` line on stderr (none with -q).

    Raises:
        TracekitError: as :func:`tracekit.io.write_traceset` (an output is an input, or cannot be written).
    """
    from tracekit.cli._common import path_span, say
    from tracekit.io import write_traceset

    paths = write_traceset(traceset, prefix)
    if as_json:
        emit_json(
            {
                "prefix": prefix,
                "files": [str(p) for p in paths],
                "ranks": len(paths),
                "nodes": sum(len(traceset[r]) for r in traceset.ranks),
            }
        )
    else:
        say(f"wrote {len(paths)} trace(s): {path_span(paths)}")


def deprecated_alias(old: str, dest: str) -> Callable:
    """A hidden option ``old`` kept for old command lines; stored as ``dest`` (the body merges it)."""
    return click.option(old, dest, hidden=True, default=None, type=click.Path(dir_okay=False))


def comm_groups_option() -> Callable:
    """``--comm-groups FILE``: ASTRA-sim's comm-group JSON declaring the groups the traces' ``pg_name``s name."""
    return click.option(
        "--comm-groups",
        "comm_groups",
        type=click.Path(dir_okay=False),
        default=None,
        metavar="FILE",
        help='ASTRA-sim comm-group JSON ({"1": [0, 1], ...}, what --comm-group-configuration takes) declaring '
        "the groups the traces name by pg_name without a process_group:init node; default: "
        "<prefix>.comm_groups.json beside the rank files, when there is one.",
    )


def load_comm_groups(
    traces: Any, path: str | None, *, whole_job: bool = False
) -> tuple[dict[str, tuple[int, ...]], str | None]:
    """The groups of ``--comm-groups`` (or of ``<prefix>.comm_groups.json`` beside the rank files) and the file.

    ``whole_job`` (``replay``): a group member past the set's last rank file is the file's error, not a missing
    trace (:func:`tracekit.sets.comm_groups.check_members_on_file`).

    Raises:
        ValidationError: the file is not a comm-group document, or (``whole_job``) names a rank with no file.
        click.UsageError: a file given for a rank-class set (its groups are in its manifest; exit 2).
    """
    from tracekit.sets.classset import find_class_set
    from tracekit.sets.comm_groups import check_members_on_file, comm_groups_near, read_comm_groups
    from tracekit.errors import TracekitError
    from tracekit.io import trace_paths

    if path is not None and find_class_set(traces) is not None:
        raise click.UsageError(
            f"--comm-groups {path}: TRACES is a rank-class set, whose groups are in its manifest "
            "(the option is for rank files)"
        )

    try:
        pairs = trace_paths(traces)
    except TracekitError:  # a class set or an unreadable source: the command reports it itself
        pairs = []
    if path is None:
        path = comm_groups_near(str(pairs[0][1])) if pairs else None
        if path is None:
            return {}, None
    groups = read_comm_groups(path)
    if whole_job and pairs:
        check_members_on_file(groups, pairs[-1][0] + 1, path)
    return groups, path
