"""Run the real reference tools (Chakra's Python package, Chakra's C++ feeder) from tests.

The tools live in ``../shared/tools`` beside the checkout (or ``$TRACEKIT_REFERENCE_TOOLS``); see the README
there for their provenance (ASTRA-sim is not run: tests/astra_reference.py reads its recorded outputs).
Tests that use them call :func:`feeder_drain` or
:func:`chakra_python`, which skip the test with the reason when the tool is absent or cannot start (a missing
shared library, for instance), so a user's clone without ``../shared`` still passes.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLS = Path(os.environ.get("TRACEKIT_REFERENCE_TOOLS", ROOT.parent / "shared" / "tools"))
FEEDER_BINARY = TOOLS / "chakra" / "et_feeder_drain"
CHAKRA_PYTHONPATH = TOOLS / "chakra"

_FEEDER = re.compile(r"nodes_issued=(\d+) runtime_sum=(\d+) types:(.*)$")


def _startable(argv: list[str]) -> str | None:
    """None when ``argv`` runs (any exit code) without a loader error, else the reason it cannot."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except OSError as exc:
        return f"{argv[0]} cannot start: {exc}"
    except subprocess.TimeoutExpired:
        return f"{argv[0]} did not answer within 30 s"
    if "error while loading shared libraries" in proc.stderr:
        return f"{argv[0]} cannot start: {proc.stderr.strip().splitlines()[-1]}"
    return None


@functools.cache
def _feeder_reason() -> str | None:
    if not FEEDER_BINARY.is_file():
        return f"Chakra feeder driver not found at {FEEDER_BINARY}"
    return _startable([str(FEEDER_BINARY)])


@functools.cache
def _chakra_reason() -> str | None:
    if not (CHAKRA_PYTHONPATH / "chakra").is_dir():
        return f"Chakra's Python package not found under {CHAKRA_PYTHONPATH}"
    code = "import chakra.src.third_party.utils.protolib, chakra.schema.protobuf.et_def_pb2"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_chakra_env(), timeout=60)
    if proc.returncode != 0:
        return f"Chakra's Python package does not import: {proc.stderr.strip().splitlines()[-1]}"
    return None


def interop_available() -> bool:
    """True when both reference tools can start (reported in the pytest header)."""
    return _feeder_reason() is None and _chakra_reason() is None


def interop_status() -> str:
    """One line for the pytest header: whether the interop suite runs, and if not why."""
    reasons = [r for r in (_feeder_reason(), _chakra_reason()) if r]
    if not reasons:
        return f"interop suite (Chakra): ON ({TOOLS})"
    return f"interop suite (Chakra): OFF ({'; '.join(reasons)})"


def _chakra_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CHAKRA_PYTHONPATH), env.get("PYTHONPATH", "")]))
    return env


@dataclass(frozen=True)
class FeederResult:
    """What Chakra's C++ ETFeeder driver printed for one file."""

    nodes_issued: int
    runtime_sum: int
    nodes_by_type: dict[int, int]


def feeder_drain(*files: Path) -> dict[Path, FeederResult]:
    """Drain each ``.et`` file through Chakra's C++ ``ETFeeder`` (issues every dependency-free node).

    Skips the test when the driver cannot start; fails it on a non-zero exit (the feeder rejected a file).
    """
    reason = _feeder_reason()
    if reason:
        pytest.skip(reason)
    out = {}
    for path in files:
        proc = subprocess.run([str(FEEDER_BINARY), str(path)], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            pytest.fail(f"Chakra's feeder rejected {path} (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
        m = _FEEDER.search(proc.stdout)
        assert m, f"unexpected feeder output for {path}: {proc.stdout!r}"
        types = {int(k): int(v) for k, v in (t.split(":") for t in m.group(3).split())}
        out[path] = FeederResult(int(m.group(1)), int(m.group(2)), types)
    return out


def chakra_python(code: str, *args: str, timeout_s: float = 300.0) -> str:
    """Run ``code`` in a fresh Python with Chakra's package importable; return its stdout.

    ``args`` become ``sys.argv[1:]``. Skips the test when Chakra's package does not import; fails it when the
    code exits non-zero (Chakra rejected the input).
    """
    reason = _chakra_reason()
    if reason:
        pytest.skip(reason)
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=_chakra_env(), timeout=timeout_s
    )
    if proc.returncode != 0:
        pytest.fail(f"Chakra's Python code failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}")
    return proc.stdout


CHAKRA_DECODE = """
import sys
from chakra.src.third_party.utils.protolib import openFileRd, decodeMessage
from chakra.schema.protobuf.et_def_pb2 import GlobalMetadata, Node
f = openFileRd(sys.argv[1])
meta = GlobalMetadata(); decodeMessage(f, meta)
n = 0
node = Node()
while decodeMessage(f, node):
    n += 1
    node = Node()
print(n)
"""


def chakra_node_count(path: Path) -> int:
    """Number of nodes Chakra's own Python decoder (``protolib``) reads from ``path``."""
    return int(chakra_python(CHAKRA_DECODE, str(path)).strip())
