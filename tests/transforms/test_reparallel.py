"""TP and PP rewrites of generated traces: the program of a rewritten rank is the generator's; refusals name
what is missing.

Both sides take parameter counts, the padded vocabulary, buckets, the rank grid and the schedules from
tracekit.workloads (tested in tests/core/test_workloads.py), so these checks use a small model: what they test is
the rewrite's own logic (cutting unit blocks, rescaling them, re-stamping stages, pipeline tags and peers).
"""

from __future__ import annotations

import pytest
from _tfhelpers import comp, llm, one_rank

from tracekit.errors import ConfigError, TransformError
from tracekit.transforms import ChangePP, ChangeTP
from tracekit.checks.validate import validate_traceset


def _jobs(before, after, schedule="1f1b", **extra):
    LLMConfig, ModelSpec, ParallelSpec, generate_llm = llm()
    # vocabulary 1100 pads to 1280 at tp 2 (640 a rank) and 1536 at tp 4 (384): the vocabulary ratio 0.6 is not 1/2
    m = ModelSpec("small", num_layers=8, hidden_size=256, num_heads=8, seq_length=128, vocab_size=1100)
    kw = dict(global_batch_size=4, micro_batch_size=1)
    src = generate_llm(LLMConfig(m, ParallelSpec(schedule=schedule, **before, **extra), **kw))
    direct = generate_llm(LLMConfig(m, ParallelSpec(schedule=schedule, **after, **extra), **kw))
    return src, direct


def _program(trace):
    """A rank's nodes without group names (numbered differently by the generator and the rewrite)."""
    return [
        (
            n.name,
            n.type,
            n.data_deps,
            n.num_ops,
            n.tensor_bytes,
            n.comm_bytes,
            n.comm_src,
            n.comm_dst,
            n.comm_tag,
            n.get_attr("layer"),
            n.get_attr("micro_batch"),
        )
        for n in trace.nodes[1:]
    ]


def test_tp_rewrite_with_sequence_parallelism_matches_direct_generation():
    src, direct = _jobs(dict(tp=2, pp=2), dict(tp=4, pp=2), sequence_parallel=True)
    out = ChangeTP(4).apply(src)
    assert len(out) == 8 and validate_traceset(out).ok
    assert all(_program(out[r]) == _program(direct[r]) for r in out.ranks)
    assert sorted(out.process_groups.values()) == sorted(direct.process_groups.values())


@pytest.mark.parametrize("before,after,schedule", [(2, 4, "gpipe"), (4, 2, "1f1b")])
def test_pp_rewrite_matches_direct_generation(before, after, schedule):
    src, direct = _jobs(dict(tp=2, pp=before, dp=2), dict(tp=2, pp=after, dp=2), schedule)
    out = ChangePP(after).apply(src)
    assert len(out) == 4 * after and validate_traceset(out).ok
    assert all(_program(out[r]) == _program(direct[r]) for r in out.ranks)


def test_refusals_name_the_problem():
    with pytest.raises(TransformError, match="'llm_config' metadata .* is missing"):
        ChangeTP(8).apply(one_rank([comp(0)]))
    src, _ = _jobs(dict(tp=4, pp=2), dict(tp=4, pp=2))
    with pytest.raises(ConfigError, match="tp=16 does not divide the 8 attention heads"):
        ChangeTP(16).apply(src)
    with pytest.raises(ConfigError, match="pp=3 does not divide the 8 layers"):
        ChangePP(3).apply(src)
    with pytest.raises(TransformError, match="only tp >= 2 -> tp >= 2"):
        ChangeTP(1).apply(src)
    with pytest.raises(ConfigError, match="pp must be an integer >= 1, got 0"):
        ChangePP(0)
    zero, _ = _jobs(dict(tp=2, pp=2), dict(tp=2, pp=2), zero_stage=1, dp=2)
    with pytest.raises(TransformError, match="ZeRO stage 1"):
        ChangePP(4).apply(zero)
    # an uneven split (10 layers on 4 stages: 2, 3, 3, 2; tracekit.workloads.pipeline_split) is refused, not cut evenly
    LLMConfig, ModelSpec, ParallelSpec, generate_llm = llm()
    m = ModelSpec("ten", num_layers=10, hidden_size=256, num_heads=8, seq_length=128, vocab_size=1100)
    uneven = generate_llm(LLMConfig(m, ParallelSpec(tp=2, pp=4), global_batch_size=4))
    for rewrite in (ChangePP(2), ChangeTP(4)):
        with pytest.raises(TransformError, match=r"uneven pipeline split \(10 layers on pp=4\) is not supported"):
            rewrite.apply(uneven)
