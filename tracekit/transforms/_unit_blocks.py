"""Unit blocks of a layer-structured trace and their tensor-parallel rescaling (for :mod:`.reparallel`).

A *unit block* is the nodes of one unit's (``-1`` embedding, a layer, ``L``
head) forward or backward pass for micro-batch 0, with dependencies inside
the block as indices and a dependency leaving it as :data:`ENTRY`; its exits
are the nodes other work waits for.  Every micro-batch runs the same blocks.
Rescaling rules and sources: :mod:`.megatron`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from tracekit.model.attrs import COMM_SIZE, NUM_OPS, TENSOR_SIZE
from tracekit.errors import TransformError
from tracekit.model import ExecutionTrace, Node, NodeType
from tracekit.transforms import megatron as mg
from tracekit.workloads.config import LLMConfig

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.sets.traceset import TraceSet

ENTRY = -1
FWD_PHASES = frozenset({"fwd"})
BWD_PHASES = frozenset({"bwd", "wgrad", "recompute"})
Blocks = dict[tuple[int, str], "Block"]


@dataclass(frozen=True)
class Block:
    """Nodes of one unit pass; ``deps[i]`` are block indices (:data:`ENTRY` = the block's entry)."""

    nodes: tuple[Node, ...]
    deps: tuple[tuple[int, ...], ...]
    exits: tuple[int, ...]


def _int_attr(n: Node, name: str) -> int | None:
    v = n.get_attr(name)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _members(trace: ExecutionTrace) -> tuple[dict[tuple[int, str], list[Node]], dict[str, Node]]:
    """Nodes of micro-batch 0 by (unit, "F"|"B"), and the first node of every other op_role."""
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
        raise TransformError(
            "no nodes with 'layer' and 'micro_batch' attributes: the layer annotations this rewrite needs are missing",
            rank=trace.rank,
            path=trace.path,
        )
    return members, others


def extract(trace: ExecutionTrace) -> tuple[Blocks, dict[str, Node]]:
    """Unit blocks of micro-batch 0 keyed by ``(unit, "F"|"B")``, and one node per other ``op_role``.

    Raises:
        TransformError: no node carries the ``layer``/``micro_batch`` annotations.
    """
    members, others = _members(trace)
    block_of = {n.id: key for key, ns in members.items() for n in ns}
    used_outside: set[int] = set()
    for n in trace.nodes:
        own = block_of.get(n.id)
        used_outside.update(d for d in n.data_deps if d in block_of and block_of[d] != own)
    blocks = {}
    for key, ns in members.items():
        index = {n.id: i for i, n in enumerate(ns)}
        deps = []
        for n in ns:
            ds = tuple(dict.fromkeys(index.get(d, ENTRY) for d in n.data_deps))
            deps.append(ds or (ENTRY,))  # no deps at all: the block ran first (its entry was empty)
        exits = tuple(i for i, n in enumerate(ns) if n.id in used_outside)
        blocks[key] = Block(tuple(ns), tuple(deps), exits or (len(ns) - 1,))
    return blocks, others


def _scaled_comp(node: Node, role: object, f: Fraction, fv: Fraction, th: int, sp: bool) -> Node:
    """A compute node rescaled by the per-rank share of its split work (module docstring of :mod:`.megatron`)."""
    flops, nbytes = node.num_ops, node.tensor_bytes
    k_flops = k_bytes = None
    out = node
    if role in mg.SPLIT_ALL or (sp and role in mg.SEQ_ELEMENTWISE):
        k_flops = k_bytes = f
    elif role in mg.SPLIT_VOCAB:
        k_flops = k_bytes = fv
    elif role in mg.SPLIT_GEMM or role in mg.VOCAB_GEMM:
        k_flops = fv if role in mg.VOCAB_GEMM else f
        if nbytes:  # one t x h activation operand is not split
            out = out.with_attr(TENSOR_SIZE, int(round(th + (nbytes - th) * k_flops)))
    if k_flops is None:
        return out
    if flops:
        out = out.with_attr(NUM_OPS, int(round(flops * k_flops)))
    if k_bytes is not None and nbytes:
        out = out.with_attr(TENSOR_SIZE, int(round(nbytes * k_bytes)))
    if node.duration_ns:
        out = out.replace(duration_ns=int(round(node.duration_ns * k_flops)))
    return out


def tp_scaled(node: Node, config: LLMConfig, tp_old: int, tp_new: int, cp: int) -> Node:
    """``node`` as it runs on one of ``tp_new`` (instead of ``tp_old``) tensor-parallel ranks; a new node."""
    if tp_old == tp_new:
        return node
    f, fv = mg.tp_factors(config, tp_old, tp_new)
    role = node.get_attr("op_role")
    sp = config.parallel.sequence_parallel
    if node.type == NodeType.COMP_NODE:
        th = mg.tokens(config, cp) * config.model.hidden_size * config.dtype_bytes
        return _scaled_comp(node, role, f, fv, th, sp)
    if node.is_comm:
        split = role in mg.SPLIT_COMM or (sp and (role in mg.SPLIT_COMM_SP or str(role).startswith("pp_")))
        if split and node.comm_bytes:
            return node.with_attr(COMM_SIZE, int(round(node.comm_bytes * f)))
    return node


class Sources:
    """The TP-rescaled unit blocks and other-role nodes of old ranks, extracted once per rank on first use."""

    def __init__(self, traceset: "TraceSet", config: LLMConfig, tp_old: int, tp_new: int, cp: int) -> None:
        self.traceset, self.config = traceset, config
        self.tp_old, self.tp_new, self.cp = tp_old, tp_new, cp
        self._cache: dict[int, tuple[Blocks, dict[str, Node]]] = {}

    def __call__(self, rank: int) -> tuple[Blocks, dict[str, Node]]:
        """``(blocks, others)`` of old rank ``rank`` (see :func:`extract`), rescaled to the new tp."""
        if rank not in self._cache:
            blocks, others = extract(self.traceset[rank])

            def scale(n: Node) -> Node:
                return tp_scaled(n, self.config, self.tp_old, self.tp_new, self.cp)

            self._cache[rank] = (
                {k: Block(tuple(scale(n) for n in b.nodes), b.deps, b.exits) for k, b in blocks.items()},
                {k: scale(n) for k, n in others.items()},
            )
        return self._cache[rank]


__all__ = ["ENTRY", "Block", "Sources", "extract", "tp_scaled"]
