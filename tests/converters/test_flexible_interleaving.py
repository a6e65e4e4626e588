"""Llama 3's flexible interleaving: any number of micro-batches, ``N`` contiguous micro-batches per virtual stage.

Sources: Dubey et al. 2024, "The Llama 3 Herd of Models", section 3.3.2 and Figure 6 (``N`` tunable, fewer
micro-batches than stages allowed); Megatron-Core ``get_schedule_table`` / ``get_pp_rank_microbatches``
(groups of ``N`` micro-batches per chunk, warm-up ``2 (p - s - 1) + (v - 1) N``).  Bubble closed forms:
Narayanan et al. 2021, section 2.2 (``(p - 1) / (v m + p - 1)``); with ``m < p`` each of the ``v - 1`` chunk
changes waits ``p - m`` passes more (derived in :mod:`tracekit.workloads.schedules`).
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from tests.converters._llm_helpers import gpt_config
from tests.converters.test_schedules import _uniform_pipeline_traces, order, uniform_bubble
from tracekit.errors import ConfigError
from tracekit.workloads.schedules import default_group_size, interleaved, interleaved_warmups, stage_order

SMALL = [(2, 3), (2, 5), (2, 6), (4, 3), (4, 5), (4, 6)]  # (pp, micro-batches), vp = 2


def closed_form_bubble(p: int, m: int, v: int, tf: int = 1, tb: int = 2) -> Fraction:
    """Bubble share of the iteration: ``(p - 1) / (v m + p - 1)`` for ``m >= p``; else bubble time
    ``((p - 1) + (v - 1)(p - m)) (tf + tb) / v`` over the work ``m (tf + tb)``."""
    bubble = Fraction((p - 1) + (v - 1) * max(0, p - m), v) * (tf + tb)
    return bubble / (bubble + m * (tf + tb))


def test_hand_checked_orders_p2_m3_and_p4_m5():
    # p=2, m=3: N = 3 (N = 2 would leave a last group of 1 < p); warm-ups 2 (p-s-1) + (v-1) N = 5, 3.
    assert default_group_size(2, 3) == 3 and interleaved_warmups(2, 3, 2, 3) == (5, 3)
    assert order(interleaved(2, 3, 0, 2)) == "F0 F1 F2 F0.1 F1.1 F2.1 B0.1 B1.1 B2.1 B0 B1 B2"
    assert order(interleaved(2, 3, 1, 2)) == "F0 F1 F2 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 B0 B1 B2"
    # p=4, m=5: N = 5 (4 leaves 1, less than p); warm-ups 11, 9, 7, 5 capped at m v = 10.
    assert default_group_size(4, 5) == 5 and interleaved_warmups(4, 5, 2, 5) == (10, 9, 7, 5)
    assert order(interleaved(4, 5, 3, 2)) == (
        "F0 F1 F2 F3 F4 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4.1 B4.1 B0 B1 B2 B3 B4"
    )
    # p=2, m=5: N = 3, groups {0, 1, 2} and {3, 4} (2 >= p); Megatron-Core's table order for PP2 N3 M5 VP2
    assert order(interleaved(2, 5, 1, 2)) == (
        "F0 F1 F2 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3 B0 F4 B1 F3.1 B2 F4.1 B3.1 B4.1 B3 B4"
    )


def test_fewer_micro_batches_than_stages_p4_m3():
    assert default_group_size(4, 3) == 3 and interleaved_warmups(4, 3, 2, 3) == (6, 6, 5, 3)
    assert order(interleaved(4, 3, 2, 2)) == "F0 F1 F2 F0.1 F1.1 F2.1 B0.1 B1.1 B2.1 B0 B1 B2"


@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("v", [2, 3, 5])
def test_divisible_micro_batches_keep_megatrons_order(p, v):
    # m % p == 0 and N = p: forward k is micro-batch (k // (p v)) p + k mod p on chunk (k mod p v) // p,
    # warm-up 2 (p - s - 1) + (v - 1) p (all passes when m == p): the order before flexible interleaving.
    for m in (p, 2 * p, 3 * p):
        assert default_group_size(p, m) == p
        for s in range(p):
            warm = m * v if m == p else min(m * v, 2 * (p - s - 1) + (v - 1) * p)
            fwd = [("F", (k // (p * v)) * p + k % p, (k % (p * v)) // p) for k in range(m * v)]
            bwd = [("B", mb, v - 1 - c) for _, mb, c in fwd]
            want = fwd[:warm] + [x for i in range(m * v - warm) for x in (fwd[warm + i], bwd[i])] + bwd[m * v - warm :]
            assert [(o.kind, o.micro_batch, o.chunk) for o in stage_order("interleaved", p, m, s, v)] == want


def test_default_group_size_leaves_no_last_group_shorter_than_p():
    assert [default_group_size(4, m) for m in range(1, 14)] == [1, 2, 3, 4, 5, 6, 7, 4, 5, 5, 6, 4, 7]
    assert default_group_size(16, 24) == 24 and default_group_size(16, 40) == 20  # 40 = 2 x 20


@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("v", [2, 3])
def test_every_group_size_is_deadlock_free_and_runs_each_pass_once(p, v):
    # Megatron-Core refuses a last group shorter than p ("dependency bubbles"); with its warm-ups those orders
    # stall (p=4 v=3 m=5 N=4 does); ours grow the warm-ups until the tick schedule cannot stall.
    for m in range(1, 2 * p + 2):
        for n in range(1, m + 1):
            uniform_bubble("interleaved", p, m, v, group_size=n)  # asserts "schedule deadlocks" otherwise
            for s in range(p):
                seen = [(o.kind, o.micro_batch, o.chunk) for o in interleaved(p, m, s, v, n)]
                assert sorted(seen) == sorted((k, i, c) for k in "FB" for i in range(m) for c in range(v))
                assert all(seen.index(("F", i, c)) < seen.index(("B", i, c)) for i in range(m) for c in range(v))


def test_a_stalling_megatron_order_gets_one_more_warm_up_forward():
    # p=4 v=3 m=5 N=4: Megatron-Core's warm-ups 14, 12, 10, 8 stall; the last stage needs one more forward.
    assert interleaved_warmups(4, 5, 3, 4) == (14, 12, 10, 9)


@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("v", [2, 3, 4])
@pytest.mark.parametrize("tf,tb", [(1, 1), (1, 2)])
def test_bubble_matches_the_closed_form_for_every_micro_batch_count(p, v, tf, tb):
    for m in range(1, 3 * p + 2):
        assert uniform_bubble("interleaved", p, m, v, tf, tb) == closed_form_bubble(p, m, v, tf, tb), m


@pytest.mark.parametrize("p,m", SMALL)
def test_small_jobs_replay_without_deadlock_with_their_bubble(p, m):
    """Generated traces (pp only, vp 2) through the replayer: every micro-batch's forward and backward
    once per virtual stage, no deadlock, the bubble of the closed form."""
    replayer = pytest.importorskip("tracekit.replayer")
    tf, tb, v = 1_000_000, 2_000_000, 2
    ts = _uniform_pipeline_traces("interleaved", p, m, v, tf, tb)
    for rank, trace in ts.items():
        passes = {(n.get_attr("phase"), n.get_attr("micro_batch"), n.get_attr("layer")) for n in trace.nodes}
        for chunk in range(v):
            for layer in gpt_config(pp=p, B=m, schedule="interleaved", virtual_stages=v).chunk_layers[chunk * p + rank]:
                assert all((ph, mb, layer) in passes for ph in ("fwd", "bwd") for mb in range(m))
    result = replayer.replay(ts, "dgx-a100", options=replayer.ReplayOptions(collective_model="measured"))
    total = result.iteration_time_ns
    assert (total - m * (tf + tb)) / total == pytest.approx(float(closed_form_bubble(p, m, v)), rel=1e-4)


def test_a_chosen_group_size_reaches_the_trace_and_replays():
    replayer = pytest.importorskip("tracekit.replayer")
    ts = _uniform_pipeline_traces("interleaved", 4, 5, 2, 1_000_000, 2_000_000, microbatch_group_size=4)
    cfg = json.loads(ts[0].metadata.get_attr("llm_config"))
    assert cfg["parallel"]["microbatch_group_size"] == 4
    result = replayer.replay(ts, "dgx-a100", options=replayer.ReplayOptions(collective_model="measured"))
    assert result.iteration_time_ns > 5 * 3_000_000  # ran to the end (a deadlock raises)


def test_the_default_group_size_is_not_written_into_the_metadata():
    from tracekit.converters.generators.llm import build_rank_trace

    cfg = json.loads(build_rank_trace(gpt_config(pp=2, B=4), 0).metadata.get_attr("llm_config"))
    assert "microbatch_group_size" not in cfg["parallel"]  # files of today's jobs are byte-identical


def test_memory_model_walks_the_flexible_order():
    from tracekit.workloads.activations import peak_in_flight

    c = gpt_config(pp=4, B=5, schedule="interleaved", virtual_stages=2)
    # stage 0 runs all 10 forwards before its first backward (warm-up 10): 10 chunks of 1/2 stage in flight;
    # the last stage 5 (warm-up 5 = (v - 1) N), then one more forward before its first backward frees one
    assert peak_in_flight(c, 0).micro_batches_in_flight == 5.0
    assert peak_in_flight(c, 3).micro_batches_in_flight == 3.0


def test_cli_takes_the_group_size(tmp_path):
    from click.testing import CliRunner

    from tracekit.cli import cli
    from tracekit.io import read_traceset

    args = ["generate", "llm", "--model", "gpt3-1.3b", "--layers", "4", "--pp", "2", "--schedule", "interleaved"]
    args += ["--global-batch", "5", "--seq", "128", "--microbatch-group-size", "2", "-o", str(tmp_path / "a")]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    cfg = json.loads(read_traceset(tmp_path / "a")[0].metadata.get_attr("llm_config"))
    assert cfg["parallel"]["microbatch_group_size"] == 2
    bad = CliRunner().invoke(cli, [*args[:-4], "--microbatch-group-size", "9", "-o", str(tmp_path / "b")])
    assert bad.exit_code != 0 and "micro-batch group size 9 is more than the 5" in bad.output


def test_a_bad_group_size_is_refused():
    with pytest.raises(ConfigError, match="group size must be an integer in 1..5"):
        interleaved(2, 5, 0, 2, 0)
