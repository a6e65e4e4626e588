"""The output lock of a trace-set prefix: a writer holds it exclusively, readers share it (re-exported by
:mod:`tracekit.io`).

The lock is a file ``.<name>.tk-lock`` beside the prefix, locked with ``flock``: a writer holds it from its start
(:func:`hold_prefix`, or a :class:`tracekit.sets.io.TraceSetWriter` of the prefix), a reader for as long as it reads
(:func:`hold_prefix_shared`); the last holder removes the file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from pathlib import Path
from typing import Iterator

from tracekit.output import _UMASK, _signals_deferred, make_parents, remove_if_empty
from tracekit.errors import TracekitError

_HELD: dict[str, int] = {}  # lock files this process holds through hold_prefix, by absolute path -> fd
_SHARED: set[str] = set()  # lock files this process holds shared (hold_prefix_shared), by absolute path


def _lock_path_of(prefix: str) -> Path:
    base = Path(prefix)
    return base.parent / f".{base.name}.tk-lock"


def _held_key(lock_path: Path) -> str:
    return os.path.abspath(lock_path)


def _take_lock(prefix: str, lock_path: Path) -> int:
    """Open and ``flock`` the lock file of ``prefix``; returns its descriptor.

    Raises:
        TracekitError: another process holds it (names the prefix).
        OSError: the lock file cannot be created (names the prefix).
    """
    while True:
        with _signals_deferred():  # the lock file and the record of it come together
            try:
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666 & ~_UMASK)
            except OSError as exc:  # name the output the user gave, not the lock file
                raise OSError(exc.errno, exc.strerror, str(prefix)) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                try:  # a shared hold succeeds when only readers hold it (hold_prefix_shared)
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    doing = "reading"
                except BlockingIOError:
                    doing = "writing"
                os.close(fd)
                raise TracekitError(
                    f"another tracekit command is {doing} this output prefix right now "
                    f"(lock {lock_path.name} is held); wait for it or choose another prefix",
                    path=prefix,
                ) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(lock_path).st_ino
            except FileNotFoundError:
                same = False
            if same:  # not a lock file its previous holder unlinked after we opened it
                return fd
            os.close(fd)


def _release_lock(fd: int, lock_path: Path) -> None:
    with _signals_deferred():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock_path)
        os.close(fd)


def check_prefix_names_files(prefix: str) -> None:
    """Refuse an output prefix that is a device, FIFO or other non-file (``-o /dev/null`` wrote
    ``/dev/null.0.et`` into ``/dev``): a trace set is files ``<prefix>.<rank>.et`` beside the prefix.

    Raises:
        TracekitError: ``prefix`` exists and is not a regular file or folder name to add suffixes to.
    """
    try:
        st = os.stat(prefix)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        raise TracekitError(
            "is not a file prefix: a trace set is written as <prefix>.<rank>.et files beside it; give a prefix "
            "such as out/job (a device such as /dev/null cannot hold them)",
            path=prefix,
        )


@contextlib.contextmanager
def hold_prefix(prefix: str | os.PathLike[str]) -> "Iterator[None]":
    """Hold the output lock of ``prefix`` for the whole block (a command holds it from its start, before it
    reads its inputs); a :class:`TraceSetWriter` of the same prefix in this process uses it and leaves it held.

    Raises:
        TracekitError: another process (another tracekit command) is writing ``prefix``: names the prefix.
        OSError: the lock file cannot be created (names the prefix).
    """
    prefix = os.fspath(prefix)
    check_prefix_names_files(prefix)
    base = Path(prefix)
    created = make_parents(base.parent if str(base.parent) else Path("."))
    lock_path = _lock_path_of(prefix)
    key = _held_key(lock_path)
    if key in _HELD:  # held by an outer block already
        yield
        return
    if key in _SHARED:  # this command reads the set there (hold_prefix_shared): it would overwrite its input
        raise TracekitError(
            "the output prefix is the trace set this command reads; choose another output prefix", path=prefix
        )
    try:
        _HELD[key] = _take_lock(prefix, lock_path)
    except BaseException:
        remove_if_empty(created)
        raise
    try:
        yield
    finally:
        _release_lock(_HELD.pop(key), lock_path)
        remove_if_empty(created)


@contextlib.contextmanager
def hold_prefix_shared(prefix: str | os.PathLike[str]) -> "Iterator[None]":
    """Hold the lock of ``prefix`` shared while a command reads the trace set there, so no command writes it
    meanwhile (a writer holds it exclusively: :func:`hold_prefix`); readers share it. The trial replayed a set
    while another command rewrote it: the result mixed the two.

    Nothing is held where the lock file cannot be made (a read-only folder: nobody writes there either).

    Raises:
        TracekitError: another tracekit command is writing ``prefix`` now (names the prefix and the lock).
    """
    prefix = os.fspath(prefix)
    lock_path = _lock_path_of(prefix)
    if _held_key(lock_path) in _HELD or not lock_path.parent.is_dir():  # this command writes it, or no folder
        yield
        return
    fd = _take_shared(prefix, lock_path)
    key = _held_key(lock_path)
    if fd is not None:
        _SHARED.add(key)
    try:
        yield
    finally:
        if fd is not None:
            _SHARED.discard(key)
            _release_shared(fd, lock_path)


def _take_shared(prefix: str, lock_path: Path) -> int | None:
    """A shared ``flock`` on the lock file of ``prefix`` (made if missing); None where it cannot be made."""
    while True:
        with _signals_deferred():
            try:
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666 & ~_UMASK)
            except OSError:
                return None
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise TracekitError(
                    f"another tracekit command is writing this trace set right now (lock {lock_path.name} is "
                    "held); wait for it, reading it now could mix old and new ranks",
                    path=prefix,
                ) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(lock_path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            os.close(fd)


def _release_shared(fd: int, lock_path: Path) -> None:
    """Let go of a shared hold; the last holder (its upgrade to exclusive succeeds) removes the lock file."""
    with _signals_deferred():
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock_path)
        except BlockingIOError:
            pass
        os.close(fd)
