"""The int64 fields of a generated LLM trace: the largest value a configuration puts in each, found before writing.

Chakra's ``num_ops`` and ``comm_size`` are int64 and ``tensor_size`` is written as an int64 here too
(``_build.INT64_MAX``); a configuration of absurd sizes (``--seq 100000000000``) would otherwise fail deep in the
encoder on the first node that overflows.  :func:`int64_overflow` computes the per-rank op blocks
(:mod:`.llm_ops`, no durations: a few dozen steps) and the gradient and optimizer sizes, and returns the first
value above ``2^63 - 1``; :func:`largest_fitting` finds the largest value of one size option that fits, the
others fixed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from tracekit.converters.generators import llm_ops as ops
from tracekit.converters.generators.build import INT64_MAX
from tracekit.errors import ConfigError
from tracekit.workloads.config import LLMConfig
from tracekit.workloads.flops import ADAM_FLOPS_PER_PARAM, ADAM_STATE_BYTES_PER_PARAM
from tracekit.workloads.params import model_params


@dataclass(frozen=True)
class FieldOverflow:
    """A value a configuration would write above ``2^63 - 1``.

    Attributes:
        node_name: the node that would carry it (``attn_score.fwd``).
        field: the Chakra attribute: ``num_ops`` (FLOPs), ``tensor_size`` or ``comm_size`` (bytes).
        value: the value it would hold.
    """

    node_name: str
    field: str
    value: int


def _blocks(config: LLMConfig) -> list[ops.Block]:
    """The per-rank op blocks of ``config`` without durations (selective recompute is inside the backward)."""
    return [
        ops.layer_forward(config, None),
        ops.layer_backward(config, None),
        ops.embedding_forward(config, None),
        ops.embedding_backward(config, None),
        ops.head_forward(config, None),
        ops.head_backward(config, None),
    ]


def int64_overflow(config: LLMConfig) -> FieldOverflow | None:
    """The first int64 field ``config``'s traces would overflow, or None when every value fits.

    Checks every step of the op blocks (``num_ops``, ``tensor_size``, ``comm_size``), then the gradient reduction
    and the optimizer step, bounded above by the whole model's parameters (:func:`model_params`; a rank holds at
    most all of them): gradient bytes ``P x grad_bytes`` and Adam's ``ADAM_FLOPS_PER_PARAM x P`` FLOPs and
    ``(ADAM_STATE_BYTES_PER_PARAM + grad_bytes + dtype_bytes) x P`` bytes.
    """
    for block in _blocks(config):
        for step in block.steps:
            for field, value in (
                ("num_ops", step.num_ops),
                ("tensor_size", step.tensor_bytes),
                ("comm_size", step.comm_bytes),
            ):
                if value > INT64_MAX:
                    return FieldOverflow(step.name, field, value)
    params = model_params(config.model)
    per_param_bytes = ADAM_STATE_BYTES_PER_PARAM + config.grad_bytes + config.dtype_bytes
    for name, field, value in (
        ("dp_grad_allreduce.grad_sync", "comm_size", params * config.grad_bytes),
        ("optimizer_step.optim", "num_ops", ADAM_FLOPS_PER_PARAM * params),
        ("optimizer_step.optim", "tensor_size", per_param_bytes * params),
    ):
        if value > INT64_MAX:
            return FieldOverflow(name, field, value)
    return None


def largest_fitting(build: Callable[[int], LLMConfig], given: int, unit: int = 1) -> int | None:
    """The largest multiple of ``unit`` below ``given`` whose configuration ``build(value)`` fits int64, or None.

    A bisection: the op sizes grow with every size option (tokens, widths, vocabulary, layers), so the values that
    fit form a prefix.  A value the configuration refuses (``ConfigError``, e.g. a divisibility rule) counts as
    not fitting.
    """

    def fits(k: int) -> bool:
        try:
            return int64_overflow(build(k * unit)) is None
        except ConfigError:
            return False

    lo, hi = 0, given // unit  # fits(lo) assumed (0 = none), fits(hi) is False (the caller's overflow)
    if hi < 1 or not fits(1):
        return None
    lo = 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo * unit


def replace_model(config: LLMConfig, field: str, value: int) -> LLMConfig:
    """``config`` with the :class:`~tracekit.workloads.config.ModelSpec` size ``field`` set to ``value`` (validated
    again)."""
    changes: dict[str, Any] = {field: value}
    return dataclasses.replace(config, model=dataclasses.replace(config.model, **changes))
