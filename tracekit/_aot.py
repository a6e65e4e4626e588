"""Ahead-of-time compiled kernels: which compiled export runs a kernel call, found without importing numba.

``make install`` (``tools/build_aot.py``) compiles every signature of every kernel that its warm-up reached into
extension modules beside this file (``_aot_kernels_<k>``, numba's ``pycc``, built for the CPU of the machine that
builds them) and writes :data:`MANIFEST`: for each kernel, the argument-type key of each export and the content
hash of every source file its compiled code comes from. Importing numba and loading its cached kernels costs
about 0.4 s per process; an export costs an import of one extension module (about 0.05 s for all of them).

:func:`exports_of` gives a kernel's exports when they are current (the manifest's Python, numpy and CPU are this
process's, and every source file hashes as at build time), else nothing; :func:`args_key` is the key of a call's
arguments, computed the way ``numba.typeof`` types them
(https://numba.readthedocs.io/en/stable/reference/types.html#numba.typeof). A call whose key has no export goes
through the JIT (:mod:`tracekit.jit`), as does every call when ``TRACEKIT_AOT=0`` is set: an export does not check
its arguments' types itself, so the key must match exactly.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import platform
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

MANIFEST = Path(__file__).with_name("_aot_kernels.json")
FORMAT = 1  # of the manifest; a manifest of another format is not read
ENV = "TRACEKIT_AOT"  # "0": every kernel runs through numba's JIT

Key = Any  # str for a scalar, ("array", dtype, ndim, layout, readonly) or ("tuple", *keys); None: no export can match


_dtype_names: dict[np.dtype[Any], str | None] = {}  # value_key's names of the array dtypes seen (None: no key)


def value_key(value: Any) -> Key:
    """The key of one argument: what ``numba.typeof(value)`` would type it as (see :func:`type_key`), None if unsure.

    Arrays by dtype name, ndim, layout (C, F or A, as numba maps contiguity) and read-only flag; Python ``int``
    as ``int64`` (``uint64`` from 2**63 to 2**64), ``bool`` as ``bool``, ``float`` as ``float64``, ``None`` as
    ``none``; numpy scalars by dtype name; tuples element by element. Array subclasses, other dtypes and other
    objects give None (the call goes through the JIT).
    """
    kind = type(value)
    if kind is np.ndarray:
        dtype = value.dtype
        name = _dtype_names.get(dtype, "")
        if name == "":  # first array of this dtype (dtype.name takes ~2 us to make)
            name = _dtype_names[dtype] = dtype.name if dtype.kind in "biufc" and dtype.isnative else None
        flags = value.flags
        layout = "C" if flags.c_contiguous else "F" if flags.f_contiguous else "A"
        return None if name is None else ("array", name, value.ndim, layout, not flags.writeable)
    if kind is int:
        return "int64" if -(2**63) <= value < 2**63 else "uint64" if 0 <= value < 2**64 else None
    if kind is bool:
        return "bool"
    if kind is float:
        return "float64"
    if value is None:
        return "none"
    if kind is tuple:
        keys = tuple(value_key(v) for v in value)
        return None if None in keys else ("tuple", *keys)
    if isinstance(value, (np.integer, np.floating, np.bool_, np.complexfloating)) and value.dtype.isnative:
        return value.dtype.name
    return None


def args_key(args: tuple[Any, ...]) -> tuple[Key, ...]:
    """The key of a call: :func:`value_key` of each argument."""
    return tuple(map(value_key, args))


def _stands_for(call: Key, export: Key) -> bool:
    """Whether an argument of key ``call`` may be passed where an export takes ``export``: the same key, or the
    same but for arrays the export takes read-only and the call passes writable (same memory layout; the export
    only reads them, so it computes what an export for the writable array would)."""
    if call == export:
        return True
    if not (isinstance(call, tuple) and isinstance(export, tuple) and len(call) == len(export)):
        return False
    if call[0] == "array" == export[0]:
        return call[:4] == export[:4] and bool(export[4])
    return call[0] == "tuple" == export[0] and all(map(_stands_for, call[1:], export[1:]))


def find(exports: dict[tuple[Key, ...], Any], key: tuple[Key, ...]) -> Callable[..., Any] | None:
    """The export of ``exports`` (:func:`exports_of`) that runs a call of ``key``: the one of that key, else one
    that takes read-only what the call passes writable (:func:`_stands_for`), else None; remembered in
    ``exports`` under ``key`` (None too), so each key is looked for once."""
    if key not in exports:
        exports[key] = next(
            (
                export
                for export_key, export in list(exports.items())
                if export is not None and len(export_key) == len(key) and all(map(_stands_for, key, export_key))
            ),
            None,
        )
    return exports[key]  # type: ignore[no-any-return]


def type_key(nbtype: Any) -> Key:
    """The key :func:`value_key` gives the values numba types as ``nbtype`` (a numba type), None if unsupported.

    Used when building (numba imported): an export is made only for a signature whose every argument has a key.
    """
    from numba.core import types
    from numba.np.numpy_support import as_dtype

    if isinstance(nbtype, types.Literal):
        # a signature numba specialised for a constant (Literal[int](2): a kernel called from another with a constant
        # argument) computes for that value only; it shares the key of its plain type, so exporting it would run a
        # call with another value through code compiled for that one
        return None
    if isinstance(nbtype, types.Array):
        dtype = type_key(nbtype.dtype)
        if not isinstance(dtype, str) or dtype == "none" or not nbtype.aligned:
            return None
        return ("array", dtype, nbtype.ndim, nbtype.layout, not nbtype.mutable)
    if isinstance(nbtype, (types.Integer, types.Float, types.Boolean, types.Complex)):
        return str(as_dtype(nbtype).name)
    if isinstance(nbtype, types.NoneType):
        return "none"
    if isinstance(nbtype, (types.UniTuple, types.Tuple)):  # not the named tuples
        keys = tuple(type_key(t) for t in nbtype.types)
        return None if None in keys else ("tuple", *keys)
    return None


def as_key(stored: Any) -> Key:
    """A key read back from JSON (lists) as the tuples :func:`value_key` makes."""
    return tuple(as_key(s) for s in stored) if isinstance(stored, list) else stored


def host() -> dict[str, str]:
    """What a manifest must share with this process: Python's cache tag, numpy's version and the CPU (machine and,
    on Linux, a hash of the first processor's feature flags: the exports are built for the builder's CPU)."""
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            flags = next((line for line in cpuinfo if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = platform.processor()
    return {
        "python": str(sys.implementation.cache_tag),
        "numpy": np.__version__,
        "cpu": f"{platform.machine()} {hashlib.sha256(flags.encode()).hexdigest()[:16]}",
    }


def source_hash(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a source file's bytes (hex)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


_manifest: dict[str, Any] | None = None
_manifest_read = False
_module_hashes: dict[str, str | None] = {}


def _load_manifest() -> dict[str, Any] | None:
    """The manifest when it exists, has this format and was built for this host; read once per process."""
    global _manifest, _manifest_read
    if not _manifest_read:
        _manifest_read = True
        try:
            data = json.loads(MANIFEST.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if (
            isinstance(data, dict)
            and data.get("format") == FORMAT
            and data.get("host") == host()
            and isinstance(data.get("kernels"), dict)
        ):
            _manifest = data
    return _manifest


def _module_hash(name: str) -> str | None:
    """:func:`source_hash` of module ``name``'s file (None when it has none), once per process."""
    if name not in _module_hashes:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path is None:
            spec = importlib.util.find_spec(name)
            path = spec.origin if spec is not None else None
        try:
            _module_hashes[name] = source_hash(path) if path else None
        except OSError:
            _module_hashes[name] = None
    return _module_hashes[name]


