"""``tracekit generate``: synthetic trace sets (microbenchmarks, transformer LLMs, DLRM)."""

from __future__ import annotations

import click

from tracekit.cli._common import CONTEXT_SETTINGS, SubcommandGroup
from tracekit.cli._groups import collect


@click.group(cls=SubcommandGroup, context_settings=CONTEXT_SETTINGS)
def generate() -> None:
    """Generate per-rank execution traces of jobs nobody has run yet.

    \b
    Example:
      tracekit generate micro --collective all_reduce --size 64MiB --ranks 8 -o out/ar
      tracekit generate llm --model gpt3-175b --tp 8 --pp 16 --dp 8 -o out/gpt3
    """


collect(generate, ("tracekit.cli.generate_micro", "tracekit.cli.generate_llm", "tracekit.cli.generate_dlrm"))

COMMANDS = [generate]
