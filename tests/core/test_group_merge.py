"""Process-group declarations merged across ranks in O(1) a repeat (issue 34 item 5: unfolded replay linear in ranks).

Every rank of a job declares the same group list, whose length grows with the ranks; ``shared_groups`` hands ranks
with equal records one dict and ``GroupsMerger`` skips it by identity. These tests pin that the shortcut changes
nothing a caller sees: the same groups, the same refusals of a group declared two ways, fresh dicts from the public
``groups_from_trace``.
"""

from __future__ import annotations

import pytest

from tracekit.checks.validate import check_rank, cross_rank_checks, validate_files, validate_traceset
from tracekit.errors import ValidationError
from tracekit.io import encode_trace, trace_from_bytes
from tracekit.model import Attr, ExecutionTrace, Node, NodeType
from tracekit.model.groups import GroupsMerger, groups_from_trace, pg_init_node, shared_groups
from tracekit.sets.traceset import TraceSet

#: tp2 x dp2 over 4 ranks: tp groups 1 = {0, 1}, 2 = {2, 3}; dp groups 3 = {0, 2}, 4 = {1, 3}
GROUPS = {"1": (0, 1), "2": (2, 3), "3": (0, 2), "4": (1, 3)}


def _rank_bytes(rank: int, groups: dict[str, tuple[int, ...]] = GROUPS) -> bytes:
    """One rank's trace: the pg-init record, then an all-reduce on its tp group and one on its dp group."""
    tp, dp = ("1" if rank < 2 else "2"), ("3" if rank % 2 == 0 else "4")
    nodes = [pg_init_node(0, groups, world_size=4)]
    for i, pg in enumerate((tp, dp), start=1):
        attrs = [
            Attr("comm_type", 0, "int64_val"),
            Attr("comm_size", 1 << 20, "int64_val"),
            Attr("pg_name", pg, "string_val"),
        ]
        nodes.append(Node(id=i, name=f"all_reduce_{pg}", type=NodeType.COMM_COLL_NODE, attrs=attrs, data_deps=[i - 1]))
    return encode_trace(ExecutionTrace(nodes))


def _job(conflict: dict[str, tuple[int, ...]] | None = None) -> TraceSet:
    """Four ranks read from bytes; with ``conflict`` rank 2 declares those groups instead."""
    return TraceSet(
        {r: trace_from_bytes(_rank_bytes(r, conflict if (conflict and r == 2) else GROUPS), rank=r) for r in range(4)}
    )


def test_ranks_with_equal_records_share_one_declaration_and_the_public_reader_still_copies():
    ts = _job()
    shared = [shared_groups(t) for t in ts]
    assert shared[0] == GROUPS and all(s is shared[0] for s in shared)
    copies = [groups_from_trace(t) for t in ts]
    assert all(c == GROUPS and c is not shared[0] for c in copies)
    copies[0]["9"] = (0,)  # a caller's dict is its own
    assert "9" not in shared_groups(ts[1]) and groups_from_trace(ts[1]) == GROUPS


def test_merger_skips_a_repeat_and_names_the_first_group_declared_otherwise():
    merger = GroupsMerger()
    assert merger.add(GROUPS) is None and merger.add(GROUPS) is None
    assert merger.add(dict(GROUPS)) is None  # equal, not the same object: compared group by group
    assert merger.add({"5": (0, 3)}) is None
    assert merger.groups == {**GROUPS, "5": (0, 3)}
    assert merger.add({"5": (0, 3), "2": (2, 3), "3": (0, 1)}) == "3"
    assert merger.groups["3"] == (0, 2)  # the earlier declaration kept


def test_a_job_declares_the_same_groups_as_merging_every_rank_by_value():
    ts = _job()
    union: dict[str, tuple[int, ...]] = {}
    for t in ts:
        union.update(groups_from_trace(t))
    assert ts.process_groups == {"0": (0, 1, 2, 3), **union} and ts.world_size == 4
    assert validate_traceset(ts).ok


def test_a_group_declared_two_ways_is_refused_as_before(tmp_path):
    other = {**GROUPS, "3": (0, 3)}
    ts = _job(other)
    with pytest.raises(
        ValidationError, match=r"process group '3' declared as \[0, 2\] on another rank and as \[0, 3\]"
    ):
        ts.process_groups  # noqa: B018
    report = validate_traceset(_job(other))
    assert [i.check for i in report.errors] == ["process-groups"]
    paths = []
    for r in range(4):
        path = tmp_path / f"job.{r}.et"
        path.write_bytes(_rank_bytes(r, other if r == 2 else GROUPS))
        paths.append((r, path))
    report = validate_files(paths)
    (err,) = report.errors
    assert err.check == "process-groups" and err.rank == 2 and "'3' declared as [0, 2]" in err.message


def test_a_collective_on_a_group_the_rank_is_not_in_is_still_an_error():
    ts = _job()
    findings = [check_rank(t) for t in ts]
    groups = {**ts.process_groups, "3": (0, 1)}  # rank 2 issues its dp all-reduce on group 3, now not its own
    report = cross_rank_checks(findings, groups, 4)
    (outsider,) = [i for i in report.errors if i.check == "process-groups"]
    assert (outsider.rank, outsider.node_id) == (2, 2)
    assert "rank 2 issues a collective on group '3' it is not a member of ([0, 1])" in outsider.message
    # and rank 1, a member of the redrawn group 3 that issues nothing on it, diverges from rank 0
    assert [(i.check, i.rank) for i in report.errors if i.check != "process-groups"] == [("collective-order", 0)]


def test_merged_declarations_stop_at_the_first_rank_declaring_a_group_otherwise():
    from tracekit.checks.validate import merged_declarations

    ts = _job({**GROUPS, "4": (1, 2)})
    findings = [check_rank(t) for t in ts]
    assert findings[0].declared_groups is findings[1].declared_groups  # equal records: one dict
    groups, f, bad = merged_declarations(findings)
    assert (f.rank, bad, groups["4"]) == (2, "4", (1, 3))
    groups, f, bad = merged_declarations(findings[:2] + findings[3:])
    assert (groups, f, bad) == (GROUPS, None, None)
