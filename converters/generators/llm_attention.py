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
* **Ring context parallelism** (Liu et al. 2023, "Ring Attention"; Megatron-Core ``--cp-comm-type p2p``):
  attention runs in ``cp`` steps; step ``i`` works on the K/V chunk that arrived at step ``i - 1`` while the
  rank passes that chunk to its ring successor (``cp - 1`` exchanges of ``t 2 g d`` elements in the
  forward; in the backward the K/V chunk travels with its gradient accumulator: ``cp - 1`` exchanges of
  K/V plus dK/dV and a last one returning dK/dV).  With Megatron's causal load balancing (each rank holds
  sequence chunks ``r`` and ``2 cp - 1 - r`` of ``2 cp``) every step carries the same share of the causal
  work: ``1 / cp`` of the rank's half-masked ``sq x s`` block.  An exchange is written as a collective on
  the cp group (``ALL_GATHER``, per-rank size ``kv / (cp - 1)``), which moves the ring step's bytes per rank;
  traces carry no per-step peers.
* **All-gather variant** (``cp_comm="allgather"``): K/V gathered over cp before the kernel (and the K/V
  gradients reduce-scattered after the backward), as Megatron-Core's ``--cp-comm-type all_gather``.
"""

from __future__ import annotations

from tracekit.converters.generators.llm_steps import Dims, _BlockBuilder
from tracekit.model import CollectiveType

#: Fraction of the ``sq x s`` score blocks a causal (lower-triangular) mask leaves to compute.
CAUSAL_FRACTION = 0.5
#: Executed FLOPs of a FlashAttention backward over its forward's (5 products vs 2; Dao 2023).
BACKWARD_FLOPS_RATIO = 2.5


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


def fused_forward(bb: _BlockBuilder, x: Dims, phase: str | None = None) -> None:
    """Forward of fused attention on one rank, ring or all-gathered K/V (module doc)."""
    flops, q, kv = _sizes(x)
    if not x.ring_cp:
        if x.cp > 1:
            bb.coll("cp_kv_allgather", CollectiveType.ALL_GATHER, kv * x.dt, "cp")
        _kernel(bb, x, flops, 2 * q + kv * x.cp, backward=False, phase=phase)
        return
    arrived = bb.last  # the local K/V (the QKV GEMM)
    for step in range(x.cp):
        nxt = None
        if step < x.cp - 1:  # pass the chunk in hand on while computing on it
            nxt = bb.coll(
                "cp_kv_ring", CollectiveType.ALL_GATHER, kv * x.dt // (x.cp - 1), "cp", join=False, after=arrived
            )
        deps = (arrived,) if step else ()
        _kernel(bb, x, flops // x.cp, 2 * q + kv, backward=False, phase=phase, extra_deps=deps)
        if nxt is not None:
            arrived = nxt


def fused_backward(bb: _BlockBuilder, x: Dims) -> None:
    """Backward of fused attention on one rank (module doc): dQ, dK, dV from dO, Q, K, V, O."""
    flops, q, kv = _sizes(x)
    if not x.ring_cp:
        _kernel(bb, x, 2 * flops, 4 * q + 2 * kv * x.cp, backward=True)
        if x.cp > 1:
            bb.coll("cp_kv_reducescatter", CollectiveType.REDUCE_SCATTER, x.cp * kv * x.dt, "cp")
        return
    arrived, ring_bytes = bb.last, kv * x.dt // (x.cp - 1)
    for step in range(x.cp):
        nxt = None
        if step < x.cp - 1:  # K/V and their gradient accumulator move on while this step's gradients run
            nxt = bb.coll(
                "cp_dkv_ring", CollectiveType.ALL_GATHER, 2 * kv * x.dt // (x.cp - 1), "cp", join=False, after=arrived
            )
        deps = (arrived,) if step else ()
        _kernel(bb, x, 2 * flops // x.cp, 4 * q + 2 * kv, backward=True, extra_deps=deps)
        if nxt is not None:
            arrived = nxt
    bb.coll("cp_dkv_ring", CollectiveType.ALL_GATHER, ring_bytes, "cp")  # dK/dV back to their owner


__all__ = ["BACKWARD_FLOPS_RATIO", "CAUSAL_FRACTION", "fused_backward", "fused_forward"]
