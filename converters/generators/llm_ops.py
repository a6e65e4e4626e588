"""The operations of one transformer pass on one rank: FLOPs, bytes and TP/CP/EP communication.

A :class:`Block` is the op list of one pass of one unit (a layer's forward,
its backward, the embedding, the output head) on one rank, identical for
every layer and micro-batch, so it is computed once per configuration and
stamped out many times by :mod:`tracekit.converters.generators.llm`.

Counting rules (all per rank, per micro-batch of ``b`` sequences):

* Tokens per rank ``t = b s / cp``; under sequence parallelism the
  elementwise blocks (norms, dropout, residual) see ``t / tp`` tokens.
* A GEMM ``[m x k] @ [k x n]`` is ``2 m k n`` FLOPs (multiply and add; not
  MACs) and moves ``(m k + k n + m n)`` elements.  Column- and row-parallel
  GEMMs divide ``n`` or ``k`` by ``tp``; attention divides heads by ``tp``.
* Backward of a GEMM is a data-gradient GEMM (phase ``bwd``) and a
  weight-gradient GEMM (phase ``wgrad``), each as costly as the forward;
  backward of ``Q K^T`` and ``P V`` is twice their forward.  Summed over all
  ranks this gives Narayanan et al. 2021's ``72 B s L h^2 (1 + s/(6h) +
  V/(12 L h))`` per iteration for GPT (``96 ... V/(16 L h)`` with full
  recompute, whose backward reruns each layer's forward).
* Selective recompute reruns ``Q K^T``, softmax/dropout and ``P V`` before
  the layer's backward (Korthikanti et al. 2022, section 5).
* Tensor parallelism (Megatron-LM, Shoeybi et al. 2019): an all-reduce of
  ``t h`` elements after the attention output and the second FFN GEMM in the
  forward, and after the QKV and first FFN data-gradient GEMMs in the
  backward (overlapped with the weight-gradient GEMM).  With sequence
  parallelism each becomes a reduce-scatter, the matching conjugate
  all-gathers appear before the column-parallel GEMMs (forward) and the
  row-parallel ones (backward), and the backward re-gathers the inputs of
  the column-parallel weight-gradient GEMMs (Korthikanti et al. 2022,
  section 4.2.2).
* ``comm_size`` follows ASTRA-sim's convention: the full buffer for
  all-reduce, reduce-scatter and all-to-all; the per-rank input for
  all-gather.
* Elementwise FLOPs per element (:data:`ELEMENTWISE_OPS`) are our estimates;
  these blocks are memory-bound and their time comes from bytes.

Roofline (Williams et al. 2009): ``duration_ns = ceil(max(num_ops /
peak_flops_per_s, tensor_size / mem_bandwidth_bytes_per_s) * 1e9)``.
"""

from __future__ import annotations


from tracekit.converters.generators import llm_attention
from tracekit.model import CollectiveType
from tracekit.workloads.config import LLMConfig
from tracekit.converters.generators.llm_steps import ENTRY as ENTRY  # re-exported: the op-block vocabulary
from tracekit.converters.generators.llm_steps import Block, Dims, Roofline, _BlockBuilder
from tracekit.converters.generators.llm_steps import HardwareLike as HardwareLike
from tracekit.converters.generators.llm_steps import Step as Step

# FLOPs per element of elementwise blocks (estimates; forward, backward is twice).
ELEMENTWISE_OPS = {
    "layernorm": 7,
    "rmsnorm": 4,
    "softmax": 7,
    "gelu": 8,
    "swiglu": 5,
    "residual": 3,
    "embedding": 1,
    "cross_entropy": 5,
}
# Op roles of matrix multiplications (GEMMs, attention products, logits).
MATMUL_ROLES = frozenset(
    {
        "qkv_gemm",
        "flash_attention",
        "attn_score",
        "attn_value",
        "proj_gemm",
        "fc1_gemm",
        "fc2_gemm",
        "logits_gemm",
        "router_gemm",
        "expert_fc1_gemm",
        "expert_fc2_gemm",
    }
)


def _tp_gather(bb: _BlockBuilder, x: Dims, role: str = "tp_allgather", **kw) -> int | None:
    """Sequence-parallel all-gather of ``t h`` activations (per-rank input ``t/tp h``); returns its step."""
    if x.sp:
        return bb.coll(role, CollectiveType.ALL_GATHER, x.te * x.h * x.dt, "tp", **kw)
    return None


