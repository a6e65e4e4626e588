"""The host-time rule (converters/pytorch/host_timing.py) and its use by the Kineto conversion, by hand."""

from __future__ import annotations

import logging

from _pytorch_synth import cpu, kineto_doc
from tracekit.converters.pytorch.host_timing import HostSpan, thread_timing
from tracekit.converters.pytorch.kineto_convert import convert_kineto_trace
from tracekit.converters.pytorch.kineto_reader import parse_kineto
from tracekit.replayer.measured import check_replay
from tracekit.traceset import TraceSet


def _replay_rows(events):
    trace = convert_kineto_trace(parse_kineto(kineto_doc(events), path="k.json")).trace
    return trace, check_replay(TraceSet({0: trace})).rows


def test_partial_overlap_is_clamped_counted_and_not_double_counted():
    # a [0,10), b [5,15) on one thread: b clamped to [5,10); [10,15) is uncovered inside step [0,20)
    t = thread_timing([HostSpan("s", 0, 20, True), HostSpan("a", 0, 10, False), HostSpan("b", 5, 15, False),
                       HostSpan("c", 15, 20, False)])
    assert t.partial_overlaps == 1
    assert t.duration_ns == {"s": 0, "a": 5, "b": 5, "c": 10}  # c: 5 own + 5 uncovered before it
    assert sum(t.duration_ns.values()) == 20  # the step's span, once


def test_one_thread_cpu_only_step_replays_to_its_measured_span(caplog):
    events = [cpu("ProfilerStep#3", 0, 100, cat="user_annotation"), cpu("aten::mm", 10, 30),
              cpu("aten::add", 45, 20), cpu("aten::relu", 70, 10)]
    trace, rows = _replay_rows(events)
    step = next(n for n in trace.nodes if n.name == "ProfilerStep#3")
    assert step.duration_ns == 0 and step.get_attr("range_duration_ns") == 100_000
    (row,) = rows
    assert (row.step, row.measured_ns, row.predicted_ns) == (3, 100_000, 100_000)


def test_annotation_spanning_cross_thread_work_is_not_counted():
    # main thread: step [0,100) > ## backward ## [10,90) with no op of its own; the work runs on thread 2
    events = [cpu("ProfilerStep#1", 0, 100, cat="user_annotation"),
              cpu("## backward ##", 10, 80, cat="user_annotation"),
              cpu("aten::mm", 20, 60, tid=2), cpu("aten::add", 92, 5)]
    trace, rows = _replay_rows(events)
    by = {n.name: n for n in trace.nodes}
    assert by["## backward ##"].duration_ns == 0 and by["aten::mm"].duration_ns == 60_000
    # add: own 5 + the step's uncovered [0,10) and [90,92) before it + the step's tail [97,100) = 20 us; the
    # uncovered [10,90) inside ## backward ## is the main thread waiting (not work), and the autograd-thread mm
    # is not put after an 80 us annotation: it runs concurrently (old rule: 80 us annotation + chain)
    assert by["aten::add"].duration_ns == 20_000
    (row,) = rows
    assert (row.measured_ns, row.predicted_ns) == (100_000, 20_000)


def test_overlap_warning_names_the_count(caplog):
    events = [cpu("ProfilerStep#1", 0, 50, cat="user_annotation"), cpu("a", 0, 10), cpu("b", 5, 10)]
    with caplog.at_level(logging.WARNING):
        convert_kineto_trace(parse_kineto(kineto_doc(events), path="k.json"))
    assert "1 host event(s) overlap" in caplog.text


def test_et_without_steps_gets_them_from_kineto_and_keep_iteration_works():
    from _pytorch_synth import et_doc, node, roots

    from tracekit.converters.pytorch.et_convert import convert_et
    from tracekit.converters.pytorch.et_reader import parse_et
    from tracekit.converters.pytorch.linker import link
    from tracekit.transforms.select import KeepIteration

    et = parse_et(et_doc(roots() + [node(11, "aten::mm", 2, 2), node(12, "aten::add", 2, 3)]), path="et.json")
    kt = parse_kineto(kineto_doc([cpu("ProfilerStep#7", 0, 50, rf=1, cat="user_annotation"),
                                  cpu("aten::mm", 10, 20, rf=2), cpu("ProfilerStep#8", 50, 40, rf=9,
                                                                     cat="user_annotation"),
                                  cpu("aten::add", 60, 20, rf=3)]), path="k.json")
    trace = convert_et(et, rank=0, kineto=kt, linkage=link(et, kt)).trace
    names = [n.name for n in trace.nodes]
    assert names.index("ProfilerStep#7") < names.index("aten::mm") < names.index("ProfilerStep#8") \
        < names.index("aten::add")
    by = {n.name: n for n in trace.nodes}
    assert by["ProfilerStep#8"].get_attr("range_duration_ns") == 40_000
    assert by["aten::mm"].id in by["ProfilerStep#8"].data_deps and by["ProfilerStep#8"].id in by["aten::add"].data_deps
    rows = {r.step: r for r in check_replay(TraceSet({0: trace})).rows}
    # step 7: mm 20 + uncovered [0,10) + tail [30,50) = 50 us; step 8: add 20 + [50,60) + [80,90) = 40 us
    assert {k: (r.measured_ns, r.predicted_ns) for k, r in rows.items()} == {7: (50_000, 50_000), 8: (40_000, 40_000)}
    kept = KeepIteration(8).apply(TraceSet({0: trace}))[0]
    assert [n.name for n in kept.nodes if n.type.name == "COMP_NODE"] == ["ProfilerStep#8", "aten::add"]
