"""Byte-identical rank files are decoded, checked and compiled once (issue 34: work per distinct program).

The job: 6 data-parallel ranks (a host launch, two kernels, a gradient all-reduce, an optimizer step), written as
rank files and read back; rank 4 differs from the others by one kernel's duration, so the set holds two distinct
programs.  A replay that shares work between identical ranks must give the result of one that does not, to the
nanosecond and node by node (the schedule included).
"""

from __future__ import annotations

import pytest

from tracekit.checks.validate import _per_program, validate_traceset
from tracekit.io import read_traceset, write_traceset
from tracekit.model import Attr, CollectiveType, ExecutionTrace, Node
from tracekit.replayer import ReplayOptions, replay
from tracekit.replayer.simulation import program as program_mod
from tracekit.replayer.simulation.attr_pass import kept_attributes
from tracekit.sets.traceset import TraceSet
from tracekit.wire import sharing

from _engine_kit import coll, comp

RANKS = 6
ODD = 4


def _rank_nodes(kernel_ns: int) -> list[Node]:
    return [
        comp(1, 3_000, cpu=True, name="launch"),
        comp(2, 20_000, [1], name="fwd"),
        comp(3, kernel_ns, [2], name="bwd"),
        coll(4, CollectiveType.ALL_REDUCE, 64 << 20, [3]),
        comp(5, 7_000, [4], stream=1, name="optimizer"),
    ]


def _write(tmp_path, nodes_of) -> str:
    prefix = str(tmp_path / "job")
    write_traceset(TraceSet({r: ExecutionTrace(nodes_of(r), rank=r) for r in range(RANKS)}), prefix)
    return prefix


@pytest.fixture()
def prefix(tmp_path) -> str:
    return _write(tmp_path, lambda r: _rank_nodes(41_000 if r == ODD else 40_000))


def _unshared(monkeypatch) -> None:
    monkeypatch.setattr(sharing, "share_identical_columns", lambda traces: 0)


def _full(result) -> dict:
    return result.to_dict(include_schedule=True)


def test_identical_rank_files_share_one_column_table(prefix):
    ts = read_traceset(prefix)
    assert sharing.share_identical_columns(ts) == 2  # the common program and rank 4's
    cols = [ts[r].columns() for r in range(RANKS)]
    assert all(c is cols[0] for r, c in enumerate(cols) if r != ODD)
    assert cols[ODD] is not cols[0]
    assert cols[ODD].duration_ns[2] == 41_000 and cols[0].duration_ns[2] == 40_000


def test_shared_replay_equals_the_unshared_one_node_by_node(prefix, monkeypatch):
    shared = replay(read_traceset(prefix), "dgx-h100", options=ReplayOptions(fold=False))
    _unshared(monkeypatch)
    alone = replay(read_traceset(prefix), "dgx-h100", options=ReplayOptions(fold=False))
    assert _full(shared) == _full(alone)
    assert [r.rank for r in shared.ranks] == list(range(RANKS))
    assert [s.rank for s in shared.schedule] == list(range(RANKS))
    assert shared.node_count == 5 * RANKS


def test_each_distinct_program_is_compiled_once(prefix, monkeypatch):
    compiled = []
    real = program_mod.compile_rank
    monkeypatch.setattr(
        program_mod, "compile_rank", lambda trace, rank, *a: compiled.append(rank) or real(trace, rank, *a)
    )
    replay(read_traceset(prefix), "dgx-h100", options=ReplayOptions(fold=False))
    assert compiled == [0, ODD]


def test_shared_findings_name_each_rank(tmp_path, monkeypatch):
    # every rank's all-reduce lacks comm_size (a warning): a rank with findings is checked on its own, so each
    # warning names its own rank and file
    def no_size(r: int) -> list[Node]:
        nodes = _rank_nodes(40_000)
        nodes[3] = nodes[3].without_attr("comm_size")
        return nodes

    ts = read_traceset(_write(tmp_path, no_size))
    with kept_attributes(ts):
        report = validate_traceset(ts)
    warned = sorted((i.rank, i.path, i.node_id) for i in report.issues if i.check == "comm-attrs")
    assert warned == [(r, ts[r].path, 4) for r in range(RANKS)]
    _unshared(monkeypatch)
    alone = validate_traceset(read_traceset(tmp_path / "job"))
    assert [str(i) for i in report.issues] == [str(i) for i in alone.issues]


