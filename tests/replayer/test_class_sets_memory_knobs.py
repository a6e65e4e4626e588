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


def test_a_nemo_stack_with_an_uneven_split_folds_exactly_and_prints_the_same_memory(tmp_path):
    # issue 28's stack knobs (fused attention, ring cp, userbuffers, overlapped gathers) on issue 33's memory
    # report: 6 layers on pp 4 split 1, 2, 2, 1 (pipeline_split's Llama 3 rule), cp 2 with ring attention
    import json

    from cli_inprocess import run

    from tracekit.replayer.results.memory import job_memory

    args = ["generate", "llm", "--model", "llama3-8b", "--layers", "6", "--tp", "2", "--pp", "4", "--cp", "2"]
    args += ["--sp", "--seq", "256", "--global-batch", "4", "--stack", "nemo", "--hw", "dgx-h100", "--json"]
    outs = [
        run(*args, *extra, "-o", tmp_path / name / "job") for name, extra in (("ranks", []), ("classes", ["--classes"]))
    ]
    assert all(r.returncode == 0 for r in outs), [r.stderr for r in outs]
    per_rank_mem, class_mem = (json.loads(r.stdout)["memory"] for r in outs)
    assert per_rank_mem == class_mem
    assert [r["layers"] for r in class_mem["classes"]] == [1, 2, 2, 1]
    assert all(r["terms"]["working"] == 0 for r in class_mem["classes"])  # fused attention: no s x s to rebuild
    per_rank, ranks_read = replay_with_traces(tmp_path / "ranks" / "job", "dgx-h100", options=ReplayOptions(fold=False))
    folded, read = replay_with_traces(tmp_path / "classes" / "job", "dgx-h100")
    # one class per stage and cp rank: the ring's send/recv tags name the sender's cp rank (llm_attention)
    assert folded.folding is not None and folded.folding.reason is None and folded.folding.classes == 8
    assert folded.iteration_time_ns == per_rank.iteration_time_ns > 0
    assert folded.ranks == per_rank.ranks
    assert folded.collectives == per_rank.collectives
    assert folded.critical_path == per_rank.critical_path
    # the replay's memory report (read back from the traces' llm_config) is the generator's, both ways
    for traces in (ranks_read, read):
        report = job_memory(traces, "dgx-h100")
        assert report is not None and report["classes"] == class_mem["classes"]
