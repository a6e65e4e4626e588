"""Compile tracekit's numba kernels once, into numba's on-disk cache, so later processes load them.

``make install`` runs this after installing. Every kernel (:func:`tracekit.jit.kernel`) is compiled on its first
call in a machine and cached next to its module (``cache=True``); without this step the first `make test` compiles
them in each pytest-xdist worker at once (the two workers race to compile and write the same entries) and the first
CLI commands a user types pay the compile too.

It runs the commands that reach the kernels on the bundled sample traces, in this process (click's ``main``) and
in a temporary directory: read and ``info``, ``transform`` (compact, scale, rescale, retarget, drop CPU ops),
``export astra``, ``generate llm``, ``replay`` and ``load``; then the column encoder, the three kernel signatures
no command reaches (:func:`_records_and_runs`; a fresh clone's first `make test` compiled them itself) and the
record type scan of a set written without being decoded (:func:`_record_types`). The kernels are called with the
argument types of real use, so the cached signatures are the ones later calls look up. Then it lists every kernel
that has no compiled signature yet (a new kernel these commands do not reach: add a command here that does). Exit
status 0 (a warm-up never fails an install); the list is a warning.

It runs with ``TRACEKIT_AOT=0``: calls go through numba even where ahead-of-time exports exist
(:mod:`tracekit._aot`). ``tools/build_aot.py`` (what ``make install`` runs) runs it first, then compiles every
signature it reached ahead of time.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import pkgutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHAKRA = ROOT / "sample_traces" / "chakra"
ENV = "TRACEKIT_AOT"  # tracekit._aot.ENV


def _commands(tmp: Path) -> list[list[str]]:
    allreduce = str(CHAKRA / "all_reduce")
    feeder = str(CHAKRA / "feeder.0.et")
    llm = str(tmp / "llm")
    return [
        ["load", str(CHAKRA / "small_chakra.0.json"), "-o", str(tmp / "small.0.et")],
        ["info", allreduce],
        ["info", feeder],
        ["validate", allreduce],
        ["transform", allreduce, "-o", str(tmp / "t1"), "--scale-compute", "2", "--scale-comm", "2", "--compact"],
        ["transform", feeder, "-o", str(tmp / "t2"), "--drop-cpu-ops", "--retarget", "a100-80gb:h100-sxm"],
        ["transform", allreduce, "-o", str(tmp / "t4"), "--scale-comm", "2", "--dp", "4"],  # attrs of spliced records
        ["replay", allreduce, "--hw", "dgx-a100"],
        ["export", "astra", allreduce, "-o", str(tmp / "astra"), "--hw", "dgx-a100"],
        [
            "generate",
            "llm",
            "--model",
            "gpt3-1.3b",
            "--layers",
            "2",
            "--tp",
            "2",
            "--pp",
            "2",
            "--dp",
            "2",
            "--global-batch",
            "4",
            "--hw",
            "dgx-a100",
            "-o",
            llm,
        ],
        ["transform", llm, "-o", str(tmp / "t3"), "--dp", "4", "--compact"],
        ["replay", llm, "--hw", "dgx-a100"],
    ]


def _run(args: list[str]) -> str:
    from tracekit.cli import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            cli.main(args=args, prog_name="tracekit", standalone_mode=False)
        except SystemExit:
            pass
        except Exception as exc:  # noqa: BLE001 - a warm-up reports and goes on; the suite tests these commands
            return f"{type(exc).__name__}: {exc}"
    return ""


def _encode_columns() -> None:
    """Three nodes through the column encoder (``tracekit.io.encode_nodes``), which no command above reaches."""
    import numpy as np

    from tracekit.io import encode_nodes

    ids = np.arange(3, dtype=np.uint64)
    encode_nodes(ids, np.full(3, 4), np.full(3, 1000), names=["warm"], name_codes=np.zeros(3, dtype=np.int64))


def _records_and_runs() -> None:
    """Kernel signatures the commands do not reach, called as the library calls them: records that are not back to
    back framed again (``frame_records``), the names of records at int64 offsets (``name_groups``; a columnar
    transform's output) and a chain run the engine cuts (``cut_run``, on the run of tests/replayer/test_chains.py)."""
    import numpy as np

    from tracekit.wire.framing import EncodedNodes
    from tracekit.io import encode_node, framed_records
    from tracekit.model import Node
    from tracekit.replayer.simulation._chains import cut_run
    from tracekit.replayer.simulation._flows import EV_NODE

    bodies = [encode_node(Node(id=i, name=f"op{i}", duration_ns=1000))[1:] for i in (1, 2)]
    starts = np.array([1, len(bodies[0]) + 2], dtype=np.int64)  # a stray byte before each body
    enc = EncodedNodes(b"".join(b"\xff" + b for b in bodies), starts, starts + [len(b) for b in bodies], None, 0)
    framed_records(enc)
    enc.columns().names  # noqa: B018 - decoded on first use
    start, end = np.array([5.0, 15.0, 35.0, 65.0]), np.array([15.0, 35.0, 65.0, 105.0])  # run 0 -> 1 -> 2 -> 3
    reason, remaining, delta = np.arange(-1, 3), np.zeros(4, dtype=np.int32), np.array([1, 1, 1, 0], np.int32)
    cut_run(start, end, reason, remaining, delta, 0, 3, 2, 15.0, EV_NODE, 0, EV_NODE)


def _record_types() -> None:
    """A set read and written again without decoding its records: the ASTRA-sim rewrite of the writer scans the
    record types (``tracekit.wire.recscan.record_types``; the commands decode the columns first)."""
    from tracekit.io import read_traceset, write_traceset

    with tempfile.TemporaryDirectory(prefix="tracekit-warm-") as tmp:
        write_traceset(read_traceset(str(CHAKRA / "all_reduce")), Path(tmp) / "copy")


def kernel_objects() -> list[tuple[str, Any]]:
    """``(module.name, object)`` of every cached numba kernel (not the inlined helpers) of ``tracekit`` (all
    subpackages, the converters and the replayer included), each as its module holds it now: a lazy kernel
    (:class:`tracekit.jit._Lazy`, never called through numba in this process) or its numba dispatcher."""
    from numba.core.registry import CPUDispatcher

    import tracekit
    import tracekit.converters
    import tracekit.replayer
    from tracekit.jit import _Lazy

    found = {}
    for package in (tracekit, tracekit.converters, tracekit.replayer):  # the last two live outside tracekit/
        for mod in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if "._proto" in mod.name or ".cli" in mod.name or "._aot_kernels" in mod.name:
                continue
            try:
                module = importlib.import_module(mod.name)
            except ImportError:  # optional dependencies (torch, ray)
                continue
            for attr, value in vars(module).items():
                if isinstance(value, _Lazy):
                    is_kernel, home = value.kind == "kernel", value.fn.__module__
                    value = value if value.dispatcher is None else value.dispatcher
                elif isinstance(value, CPUDispatcher) and type(value._cache).__name__ != "NullCache":
                    is_kernel, home = value.targetoptions.get("inline") != "always", value.__module__
                else:
                    continue
                if is_kernel and home == mod.name:
                    found[f"{mod.name}.{attr}"] = value
    return sorted(found.items())


def uncompiled_kernels() -> list[str]:
    """Names of the kernels of :func:`kernel_objects` with no compiled signature in this process (still lazy, or
    compiled for nothing)."""
    from tracekit.jit import _Lazy

    return [name for name, value in kernel_objects() if isinstance(value, _Lazy) or not value.signatures]


def main() -> int:
    start = time.perf_counter()
    os.environ[ENV] = "0"  # through numba even where ahead-of-time exports exist: this fills numba's cache
    with tempfile.TemporaryDirectory(prefix="tracekit-warm-") as tmp:
        for args in _commands(Path(tmp)):
            problem = _run(args)
            if problem:
                print(f"warm_numba: tracekit {' '.join(args)}: {problem}", file=sys.stderr)
    for step in (_encode_columns, _records_and_runs, _record_types):
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - as in _run
            print(f"warm_numba: {step.__name__}: {type(exc).__name__}: {exc}", file=sys.stderr)
    cold = uncompiled_kernels()
    print(f"warm_numba: kernels compiled and cached in {time.perf_counter() - start:.1f} s")
    if cold:
        print(f"warm_numba: not reached by the warm-up commands: {', '.join(cold)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
