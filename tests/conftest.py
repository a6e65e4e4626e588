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
    from astra_reference import reference_status
    from reference_tools import chakra_status

    if REAL.is_dir():
        real = f"real-data suite: ON ({REAL})"
    else:
        real = f"real-data suite: OFF ({REAL} not found; only bundled samples are tested)"
    return [real, chakra_status(), reference_status()]


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


# The test files that take longest (summed test times of `make test` with ../shared/real present, measured
# 2026-11-30), longest first. They are collected first and `make test` passes --no-loadscope-reorder, so xdist's
# --dist loadfile hands them out first and the many short files fill in at the end: both workers finish together
# (longest-first list scheduling). xdist's own order (most tests first) left few-test heavy files such as the
# tutorial for the end. A file missing here is only scheduled later; nothing else depends on this order.
HEAVY_FIRST = (
    "interop/test_astra_reference_collectives.py",
    "interop/test_astra_reference_jobs.py",
    "transforms/test_columnar_equal.py",
    "replayer/test_replay_fidelity.py",
    "converters/test_pytorch_real.py",
    "converters/test_kineto_real.py",
    "converters/test_costs_real.py",
    "interop/test_chakra_converter_on_real_captures.py",
    "interop/test_chakra_reads_every_file.py",
    "replayer/test_tutorial.py",
    "interop/test_astra_export_reference.py",
    "transforms/test_compact.py",
    "hardening/test_structural_fuzz.py",
    "core/test_io_real.py",
    "replayer/test_sweep.py",
    "core/test_streaming.py",
    "converters/test_llm_flops.py",
    "replayer/test_folding.py",
    "replayer/test_check_replay_cli.py",
    "converters/test_megatron_table1.py",
    "core/test_properties.py",
    "hardening/test_output_targets.py",
    "transforms/test_classrescale.py",
    "replayer/test_diff_match.py",
)


# Test files that take the same expensive results from a per-process cache (tests/real_kineto.py: each real Kineto
# file converted once) run on one xdist worker: with `make test`'s --dist loadfile they are one work unit, as if one
# file. (xdist's --dist loadgroup would do it with marks, but it tags node ids in a way pytest 9 ignores.)
SHARED = {
    "converters/test_kineto_real.py": "real-kineto",
    "replayer/test_replay_fidelity.py": "real-kineto",
}


def _test_file(item) -> str:
    return item.nodeid.split("::", 1)[0].removeprefix("tests/")


def _heavy_rank(item) -> int:
    path = _test_file(item)
    return HEAVY_FIRST.index(path) if path in HEAVY_FIRST else len(HEAVY_FIRST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_heavy_rank)  # stable: each file's tests keep their order
    if config.getoption("--run-slow") or FULL:
        return
    slow = [item for item in items if "slow" in item.keywords]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if "slow" not in item.keywords]


def pytest_xdist_make_scheduler(config, log):
    """xdist's --dist loadfile with the files of :data:`SHARED` as one work unit (on the controller)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedFileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return SHARED.get(path.removeprefix("tests/"), path)

    return SharedFileScheduling(config, log)
