"""Compile tracekit's kernels ahead of time, so the CLI's hot paths never import numba (issue 17).

``make install`` runs this. It first runs the numba warm-up (``tools/warm_numba.py``) in this process, through
the JIT, so every kernel's dispatcher holds the signatures that real use calls it with; then it compiles each of
those signatures with numba's ``pycc`` into extension modules ``tracekit/_aot_kernels_<k>`` (git-ignored; built
for this machine's CPU, ``target_cpu = "host"``), in two processes side by side when there is much to compile
(about 36 s of CPU for the 24 signatures of 2026-12-01: 33-70 s wall on 2 shared cores), and writes ``tracekit/_aot_kernels.json``, the
manifest :mod:`tracekit._aot` reads: for each kernel, the argument-type key of each export and the SHA-256 of
each source file whose code the kernel compiles (its module, the modules of the kernels, helpers and intrinsics
it calls, transitively, and of the constants it imports).

Without setuptools or a working C compiler it prints one warning line and exits 0: the kernels then run through
numba's JIT as before. ``python tools/build_aot.py --part SPEC K OUT`` is the worker that compiles part ``K``;
``--background`` starts the whole build detached (``make demo`` does, after the demo: a first run does not wait
for it). One build runs at a time (a lock in ``.venv``); a second waits for the first.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import warm_numba  # noqa: E402 - a sibling script, found through the path set above

PACKAGE = ROOT / "tracekit"
SPLIT_ABOVE = 8  # signatures; more are compiled in two processes (~1.3 s of CPU each, plus ~3 s per module)


@dataclass(frozen=True)
class Export:
    """One compiled signature of one kernel: ``symbol`` in the extension module of its part."""

    kernel: str  # module.attr, as tracekit.jit names the kernel
    module: str
    attr: str
    symbol: str
    argtypes: tuple[Any, ...]  # numba types
    restype: Any
    weight: int  # bytes of bytecode compiled (the kernel and what it calls): what the split balances


def _global_names(code: CodeType) -> set[str]:
    """Names a code object (and the code objects nested in it) may look up as globals."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names |= _global_names(const)
    return names


def _imported_from(module: ModuleType) -> dict[str, str]:
    """``name -> tracekit module`` for each ``from tracekit... import`` of ``module``'s source: the module that
    defines the name, following re-exports (``_wirekernels`` re-exports ``_wireprim``'s codes: a changed code
    there must change the hash of the kernels that use it)."""
    found = {}
    for name, (source, original) in _from_imports(str(module.__file__ or "")).items():
        seen = {source}
        while original in (again := _from_imports(str(sys.modules[source].__file__ or ""))):
            source, original = again[original]
            if source in seen:  # an import cycle: keep the last module reached
                break
            seen.add(source)
        found[name] = source
    return found