def _gathered_gemm(bb: _BlockBuilder, x: Dims, role: str, m: int, k: int, n: int, **kw) -> None:
    """The SP all-gather of a GEMM's input, then the GEMM; with userbuffers overlap (``x.tp_overlap``) the two
    run together (the ring-exchange all-gather pipelined with the GEMM's chunks) and the next step waits for
    both."""
    gather = _tp_gather(bb, x, join=not x.tp_overlap)
    bb.gemm(role, m, k, n, x.dt, **kw)
    if x.tp_overlap and gather is not None:
        bb.pending.append(gather)


def _reduced_gemm(bb: _BlockBuilder, x: Dims, role: str, m: int, k: int, n: int) -> None:
    """A row-parallel GEMM, then the tp reduction of its output; with userbuffers overlap the
    reduce-scatter starts with the GEMM (pipelined over its chunks) and the next step waits for both."""
    before = bb.last
    bb.gemm(role, m, k, n, x.dt, comm_sms=x.comm_sms)  # userbuffers' pipeline method keeps SMs for the RS
    _tp_reduce(bb, x, after=before if x.tp_overlap else None)


def _fp8_cast(bb: _BlockBuilder, x: Dims, elements: int, phase: str | None = None) -> None:
    """Transformer Engine's cast of a BF16 GEMM operand to FP8 with its transpose and amax (one kernel:
    reads 2 bytes, writes 1 + 1 per element; ``cast_transpose`` in transformer_engine/common).  In the
    forward only the attention output (the projection's input) needs one: the norm before QKV and FC1
    and the activation before FC2 write FP8 themselves (TE ``LayerNormLinear``, ``LayerNormMLP``); in the
    backward every linear layer's output gradient is cast and transposed before its dgrad and wgrad."""
    bb.comp("fp8_cast_transpose", 2 * elements, 2 * elements, x.dt, phase=phase)


def _tp_reduce(bb: _BlockBuilder, x: Dims, **kw) -> int | None:
    """Tensor-parallel all-reduce of ``t h`` activations, or reduce-scatter under SP; returns its step."""
    if x.tp == 1:
        return None
    if x.sp:
        return bb.coll("tp_reducescatter", CollectiveType.REDUCE_SCATTER, x.t * x.h * x.dt, "tp", **kw)
    return bb.coll("tp_allreduce", CollectiveType.ALL_REDUCE, x.t * x.h * x.dt, "tp", **kw)


