"""The host-time rule (converters/pytorch/host_timing.py) and its use by the Kineto conversion, by hand."""

from __future__ import annotations

import logging

from _pytorch_synth import cpu, kineto_doc
from tracekit.converters.pytorch.host_timing import HostSpan, thread_timing
from tracekit.converters.pytorch.kineto_convert import convert_kineto_trace
from tracekit.converters.pytorch.kineto_reader import parse_kineto
from tracekit.replayer.results.measured import check_replay
from tracekit.sets.traceset import TraceSet


def _replay_rows(events):
    trace = convert_kineto_trace(parse_kineto(kineto_doc(events), path="k.json")).trace
    return trace, check_replay(TraceSet({0: trace})).rows


def test_partial_overlap_is_clamped_counted_and_not_double_counted():
    # a [0,10), b [5,15) on one thread: b clamped to [5,10); [10,15) is uncovered inside step [0,20)
    t = thread_timing(
        [
            HostSpan("s", 0, 20, True),
            HostSpan("a", 0, 10, False),
            HostSpan("b", 5, 15, False),
            HostSpan("c", 15, 20, False),
        ]
    )
    assert t.partial_overlaps == 1
    assert t.duration_ns == {"s": 0, "a": 5, "b": 5, "c": 10}  # c: 5 own + 5 uncovered before it
    assert sum(t.duration_ns.values()) == 20  # the step's span, once


def test_one_thread_cpu_only_step_replays_to_its_measured_span(caplog):
    events = [
        cpu("ProfilerStep#3", 0, 100, cat="user_annotation"),
        cpu("aten::mm", 10, 30),
        cpu("aten::add", 45, 20),
        cpu("aten::relu", 70, 10),
    ]
    trace, rows = _replay_rows(events)
    step = next(n for n in trace.nodes if n.name == "ProfilerStep#3")
    assert step.duration_ns == 0 and step.get_attr("range_duration_ns") == 100_000
    (row,) = rows
    assert (row.step, row.measured_ns, row.predicted_ns) == (3, 100_000, 100_000)


def test_annotation_spanning_cross_thread_work_is_not_counted():
    # main thread: step [0,100) > ## backward ## [10,90) with no op of its own; the work runs on thread 2
    events = [
        cpu("ProfilerStep#1", 0, 100, cat="user_annotation"),
        cpu("## backward ##", 10, 80, cat="user_annotation"),
        cpu("aten::mm", 20, 60, tid=2),
        cpu("aten::add", 92, 5),
    ]
    trace, rows = _replay_rows(events)
    by = {n.name: n for n in trace.nodes}
    assert by["## backward ##"].duration_ns == 0 and by["aten::mm"].duration_ns == 60_000
    # add: own 5 + the step's uncovered [0,10) and [90,92) before it + the step's tail [97,100) = 20 us; the
    # uncovered [10,90) inside ## backward ## is the main thread waiting (not work): the range holds no work of
    # its own thread, so it hands off to the autograd thread (## backward ## -> mm) and back (mm -> add)
    assert by["aten::add"].duration_ns == 20_000
    assert by["## backward ##"].id in by["aten::mm"].data_deps and by["aten::mm"].id in by["aten::add"].data_deps
    (row,) = rows
    # replay: mm [0,60) after the zero-time markers, add [60,80); the old rule put mm after an 80 us annotation
    # node.  Measured 100: mm started 20 us into the step (10 of them main-thread Python, counted in add).
    assert (row.measured_ns, row.predicted_ns) == (100_000, 80_000)


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
    kt = parse_kineto(
        kineto_doc(
            [
                cpu("ProfilerStep#7", 0, 50, rf=1, cat="user_annotation"),
                cpu("aten::mm", 10, 20, rf=2),
                cpu("ProfilerStep#8", 50, 40, rf=9, cat="user_annotation"),
                cpu("aten::add", 60, 20, rf=3),
            ]
        ),
        path="k.json",
    )
    trace = convert_et(et, rank=0, kineto=kt, linkage=link(et, kt)).trace
    names = [n.name for n in trace.nodes]
    assert (
        names.index("ProfilerStep#7")
        < names.index("aten::mm")
        < names.index("ProfilerStep#8")
        < names.index("aten::add")
    )
    by = {n.name: n for n in trace.nodes}
    assert by["ProfilerStep#8"].get_attr("range_duration_ns") == 40_000
    assert by["aten::mm"].id in by["ProfilerStep#8"].data_deps and by["ProfilerStep#8"].id in by["aten::add"].data_deps
    rows = {r.step: r for r in check_replay(TraceSet({0: trace})).rows}
    # step 7: mm 20 + uncovered [0,10) + tail [30,50) = 50 us; step 8: add 20 + [50,60) + [80,90) = 40 us
    assert {k: (r.measured_ns, r.predicted_ns) for k, r in rows.items()} == {7: (50_000, 50_000), 8: (40_000, 40_000)}
    kept = KeepIteration(8).apply(TraceSet({0: trace}))[0]
    assert [n.name for n in kept.nodes if n.type.name == "COMP_NODE"] == ["ProfilerStep#8", "aten::add"]


