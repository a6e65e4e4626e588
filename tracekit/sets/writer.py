"""Writing a trace set's files as one unit: :class:`TraceSetWriter` (re-exported by :mod:`tracekit.sets.io`).

The rank files of a prefix and the comm-group file beside them are written to temporary files and renamed together
at the end, under the prefix's output lock (:mod:`tracekit.sets._prefix_lock`): all of them or none.
"""

from __future__ import annotations

import contextlib
import glob as _glob
import gzip
import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import orjson

from tracekit.output import (
    _new_temp,
    _signals_deferred,
    check_output,
    make_parents,
    output_target,
    remove_if_empty,
)
from tracekit.sets._prefix_lock import _HELD, _held_key, _lock_path_of, _release_lock, _take_lock
from tracekit.sets._prefix_lock import check_prefix_names_files
from tracekit.errors import TracekitError
from tracekit.wire.framing import is_rank_file_of

if TYPE_CHECKING:  # pragma: no cover
    pass


# ----------------------------------------------------------------------------- trace sets
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
    :func:`tracekit.interop.astra.comm_groups_document`) before the block ends.

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
        :func:`tracekit.wire.io.encoded_pieces` gives them; compressed here when the writer compresses)."""
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
                from tracekit.sets.forms import check_one_form

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