def _bmm_ns(bb: _BlockBuilder, x: Dims, m: int, k: int, n: int, elements: int, times: int = 1) -> int | None:
    """Duration of ``times`` batched GEMMs over ``b x heads`` (attention products), or None without hardware."""
    if not bb.roofline:
        return None
    return times * bb.roofline.gemm_ns(m, k, n, elements * x.dt // times, x.b * x.heads)


def _softmax_ns(bb: _BlockBuilder, flops: int, elements: int, x: Dims, scores: int) -> int | None:
    """Softmax node duration; with ``attention_dropout`` (:mod:`.calibration`) it also pays the dropout
    kernel on the probabilities: read and write ``scores`` values and a one-byte mask (backward: read
    gradient and mask, write gradient)."""
    if not bb.roofline:
        return None
    dropout = scores * (2 * x.dt + 1) if getattr(bb.roofline, "attention_dropout", False) else 0
    return bb.roofline.duration_ns(flops, elements * x.dt + dropout)


def _attention_core(bb: _BlockBuilder, x: Dims, ew: dict, phase: str | None = None) -> None:
    if x.fused_attention:
        llm_attention.fused_forward(bb, x, phase)
        return
    sq = x.t // x.b  # query positions per rank
    score_flops = 2 * x.b * sq * x.s * x.d * x.heads
    scores = x.b * x.heads * sq * x.s
    q, kv = x.t * x.heads * x.d, x.b * x.s * x.kv_heads * x.d
    bb.comp(
        "attn_score",
        score_flops,
        q + kv + scores,
        x.dt,
        phase=phase,
        duration_ns=_bmm_ns(bb, x, sq, x.d, x.s, q + kv + scores),
    )
    bb.comp(
        "softmax",
        ew["softmax"] * scores,
        2 * scores,
        x.dt,
        phase=phase,
        duration_ns=_softmax_ns(bb, ew["softmax"] * scores, 2 * scores, x, scores),
    )
    bb.comp(
        "attn_value",
        score_flops,
        scores + kv + q,
        x.dt,
        phase=phase,
        duration_ns=_bmm_ns(bb, x, sq, x.s, x.d, scores + kv + q),
    )


def _norm(c: LLMConfig) -> str:
    return c.model.norm


def layer_forward(c: LLMConfig, roofline: Roofline | None, phase: str = "fwd") -> Block:
    """Forward of one transformer layer on one rank (``phase="recompute"`` for full recompute)."""
    x, ew, m = Dims.of(c), ELEMENTWISE_OPS, c.model
    bb = _BlockBuilder(roofline, phase)
    bb.comp("input_norm", ew[_norm(c)] * x.te * x.h, 2 * x.te * x.h, x.dt)
    _gathered_gemm(bb, x, "qkv_gemm", x.t, x.h, x.qkv)
    if x.cp > 1 and not x.fused_attention:
        bb.coll("cp_kv_allgather", CollectiveType.ALL_GATHER, x.t * 2 * x.kv_heads * x.d * x.dt, "cp")
    _attention_core(bb, x, ew)
    if x.fp8:
        _fp8_cast(bb, x, x.t * x.heads * x.d)
    _reduced_gemm(bb, x, "proj_gemm", x.t, x.heads * x.d, x.h)
    bb.comp("attn_residual_norm", (ew["residual"] + ew[_norm(c)]) * x.te * x.h, 3 * x.te * x.h, x.dt)
    act = m.activation
    if m.is_moe:
        _tp_gather(bb, x)
        bb.gemm("router_gemm", x.t, x.h, m.num_experts, x.dt)
        slots = x.t * m.moe_top_k
        if x.ep > 1:
            bb.coll("ep_dispatch_alltoall", CollectiveType.ALL_TO_ALL, slots * x.h * x.dt, "ep")
        bb.gemm("expert_fc1_gemm", slots, x.h, x.ffn_in, x.dt)
        bb.comp("activation", ew[act] * slots * x.ffn, slots * (x.ffn_in + x.ffn), x.dt)
        bb.gemm("expert_fc2_gemm", slots, x.ffn, x.h, x.dt)
        if x.ep > 1:
            bb.coll("ep_combine_alltoall", CollectiveType.ALL_TO_ALL, slots * x.h * x.dt, "ep")
        _tp_reduce(bb, x)
    else:
        _gathered_gemm(bb, x, "fc1_gemm", x.t, x.h, x.ffn_in)
        bb.comp("activation", ew[act] * x.t * x.ffn, x.t * (x.ffn_in + x.ffn), x.dt)
        _reduced_gemm(bb, x, "fc2_gemm", x.t, x.ffn, x.h)
    bb.comp("mlp_residual", ew["residual"] * x.te * x.h, 3 * x.te * x.h, x.dt)
    return bb.build()


def _linear_backward(
    bb: _BlockBuilder, x: Dims, role: str, m: int, k: int, n: int, *, column_parallel: bool, gather: int | None = None
) -> None:
    """dgrad (+ TP reduction of the input gradient for column-parallel layers) and wgrad.

    For a column-parallel layer the input gradient is all-reduced (reduce-
    scattered under SP) while the weight-gradient GEMM runs (before it when
    the stack's or the cost model's ``tp_dgrad_overlap`` is False); under SP the layer
    input is all-gathered again for the weight gradient.  ``gather``: the SP all-gather of the output
    gradient still in flight under userbuffers overlap (the dgrad runs with it, the wgrad waits for it).
    Under FP8 the output gradient is cast and transposed first (:func:`_fp8_cast`).
    """
    linear = role != "logits_gemm"  # the output layer stays in BF16 under FP8
    if x.fp8 and linear:
        _fp8_cast(bb, x, m * n, phase="bwd")
    regather = None
    if column_parallel and x.sp:
        regather = bb.coll("tp_allgather", CollectiveType.ALL_GATHER, x.te * x.h * x.dt, "tp", join=False)
    sms = x.comm_sms if column_parallel else 0  # userbuffers' bulk overlaps (qkv / fc1 dgrad and wgrad) keep SMs
    dgrad = bb.gemm(role, m, n, k, x.dt, phase="bwd", linear=linear, comm_sms=sms)
    # overlapped unless the stack or the cost model says the framework runs it before the wgrad (.calibration)
    overlap = x.dgrad_overlap if x.dgrad_overlap is not None else getattr(bb.roofline, "tp_dgrad_overlap", True)
    reduce = _tp_reduce(bb, x, after=dgrad, join=not overlap) if column_parallel else None
    if not overlap:
        reduce = None
    waits = tuple(i for i in (regather, gather) if i is not None)
    bb.gemm(role, k, m, n, x.dt, phase="wgrad", extra_deps=waits, linear=linear, comm_sms=sms)
    if reduce is not None:
        bb.pending.append(reduce)


def _overlapped_gather(bb: _BlockBuilder, x: Dims) -> int | None:
    """The SP all-gather of an output gradient before a row-parallel backward: blocking, or (userbuffers)
    in flight with the dgrad GEMM (returned for :func:`_linear_backward`'s ``gather``)."""
    step = _tp_gather(bb, x, join=not x.tp_overlap)
    return step if x.tp_overlap else None


def _attention_backward(bb: _BlockBuilder, x: Dims, ew: dict) -> None:
    """Backward of the attention core: fused (:mod:`.llm_attention`) or Megatron-LM 2021's unfused kernels."""
    if x.fused_attention:
        llm_attention.fused_backward(bb, x)
        return
    sq = x.t // x.b
    score_flops = 2 * x.b * sq * x.s * x.d * x.heads
    scores = x.b * x.heads * sq * x.s
    q, kv = x.t * x.heads * x.d, x.b * x.s * x.kv_heads * x.d
    bb.comp(
        "attn_value",
        2 * score_flops,
        2 * (scores + kv + q),
        x.dt,
        duration_ns=_bmm_ns(bb, x, sq, x.s, x.d, 2 * (scores + kv + q), times=2),
    )
    bb.comp(
        "softmax",
        2 * ew["softmax"] * scores,
        3 * scores,
        x.dt,
        duration_ns=_softmax_ns(bb, 2 * ew["softmax"] * scores, 3 * scores, x, scores),
    )
    bb.comp(
        "attn_score",
        2 * score_flops,
        2 * (q + kv + scores),
        x.dt,
        duration_ns=_bmm_ns(bb, x, sq, x.d, x.s, 2 * (q + kv + scores), times=2),
    )
    if x.cp > 1:
        bb.coll("cp_kv_reducescatter", CollectiveType.REDUCE_SCATTER, x.cp * x.t * 2 * x.kv_heads * x.d * x.dt, "cp")


def layer_backward(c: LLMConfig, roofline: Roofline | None) -> Block:
    """Backward of one transformer layer on one rank (with selective recompute if configured)."""
    x, ew, m = Dims.of(c), ELEMENTWISE_OPS, c.model
    bb = _BlockBuilder(roofline, "bwd")
    bb.comp("mlp_residual", 2 * ew["residual"] * x.te * x.h, 3 * x.te * x.h, x.dt)
    act = m.activation
    if m.is_moe:
        _tp_gather(bb, x)
        slots = x.t * m.moe_top_k
        if x.ep > 1:
            bb.coll("ep_combine_alltoall", CollectiveType.ALL_TO_ALL, slots * x.h * x.dt, "ep")
        _linear_backward(bb, x, "expert_fc2_gemm", slots, x.ffn, x.h, column_parallel=False)
        bb.comp("activation", 2 * ew[act] * slots * x.ffn, slots * (x.ffn_in + 2 * x.ffn), x.dt)
        # expert fc1: its input gradient is summed over tp after the dispatch all-to-all's backward
        bb.gemm("expert_fc1_gemm", slots, x.ffn_in, x.h, x.dt)
        bb.gemm("expert_fc1_gemm", x.h, slots, x.ffn_in, x.dt, phase="wgrad")
        if x.ep > 1:
            bb.coll("ep_dispatch_alltoall", CollectiveType.ALL_TO_ALL, slots * x.h * x.dt, "ep")
        bb.gemm("router_gemm", x.t, m.num_experts, x.h, x.dt)
        bb.gemm("router_gemm", x.h, x.t, m.num_experts, x.dt, phase="wgrad")
        _tp_reduce(bb, x)
    else:
        gather = _overlapped_gather(bb, x)
        _linear_backward(bb, x, "fc2_gemm", x.t, x.ffn, x.h, column_parallel=False, gather=gather)
        bb.comp("activation", 2 * ew[act] * x.t * x.ffn, x.t * (x.ffn_in + 2 * x.ffn), x.dt)
        _linear_backward(bb, x, "fc1_gemm", x.t, x.h, x.ffn_in, column_parallel=True)
    bb.comp("attn_residual_norm", 2 * (ew["residual"] + ew[_norm(c)]) * x.te * x.h, 4 * x.te * x.h, x.dt)
    gather = _overlapped_gather(bb, x)
    _linear_backward(bb, x, "proj_gemm", x.t, x.heads * x.d, x.h, column_parallel=False, gather=gather)
    if c.parallel.recompute == "selective":
        _attention_core(bb, x, ew, phase="recompute")
    _attention_backward(bb, x, ew)
    _linear_backward(bb, x, "qkv_gemm", x.t, x.h, x.qkv, column_parallel=True)
    bb.comp("input_norm", 2 * ew[_norm(c)] * x.te * x.h, 3 * x.te * x.h, x.dt)
    return bb.build()


def embedding_forward(c: LLMConfig, roofline: Roofline | None) -> Block:
    """Word (+ position) embedding lookup on the first stage; vocab-parallel reduction over tp."""
    x = Dims.of(c)
    bb = _BlockBuilder(roofline, "fwd")
    bb.comp("embedding", ELEMENTWISE_OPS["embedding"] * x.t * x.h, 3 * x.t * x.h, x.dt)
    _tp_reduce(bb, x)
    return bb.build()


def embedding_backward(c: LLMConfig, roofline: Roofline | None) -> Block:
    """Embedding weight gradient (scatter-add of ``t h`` rows)."""
    x = Dims.of(c)
    bb = _BlockBuilder(roofline, "wgrad")
    _tp_gather(bb, x)
    bb.comp("embedding", ELEMENTWISE_OPS["embedding"] * x.t * x.h, 3 * x.t * x.h, x.dt)
    return bb.build()


def head_forward(c: LLMConfig, roofline: Roofline | None) -> Block:
    """Final norm, logits GEMM (vocab-parallel) and cross-entropy on the last stage.

    Megatron-LM's vocab-parallel cross-entropy all-reduces three fp32 values
    per token over tp (max logit, target logit, sum of exponentials).
    """
    x, ew = Dims.of(c), ELEMENTWISE_OPS
    bb = _BlockBuilder(roofline, "fwd")
    bb.comp("final_norm", ew[_norm(c)] * x.te * x.h, 2 * x.te * x.h, x.dt)
    _tp_gather(bb, x)
    bb.gemm("logits_gemm", x.t, x.h, x.vocab, x.dt, linear=False)
    bb.comp("cross_entropy", ew["cross_entropy"] * x.t * x.vocab, 2 * x.t * x.vocab, x.dt)
    if x.tp > 1:
        for _ in range(3):
            bb.coll("ce_tp_allreduce", CollectiveType.ALL_REDUCE, x.t * 4, "tp")
    bb.comp("loss", x.t, 2 * x.t, 4)
    return bb.build()


def head_backward(c: LLMConfig, roofline: Roofline | None) -> Block:
    """Backward of the cross-entropy, logits GEMM (dgrad + wgrad) and final norm."""
    x, ew = Dims.of(c), ELEMENTWISE_OPS
    bb = _BlockBuilder(roofline, "bwd")
    bb.comp("cross_entropy", 2 * ew["cross_entropy"] * x.t * x.vocab, 2 * x.t * x.vocab, x.dt)
    _linear_backward(bb, x, "logits_gemm", x.t, x.h, x.vocab, column_parallel=True)
    bb.comp("final_norm", 2 * ew[_norm(c)] * x.te * x.h, 3 * x.te * x.h, x.dt)
    return bb.build()