def test_clean_shared_findings_carry_each_rank(prefix):
    ts = read_traceset(prefix)
    sharing.share_identical_columns(ts)
    assert not validate_traceset(ts).errors
    findings = _per_program(ts)
    assert [(f.rank, f.path) for f in findings] == [(r, ts[r].path) for r in range(RANKS)]
    assert findings[1].collectives is findings[0].collectives  # checked once, relabelled
    assert findings[ODD].collectives is not findings[0].collectives


def test_same_nodes_other_metadata_are_checked_apart(prefix):
    ts = read_traceset(prefix)
    sharing.share_identical_columns(ts)
    meta = ts[1].metadata
    other = ts[1].with_metadata(type(meta)(meta.version, (*meta.attrs, Attr("world_size", 99, "int64_val"))))
    assert other.columns() is ts[1].columns()  # with_metadata keeps the columns
    ts2 = TraceSet({**dict(ts.items()), 1: other})
    findings = _per_program(ts2)
    assert findings[1].declared_world == 99 and findings[0].declared_world is None


def _memory_set(nodes_of) -> TraceSet:
    return TraceSet({r: ExecutionTrace(nodes_of(r), rank=r) for r in range(RANKS)})


def _long(kernel_ns: int) -> list[Node]:
    """:func:`_rank_nodes` and 20 more optimizer kernels: 25 nodes."""
    return _rank_nodes(kernel_ns) + [comp(i, 1_000 + i, [i - 1], stream=1) for i in range(6, 26)]


def test_ranks_built_in_memory_share_by_value(monkeypatch):
    common = _long(40_000)

    def nodes_of(r: int) -> list[Node]:  # ranks 0-3: the very same node objects; 5: one node an equal copy
        if r == ODD:
            return _long(41_000)
        return common if r < 4 else [*common[:2], comp(3, 40_000, [2], name="bwd"), *common[3:]]

    ts = _memory_set(nodes_of)
    assert ts[5].nodes[2] is not common[2] and ts[5].nodes[2] == common[2]
    assert sharing.share_identical_columns(ts) == 2
    assert all(ts[r].columns() is ts[0].columns() for r in (1, 2, 3, 5))
    assert ts[ODD].columns() is not ts[0].columns()
    shared = replay(ts, "dgx-h100", options=ReplayOptions(fold=False))
    _unshared(monkeypatch)
    assert _full(shared) == _full(replay(_memory_set(nodes_of), "dgx-h100", options=ReplayOptions(fold=False)))


def test_equal_values_of_other_types_are_not_shared():
    # 1 == True in Python, but a bool comm_size is a finding where an integer one is not
    common = _long(40_000)

    def nodes_of(r: int) -> list[Node]:
        return [*common[:3], common[3].with_attr("comm_size", True if r == 1 else 1, "int64_val"), *common[4:]]

    ts = _memory_set(nodes_of)
    assert nodes_of(0)[3] == nodes_of(1)[3]
    assert sharing.share_identical_columns(ts) == 2
    assert ts[1].columns() is not ts[0].columns() and ts[2].columns() is ts[0].columns()
    bad = [i for i in validate_traceset(ts).errors if i.check == "comm-attrs"]
    assert [(i.rank, i.node_id) for i in bad] == [(1, 4)]


def test_mostly_distinct_objects_are_not_compared_by_value():
    # every node an equal copy (built per rank): comparing them all would cost what building the columns costs
    ts = _memory_set(lambda r: _rank_nodes(40_000))
    assert sharing.share_identical_columns(ts) == RANKS
    assert len({id(ts[r].columns()) for r in range(RANKS)}) == RANKS


def test_files_differing_past_the_sampled_ends_are_told_apart(tmp_path):
    # 2,000 nodes (about 30 KB of records): the one differing duration is far from both sampled 4 KiB ends
    def nodes_of(r: int) -> list[Node]:
        return [comp(i, 3_000 if r == 2 and i == 1_000 else 2_000, [i - 1] if i else []) for i in range(2_000)]

    ts = read_traceset(_write(tmp_path, nodes_of))
    encoded = [ts[r]._encoded for r in range(RANKS)]
    assert len(encoded[0].data) > 6 * sharing.SAMPLE_BYTES
    assert sharing._file_key(encoded[0]) == sharing._file_key(encoded[2])  # the same candidates...
    assert sharing.share_identical_columns(ts) == 2  # ...told apart by the bytes
    assert ts[2].columns() is not ts[0].columns() and ts[3].columns() is ts[0].columns()
    assert int(ts[2].columns().duration_ns[1_000]) == 3_000
