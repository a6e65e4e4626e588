"""Compaction: transitive reduction and chain merging keep the replay; real traces shrink."""

from __future__ import annotations

import pytest
from _tfhelpers import comp, convert_pytorch, replay_ns
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.errors import ConfigError
from tracekit.io import read_trace
from tracekit.model import ExecutionTrace
from tracekit.sets.traceset import TraceSet
from tracekit.transforms import Compact, KeepIteration, compact_trace
from tracekit.transforms.compact import merge_chains, reduce_dependencies
from hypothesis_profiles import examples


def _critical_path(trace: ExecutionTrace) -> float:
    return trace.graph().longest_path(trace.columns().duration_ns)[0]


def test_transitive_reduction_drops_implied_deps_only():
    # 0 -> 1 -> 2, plus 0 -> 2 (implied) and 3 -> 2 (not implied)
    nodes = [comp(0, (), 1), comp(1, [0], 1), comp(3, (), 1), comp(2, [0, 1, 3], 1)]
    out = reduce_dependencies(nodes)
    assert list(out[3].data_deps) == [1, 3]
    assert out[0] is nodes[0]


def test_chain_merge_sums_and_remaps():
    # a serial stream 0 -> 1 -> 2 with 3 (another stream) waiting for 1: only 1 -> 2 can merge? no:
    # 0 -> 1 merges (1's only dep is 0, 0's only dependant is 1); 1 has two dependants so 2 stays apart
    nodes = [comp(0, (), 10), comp(1, [0], 20), comp(2, [1], 30), comp(3, [1], 40, stream=1)]
    out = merge_chains(nodes)
    assert [(n.id, n.duration_ns, n.get_attr("merged_nodes")) for n in out] == [
        (0, 30, 2),
        (2, 30, None),
        (3, 40, None),
    ]
    assert list(out[1].data_deps) == [0] and list(out[2].data_deps) == [0]


def test_a_node_with_flops_or_bytes_never_merges():
    # a timed chain 0 -> 1 -> 2 -> 3 where 1 has FLOPs and 2 bytes: only 3 could join 2, and 2 is priced
    nodes = [
        comp(0, (), 10),
        comp(1, [0], 20, num_ops=7),
        comp(2, [1], 30, tensor_bytes=64),
        comp(3, [2], 40),
        comp(4, [3], 50),
    ]
    out = merge_chains(nodes)
    assert [(n.id, n.duration_ns, n.num_ops, n.tensor_bytes, n.get_attr("merged_nodes")) for n in out] == [
        (0, 10, None, None, None),
        (1, 20, 7, None, None),
        (2, 30, None, 64, None),
        (3, 90, None, None, 2),
    ]


def test_no_merge_on_a_non_serial_stream():
    # 2 does not depend on 1 although both run on stream 0 after it: the stream may interleave
    nodes = [comp(0, (), 10), comp(1, [0], 20), comp(2, (), 5), comp(3, [1], 1)]
    assert merge_chains(nodes) is nodes


def test_no_merge_of_roofline_nodes():
    nodes = [comp(0, (), 0, num_ops=10**9), comp(1, [0], 0, num_ops=10**9, tensor_bytes=10**9)]
    assert merge_chains(nodes) is nodes


def test_compact_refuses_doing_nothing():
    with pytest.raises(ConfigError, match="does nothing"):
        Compact(merge=False, reduce=False)


@st.composite
def dags(draw):
    n = draw(st.integers(2, 40))
    nodes = []
    for i in range(n):
        deps = sorted(draw(st.sets(st.integers(0, i - 1), max_size=4))) if i else []
        stream = draw(st.integers(0, 1))
        nodes.append(comp(i, deps, draw(st.integers(1, 1000)), stream=stream))
    if draw(st.booleans()):  # make stream 0 serial so chains can merge
        last = None
        for k, node in enumerate(nodes):
            if node.get_attr("stream") == 0:
                if last is not None and last not in node.data_deps:
                    nodes[k] = node.replace(data_deps=node.data_deps + (last,))
                last = node.id
    return nodes


@settings(max_examples=examples(60), deadline=None)
@given(dags())
def test_compaction_keeps_the_critical_path(nodes):
    trace = ExecutionTrace(nodes)
    out, stats = compact_trace(trace)
    assert _critical_path(out) == _critical_path(trace)
    assert stats.nodes_after <= stats.nodes_before and stats.deps_after <= stats.deps_before
    assert sum(n.duration_ns for n in out.nodes) == sum(n.duration_ns for n in nodes)


@settings(max_examples=examples(30), deadline=None)
@given(dags())
def test_compaction_keeps_the_replayed_time(nodes):
    ts = TraceSet([ExecutionTrace(nodes)])
    assert replay_ns(Compact().apply(ts)) == replay_ns(ts)


def test_feeder_trace_dependencies_shrink_48x(samples_dir):
    trace = read_trace(samples_dir / "chakra/feeder.0.et")
    out, stats = compact_trace(trace)
    assert (stats.nodes_before, stats.deps_before) == (3664, 181_878)
    assert stats.deps_after == 3784  # a factor of 48.1
    assert _critical_path(out) == _critical_path(trace) == 46_140_000


@pytest.mark.realdata
def test_param_resnet_one_iteration_compacted(real_dir):
    d = real_dir / "pytorch/param-resnet"
    # the Kineto file is from another run (README): its kernels do not link, but host ops get durations
    ts = convert_pytorch([str(d / "resnet_et.json.gz")], [str(d / "resnet_kineto.json.gz")], allow_unlinked=True)
    one = KeepIteration(7).apply(ts)
    out, stats = Compact().apply_with_stats(one)
    s = stats[0]
    assert (s.nodes_before, s.nodes_after) == (4783, 2408)  # factor 1.99
    assert (s.deps_before, s.deps_after) == (4789, 2413)
    # 25.35 ms before issue 27's host latency rule (et_convert); the pair is from two runs, so the figure is only
    # the replay of what the conversion wrote: compaction must leave it unchanged
    assert replay_ns(out) == replay_ns(one) == 30_808_000
    from tracekit.checks.validate import validate_traceset

    assert validate_traceset(out).ok
