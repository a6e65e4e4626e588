"""One new rank of a TP/PP rewrite: its stage's passes, pipeline traffic, gradient reduction and optimizer step.

Built from the unit blocks of :mod:`._unit_blocks` by :mod:`.reparallel` (the
module docstring there gives the rules).  Nodes are never edited in place:
every node of the new rank is a new node made from a template node by
:func:`tracekit.transforms.base.edited_node` (``replace`` + ``with_attr`` in one copy).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping, Sequence

from tracekit.model.attrs import COMM_DST, COMM_SIZE, COMM_SRC, COMM_TAG, NUM_OPS, TENSOR_SIZE
from tracekit.errors import TransformError
from tracekit.model.groups import canonical_pg_name
from tracekit.model import Node
from tracekit.transforms._unit_blocks import ENTRY, Sources
from tracekit.transforms.base import AttrEdit, edited_node
from tracekit.transforms.layout import map_group
from tracekit.workloads.buckets import bucket_limit_elems, pack_buckets
from tracekit.workloads.config import LLMConfig
from tracekit.workloads.grid import Grid
from tracekit.workloads.params import EMBEDDING, padded_vocab_size, unit_params
from tracekit.workloads.schedules import FORWARD, stage_order


@dataclass(frozen=True)
class Rewrite:
    """What every new rank of one TP/PP rewrite shares.

    Attributes:
        config: the old job's configuration (``llm_config`` metadata).
        old, new: rank grids before and after.
        old_groups: process groups of the old trace set (name -> member ranks).
        schedule: pipeline schedule of the new job (``gpipe`` or ``1f1b``).
        sources: TP-rescaled unit blocks of the old ranks.
    """

    config: LLMConfig
    old: Grid
    new: Grid
    old_groups: Mapping[str, tuple[int, ...]]
    schedule: str
    sources: Sources

    @property
    def num_layers(self) -> int:
        """Transformer layers ``L`` of the model."""
        return self.config.model.num_layers

    def src_line(self, stage: int) -> int:
        """The old rank whose blocks stand for old stage ``stage``: blocks are the same on every (tp, cp, dp)
        coordinate up to group names, and groups are mapped relative to the template's coordinates."""
        return self.old.rank((0, 0, 0, stage))

    def old_stage(self, unit: int) -> int:
        """Old pipeline stage holding ``unit`` (-1 embedding, L head, else a layer)."""
        if unit == EMBEDDING:
            return 0
        if unit == self.num_layers:
            return self.old.pp - 1
        return unit // (self.num_layers // self.old.pp)

    def stage_units(self, stage: int, pp: int) -> list[int]:
        """Units of ``stage`` among ``pp`` stages: its layers, plus the embedding (first) and head (last)."""
        lpc = self.num_layers // pp
        units = list(range(stage * lpc, (stage + 1) * lpc))
        if stage == 0:
            units.append(EMBEDDING)
        if stage == pp - 1:
            units.append(self.num_layers)
        return units

    def other(self, role: str, stages: Sequence[int]) -> Node | None:
        """The first ``role`` node (not in a unit block) found on the old stages ``stages``, or None."""
        for st in stages:
            template = self.sources(self.src_line(st))[1].get(role)
            if template is not None:
                return template
        return None


