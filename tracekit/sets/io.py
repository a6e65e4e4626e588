"""Trace sets on disk: finding rank files, reading them, writing them together (re-exported by :mod:`tracekit.io`)."""

from __future__ import annotations

import glob as _glob
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence


from tracekit.wire.capture_hint import convert_hint, sniff_pytorch_file
from tracekit.wire.framing import _RANK_RE, is_rank_file_of, rank_from_path
from tracekit.output import (
    note_input,
)
from tracekit.sets._prefix_lock import check_prefix_names_files, hold_prefix, hold_prefix_shared  # noqa: F401
from tracekit.errors import TraceFormatError
from tracekit.sets.writer import TraceSetWriter

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace


# ----------------------------------------------------------------------------- trace sets
def _hint(p: Path) -> str:
    """What to do when a folder that matched no trace holds PyTorch profiler JSON (a capture not converted yet)."""
    if not p.is_dir():
        return ""
    names = [f.name for f in p.iterdir() if f.name.endswith((".json", ".json.gz"))]
    if not names:
        return ""
    return (
        f"; the folder holds {len(names)} JSON file(s) ({min(names)} ...): convert a PyTorch capture first, "
        f"e.g. tracekit convert pytorch --et '{p}/et_rank*.json' --kineto '{p}/kineto_rank*.json' -o out/job"
    )


def trace_paths(spec: "str | os.PathLike[str] | Sequence[str | os.PathLike[str]]") -> list[tuple[int, Path]]:
    """Resolve a trace-set spec to ``(rank, path)`` pairs sorted by rank.

    ``spec`` is a prefix (``dir/job`` -> ``dir/job.<rank>.et[.gz]``), a glob
    (``'dir/*.et'``), a directory (every ``*.<rank>.et[.gz]`` in it), a
    single file, or a sequence of these (what a shell glob expands to: each
    file's rank comes from its name).

    Raises:
        TraceFormatError: nothing matches, a name has no rank, or two files
            claim the same rank.
    """
    if isinstance(spec, (list, tuple)):
        return _trace_paths_of_many(spec)
    s = os.fspath(spec)  # type: ignore[arg-type]  # a str or path (sequences returned above)
    p = Path(s)
    # an existing file or directory is taken literally, even with glob characters in its name ("run[1].0.et")
    if p.is_file():
        files = [p]
    elif p.is_dir():
        files = [f for f in p.iterdir() if _RANK_RE.search(f.name)]
    else:
        files = [Path(f) for f in _glob.glob(s)] if any(ch in s for ch in "*?[") else []
        if not files:  # a prefix, its glob characters literal; only <prefix>.<digits>.et[.gz] (not job.0.2.et, a
            # file of the set job.0 beside it)
            found = _glob.glob(_glob.escape(s) + ".*.et") + _glob.glob(_glob.escape(s) + ".*.et.gz")
            files = [Path(f) for f in found if is_rank_file_of(p.name, Path(f).name)]
    files = [f for f in files if f.is_file()]
    if not files:
        raise TraceFormatError(f"no trace files match {s!r} (expected <prefix>.<rank>.et files){_hint(p)}", path=s)
    pairs: dict[int, Path] = {}
    for f in files:
        r = rank_from_path(f.name)
        if r is None:
            if len(files) == 1:
                r = 0
            else:
                m = re.search(r"\.\d+(\.[^./]+(?:\.gz)?)$", f.name)
                if m:  # a rank, but another extension: say so (e.g. ASTRA-sim's twoComm.2.eg)
                    raise TraceFormatError(
                        f"file name ends in {m.group(1)!r}, not '.et' or '.et.gz' (expected <prefix>.<rank>.et)", path=f
                    )
                raise TraceFormatError("file name has no rank (expected <prefix>.<rank>.et)", path=f)
        if r in pairs:
            raise TraceFormatError(f"two files for rank {r}: {pairs[r]} and {f}", path=s)
        pairs[r] = f
        note_input(f)
    return sorted(pairs.items())


def _trace_paths_of_many(specs: Sequence[str | os.PathLike[str]]) -> list[tuple[int, Path]]:
    if len(specs) == 1:
        return trace_paths(specs[0])
    if not specs:
        raise TraceFormatError("no trace files given")
    pairs: dict[int, Path] = {}
    for item in specs:
        p = Path(os.fspath(item))
        if p.is_file():
            r = rank_from_path(p.name)
            if r is None:
                kind = sniff_pytorch_file(p)  # several PyTorch capture files (an unquoted et_rank*.json)
                if kind is not None:
                    raise TraceFormatError(convert_hint(kind, str(p)), path=p)
                raise TraceFormatError("file name has no rank (expected <prefix>.<rank>.et)", path=p)
            found = [(r, p)]
            note_input(p)
        else:
            found = trace_paths(item)
        for r, f in found:
            if r in pairs and pairs[r] != f:
                raise TraceFormatError(f"two files for rank {r}: {pairs[r]} and {f}", path=f)
            pairs[r] = f
    return sorted(pairs.items())


def read_traceset(spec: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]):
    """Read all ranks of a job (see :func:`trace_paths` for ``spec``).

    Returns:
        A :class:`tracekit.sets.traceset.TraceSet`.

    Raises:
        TraceFormatError: as :func:`trace_paths` and :func:`read_trace`.
    """
    from tracekit.sets.classset import find_class_set
    from tracekit.wire.io import read_trace
    from tracekit.sets.traceset import TraceSet

    classes = find_class_set(spec)
    if classes is not None:  # a job stored as rank classes (tracekit.sets.classset)
        return classes.to_traceset()
    pairs = trace_paths(spec)
    traces = {rank: read_trace(path, rank=rank) for rank, path in pairs}
    return TraceSet(traces)


def write_traceset(
    traceset,
    prefix: str | os.PathLike[str],
    *,
    compress: bool = False,
    prepare: Callable[[ExecutionTrace], ExecutionTrace] | None = None,
    comm_groups: dict[str, list[int]] | None = None,
) -> list[Path]:
    """Write ``<prefix>.<rank>.et`` (``.et.gz`` with ``compress``) for every rank, as a unit: the traces as they are.

    See :class:`TraceSetWriter`: an error or interrupt leaves no output file
    and no temporary file; a prefix holding other rank files is refused.
    Nothing is rewritten unless the caller asks: ``prepare`` is applied to each
    rank's trace just before it is encoded (one rank at a time), ``comm_groups``
    is the document of ``<prefix>.comm_groups.json`` (default: an empty one).
    A set for ASTRA-sim is written by :func:`tracekit.interop.astra.write_traceset`
    (what :func:`tracekit.io.write_traceset` is), which passes both.

    Returns:
        The paths written, in rank order.
    """
    from tracekit.wire.io import encoded_pieces

    with TraceSetWriter(prefix, compress=compress) as writer:
        for rank, trace in traceset.items():
            writer.add(rank, encoded_pieces(prepare(trace) if prepare is not None else trace))
        writer.comm_groups = comm_groups
    return writer.paths
