"""Shared fixtures: paths to bundled data and to the wider real-data set."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
TEST_DATA = ROOT / "tests" / "data"
REAL = Path(os.environ.get("TRACEKIT_REAL_DATA", ROOT.parent / "shared" / "real"))


def pytest_report_header(config):
    from reference_tools import interop_status

    if REAL.is_dir():
        real = f"real-data suite: ON ({REAL})"
    else:
        real = f"real-data suite: OFF ({REAL} not found; only bundled samples are tested)"
    return [real, interop_status()]


@pytest.fixture(scope="session")
def real_dir() -> Path:
    """``../shared/real``; tests using it are skipped, with the reason shown, when it is absent."""
    if not REAL.is_dir():
        pytest.skip(f"real-data suite needs {REAL} (not present in this checkout)")
    return REAL


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    return SAMPLES


@pytest.fixture(scope="session")
def test_data_dir() -> Path:
    return TEST_DATA


# ----------------------------------------------------------------------------- make test vs make test-full
# `make test` runs the default hypothesis profile (fewer examples per property) and leaves out the tests marked
# `slow` (the redundant cases of large matrices; one representative of each kind stays in `make test`).
# `make test-full` sets HYPOTHESIS_PROFILE=full and passes --run-slow. Acceptance tests are never marked slow.
from hypothesis_profiles import FULL  # noqa: E402 - registers and loads the hypothesis profiles


def pytest_addoption(parser):
    parser.addoption(
        "--run-slow",
        action="store_true",
        default=False,
        help="also run the tests marked slow (make test-full; implied by HYPOTHESIS_PROFILE=full)",
    )


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow") or FULL:
        return
    slow = [item for item in items if "slow" in item.keywords]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if "slow" not in item.keywords]
