"""Shared small configurations and helpers for the LLM generator tests."""

from __future__ import annotations

from collections import defaultdict

from tracekit.workloads.config import LLMConfig, ModelSpec, ParallelSpec

# A small GPT (biases, LayerNorm, 4h GELU FFN, tied and learned embeddings): L=8, h=64, a=8, s=32, V=1024.
TINY_GPT = ModelSpec("tiny-gpt", num_layers=8, hidden_size=64, num_heads=8, seq_length=32, vocab_size=1024)


def gpt_config(dp=1, tp=1, pp=1, *, B=16, b=1, **parallel) -> LLMConfig:
    return LLMConfig(TINY_GPT, ParallelSpec(dp=dp, tp=tp, pp=pp, **parallel), global_batch_size=B, micro_batch_size=b)


def column_sums(ts, predicate_attr: str, values: frozenset, sum_attr: str) -> int:
    """Sum of ``sum_attr`` over nodes of all ranks whose ``predicate_attr`` is in ``values``."""
    total = 0
    for trace in ts:
        cols = trace.columns()
        _, keys = cols.attr(predicate_attr)
        _, nums = cols.attr(sum_attr)
        total += sum(n for k, n in zip(keys, nums) if k in values)
    return total


def nodes_by(trace, **attrs):
    """Nodes of ``trace`` whose attributes equal ``attrs``."""
    return [n for n in trace.nodes if all(n.get_attr(k) == v for k, v in attrs.items())]


def comm_sizes(trace, role: str) -> dict[tuple[int, int, str], list[int]]:
    """comm_size of nodes with ``op_role == role`` grouped by (layer, micro_batch, phase)."""
    out: dict[tuple[int, int, str], list[int]] = defaultdict(list)
    for n in trace.nodes:
        if n.get_attr("op_role") == role:
            out[(n.get_attr("layer"), n.get_attr("micro_batch"), n.get_attr("phase"))].append(n.comm_bytes)
    return out
