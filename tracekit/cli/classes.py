"""``tracekit expand``: write the per-rank Chakra files of a rank-class set (:mod:`tracekit.sets.classset`)."""

from __future__ import annotations

import click

from tracekit.cli._common import CONTEXT_SETTINGS, err_console, hold_output_prefix, path_span, progress, state
from tracekit.cli._options import emit_json, json_option


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("manifest", metavar="CLASSES")
@click.option("-o", "--output", "prefix", required=True, metavar="PREFIX", help="Output prefix: PREFIX.<rank>.et.")
@json_option()
def expand(manifest: str, prefix: str, as_json: bool) -> None:
    """Write one Chakra trace per rank from a rank-class set (PREFIX.classes.json, its prefix or directory).

    Each rank's file is its class representative's with the rank's own group
    names and peers: byte for byte what a per-rank generator writes.

    \b
    Example:
      tracekit generate llm --model gpt3-175b --tp 8 --pp 16 --dp 8 --classes -o out/gpt3
      tracekit expand out/gpt3 -o chakra/gpt3
    """
    from tracekit.sets.classset import find_class_set
    from tracekit.errors import TraceFormatError

    hold_output_prefix(prefix)
    cs = find_class_set(manifest)
    if cs is None:
        raise TraceFormatError("not a rank-class set (expected PREFIX.classes.json)", path=manifest)
    paths = cs.expand(prefix, progress=lambda items, total: progress(items, "writing ranks", total=total))
    if as_json:
        emit_json({"prefix": prefix, "files": [str(p) for p in paths], "ranks": len(paths)})
    elif not state().quiet:
        err_console().print(f"wrote {len(paths)} trace(s): {path_span(paths)}", markup=False, highlight=False)


COMMANDS = [expand]
