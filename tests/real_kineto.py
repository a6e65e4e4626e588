"""Each real Kineto file read and converted (Kineto-only) once per test process, for the tests that need the same files.

``tests/converters/test_kineto_real.py`` (the table of every real Kineto file) and
``tests/replayer/test_replay_fidelity.py`` (replays of the same captures) converted the same files each, the four
largest taking 4-6 s CPU apiece on this machine; both now take the conversion from here, and `make test` keeps the two
files on one xdist worker (tests/conftest.py SHARED). The cached values are the converter's own results, never
changed by the tests (traces are immutable values).
"""

from __future__ import annotations

import os
from functools import lru_cache

from tracekit.converters.pytorch.kineto_convert import KinetoConversion, convert_kineto_trace
from tracekit.converters.pytorch.kineto_reader import KinetoTrace, read_kineto
from tracekit.errors import TracekitError
from tracekit.sets.traceset import TraceSet


def converted(path: str | os.PathLike[str]) -> tuple[KinetoTrace, KinetoConversion | None, TracekitError | None]:
    """``(read_kineto(path), convert_kineto_trace of it or None, the TracekitError it raised or None)``."""
    return _converted(os.path.normpath(os.fspath(path)))


@lru_cache(maxsize=None)
def _converted(path: str) -> tuple[KinetoTrace, KinetoConversion | None, TracekitError | None]:
    kt = read_kineto(path)
    try:
        return kt, convert_kineto_trace(kt), None
    except TracekitError as exc:
        return kt, None, exc


def traceset(paths: list[str] | list[os.PathLike[str]]) -> TraceSet:
    """What ``convert_kineto(paths)`` returns (one rank per file, the rank the converter gives it), from
    :func:`converted`; the conversion errors of :func:`converted` are raised.

    Raises:
        TracekitError: a file does not convert; AssertionError: two files give the same rank.
    """
    traces = {}
    for path in paths:
        _, conv, err = converted(path)
        if err is not None:
            raise err
        assert conv is not None and conv.trace.rank not in traces, path
        traces[conv.trace.rank] = conv.trace
    return TraceSet(traces)
