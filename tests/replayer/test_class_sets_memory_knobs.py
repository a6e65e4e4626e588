"""Rank classes stay exact with the memory knobs (issue 33): recomputation, sequence parallelism, ZeRO 1/2/3
(FSDP) and the interleaved schedule.  Each job is written once per rank and once as rank classes; the folded
class-set replay equals the per-rank replay to the nanosecond, rank by rank and collective by collective."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tracekit.converters.generators import LLMConfig, ParallelSpec, Roofline, llm_preset
from tracekit.converters.generators.llm import write_llm
from tracekit.replayer import ReplayOptions, replay_with_traces

KNOBS = {
    "full-recompute": dict(recompute="full"),
    "selective-sp": dict(recompute="selective", sequence_parallel=True),
    "zero1-distributed-optimizer": dict(zero_stage=1),
    "zero2": dict(zero_stage=2, recompute="selective"),
    "zero3-fsdp-interleaved": dict(zero_stage=3, schedule="interleaved", virtual_stages=2, recompute="full"),
}


@pytest.mark.parametrize("knob", list(KNOBS))
def test_class_set_replay_equals_per_rank_replay(knob, tmp_path):
    model = replace(llm_preset("gpt3-1.3b")[0], num_layers=4)
    parallel = ParallelSpec(dp=2, tp=2, pp=2, **KNOBS[knob])
    config = LLMConfig(model, parallel, global_batch_size=8, micro_batch_size=1)
    cost = Roofline(312e12 * 0.7, 2.0e12 * 0.8)
    write_llm(config, tmp_path / "ranks" / "job", cost)
    write_llm(config, tmp_path / "classes" / "job", cost, classes=True)
    per_rank, _ = replay_with_traces(tmp_path / "ranks" / "job", "dgx-a100", options=ReplayOptions(fold=False))
    folded, read = replay_with_traces(tmp_path / "classes" / "job", "dgx-a100")
    assert folded.folding is not None and folded.folding.reason is None and folded.folding.classes == 2
    assert sorted(read.ranks) == [0, 4]  # one representative per pipeline stage was read
    assert folded.iteration_time_ns == per_rank.iteration_time_ns > 0
    assert folded.ranks == per_rank.ranks
    assert folded.collectives == per_rank.collectives
    assert folded.critical_path == per_rank.critical_path
