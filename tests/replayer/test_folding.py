"""Rank folding: a folded replay equals the unfolded one to the bit, on generated presets and random jobs."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracekit.converters.generators import (
    LLMConfig,
    ParallelSpec,
    Roofline,
    collective_bench,
    dlrm_preset,
    generate_dlrm,
    generate_llm,
    llm_preset,
    send_recv_bench,
)
from tracekit.converters.text_workload import convert_text_workload
from tracekit.model import ExecutionTrace, NodeType
from tracekit.replayer import ReplayOptions, replay
from tracekit.replayer.results.result import ReplayResult

ROOF = Roofline(989e12 * 0.7, 3.35e12 * 0.8)


def _llm(tp=1, pp=1, dp=2, batch=None, roofline=ROOF, **par):
    model, _ = llm_preset("gpt3-1.3b")
    cfg = LLMConfig(
        model, ParallelSpec(dp=dp, tp=tp, pp=pp, **par), global_batch_size=batch or 2 * pp * dp, micro_batch_size=1
    )
    return generate_llm(cfg, roofline)


def both(ts, hw="dgx-h100", **opts) -> tuple[ReplayResult, ReplayResult]:
    """Unfolded and folded replays, asserted equal in every compared field and every rank's schedule."""
    a = replay(ts, hw, options=ReplayOptions(fold=False, **opts))
    b = replay(ts, hw, options=ReplayOptions(fold=True, **opts))
    assert a.iteration_time_ns == b.iteration_time_ns
    assert a.ranks == b.ranks
    assert a.collectives == b.collectives
    assert a.critical_path == b.critical_path
    assert a == b
    for x, y in zip(a.schedule, b.schedule):
        assert x.rank == y.rank
        np.testing.assert_array_equal(x.node_ids, y.node_ids)
        np.testing.assert_array_equal(x.start_ns, y.start_ns)
        np.testing.assert_array_equal(x.end_ns, y.end_ns)
        np.testing.assert_array_equal(x.xfer_start_ns, y.xfer_start_ns)
        np.testing.assert_array_equal(x.instance, y.instance)
    assert a.folding is None
    assert b.to_dict()["folding"]["ranks"] == len(ts)
    return a, b


def _folded(b: ReplayResult) -> int:
    assert b.folding.reason is None, b.folding.reason
    return b.folding.classes


# ----- generated presets ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "par",
    [
        dict(dp=4),
        dict(tp=2, dp=2),
        dict(tp=2, pp=2, dp=2),
        dict(tp=2, pp=2, dp=2, sequence_parallel=True),
        dict(pp=2, dp=2, zero_stage=1),
        dict(tp=2, dp=2, zero_stage=3),
        dict(pp=2, dp=2, schedule="interleaved", virtual_stages=2),
        dict(pp=2, dp=2, schedule="gpipe"),
    ],
    ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()),
)
def test_llm_presets_fold_exactly(par):
    ts = _llm(**par)
    _, b = both(ts)
    # every (tp, pp) position of a dp replica folds with its replicas: at most tp x pp classes
    assert _folded(b) <= par.get("tp", 1) * par.get("pp", 1)


def test_llm_with_overlapped_gradient_buckets_shares_bandwidth():
    # dp all-reduces overlap the backward pass and the tp all-reduces: links are shared
    ts = _llm(tp=2, pp=1, dp=4, batch=8, overlap_grad_reduce=True, grad_bucket_bytes=4 << 20)
    _, b = both(ts)
    assert _folded(b) < len(ts)


def test_llm_without_durations_roofline_costs():
    ts = _llm(tp=2, pp=2, dp=2, roofline=None)
    _, b = both(ts)
    assert _folded(b) <= 4


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])
def test_micro_collectives(kind):
    ts = collective_bench(8, kind, 1 << 20, compute_ns=1000, iterations=3)
    _, b = both(ts)
    assert _folded(b) == 1


def test_micro_subgroup_collective_idle_ranks():
    ts = collective_bench(8, "all_reduce", 1 << 20, group=[0, 2, 4, 6], compute_ns=500, iterations=2)
    _, b = both(ts)
    assert _folded(b) == 2  # members, idle ranks


@pytest.mark.parametrize("pattern", ["ring", "pairwise"])
def test_micro_send_recv_concurrent_transfers(pattern):
    # every rank sends and receives at once: each link carries concurrent transfers
    ts = send_recv_bench(8, pattern, 4 << 20, compute_ns=100, iterations=2)
    _, b = both(ts)
    assert b.folding.classes <= 8


def test_measured_and_nccl_models():
    ts = collective_bench(8, "all_reduce", 1 << 20, compute_ns=1000, iterations=2)
    for model in ("measured", "nccl"):
        both(ts, collective_model=model)


def test_dlrm():
    ts = generate_dlrm(dlrm_preset("dlrm-small", 8), ROOF)
    _, b = both(ts)
    assert b.folding.ranks == 8


@pytest.mark.parametrize("tp", [None, 2])
def test_text_workloads(tp):
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "sample_traces" / "text" / "Resnet50_DataParallel.txt"
    if tp is None:
        ts = convert_text_workload(path, 8, passes=2)
        _, b = both(ts)
        assert _folded(b) == 1
    else:
        from tracekit.converters.text_workload import parse_text_workload

        text = (
            "HYBRID_DATA_MODEL\n2\nl0 -1 100 ALLREDUCE 1048576 200 ALLREDUCE 1048576 300 ALLREDUCE 2097152 10\n"
            "l1 -1 100 ALLGATHER 65536 200 REDUCESCATTER 65536 300 ALLREDUCE 4194304 10\n"
        )
        ts = convert_text_workload(parse_text_workload(text), 8, passes=2, tp=tp)
        _, b = both(ts)
        assert _folded(b) == 1


