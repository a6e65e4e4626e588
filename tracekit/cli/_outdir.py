"""Output folders that would hide a trace set: ``sweep -o DIR`` and ``export astra -o DIR`` beside ``DIR.<rank>.et``.

A TRACES prefix ``job`` names the files ``job.<rank>.et`` (or ``job.classes.json``) until a folder ``job`` exists:
then it names the folder (tracekit.io's resolution), so ``tracekit sweep job -o job`` left the set unreachable by
its prefix ("no trace files match 'job'") for every later command.
"""

from __future__ import annotations

import glob
import os

from tracekit.errors import TracekitError

__all__ = ["check_output_folder"]


def check_output_folder(out_dir: str, option: str = "-o") -> None:
    """Raise when creating the folder ``out_dir`` would hide the trace set whose prefix it is.

    Raises:
        TracekitError: ``out_dir`` does not exist and ``out_dir.<rank>.et[.gz]`` or ``out_dir.classes.json`` does.
    """
    base = out_dir.rstrip("/" + os.sep) or out_dir
    if os.path.isdir(base):
        return
    from tracekit.sets.io import is_rank_file_of

    stem = os.path.basename(base)
    found = sorted(f for f in glob.glob(f"{glob.escape(base)}.*.et*") if is_rank_file_of(stem, os.path.basename(f)))
    found = found or glob.glob(f"{glob.escape(base)}.classes.json")
    if found:
        raise TracekitError(
            f"{option} {out_dir}: a folder of that name would hide the trace set {base} ({os.path.basename(found[0])} "
            "...) from every command that reads the prefix; choose another output folder",
            path=None,
        )
