"""``tracekit convert``: producers that read another format and write `<prefix>.<rank>.et` files."""

from __future__ import annotations

import click

from tracekit.cli._common import CONTEXT_SETTINGS, SubcommandGroup
from tracekit.cli._groups import collect


@click.group(cls=SubcommandGroup, context_settings=CONTEXT_SETTINGS)
def convert() -> None:
    """Convert PyTorch profiler dumps or ASTRA-sim text workloads into Chakra execution traces.

    \b
    Example:
      tracekit convert pytorch --et 'run/et_rank*.json' --kineto 'run/kineto_rank*.json' -o out/job
      tracekit convert text Resnet50_DataParallel.txt --ranks 4 -o out/resnet
    """


collect(convert, ("tracekit.cli.convert_pytorch", "tracekit.cli.convert_text"))

COMMANDS = [convert]
