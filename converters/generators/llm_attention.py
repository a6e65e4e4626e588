"""Fused attention and ring context parallelism for the LLM generator's op blocks.

Used by :mod:`.llm_ops` when the job's stack runs fused attention (``LLMConfig.stack.fused_attention``,
:mod:`tracekit.workloads.stacks`).  Per rank and micro-batch, ``t = b s / cp`` tokens, ``a`` heads and
``g`` key/value heads of width ``d`` on this rank:

* **One fused kernel** (FlashAttention-2/3, cuDNN fused attention; op role ``flash_attention``) per pass
  instead of ``Q K^T``, softmax, dropout and ``P V``.  Its ``num_ops`` are the model FLOPs of the two
  products over the full ``s x s`` scores (``4 b a sq s d``, as Narayanan et al. 2021 count them), so FLOP
  totals do not depend on the stack; its duration prices the FLOPs the kernel executes: causal masking
  skips half of the blocks (Dao 2023, "FlashAttention-2", section 3.1), and the backward executes 2.5x the
  forward (five matrix products to the forward's two: the same paper's FLOP count).  Bytes: Q, K, V and the
  output (and their gradients in the backward); the score matrix never reaches memory.
* **Ring context parallelism** (Liu et al. 2023, "Ring Attention"; Megatron-Core ``--cp-comm-type p2p``,
  Transformer Engine's ``AttnFuncWithCPAndKVP2P``): attention runs in ``cp`` steps; at step ``i`` the rank
  sends the K/V chunk in hand to the next rank of its cp ring and receives the next one from the previous
  rank (a COMM_SEND / COMM_RECV pair, ``t 2 g d`` elements, ``cp - 1`` exchanges), both posted when the chunk
  in hand has arrived, while its attention kernel runs on that chunk; step ``i + 1`` waits for the receive.
  In the backward the K/V chunk travels with its gradient accumulator (``cp - 1`` exchanges of K/V plus
  dK/dV) and a last exchange returns dK/dV to their owner; the backward's next compute waits for it.  With
  Megatron's causal load balancing (each rank holds sequence chunks ``r`` and ``2 cp - 1 - r`` of ``2 cp``:
  step 0 computes its two chunks' causal blocks, step ``i > 0`` either both query chunks against the first
  K/V chunk or the second query chunk against both, two chunk-blocks either way) every step carries the
  same share of the causal work: ``1 / cp`` of the rank's half-masked ``sq x s`` block.  Ring peers are the
  ranks of the cp group in cp-rank order (:class:`~.llm_layout.RankPlace`); ``comm_tag`` is
  ``CP_RING_TAG + 3 x (sender's cp rank) + kind`` (:data:`RING_TAGS`), so the ranks of one cp group differ
  in their tags: rank folding then keeps them apart (a rank's ring partner is never folded onto itself) and
  ``llm.iter_rank_classes`` writes one class per pipeline stage and cp rank.
* **All-gather variant** (``cp_comm="allgather"``): K/V gathered over cp before the kernel (and the K/V
  gradients reduce-scattered after the backward), as Megatron-Core's ``--cp-comm-type all_gather``.
"""

from __future__ import annotations

from typing import Callable

from tracekit.converters.generators.llm_steps import Dims, _BlockBuilder
from tracekit.model import CollectiveType

#: Fraction of the ``sq x s`` score blocks a causal (lower-triangular) mask leaves to compute.
CAUSAL_FRACTION = 0.5
#: Executed FLOPs of a FlashAttention backward over its forward's (5 products vs 2; Dao 2023).
BACKWARD_FLOPS_RATIO = 2.5
#: ``comm_tag`` base of the ring's exchanges (above the pipeline's tags, ``2 (micro_batch pp v + virtual stage)
#: + 1``, for any job the node limit allows): ``CP_RING_TAG + 3 x (sender's cp rank) + RING_TAGS[role]``.
CP_RING_TAG = 1 << 30
#: ``comm_tag`` offset of each ring exchange role: forward K/V, backward K/V with dK/dV, dK/dV home.
RING_TAGS = {"cp_kv_ring": 0, "cp_dkv_ring": 1, "cp_dkv_home": 2}


