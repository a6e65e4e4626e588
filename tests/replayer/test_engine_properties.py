"""Hypothesis properties of the engine on random multi-rank programs."""

from __future__ import annotations

import math
from array import array

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracekit.model import CollectiveType
from tracekit.replayer import ReplayOptions, replay
from tracekit.replayer.simulation.program import compile_program, effective_spec
from tracekit.replayer.simulation.engine import simulate

from tests.replayer._engine_kit import coll, comp, make_spec, meta, traceset
from hypothesis_profiles import examples

AR = CollectiveType.ALL_REDUCE
SETTINGS = settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def programs(draw, unique_streams: bool = False):
    """Per-rank node lists: compute / metadata nodes with random backward deps and a chain of
    collectives on the default group (the same sizes in the same order on every rank)."""
    n_ranks = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(0, 1 << 20), max_size=3))
    ranks = []
    for _ in range(n_ranks):
        n_other = draw(st.integers(0, 12))
        kinds = draw(st.permutations(["k"] * len(sizes) + ["c"] * n_other))
        nodes, last_coll, k = [], None, 0
        for i, kind in enumerate(kinds):
            deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
            if kind == "k":
                if last_coll is not None and last_coll not in deps:
                    deps.append(last_coll)
                nodes.append(coll(i, AR, sizes[k], deps, stream=(1000 + i) if unique_streams else None))
                last_coll, k = i, k + 1
            elif draw(st.integers(0, 9)) == 0:
                nodes.append(meta(i, deps))
            else:
                dur = draw(st.integers(0, 1000))
                if unique_streams:
                    nodes.append(comp(i, dur, deps, stream=1000 + i))
                else:
                    cpu = draw(st.booleans())
                    nodes.append(
                        comp(
                            i,
                            dur,
                            deps,
                            stream=draw(st.integers(0, 1)),
                            cpu=cpu,
                            tid=draw(st.integers(0, 1)) if cpu else None,
                        )
                    )
        ranks.append(nodes)
    return ranks


def _spec(bandwidth_gbps: float = 50.0, latency_ns: float = 300.0):
    return make_spec(
        [{"topology": "ring", "size": 4, "bandwidth_gbps": bandwidth_gbps, "latency_ns": latency_ns}], fit=True
    )


def _by_id(result, rank):
    s = result.schedule[rank]
    return {int(i): (float(a), float(b)) for i, a, b in zip(s.node_ids, s.start_ns, s.end_ns)}


@SETTINGS
@given(programs())
def test_no_node_starts_before_its_dependencies_end(ranks):
    ts = traceset(ranks)
    result = replay(ts, _spec())
    for rank, nodes in enumerate(ranks):
        times = _by_id(result, rank)
        for node in nodes:
            start, end = times[node.id]
            assert end >= start
            for dep in node.data_deps:
                assert start >= times[dep][1]


@SETTINGS
@given(programs())
def test_exclusive_resources_run_one_node_at_a_time(ranks):
    result = replay(traceset(ranks), _spec())
    for sched in result.schedule:
        for r in np.unique(sched.resource[sched.resource >= 0]).tolist():
            idx = np.flatnonzero(sched.resource == r)
            order = idx[np.lexsort((sched.end_ns[idx], sched.start_ns[idx]))]
            starts, ends = sched.start_ns[order], sched.end_ns[order]
            assert np.all(starts[1:] >= ends[:-1])


@SETTINGS
@given(programs())
def test_critical_path_length_is_the_iteration_time(ranks):
    result = replay(traceset(ranks), _spec())
    cp = result.critical_path
    assert cp.length_ns == pytest.approx(result.iteration_time_ns, rel=1e-12, abs=1e-9)
    for a, b in zip(cp.steps, cp.steps[1:]):
        assert a.end_ns == pytest.approx(b.start_ns, rel=1e-12, abs=1e-9)
    if cp.steps:
        assert cp.steps[0].start_ns == 0.0


@st.composite
def chain_heavy(draw):
    """One rank: long runs on one stream, fed at random points by host ops (exercises cutting runs)."""
    n = draw(st.integers(2, 30))
    nodes, last = [], {}
    for i in range(n):
        on_host = draw(st.integers(0, 9)) < 3
        key = "host" if on_host else "stream"
        deps = []
        if key in last and draw(st.integers(0, 9)) < 8:
            deps.append(last[key])
        if i and draw(st.integers(0, 9)) < 3:
            extra = draw(st.integers(0, i - 1))
            if extra not in deps:
                deps.append(extra)
        dur = draw(st.integers(0, 50))
        nodes.append(comp(i, dur, deps, cpu=on_host, tid=0 if on_host else None, stream=None if on_host else 0))
        last[key] = i
    return [nodes]


def _fast_equals_slow(ranks):
    ts = traceset(ranks)
    options = ReplayOptions()
    program = compile_program(ts, effective_spec(_spec(), options, ts.world_size), options)
    fast = simulate(program)  # chain runs walked by the compiled kernel
    program.chain_delta = array("i", bytes(4 * program.n))  # every node through the event queue
    slow = simulate(program)
    assert fast.start_ns.tobytes() == slow.start_ns.tobytes()
    assert fast.end_ns.tobytes() == slow.end_ns.tobytes()
    assert fast.reason.tobytes() == slow.reason.tobytes()


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain_heavy())
def test_run_ahead_fast_path_changes_nothing_on_runs(ranks):
    _fast_equals_slow(ranks)


@SETTINGS
@given(programs())
def test_run_ahead_fast_path_changes_nothing(ranks):
    _fast_equals_slow(ranks)


def _longest_path_with_rendezvous(ranks) -> float:
    """Longest path of compute durations over all ranks, collectives joining their members (0 time)."""
    finish: dict[tuple[int, int], float] = {}
    colls: dict[int, list[tuple[int, int]]] = {}
    for r, nodes in enumerate(ranks):
        k = 0
        for node in nodes:
            if node.comm_type is not None:
                colls.setdefault(k, []).append((r, node.id))
                k += 1
    todo = {(r, n.id): n for r, nodes in enumerate(ranks) for n in nodes}
    while todo:
        progress = False
        for (r, nid), node in list(todo.items()):
            if any((r, d) not in finish for d in node.data_deps):
                continue
            ready = max((finish[(r, d)] for d in node.data_deps), default=0.0)
            if node.comm_type is None:
                finish[(r, nid)] = ready + (node.duration_ns if node.type == 4 else 0)
                del todo[(r, nid)]
                progress = True
        for members in colls.values():
            if all(m in todo for m in members) and all(
                all((m[0], d) in finish for d in todo[m].data_deps) for m in members
            ):
                t = max(max((finish[(m[0], d)] for d in todo[m].data_deps), default=0.0) for m in members)
                for m in members:
                    finish[m] = t
                    del todo[m]
                progress = True
        assert progress
    return max(finish.values(), default=0.0)


@SETTINGS
@given(programs(unique_streams=True))
def test_infinite_bandwidth_zero_latency_gives_the_longest_path(ranks):
    result = replay(traceset(ranks), _spec(bandwidth_gbps=1e15, latency_ns=0.0))
    expected = _longest_path_with_rendezvous(ranks)
    assert result.iteration_time_ns == pytest.approx(expected, abs=1e-6)
    assert not math.isnan(result.iteration_time_ns)
