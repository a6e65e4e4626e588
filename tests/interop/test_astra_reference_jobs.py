"""Every recorded whole-job case of ASTRA-sim (``../shared/reference/astra-sim``), replayed by tracekit.

Communicator groups (declared only in ASTRA-sim's comm-group file), send/recv patterns, compute + communication
graphs, jobs tracekit exported, ASTRA-sim's own traces and the edge cases: per rank, to the ns, against c459ab6
and 518bd51 with ``[astra] build`` set to each, refusals where a binary gave no complete result.  No binary is
run; tests/astra_expectations.py lists where and why tracekit differs.
"""

from __future__ import annotations

import pytest

from astra_expectations import check_cases
from astra_reference import reference_cases

BUILDS = ("518bd51", "c459ab6")
# build -> category -> cases (categories: tests/astra_expectations.py, verdict)
EXPECTED = {
    "groups": {"518bd51": {"exact": 49, "refused": 12, "different": 1}, "c459ab6": {"exact": 61, "different": 1}},
    "sendrecv": {"518bd51": {"exact": 62}, "c459ab6": {"exact": 62}},
    "mixed": {"518bd51": {"exact": 30, "different": 3}, "c459ab6": {"exact": 29, "different": 3, "runs": 1}},
    "tracekit": {"518bd51": {"runs": 13, "exact": 25}, "c459ab6": {"exact": 38}},
    "real": {
        "518bd51": {"exact": 22, "refused-though-it-ran": 1, "different": 1},
        "c459ab6": {"exact": 18, "refused-though-it-ran": 1, "different": 3, "runs": 2},
    },
    "edge": {
        "518bd51": {"exact": 9, "runs": 9, "different": 1, "refused": 2, "refused-though-it-ran": 1},
        "c459ab6": {"exact": 11, "runs": 7, "different": 1, "refused": 2, "refused-though-it-ran": 1},
    },
}


@pytest.mark.parametrize("kind", ["groups", "sendrecv", "mixed", "tracekit", "real", "edge"])
def test_every_recorded_job_per_rank(kind):
    assert check_cases(reference_cases(kind), BUILDS) == EXPECTED[kind]
