"""The one way tracekit compiles a hot loop: :func:`kernel`, numba's ``njit`` with our settings.

Only the codec's per-record loops (framing, protobuf field walks, record
encoding) and a few graph passes are compiled; everything else is plain
Python and numpy.  Compiled code is cached on disk next to the module
(``cache=True``; numba falls back to its user cache directory when the
package directory is read-only, see https://numba.readthedocs.io/en/stable/
developer/caching.html), so each kernel is compiled once per machine.

Kernels take and return numpy arrays and plain ints only; they raise no
Python exceptions of their own: errors are reported through return codes
and turned into :class:`tracekit.errors.TracekitError` by the caller, which
knows the file, rank and node id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba

F = TypeVar("F", bound=Callable[..., Any])


def kernel(fn: F) -> F:
    """Compile ``fn`` with numba (nopython mode, cached on disk, GIL released).

    Args:
        fn: a function of numpy arrays and scalars written in numba's subset
            of Python (https://numba.readthedocs.io/en/stable/reference/pysupported.html).

    Returns:
        The compiled dispatcher; the first call per machine compiles (about a
        second), later processes load it from the cache.
    """
    return cast(F, numba.njit(cache=True, nogil=True)(fn))


def inline(fn: F) -> F:
    """A helper of kernels, compiled into each kernel that calls it (numba's ``inline="always"``).

    A call from one compiled function to another costs more than a short
    helper's work (measured on the `.et` field walk: about 60 ns per
    protobuf field through a call, 15-30 ns inlined), so the per-field helpers
    of the codec's kernels are inlined.  Only kernels call them.
    """
    return cast(F, numba.njit(inline="always", nogil=True)(fn))
