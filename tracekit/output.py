"""Output safety: inputs are never written, outputs are written atomically (re-exported by :mod:`tracekit.io`).

Every write goes to a temporary file in the target directory, then is renamed
over the target, with SIGINT/SIGTERM/SIGHUP deferred around the rename, so an
output is never half-written; while :func:`protect_inputs` is on, any path a
command read is refused as an output.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator

from tracekit.errors import TracekitError

_UMASK = os.umask(0)
os.umask(_UMASK)


# ----------------------------------------------------------------------------- input protection
_PROTECTED: set[str] | None = None  # real paths of this command's inputs, while protection is on


@contextlib.contextmanager
def protect_inputs() -> Iterator[None]:
    """While active, every file read through :func:`note_input` may not be written by :func:`atomic_output`.

    The CLI runs each command under it, so ``-o`` naming one of the
    command's inputs is refused instead of destroying the input.
    """
    global _PROTECTED
    saved, _PROTECTED = _PROTECTED, set()
    try:
        yield
    finally:
        _PROTECTED = saved


def note_input(path: str | os.PathLike[str]) -> None:
    """Record ``path`` as an input of the running command (see :func:`protect_inputs`)."""
    if _PROTECTED is not None:
        _PROTECTED.add(os.path.realpath(path))


_NOT_A_FILE = {
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


def open_input(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open an input file for reading, the one way every reader opens one: recorded with :func:`note_input`;
    a device, socket or directory is refused (``/dev/zero`` or ``/dev/urandom`` never end; a FIFO is read,
    within :func:`read_input_bytes`'s cap).

    Raises:
        TracekitError: ``path`` is not a file (names what it is).
        OSError: it cannot be opened.
    """
    note_input(path)
    fh = open(path, "rb")
    kind = _NOT_A_FILE.get(stat.S_IFMT(os.fstat(fh.fileno()).st_mode))
    if kind is not None:
        fh.close()
        raise TracekitError(f"is {kind}, not a file; give an input file", path=path)
    return fh


# ----------------------------------------------------------------------------- decompression limits
DEFAULT_MAX_DECOMPRESSED_BYTES = 4 << 30
DEFAULT_MAX_GZIP_RATIO = 300


def _env_limit(name: str, default: int) -> int:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = int(float(text))
    except ValueError:
        raise TracekitError(f"{name}={text!r} is not a number") from None
    if value <= 0:
        raise TracekitError(f"{name}={text!r} must be positive")
    return value


def decompression_limits() -> tuple[int, int]:
    """``(max_bytes, max_ratio)`` for gzip input.

    ``max_bytes`` caps the decompressed size of one file (env
    ``TRACEKIT_MAX_DECOMPRESSED_BYTES``, default 4 GiB); ``max_ratio`` caps the
    decompressed/compressed size ratio once more than 64 MiB came out (env
    ``TRACEKIT_MAX_GZIP_RATIO``, default 300; real traces compress 7-30x,
    a gzip bomb of zeros about 1000x).
    """
    return (
        _env_limit("TRACEKIT_MAX_DECOMPRESSED_BYTES", DEFAULT_MAX_DECOMPRESSED_BYTES),
        _env_limit("TRACEKIT_MAX_GZIP_RATIO", DEFAULT_MAX_GZIP_RATIO),
    )


def input_size_limit() -> int:
    """Bytes one input may hold, compressed or not: ``TRACEKIT_MAX_DECOMPRESSED_BYTES`` (default 4 GiB), the cap
    on gzip input (:func:`decompression_limits`)."""
    return decompression_limits()[0]