def _from_imports(path: str) -> dict[str, tuple[str, str]]:
    """``name -> (tracekit module, its name there)`` of each ``from tracekit... import`` of the source at ``path``."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("tracekit"):
            importlib.import_module(str(node.module))
            for alias in node.names:
                found[alias.asname or alias.name] = (str(node.module), alias.name)
    return found


def _compiled_code(fn: Any, seen: set[int]) -> tuple[set[str], int]:
    """The tracekit modules whose source ``fn``'s compiled code comes from, and the bytes of bytecode of ``fn`` and
    of the kernels, helpers and intrinsics it calls (transitively)."""
    from tracekit.jit import _Lazy

    seen.add(id(fn))
    module = sys.modules[fn.__module__]
    modules, weight, imported = {fn.__module__}, len(fn.__code__.co_code), _imported_from(module)
    for name in _global_names(fn.__code__):
        if name not in fn.__globals__:
            continue
        value = fn.__globals__[name]
        callee = value.fn if isinstance(value, _Lazy) else getattr(value, "py_func", getattr(value, "_defn", None))
        if callable(callee) and hasattr(callee, "__code__"):
            if id(callee) not in seen:
                more, more_weight = _compiled_code(callee, seen)
                modules, weight = modules | more, weight + more_weight
        elif isinstance(value, ModuleType) and value.__name__.startswith("tracekit"):
            modules.add(value.__name__)
        elif name in imported:
            modules.add(imported[name])
    return {m for m in modules if m.startswith("tracekit")}, weight


def collect() -> tuple[list[Export], dict[str, dict[str, Any]]]:
    """The exports to compile (every signature the warm-up reached whose types have keys) and the manifest's
    ``kernels`` entries without their exports' module names (filled when the split is known)."""
    from tracekit import _aot
    from tracekit.jit import _Lazy

    exports, kernels = [], {}
    for name, value in warm_numba.kernel_objects():
        if isinstance(value, _Lazy):
            continue
        # pycc compiles with numba's default flags: a kernel compiled with others (fastmath, boundscheck, ...)
        # would compute otherwise ahead of time, so it keeps the JIT
        flags = {k: v for k, v in value.targetoptions.items() if k not in ("nogil", "nopython") and v is not None}
        if flags:
            print(f"build_aot: {name} keeps numba's JIT (options pycc does not apply: {flags})", file=sys.stderr)
            continue
        modules, weight = _compiled_code(value.py_func, set())
        module, attr = name.rsplit(".", 1)
        entry: dict[str, Any] = {
            "sources": {m: _aot.source_hash(str(sys.modules[m].__file__)) for m in sorted(modules)},
            "exports": [],
        }
        mine: list[Export] = []
        for i, sig in enumerate(value.signatures):
            key = tuple(_aot.type_key(t) for t in sig)
            if None in key:
                continue
            if any(k == key for k, _, _ in entry["exports"]):
                # two signatures with one key: a call could not tell which to run, so none is exported
                print(f"build_aot: {name} keeps numba's JIT (two signatures share the key {key})", file=sys.stderr)
                mine, entry["exports"] = [], []
                break
            symbol = f"{name.replace('.', '_')}__{i}"
            restype = value.overloads[sig].signature.return_type
            mine.append(Export(name, module, attr, symbol, tuple(sig), restype, weight))
            entry["exports"].append([key, None, symbol])
        exports += mine
        if entry["exports"]:
            kernels[name] = entry
    return exports, kernels


def split(exports: list[Export], parts: int) -> list[list[Export]]:
    """``exports`` in ``parts`` groups of about equal weight (heaviest first, each to the lightest group)."""
    groups: list[list[Export]] = [[] for _ in range(parts)]
    for export in sorted(exports, key=lambda e: -e.weight):
        min(groups, key=lambda g: sum(e.weight for e in g)).append(export)
    return [g for g in groups if g]


def compile_part(spec: Path, part: int, out_dir: Path) -> None:
    """The worker: compile the exports of ``part`` (pickled list of :class:`Export` lists) into
    ``out_dir/_aot_kernels_<part>``."""
    from numba.core.errors import NumbaPendingDeprecationWarning

    from tracekit.jit import _Lazy

    with warnings.catch_warnings():
        # numba.pycc is pending deprecation (numba 0.57) with no replacement released yet, and it is the only
        # ahead-of-time compiler numba has; the build is ours and tested (tests/core/test_aot.py), so say nothing
        warnings.simplefilter("ignore", NumbaPendingDeprecationWarning)
        from numba.pycc import CC

    start = time.perf_counter()
    exports = pickle.loads(spec.read_bytes())[part]
    cc = CC(f"_aot_kernels_{part}")
    cc.output_dir = str(out_dir)
    cc.target_cpu = "host"
    for e in exports:
        value = getattr(importlib.import_module(e.module), e.attr)
        dispatcher = value.compiled() if isinstance(value, _Lazy) else value  # helpers swapped for dispatchers
        cc.export(e.symbol, e.restype(*e.argtypes))(dispatcher.py_func)
    cc.compile()
    print(f"_aot_kernels_{part}: {len(exports)} compiled in {time.perf_counter() - start:.1f} s")


