"""The two forms of a trace set on disk, one per prefix: rank files ``<prefix>.<rank>.et[.gz]`` or a rank-class set
(``<prefix>.classes.json`` and its class files, :mod:`tracekit.sets.classset`)."""

from __future__ import annotations

import os
from pathlib import Path

from tracekit.errors import TraceFormatError
from tracekit.wire.framing import is_rank_file_of

MANIFEST_SUFFIX = ".classes.json"


def rank_files_of(prefix: str | os.PathLike[str]) -> list[str]:
    """Names of the ``<prefix>.<rank>.et[.gz]`` files beside ``prefix`` (sorted)."""
    import glob

    base = Path(os.fspath(prefix))
    stem = glob.escape(str(base))
    found = glob.glob(stem + ".*.et") + glob.glob(stem + ".*.et.gz")
    return sorted(Path(f).name for f in found if is_rank_file_of(base.name, Path(f).name))


def check_one_form(prefix: str | os.PathLike[str], writing: str | None = None) -> None:
    """Refuse a prefix holding a trace set in both forms: a class set (``<prefix>.classes.json``) and rank files
    (``<prefix>.<rank>.et``). One prefix is one job: a reader could take either (the trial replayed one prefix at
    113.0 ms as a class set and 66.2 ms as rank files), so a reader refuses both, and a writer refuses a prefix
    that holds the other form.

    Args:
        prefix: the trace-set prefix.
        writing: ``"class set"`` or ``"rank files"`` when about to write that form; None when reading.

    Raises:
        TraceFormatError: as above (names the file of the other form).
    """
    base = Path(os.fspath(prefix))
    manifest = base.parent / f"{base.name}{MANIFEST_SUFFIX}"
    has_manifest = manifest.is_file()
    ranked = rank_files_of(prefix) if writing != "rank files" and (has_manifest or writing) else []
    if writing == "class set" and ranked:
        other = f"rank files ({ranked[0]} ...)"
    elif writing == "rank files" and has_manifest:
        other = f"a class set ({manifest.name})"
    elif writing is None and has_manifest and ranked:
        other = f"a class set ({manifest.name}) and rank files ({ranked[0]} ...)"
    else:
        return
    verb = "already holds" if writing else "holds both"
    raise TraceFormatError(
        f"the prefix {verb} {other}; one prefix holds one form of a trace "
        "set (a class set or rank files): remove one or choose another prefix",
        path=prefix,
    )
