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
   (GPipe or 1F1B, Narayanan et al. 2021, section 2.2), with a receive before
   and a send after every pass that does not start or end the model (tags
   ``2 (micro_batch * pp + receiving stage) + (0 fwd | 1 bwd)``).
4. **Gradient reduction and optimizer** are rebuilt per stage: units' gradients
   (parameters from :mod:`.megatron`) packed into buckets of
   ``grad_bucket_bytes`` in the order they become final, each waiting for its
   units' last backward (``overlap_grad_reduce``); the tied-embedding
   all-reduce between the first and last stage; the optimizer step's FLOPs
   and bytes scaled by the stage's parameter count.

Process groups are re-derived through the rank grid
(:mod:`tracekit.transforms.layout`).  Refused with a
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
from fractions import Fraction
from typing import Any

from tracekit.errors import ConfigError, TransformError
from tracekit.groups import canonical_pg_name, pg_init_node
from tracekit.model import ExecutionTrace, Node, NodeType
from tracekit.transforms.base import Transform, check_degree, copy_node
from tracekit.transforms.layout import LLM_CONFIG_ATTR, GroupNames, Grid, grid_of, llm_config_of, map_group
from tracekit.transforms import megatron as mg

ENTRY = -1
FWD_PHASES = frozenset({"fwd"})
BWD_PHASES = frozenset({"bwd", "wgrad", "recompute"})
SCHEDULES = ("gpipe", "1f1b")


# ----------------------------------------------------------------------------- schedules
def stage_passes(schedule: str, p: int, m: int, stage: int) -> list[tuple[str, int]]:
    """``[("F"|"B", micro_batch), ...]`` of one stage (Narayanan et al. 2021, section 2.2).

    GPipe: all forwards then all backwards.  1F1B (PipeDream-Flush):
    ``w = min(p - stage - 1, m)`` warm-up forwards, then one forward and one
    backward alternately, then the ``w`` remaining backwards.
    """
    if schedule == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    w = min(p - stage - 1, m)
    out = [("F", i) for i in range(w)]
    for i in range(m - w):
        out += [("F", w + i), ("B", i)]
    out += [("B", i) for i in range(m - w, m)]
    return out


# ----------------------------------------------------------------------------- unit blocks
@dataclass
class _Block:
    nodes: list[Node]
    deps: list[list[int]]     # per node: block indices, ENTRY = the block's entry
    exits: list[int]


def _int_attr(n: Node, name: str) -> int | None:
    v = n.get_attr(name)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _extract(trace: ExecutionTrace) -> tuple[dict[tuple[int, str], _Block], dict[str, Node]]:
    """Unit blocks of micro-batch 0 keyed by (unit, "F"|"B"), and one node per other op_role."""
    members: dict[tuple[int, str], list[Node]] = {}
    others: dict[str, Node] = {}
    for n in trace.nodes:
        role = n.get_attr("op_role")
        layer, mb, phase = _int_attr(n, "layer"), _int_attr(n, "micro_batch"), n.get_attr("phase")
        if isinstance(role, str) and (role.startswith("pp_") or layer is None or mb is None or mb < 0):
            others.setdefault(role, n)
            continue
        if layer is None or mb != 0:
            continue
        kind = "F" if phase in FWD_PHASES else "B" if phase in BWD_PHASES else None
        if kind is not None:
            members.setdefault((layer, kind), []).append(n)
    if not members:
        raise TransformError("no nodes with 'layer' and 'micro_batch' attributes: the layer annotations this "
                             "rewrite needs are missing", rank=trace.rank, path=trace.path)
    block_of: dict[int, tuple[int, str]] = {}
    for key, ns in members.items():
        for n in ns:
            block_of[n.id] = key
    used_outside: set[int] = set()
    for n in trace.nodes:
        own = block_of.get(n.id)
        for d in n.data_deps:
            if d in block_of and block_of[d] != own:
                used_outside.add(d)
    blocks = {}
    for key, ns in members.items():
        index = {n.id: i for i, n in enumerate(ns)}
        deps = []
        for n in ns:
            ds: list[int] = []
            for d in n.data_deps:
                v = index.get(d, ENTRY)
                if v not in ds:
                    ds.append(v)
            deps.append(ds or [ENTRY])  # no deps at all: the block ran first (its entry was empty)
        exits = [i for i, n in enumerate(ns) if n.id in used_outside]
        blocks[key] = _Block(ns, deps, exits or [len(ns) - 1])
    return blocks, others


