"""Mismatched inputs give a clear report, never a hang (each replay runs under a SIGALRM time limit)."""

from __future__ import annotations

import pytest

from tracekit.converters.generators.micro import collective_bench
from tracekit.errors import DeadlockError, SpecError, ValidationError
from tracekit.model import CollectiveType
from tracekit.replayer import ReplayOptions, replay
from tracekit.replayer.simulation.checks import ReplayCheckError

from tests.replayer._engine_kit import coll, comp, one_dim, p2p, time_limit, traceset

AR, AG = CollectiveType.ALL_REDUCE, CollectiveType.ALL_GATHER
LIMIT_S = 20
NO_CHECK = ReplayOptions(check=False)


def _run(ts, spec, options=None):
    with time_limit(LIMIT_S):
        return replay(ts, spec, options=options)


def _missing_on_rank_2():
    ranks = []
    for r in range(4):
        nodes = [comp(0, 100), coll(1, AR, 1024, deps=[0]), coll(2, AR, 1024, deps=[1])]
        if r == 2:
            nodes = nodes[:2]
        ranks.append(nodes)
    return traceset(ranks)


def test_collective_missing_on_one_rank_is_caught_up_front():
    with pytest.raises(ReplayCheckError) as info:
        _run(_missing_on_rank_2(), one_dim(4, 10.0, 0.0))
    text = str(info.value)
    assert "[collective-order]" in text
    assert "rank 2 issues 1" in text or "rank 2" in text
    assert any(i.check == "collective-order" for i in info.value.issues)


def test_collective_missing_on_one_rank_deadlocks_with_a_per_rank_report():
    with pytest.raises(DeadlockError) as info:
        _run(_missing_on_rank_2(), one_dim(4, 10.0, 0.0), NO_CHECK)
    err = info.value
    assert set(err.blocked) == {0, 1, 3}  # rank 2 finished its program
    for r in (0, 1, 3):
        assert "ALL_REDUCE of 1024 bytes on group '0' (#1 of that group)" in err.blocked[r]
        assert "ranks [2] never issue it (rank 2 issues only 1)" in err.blocked[r]
    assert "deadlocked at" in str(err) and "3 of" in str(err)


def test_send_without_recv():
    ranks = [[p2p(0, True, 1, 0, 4096, tag=7)], [comp(0, 10)]]
    ts = traceset(ranks)
    with pytest.raises(ReplayCheckError, match=r"\[p2p-match\].*send to rank 1 with tag 7 has no matching recv"):
        _run(ts, one_dim(2, 10.0, 0.0))
    with pytest.raises(DeadlockError) as info:
        _run(ts, one_dim(2, 10.0, 0.0), NO_CHECK)
    assert set(info.value.blocked) == {0}
    assert "has no matching recv on rank 1" in info.value.blocked[0]


def test_two_groups_in_crossed_order_deadlock():
    # both ranks are in groups "1" and "2"; rank 0 issues A on "1" then B on "2", rank 1 the other way round.
    groups = {"1": [0, 1], "2": [0, 1]}
    r0 = [coll(0, AR, 1024, pg="1"), coll(1, AG, 512, deps=[0], pg="2")]
    r1 = [coll(0, AG, 512, pg="2"), coll(1, AR, 1024, deps=[0], pg="1")]
    ts = traceset([r0, r1], groups)
    with pytest.raises(DeadlockError) as info:
        _run(ts, one_dim(2, 10.0, 0.0))  # the up-front checks pass: each group's sequence agrees
    err = info.value
    assert set(err.blocked) == {0, 1}
    assert "ALL_REDUCE of 1024 bytes on group '1'" in err.blocked[0]
    assert "ranks [1] have not arrived" in err.blocked[0]
    assert "ALL_GATHER of 512 bytes on group '2'" in err.blocked[1]
    assert "ranks [0] have not arrived" in err.blocked[1]
    # and it says where the missing rank is
    assert "rank 1 is at node" in err.blocked[0]


def test_trace_count_disagreeing_with_the_spec():
    spec = one_dim(8, 10.0, 0.0)  # fit_to_world_size false: exactly 8 ranks
    with pytest.raises(SpecError, match=r"has 8 ranks .* but the trace set has 4"):
        _run(collective_bench(4, "all_reduce", 1024), spec)
    with pytest.raises(SpecError, match="has 8 ranks"):
        _run(collective_bench(4, "all_reduce", 1024), spec, NO_CHECK)


def test_preset_fits_but_not_to_an_odd_world():
    with pytest.raises(SpecError, match="not a multiple"):
        _run(collective_bench(12, "all_reduce", 1024), "dgx-h100")


def test_dependency_cycle_is_named():
    ranks = [[comp(0, 1, deps=[2]), comp(1, 1, deps=[0]), comp(2, 1, deps=[1])]]
    with pytest.raises(ReplayCheckError, match=r"\[cycle\]"):
        _run(traceset(ranks), one_dim(1, 1.0, 0.0))
    with pytest.raises(ValidationError, match="dependency cycle"):
        _run(traceset(ranks), one_dim(1, 1.0, 0.0), NO_CHECK)


def test_undeclared_group_is_reported():
    ranks = [[coll(0, AR, 64, pg="7")], [coll(0, AR, 64, pg="7")]]
    with pytest.raises(ReplayCheckError, match="undeclared process group '7'"):
        _run(traceset(ranks), one_dim(2, 1.0, 0.0))
    with pytest.raises(DeadlockError, match="process group '7' is not declared"):
        _run(traceset(ranks), one_dim(2, 1.0, 0.0), NO_CHECK)


def test_a_blocked_rank_not_in_communication_names_its_waiting_node():
    # rank 1's compute waits for a collective on group "1" = {0, 1} that rank 0 never issues
    groups = {"1": [0, 1]}
    r0 = [comp(0, 10)]
    r1 = [coll(0, AR, 64, pg="1"), comp(1, 10, deps=[0])]
    with pytest.raises(DeadlockError) as info:
        _run(traceset([r0, r1], groups), one_dim(2, 1.0, 0.0), NO_CHECK)
    assert set(info.value.blocked) == {1}
    assert "ranks [0] never issue it (rank 0 issues only 0)" in info.value.blocked[1]
