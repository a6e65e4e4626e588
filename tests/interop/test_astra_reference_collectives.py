"""Every recorded single-collective case of ASTRA-sim (``../shared/reference/astra-sim``), replayed by tracekit.

Matrix (collective x algorithm x topology x NPUs x splits), sizes, multi-dimensional and random networks, and the
congestion cases (their congestion-unaware results): per rank, to the ns, against c459ab6 and 518bd51 (the
congestion-unaware backends), refusals where a binary gave no complete result.  No binary is run.
tests/astra_expectations.py lists where and why tracekit differs.
"""

from __future__ import annotations

import pytest

from astra_expectations import check_cases
from astra_reference import replay_case, reference_cases

BUILDS = ("518bd51", "c459ab6")


@pytest.mark.parametrize("kind", ["matrix", "sizes", "multidim", "random"])
def test_every_recorded_world_collective_per_rank(kind):
    # one collective on every NPU, no compute: [astra] build changes nothing here (it matters for sub-world
    # groups and zero-duration compute), so the 518bd51 replay is compared with both records
    # (test_the_build_does_not_change_a_world_collective checks that claim)
    counts = check_cases(reference_cases(kind), BUILDS, replay_builds=("518bd51",))
    want = {
        "matrix": {"exact": 408, "refused": 72},
        "sizes": {"exact": 142, "different": 2},
        "multidim": {"exact": 111, "different": 1},
        "random": {"exact": 40},
    }[kind]
    assert counts == {b: want for b in BUILDS}


def test_the_build_does_not_change_a_world_collective():
    cases = [c for c in reference_cases("matrix") if c.complete("518bd51")][::17]
    assert len(cases) == 24
    assert all(replay_case(c, "c459ab6") == replay_case(c, "518bd51") == c.cycles("518bd51") for c in cases)


def test_every_recorded_congestion_case_per_rank_unaware():
    # the congestion-unaware results of the congestion kind (Switch of 8, and two groups at once on a ring)
    counts = check_cases(reference_cases("congestion"), BUILDS)
    assert counts == {b: {"exact": 64} for b in BUILDS}