def read_input_bytes(path: str | os.PathLike[str]) -> bytes:
    """All bytes of an input file (:func:`open_input`), at most :func:`input_size_limit`: a regular file over it
    is refused before a byte is read, a FIFO once more than that came out.

    Raises:
        TracekitError: not a file, or more bytes than the limit (naming the variable that raises it).
        OSError: it cannot be read.
    """
    limit = input_size_limit()
    with open_input(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        data = b"" if size > limit else _read_at_most(fh, limit + 1, size)
    if size > limit or len(data) > limit:
        raise TracekitError(
            f"holds more than {limit:,} bytes (limit: set TRACEKIT_MAX_DECOMPRESSED_BYTES to raise it)", path=path
        )
    return data


def _read_at_most(fh: Any, most: int, size: int) -> bytes:
    """Up to ``most`` bytes of ``fh`` in blocks of the file's size (at least 1 MiB): ``fh.read(most)`` would have
    Python allocate ``most`` bytes up front (4 GiB for every spec or config file read under the default limit)."""
    chunks, total = [], 0
    block = max(size + 1, 1 << 20)
    while total < most:
        chunk = fh.read(min(block, most - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def check_output(path: str | os.PathLike[str]) -> None:
    """Raise TracekitError when ``path`` is an input of the running command, or the prefix of an input trace set
    (``job`` beside ``job.0.et``: a file of that name would make the prefix name it, hiding the set)."""
    if _PROTECTED is None:
        return
    real = os.path.realpath(path)
    if real in _PROTECTED:
        raise TracekitError("refusing to overwrite an input of this command; choose another output path", path=path)
    import re

    member = re.compile(re.escape(real) + r"\.(\d+\.et(\.gz)?|classes\.json)$")
    shadowed = sorted(p for p in _PROTECTED if member.match(p))
    if shadowed:
        raise TracekitError(
            f"is the prefix of an input trace set ({os.path.basename(shadowed[0])} ...): a file of that name would "
            "hide the set from every command that reads the prefix; choose another output path",
            path=path,
        )


# ----------------------------------------------------------------------------- atomic output
def output_target(path: str | os.PathLike[str]) -> tuple[Path, bool]:
    """Where a write to ``path`` lands: ``(file to replace or write, write_through)``.

    A symlink is followed, so its target is replaced and the link stays.  A
    path that names something other than a regular file (a device such as
    ``/dev/null``, a FIFO, a socket, or ``/dev/stdout`` and the other
    ``/proc`` magic links) is written through (opened and written in place,
    ``write_through`` True): renaming a file over it would destroy it.
    """
    p = Path(path)
    try:
        st = os.stat(p)  # follows symlinks
    except (FileNotFoundError, NotADirectoryError):
        st = None
    real = Path(os.path.realpath(p))
    if st is not None and (not stat.S_ISREG(st.st_mode) or str(real).startswith("/proc/")):
        return p, True
    return (real if p.is_symlink() else p), False


_DEFERRED_SIGNALS = {getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)}


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP for a few statements (creating a temporary file and recording its name, renaming
    a finished set into place), so an interrupt cannot land between them and leave a file nobody knows to remove
    or part of a set; a signal that came meanwhile is raised again at the end, to the handler that was in place.

    The handlers are swapped for a recorder, not masked with ``pthread_sigmask``: a mask holds only the calling
    thread, and the kernel hands a process signal to any thread that does not block it (numpy's OpenBLAS starts
    one at import), whose arrival still ran the Python handler in the main thread at once.  Outside the main
    thread Python runs no handler, so there is nothing to hold.
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: h for s in _DEFERRED_SIGNALS if (h := signal.getsignal(s)) not in (None, signal.SIG_IGN)}
    caught: list[int] = []
    for s in old:
        signal.signal(s, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for s in caught:
            signal.raise_signal(s)


def make_parents(folder: Path) -> list[Path]:
    """Create ``folder`` and missing parents; returns those created (deepest last) for :func:`remove_if_empty`."""
    missing = []
    f = Path(folder)
    while not f.exists() and f != f.parent:
        missing.append(f)
        f = f.parent
    if f.exists() and not f.is_dir():  # e.g. `-o README.md/out.json`: mkdir would only say "File exists"
        raise TracekitError("not a directory (the output path needs it as a folder)", path=f)
    folder.mkdir(parents=True, exist_ok=True)
    return list(reversed(missing))


def remove_if_empty(created: list[Path]) -> None:
    """Remove the folders :func:`make_parents` created, deepest first, while they are empty (a failed write)."""
    for f in reversed(created):
        try:
            f.rmdir()
        except OSError:
            return


def _new_temp(target: Path) -> tuple[int, str]:
    """A new temporary file (fd, path) beside ``target``; an OSError names ``target``, not the temporary name."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tk-", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(target)) from None
    os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file the usual permissions
    return fd, tmp


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; rename it onto ``path`` on success.

    On any exception the temporary file is removed and ``path`` is untouched.
    Parent directories are created.  ``mode`` is ``"wb"`` or ``"w"`` (UTF-8).
    A symlink is followed (its target is replaced); a device, FIFO or
    ``/dev/stdout`` is written through, never replaced (see :func:`output_target`).

    Raises:
        TracekitError: ``path`` is an input of the running command (see :func:`protect_inputs`).
    """
    check_output(path)
    target, through = output_target(path)
    kwargs: dict[str, Any] = {} if "b" in mode else {"encoding": "utf-8"}
    if through:
        try:
            with open(target, mode, **kwargs) as fh:
                yield fh
        except OSError as exc:
            raise TracekitError(f"cannot write: {exc.strerror or exc}", path=path) from None
        return
    created = make_parents(target.parent)
    tmp = None
    try:
        with _signals_deferred():
            fd, tmp = _new_temp(target)
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
        os.replace(tmp, target)
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        remove_if_empty(created)
        if isinstance(exc, OSError) and not isinstance(exc, TracekitError) and exc.filename is None:
            # a write to the temporary file failed (a full disk): name the output, not nothing
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise


def write_files_atomic(files: dict[Path, bytes], *, remove: tuple[Path, ...] = ()) -> None:
    """Write several files as one unit: every file goes to a temporary file first, then all are renamed into
    place together (signals deferred), and the stale files ``remove`` (an earlier run's output this run does not
    make) are deleted with them. A failure (a full disk) leaves every earlier file as it was and no temporary.

    Raises:
        TracekitError: an output is an input of the running command.
        OSError: a file cannot be written (names it).
    """
    temps: dict[Path, str] = {}
    created: list[Path] = []
    try:
        for path, data in files.items():
            check_output(path)
            created += make_parents(path.parent)
            with _signals_deferred():
                fd, tmp = _new_temp(path)
                temps[path] = tmp
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, str(path)) from None
        with _signals_deferred():
            for path, tmp in temps.items():
                os.replace(tmp, path)
            temps.clear()
            for path in remove:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
    finally:
        for tmp in temps.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if temps:
            remove_if_empty(created)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_output`).

    Raises:
        TracekitError: ``path`` is an input of the running command, or it cannot be written.
    """
    with atomic_output(path, "wb") as fh:
        fh.write(data)
