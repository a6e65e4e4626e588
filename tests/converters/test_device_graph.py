"""Device graph: launches, CUDA graphs, ROCm External-id links, stream order, synchronization edges."""

from __future__ import annotations

from tracekit.converters.pytorch.device_graph import build_device_graph, forward_position
from tracekit.converters.pytorch.kineto_reader import parse_kineto


def X(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def K(name, ts, dur, stream=7, **args):
    return X("kernel", name, ts, dur, pid=0, tid=stream, stream=stream, device=0, **args)


def graph(events):
    kt = parse_kineto({"traceEvents": events})
    return kt, build_device_graph(kt)


def edges(g, kind=None):
    return sorted((e.src, e.dst) for e in g.edges if kind is None or e.kind == kind)


def test_launch_by_correlation_and_stream_order():
    kt, g = graph(
        [
            X("cuda_runtime", "cudaLaunchKernel", 10, 2, correlation=1),  # 0
            X("cuda_runtime", "cudaLaunchKernel", 13, 2, correlation=2),  # 1
            K("k1", 20, 5, correlation=1),  # 2
            K("k2", 26, 5, correlation=2),  # 3
            X("cuda_driver", "cuLaunchKernel", 14, 1, correlation=3),  # 4
            K("k3", 30, 1, stream=9, correlation=3),  # 5
        ]
    )
    assert dict(g.launch_of) == {2: 0, 3: 1, 5: 4}
    assert edges(g, "launch") == [(0, 2), (1, 3), (4, 5)]
    assert edges(g, "stream_order") == [(2, 3)]
    assert g.streams == {(0, 7): (2, 3), (0, 9): (5,)}
    assert g.stats.attached == 3 and g.stats.device_ops == 3


def test_cuda_graph_launch_attaches_all_its_kernels():
    kt, g = graph(
        [
            X("cuda_runtime", "cudaGraphLaunch", 10, 3, correlation=5),
            K("g1", 20, 1, correlation=5),
            K("g2", 22, 1, correlation=5),
            X("gpu_memset", "Memset (Device)", 24, 1, pid=0, tid=7, stream=7, device=0, correlation=5),
        ]
    )
    assert g.launched == {0: (1, 2, 3)}
    assert g.stats.graph_launch_ops == 3
    assert edges(g, "launch") == [(0, 1), (0, 2), (0, 3)]


def test_rocm_kernels_without_correlation_link_by_external_id():
    kt, g = graph(
        [
            X("cuda_runtime", "hipExtModuleLaunchKernel", 10, 1, **{"External id": 40}),
            X("cuda_runtime", "hipGetDevice", 11, 1, **{"External id": 40}),  # not a launch
            X("cuda_runtime", "hipLaunchKernel", 12, 1, **{"External id": 40}),
            K("a", 20, 1, **{"External id": 40}),
            K("b", 22, 1, **{"External id": 40}),
        ]
    )
    assert dict(g.launch_of) == {3: 0, 4: 2}
    assert g.stats.attached_by_external_id == 2


def test_device_synchronize_waits_for_last_op_of_every_stream():
    kt, g = graph(
        [
            X("cuda_runtime", "cudaLaunchKernel", 10, 1, correlation=1),
            X("cuda_runtime", "cudaLaunchKernel", 12, 1, correlation=2),
            K("a", 15, 50, stream=7, correlation=1),
            K("b", 16, 30, stream=9, correlation=2),
            X("cuda_runtime", "cudaDeviceSynchronize", 14, 60, correlation=3),  # 4: starts before kernels do
            X("cuda_runtime", "cudaLaunchKernel", 80, 1, correlation=4),
            K("c", 90, 1, stream=7, correlation=4),  # launched after the sync: not waited for
        ]
    )
    assert edges(g, "device_sync") == [(2, 4), (3, 4)]


def test_stream_wait_event_from_cupti_record_points_forward():
    kt, g = graph(
        [
            X("cuda_runtime", "cudaLaunchKernel", 10, 1, correlation=1),  # 0 -> k on 7
            X("cuda_runtime", "cudaEventRecord", 12, 1, correlation=2),  # 1
            X("cuda_runtime", "cudaStreamWaitEvent", 13, 1, correlation=3),  # 2
            X("cuda_runtime", "cudaLaunchKernel", 14, 1, correlation=4),  # 3 -> k on 9
            K("producer", 20, 10, stream=7, correlation=1),  # 4
            K("consumer", 31, 5, stream=9, correlation=4),  # 5
            X(
                "cuda_sync",
                "Stream Wait Event",
                13,
                1,
                pid=0,
                tid=9,
                stream=9,
                wait_on_stream=7,
                wait_on_cuda_event_record_corr_id=2,
                correlation=3,
                cuda_sync_kind="Stream Wait Event",
            ),
        ]
    )
    assert edges(g, "stream_wait_event") == [(4, 5)]


def test_stream_wait_event_inferred_from_thread_launches():
    kt, g = graph(
        [
            X("cuda_runtime", "cudaLaunchKernel", 10, 1, correlation=1),  # 0 compute kernel, stream 7
            X("cuda_runtime", "cudaEventRecord", 12, 1, correlation=2),
            X("cuda_runtime", "cudaStreamWaitEvent", 13, 1, correlation=3),
            X("cuda_runtime", "cudaLaunchKernel", 14, 1, correlation=4),  # 3 nccl kernel, stream 40
            K("grad", 20, 10, stream=7, correlation=1),  # 4
            K("ncclKernel_AllReduce", 31, 5, stream=40, correlation=4),  # 5
        ]
    )
    assert edges(g, "stream_wait_event_inferred") == [(4, 5)]


def test_wait_whose_target_started_earlier_is_dropped_not_reversed():
    # The "waiting" kernel starts before the producer: the edge would point backward; it is dropped.
    kt, g = graph(
        [
            X("cuda_runtime", "cudaLaunchKernel", 10, 1, correlation=1),
            X("cuda_runtime", "cudaEventRecord", 12, 1, correlation=2),
            X("cuda_runtime", "cudaStreamWaitEvent", 13, 1, correlation=3),
            X("cuda_runtime", "cudaLaunchKernel", 14, 1, correlation=4),
            K("producer", 20, 10, stream=7, correlation=1),
            K("early", 18, 5, stream=40, correlation=4),
        ]
    )
    assert edges(g, "stream_wait_event_inferred") == []
    assert g.stats.backward_edges_dropped == 1


def test_unresolved_event_waits_are_counted():
    kt, g = graph(
        [
            X("cuda_runtime", "cudaStreamWaitEvent", 13, 1, correlation=3),
            X(
                "cuda_sync",
                "Stream Wait Event",
                13,
                1,
                pid=0,
                tid=9,
                stream=9,
                wait_on_stream=-1,
                wait_on_cuda_event_record_corr_id=-1,
                correlation=3,
                cuda_sync_kind="Stream Wait Event",
            ),
        ]
    )
    assert g.edges == () and g.stats.unresolved_waits == 1


def test_stream_sync_without_record_is_inferred_from_blocking_window():
    kt, g = graph(
        [
            X("cuda_runtime", "cudaLaunchKernel", 10, 1, correlation=1),
            X("cuda_runtime", "cudaLaunchKernel", 11, 1, correlation=2),
            K("long", 20, 30, stream=7, correlation=1),  # ends at 50, inside the sync
            K("done", 12, 2, stream=9, correlation=2),  # ended before the sync began: no wait
            X("cuda_runtime", "cudaStreamSynchronize", 15, 40, correlation=3),  # 4
        ]
    )
    assert edges(g, "stream_sync_inferred") == [(2, 4)]


def test_forward_position():
    starts = [0, 5, 5, 9, 12]
    assert forward_position(starts, 1, 4) == 1
    assert forward_position(starts, 1, 5) == 3
    assert forward_position(starts, 0, 12) is None


def test_real_negative_queue_graph_launches(real_dir):
    from tracekit.converters.pytorch.kineto_reader import read_kineto

    kt = read_kineto(real_dir / "kineto/hta-negative_queue_length_values_check/rank0.json.gz")
    g = build_device_graph(kt)
    by = {e.index: e for e in kt.events}
    graph_launches = [c for c in g.launched if by[c].name == "cudaGraphLaunch"]
    # 70 cudaGraphLaunch calls in the file; each launched kernels; 345 device ops attached through them
    assert len([e for e in kt.events if e.name == "cudaGraphLaunch"]) == 70
    assert len(graph_launches) == 70
    assert g.stats.graph_launch_ops == sum(len(g.launched[c]) for c in graph_launches) == 345
    assert g.stats.device_ops == 7747 and g.stats.attached == 6875
