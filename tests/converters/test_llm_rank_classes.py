"""Ranks derived from a stage's encoded representative equal ranks built directly, byte for byte."""

from __future__ import annotations

import pytest

from tests.converters._llm_helpers import TINY_GPT
from tracekit.converters.generators import LLMConfig, ModelSpec, ParallelSpec, Roofline
from tracekit.converters.generators.llm import build_rank_trace, iter_rank_bytes, write_llm
from tracekit.workloads.rank_template import _varint
from tracekit.io import encode_trace, frame, read_trace

MOE = ModelSpec(
    "tiny-moe", num_layers=8, hidden_size=64, num_heads=8, seq_length=32, vocab_size=1024, num_experts=4, moe_top_k=2
)


@pytest.mark.parametrize(
    "model,parallel",
    [
        (TINY_GPT, dict(dp=2, tp=2, pp=2)),
        # 48 ranks: group names "1".."9" and "10"..., peers across the 1- and 2-byte varint boundary (rank 128 absent,
        # but names change length), so derived records are re-framed
        (TINY_GPT, dict(dp=6, tp=2, pp=4, sequence_parallel=True, zero_stage=1)),
        (TINY_GPT, dict(dp=3, tp=4, pp=2, schedule="interleaved", virtual_stages=2, zero_stage=3, recompute="full")),
        (TINY_GPT, dict(dp=34, tp=1, pp=4, zero_stage=2, recompute="selective")),  # ranks up to 135: 2-byte varints
        (MOE, dict(dp=4, ep=2, tp=2, pp=2)),
    ],
)
def test_derived_ranks_equal_direct_builds(model, parallel):
    p = ParallelSpec(**parallel)
    batch = p.dp * 2 * p.pp
    c = LLMConfig(model, p, global_batch_size=batch, micro_batch_size=2)
    hw = Roofline(1e12, 1e11)
    count = 0
    for rank, data in iter_rank_bytes(c, hw):
        assert rank == count
        assert data == encode_trace(build_rank_trace(c, rank, hw)), f"rank {rank}"
        count += 1
    assert count == c.world_size


def test_varint_matches_io_framing():
    for n in (0, 1, 127, 128, 300, 16383, 16384, 2**21):
        assert _varint(n) + b"x" * n == frame(b"x" * n)


def test_write_llm_round_trips(tmp_path):
    c = LLMConfig(TINY_GPT, ParallelSpec(dp=2, tp=2, pp=2), global_batch_size=4)
    paths = write_llm(c, tmp_path / "job")
    assert [p.name for p in paths] == [f"job.{r}.et" for r in range(8)]
    back = read_trace(paths[5])
    direct = build_rank_trace(c, 5)
    assert [(n.id, n.name, n.data_deps, n.attrs) for n in back.nodes] == [
        (n.id, n.name, n.data_deps, n.attrs) for n in direct.nodes
    ]
