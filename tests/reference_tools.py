"""Run the real reference tools (ASTRA-sim analytical, Chakra's Python package, Chakra's C++ feeder) from tests.

The tools live in ``../shared/tools`` beside the checkout (or ``$TRACEKIT_REFERENCE_TOOLS``); see the README
there for their provenance. Tests that use them call :func:`astra_sim`, :func:`feeder_drain` or
:func:`chakra_python`, which skip the test with the reason when the tool is absent or cannot start (a missing
shared library, for instance), so a user's clone without ``../shared`` still passes.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLS = Path(os.environ.get("TRACEKIT_REFERENCE_TOOLS", ROOT.parent / "shared" / "tools"))
ASTRA_BINARY = TOOLS / "astra-sim" / "AstraSim_Analytical_Congestion_Unaware"
FEEDER_BINARY = TOOLS / "chakra" / "et_feeder_drain"
CHAKRA_PYTHONPATH = TOOLS / "chakra"

_FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+) cycles")
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
def _astra_reason() -> str | None:
    if not ASTRA_BINARY.is_file():
        return f"ASTRA-sim binary not found at {ASTRA_BINARY}"
    return _startable([str(ASTRA_BINARY), "--help"])


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
    """True when all three reference tools can start (reported in the pytest header)."""
    return _astra_reason() is None and _feeder_reason() is None and _chakra_reason() is None


def interop_status() -> str:
    """One line for the pytest header: whether the interop suite runs, and if not why."""
    reasons = [r for r in (_astra_reason(), _feeder_reason(), _chakra_reason()) if r]
    if not reasons:
        return f"interop suite (ASTRA-sim, Chakra): ON ({TOOLS})"
    return f"interop suite (ASTRA-sim, Chakra): OFF ({'; '.join(reasons)})"


def _chakra_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CHAKRA_PYTHONPATH), env.get("PYTHONPATH", "")]))
    return env


@dataclass(frozen=True)
class AstraRank:
    """What ASTRA-sim printed for one rank: ``sys[N] finished, T cycles, exposed communication E cycles``."""

    rank: int
    finished_ns: int
    exposed_comm_ns: int


def astra_sim(
    prefix: Path | str,
    *,
    system: Path | dict,
    network: Path | str,
    memory: Path | dict | None = None,
    comm_groups: Path | dict | None = None,
    workdir: Path,
    timeout_s: float = 300.0,
) -> dict[int, AstraRank]:
    """Run ASTRA-sim's analytical backend on ``<prefix>.<rank>.et`` and return what each rank printed.

    ``system``/``memory``/``comm_groups`` are a JSON file or a dict (written to ``workdir``); ``network`` is a YAML
    file or YAML text. Skips the test when the binary cannot start; fails it when ASTRA-sim exits non-zero.
    Ranks that never print ``finished`` are absent from the result (callers assert on the count).
    """
    reason = _astra_reason()
    if reason:
        pytest.skip(reason)
    workdir.mkdir(parents=True, exist_ok=True)

    def as_file(value, name: str) -> Path:
        if isinstance(value, Path):
            return value
        path = workdir / name
        path.write_text(value if isinstance(value, str) else json.dumps(value))
        return path

    argv = [
        str(ASTRA_BINARY),
        f"--workload-configuration={prefix}",
        f"--system-configuration={as_file(system, 'system.json')}",
        f"--network-configuration={as_file(network, 'network.yml')}",
        f"--remote-memory-configuration={as_file(memory or {'memory-type': 'NO_MEMORY_EXPANSION'}, 'memory.json')}",
    ]
    if comm_groups is not None:
        argv.append(f"--comm-group-configuration={as_file(comm_groups, 'comm_groups.json')}")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=workdir)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        pytest.fail(f"ASTRA-sim exited {proc.returncode} on {prefix}:\n{tail}")
    ranks = {}
    for m in _FINISHED.finditer(proc.stdout + proc.stderr):
        rank = int(m.group(1))
        ranks[rank] = AstraRank(rank, int(m.group(2)), int(m.group(3)))
    return ranks


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
