"""The layouts ``tracekit plan`` considers: every split of a model on N GPUs that the divisibility rules allow.

A :class:`Layout` fixes every knob of a training job's parallel layout (the fields of
:class:`~tracekit.workloads.config.ParallelSpec` the planner varies, the micro-batch size and the precision);
:func:`enumerate_layouts` walks the product of the knobs' candidate values (:class:`KnobSpace`; any knob can be
fixed to one value or a list) and keeps the combinations that satisfy the rules below, counting the others by
reason.

Divisibility rules (Megatron-LM's; Narayanan et al. 2021, section 3; Korthikanti et al. 2022, section 4):

* ``GPUs = tp x pp x dp x cp``; tensor parallelism stays within a node (``tp`` divides the GPUs per node);
* ``tp`` divides the attention heads, the key/value heads and the FFN size;
* ``pp x vp`` divides the layers (even stages; the planner does not try uneven splits);
* ``dp x micro-batch`` divides the global batch; the interleaved schedule (``vp > 1``) needs ``pp >= 2`` and
  takes any number of micro-batches per pipeline (Llama 3's flexible interleaving, Dubey et al. 2024, section
  3.3.2, with :func:`~tracekit.workloads.schedules.default_group_size`; Megatron-LM's own needs a multiple of
  ``pp``);
* ``cp`` divides the sequence length (``tp x cp`` under sequence parallelism);
* ``ep`` divides the experts and ``dp`` (dense models: ``ep = 1``);
* sequence parallelism needs ``tp >= 2``.

Anything :class:`~tracekit.workloads.config.LLMConfig` refuses beyond these is counted under its own message.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from tracekit.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.workloads.config import LLMConfig

#: The knobs, in the order tables print them.
KNOBS = ("tp", "pp", "dp", "cp", "ep", "micro_batch", "vp", "recompute", "sp", "zero", "dtype")
RECOMPUTE_MODES = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2, 3)
#: Largest micro-batch and virtual-stage count tried unless a knob is fixed.
MAX_MICRO_BATCH = 8
MAX_VIRTUAL_STAGES = 8
#: Context parallelism is tried (2, 4, 8) only from this sequence length on unless ``cp`` is fixed: below it
#: the attention core is a small share of a layer and splitting the sequence only adds communication.
CP_MIN_SEQ = 8192


@dataclass(frozen=True, order=True)
class Layout:
    """One complete layout of a training job.

    Attributes:
        tp, pp, dp, cp, ep: tensor-, pipeline-, data-, context- and expert-parallel degrees.
        micro_batch: sequences per micro-batch.
        vp: model chunks per pipeline rank (1: the 1F1B schedule; more: Megatron-LM's interleaved schedule).
        recompute: activation recomputation, ``none``, ``selective`` or ``full``.
        sp: sequence parallelism (Korthikanti et al. 2022).
        zero: ZeRO stage (1 = Megatron-LM's distributed optimizer).
        dtype: training precision (``bf16``, ``fp16``, ``fp8`` ...).
    """

    tp: int
    pp: int
    dp: int
    cp: int = 1
    ep: int = 1
    micro_batch: int = 1
    vp: int = 1
    recompute: str = "none"
    sp: bool = False
    zero: int = 0
    dtype: str = "bf16"

    @property
    def gpus(self) -> int:
        """GPUs of the layout: ``tp x pp x dp x cp``."""
        return self.tp * self.pp * self.dp * self.cp

    @property
    def label(self) -> str:
        """A short name: ``tp8 pp16 dp8 mb1 vp1 full sp zero1 bf16`` (``cp``/``ep`` only when above 1)."""
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"dp{self.dp}"]
        parts += [f"cp{self.cp}"] if self.cp > 1 else []
        parts += [f"ep{self.ep}"] if self.ep > 1 else []
        parts += [f"mb{self.micro_batch}", f"vp{self.vp}", self.recompute, "sp" if self.sp else "nosp"]
        return " ".join([*parts, f"zero{self.zero}", self.dtype])

    def knobs(self) -> dict[str, Any]:
        """The knob values by name (:data:`KNOBS` order), JSON-ready."""
        return {k: getattr(self, k) for k in KNOBS}

    def config(self, base: "LLMConfig") -> "LLMConfig":
        """``base`` (model, global batch, stack, gradient buckets) with this layout.

        Raises:
            ConfigError: a combination :class:`~tracekit.workloads.config.LLMConfig` refuses.
        """
        parallel = dataclasses.replace(
            base.parallel,
            tp=self.tp,
            pp=self.pp,
            dp=self.dp,
            cp=self.cp,
            ep=self.ep,
            sequence_parallel=self.sp,
            zero_stage=self.zero,
            recompute=self.recompute,
            schedule="interleaved" if self.vp > 1 else "1f1b",
            virtual_stages=self.vp,
        )
        return dataclasses.replace(base, parallel=parallel, micro_batch_size=self.micro_batch, dtype=self.dtype)

    def generate_args(self) -> list[str]:
        """The ``tracekit generate llm`` options of this layout (parallel, batch and precision options)."""
        args = ["--tp", str(self.tp), "--pp", str(self.pp), "--dp", str(self.dp)]
        args += ["--cp", str(self.cp)] if self.cp > 1 else []
        args += ["--ep", str(self.ep)] if self.ep > 1 else []
        args += ["--micro-batch", str(self.micro_batch)]
        args += ["--schedule", "interleaved", "--virtual-stages", str(self.vp)] if self.vp > 1 else []
        args += ["--sp"] if self.sp else []
        return [*args, "--recompute", self.recompute, "--zero", str(self.zero), "--dtype", self.dtype]


@dataclass(frozen=True)
class KnobSpace:
    """Candidate values per knob; an empty tuple means "every value the rules allow" (module doc).

    Attributes:
        tp, pp, dp, cp, ep, micro_batch, vp, zero: integer candidates.
        recompute: among :data:`RECOMPUTE_MODES`; sp: among ``(False, True)``; dtype: precisions.
    """

    tp: tuple[int, ...] = ()
    pp: tuple[int, ...] = ()
    dp: tuple[int, ...] = ()
    cp: tuple[int, ...] = ()
    ep: tuple[int, ...] = ()
    micro_batch: tuple[int, ...] = ()
    vp: tuple[int, ...] = ()
    recompute: tuple[str, ...] = ()
    sp: tuple[bool, ...] = ()
    zero: tuple[int, ...] = ()
    dtype: tuple[str, ...] = ()

    @classmethod
    def parse(cls, values: Mapping[str, str | None]) -> "KnobSpace":
        """A space from ``{knob: "v1,v2"}`` command-line texts (None: free).

        ``sp`` takes ``on``/``off``; integer knobs positive integers; ``recompute`` and ``zero`` their modes.

        Raises:
            ConfigError: an unknown knob, a bad value or an empty item (``1,``), naming the option and the value.
        """
        out: dict[str, tuple[Any, ...]] = {}
        for knob, text in values.items():
            if knob not in KNOBS:
                raise ConfigError(f"unknown layout knob {knob!r}; knobs: {', '.join(KNOBS)}")
            if text is None:
                continue
            items = [item.strip() for item in str(text).split(",")]
            if not all(items):
                raise ConfigError(
                    f"--{_option(knob)} {text!r}: an empty value (a stray comma); give one value or a comma-separated list"
                )
            out[knob] = tuple(_parse_value(knob, item) for item in items)
        return cls(**out)


def _option(knob: str) -> str:
    return {"micro_batch": "micro-batch"}.get(knob, knob)


def _parse_value(knob: str, item: str) -> Any:
    """One value of a knob's option text (``KnobSpace.parse``)."""
    if knob == "sp":
        if item.lower() not in ("on", "off"):
            raise ConfigError(f"--sp {item!r}: give on, off or on,off")
        return item.lower() == "on"
    if knob == "recompute":
        if item not in RECOMPUTE_MODES:
            raise ConfigError(f"--recompute {item!r}: choose from {', '.join(RECOMPUTE_MODES)}")
        return item
    if knob == "dtype":
        from tracekit.workloads.units import TRAINING_DTYPES

        if item not in TRAINING_DTYPES:
            raise ConfigError(f"--dtype {item!r}: choose from {', '.join(TRAINING_DTYPES)}")
        return item
    try:
        value = int(item)
    except ValueError:
        raise ConfigError(f"--{_option(knob)} {item!r} is not an integer") from None
    if knob == "zero" and value not in ZERO_STAGES:
        raise ConfigError(f"--zero {value}: choose from 0, 1, 2, 3")
    if value < 1 and knob != "zero":
        raise ConfigError(f"--{_option(knob)} {value}: must be at least 1")
    return value


@dataclass
class Enumeration:
    """What :func:`enumerate_layouts` found.

    Attributes:
        layouts: the layouts that satisfy every rule, in a fixed order.
        rejected: per reason (a sentence naming the rule and the values), how many combinations it removed.
    """

    layouts: list[Layout] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)

    @property
    def rejected_count(self) -> int:
        """Combinations the divisibility rules removed."""
        return sum(self.rejected.values())


def _divisors(n: int, limit: int | None = None) -> list[int]:
    return [d for d in range(1, (n if limit is None else min(n, limit)) + 1) if n % d == 0]


def _pick(fixed: tuple[Any, ...], default: Sequence[Any]) -> list[Any]:
    return list(fixed) if fixed else list(default)


def enumerate_layouts(base: "LLMConfig", gpus: int, gpus_per_node: int, space: KnobSpace | None = None) -> Enumeration:
    """Every layout of ``base``'s model and global batch on ``gpus`` GPUs allowed by the rules (module doc).

    Args:
        base: the job (model, global batch, stack, buckets); its parallel layout is ignored.
        gpus: GPUs of the job.
        gpus_per_node: GPUs sharing the fast intra-node network (tensor parallelism stays within them).
        space: candidate values per knob (default: all).

    Raises:
        ConfigError: ``gpus`` or ``gpus_per_node`` below 1.
    """
    if gpus < 1 or gpus_per_node < 1:
        raise ConfigError(f"--gpus must be at least 1 (got {gpus}) and GPUs per node at least 1 ({gpus_per_node})")
    space = space or KnobSpace()
    out = Enumeration()
    for layout in _combinations(base, gpus, gpus_per_node, space, out.rejected):
        reason = _refusal(base, layout)
        if reason is None:
            out.layouts.append(layout)
        else:
            out.rejected[reason] += 1
    return out


def _combinations(
    base: "LLMConfig", gpus: int, gpus_per_node: int, space: KnobSpace, rejected: Counter[str]
) -> Iterator[Layout]:
    """Knob combinations that pass the divisibility rules; the others counted into ``rejected``."""
    m = base.model
    batch = base.global_batch_size
    tps = _pick(space.tp, _divisors(gpus_per_node))
    cps = _pick(space.cp, [1, 2, 4, 8] if m.seq_length >= CP_MIN_SEQ else [1])
    for tp, cp in itertools.product(tps, cps):
        if gpus % (tp * cp):
            rejected[f"tp x cp = {tp * cp} does not divide {gpus} GPUs"] += 1
            continue
        if tp > gpus_per_node:
            rejected[f"tp {tp} spans more than a node of {gpus_per_node} GPUs"] += 1
            continue
        if m.num_heads % tp or m.kv_heads % tp or m.ffn_size % tp:
            rejected[f"tp {tp} does not divide the heads {m.num_heads} / kv heads {m.kv_heads} / FFN"] += 1
            continue
        for pp in _pick(space.pp, _divisors(gpus // (tp * cp), m.num_layers)):
            if (gpus // (tp * cp)) % pp:
                rejected[f"tp x cp x pp = {tp * cp * pp} does not divide {gpus} GPUs"] += 1
                continue
            dp = gpus // (tp * cp * pp)
            if space.dp and dp not in space.dp:
                continue
            if m.num_layers % pp:
                rejected[f"pp {pp} does not divide the {m.num_layers} layers"] += 1
                continue
            yield from _inner(base, space, rejected, tp, cp, pp, dp, batch)


def _inner(
    base: "LLMConfig", space: KnobSpace, rejected: Counter[str], tp: int, cp: int, pp: int, dp: int, batch: int
) -> Iterator[Layout]:
    """The micro-batch, virtual-stage, expert and remaining knobs of one ``(tp, cp, pp, dp)``."""
    m = base.model
    eps = _pick(space.ep, [e for e in _divisors(dp) if m.num_experts % e == 0] if m.is_moe else [1])
    mbs = _pick(space.micro_batch, [b for b in (1, 2, 4, 8) if b <= MAX_MICRO_BATCH])
    sps = _pick(space.sp, [tp > 1])
    rest = list(
        itertools.product(
            _pick(space.recompute, RECOMPUTE_MODES),
            sps,
            _pick(space.zero, ZERO_STAGES),
            _pick(space.dtype, [base.dtype]),
        )
    )
    for mb in mbs:
        if batch % (dp * mb):
            rejected[f"global batch {batch} is not divisible by dp {dp} x micro-batch {mb}"] += 1
            continue
        vps = _pick(space.vp, [1] + [v for v in _divisors(m.num_layers // pp, MAX_VIRTUAL_STAGES) if v > 1 and pp > 1])
        for vp, ep in itertools.product(vps, eps):
            if m.num_layers % (pp * vp):
                rejected[f"pp {pp} x vp {vp} does not divide the {m.num_layers} layers"] += 1
                continue
            if vp > 1 and pp < 2:
                rejected[f"vp {vp} needs pp >= 2"] += 1
                continue
            if dp % ep or (m.num_experts % ep if m.is_moe else ep != 1):
                rejected[f"ep {ep} must divide dp {dp} and the {m.num_experts} experts"] += 1
                continue
            for recompute, sp, zero, dtype in rest:
                if sp and tp < 2:
                    rejected["sequence parallelism needs tp >= 2"] += 1
                    continue
                yield Layout(tp, pp, dp, cp, ep, mb, vp, recompute, sp, zero, dtype)


def _refusal(base: "LLMConfig", layout: Layout) -> str | None:
    """The message :class:`LLMConfig` refuses ``layout`` with, or None when it is valid."""
    try:
        layout.config(base)
    except ConfigError as exc:
        return exc.message
    return None


__all__ = [
    "CP_MIN_SEQ",
    "KNOBS",
    "MAX_MICRO_BATCH",
    "MAX_VIRTUAL_STAGES",
    "RECOMPUTE_MODES",
    "Enumeration",
    "KnobSpace",
    "Layout",
    "enumerate_layouts",
]
