"""Command groups whose subcommands live in several area modules.

``tracekit convert pytorch|text`` and ``tracekit generate micro|llm|dlrm`` are
click groups; each area module (``tracekit.cli.convert_pytorch``,
``tracekit.cli.generate_llm``, ...) defines its subcommands and lists them in a
module-level ``COMMANDS``.  Missing modules are skipped, so an area's CLI
appears as soon as its module exists.  The root ``tracekit`` group collects its
area modules the same way (``tracekit/cli/__init__.py``).
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any, Callable

import click


def collect(group: click.Group, module_names: tuple[str, ...]) -> None:
    """Add every command in ``module.COMMANDS`` of each named module to ``group``."""
    for module_name in module_names:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        for command in getattr(module, "COMMANDS", ()):
            if not isinstance(command, click.Group) and command.callback is not None:
                command.callback = distinct_outputs(command.callback)
            group.add_command(command)


def output_options(command: click.Command) -> list[click.Option]:
    """The options of ``command`` that name a file or prefix it writes: ``-o``/``--output`` and ``--*-out``."""
    return [
        p
        for p in command.params
        if isinstance(p, click.Option) and any(o in ("-o", "--output") or o.endswith("-out") for o in p.opts)
    ]


def distinct_outputs(callback: Callable[..., Any]) -> Callable[..., Any]:
    """``callback`` refusing, before it runs, two outputs of the command that name one path (``replay -o r.json
    --timeline-out r.json`` wrote one over the other). Every leaf command is registered through :func:`collect`,
    which wraps it.

    Raises:
        ConfigError: two output options name the same path (names both options and the path).
    """

    @functools.wraps(callback)
    def checked(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        seen: dict[str, str] = {}
        for option in output_options(ctx.command):
            value = ctx.params.get(option.name or "")
            if not value:
                continue
            key = os.path.realpath(os.fspath(value))
            if key == os.devnull:  # discarded, however many outputs go there
                continue
            flag = max(option.opts, key=len)
            if key in seen:
                from tracekit.errors import ConfigError

                raise ConfigError(f"{seen[key]} and {flag} both name {value}: give each output its own path")
            seen[key] = flag
        return callback(*args, **kwargs)

    return checked
