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

import math
from dataclasses import dataclass
from typing import Protocol

from tracekit.errors import ConfigError
from tracekit.model import CollectiveType
from tracekit.workloads.config import LLMConfig
from tracekit.workloads.flops import gemm_elements, gemm_flops

# FLOPs per element of elementwise blocks (estimates; forward, backward is twice).
ELEMENTWISE_OPS = {"layernorm": 7, "rmsnorm": 4, "softmax": 7, "gelu": 8, "swiglu": 5, "residual": 3,
                   "embedding": 1, "cross_entropy": 5}
# Op roles of matrix multiplications (GEMMs, attention products, logits).
MATMUL_ROLES = frozenset({"qkv_gemm", "attn_score", "attn_value", "proj_gemm", "fc1_gemm", "fc2_gemm",
                          "logits_gemm", "router_gemm", "expert_fc1_gemm", "expert_fc2_gemm"})
ENTRY = -1  # a step dependency meaning "the block's entry nodes"


class HardwareLike(Protocol):
    """Anything with a peak compute rate and a memory bandwidth (e.g. the replayer's HardwareSpec)."""

    peak_flops_per_s: float
    mem_bandwidth_bytes_per_s: float


@dataclass(frozen=True)
class Roofline:
    """Peak FLOP/s and memory bandwidth (bytes/s) of one device, for roofline durations.

    Raises:
        ConfigError: non-positive rates.
    """

    peak_flops_per_s: float
    mem_bandwidth_bytes_per_s: float

    def __post_init__(self) -> None:
        for what, value in (("peak FLOP/s", self.peak_flops_per_s),
                            ("memory bandwidth", self.mem_bandwidth_bytes_per_s)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0 \
                    or math.isinf(value):
                raise ConfigError(f"{what} must be a positive number, got {value!r}")

    @classmethod
    def of(cls, hardware: "HardwareLike | Roofline | tuple[float, float] | None") -> "Roofline | None":
        """A :class:`Roofline` from a spec-like object, a ``(flops, bytes/s)`` pair, or None; a
        :class:`~.calibration.CalibratedCost` is returned as it is (it has the same methods)."""
        from tracekit.converters.generators.calibration import CalibratedCost

        if hardware is None or isinstance(hardware, (Roofline, CalibratedCost)):
            return hardware
        if isinstance(hardware, tuple):
            return cls(*hardware)
        try:
            return cls(hardware.peak_flops_per_s, hardware.mem_bandwidth_bytes_per_s)
        except AttributeError:
            raise ConfigError(f"hardware {hardware!r} has no peak_flops_per_s / mem_bandwidth_bytes_per_s") from None

    def duration_ns(self, num_ops: int, tensor_bytes: int) -> int:
        """Roofline time of one op, whole ns rounded up: ``ceil(max(num_ops / peak_flops_per_s,
        tensor_bytes / mem_bandwidth_bytes_per_s) * 1e9)`` (Williams et al. 2009, "Roofline").

        Args:
            num_ops: floating-point operations (FLOPs, not MACs).
            tensor_bytes: bytes read and written.
        """
        seconds = max(num_ops / self.peak_flops_per_s, tensor_bytes / self.mem_bandwidth_bytes_per_s)
        return math.ceil(seconds * 1e9)

    def gemm_ns(self, m: int, k: int, n: int, tensor_bytes: int, batch: int = 1) -> int:
        """``batch`` GEMMs ``[m, k] @ [k, n]``: the flat roofline (shape-aware in :mod:`.calibration`)."""
        return self.duration_ns(gemm_flops(m, k, n, batch), tensor_bytes)

    def optimizer_ns(self, num_ops: int, tensor_bytes: int, params: int) -> int:
        """The optimizer step: the flat roofline of its FLOPs and bytes."""
        return self.duration_ns(num_ops, tensor_bytes)


@dataclass(frozen=True, slots=True)
class Step:
    """One node of a :class:`Block`.

    Attributes:
        role: ``op_role`` attribute (e.g. ``qkv_gemm``, ``tp_allreduce``).
        phase: ``fwd``, ``bwd``, ``wgrad`` or ``recompute``.
        num_ops: FLOPs (COMP) or 0.
        tensor_bytes: bytes read and written (COMP) or 0.
        duration_ns: roofline duration (COMP with hardware) or 0.
        comm_type: the collective, None for COMP.
        comm_bytes: ``comm_size`` of a collective.
        group: group kind of a collective (see llm_layout.GROUP_KINDS).
        deps: indices of earlier steps; :data:`ENTRY` = the block's entry.
    """

    role: str
    phase: str
    num_ops: int = 0
    tensor_bytes: int = 0
    duration_ns: int = 0
    comm_type: CollectiveType | None = None
    comm_bytes: int = 0
    group: str = ""
    deps: tuple[int, ...] = (ENTRY,)

    @property
    def name(self) -> str:
        """The node name: ``<op_role>.<phase>`` (e.g. ``qkv_gemm.fwd``)."""
        return f"{self.role}.{self.phase}"


@dataclass(frozen=True)
class Block:
    """Steps of one pass of one unit, and the steps later work waits for."""

    steps: tuple[Step, ...]
    exits: tuple[int, ...]


class _BlockBuilder:
    """Appends steps in stream order; blocking collectives are joined by the next compute step."""

    def __init__(self, roofline: Roofline | None, phase: str) -> None:
        self.roofline, self.phase = roofline, phase
        self.steps: list[Step] = []
        self.last: int = ENTRY
        self.pending: list[int] = []

    def comp(self, role: str, num_ops: int, elements: int, dtype_bytes: int, *, phase: str | None = None,
             extra_deps: tuple[int, ...] = (), duration_ns: int | None = None) -> int:
        nbytes = elements * dtype_bytes
        dur = duration_ns if duration_ns is not None else \
            (self.roofline.duration_ns(num_ops, nbytes) if self.roofline else 0)
        deps = tuple(dict.fromkeys((self.last, *self.pending, *extra_deps)))
        self.steps.append(Step(role, phase or self.phase, num_ops, nbytes, dur, deps=deps))
        self.last, self.pending = len(self.steps) - 1, []
        return self.last

    def gemm(self, role: str, m: int, k: int, n: int, dtype_bytes: int, *, batch: int = 1, **kw) -> int:
        """``batch`` GEMMs ``[m, k] @ [k, n]`` (duration from the cost model's ``gemm_ns``)."""
        elements = gemm_elements(m, k, n, batch)
        dur = self.roofline.gemm_ns(m, k, n, elements * dtype_bytes, batch) if self.roofline else 0
        return self.comp(role, gemm_flops(m, k, n, batch), elements, dtype_bytes, duration_ns=dur, **kw)

    def coll(self, role: str, comm_type: CollectiveType, comm_bytes: int, group: str, *,
             join: bool = True, after: int | None = None) -> int:
        dep = self.last if after is None else after
        self.steps.append(Step(role, self.phase, comm_type=comm_type, comm_bytes=comm_bytes, group=group,
                               deps=(dep,)))
        idx = len(self.steps) - 1
        if join:
            self.pending.append(idx)
        return idx

    def build(self) -> Block:
        return Block(tuple(self.steps), tuple(dict.fromkeys((self.last, *self.pending))))


@dataclass(frozen=True)
class Dims:
    """Per-rank sizes of one micro-batch (see module docstring)."""

    b: int
    s: int
    h: int
    tp: int
    cp: int
    ep: int
    sp: bool
    heads: int          # attention heads on this rank
    kv_heads: int       # key/value heads on this rank
    d: int              # head dimension
    qkv: int            # QKV output width on this rank
    ffn: int            # FFN inner size on this rank
    ffn_in: int         # first FFN GEMM output on this rank (2x for SwiGLU)
    vocab: int          # padded vocabulary on this rank
    t: int              # tokens per rank
    te: int             # tokens of elementwise blocks (t / tp under SP)
    dt: int             # bytes per element

    @classmethod
    def of(cls, c: LLMConfig) -> "Dims":
        """The per-rank sizes of ``c``: tokens ``t = b s / cp`` (``t / tp`` for elementwise blocks under
        sequence parallelism), heads, QKV / FFN / vocabulary widths divided by ``tp`` (Megatron-LM's
        column/row split, Shoeybi et al. 2019), ``dt`` bytes per element.  Sizes in elements.

        Divisibility is checked by :class:`LLMConfig` (``ConfigError`` there), so nothing is raised here.
        """
        m, p = c.model, c.parallel
        t = c.micro_batch_size * m.seq_length // p.cp
        ffn_in = m.ffn_in_size
        return cls(b=c.micro_batch_size, s=m.seq_length, h=m.hidden_size, tp=p.tp, cp=p.cp, ep=p.ep,
                   sp=p.sequence_parallel, heads=m.num_heads // p.tp, kv_heads=m.kv_heads // p.tp,
                   d=m.head_dim, qkv=m.qkv_size // p.tp, ffn=m.ffn_size // p.tp, ffn_in=ffn_in // p.tp,
                   vocab=c.padded_vocab_size // p.tp, t=t, te=t // p.tp if p.sequence_parallel else t,
                   dt=c.dtype_bytes)


def _tp_gather(bb: _BlockBuilder, x: Dims, role: str = "tp_allgather", **kw) -> None:
    """Sequence-parallel all-gather of ``t h`` activations (per-rank input ``t/tp h``)."""
    if x.sp:
        bb.coll(role, CollectiveType.ALL_GATHER, x.te * x.h * x.dt, "tp", **kw)


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
    sq = x.t // x.b                       # query positions per rank
    score_flops = 2 * x.b * sq * x.s * x.d * x.heads
    scores = x.b * x.heads * sq * x.s
    q, kv = x.t * x.heads * x.d, x.b * x.s * x.kv_heads * x.d
    bb.comp("attn_score", score_flops, q + kv + scores, x.dt, phase=phase,
            duration_ns=_bmm_ns(bb, x, sq, x.d, x.s, q + kv + scores))
    bb.comp("softmax", ew["softmax"] * scores, 2 * scores, x.dt, phase=phase,
            duration_ns=_softmax_ns(bb, ew["softmax"] * scores, 2 * scores, x, scores))
    bb.comp("attn_value", score_flops, scores + kv + q, x.dt, phase=phase,
            duration_ns=_bmm_ns(bb, x, sq, x.s, x.d, scores + kv + q))


def _norm(c: LLMConfig) -> str:
    return c.model.norm


def layer_forward(c: LLMConfig, roofline: Roofline | None, phase: str = "fwd") -> Block:
    """Forward of one transformer layer on one rank (``phase="recompute"`` for full recompute)."""
    x, ew, m = Dims.of(c), ELEMENTWISE_OPS, c.model
    bb = _BlockBuilder(roofline, phase)
    bb.comp("input_norm", ew[_norm(c)] * x.te * x.h, 2 * x.te * x.h, x.dt)
    _tp_gather(bb, x)
    bb.gemm("qkv_gemm", x.t, x.h, x.qkv, x.dt)
    if x.cp > 1:
        bb.coll("cp_kv_allgather", CollectiveType.ALL_GATHER, x.t * 2 * x.kv_heads * x.d * x.dt, "cp")
    _attention_core(bb, x, ew)
    bb.gemm("proj_gemm", x.t, x.heads * x.d, x.h, x.dt)
    _tp_reduce(bb, x)
    bb.comp("attn_residual_norm", (ew["residual"] + ew[_norm(c)]) * x.te * x.h, 3 * x.te * x.h, x.dt)
    _tp_gather(bb, x)
    act = m.activation
    if m.is_moe:
        bb.gemm("router_gemm", x.t, x.h, m.num_experts, x.dt)
        slots = x.t * m.moe_top_k
        if x.ep > 1:
            bb.coll("ep_dispatch_alltoall", CollectiveType.ALL_TO_ALL, slots * x.h * x.dt, "ep")
        bb.gemm("expert_fc1_gemm", slots, x.h, x.ffn_in, x.dt)
        bb.comp("activation", ew[act] * slots * x.ffn, slots * (x.ffn_in + x.ffn), x.dt)
        bb.gemm("expert_fc2_gemm", slots, x.ffn, x.h, x.dt)
        if x.ep > 1:
            bb.coll("ep_combine_alltoall", CollectiveType.ALL_TO_ALL, slots * x.h * x.dt, "ep")
    else:
        bb.gemm("fc1_gemm", x.t, x.h, x.ffn_in, x.dt)
        bb.comp("activation", ew[act] * x.t * x.ffn, x.t * (x.ffn_in + x.ffn), x.dt)
        bb.gemm("fc2_gemm", x.t, x.ffn, x.h, x.dt)
    _tp_reduce(bb, x)
    bb.comp("mlp_residual", ew["residual"] * x.te * x.h, 3 * x.te * x.h, x.dt)
    return bb.build()


def _linear_backward(bb: _BlockBuilder, x: Dims, role: str, m: int, k: int, n: int, *,
                     column_parallel: bool) -> None:
    """dgrad (+ TP reduction of the input gradient for column-parallel layers) and wgrad.

    For a column-parallel layer the input gradient is all-reduced (reduce-
    scattered under SP) while the weight-gradient GEMM runs (before it when
    the cost model's ``tp_dgrad_overlap`` is False); under SP the layer
    input is all-gathered again for the weight gradient.
    """
    regather = None
    if column_parallel and x.sp:
        regather = bb.coll("tp_allgather", CollectiveType.ALL_GATHER, x.te * x.h * x.dt, "tp", join=False)
    dgrad = bb.gemm(role, m, n, k, x.dt, phase="bwd")
    # overlapped unless the cost model says the framework runs it before the wgrad (.calibration)
    overlap = getattr(bb.roofline, "tp_dgrad_overlap", True)
    reduce = _tp_reduce(bb, x, after=dgrad, join=not overlap) if column_parallel else None
    if not overlap:
        reduce = None
    bb.gemm(role, k, m, n, x.dt, phase="wgrad", extra_deps=() if regather is None else (regather,))
    if reduce is not None:
        bb.pending.append(reduce)


def layer_backward(c: LLMConfig, roofline: Roofline | None) -> Block:
    """Backward of one transformer layer on one rank (with selective recompute if configured)."""
    x, ew, m = Dims.of(c), ELEMENTWISE_OPS, c.model
    bb = _BlockBuilder(roofline, "bwd")
    bb.comp("mlp_residual", 2 * ew["residual"] * x.te * x.h, 3 * x.te * x.h, x.dt)
    _tp_gather(bb, x)
    act = m.activation
    if m.is_moe:
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
        _linear_backward(bb, x, "fc2_gemm", x.t, x.ffn, x.h, column_parallel=False)
        bb.comp("activation", 2 * ew[act] * x.t * x.ffn, x.t * (x.ffn_in + 2 * x.ffn), x.dt)
        _linear_backward(bb, x, "fc1_gemm", x.t, x.h, x.ffn_in, column_parallel=True)
    bb.comp("attn_residual_norm", 2 * (ew["residual"] + ew[_norm(c)]) * x.te * x.h, 4 * x.te * x.h, x.dt)
    _tp_gather(bb, x)
    _linear_backward(bb, x, "proj_gemm", x.t, x.heads * x.d, x.h, column_parallel=False)
    if c.parallel.recompute == "selective":
        _attention_core(bb, x, ew, phase="recompute")
    sq = x.t // x.b
    score_flops = 2 * x.b * sq * x.s * x.d * x.heads
    scores = x.b * x.heads * sq * x.s
    q, kv = x.t * x.heads * x.d, x.b * x.s * x.kv_heads * x.d
    bb.comp("attn_value", 2 * score_flops, 2 * (scores + kv + q), x.dt,
            duration_ns=_bmm_ns(bb, x, sq, x.s, x.d, 2 * (scores + kv + q), times=2))
    bb.comp("softmax", 2 * ew["softmax"] * scores, 3 * scores, x.dt,
            duration_ns=_softmax_ns(bb, 2 * ew["softmax"] * scores, 3 * scores, x, scores))
    bb.comp("attn_score", 2 * score_flops, 2 * (q + kv + scores), x.dt,
            duration_ns=_bmm_ns(bb, x, sq, x.d, x.s, 2 * (q + kv + scores), times=2))
    if x.cp > 1:
        bb.coll("cp_kv_reducescatter", CollectiveType.REDUCE_SCATTER,
                x.cp * x.t * 2 * x.kv_heads * x.d * x.dt, "cp")
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
    bb.gemm("logits_gemm", x.t, x.h, x.vocab, x.dt)
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
