"""Pipeline schedules against the textbook orders and bubble fractions.

Source: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
on GPU Clusters Using Megatron-LM" (SC21), section 2.2 and Figures 3-4:
GPipe runs all forwards then all backwards; 1F1B (PipeDream-Flush) runs
``p - stage - 1`` warm-up forwards, then one forward / one backward, then the
remaining backwards; the bubble is ``(p - 1) / (m + p - 1)`` of the iteration
for both, and ``(p - 1) / (v m + p - 1)`` with ``v`` interleaved chunks.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from tests.converters._llm_helpers import gpt_config
from tracekit.workloads.schedules import gpipe, interleaved, one_f_one_b, stage_order
from tracekit.errors import ConfigError


def order(ops) -> str:
    return " ".join(f"{op.kind}{op.micro_batch}" + (f".{op.chunk}" if op.chunk else "") for op in ops)


def test_1f1b_full_order_p4_m8():
    # Narayanan et al. 2021, Figure 4 (top): warm-up p - s - 1 forwards, steady 1F1B, cool-down.
    assert order(one_f_one_b(4, 8, 0)) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"
    assert order(one_f_one_b(4, 8, 1)) == "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7"
    assert order(one_f_one_b(4, 8, 2)) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7"
    assert order(one_f_one_b(4, 8, 3)) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"


def test_1f1b_with_fewer_micro_batches_than_stages():
    assert order(one_f_one_b(4, 2, 0)) == "F0 F1 B0 B1"


def test_gpipe_order():
    assert order(gpipe(3, 3, 1)) == "F0 F1 F2 B0 B1 B2"


def test_interleaved_order_p2_m4_v2():
    # Megatron-LM's interleaved schedule: groups of p micro-batches per chunk; warm-up
    # 2 (p - s - 1) + (v - 1) p forwards; backwards visit chunks in reverse.
    assert order(interleaved(2, 4, 0, 2)) == "F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3"
    assert order(interleaved(2, 4, 1, 2)) == "F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3"


@pytest.mark.parametrize("name,v", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("interleaved", 3)])
def test_every_pass_exactly_once_and_forward_first(name, v):
    p, m = 4, 8
    for stage in range(p):
        ops = stage_order(name, p, m, stage, v)
        seen = [(op.kind, op.micro_batch, op.chunk) for op in ops]
        assert sorted(seen) == sorted((k, i, c) for k in "FB" for i in range(m) for c in range(v))
        for i in range(m):
            for c in range(v):
                assert seen.index(("F", i, c)) < seen.index(("B", i, c))


def uniform_bubble(
    schedule: str, p: int, m: int, v: int = 1, tf: int = 1, tb: int = 2, group_size: int | None = None
) -> Fraction:
    """Bubble fraction of a uniform-cost pipeline: every forward of a stage costs tf, backward tb.

    A chunk pass costs 1/v of that.  Forward of virtual stage k waits for forward of k-1;
    backward of k waits for backward of k+1 (the last virtual stage for its own forward).
    Each stage runs its passes in schedule order, one at a time.
    """
    orders = [stage_order(schedule, p, m, s, v, group_size) for s in range(p)]
    done: dict[tuple[str, int, int], Fraction] = {}
    pos, free = [0] * p, [Fraction(0)] * p
    last = p * v - 1
    progressed = True
    while progressed:
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                op = orders[s][pos[s]]
                vs = op.chunk * p + s
                if op.kind == "F":
                    dep = ("F", op.micro_batch, vs - 1) if vs > 0 else None
                else:
                    dep = ("B", op.micro_batch, vs + 1) if vs < last else ("F", op.micro_batch, vs)
                if dep is not None and dep not in done:
                    break
                start = max(free[s], done[dep] if dep else Fraction(0))
                end = start + Fraction(tf if op.kind == "F" else tb, v)
                done[(op.kind, op.micro_batch, vs)] = free[s] = end
                pos[s] += 1
                progressed = True
    assert pos == [len(o) for o in orders], "schedule deadlocks"
    total = max(free)
    return (total - m * (tf + tb)) / total


@pytest.mark.parametrize("p,m", [(4, 8), (4, 4), (8, 16), (2, 6), (3, 3)])
@pytest.mark.parametrize("tf,tb", [(1, 1), (1, 2)])
def test_bubble_fraction_gpipe_and_1f1b(p, m, tf, tb):
    expected = Fraction(p - 1, m + p - 1)
    assert uniform_bubble("1f1b", p, m, tf=tf, tb=tb) == expected
    assert uniform_bubble("gpipe", p, m, tf=tf, tb=tb) == expected


@pytest.mark.parametrize("p,m", [(4, 8), (4, 4), (8, 16), (2, 6)])
@pytest.mark.parametrize("v", [2, 3, 4])
def test_interleaving_divides_the_bubble_by_v(p, m, v):
    # bubble time (p-1)(tf+tb)/v: fraction (p-1)/(v m + p - 1)
    assert uniform_bubble("interleaved", p, m, v) == Fraction(p - 1, v * m + p - 1)


def test_bad_schedule_arguments():
    with pytest.raises(ConfigError, match="group size must be an integer in 1..6"):
        interleaved(4, 6, 0, 2, 7)
    with pytest.raises(ConfigError, match="outside"):
        one_f_one_b(4, 8, 4)
    with pytest.raises(ConfigError, match="unknown pipeline schedule"):
        stage_order("zigzag", 4, 8, 0)
    with pytest.raises(ConfigError, match="micro-batches must be a positive"):
        gpipe(4, 0, 0)


def _uniform_pipeline_traces(schedule: str, p: int, m: int, v: int, tf_ns: int, tb_ns: int, **parallel):
    """A generated pp-only GPT job whose only timed nodes are the QKV GEMMs: each stage's forward
    of one micro-batch takes tf_ns, its backward tb_ns (split evenly over its layers and chunks).
    Communication is free under the replayer's ``measured`` collective model (durations are 0)."""
    from tracekit.converters.generators import generate_llm

    c = gpt_config(1, 1, p, B=m, b=1, schedule=schedule, virtual_stages=v, **parallel)
    lpc = c.layers_per_chunk
    ts = generate_llm(c)
    traces = {}
    for rank, trace in ts.items():
        nodes = []
        for n in trace.nodes:
            role, phase = n.get_attr("op_role"), n.get_attr("phase")
            if role == "qkv_gemm" and phase == "fwd":
                n = n.replace(duration_ns=tf_ns // (v * lpc))
            elif role == "qkv_gemm" and phase == "bwd":
                n = n.replace(duration_ns=tb_ns // (v * lpc))
            else:  # untimed: no duration and no FLOPs/bytes, so no roofline fallback either
                n = n.replace(duration_ns=0).without_attr("num_ops").without_attr("tensor_size")
            nodes.append(n)
        traces[rank] = trace.with_nodes(nodes)
    return ts.with_traces(traces)


@pytest.mark.parametrize("schedule,p,m,v", [("1f1b", 4, 8, 1), ("gpipe", 4, 4, 1), ("interleaved", 4, 8, 2)])
def test_bubble_fraction_through_the_replayer(schedule, p, m, v):
    replayer = pytest.importorskip("tracekit.replayer")
    tf, tb = 1_000_000, 2_000_000
    ts = _uniform_pipeline_traces(schedule, p, m, v, tf, tb)
    result = replayer.replay(ts, "dgx-a100", options=replayer.ReplayOptions(collective_model="measured"))
    total = result.iteration_time_ns
    bubble = (total - m * (tf + tb)) / total
    assert bubble == pytest.approx((p - 1) / (v * m + p - 1), rel=1e-4)
