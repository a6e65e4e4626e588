"""The engine's measured communication model (replayer/simulation/measured_comm.py): closed forms by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.model import CollectiveType
from tracekit.replayer import ReplayOptions, replay
from tracekit.replayer.simulation.measured_comm import measured_comm_cost

from tests.replayer._engine_kit import coll, comp, one_dim, traceset

AR = CollectiveType.ALL_REDUCE
MEASURED = ReplayOptions(collective_model="measured")


def _end(result, rank: int, node_id: int) -> float:
    s = result.schedule[rank]
    return float(s.end_ns[int(np.flatnonzero(s.node_ids == node_id)[0])])


def test_tails_after_the_last_arrival():
    # ends 5000, 5500, 6000; last arrival 4000 -> tails 1000, 1500, 2000
    cost = measured_comm_cost([2000, 4000, 3500], [3000, 1500, 2500])
    assert cost.fixed_ns == 2000 and cost.member_ns == (1000.0, 1500.0, 2000.0)
    assert cost.algorithm == "measured" and not cost.shares_bandwidth


def test_equal_tails_have_no_member_times():
    cost = measured_comm_cost([100, 200], [300, 200])  # both end at 400
    assert cost.fixed_ns == 200 and cost.member_ns == ()


@pytest.mark.parametrize(
    "starts,durations",
    [
        ([0, 4000], [3000, 1500]),  # a member without a measured start
        ([1000, 4000], [2000, 1500]),  # a member ended (3000) before the last arrived (4000): clocks not comparable
    ],
)
def test_without_one_clock_the_smallest_duration(starts, durations):
    cost = measured_comm_cost(starts, durations)
    assert cost.fixed_ns == 1500 and cost.member_ns == ()


def _job(comp_ns, coll_start_ns, coll_ns):
    """Per rank: compute (measured from 1000) -> all-reduce (measured start/duration) -> 100 ns compute."""
    return traceset(
        [
            [
                comp(0, c).replace(start_time_ns=1000),
                coll(1, AR, 1 << 20, deps=[0], duration_ns=d).replace(start_time_ns=s),
                comp(2, 100, deps=[1]).replace(start_time_ns=s + d),
            ]
            for c, s, d in zip(comp_ns, coll_start_ns, coll_ns)
        ]
    )


def test_each_member_ends_its_measured_tail_after_the_last_replayed_arrival():
    ts = _job([1000, 3000, 2500], [2000, 4000, 3500], [3000, 1500, 2500])
    result = replay(ts, one_dim(3, 100.0, 500.0), options=MEASURED)
    # replayed arrivals 1000, 3000, 2500 -> last 3000; + tails 1000 / 1500 / 2000
    assert [_end(result, r, 1) for r in range(3)] == [4000, 4500, 5000]
    assert [_end(result, r, 2) for r in range(3)] == [4100, 4600, 5100]
    assert result.iteration_time_ns == 5100


def test_untimed_members_fall_back_to_the_smallest_duration():
    ts = _job([1000, 3000, 2500], [0, 0, 0], [3000, 1500, 2500])
    result = replay(ts, one_dim(3, 100.0, 500.0), options=MEASURED)
    assert [_end(result, r, 1) for r in range(3)] == [4500, 4500, 4500]  # last arrival 3000 + 1500


def test_ranks_with_other_measured_starts_do_not_fold():
    # same program and durations, collective entered 500 ns apart in the run: tails 2500 / 3000
    ts = _job([1000, 1000], [2000, 2500], [3000, 3000])
    folded = replay(ts, one_dim(2, 100.0, 500.0), options=MEASURED)
    assert folded.folding.reason is not None
    assert [_end(folded, r, 1) for r in range(2)] == [3500, 4000]
    unfolded = replay(ts, one_dim(2, 100.0, 500.0), options=ReplayOptions(collective_model="measured", fold=False))
    assert unfolded == folded