# ----------------------------------------------------------------------------- TP rescaling of one node
def _tp_scaled(node: Node, shape: mg.Shape, tp_old: int, tp_new: int, cp: int, sp: bool) -> Node:
    if tp_old == tp_new:
        return node
    f, fv = shape.tp_factors(tp_old, tp_new)
    role = node.get_attr("op_role")
    th = shape.tokens(cp) * shape.hidden_size * shape.dtype_bytes
    c = copy_node(node)
    flops, nbytes = node.num_ops, node.tensor_bytes
    k_flops = k_bytes = None
    if node.type == NodeType.COMP_NODE:
        if role in mg.SPLIT_ALL or (sp and role in mg.SEQ_ELEMENTWISE):
            k_flops = k_bytes = f
        elif role in mg.SPLIT_VOCAB:
            k_flops = k_bytes = fv
        elif role in mg.SPLIT_GEMM or role in mg.VOCAB_GEMM:
            k = fv if role in mg.VOCAB_GEMM else f
            k_flops = k
            if nbytes:
                c = c.with_attr("tensor_size", int(round(th + (nbytes - th) * k)))
        if k_flops is not None:
            if flops:
                c = c.with_attr("num_ops", int(round(flops * k_flops)))
            if k_bytes is not None and nbytes:
                c = c.with_attr("tensor_size", int(round(nbytes * k_bytes)))
            if node.duration_ns:
                c = c.replace(duration_ns=int(round(node.duration_ns * k_flops)))
    elif node.is_comm:
        split = role in mg.SPLIT_COMM or (sp and (role in mg.SPLIT_COMM_SP or str(role).startswith("pp_")))
        if split and node.comm_bytes:
            c = c.with_attr("comm_size", int(round(node.comm_bytes * f)))
    return c


# ----------------------------------------------------------------------------- the rewrite
def _check(cfg: dict[str, Any] | None, tp_new: int, pp_new: int, schedule: str) -> None:
    if cfg is None:
        raise TransformError(f"this rewrite needs layer-structured traces: the {LLM_CONFIG_ATTR!r} metadata "
                             "(rank grid and model shape) is missing, so are presumably the node annotations "
                             "'layer', 'micro_batch', 'phase' and 'op_role'")
    p, m = cfg["parallel"], cfg["model"]
    if int(p.get("zero_stage", 0)) != 0:
        raise TransformError(f"ZeRO stage {p['zero_stage']} traces are not supported by the tp/pp rewrite "
                             "(only stage 0)")
    if int(m.get("num_experts", 0) or 0):
        raise TransformError("mixture-of-experts traces are not supported by the tp/pp rewrite")
    if p.get("schedule") not in SCHEDULES or int(p.get("virtual_stages", 1)) != 1:
        raise TransformError(f"the {p.get('schedule')!r} schedule is not supported by the tp/pp rewrite "
                             f"(supported: {', '.join(SCHEDULES)})")
    if schedule not in SCHEDULES:
        raise ConfigError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    shape = mg.Shape.of(cfg)
    tp_old, pp_old, cp = int(p["tp"]), int(p["pp"]), int(p.get("cp", 1))
    if shape.num_layers % pp_new:
        raise ConfigError(f"pp={pp_new} does not divide the {shape.num_layers} layers")
    for what, n in (("attention heads", shape.num_heads), ("key/value heads", shape.kv_heads),
                    ("FFN size", shape.ffn_size)):
        if n % tp_new:
            raise ConfigError(f"tp={tp_new} does not divide the {n} {what}")
    if p.get("sequence_parallel") and shape.seq_length % (tp_new * cp):
        raise ConfigError(f"sequence length {shape.seq_length} is not divisible by tp {tp_new} x cp {cp}")
    if (tp_old == 1) != (tp_new == 1) and tp_old != tp_new:
        raise TransformError(f"changing tp from {tp_old} to {tp_new} would insert or remove every "
                             "tensor-parallel collective; only tp >= 2 -> tp >= 2 is supported")
    if (pp_old == 1) != (pp_new == 1) and pp_old != pp_new:
        raise TransformError(f"changing pp from {pp_old} to {pp_new} would insert or remove every pipeline "
                             "send/recv; only pp >= 2 -> pp >= 2 is supported")


