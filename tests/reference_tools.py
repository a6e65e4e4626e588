"""MLCommons Chakra from the package index (``mlc-chakra`` 1.0.0), run from tests on what tracekit reads and writes.

Chakra lives in a venv of its own, ``.venv-chakra`` in the checkout (``make interop-tools``, which ``.ci/run``
calls), or wherever ``$TRACEKIT_CHAKRA_PYTHON`` points (a Python that imports ``chakra``; its console scripts are
taken from the same environment). Tests call :func:`chakra_side`, :func:`chakra_decode`, :func:`chakra_node_count`,
:func:`chakra_python` or :func:`chakra_script`; each skips the test with the reason when Chakra is not installed, so a
clone without it still passes. Chakra's code runs in that other Python only (``tests/chakra_side.py``): tracekit's
environment never imports it.

ASTRA-sim is not run from here: its recorded outputs are data (``../shared/reference/astra-sim``).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

import pytest

from tracekit.io import read_trace

ROOT = Path(__file__).resolve().parent.parent
CHAKRA_PYTHON = Path(os.environ.get("TRACEKIT_CHAKRA_PYTHON", ROOT / ".venv-chakra" / "bin" / "python"))
CHAKRA_SIDE = Path(__file__).with_name("chakra_side.py")
CHAKRA_VERSION = "1.0.0"  # the mlc-chakra release `make interop-tools` installs; the facts asserted were read with it

_PROBE = (
    "import json, sysconfig; from importlib.metadata import version; "
    "import chakra.src.third_party.utils.protolib, chakra.schema.protobuf.et_def_pb2; "
    "print(json.dumps([version('mlc-chakra'), version('protobuf'), sysconfig.get_path('scripts')]))"
)


@functools.cache
def _probe() -> tuple[str | None, dict]:
    """(None, facts) when Chakra's package imports in :data:`CHAKRA_PYTHON`, else (the reason, {})."""
    if not CHAKRA_PYTHON.exists():
        return f"Chakra (mlc-chakra) not installed: no {CHAKRA_PYTHON} (`make interop-tools` installs it)", {}
    try:
        proc = subprocess.run([str(CHAKRA_PYTHON), "-c", _PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{CHAKRA_PYTHON} cannot start: {exc}", {}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"Chakra's package does not import in {CHAKRA_PYTHON}: {last}", {}
    chakra, protobuf, scripts = json.loads(proc.stdout)
    return None, {"mlc-chakra": chakra, "protobuf": protobuf, "scripts": Path(scripts)}


def chakra_reason() -> str | None:
    """None when Chakra from the package index is usable, else why not (the skip reason)."""
    return _probe()[0]


def chakra_status() -> str:
    """One line for the pytest header: whether the Chakra interop tests run, and if not why."""
    reason, facts = _probe()
    if reason:
        return f"Chakra interop (mlc-chakra from PyPI): OFF ({reason})"
    return f"Chakra interop (mlc-chakra from PyPI): ON ({facts['mlc-chakra']}, protobuf {facts['protobuf']}, {CHAKRA_PYTHON})"


def chakra_facts() -> dict:
    """``{"mlc-chakra": version, "protobuf": version, "scripts": its console-script folder}``; skips without it."""
    reason, facts = _probe()
    if reason:
        pytest.skip(reason)
    return facts


def chakra_python(code: str, *args: str, timeout_s: float = 300.0) -> str:
    """Run ``code`` in Chakra's Python (``args`` become ``sys.argv[1:]``); return its stdout.

    Skips the test when Chakra is not installed; fails it when the code exits non-zero (Chakra rejected the input).
    """
    chakra_facts()
    proc = subprocess.run([str(CHAKRA_PYTHON), "-c", code, *args], capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        pytest.fail(f"Chakra's Python code failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}")
    return proc.stdout


def chakra_side(command: str, *args: str | Path, timeout_s: float = 600.0):
    """``tests/chakra_side.py COMMAND ARGS...`` in Chakra's Python; returns its JSON answer (see that module)."""
    return json.loads(chakra_python(CHAKRA_SIDE.read_text(), command, *map(str, args), timeout_s=timeout_s))


def chakra_decode(*paths: Path | str) -> list[tuple[str, list[list]]]:
    """Each file as Chakra's ``protolib`` decodes it: (metadata version, node rows), one process for all files.

    A row is ``[id, name, type, data_deps, ctrl_deps, start_time_micros, duration_micros, [inputs values, shapes,
    types], [outputs ...], [[attr name, value], ...]]`` (bytes as hex, lists as lists).
    """
    return [(version, rows) for version, rows in chakra_side("decode", *paths)]


def chakra_node_count(path: Path | str) -> int:
    """Number of nodes Chakra's own Python decoder (``protolib``) reads from ``path``."""
    ((summary,),) = [chakra_side("summarize", path)]
    return sum(summary["types"].values())


def chakra_script(name: str, *args: str | Path, timeout_s: float = 300.0) -> subprocess.CompletedProcess:
    """Run Chakra's console script ``name`` (``chakra_jsonizer``, ``chakra_converter``, ``chakra_trace_link``).

    Returns the finished process whatever its exit code (a test asserts on it); skips when Chakra is not installed.
    """
    script = chakra_facts()["scripts"] / name
    return subprocess.run([str(script), *map(str, args)], capture_output=True, text=True, timeout=timeout_s)


def _value(v):
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, tuple):
        return [x.hex() if isinstance(x, bytes) else x for x in v]
    return v


def tracekit_rows(path: Path) -> tuple[str, list[list]]:
    """The file as tracekit reads it, in the row layout of ``reference_tools.chakra_decode``."""
    trace = read_trace(path)
    rows = []
    for n in trace.nodes:
        io = [[m.values, m.shapes, m.types] if m is not None else ["", "", ""] for m in (n.inputs, n.outputs)]
        attrs = [[a.name, _value(a.value)] for a in n.attrs]
        times = [n.start_time_ns // 1000, n.duration_ns // 1000]  # the micros fields: nanoseconds floored
        rows.append([n.id, n.name, int(n.type), list(n.data_deps), list(n.ctrl_deps), *times, *io, attrs])
    return trace.metadata.version, json.loads(json.dumps(rows))  # tuples as lists, as in Chakra's JSON answer


def assert_chakra_reads_as_we_do(files: list[Path]) -> dict[str, int]:
    """Every file decoded by Chakra's ``protolib`` equals tracekit's reading, node for node.

    Compared per file: the metadata version, then per node every field of :func:`tracekit_rows`. Returns the node
    count per file name. Skips the test when Chakra is not installed.
    """
    counts = {}
    for path, (version, theirs) in zip(files, chakra_decode(*files)):
        our_version, ours = tracekit_rows(path)
        assert version == our_version, path
        assert len(theirs) == len(ours), f"{path}: Chakra reads {len(theirs)} nodes, tracekit {len(ours)}"
        for row_theirs, row_ours in zip(theirs, ours):
            assert row_theirs == row_ours, f"{path}: node {row_ours[0]}: Chakra {row_theirs} != tracekit {row_ours}"
        counts[path.name] = len(ours)
    return counts
