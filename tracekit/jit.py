"""The one way tracekit compiles a hot loop: :func:`kernel`, numba's ``njit`` with our settings.

Only the codec's per-record loops (framing, protobuf field walks, record
encoding) and a few graph passes are compiled; everything else is plain
Python and numpy.  Compiled code is cached on disk next to the module
(``cache=True``; numba falls back to its user cache directory when the
package directory is read-only, see https://numba.readthedocs.io/en/stable/
developer/caching.html), so each kernel is compiled once per machine.

When ``make install`` built them, a kernel's calls run its ahead-of-time
compiled exports instead (:mod:`tracekit._aot`): the first call looks them
up, and numba is imported only for a call whose argument types have no
current export.

Kernels take and return numpy arrays and plain ints only; they raise no
Python exceptions of their own: errors are reported through return codes
and turned into :class:`tracekit.errors.TracekitError` by the caller, which
knows the file, rank and node id.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from tracekit import _aot

F = TypeVar("F", bound=Callable[..., Any])


class _Lazy:
    """A kernel (or inlined helper, or intrinsic) before numba is imported: compiled on its first call.

    Importing numba costs about 0.5 s, so a module of kernels imports nothing heavy. A kernel's
    first call looks up its ahead-of-time exports (:func:`tracekit._aot.exports_of`); a call
    whose argument types have one runs it. Any other call imports numba, swaps every lazy
    function in the kernel's module namespace (and the namespaces of the lazy functions it
    names) for its numba dispatcher, so numba finds dispatchers where the kernel calls a
    helper, and calls it. Later calls through the module attribute go straight to the
    dispatcher.
    """

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any], kind: str = "kernel") -> None:
        self.fn, self.options, self.kind = fn, options, kind
        self.dispatcher: Any = None  # numba's dispatcher (or intrinsic), made by _ready
        self.exports: dict[tuple[Any, ...], Callable[..., Any]] | None = None  # None: not looked up yet
        functools.update_wrapper(self, fn)  # name, docstring, module of the function (help(), Sphinx)

    def compiled(self) -> Any:
        """The numba dispatcher (made once; numba compiles or loads from its cache on the first call)."""
        if self.dispatcher is None:
            _ready(self.fn.__globals__, set())
        return self.dispatcher

    def __call__(self, *args: Any) -> Any:
        exports = self.exports
        if exports is None:
            name = f"{self.fn.__module__}.{self.fn.__qualname__}"
            exports = self.exports = _aot.exports_of(name) if self.kind == "kernel" else {}
        if exports:
            export = _aot.find(exports, _aot.args_key(args))
            if export is not None:
                return export(*args)
        return self.compiled()(*args)

    def bind(self, *args: Any) -> Callable[..., Any]:
        """The callable that runs calls whose arguments have the types of ``args`` (:func:`tracekit._aot.args_key`):
        the ahead-of-time export when there is one, else numba's dispatcher.

        For a loop that calls a kernel many times with arguments of unchanging types (arrays, Python ints and
        floats): the type look-up of each call (~3 us for nine arguments) is paid once.  The caller must keep the
        types: an export does not check them.
        """
        exports = self.exports
        if exports is None:
            name = f"{self.fn.__module__}.{self.fn.__qualname__}"
            exports = self.exports = _aot.exports_of(name) if self.kind == "kernel" else {}
        if exports:
            export = _aot.find(exports, _aot.args_key(args))
            if export is not None:
                return export
        return cast(Callable[..., Any], self.compiled())

    def __repr__(self) -> str:
        return f"<kernel {self.fn.__qualname__} (not compiled yet)>"


def bound(fn: Callable[..., Any], *args: Any) -> Callable[..., Any]:
    """:meth:`_Lazy.bind` of a kernel; a kernel whose module numba already compiled (its name now a numba
    dispatcher) is returned as it is."""
    return fn.bind(*args) if isinstance(fn, _Lazy) else fn


def _ready(namespace: dict[str, Any], seen: set[int]) -> None:
    """Swap the lazy functions of ``namespace`` for numba dispatchers, and those of the namespaces they use."""
    import numba
    import numba.extending

    if id(namespace) in seen:
        return
    seen.add(id(namespace))
    for name, value in list(namespace.items()):
        if isinstance(value, _Lazy):
            if value.dispatcher is None and value.kind == "intrinsic":
                value.dispatcher = numba.extending.intrinsic(value.fn)
            elif value.dispatcher is None:
                value.dispatcher = numba.njit(**value.options)(value.fn)
            namespace[name] = value.dispatcher
            _ready(value.fn.__globals__, seen)


def kernel(fn: F) -> F:
    """Compile ``fn`` with numba (nopython mode, cached on disk, GIL released) on its first call.

    Args:
        fn: a function of numpy arrays and scalars written in numba's subset
            of Python (https://numba.readthedocs.io/en/stable/reference/pysupported.html).

    Returns:
        A lazy kernel (:class:`_Lazy`): numba is imported on the first call of a kernel, which
        compiles it the first time per machine (about a second); later processes load it from
        the cache.
    """
    return cast(F, _Lazy(fn, {"cache": True, "nogil": True}))


def inline(fn: F) -> F:
    """A helper of kernels, compiled into each kernel that calls it (numba's ``inline="always"``).

    A call from one compiled function to another costs more than a short
    helper's work (measured on the `.et` field walk: about 60 ns per
    protobuf field through a call, 15-30 ns inlined), so the per-field helpers
    of the codec's kernels are inlined.  Only kernels call them.
    """
    return cast(F, _Lazy(fn, {"inline": "always", "nogil": True}, kind="inline"))


def intrinsic(fn: F) -> F:
    """``numba.extending.intrinsic(fn)`` made when numba is imported: LLVM code a kernel emits inline.

    ``fn(typingctx, *argument types)`` returns ``(signature, codegen)``
    (https://numba.readthedocs.io/en/stable/extending/high-level.html#implementing-intrinsics); it
    imports the numba names it uses itself, so its module does not import numba.
    """
    return cast(F, _Lazy(fn, {}, kind="intrinsic"))
