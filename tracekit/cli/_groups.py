"""Command groups whose subcommands live in several area modules.

``tracekit convert pytorch|text`` and ``tracekit generate micro|llm|dlrm`` are
click groups; each area module (``tracekit.cli.convert_pytorch``,
``tracekit.cli.generate_llm``, ...) defines its subcommands and lists them in a
module-level ``COMMANDS``.  Missing modules are skipped, so an area's CLI
appears as soon as its module exists.  The root ``tracekit`` group collects its
area modules the same way (``tracekit/cli/__init__.py``).
"""

from __future__ import annotations

import importlib

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
            group.add_command(command)