def _toolchain_problem() -> str | None:
    """Why pycc cannot build here (no setuptools, no working C/C++ compiler), None when it can."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pycc's pending deprecation: see compile_part
            from numba.pycc.platform import external_compiler_works
    except ImportError as exc:
        return str(exc)
    return None if external_compiler_works() else "no working C and C++ compiler"


def _remove_build() -> None:
    """Delete the manifest, then the extension modules (a build that fails leaves no manifest to trust)."""
    (PACKAGE / "_aot_kernels.json").unlink(missing_ok=True)
    for old in PACKAGE.glob("_aot_kernels_*"):
        old.unlink()


def build(parts: int | None = None) -> str | None:
    """Compile the exports of the kernels this process reached and write the manifest; a problem as one line (the
    build then leaves nothing), else None. Prints what it built: signatures, kernels, each worker's seconds."""
    from tracekit import _aot

    _remove_build()
    problem = _toolchain_problem()
    if problem:
        return problem
    exports, kernels = collect()
    groups = split(exports, parts or (2 if len(exports) > SPLIT_ABOVE else 1))
    with tempfile.TemporaryDirectory(prefix="tracekit-aot-") as tmp:
        spec = Path(tmp) / "exports.pickle"
        spec.write_bytes(pickle.dumps(groups))
        workers = [
            subprocess.Popen(
                [sys.executable, __file__, "--part", str(spec), str(k), tmp],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for k in range(len(groups))
        ]
        outputs = [w.communicate()[0] for w in workers]
        for worker, output in zip(workers, outputs):
            if worker.returncode != 0:
                lines = [line for line in output.splitlines() if line.strip()]
                return lines[-1] if lines else f"a compile worker exited with status {worker.returncode}"
        for k, group in enumerate(groups):
            for e in group:
                next(x for x in kernels[e.kernel]["exports"] if x[2] == e.symbol)[1] = f"tracekit._aot_kernels_{k}"
            for built in Path(tmp).glob(f"_aot_kernels_{k}.*"):
                os.replace(built, PACKAGE / built.name)
    manifest = {"format": _aot.FORMAT, "host": _aot.host(), "kernels": kernels}
    partial = PACKAGE / "_aot_kernels.json.tmp"
    partial.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(partial, PACKAGE / "_aot_kernels.json")
    each = "; ".join(output.splitlines()[-1] for output in outputs)
    print(f"build_aot: {len(exports)} signatures of {len(kernels)} kernels ({each})")
    return None


LOG = ROOT / ".venv" / "aot-build.log"  # a background build's output (.venv is git-ignored)
LOCK = ROOT / ".venv" / "aot-build.lock"  # held by the build running: a second one waits for it


def manifest_is_current() -> bool:
    """Whether the manifest was built here (this host) and every kernel's source files hash as at build time."""
    from tracekit import _aot

    manifest = _aot._load_manifest()
    if manifest is None:
        return False
    try:
        return all(
            _aot._module_hash(module) == digest
            for entry in manifest["kernels"].values()
            for module, digest in entry["sources"].items()
        )
    except (ImportError, KeyError, TypeError, AttributeError, ValueError):
        return False


def start_in_background() -> None:
    """Start this build detached (its own session, so a Ctrl-C in the terminal or the end of ``make`` does not
    stop it; nice 10, so commands the user runs meanwhile come first), its output in :data:`LOG`; say so.
    Nothing when the manifest is current."""
    if manifest_is_current():
        return
    LOG.parent.mkdir(exist_ok=True)
    with open(LOG, "wb") as log:
        subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: os.nice(10),
        )
    print(
        f"build_aot: compiling the kernels ahead of time in the background (log: {LOG.relative_to(ROOT)}); until "
        "it ends, commands run them through numba's JIT (compiled on first use, then cached)",
        flush=True,
    )


@contextlib.contextmanager
def _one_build_at_a_time():
    """Hold :data:`LOCK` (waiting, with a line saying so, while another build holds it)."""
    import fcntl

    LOCK.parent.mkdir(exist_ok=True)
    with open(LOCK, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("build_aot: waiting for the ahead-of-time build already running (make demo started it)", flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield True
            return
        yield False


def main() -> int:
    if sys.argv[1:2] == ["--part"]:
        compile_part(Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
        return 0
    if sys.argv[1:2] == ["--background"]:
        start_in_background()
        return 0
    with _one_build_at_a_time() as waited:
        if waited and (PACKAGE / "_aot_kernels.json").exists():
            print("build_aot: the build that was running wrote the kernels; nothing left to do", flush=True)
            return 0
        return _warm_and_build()


def _warm_and_build() -> int:
    print("build_aot: compiling tracekit's numba kernels: the JIT warm-up (cached), then ahead of time", flush=True)
    warm_numba.main()
    start = time.perf_counter()
    try:
        problem = build()
    except Exception as exc:  # noqa: BLE001 - an install never fails on this optional step; the JIT still works
        with contextlib.suppress(OSError):
            _remove_build()
        problem = f"{type(exc).__name__}: {exc}"
    if problem:
        print(f"build_aot: WARNING: no ahead-of-time kernels ({problem}); numba's JIT runs them", file=sys.stderr)
    else:
        print(f"build_aot: kernels compiled ahead of time in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
