"""Trace sets on disk: finding rank files, reading them, writing them together (re-exported by :mod:`tracekit.io`)."""

from __future__ import annotations

import contextlib
import glob as _glob
import gzip
import os
import re
from pathlib import Path
from typing import Sequence

import orjson

from tracekit._capture_hint import convert_hint, sniff_pytorch_file
from tracekit._framing import _RANK_RE, rank_from_path
from tracekit._output import (
    _new_temp,
    _signals_deferred,
    check_output,
    make_parents,
    note_input,
    output_target,
    remove_if_empty,
)
from tracekit._prefix_lock import _HELD, _held_key, _lock_path_of, _release_lock, _take_lock
from tracekit._prefix_lock import check_prefix_names_files, hold_prefix, hold_prefix_shared  # noqa: F401
from tracekit.errors import TraceFormatError, TracekitError


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


def is_rank_file_of(stem: str, name: str) -> bool:
    """Whether the file name ``name`` is a rank file ``<stem>.<rank>.et[.gz]`` of the set named ``stem`` (a file of
    the set ``<stem>.0`` beside it, ``<stem>.0.2.et``, is not)."""
    return re.fullmatch(re.escape(stem) + r"\.\d+\.et(\.gz)?", name) is not None


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
        A :class:`tracekit.traceset.TraceSet`.

    Raises:
        TraceFormatError: as :func:`trace_paths` and :func:`read_trace`.
    """
    from tracekit.classset import find_class_set
    from tracekit.io import read_trace
    from tracekit.traceset import TraceSet

    classes = find_class_set(spec)
    if classes is not None:  # a job stored as rank classes (tracekit.classset)
        return classes.to_traceset()
    pairs = trace_paths(spec)
    traces = {rank: read_trace(path, rank=rank) for rank, path in pairs}
    return TraceSet(traces)


_GROUPS_KEY = -1  # TraceSetWriter._temps key of the comm-group file


class TraceSetWriter:
    """Writes the ``<prefix>.<rank>.et[.gz]`` files of one trace set as a unit.

    Each rank goes to a temporary file in the target folder; when the
    ``with`` block ends without error, the prefix is checked and every file is
    renamed into place.  On any exception (an encoding error, Ctrl-C) every
    temporary file is removed and no output file is touched.  The check
    refuses a prefix that already holds rank files this set would not
    replace (ranks from an earlier, larger job, or the same rank with the
    other suffix), since reading the prefix back would mix them in.

    Usage::

        with TraceSetWriter("out/job") as w:
            for rank, data in encoded_ranks:
                w.add(rank, data)
        w.paths  # written, in rank order

    Beside the rank files it writes ``<prefix>.comm_groups.json``, ASTRA-sim's
    ``--comm-group-configuration`` file (``{"<id>": [ranks]}``; ``{}`` when the
    set has no sub-groups): set :attr:`comm_groups` to the document (see
    :func:`tracekit.astra_compat.comm_groups_document`) before the block ends.

    Raises:
        TracekitError: the prefix holds other rank files, or an output is an
            input of the running command.
    """

    def __init__(
        self, prefix: str | os.PathLike[str], *, compress: bool = False, comm_groups: dict | None = None
    ) -> None:
        self.prefix = os.fspath(prefix)
        check_prefix_names_files(self.prefix)
        self.suffix = ".et.gz" if compress else ".et"
        self._temps: dict[int, str] = {}
        self.paths: list[Path] = []
        self.comm_groups: dict | None = comm_groups
        self.comm_groups_path: Path | None = None
        self._lock_fd: int | None = None
        self._lock_path: Path | None = None
        self._created: list[Path] = []  # folders this writer made (removed again when the write fails)

    def target(self, rank: int) -> Path:
        """The final path of ``rank``'s file (``<prefix>.<rank>.et`` or ``.et.gz``)."""
        return Path(f"{self.prefix}.{rank}{self.suffix}")

    def _final(self, rank: int) -> Path:
        """The file the rank's output replaces: symlinks followed; a device or FIFO is refused."""
        target, through = output_target(self.target(rank))
        if through:
            raise TracekitError(
                "is not a regular file: a trace set is written as files (renamed into place); choose another prefix",
                path=self.target(rank),
            )
        return target

    def _lock(self) -> None:
        """Take the prefix's lock (``.<name>.tk-lock`` beside the rank files) for the life of the writer, unless
        this process holds it already (:func:`hold_prefix`, taken when the command started)."""
        if self._lock_fd is not None or self._lock_path is not None:
            return
        base = Path(self.prefix)
        self._created += make_parents(base.parent if str(base.parent) else Path("."))
        lock_path = _lock_path_of(self.prefix)
        if _held_key(lock_path) in _HELD:
            self._lock_path = lock_path  # the holder releases it
            return
        self._lock_fd, self._lock_path = _take_lock(self.prefix, lock_path), lock_path

    def _unlock(self) -> None:
        if self._lock_fd is None:
            self._lock_path = None
            return
        assert self._lock_path is not None
        _release_lock(self._lock_fd, self._lock_path)
        self._lock_fd, self._lock_path = None, None

    def reserve(self, rank: int) -> Path:
        """A temporary path for ``rank`` that an external writer fills (renamed at the end)."""
        if rank in self._temps:
            raise TracekitError(f"rank {rank} written twice", path=self.prefix)
        self._lock()
        target = self._final(rank)
        check_output(target)
        self._created += make_parents(target.parent)
        with _signals_deferred():
            fd, tmp = _new_temp(target)
            self._temps[rank] = tmp
        os.close(fd)
        return Path(tmp)

    def add(self, rank: int, data: "bytes | Sequence[bytes | memoryview]") -> None:
        """Write one rank's encoded trace (``.et`` bytes, or pieces of them in order as
        :func:`tracekit.io.encoded_pieces` gives them; compressed here when the writer compresses)."""
        tmp = self.reserve(rank)
        pieces = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
        if self.suffix == ".et.gz":
            pieces = [gzip.compress(b"".join(pieces), compresslevel=6, mtime=0)]
        try:
            with open(tmp, "wb") as fh:
                fh.writelines(pieces)
        except OSError as exc:  # a full disk: name the rank file, not the temporary one
            raise OSError(exc.errno, exc.strerror, str(self.target(rank))) from None

    def _conflicts(self) -> list[str]:
        base = Path(self.prefix)
        folder = base.parent if str(base.parent) else Path(".")
        if not folder.is_dir():
            return []
        out = []
        stem = _glob.escape(base.name)
        for other in _glob.glob(os.path.join(_glob.escape(str(folder)), stem + ".*.et")) + _glob.glob(
            os.path.join(_glob.escape(str(folder)), stem + ".*.et.gz")
        ):
            name = os.path.basename(other)
            if not is_rank_file_of(base.name, name):
                continue
            rank_text, _, suffix = name[len(base.name) + 1 :].partition(".")
            if int(rank_text) not in self._temps or "." + suffix != self.suffix:
                out.append(name)
        return sorted(out)

    def __enter__(self) -> "TraceSetWriter":
        self._lock()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                from tracekit.classset import check_one_form

                check_one_form(self.prefix, "rank files")
                conflicts = self._conflicts()
                if conflicts:
                    shown = ", ".join(conflicts[:6]) + (" ..." if len(conflicts) > 6 else "")
                    raise TracekitError(
                        f"the output prefix already holds rank files this trace set would not "
                        f"replace ({shown}); reading it back would mix them in: remove them "
                        f"or choose another prefix",
                        path=self.prefix,
                    )
                for rank in sorted(self._temps):  # inputs may have been read after reserve()
                    check_output(self.target(rank))
                groups_target = Path(f"{self.prefix}.comm_groups.json")
                check_output(groups_target)
                with _signals_deferred():  # removed with the rank temps on error
                    fd, groups_tmp = _new_temp(groups_target)
                    self._temps[_GROUPS_KEY] = groups_tmp
                with os.fdopen(fd, "wb") as fh:
                    fh.write(orjson.dumps(self.comm_groups or {}, option=orjson.OPT_INDENT_2) + b"\n")
                # the renames are one unit: an interrupt during them waits until the whole set is in place
                # (a signal there used to leave the ranks renamed so far and remove the others)
                with _signals_deferred():
                    for rank in sorted(r for r in self._temps if r != _GROUPS_KEY):
                        os.replace(self._temps[rank], self._final(rank))
                        self.paths.append(self.target(rank))
                    os.replace(groups_tmp, groups_target)
                    self.comm_groups_path = groups_target
                    self._temps.clear()
        finally:
            for tmp in self._temps.values():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            self._temps.clear()
            self._unlock()
            if not self.paths:
                remove_if_empty(self._created)


def write_traceset(traceset, prefix: str | os.PathLike[str], *, compress: bool = False) -> list[Path]:
    """Write ``<prefix>.<rank>.et`` (``.et.gz`` with ``compress``) for every rank, as a unit.

    See :class:`TraceSetWriter`: an error or interrupt leaves no output file
    and no temporary file; a prefix holding other rank files is refused.

    Every trace is made runnable by ASTRA-sim on the way
    (:func:`tracekit.astra_compat.astra_ready`: no ``pg_name`` on all-ranks
    communication, positive integer ids for the other groups, METADATA nodes
    marked ``is_cpu_op``) and ``<prefix>.comm_groups.json`` lists the groups.

    Returns:
        The paths written, in rank order.
    """
    from tracekit.astra_compat import astra_group_ids, astra_ready, comm_groups_document
    from tracekit.io import encoded_pieces

    groups = traceset.process_groups
    ids = astra_group_ids(groups, traceset.world_size)
    with TraceSetWriter(prefix, compress=compress) as writer:
        for rank, trace in traceset.items():
            writer.add(rank, encoded_pieces(astra_ready(trace, ids)))
        writer.comm_groups = comm_groups_document(groups, ids)
    return writer.paths
