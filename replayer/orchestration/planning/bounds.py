"""Cheap lower bounds on a layout's step time, computed from the generator's own op blocks without a trace.

The generator builds every rank's passes from a handful of blocks (:class:`~tracekit.converters.generators.
llm_rank.Plan`: a layer's forward, backward and recomputation, the embedding and the output head), each a small
graph of steps with durations from the calibrated cost model.  A replay can never beat the longest chain of
those durations, so for a layout with ``m`` micro-batches per pipeline, ``pp`` stages and ``v`` model chunks per
stage the step time is at least

``max over stages k of ( sum_{s<k} (f_s + b_s) / v  +  W_k )  +  optimizer_k  +  grad_sync_k``

* ``W_k = m x sum over the stage's units of (forward + backward (+ recompute))`` critical-path time: the passes
  of a rank run one after another (each pass waits for the previous one's exit);
* ``sum_{s<k} (f_s + b_s) / v``: the ideal pipeline bubble before stage ``k``'s first and after its last pass
  (micro-batch 0 must cross stages ``0..k-1`` forward, the last one back; Narayanan et al. 2021, section 2.2:
  bubble ``(pp - 1) / v`` of a micro-batch's forward and backward), with ``f_s``/``b_s`` a chunk's transformer
  layers only;
* or, when larger, one micro-batch's chain of passes through every stage (all chunks forward, then back) and
  stage 0's ``optimizer_0 + grad_sync_0`` after it: with fewer micro-batches than stages (Llama 3's flexible
  interleaving) the replay's bubble ``((p - 1) + (v - 1)(p - m)) (t_f + t_b) / v`` (:mod:`tracekit.workloads.
  schedules`) exceeds the ideal one, and this chain, ``p (t_f + t_b)``, is the part of it any schedule pays;
* ``optimizer_k``: the Adam step of the stage's parameter shard (the generator's own cost);
* ``grad_sync_k``: without overlapped gradient reduction, the data-parallel reduction of the stage's gradients
  at the fastest link of the machine.

Collectives inside a block are priced at ``(p - 1) / p`` of their buffer over the fastest link of the spec
(a rank must send or receive at least that much; in-network reduction such as NVLS at best halves the
classic ring's ``2 (p - 1) / p``), point-to-point transfers and kernel launch gaps at zero: the bound is
optimistic on purpose.  ``tests/replayer/test_plan.py`` checks it never exceeds a replayed step time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from tracekit.model import CollectiveType

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.orchestration.planning.enumerate import Layout
    from tracekit.replayer.simulation.hardware import HardwareSpec
    from tracekit.workloads.config import LLMConfig


@dataclass(frozen=True)
class Bound:
    """A lower bound on one layout's step time and the job's FLOPs (ns, FLOPs).

    Attributes:
        step_ns: the bound (module doc).
        compute_ns: the busiest stage's chain of passes ``W_k`` (no bubble, no optimizer).
        bubble_ns: the ideal bubble term of that stage (when the one-micro-batch chain is the bound: the chain
            beyond stage 0's passes).
        model_flops: FLOPs of one iteration of the whole job without recomputation (the generator's counts),
            for TFLOP/s and MFU.
    """

    step_ns: float
    compute_ns: float
    bubble_ns: float
    model_flops: float


def block_floor_ns(block: Any, collective_ns: Callable[[Any], float]) -> float:
    """The longest chain of a block's steps (compute durations; collectives priced by ``collective_ns``), ns."""
    finish: list[float] = []
    for step in block.steps:
        start = max((finish[d] for d in step.deps if d >= 0), default=0.0)
        finish.append(start + (step.duration_ns if step.comm_type is None else collective_ns(step)))
    return max((finish[e] for e in block.exits if e >= 0), default=0.0)


def _model_flops(block: Any) -> int:
    """FLOPs of a block's steps that are not recomputation."""
    return sum(s.num_ops for s in block.steps if s.comm_type is None and s.phase != "recompute")


class BoundModel:
    """Lower bounds of layouts of one job on one spec; the op blocks are built once per distinct shape.

    Args:
        base: the job (model, global batch, stack); spec: the machine (its device prices the ops, its collective
            model the communication, each collective alone on the network: sharing bandwidth only slows it).
        blocks: ``(job, spec) -> (Plan, cost model)``, the generator's blocks with calibrated durations
            (:func:`tracekit.converters.generators.llm_plan.calibrated_plan`, handed in by the caller: the
            replayer does not import the converters).
    """

    def __init__(
        self, base: "LLMConfig", spec: "HardwareSpec", blocks: Callable[["LLMConfig", Any], tuple[Any, Any]]
    ) -> None:
        self.base, self.spec, self.blocks = base, spec, blocks
        self._plans: dict[tuple[Any, ...], tuple[Any, Any]] = {}
        self._comm: dict[tuple[Any, ...], float] = {}
        self._models: dict[int, tuple[Any, Any]] = {}

    def _plan(self, layout: "Layout", config: "LLMConfig") -> tuple[Any, Any]:
        """``(Plan, cost)`` of the layout's block shape (cached on the knobs the blocks depend on)."""
        key = (layout.tp, layout.cp, layout.ep, layout.sp, layout.micro_batch, layout.recompute, layout.dtype)
        if key not in self._plans:
            self._plans[key] = self.blocks(config, self.spec)
        return self._plans[key]

    def comm_ns(self, world: int, comm_type: CollectiveType | None, comm_bytes: int, group: tuple[int, ...]) -> float:
        """The spec's time of one collective (``comm_type``) or message (None: ``group`` = (src, dst)) alone on
        the network, ns (:meth:`~tracekit.replayer.simulation.collectives.CommCost.time_alone_ns`)."""
        if len(group) < 2 or comm_bytes <= 0:
            return 0.0
        key = (world, comm_type, comm_bytes, group)
        if key not in self._comm:
            if world not in self._models:
                from tracekit.replayer.simulation.collective_models import make_collective_model

                fitted = self.spec.fitted(world)
                self._models[world] = (fitted, make_collective_model(fitted))
            fitted, model = self._models[world]
            cost = (
                model.p2p_cost(comm_bytes, *group)
                if comm_type is None
                else model.collective_cost(comm_type, comm_bytes, group)
            )
            self._comm[key] = cost.time_alone_ns(fitted)
        return self._comm[key]

    def bound(self, layout: "Layout") -> Bound:
        """The lower bound of ``layout`` (module doc).

        Raises:
            ConfigError: a layout the job's configuration refuses.
            SpecError: the spec cannot hold the layout's GPUs.
        """
        from tracekit.workloads.memory import stage_units
        from tracekit.workloads.params import unit_params

        config = layout.config(self.base)
        plan, cost = self._plan(layout, config)
        world, tp, cp = config.world_size, layout.tp, layout.cp
        groups = {
            "tp": tuple(range(tp)),
            "cp": tuple(range(0, tp * cp, tp)),
            "ep": tuple(range(0, tp * cp * layout.ep, tp * cp)),
        }

        def collective_ns(step: Any) -> float:
            return self.comm_ns(world, step.comm_type, step.comm_bytes, groups[step.group])

        floor = {  # per unit kind: (forward, backward incl. recompute) ns and model FLOPs per micro-batch
            "layer": self._unit(plan.layer_fwd, plan.layer_bwd, plan.layer_recompute, collective_ns),
            "embed": self._unit(plan.embed_fwd, plan.embed_bwd, None, collective_ns),
            "head": self._unit(plan.head_fwd, plan.head_bwd, None, collective_ns),
        }
        m, n_layers = config.num_micro_batches, config.model.num_layers
        activation = config.micro_batch_size * config.model.seq_length // (cp * (tp if layout.sp else 1))
        message = activation * config.model.hidden_size * config.dtype_bytes
        hop = 2 * self.comm_ns(world, None, message, (0, world // layout.pp)) if layout.pp > 1 else 0.0
        lead = best = compute = bubble = chain = 0.0
        flops_per_mb = 0
        for stage in range(layout.pp):
            units = stage_units(config, stage)
            kinds = ["embed" if u == -1 else "head" if u == n_layers else "layer" for u in units]
            params = [unit_params(config.model, u, tp, layout.pp, layout.ep) for u in units]
            chain += sum(floor[k][0] + floor[k][1] for k in kinds)
            work = m * sum(floor[k][0] + floor[k][1] for k in kinds)
            flops_per_mb += sum(floor[k][2] for k in kinds)
            stage_elems = sum(p.dense + p.expert for p in params)
            tail = self._optimizer_ns(config, cost, stage_elems) + self._grad_sync_ns(config, stage_elems, False)
            # one communication stream per process group (the generator's comm_streams): the busiest one
            streams: dict[str, float] = {"grad": self._zero3_ns(config, units, params)}
            streams["grad"] += self._grad_sync_ns(config, stage_elems, True)
            for k in kinds:
                for group, ns in floor[k][3].items():
                    streams[group] = streams.get(group, 0.0) + m * ns
            serial = max(streams.values())
            here = max(lead + work + tail, serial)
            if here > best:
                best, compute, bubble = here, work, lead
            if stage == 0:
                first = (work, tail)
            # one chunk of this stage forward and backward, and the two messages to the next stage and back
            lead += kinds.count("layer") * (floor["layer"][0] + floor["layer"][1]) / layout.vp + hop
        if chain + first[1] > best:  # one micro-batch through every stage, then stage 0's tail (matters for m < pp)
            best, compute, bubble = chain + first[1], first[0], chain - first[0]
        ranks_per_stage = world // layout.pp
        return Bound(best, compute, bubble, float(flops_per_mb) * m * ranks_per_stage)

    @staticmethod
    def _unit(fwd: Any, bwd: Any, recompute: Any, collective_ns: Callable[[Any], float]) -> tuple:
        """``(forward, backward + recompute, model FLOPs, {group kind: sum of its collectives})`` of one unit and
        micro-batch."""
        blocks = [fwd, bwd] if recompute is None else [fwd, bwd, recompute]
        f, b = block_floor_ns(fwd, collective_ns), sum(block_floor_ns(x, collective_ns) for x in blocks[1:])
        comm: dict[str, float] = {}
        for s in (s for x in blocks for s in x.steps if s.comm_type is not None):
            comm[s.group] = comm.get(s.group, 0.0) + collective_ns(s)
        return f, b, _model_flops(fwd) + _model_flops(bwd), comm

    def _grad_group(self, config: "LLMConfig") -> tuple[int, ...]:
        """Rank 0's gradient group: the ``dp x cp`` ranks of its tensor-parallel rank."""
        p = config.parallel
        return tuple(range(0, p.tp * p.dp * p.cp, p.tp))

    def _zero3_ns(self, config: "LLMConfig", units: list[int], params: list[Any]) -> float:
        """ZeRO-3's collectives on the communication stream: per micro-batch and unit, the all-gather of its
        dense parameter shard before the forward and (but the embedding) the backward, and the reduce-scatter
        of its gradients, ns (the generator's ``_zero3_gather`` / ``_zero3_scatter``)."""
        p = config.parallel
        n = p.dp * p.cp
        if p.zero_stage != 3 or n <= 1:
            return 0.0
        group, world, total = self._grad_group(config), config.world_size, 0.0
        for unit, par in zip(units, params):
            shard = -(-par.dense // n)
            gather = self.comm_ns(world, CollectiveType.ALL_GATHER, shard * config.dtype_bytes, group)
            scatter = self.comm_ns(world, CollectiveType.REDUCE_SCATTER, shard * n * config.grad_bytes, group)
            total += gather * (1 if unit == -1 else 2) + scatter
        return total * config.num_micro_batches

    def _optimizer_ns(self, config: "LLMConfig", cost: Any, elems: int) -> float:
        """The generator's Adam step on the stage's shard of ``elems`` parameters (its own duration, ns)."""
        from tracekit.workloads.flops import ADAM_FLOPS_PER_PARAM, ADAM_STATE_BYTES_PER_PARAM

        p = config.parallel
        if p.zero_stage >= 1:
            elems = -(-elems // (p.dp * p.cp))
        per_param = ADAM_STATE_BYTES_PER_PARAM + config.grad_bytes + config.dtype_bytes
        return float(cost.optimizer_ns(ADAM_FLOPS_PER_PARAM * elems, per_param * elems, elems))

    def _grad_sync_ns(self, config: "LLMConfig", elems: int, overlapped_too: bool) -> float:
        """Data-parallel gradient traffic of a stage's ``elems`` parameters, ns: the reduction of the gradients
        (one collective: the buckets together are not faster) and under ZeRO-1/2 the all-gather of the updated
        parameters.  Without ``overlapped_too`` only what no compute can hide: the reduction when it is not
        overlapped with the backward, the gathers when they are not overlapped with the next step."""
        p = config.parallel
        n = p.dp * p.cp
        if n <= 1 or p.zero_stage == 3:
            return 0.0
        group, world, total = self._grad_group(config), config.world_size, 0.0
        if overlapped_too or not p.overlap_grad_reduce:
            kind = CollectiveType.ALL_REDUCE if p.zero_stage == 0 else CollectiveType.REDUCE_SCATTER
            total += self.comm_ns(world, kind, elems * config.grad_bytes, group)
        if p.zero_stage in (1, 2) and (overlapped_too or not config.stack.overlap_param_gather):
            total += self.comm_ns(world, CollectiveType.ALL_GATHER, -(-elems // n) * config.dtype_bytes, group)
        return total


__all__ = ["Bound", "BoundModel", "block_floor_ns"]
