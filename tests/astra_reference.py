"""ASTRA-sim's recorded outputs (``../shared/reference/astra-sim``) as test data: no binary is run.

The folder (or ``$TRACEKIT_ASTRA_REFERENCE``) holds 1,081 input sets with what three ASTRA-sim binaries printed
for each (its README: ``cases/<case>/result.json`` with every rank's cycles of ``c459ab6_unaware``,
``518bd51_unaware`` and ``518bd51_aware``, outcomes and reasons).  Tests call :func:`reference_cases` (which skips
the test with the reason when the folder is absent, so a user's clone without ``../shared`` passes) and
:func:`replay_case`, which replays one case with tracekit's ASTRA-sim-compatible model: the spec from ``hw
import-astra`` of the case's ``system.json`` + ``network.yml`` + ``memory.json`` (the CLI's code path,
:func:`~tracekit.replayer.simulation.astra_config.import_astra_config`), ``[astra] build`` set to the binary's, the
case's comm-group file as ``replay --comm-groups`` passes it.  Traces kept in ``<prefix>.tar.gz`` are extracted
once per session into a temporary folder.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import json
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = Path(os.environ.get("TRACEKIT_ASTRA_REFERENCE", ROOT.parent / "shared" / "reference" / "astra-sim"))
#: result.json key of each build the congestion-unaware model follows (``[astra] build``)
BUILDS = {"c459ab6": "c459ab6_unaware", "518bd51": "518bd51_unaware"}


@dataclass(frozen=True)
class Case:
    """One recorded input set and what the binaries printed (README of the reference folder)."""

    name: str
    kind: str
    folder: Path
    ranks: int
    result: dict[str, Any]

    def cycles(self, build: str) -> list[int | None] | None:
        """Per-rank cycles the build printed (None for a rank that printed nothing; None when no rank did)."""
        return self.result[BUILDS[build]]

    def complete(self, build: str) -> bool:
        """Every rank printed ``finished``."""
        got = self.cycles(build)
        return got is not None and None not in got

    def outcome(self, build: str) -> str:
        """The recorded outcome (``ok``, ``ok_crash_at_exit``, ``partial``, ``crash``, ``exit_error``, ...)."""
        return self.result["status"][BUILDS[build]]["outcome"]

    def reason(self, build: str) -> str:
        """The recorded reason of an outcome other than ``ok`` (empty for ``ok``)."""
        return self.result["status"][BUILDS[build]]["reason"] or ""

    @property
    def inputs(self) -> dict[str, Any]:
        """``result.json``'s ``inputs`` (workload prefix, config files, groups, archive)."""
        return self.result["inputs"]


def reference_status() -> str:
    """One line for the pytest header: whether the ASTRA-sim reference suite runs, and on how many cases."""
    index = REFERENCE / "index.csv"
    if not index.is_file():
        return f"ASTRA-sim reference suite: OFF ({REFERENCE} not found; no binary is ever run)"
    n = len(index.read_text().splitlines()) - 1
    return f"ASTRA-sim reference suite: ON ({n} recorded cases, {REFERENCE})"


@functools.cache
def _all_cases() -> tuple[Case, ...]:
    out = []
    for folder in sorted((REFERENCE / "cases").iterdir()):
        result = json.loads((folder / "result.json").read_text())
        out.append(Case(result["case"], result["kind"], folder, result["ranks"], result))
    return tuple(out)


def reference_cases(kind: str | None = None) -> tuple[Case, ...]:
    """The recorded cases (of one ``kind``: matrix, sizes, groups, tracekit, ...); skips the test when absent."""
    if not (REFERENCE / "cases").is_dir():
        pytest.skip(f"the ASTRA-sim reference suite needs {REFERENCE} (not present in this checkout)")
    return tuple(c for c in _all_cases() if kind is None or c.kind == kind)


def reference_case(name: str) -> Case:
    """One case by name; skips the test when the reference folder is absent."""
    return next(c for c in reference_cases() if c.name == name)


@functools.cache
def _scratch() -> Path:
    path = Path(tempfile.mkdtemp(prefix="tracekit-astra-ref-"))
    atexit.register(shutil.rmtree, path, True)
    return path


def workload_prefix(case: Case) -> Path:
    """``<folder>/<prefix>``, or the prefix in a temporary folder holding the files of ``<prefix>.tar.gz``."""
    archive = case.inputs["workload_archive"]
    if not archive:
        return case.folder / case.inputs["workload"]
    target = _scratch() / case.name
    if not target.is_dir():
        part = target.with_suffix(".part")
        shutil.rmtree(part, ignore_errors=True)
        with tarfile.open(case.folder / archive) as tar:
            tar.extractall(part, filter="data")
        part.rename(target)
    return target / case.inputs["workload"]


@functools.cache
def _imported(system: str, network: str, memory: str) -> Any:
    from tracekit.replayer.simulation.astra_config import import_astra_config

    return import_astra_config(system, network, memory).spec


def case_spec(case: Case, build: str) -> Any:
    """The spec ``hw import-astra`` makes of the case's configs, with ``[astra] build = build``.

    Raises:
        SpecError: what the import refuses (an algorithm ASTRA-sim cannot run on the network, ...).
    """
    inputs = case.inputs
    spec = _imported(
        str(case.folder / inputs["system"]), str(case.folder / inputs["network"]), str(case.folder / inputs["memory"])
    )
    return dataclasses.replace(spec, astra=dataclasses.replace(spec.astra, build=build))


def case_groups(case: Case) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The case's comm-group file as ``ReplayOptions.comm_groups`` takes it (empty when it has none)."""
    from tracekit.sets.comm_groups import read_comm_groups

    groups = case.inputs["groups"]
    return tuple(read_comm_groups(case.folder / groups).items()) if groups else ()


def replay_case(case: Case, build: str, *, fast: bool = True) -> list[int]:
    """Per-rank iteration times (ns) of tracekit's ASTRA-sim-compatible replay of ``case`` for ``build``.

    ``fast`` replays unfolded and without the up-front checks (the same times to the bit: folding is proven
    exact and checks only refuse); ``fast=False`` is ``tracekit replay``'s default path (checks, folding).

    Raises:
        TracekitError: what tracekit refuses, with its reason.
    """
    from tracekit.replayer import replay_with_traces
    from tracekit.replayer.simulation.program import ReplayOptions

    inputs = case.inputs
    options = ReplayOptions(
        comm_groups=case_groups(case),
        comm_groups_path=str(case.folder / inputs["groups"]) if inputs["groups"] else None,
        fold=not fast,
        check=not fast,
    )
    result, _ = replay_with_traces(str(workload_prefix(case)), case_spec(case, build), options=options)
    return [s.iteration_time_ns for s in sorted(result.ranks, key=lambda s: s.rank)]