class StageProgram:
    """The node list of one new rank, appended in program order (node 0 is a placeholder for the
    ``process_group:init`` node the caller sets once every rank's groups are known)."""

    def __init__(self, job: Rewrite, rank: int) -> None:
        self.job, self.rank = job, rank
        self.coords = job.new.coords(rank)
        self.nodes: list[Node] = [Node(0)]
        self.groups: dict[int, tuple[int, ...]] = {}  # node id -> members of its new group
        self._mapped: dict[tuple[str, int], tuple[int, ...]] = {}
        self.last_bwd: dict[int, int] = {}  # unit -> id of the last exit of its last backward

    def add(
        self,
        template: Node,
        deps: list[int],
        template_rank: int,
        attrs: Sequence[AttrEdit] = (),
        duration_ns: int | None = None,
    ) -> int:
        """Append a copy of ``template`` with new id, dependencies, ``attrs`` (and duration); map its group."""
        nid = len(self.nodes)
        node = edited_node(template, attrs, id=nid, data_deps=deps, ctrl_deps=[], duration_ns=duration_ns)
        if node.is_comm and node.pg_name is not None and nid not in self.groups:
            key = (canonical_pg_name(node.pg_name), template_rank)
            if key not in self._mapped:
                self._mapped[key] = map_group(
                    self.job.old_groups[key[0]], self.job.old, self.job.new, template_rank, self.rank
                )
            self.groups[nid] = self._mapped[key]
        self.nodes.append(node)
        return nid

    def stamp(self, unit: int, kind: str, entry: list[int], mb: int) -> list[int]:
        """Append unit ``unit``'s forward (``F``) or backward (``B``) block for micro-batch ``mb``; its exits.

        Raises:
            TransformError: the old trace has no such block (layer annotation missing).
        """
        rank = self.job.src_line(self.job.old_stage(unit))
        block = self.job.sources(rank)[0].get((unit, kind))
        if block is None:
            raise TransformError(
                f"no {'forward' if kind == 'F' else 'backward'} nodes of layer {unit} for "
                f"micro-batch 0 (layer annotation missing)",
                rank=rank,
            )
        ids: list[int] = []
        for node, ds in zip(block.nodes, block.deps):
            deps: list[int] = []
            for x in ds:
                deps.extend(entry if x == ENTRY else (ids[x],))
            ids.append(self.add(node, list(dict.fromkeys(deps)), rank, [("micro_batch", mb, None)]))
        return [ids[i] for i in block.exits]

    def p2p(self, send: bool, forward: bool, mb: int, vs_recv: int, layer: int, deps: list[int]) -> int:
        """Append a pipeline send or receive of activations (forward) or their gradients (backward).

        Tag ``2 (mb * pp + receiving stage) + (0 forward | 1 backward)``, as the generator writes it.

        Raises:
            TransformError: the old trace has no node of this role to copy.
        """
        job, (t, c, d, _) = self.job, self.coords
        role = f"pp_{'send' if send else 'recv'}_{'activation' if forward else 'grad'}"
        template = job.other(role, range(job.old.pp))
        if template is None:
            raise TransformError(f"no {role!r} node to copy (pipeline annotation missing)")
        prev_rank, next_rank = job.new.pipeline_peers(self.coords)
        tag = 2 * (mb * job.new.pp + vs_recv) + (0 if forward else 1)
        peer = (next_rank if forward else prev_rank) if send else (prev_rank if forward else next_rank)
        attrs: list[AttrEdit] = [
            ("layer", layer, None),
            ("micro_batch", mb, None),
            (COMM_TAG, tag, None),
            (COMM_SRC, self.rank if send else peer, None),
            (COMM_DST, peer if send else self.rank, None),
        ]
        nid = self.add(template, deps, job.src_line(min(1, job.old.pp - 1)), attrs)
        self.groups[nid] = tuple(sorted(job.new.rank((t, c, d, k)) for k in range(job.new.pp)))
        return nid

    def passes(self) -> list[int]:
        """Append every pass of this rank's stage in schedule order; the exits of the last one."""
        job, s = self.job, self.coords[3]
        pp, L = job.new.pp, job.num_layers
        lpc = L // pp
        layers = list(range(s * lpc, (s + 1) * lpc))
        first, last = s == 0, s == pp - 1
        prev_exit: list[int] = []
        for op in stage_order(job.schedule, pp, job.config.num_micro_batches, s):
            mb, entry = op.micro_batch, prev_exit
            if op.kind == FORWARD:
                if not first:
                    entry = [self.p2p(False, True, mb, s, layers[0], entry)]
                for u in ([EMBEDDING] if first else []) + layers + ([L] if last else []):
                    entry = self.stamp(u, "F", entry, mb)
                if not last:
                    self.p2p(True, True, mb, s + 1, layers[-1], entry)
            else:
                if not last:
                    entry = [self.p2p(False, False, mb, s, layers[-1], entry)]
                for u in ([L] if last else []) + layers[::-1] + ([EMBEDDING] if first else []):
                    entry = self.stamp(u, "B", entry, mb)
                    self.last_bwd[u] = max(entry)
                if not first:
                    self.p2p(True, False, mb, s - 1, layers[0], entry)
            prev_exit = entry
        return prev_exit

    def _params(self, unit: int, tp: int, pp: int) -> int:
        return unit_params(self.job.config.model, unit, tp, pp).dense

    def grad_buckets(self, final: list[int], stage_src: int) -> list[int]:
        """Append the data-parallel gradient all-reduces (one per bucket); their ids."""
        job, new = self.job, self.job.new
        template = job.sources(stage_src)[1].get("dp_grad_allreduce")
        if template is None:
            return []
        p, grad_bytes = job.config.parallel, job.config.grad_bytes
        order = sorted(self.last_bwd, key=self.last_bwd.__getitem__)
        buckets = pack_buckets(
            order, lambda u: self._params(u, new.tp, new.pp), bucket_limit_elems(p.grad_bucket_bytes, grad_bytes)
        )
        out = []
        for index, (units, elems) in enumerate(buckets):
            deps = sorted({self.last_bwd[u] for u in units}) if p.overlap_grad_reduce else list(final)
            out.append(
                self.add(
                    template,
                    deps,
                    stage_src,
                    [
                        (COMM_SIZE, elems * grad_bytes, None),
                        ("bucket", index, None),
                        ("layers", list(units), "int64_list"),
                    ],
                )
            )
        return out

    def sync_and_step(self, final: list[int]) -> None:
        """Append gradient reduction (buckets, sequence-parallel norms, tied embeddings) and the optimizer step."""
        job, (t, c, d, s) = self.job, self.coords
        cfg, new = job.config, job.new
        stage_src = job.src_line(job.old_stage(s * (job.num_layers // new.pp)))
        others = job.sources(stage_src)[1]
        waits = list(final) + self.grad_buckets(final, stage_src)
        norm_t = others.get("sp_norm_grad_allreduce")
        if cfg.parallel.sequence_parallel and norm_t is not None:
            norm = sum(unit_params(cfg.model, u, new.tp, new.pp).norm for u in self.last_bwd)
            waits.append(self.add(norm_t, list(final), stage_src, [(COMM_SIZE, norm * cfg.grad_bytes, None)]))
        if cfg.model.tied_embeddings and new.pp > 1 and s in (0, new.pp - 1):
            emb_t = job.other("embedding_grad_allreduce", (0, job.old.pp - 1))
            if emb_t is not None:
                rows = padded_vocab_size(cfg.model.vocab_size, new.tp) // new.tp * cfg.model.hidden_size
                nid = self.add(emb_t, list(final), job.src_line(0), [(COMM_SIZE, rows * cfg.grad_bytes, None)])
                self.groups[nid] = tuple(sorted({new.rank((t, c, d, 0)), new.rank((t, c, d, new.pp - 1))}))
                waits.append(nid)
        opt_t = others.get("optimizer_step")
        if opt_t is not None:
            self.optimizer(opt_t, waits, stage_src)

    def optimizer(self, template: Node, waits: list[int], stage_src: int) -> None:
        """Append the optimizer step, its FLOPs, bytes and duration scaled by the stage's parameter count."""
        old, new = self.job.old, self.job.new
        old_units = self.job.stage_units(old.coords(stage_src)[3], old.pp)
        old_elems = sum(self._params(u, old.tp, old.pp) for u in old_units)
        k = Fraction(sum(self._params(u, new.tp, new.pp) for u in self.last_bwd), old_elems)
        attrs: list[AttrEdit] = []
        for key in (NUM_OPS, TENSOR_SIZE):
            v = key.of(template)
            if v is not None and v > 0:
                attrs.append((key, int(round(v * k)), None))
        self.add(template, waits, stage_src, attrs, duration_ns=int(round(template.duration_ns * k)))

    def build(self) -> tuple[list[Node], dict[int, tuple[int, ...]]]:
        """``(nodes, groups)``: the rank's nodes (node 0 a placeholder) and each communication node's group."""
        self.sync_and_step(self.passes())
        return self.nodes, self.groups


__all__ = ["Rewrite", "StageProgram"]