def _sizes(x: Dims) -> tuple[int, int, int]:
    """``(model FLOPs of both products, q elements, local k/v elements)`` of one rank's attention."""
    sq = x.t // x.b
    flops = 4 * x.b * sq * x.s * x.d * x.heads
    return flops, x.t * x.heads * x.d, x.t * 2 * x.kv_heads * x.d


def _kernel(bb: _BlockBuilder, x: Dims, flops: int, elements: int, *, backward: bool, **kw) -> int:
    """One fused attention node: ``flops`` model FLOPs, priced at the executed (causal, backward) FLOPs."""
    executed = flops * CAUSAL_FRACTION * (BACKWARD_FLOPS_RATIO / 2 if backward else 1)
    dur = None
    if bb.roofline:
        dur = bb.roofline.attention_ns(round(executed), elements * x.dt, x.b * x.heads, x.t // x.b)
    return bb.comp("flash_attention", flops, elements, x.dt, duration_ns=dur, **kw)


def _ring(bb: _BlockBuilder, x: Dims, role: str, step_bytes: int, kernel: Callable[[tuple[int, ...]], int]) -> int:
    """``cp`` ring steps: each posts the send of the chunk in hand and the receive of the next one (but the
    last), then runs ``kernel(extra deps)`` on the chunk in hand; returns the last kernel's step."""
    arrived, last = bb.last, bb.last  # the local K/V (the QKV GEMM, or the gradient entry)
    for step in range(x.cp):
        nxt = None
        if step < x.cp - 1:
            bb.p2p(role, "send", step_bytes, "cp", after=arrived)
            nxt = bb.p2p(role, "recv", step_bytes, "cp", after=arrived)
        last = kernel((arrived,) if step else ())
        if nxt is not None:
            arrived = nxt
    return last


def fused_forward(bb: _BlockBuilder, x: Dims, phase: str | None = None) -> None:
    """Forward of fused attention on one rank, ring or all-gathered K/V (module doc)."""
    flops, q, kv = _sizes(x)
    if not x.ring_cp:
        if x.cp > 1:
            bb.coll("cp_kv_allgather", CollectiveType.ALL_GATHER, kv * x.dt, "cp")
        _kernel(bb, x, flops, 2 * q + kv * x.cp, backward=False, phase=phase)
        return
    _ring(
        bb,
        x,
        "cp_kv_ring",
        kv * x.dt,
        lambda deps: _kernel(bb, x, flops // x.cp, 2 * q + kv, backward=False, phase=phase, extra_deps=deps),
    )


def fused_backward(bb: _BlockBuilder, x: Dims) -> None:
    """Backward of fused attention on one rank (module doc): dQ, dK, dV from dO, Q, K, V, O."""
    flops, q, kv = _sizes(x)
    if not x.ring_cp:
        _kernel(bb, x, 2 * flops, 4 * q + 2 * kv * x.cp, backward=True)
        if x.cp > 1:
            bb.coll("cp_kv_reducescatter", CollectiveType.REDUCE_SCATTER, x.cp * kv * x.dt, "cp")
        return
    # K/V and their gradient accumulator move on while this step's gradients run
    last = _ring(
        bb,
        x,
        "cp_dkv_ring",
        2 * kv * x.dt,
        lambda deps: _kernel(bb, x, 2 * flops // x.cp, 4 * q + 2 * kv, backward=True, extra_deps=deps),
    )
    bb.p2p("cp_dkv_home", "send", kv * x.dt, "cp", after=last)  # dK/dV back to their owner
    bb.p2p("cp_dkv_home", "recv", kv * x.dt, "cp", after=last, join=True)


__all__ = ["BACKWARD_FLOPS_RATIO", "CAUSAL_FRACTION", "CP_RING_TAG", "RING_TAGS", "fused_backward", "fused_forward"]