def reparallelize(traceset, *, tp: int | None = None, pp: int | None = None, schedule: str | None = None):
    """The trace set re-derived at tensor degree ``tp`` and pipeline degree ``pp`` (None = unchanged).

    Raises:
        TransformError, ConfigError: see the module docstring.
    """
    cfg = llm_config_of(traceset)
    if cfg is None:
        _check(cfg, 1, 1, "1f1b")
    p = cfg["parallel"]
    old = grid_of(traceset)
    tp_new, pp_new = tp or old.tp, pp or old.pp
    schedule = schedule or p.get("schedule", "1f1b")
    _check(cfg, tp_new, pp_new, schedule)
    new = old.with_(tp=tp_new, pp=pp_new)
    shape = mg.Shape.of(cfg)
    sp = bool(p.get("sequence_parallel"))
    L = shape.num_layers
    m = int(cfg["global_batch_size"]) // (int(cfg["micro_batch_size"]) * old.dp)
    old_groups = traceset.process_groups
    cache: dict[int, tuple[dict, dict]] = {}

    def source(rank: int):
        if rank not in cache:
            blocks, others = _extract(traceset[rank])
            blocks = {k: _Block([_tp_scaled(n, shape, old.tp, tp_new, old.cp, sp) for n in b.nodes], b.deps, b.exits)
                      for k, b in blocks.items()}
            others = {k: _tp_scaled(n, shape, old.tp, tp_new, old.cp, sp) for k, n in others.items()}
            cache[rank] = (blocks, others)
        return cache[rank]

    lpc_old, lpc_new = L // old.pp, L // new.pp

    def old_stage(unit: int) -> int:
        return 0 if unit == -1 else old.pp - 1 if unit == L else unit // lpc_old

    built: dict[int, tuple[list[Node], dict[int, tuple[int, ...]]]] = {}
    for r in range(new.world_size):
        t, c, d, s = new.coords(r)
        # blocks are the same on every (tp, cp, dp) coordinate up to group names, and groups are mapped
        # relative to the template's coordinates: one template rank per old stage is enough
        src_line = lambda st: old.rank((0, 0, 0, st))  # noqa: E731
        built[r] = _build_rank(r, new, old, old_groups, shape, cfg, m, schedule, source, src_line, old_stage,
                               lpc_new, sp, tp_new)
    names = GroupNames(new.world_size, [g for _, groups in built.values() for g in groups.values()])
    decl = names.declaration()
    cfg_new = json.loads(json.dumps(cfg))
    cfg_new["parallel"].update(tp=tp_new, pp=pp_new, schedule=schedule)
    md = traceset[traceset.ranks[0]].metadata.with_attr(LLM_CONFIG_ATTR, json.dumps(cfg_new, sort_keys=True),
                                                        "string_val")
    from tracekit.traceset import TraceSet

    out = {}
    for r, (nodes, groups) in built.items():
        nodes[0] = pg_init_node(0, decl)
        nodes = [n.with_attr("pg_name", names.name(groups[n.id]), "string_val") if n.id in groups else n
                 for n in nodes]
        out[r] = ExecutionTrace(nodes, md, rank=r)
    return TraceSet(out, names.mapping())


