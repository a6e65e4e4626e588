"""Replays that do not fold (issue 34 item 5): one attribute search per rank, one communication table per rank,
collectives matched by columns, fluid rates recomputed only where a link changed -- all with the same results.

The job: gpt3-1.3b cut to 2 layers, tp 2 x pp 2 x dp 2 (8 ranks: tensor-parallel all-reduces, pipeline send/recv,
data-parallel gradient all-reduces), written as rank files and read back (attributes found on the wire).
"""

from __future__ import annotations


import numpy as np
import pytest
from _engine_kit import write_small_llm

from tracekit.wire import attrsource as _attrsource
from tracekit.io import read_traceset
from tracekit.checks.rank_checks import rank_collectives
from tracekit.sets.rendezvous import comm_table
from tracekit.replayer import ReplayOptions, replay
from tracekit.replayer.simulation import _flows, matching
from tracekit.replayer.simulation.attr_pass import REPLAY_ATTRS, kept_attributes
from tracekit.replayer.simulation.specs import load_spec
from tracekit.replayer.simulation.program import compile_program, effective_spec
from tracekit.replayer.simulation.rank_compile import bool_attr
from tracekit.model.attrs import IS_CPU_OP


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> str:
    return write_small_llm(tmp_path_factory.mktemp("unfolded"))


def test_one_search_per_rank_serves_every_ask_with_the_same_values(job, monkeypatch):
    plain = read_traceset(job)

    def ask(cols, name):  # as the replay reads them: integers by the integer rule, the others as stored
        return cols.attr(name) if name in ("pg_name", "is_cpu_op") else cols.attr_int(name)

    expected = {(r, name): ask(plain[r].columns(), name) for r in plain.ranks for name in REPLAY_ATTRS}
    searches: list[tuple[str, ...]] = []
    original = _attrsource._AttrSource._find_all
    monkeypatch.setattr(
        _attrsource._AttrSource, "_find_all", lambda self, names: searches.append(tuple(names)) or original(self, names)
    )
    ts = read_traceset(job)
    with kept_attributes(ts):
        for _ in range(3):  # checks, compile and matching each ask
            for r in ts.ranks:
                for name in REPLAY_ATTRS:
                    got = ask(ts[r].columns(), name)
                    want = expected[(r, name)]
                    assert np.array_equal(got[0], want[0]) and list(got[1]) == list(want[1]), (r, name)
        assert searches == [tuple(REPLAY_ATTRS)] * len(ts)  # 8 ranks: 8 searches, not 8 x 9 x 3
        table = comm_table(ts[0])
        assert comm_table(ts[0]) is table  # built once while kept
        assert rank_collectives(ts[0]) == rank_collectives(plain[0])  # the whole table's collectives
    assert all(ts[r].columns().memo is None for r in ts.ranks)  # released
    searches.clear()
    ts[0].columns().attr_int("comm_size")
    assert searches == [("comm_size",)]  # searched again once released


def test_bool_attr_reads_integers_and_bools_by_their_truth_value(job):
    ts = read_traceset(job)
    cols = ts[0].columns()
    present, values = cols.attr(IS_CPU_OP)
    slow = np.array([bool(v) if p else False for p, v in zip(present.tolist(), values)], dtype=bool)
    assert present.sum() > 0 and slow.sum() > 0 and np.array_equal(bool_attr(cols, IS_CPU_OP), slow)


def test_collectives_matched_by_columns_equal_the_per_instance_path(job, monkeypatch):
    ts = read_traceset(job)
    spec = effective_spec(load_spec("dgx-h100"), ReplayOptions(), ts.world_size)
    fast = compile_program(ts, spec, ReplayOptions(fold=False))
    monkeypatch.setattr(matching, "_whole_group", lambda *args: False)
    slow = compile_program(ts, spec, ReplayOptions(fold=False))
    assert len(fast.instances) == len(slow.instances) > 100
    assert fast.instances == slow.instances and list(fast.instance_of) == list(slow.instance_of)


def test_rates_recomputed_where_links_changed_give_the_full_recompute_to_the_bit(job, monkeypatch):
    ts = read_traceset(job)
    options = ReplayOptions(fold=False, collective_model="alpha_beta")  # bandwidth sharing on
    incremental = replay(ts, "dgx-h100", options=options)

    def full(self, t, events):  # every active data phase, as before issue 34
        self.touched.update(link for j in self.active for _, links in self.parts[j] for link in links)
        return original(self, t, events)

    original = _flows._Flows.recompute
    monkeypatch.setattr(_flows._Flows, "recompute", full)
    everything = replay(read_traceset(job), "dgx-h100", options=options)
    assert incremental.iteration_time_ns == everything.iteration_time_ns
    assert incremental.ranks == everything.ranks and incremental.collectives == everything.collectives


def test_in_memory_columns_find_several_attributes_in_one_walk_as_get_attr_does():
    from tracekit.model import Attr, ExecutionTrace, Node, NodeType

    nodes = [
        Node(0, "a", NodeType.COMP_NODE, attrs=[Attr("stream", 3, "int64_val"), Attr("stream", 9, "int64_val")]),
        Node(1, "b", NodeType.COMP_NODE, attrs=[Attr("is_cpu_op", True, "bool_val")]),
        Node(2, "c", NodeType.COMP_NODE, data_deps=[0, 1]),
    ]
    cols = ExecutionTrace(nodes, rank=0).columns()
    cols.keep_attrs(["stream", "is_cpu_op", "tid"])
    for name in ("stream", "is_cpu_op", "tid"):
        present, values = cols.attr(name)
        assert values == [x.get_attr(name) for x in nodes]  # the first of a repeated name: 3, not 9
        assert present.tolist() == [x.get_attr(name) is not None for x in nodes]
