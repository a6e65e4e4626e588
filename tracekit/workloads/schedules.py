"""Pipeline-parallel schedules: the order in which one pipeline stage runs its passes.

A schedule is, per stage, a tuple of :class:`PipelineOp` (forward or backward
of one micro-batch on one model chunk).  Three textbook schedules, from
Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM" (SC21), section 2.2:

* :func:`gpipe` -- all forwards, then all backwards (Figure 3; GPipe, Huang
  et al. 2019).  Backwards run in micro-batch order, as drawn in Figure 3.
* :func:`one_f_one_b` -- PipeDream-Flush 1F1B (Figure 4, top): stage ``s`` of
  ``p`` runs ``w = min(p - s - 1, m)`` warm-up forwards, then alternates one
  forward and one backward, then runs the ``w`` remaining backwards.
* :func:`interleaved` -- interleaved 1F1B with ``v`` model chunks per stage
  (Figure 4, bottom): virtual stage ``c * p + s`` holds chunk ``c`` of stage
  ``s``; warm-up is ``2 (p - s - 1) + (v - 1) p`` forwards, and forwards and
  backwards visit the chunks in groups of ``p`` micro-batches, as in
  Megatron-LM's ``forward_backward_pipelining_with_interleaving`` (which needs
  ``m`` divisible by ``p``).

With uniform per-pass costs the pipeline bubble is ``(p - 1) / (m + p - 1)``
of the iteration for GPipe and 1F1B and ``(p - 1) / (v m + p - 1)`` for the
interleaved schedule (Narayanan et al. 2021, section 2.2: the bubble shrinks
by a factor of ``v``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tracekit.errors import ConfigError

FORWARD = "F"
BACKWARD = "B"


@dataclass(frozen=True, slots=True)
class PipelineOp:
    """One pass of one micro-batch through one model chunk of a stage.

    Attributes:
        kind: ``"F"`` (forward) or ``"B"`` (backward).
        micro_batch: micro-batch index, 0-based.
        chunk: model chunk (0 unless interleaved).
    """

    kind: str
    micro_batch: int
    chunk: int = 0

    def __str__(self) -> str:
        return f"{self.kind}{self.micro_batch}" + (f".{self.chunk}" if self.chunk else "")


def _check(p: int, m: int, stage: int, v: int = 1) -> None:
    for what, value in (("pipeline stages", p), ("micro-batches", m), ("virtual stages", v)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{what} must be a positive integer, got {value!r}")
    if not 0 <= stage < p:
        raise ConfigError(f"stage {stage} is outside 0..{p - 1}")


def gpipe(p: int, m: int, stage: int) -> tuple[PipelineOp, ...]:
    """GPipe order: ``F0 .. F(m-1), B0 .. B(m-1)``, the same on every stage.

    Raises:
        ConfigError: non-positive ``p`` or ``m``, stage out of range.
    """
    _check(p, m, stage)
    return tuple(PipelineOp(FORWARD, i) for i in range(m)) + tuple(PipelineOp(BACKWARD, i) for i in range(m))


def one_f_one_b(p: int, m: int, stage: int) -> tuple[PipelineOp, ...]:
    """1F1B (PipeDream-Flush) order of ``stage`` (0-based) among ``p`` stages for ``m`` micro-batches.

    Warm-up ``w = min(p - stage - 1, m)`` forwards ``F0 .. F(w-1)``; steady
    state ``F(w+i), B(i)`` for ``i = 0 .. m-w-1``; cool-down ``B(m-w) .. B(m-1)``.

    Raises:
        ConfigError: non-positive ``p`` or ``m``, stage out of range.
    """
    _check(p, m, stage)
    warmup = min(p - stage - 1, m)
    ops = [PipelineOp(FORWARD, i) for i in range(warmup)]
    for i in range(m - warmup):
        ops.append(PipelineOp(FORWARD, warmup + i))
        ops.append(PipelineOp(BACKWARD, i))
    ops.extend(PipelineOp(BACKWARD, i) for i in range(m - warmup, m))
    return tuple(ops)


def _interleaved_op(k: int, p: int, v: int, forward: bool) -> PipelineOp:
    """The k-th forward (or backward) pass of a stage in the interleaved schedule."""
    group, within = divmod(k, p * v)
    chunk = within // p
    if not forward:
        chunk = v - 1 - chunk
    micro_batch = group * p + within % p
    return PipelineOp(FORWARD if forward else BACKWARD, micro_batch, chunk)


def interleaved(p: int, m: int, stage: int, v: int) -> tuple[PipelineOp, ...]:
    """Interleaved 1F1B order of ``stage`` with ``v`` model chunks per stage.

    ``m * v`` forwards and as many backwards.  Forward ``k`` is micro-batch
    ``(k // (p v)) p + k mod p`` on chunk ``(k mod p v) // p``; backward
    ``k`` is the same micro-batch on chunk ``v - 1 - (k mod p v) // p``.
    Warm-up ``min(2 (p - stage - 1) + (v - 1) p, m v)`` forwards (all of them
    when ``m == p``), then one forward and one backward, then the rest of the
    backwards.

    Raises:
        ConfigError: bad sizes, ``v < 2``, or ``m`` not divisible by ``p``.
    """
    _check(p, m, stage, v)
    if v < 2:
        raise ConfigError(f"the interleaved schedule needs at least 2 model chunks per stage, got {v}")
    if m % p:
        raise ConfigError(f"the interleaved schedule needs micro-batches ({m}) divisible by stages ({p})")
    total = m * v
    if m == p:
        warmup = total
    else:
        warmup = min(2 * (p - stage - 1) + (v - 1) * p, total)
    ops = [_interleaved_op(k, p, v, True) for k in range(warmup)]
    for i in range(total - warmup):
        ops.append(_interleaved_op(warmup + i, p, v, True))
        ops.append(_interleaved_op(i, p, v, False))
    ops.extend(_interleaved_op(k, p, v, False) for k in range(total - warmup, total))
    return tuple(ops)


def stage_order(schedule: str, p: int, m: int, stage: int, v: int = 1) -> tuple[PipelineOp, ...]:
    """The order of ``stage`` under the named schedule (``gpipe``, ``1f1b``, ``interleaved``).

    Raises:
        ConfigError: unknown schedule name or bad sizes.
    """
    if schedule == "gpipe":
        return gpipe(p, m, stage)
    if schedule == "1f1b":
        return one_f_one_b(p, m, stage)
    if schedule == "interleaved":
        return interleaved(p, m, stage, v)
    raise ConfigError(f"unknown pipeline schedule {schedule!r}; choose gpipe, 1f1b or interleaved")
