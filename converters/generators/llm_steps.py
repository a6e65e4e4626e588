"""The building blocks of the LLM generator's op lists: the flat :class:`Roofline`, a :class:`Step` (one
node), a :class:`Block` (the steps of one pass of one unit), the block builder and the per-rank sizes
:class:`Dims`.  The counting rules that fill blocks live in :mod:`.llm_ops`.

Roofline (Williams et al. 2009): ``duration_ns = ceil(max(num_ops / peak_flops_per_s,
tensor_size / mem_bandwidth_bytes_per_s) * 1e9)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from tracekit.errors import ConfigError
from tracekit.model import CollectiveType
from tracekit.workloads.config import LLMConfig
from tracekit.workloads.stacks import fp8_gemms_only
from tracekit.workloads.flops import gemm_elements, gemm_flops

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
        for what, value in (
            ("peak FLOP/s", self.peak_flops_per_s),
            ("memory bandwidth", self.mem_bandwidth_bytes_per_s),
        ):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0 or math.isinf(value):
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

    def gemm_ns(
        self, m: int, k: int, n: int, tensor_bytes: int, batch: int = 1, linear: bool = False, comm_sms: int = 0
    ) -> int:
        """``batch`` GEMMs ``[m, k] @ [k, n]``: the flat roofline (shape-aware in :mod:`.calibration`;
        ``linear`` and ``comm_sms`` do not change a flat roofline, which has no SMs)."""
        return self.duration_ns(gemm_flops(m, k, n, batch), tensor_bytes)

    def optimizer_ns(self, num_ops: int, tensor_bytes: int, params: int) -> int:
        """The optimizer step: the flat roofline of its FLOPs and bytes."""
        return self.duration_ns(num_ops, tensor_bytes)

    def attention_ns(self, num_ops: int, tensor_bytes: int, batch_heads: int, q_len: int) -> int:
        """A fused attention kernel: the flat roofline of the FLOPs it executes and its bytes."""
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
        comm_type: the collective, None for COMP (and for a send or receive).
        comm_bytes: ``comm_size`` of a collective, a send or a receive.
        group: group kind of a collective, a send or a receive (see llm_layout.GROUP_KINDS).
        p2p: ``"send"`` (to the next rank of ``group``'s ring) or ``"recv"`` (from the previous one); ``""``
            for a COMP node or a collective.
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
    p2p: str = ""

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

    def comp(
        self,
        role: str,
        num_ops: int,
        elements: int,
        dtype_bytes: int,
        *,
        phase: str | None = None,
        extra_deps: tuple[int, ...] = (),
        duration_ns: int | None = None,
    ) -> int:
        nbytes = elements * dtype_bytes
        dur = (
            duration_ns
            if duration_ns is not None
            else (self.roofline.duration_ns(num_ops, nbytes) if self.roofline else 0)
        )
        deps = tuple(dict.fromkeys((self.last, *self.pending, *extra_deps)))
        self.steps.append(Step(role, phase or self.phase, num_ops, nbytes, dur, deps=deps))
        self.last, self.pending = len(self.steps) - 1, []
        return self.last

    def gemm(
        self,
        role: str,
        m: int,
        k: int,
        n: int,
        dtype_bytes: int,
        *,
        batch: int = 1,
        linear: bool = True,
        comm_sms: int = 0,
        **kw,
    ) -> int:
        """``batch`` GEMMs ``[m, k] @ [k, n]`` (duration from the cost model's ``gemm_ns``); ``linear``: a
        transformer linear layer (FP8 under Transformer Engine's recipe; the output layer is not); ``comm_sms``:
        SMs an overlapped communication kernel keeps meanwhile (:attr:`Dims.comm_sms`)."""
        elements = gemm_elements(m, k, n, batch)
        dur = 0
        if self.roofline:
            extra = {"comm_sms": comm_sms} if comm_sms else {}
            dur = self.roofline.gemm_ns(m, k, n, elements * dtype_bytes, batch, linear=linear, **extra)
        return self.comp(role, gemm_flops(m, k, n, batch), elements, dtype_bytes, duration_ns=dur, **kw)

    def coll(
        self,
        role: str,
        comm_type: CollectiveType,
        comm_bytes: int,
        group: str,
        *,
        join: bool = True,
        after: int | None = None,
    ) -> int:
        dep = self.last if after is None else after
        self.steps.append(Step(role, self.phase, comm_type=comm_type, comm_bytes=comm_bytes, group=group, deps=(dep,)))
        idx = len(self.steps) - 1
        if join:
            self.pending.append(idx)
        return idx

    def p2p(self, role: str, kind: str, comm_bytes: int, group: str, *, after: int, join: bool = False) -> int:
        """A send to the next rank (``kind="send"``) or a receive from the previous rank (``"recv"``) of this
        rank's ring in ``group``, posted once step ``after`` is done; ``join``: the next compute step waits
        for it."""
        self.steps.append(Step(role, self.phase, comm_bytes=comm_bytes, group=group, deps=(after,), p2p=kind))
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
    heads: int  # attention heads on this rank
    kv_heads: int  # key/value heads on this rank
    d: int  # head dimension
    qkv: int  # QKV output width on this rank
    ffn: int  # FFN inner size on this rank
    ffn_in: int  # first FFN GEMM output on this rank (2x for SwiGLU)
    vocab: int  # padded vocabulary on this rank
    t: int  # tokens per rank
    te: int  # tokens of elementwise blocks (t / tp under SP)
    dt: int  # bytes per element
    fused_attention: bool = False  # one fused attention kernel (tracekit.workloads.stacks)
    ring_cp: bool = False  # context parallelism as a ring of K/V exchanges
    tp_overlap: bool = False  # userbuffers: SP all-gathers / reduce-scatters run with their GEMMs
    dgrad_overlap: bool | None = None  # tp input-gradient reduction with the wgrad GEMM (None: cost model's)
    fp8: bool = False  # Transformer Engine FP8: linear GEMMs in FP8 with cast/transpose kernels
    comm_sms: int = 0  # SMs userbuffers' pipeline / bulk overlaps keep from their GEMMs (StackSpec.tp_overlap_comm_sms)

    @classmethod
    def of(cls, c: LLMConfig) -> "Dims":
        """The per-rank sizes of ``c``: tokens ``t = b s / cp`` (``t / tp`` for elementwise blocks under
        sequence parallelism), heads, QKV / FFN / vocabulary widths divided by ``tp`` (Megatron-LM's
        column/row split, Shoeybi et al. 2019), ``dt`` bytes per element.  Sizes in elements.

        Divisibility is checked by :class:`LLMConfig` (``ConfigError`` there), so nothing is raised here.
        """
        m, p, st = c.model, c.parallel, c.stack
        t = c.micro_batch_size * m.seq_length // p.cp
        ffn_in = m.ffn_in_size
        return cls(
            b=c.micro_batch_size,
            s=m.seq_length,
            h=m.hidden_size,
            tp=p.tp,
            cp=p.cp,
            ep=p.ep,
            sp=p.sequence_parallel,
            heads=m.num_heads // p.tp,
            kv_heads=m.kv_heads // p.tp,
            d=m.head_dim,
            qkv=m.qkv_size // p.tp,
            ffn=m.ffn_size // p.tp,
            ffn_in=ffn_in // p.tp,
            vocab=c.padded_vocab_size // p.tp,
            t=t,
            te=t // p.tp if p.sequence_parallel else t,
            dt=c.dtype_bytes,
            fused_attention=st.fused_attention,
            ring_cp=st.cp_comm == "ring" and p.cp > 1,
            tp_overlap=st.tp_comm_overlap and p.sequence_parallel,
            dgrad_overlap=st.tp_dgrad_overlap,
            fp8=fp8_gemms_only(c),
            comm_sms=st.tp_overlap_comm_sms if st.tp_comm_overlap and p.sequence_parallel else 0,
        )
