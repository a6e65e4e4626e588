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
  ``m`` divisible by ``p``).  Llama 3's flexible interleaving (Dubey et al.
  2024, section 3.3.2) generalises it: groups of ``N`` micro-batches (tunable,
  :func:`default_group_size`), any ``m`` (also fewer than ``p``), warm-ups
  grown until a tick schedule of the stages cannot stall
  (:func:`interleaved_warmups`: deadlock-free by construction).

With uniform per-pass costs the pipeline bubble is ``(p - 1) / (m + p - 1)``
of the iteration for GPipe and 1F1B and ``(p - 1) / (v m + p - 1)`` for the
interleaved schedule (Narayanan et al. 2021, section 2.2: the bubble shrinks
by a factor of ``v``) when ``m >= p`` and :func:`default_group_size`; with
``m < p`` micro-batches each of the ``v - 1`` chunk changes waits ``p - m``
passes more: bubble time ``((p - 1) + (v - 1)(p - m)) (t_f + t_b) / v``
(derived here; tests/converters/test_flexible_interleaving.py checks it).
"""

from __future__ import annotations

import functools
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


def default_group_size(p: int, m: int) -> int:
    """Megatron-Core's default ``N`` (contiguous micro-batches per virtual stage) made flexible.

    ``p`` when it divides ``m`` (Megatron-LM's interleaving); with fewer micro-batches than stages, ``m`` (Llama
    3's "fewer micro-batches than stages"); otherwise the smallest ``N`` in ``p .. m`` whose last group is
    empty or holds at least ``p`` micro-batches (``m mod N == 0`` or ``m mod N >= p``: Megatron-Core's condition
    for a schedule without dependency bubbles, ``forward_backward_pipelining_with_interleaving``).
    """
    if m < p:
        return m
    return next(n for n in range(p, m + 1) if m % n == 0 or m % n >= p)


def check_group_size(group_size: int | None, schedule: str, m: int) -> None:
    """Check a job's ``N`` (:attr:`ParallelSpec.microbatch_group_size <tracekit.workloads.config.ParallelSpec>`:
    contiguous micro-batches per virtual stage, Llama 3's flexible interleaving; None = :func:`default_group_size`).

    Raises:
        ConfigError: ``N`` not a positive integer, given for another schedule than ``interleaved``, or above the
            ``m`` micro-batches per iteration.
    """
    if group_size is None:
        return
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ConfigError(f"micro-batch group size must be positive, got {group_size!r}")
    if schedule != "interleaved":
        raise ConfigError(f"a micro-batch group size needs --schedule interleaved, not {schedule}")
    if group_size > m:
        raise ConfigError(f"micro-batch group size {group_size} is more than the {m} micro-batches per iteration")


def schedule_table(m: int, v: int, group_size: int) -> tuple[tuple[int, int], ...]:
    """``(micro_batch, chunk)`` of each forward of a stage, in order: groups of ``N = group_size`` micro-batches,
    each group through chunk 0, then chunk 1, ... (the last group holds the ``<= N`` micro-batches left).

    Source: Dubey et al. 2024, "The Llama 3 Herd of Models", section 3.3.2 and Figure 6 (``N`` tunable, any
    number of micro-batches); Megatron-Core ``get_schedule_table`` (``microbatch_group_size_per_vp_stage``).
    Backward ``k`` is the same micro-batch on chunk ``v - 1 - chunk``.
    """
    table: list[tuple[int, int]] = []
    for low in range(0, m, group_size):
        high = m if low + group_size >= m else low + group_size
        table.extend((mb, chunk) for chunk in range(v) for mb in range(low, high))
    return tuple(table)


def _ordered(table: tuple[tuple[int, int], ...], v: int, warmup: int) -> tuple[PipelineOp, ...]:
    """``warmup`` forwards, then one forward and one backward, then the remaining backwards."""
    total = len(table)
    fwd = [PipelineOp(FORWARD, mb, chunk) for mb, chunk in table]
    bwd = [PipelineOp(BACKWARD, mb, v - 1 - chunk) for mb, chunk in table]
    ops = fwd[:warmup]
    for i in range(total - warmup):
        ops.append(fwd[warmup + i])
        ops.append(bwd[i])
    ops.extend(bwd[total - warmup :])
    return tuple(ops)


def _stalled(p: int, v: int, orders: list[tuple[PipelineOp, ...]]) -> dict[int, PipelineOp]:
    """Run every stage's order as a tick schedule: a pass runs once the pass it needs has run (forward of
    virtual stage ``k`` after forward ``k - 1``; backward of ``k`` after backward ``k + 1``, the last virtual
    stage's after its own forward); sends never block.  The stages left stuck, with the pass they wait at."""
    done: set[tuple[str, int, int]] = set()
    pos, last = [0] * p, p * v - 1
    progressed = True
    while progressed:
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                op = orders[s][pos[s]]
                vs = op.chunk * p + s
                if op.kind == FORWARD:
                    need = (FORWARD, op.micro_batch, vs - 1) if vs > 0 else None
                else:
                    need = (BACKWARD, op.micro_batch, vs + 1) if vs < last else (FORWARD, op.micro_batch, vs)
                if need is not None and need not in done:
                    break
                done.add((op.kind, op.micro_batch, vs))
                pos[s] += 1
                progressed = True
    return {s: orders[s][pos[s]] for s in range(p) if pos[s] < len(orders[s])}


@functools.lru_cache(maxsize=256)
def interleaved_warmups(p: int, m: int, v: int, group_size: int) -> tuple[int, ...]:
    """Warm-up forwards per stage of the interleaved schedule, deadlock-free by construction.

    Start from Megatron-Core's ``2 (p - s - 1) + (v - 1) N`` (all ``m v`` passes when ``m == N == p``, as
    Megatron-LM did), capped at ``m v``.  Then run the orders as a tick schedule (:func:`_stalled`); while
    it stalls, every stuck stage that waits at a backward and still has forwards left runs one more warm-up
    forward, and the orders are run again.  This ends: warm-ups only grow, and with every stage at ``m v``
    (all forwards, then all backwards, both in table order) no dependency goes backwards in the order
    ``(table position, stage)``, so that schedule cannot stall.  A stall always has such a stage: follow
    the forwards stuck stages wait for to the stage with the lowest ``(table position, stage)``; it waits at
    a backward (the first forward depends on nothing).  Orders that do not stall (every ``m`` divisible by
    ``p`` with ``N = p``, and every ``N`` of :func:`default_group_size`) keep Megatron-Core's warm-ups.
    """
    total = m * v
    if m == group_size == p:
        return (total,) * p
    warm = [min(total, 2 * (p - s - 1) + (v - 1) * group_size) for s in range(p)]
    table = schedule_table(m, v, group_size)
    while True:
        stuck = _stalled(p, v, [_ordered(table, v, w) for w in warm])
        if not stuck:
            return tuple(warm)
        grown = [s for s, op in stuck.items() if op.kind == BACKWARD and warm[s] < total]
        if not grown:  # pragma: no cover - impossible (docstring); never loop forever
            raise ConfigError(f"interleaved schedule p={p} m={m} v={v} N={group_size} stalls")
        for s in grown:
            warm[s] += 1


def interleaved(p: int, m: int, stage: int, v: int, group_size: int | None = None) -> tuple[PipelineOp, ...]:
    """Interleaved 1F1B order of ``stage`` with ``v`` model chunks per stage, any number of micro-batches.

    ``m * v`` forwards and as many backwards.  Forwards follow :func:`schedule_table` (groups of ``N`` micro-
    batches per chunk; with ``N = p`` and ``m`` divisible by ``p`` forward ``k`` is micro-batch
    ``(k // (p v)) p + k mod p`` on chunk ``(k mod p v) // p``, Megatron-LM's order); backward ``k`` is the same
    micro-batch on chunk ``v - 1 - chunk``.  :func:`interleaved_warmups` forwards, then one forward and one
    backward, then the rest of the backwards.

    Args:
        group_size: ``N``, contiguous micro-batches per virtual stage (Llama 3's flexible interleaving);
            None = :func:`default_group_size`.

    Raises:
        ConfigError: bad sizes, ``v < 2``, or ``N`` outside ``1 .. m``.
    """
    _check(p, m, stage, v)
    if v < 2:
        raise ConfigError(f"the interleaved schedule needs at least 2 model chunks per stage, got {v}")
    n = default_group_size(p, m) if group_size is None else group_size
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= m:
        raise ConfigError(f"micro-batch group size must be an integer in 1..{m} (the micro-batches), got {n!r}")
    return _ordered(schedule_table(m, v, n), v, interleaved_warmups(p, m, v, n)[stage])


def stage_order(
    schedule: str, p: int, m: int, stage: int, v: int = 1, group_size: int | None = None
) -> tuple[PipelineOp, ...]:
    """The order of ``stage`` under the named schedule (``gpipe``, ``1f1b``, ``interleaved``; ``group_size``:
    the interleaved schedule's ``N``, :func:`interleaved`).

    Raises:
        ConfigError: unknown schedule name or bad sizes.
    """
    if schedule == "gpipe":
        return gpipe(p, m, stage)
    if schedule == "1f1b":
        return one_f_one_b(p, m, stage)
    if schedule == "interleaved":
        return interleaved(p, m, stage, v, group_size)
    raise ConfigError(f"unknown pipeline schedule {schedule!r}; choose gpipe, 1f1b or interleaved")