def test_dgx_a100_and_streams_single():
    ts = _llm(tp=2, pp=2, dp=2)
    both(ts, hw="dgx-a100", streams="single")


# ----- when it must not fold --------------------------------------------------------------------


def _retime(ts, rank: int, factor: int):
    """The set with rank ``rank``'s COMP durations multiplied by ``factor``."""
    trace = ts[rank]
    out = [n.replace(duration_ns=n.duration_ns * factor) if n.type == NodeType.COMP_NODE else n for n in trace.nodes]
    traces = {r: (ExecutionTrace(out, trace.metadata, rank=rank) if r == rank else ts[r]) for r in ts.ranks}
    return ts.with_traces(traces)


def test_one_slow_rank_splits_its_class_and_stays_exact():
    ts = _retime(collective_bench(8, "all_reduce", 1 << 20, compute_ns=1000, iterations=2), 5, 3)
    a, b = both(ts)
    assert _folded(b) == 2
    assert a.rank(5).comm_wait_ns == 0.0 and a.rank(0).comm_wait_ns > 0.0


def test_no_identical_ranks_falls_back_with_reason():
    ts = collective_bench(2, "all_reduce", 1 << 20, compute_ns=1000)
    ts = _retime(ts, 1, 2)
    _, b = both(ts)
    assert b.folding.classes == 2 and b.folding.reason == "no two ranks have identical programs"
    assert ReplayResult.from_dict(b.to_dict()).folding == b.folding


# ----- random jobs -------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    world=st.sampled_from([2, 4, 8]),
    kind=st.sampled_from(["all_reduce", "all_gather", "all_to_all"]),
    nbytes=st.integers(1, 1 << 24),
    compute=st.integers(0, 50_000),
    iters=st.integers(1, 3),
    slow=st.lists(st.tuples(st.integers(0, 7), st.integers(2, 4)), max_size=3),
    sub=st.booleans(),
)
def test_random_collective_jobs(world, kind, nbytes, compute, iters, slow, sub):
    group = list(range(0, world, 2)) if sub else None
    ts = collective_bench(world, kind, nbytes, group=group, compute_ns=compute, iterations=iters)
    for rank, factor in slow:
        if rank < world:
            ts = _retime(ts, rank, factor)
    both(ts)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pattern=st.sampled_from(["ring", "pairwise", "pingpong"]),
    nbytes=st.integers(1, 1 << 24),
    compute=st.integers(0, 20_000),
    slow=st.lists(st.integers(0, 7), max_size=2),
)
def test_random_p2p_jobs(pattern, nbytes, compute, slow):
    ts = send_recv_bench(8, pattern, nbytes, compute_ns=compute, iterations=2)
    for rank in slow:
        ts = _retime(ts, rank, 2)
    both(ts)


# ----- bandwidth sharing: concurrent collectives on one rank's links ------------------------------


def _two_stream_job(tp: int, dp: int, tp_bytes: int, dp_bytes: int, compute_ns: int):
    """Each rank: compute, then a tp all-reduce (stream 1) and a dp all-reduce (stream 2) at once, twice."""
    from tracekit.model import Attr, CollectiveType, Node
    from tracekit.sets.traceset import TraceSet

    world = tp * dp
    groups = {"0": tuple(range(world))}
    for d in range(dp):
        groups[f"tp{d}"] = tuple(range(d * tp, (d + 1) * tp))
    for t in range(tp):
        groups[f"dp{t}"] = tuple(range(t, world, tp))

    def coll(i, deps, pg, nbytes, stream):
        return Node(
            i,
            f"allreduce.{pg[:2]}",
            NodeType.COMM_COLL_NODE,
            data_deps=deps,
            attrs=[
                Attr("comm_type", int(CollectiveType.ALL_REDUCE)),
                Attr("comm_size", nbytes),
                Attr("pg_name", pg),
                Attr("stream", stream),
            ],
        )

    traces = {}
    for r in range(world):
        d, t = divmod(r, tp)
        nodes, last = [], []
        for k in range(2):
            base = 4 * k
            nodes.append(
                Node(
                    base, "gemm", NodeType.COMP_NODE, data_deps=last, duration_ns=compute_ns, attrs=[Attr("stream", 0)]
                )
            )
            nodes.append(coll(base + 1, [base], f"tp{d}", tp_bytes, 1))
            nodes.append(coll(base + 2, [base], f"dp{t}", dp_bytes, 2))
            nodes.append(
                Node(
                    base + 3,
                    "join",
                    NodeType.COMP_NODE,
                    data_deps=[base + 1, base + 2],
                    duration_ns=10,
                    attrs=[Attr("stream", 0)],
                )
            )
            last = [base + 3]
        traces[r] = ExecutionTrace(nodes, rank=r)
    return TraceSet(traces, groups)


@pytest.mark.parametrize("tp,dp", [(2, 2), (4, 2), (2, 4)])
def test_concurrent_collectives_share_links_and_fold(tp, dp, monkeypatch):
    import tracekit.replayer.simulation.engine as engine

    slowed = []
    orig = engine._Flows.recompute

    def spy(self, t, events):
        orig(self, t, events)
        slowed.extend(self.rate[j] for j in self.active if self.rate[j] < 1.0)

    monkeypatch.setattr(engine._Flows, "recompute", spy)
    ts = _two_stream_job(tp, dp, 64 << 20, 48 << 20, 5000)
    a, b = both(ts)
    assert _folded(b) == 1
    assert slowed  # the two all-reduces did share each rank's links
    # sharing made both slower than alone: each one's time exceeds its time alone
    alone = replay(_two_stream_job(tp, dp, 64 << 20, 1, 5000), "dgx-h100").collectives[0].time_ns
    assert a.collectives[0].time_ns > alone
