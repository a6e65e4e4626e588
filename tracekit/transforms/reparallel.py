"""Parallelism rewrites of layer-structured traces: tensor-parallel and pipeline-parallel degree.

The per-rank program is re-derived from the trace's own layer annotations
(every node of a generated trace carries ``layer`` (-1 = embedding, ``L`` =
output head), ``micro_batch``, ``phase`` and ``op_role``; the global metadata
holds ``llm_config``):

1. **Unit blocks.**  From an old rank holding unit ``u``, the nodes of ``u``'s
   forward pass (``phase`` ``fwd``) and backward pass (``bwd``, ``wgrad``,
   ``recompute``) for micro-batch 0 are cut out with their internal
   dependencies; a dependency leaving the block becomes "the block's entry",
   and the nodes other work waits for are the block's exits.  Every
   micro-batch runs the same blocks.
2. **TP** (``ChangeTP``): each node of a block is rescaled by its ``op_role``
   (rules and sources in :mod:`.megatron`): split work by ``f = tp / tp_new``
   (GEMM FLOPs; of GEMM bytes all but the unsplit ``t x h`` operand;
   attention, softmax and activation entirely; vocabulary-parallel ops by the
   padded-vocabulary ratio), replicated elementwise work unchanged
   (split too under sequence parallelism); tensor-parallel all-reduce and
   reduce-scatter sizes (``t h``) unchanged, sequence-parallel all-gather
   inputs by ``f``.  The tp dimension of the rank grid is resized.
3. **PP** (``ChangePP``): layers are re-partitioned into ``pp_new`` stages of
   ``L / pp_new``; each stage runs its passes in the order of the schedule
   (GPipe or 1F1B, :mod:`tracekit.workloads.schedules`), with a receive before
   and a send after every pass that does not start or end the model (tags
   ``2 (micro_batch * pp + receiving stage) + (0 fwd | 1 bwd)``).
4. **Gradient reduction and optimizer** are rebuilt per stage: units' gradients
   (parameters from :mod:`tracekit.workloads.params`) packed into buckets of
   ``grad_bucket_bytes`` (:mod:`tracekit.workloads.buckets`) in the order they become final, each waiting for its
   units' last backward (``overlap_grad_reduce``); the tied-embedding
   all-reduce between the first and last stage; the optimizer step's FLOPs
   and bytes scaled by the stage's parameter count.

Process groups are re-derived through the rank grid
(:mod:`tracekit.workloads.grid`, :mod:`tracekit.transforms.layout`).  Refused with a
:class:`~tracekit.errors.TransformError` naming what is missing or
unsupported: no ``llm_config`` or no ``layer``/``micro_batch`` annotations,
ZeRO stages >= 1, mixture-of-experts, the interleaved schedule, changing tp to
or from 1 or pp to or from 1 (collectives would have to be inserted where the
trace has none to copy).  Bad degrees (not dividing heads, FFN or layers)
raise :class:`~tracekit.errors.ConfigError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from tracekit.model.attrs import PG_NAME
from tracekit.errors import ConfigError, TransformError
from tracekit.model.groups import pg_init_node
from tracekit.model import ExecutionTrace, Node
from tracekit.transforms import megatron as mg
from tracekit.transforms._stage_program import Rewrite, StageProgram
from tracekit.transforms._unit_blocks import Sources
from tracekit.transforms.base import Transform, check_degree, copy_metadata, edited_node
from tracekit.transforms.layout import LLM_CONFIG_ATTR, GroupNames, grid_of, llm_config_of

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.sets.traceset import TraceSet

SCHEDULES = ("gpipe", "1f1b")


def _no_config() -> NoReturn:
    raise TransformError(
        f"this rewrite needs layer-structured traces: the {LLM_CONFIG_ATTR!r} metadata "
        "(rank grid and model shape) is missing, so are presumably the node annotations "
        "'layer', 'micro_batch', 'phase' and 'op_role'"
    )


def _check(cfg: dict[str, Any], tp_new: int, pp_new: int, schedule: str) -> None:
    p, m = cfg["parallel"], cfg["model"]
    if int(p.get("zero_stage", 0)) != 0:
        raise TransformError(
            f"ZeRO stage {p['zero_stage']} traces are not supported by the tp/pp rewrite (only stage 0)"
        )
    if int(m.get("num_experts", 0) or 0):
        raise TransformError("mixture-of-experts traces are not supported by the tp/pp rewrite")
    if p.get("schedule") not in SCHEDULES or int(p.get("virtual_stages", 1)) != 1:
        raise TransformError(
            f"the {p.get('schedule')!r} schedule is not supported by the tp/pp rewrite "
            f"(supported: {', '.join(SCHEDULES)})"
        )
    if schedule not in SCHEDULES:
        raise ConfigError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    config = mg.config_of(cfg)
    model, tp_old, pp_old, cp = config.model, int(p["tp"]), int(p["pp"]), int(p.get("cp", 1))
    if model.num_layers % pp_old:
        raise TransformError(
            f"the trace's uneven pipeline split ({model.num_layers} layers on pp={pp_old}) is not supported"
        )
    if model.num_layers % pp_new:
        raise ConfigError(f"pp={pp_new} does not divide the {model.num_layers} layers")
    for what, n in (
        ("attention heads", model.num_heads),
        ("key/value heads", model.kv_heads),
        ("FFN size", model.ffn_size),
    ):
        if n % tp_new:
            raise ConfigError(f"tp={tp_new} does not divide the {n} {what}")
    if p.get("sequence_parallel") and model.seq_length % (tp_new * cp):
        raise ConfigError(f"sequence length {model.seq_length} is not divisible by tp {tp_new} x cp {cp}")
    if (tp_old == 1) != (tp_new == 1) and tp_old != tp_new:
        raise TransformError(
            f"changing tp from {tp_old} to {tp_new} would insert or remove every "
            "tensor-parallel collective; only tp >= 2 -> tp >= 2 is supported"
        )
    if (pp_old == 1) != (pp_new == 1) and pp_old != pp_new:
        raise TransformError(
            f"changing pp from {pp_old} to {pp_new} would insert or remove every pipeline "
            "send/recv; only pp >= 2 -> pp >= 2 is supported"
        )


def reparallelize(
    traceset: "TraceSet", *, tp: int | None = None, pp: int | None = None, schedule: str | None = None
) -> "TraceSet":
    """The trace set re-derived at tensor degree ``tp`` and pipeline degree ``pp`` (None = unchanged).

    Raises:
        TransformError, ConfigError: see the module docstring.
    """
    from tracekit.sets.traceset import TraceSet

    cfg = llm_config_of(traceset)
    if cfg is None:
        _no_config()
    old = grid_of(traceset)
    tp_new, pp_new = tp or old.tp, pp or old.pp
    schedule = schedule or cfg["parallel"].get("schedule", "1f1b")
    _check(cfg, tp_new, pp_new, schedule)
    config = mg.config_of(cfg)
    new = old.with_(tp=tp_new, pp=pp_new)
    job = Rewrite(
        config, old, new, traceset.process_groups, schedule, Sources(traceset, config, old.tp, tp_new, old.cp)
    )
    built = {r: StageProgram(job, r).build() for r in range(new.world_size)}
    names = GroupNames(new.world_size, [g for _, groups in built.values() for g in groups.values()])
    decl = names.declaration()
    md = copy_metadata(traceset[traceset.ranks[0]].metadata)
    cfg_new = json.loads(json.dumps(cfg))
    cfg_new["parallel"].update(tp=tp_new, pp=pp_new, schedule=schedule)
    md = md.with_attr(LLM_CONFIG_ATTR, json.dumps(cfg_new, sort_keys=True), "string_val")
    out = {}
    for r, (nodes, groups) in built.items():
        named: list[Node] = [pg_init_node(0, decl, world_size=new.world_size)]
        named += [
            edited_node(n, [(PG_NAME, names.name(groups[n.id]), "string_val")]) if n.id in groups else n
            for n in nodes[1:]
        ]
        out[r] = ExecutionTrace(named, copy_metadata(md), rank=r)
    return TraceSet(out, names.mapping())


@dataclass(frozen=True)
class ChangeTP(Transform):
    """Change the tensor-parallel degree of a layer-structured trace set (module docstring).

    The data- and pipeline-parallel degrees stay, so the world size becomes
    ``world * tp / tp_old``.

    Raises:
        ConfigError: tp < 1 or not dividing heads / FFN.
        TransformError: missing layer annotations or unsupported features.
    """

    tp: int

    def __post_init__(self) -> None:
        check_degree("tp", self.tp)

    def apply(self, traceset: "TraceSet") -> "TraceSet":
        """The trace set at tensor-parallel degree :attr:`tp`."""
        return reparallelize(traceset, tp=self.tp)


@dataclass(frozen=True)
class ChangePP(Transform):
    """Change the pipeline-parallel degree (and optionally the schedule) of a layer-structured trace set.

    Raises:
        ConfigError: pp < 1, pp not dividing the layers, unknown schedule.
        TransformError: missing layer annotations or unsupported features.
    """

    pp: int
    schedule: str | None = None

    def __post_init__(self) -> None:
        check_degree("pp", self.pp)
        if self.schedule is not None and self.schedule not in SCHEDULES:
            raise ConfigError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")

    def apply(self, traceset: "TraceSet") -> "TraceSet":
        """The trace set at pipeline-parallel degree :attr:`pp` (and :attr:`schedule`, when given)."""
        return reparallelize(traceset, pp=self.pp, schedule=self.schedule)


__all__ = ["ChangePP", "ChangeTP", "reparallelize"]
