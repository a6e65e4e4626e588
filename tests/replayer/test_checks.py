"""Up-front checks: what each one finds, with rank and node."""

from __future__ import annotations

import pytest

from tracekit.converters.generators.micro import collective_bench, send_recv_bench
from tracekit.errors import ReplayError, SpecError
from tracekit.model import CollectiveType
from tracekit.replayer.simulation.specs import load_spec
from tracekit.replayer.simulation.checks import (
    ReplayCheckError,
    check_replay_inputs,
    check_spec_size,
    find_problems,
    p2p_issues,
)
from tracekit.sets.traceset import TraceSet

from tests.replayer._engine_kit import coll, one_dim, p2p, traceset

AR = CollectiveType.ALL_REDUCE


def test_a_sound_set_has_no_problems():
    assert find_problems(collective_bench(4, "all_reduce", 1024, iterations=3)) == []
    assert find_problems(send_recv_bench(4, "pairwise", 1024)) == []
    check_replay_inputs(collective_bench(4, "all_reduce", 1024), one_dim(4, 1.0, 0.0))


def test_spec_size():
    check_spec_size(collective_bench(64, "all_reduce", 8), load_spec("dgx-h100"))  # fitted: 8 x 8
    with pytest.raises(SpecError, match=r"has 2 ranks \(2\) but the trace set has 3"):
        check_spec_size(collective_bench(3, "all_reduce", 8), one_dim(2, 1.0, 0.0))
    with pytest.raises(ReplayError, match="no traces"):
        check_spec_size(TraceSet({}), one_dim(2, 1.0, 0.0))


def test_sizes_disagreeing_across_ranks():
    ranks = [[coll(0, AR, 1024)], [coll(0, AR, 2048)]]
    issues = find_problems(traceset(ranks))
    assert [(i.check, i.rank, i.node_id) for i in issues] == [("collective-order", 1, 0)]
    assert "ALL_REDUCE of 2048 bytes here but ALL_REDUCE of 1024 bytes on rank 0" in issues[0].message


def test_unmatched_recv_and_wrong_self_rank():
    ranks = [[p2p(0, False, 1, 0, 64, tag=3)], [p2p(0, True, 0, 1, 64, tag=4)]]
    issues = p2p_issues(traceset(ranks))
    assert sorted((i.check, i.rank) for i in issues) == [("p2p-match", 0), ("p2p-match", 1)]
    bad = [[p2p(0, True, 1, 5, 64)], [p2p(0, False, 0, 1, 64)]]  # a send claiming comm_src 5 on rank 0
    msgs = [i.message for i in p2p_issues(traceset(bad)) if i.check == "p2p-attrs"]
    assert msgs == ["send has comm_src 5, but it is on rank 0"]


def test_error_lists_all_issues():
    ranks = [[coll(0, AR, 1024), coll(1, AR, 8)], [coll(0, AR, 2048)], [coll(0, AR, 1024)]]
    with pytest.raises(ReplayCheckError) as info:
        check_replay_inputs(traceset(ranks), one_dim(3, 1.0, 0.0))
    assert len(info.value.issues) == 2
    assert str(info.value).startswith("2 problem(s) found before replay")