def _build_rank(r, new: Grid, old: Grid, old_groups, shape: mg.Shape, cfg, m: int, schedule: str, source,
                src_line, old_stage, lpc: int, sp: bool, tp_new: int):
    t, c, d, s = new.coords(r)
    L = shape.num_layers
    p = cfg["parallel"]
    nodes: list[Node] = [Node(0)]  # placeholder for process_group:init
    groups: dict[int, tuple[int, ...]] = {}
    mapped: dict[tuple[str, int], tuple[int, ...]] = {}

    def add(template: Node, deps: list[int], template_rank: int, attrs: dict[str, Any] | None = None) -> int:
        nid = len(nodes)
        n = template.replace(id=nid, data_deps=deps, ctrl_deps=())
        for k, v in (attrs or {}).items():
            n = n.with_attr(k, v)
        if n.is_comm and n.pg_name is not None and nid not in groups:
            key = (canonical_pg_name(n.pg_name), template_rank)
            if key not in mapped:
                mapped[key] = map_group(old_groups[key[0]], old, new, template_rank, r)
            groups[nid] = mapped[key]
        nodes.append(n)
        return nid

    def stamp(unit: int, kind: str, entry: list[int], mb: int) -> list[int]:
        rank = src_line(old_stage(unit))
        blocks, _ = source(rank)
        block = blocks.get((unit, kind))
        if block is None:
            raise TransformError(f"no {'forward' if kind == 'F' else 'backward'} nodes of layer {unit} for "
                                 f"micro-batch 0 (layer annotation missing)", rank=rank)
        ids: list[int] = []
        for node, ds in zip(block.nodes, block.deps):
            deps: list[int] = []
            for x in ds:
                deps.extend(entry if x == ENTRY else (ids[x],))
            ids.append(add(node, list(dict.fromkeys(deps)), rank, {"micro_batch": mb}))
        return [ids[i] for i in block.exits]

    pp_group = tuple(sorted(new.rank((t, c, d, k)) for k in range(new.pp)))
    prev_rank = new.rank((t, c, d, (s - 1) % new.pp))
    next_rank = new.rank((t, c, d, (s + 1) % new.pp))
    p2p_src = src_line(min(1, old.pp - 1))

    def p2p(send: bool, forward: bool, mb: int, vs_recv: int, layer: int, deps: list[int]) -> int:
        role = f"pp_{'send' if send else 'recv'}_{'activation' if forward else 'grad'}"
        template = None
        for st in range(old.pp):
            template = source(src_line(st))[1].get(role)
            if template is not None:
                break
        if template is None:
            raise TransformError(f"no {role!r} node to copy (pipeline annotation missing)")
        tag = 2 * (mb * new.pp + vs_recv) + (0 if forward else 1)
        peer = (next_rank if forward else prev_rank) if send else (prev_rank if forward else next_rank)
        attrs = {"layer": layer, "micro_batch": mb, "comm_tag": tag,
                 "comm_src": r if send else peer, "comm_dst": peer if send else r}
        nid = add(template, deps, p2p_src, attrs)
        groups[nid] = pp_group
        return nid

    layers = list(range(s * lpc, (s + 1) * lpc))
    first, last = s == 0, s == new.pp - 1
    last_bwd: dict[int, int] = {}
    prev_exit: list[int] = []
    for kind, mb in stage_passes(schedule, new.pp, m, s):
        if kind == "F":
            units = ([-1] if first else []) + layers + ([L] if last else [])
            entry = prev_exit
            if not first:
                entry = [p2p(False, True, mb, s, layers[0], entry)]
            for u in units:
                entry = stamp(u, "F", entry, mb)
            if not last:
                p2p(True, True, mb, s + 1, layers[-1], entry)
        else:
            units = ([L] if last else []) + layers[::-1] + ([-1] if first else [])
            entry = prev_exit
            if not last:
                entry = [p2p(False, False, mb, s, layers[-1], entry)]
            for u in units:
                entry = stamp(u, "B", entry, mb)
                last_bwd[u] = max(entry)
            if not first:
                p2p(True, False, mb, s - 1, layers[0], entry)
        prev_exit = entry
    final = prev_exit
    # gradient reduction and optimizer step
    waits = list(final)
    stage_src = src_line(old_stage(layers[0]))
    _, others = source(stage_src)
    bucket_t = others.get("dp_grad_allreduce")
    limit = max(1, int(p.get("grad_bucket_bytes", 160_000_000)) // shape.grad_bytes)
    if bucket_t is not None:
        buckets: list[tuple[list[int], int]] = []
        units_b: list[int] = []
        total = 0
        for u in sorted(last_bwd, key=last_bwd.__getitem__):
            elems = shape.unit_params(u, tp_new, new.pp)
            if units_b and total + elems > limit:
                buckets.append((units_b, total))
                units_b, total = [], 0
            units_b.append(u)
            total += elems
        if units_b:
            buckets.append((units_b, total))
        overlap = bool(p.get("overlap_grad_reduce", True))
        for index, (units_b, elems) in enumerate(buckets):
            deps = sorted({last_bwd[u] for u in units_b}) if overlap else list(final)
            nid = add(bucket_t, deps, stage_src, {"comm_size": elems * shape.grad_bytes, "bucket": index})
            nodes[nid] = nodes[nid].with_attr("layers", list(units_b), "int64_list")
            waits.append(nid)
    if sp:
        norm_t = others.get("sp_norm_grad_allreduce")
        if norm_t is not None:
            final_norm = 2 * shape.hidden_size if shape.layernorm else shape.hidden_size
            norm = sum(shape.norm_params() if 0 <= u < L else final_norm if u == L else 0 for u in last_bwd)
            waits.append(add(norm_t, list(final), stage_src, {"comm_size": norm * shape.grad_bytes}))
    if shape.tied_embeddings and new.pp > 1 and (first or last):
        emb_t = None
        for st in (0, old.pp - 1):
            emb_t = source(src_line(st))[1].get("embedding_grad_allreduce")
            if emb_t is not None:
                break
        if emb_t is not None:
            rows = shape.padded_vocab(tp_new) // tp_new * shape.hidden_size
            nid = add(emb_t, list(final), src_line(0), {"comm_size": rows * shape.grad_bytes})
            groups[nid] = tuple(sorted({new.rank((t, c, d, 0)), new.rank((t, c, d, new.pp - 1))}))
            waits.append(nid)
    opt_t = others.get("optimizer_step")
    if opt_t is not None:
        old_units = _old_stage_units(old.coords(stage_src)[3], old.pp, L)
        old_elems = sum(shape.unit_params(u, old.tp, old.pp) for u in old_units)
        new_elems = sum(shape.unit_params(u, tp_new, new.pp) for u in last_bwd)
        k = Fraction(new_elems, old_elems)
        attrs: dict[str, Any] = {}
        for name in ("num_ops", "tensor_size"):
            v = opt_t.get_attr(name)
            if isinstance(v, int) and v > 0:
                attrs[name] = int(round(v * k))
        nid = add(opt_t, waits, stage_src, attrs)
        nodes[nid] = nodes[nid].replace(duration_ns=int(round(opt_t.duration_ns * k)))
    return nodes, groups


def _old_stage_units(stage: int, pp: int, L: int) -> list[int]:
    lpc = L // pp
    units = list(range(stage * lpc, (stage + 1) * lpc))
    if stage == 0:
        units.append(-1)
    if stage == pp - 1:
        units.append(L)
    return units


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

    def apply(self, traceset):
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

    def apply(self, traceset):
        return reparallelize(traceset, pp=self.pp, schedule=self.schedule)


__all__ = ["ChangePP", "ChangeTP", "reparallelize", "stage_passes"]