def _k(name, ts, dur, stream=7, **args):
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"stream": stream, "device": 0, **args},
    }


def _rt(name, ts, dur, **args):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": dur, "args": args}


def test_stream_wait_event_consumer_starts_after_producer_in_replay():
    events = [
        cpu("ProfilerStep#1", 0, 60, cat="user_annotation"),
        _rt("cudaLaunchKernel", 10, 1, correlation=1),
        _rt("cudaEventRecord", 12, 1, correlation=2),
        _rt("cudaStreamWaitEvent", 13, 1, correlation=3),
        _rt("cudaLaunchKernel", 14, 1, correlation=4),
        _k("producer", 20, 10, stream=7, correlation=1),
        _k("consumer", 31, 5, stream=9, correlation=4),
        {
            "ph": "X",
            "cat": "cuda_sync",
            "name": "Stream Wait Event",
            "pid": 0,
            "tid": 9,
            "ts": 13,
            "dur": 1,
            "args": {
                "stream": 9,
                "wait_on_stream": 7,
                "wait_on_cuda_event_record_corr_id": 2,
                "correlation": 3,
                "cuda_sync_kind": "Stream Wait Event",
            },
        },
        _rt("cudaStreamSynchronize", 40, 2, correlation=5),
    ]
    trace = convert_kineto_trace(parse_kineto(kineto_doc(events), path="k.json")).trace
    by = {n.name: n for n in trace.nodes}
    assert by["producer"].id in by["consumer"].data_deps
    comparison = check_replay(TraceSet({0: trace}))
    sched = comparison.result.schedule[0]
    start = dict(zip(sched.node_ids.tolist(), sched.start_ns.tolist()))
    end = dict(zip(sched.node_ids.tolist(), sched.end_ns.tolist()))
    # the launches end at 11 and 15 us (step's uncovered [0,10) goes to the first launch): producer [11,21),
    # consumer waits for it on the other stream: [21,26), not [15,20)
    assert (start[by["producer"].id], end[by["producer"].id]) == (11_000, 21_000)
    assert (start[by["consumer"].id], end[by["consumer"].id]) == (21_000, 26_000)


def test_cuda_graph_launch_with_many_kernels_replays_to_the_measured_step():
    kernels = [_k(f"g{i}", 20 + 3 * i, 2, correlation=5) for i in range(8)]  # 8 kernels [20,42)
    events = [
        cpu("ProfilerStep#1", 0, 50, cat="user_annotation"),
        _rt("cudaGraphLaunch", 10, 4, correlation=5),
        *kernels,
        _rt("cudaDeviceSynchronize", 15, 30, correlation=6),
        cpu("aten::add", 46, 2),
    ]
    trace = convert_kineto_trace(parse_kineto(kineto_doc(events), path="k.json")).trace
    by = {n.name: n for n in trace.nodes}
    assert all(by["cudaGraphLaunch"].id in by[f"g{i}"].data_deps for i in range(8))
    # the sync [15,45) started before the kernels: it keeps its measured 30 us (+ the uncovered [14,15)) and
    # the dependency on the graph's last kernel goes to the next host op
    sync = by["cudaDeviceSynchronize"]
    assert (sync.get_attr("waited_ns"), sync.duration_ns) == (None, 31_000)
    assert by["g7"].id in by["aten::add"].data_deps
    (row,) = check_replay(TraceSet({0: trace})).rows
    # replay: launch [0,14) (own 4 + uncovered [0,10)), the 8 kernels back to back after it [14,30), sync
    # [14,45), add after max(sync end, g7 end) = 45: [45,50) (own 2 + uncovered [45,46) and the tail [48,50))
    assert (row.measured_ns, row.predicted_ns) == (50_000, 50_000)


def test_sync_call_waiting_for_a_running_kernel_keeps_only_its_time_after_it():
    events = [
        cpu("ProfilerStep#1", 0, 40, cat="user_annotation"),
        _rt("cudaLaunchKernel", 0, 2, correlation=1),
        _k("k", 3, 20, correlation=1),
        _rt("cudaStreamSynchronize", 5, 20, correlation=2),
        cpu("aten::add", 25, 15),
    ]
    trace = convert_kineto_trace(parse_kineto(kineto_doc(events), path="k.json")).trace
    by = {n.name: n for n in trace.nodes}
    sync = by["cudaStreamSynchronize"]
    assert by["k"].id in sync.data_deps
    # waited [5,23) for k: 18 us not its own; keeps 2 us + uncovered [2,5) before it = 5 us
    assert (sync.get_attr("waited_ns"), sync.duration_ns) == (18_000, 5_000)
    (row,) = check_replay(TraceSet({0: trace})).rows
    # launch [0,2), k [2,22), sync after k [22,27), add [27,42): 42 us vs 40 measured (the kernel started 1 us
    # after its launch returned, which the replay does not wait); untrimmed, the sync would end at 42 + 18
    assert (row.measured_ns, row.predicted_ns) == (40_000, 42_000)
