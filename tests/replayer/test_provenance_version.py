"""A result's provenance names tracekit's version from ``tracekit.__version__`` (no ``importlib.metadata`` import in
a replay): that string must be the installed distribution's version, which pyproject.toml sets."""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path

import tracekit
from tracekit.model import ExecutionTrace
from tracekit.replayer import ReplayOptions, replay
from tracekit.sets.traceset import TraceSet

from _engine_kit import comp

ROOT = Path(__file__).resolve().parents[2]


def test_version_is_the_distributions():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert tracekit.__version__ == declared == version("tracekit")


def test_a_result_names_it():
    ts = TraceSet({0: ExecutionTrace([comp(1, 5_000)], rank=0)})
    result = replay(ts, "dgx-h100", options=ReplayOptions(fold=False))
    assert result.provenance.tracekit_version == tracekit.__version__
    assert result.iteration_time_ns == 5_000