_OWN_MODULE = re.compile(r"tracekit\._aot_kernels_[0-9]{1,3}")


def own_export(kernel: str, module: Any, symbol: Any) -> bool:
    """Whether a manifest entry names an export ``tools/build_aot.py`` makes for ``kernel``: a symbol
    ``<kernel with dots as _>__<n>`` of one of tracekit's own compiled modules ``tracekit._aot_kernels_<k>``.

    Anything else (an edited or swapped manifest naming another kernel's export, or any importable function) is
    no export: calling it with this kernel's arguments could crash the process.
    """
    if not isinstance(module, str) or not isinstance(symbol, str) or not _OWN_MODULE.fullmatch(module):
        return False
    stem, sep, index = symbol.rpartition("__")
    return bool(sep) and stem == kernel.replace(".", "_") and index.isdigit() and len(index) <= 4


def exports_of(kernel: str) -> dict[tuple[Key, ...], Callable[..., Any]]:
    """The current exports of ``kernel`` (``module.qualname``), by :func:`args_key`; empty when there are none.

    Empty when ``TRACEKIT_AOT=0``, when no manifest was built for this host, when the kernel has no export, when
    a source file its code comes from changed since the build, or when its extension module does not import.
    """
    if os.environ.get(ENV, "1") == "0":
        return {}
    manifest = _load_manifest()
    entry = manifest["kernels"].get(kernel) if manifest is not None else None
    table = {}
    try:  # an entry of another shape (an edited or damaged manifest) is no export, as a missing one is
        if entry is None or any(_module_hash(m) != h for m, h in entry["sources"].items()):
            return {}
        for key, module, symbol in entry["exports"]:
            if not own_export(kernel, module, symbol):
                return {}
            table[as_key(key)] = getattr(importlib.import_module(module), symbol)
    except (ImportError, AttributeError, KeyError, TypeError, ValueError):
        return {}
    return table
