"""Synthetic transformer-LLM training traces: one iteration, every rank, from an :class:`LLMConfig`.

Per rank (see :mod:`.llm_ops` for the FLOP, byte and tensor-parallel rules
and :mod:`.llm_layout` for the rank order and process groups):

* the pipeline stage's passes in the order of its schedule
  (:mod:`.schedules`); each pass is the embedding (first virtual stage), the
  chunk's layers and the output head (last virtual stage), forward or
  backward, one COMP node per GEMM / attention product / elementwise block;
* pipeline point-to-point traffic: a COMM_RECV of the activations (``t h``
  elements, ``t/tp h`` under sequence parallelism) before a forward pass that
  is not on the first virtual stage and a COMM_SEND after one that is not on
  the last; the same for activation gradients in the backward.  Receives are
  posted when the stage reaches the pass; sends do not block the stage.
  ``comm_tag = 2 (micro_batch * pp * v + receiving virtual stage) + (0 fwd | 1 bwd)``;
* ZeRO-3: per unit (layer, embedding, head) and micro-batch an all-gather of
  the unit's parameter shard before its forward and before its backward
  (issued when the previous unit starts: one unit of prefetch) and a
  reduce-scatter of its gradients after its backward;
* after the last backward: data-parallel gradient reduction in buckets of
  ``grad_bucket_bytes`` in the order gradients become final (all-reduce; a
  reduce-scatter under ZeRO-1/2), each waiting only for the weight gradients
  of its layers when ``overlap_grad_reduce``; under sequence parallelism an
  all-reduce of the norm gradients over tp; with tied embeddings and pp > 1
  an all-reduce of the word-embedding gradient between the first and last
  stage; the optimizer step (Adam); under ZeRO-1/2 an all-gather of the
  updated parameters per bucket.

Every node carries ``layer`` (int64; -1 = embedding, L = output head),
``phase`` (``fwd``, ``bwd``, ``wgrad``, ``recompute``, ``grad_sync``,
``optim``), ``micro_batch`` (int64; -1 outside passes) and ``op_role``;
gradient-reduction nodes carry ``layers`` (the units in their bucket) instead
of ``layer``.  The global metadata holds the configuration as JSON
(attribute ``llm_config``).

Ranks of one pipeline stage differ only in group names and peer ranks, so one
representative per stage is built and encoded, and the others are derived
from its bytes by :mod:`tracekit.workloads.rank_template`; tests check this equals building each
rank directly.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from tracekit.converters.generators import llm_ops as ops
from tracekit.converters.generators._build import ProcessGroups, RankTraceBuilder
from tracekit.converters.generators.llm_layout import RankPlace, layout
from tracekit.workloads.schedules import FORWARD, stage_order
from tracekit.model import Attr, CollectiveType, ExecutionTrace
from tracekit.traceset import TraceSet
from tracekit.workloads.buckets import bucket_limit_elems, pack_buckets
from tracekit.workloads.config import LLMConfig
from tracekit.workloads.flops import ADAM_FLOPS_PER_PARAM, ADAM_STATE_BYTES_PER_PARAM
from tracekit.workloads.params import LayerParams, unit_params

PRODUCER = "tracekit.converters.generators.llm"


@dataclass(frozen=True)
class Plan:
    """The per-configuration blocks every rank stamps out."""

    config: LLMConfig
    layer_fwd: ops.Block
    layer_bwd: ops.Block
    layer_recompute: ops.Block | None
    embed_fwd: ops.Block
    embed_bwd: ops.Block
    head_fwd: ops.Block
    head_bwd: ops.Block
    roofline: ops.Roofline | None = None

    @classmethod
    def of(cls, config: LLMConfig, hardware=None) -> "Plan":
        """The blocks of ``config`` (:mod:`.llm_ops`), each computed once and stamped for every layer and micro-batch.

        Args:
            config: the job.
            hardware: None (durations 0), a :class:`~.llm_ops.Roofline`, a
                :class:`~.calibration.CalibratedCost`, a ``(peak_flops_per_s, mem_bandwidth_bytes_per_s)``
                pair, or any object with those two attributes (FLOP/s, bytes/s).

        Raises:
            ConfigError: non-positive rates, or an object without those attributes.
        """
        roof = ops.Roofline.of(hardware)
        full = config.parallel.recompute == "full"
        return cls(config, ops.layer_forward(config, roof), ops.layer_backward(config, roof),
                   ops.layer_forward(config, roof, phase="recompute") if full else None,
                   ops.embedding_forward(config, roof), ops.embedding_backward(config, roof),
                   ops.head_forward(config, roof), ops.head_backward(config, roof), roof)


def _meta(config: LLMConfig) -> dict[str, str]:
    return {"producer": PRODUCER, "model": config.model.name,
            "llm_config": json.dumps(dataclasses.asdict(config), sort_keys=True)}


class _RankBuilder:
    """Builds one rank's trace from a :class:`Plan` and its :class:`RankPlace`."""

    def __init__(self, plan: Plan, groups: ProcessGroups, place: RankPlace) -> None:
        self.plan, self.c, self.place = plan, plan.config, place
        self.b = RankTraceBuilder(place.rank)
        self.b.declare_groups(groups)
        p = self.c.parallel
        self.n_vstages = p.pp * p.virtual_stages
        self.n_layers = self.c.model.num_layers
        self.zero3 = p.zero_stage == 3
        self.last_bwd: dict[int, int] = {}        # unit (layer, -1, L) -> exit id of its last backward
        self.grad_group = self._group("grad")
        self.edp_group = self._group("edp")
        self.deferred: list[int] = []             # ZeRO-3 reduce-scatters the optimizer waits for
        self._groups_ranks = groups.mapping()
        self.params = {u: unit_params(self.c.model, u, p.tp, p.pp, p.ep) for u in range(-1, self.n_layers + 1)}
        self._common: dict[tuple[int, int], tuple[Attr, Attr]] = {}  # (layer, micro-batch) -> their attributes
        self._steps: dict[int, list] = {}  # id(block) -> emit's per-step constants (blocks live as long as the plan)

    def _group(self, kind: str) -> str | None:
        return self.place.group(kind)

    def _group_size(self, pg_name: str | None) -> int:
        return 1 if pg_name is None else len(self._groups_ranks[pg_name])

    # ----- stamping -----------------------------------------------------------------------
    def emit(self, block: ops.Block, entry: list[int], layer: int, mb: int) -> list[int]:
        b, place = self.b, self.place
        ids: list[int] = []
        common = self._common.get((layer, mb))
        if common is None:
            common = self._common[(layer, mb)] = (Attr("layer", layer, "int64_val"),
                                                 Attr("micro_batch", mb, "int64_val"))
        steps = self._steps.get(id(block))
        if steps is None:  # per step: its name and its phase and role attributes (shared by every stamping)
            steps = self._steps[id(block)] = [
                (step, step.name, (Attr("phase", step.phase, "string_val"), Attr("op_role", step.role, "string_val")))
                for step in block.steps]
        for step, name, tail in steps:
            deps: list[int] = []
            for d in step.deps:
                deps.extend(entry if d == ops.ENTRY else (ids[d],))
            extra = [*common, *tail]
            if step.comm_type is None:
                ids.append(b.comp(name, duration_ns=step.duration_ns, num_ops=step.num_ops,
                                  tensor_bytes=step.tensor_bytes, deps=deps, extra_attrs=extra))
            else:
                ids.append(b.collective(name, step.comm_type, step.comm_bytes,
                                        pg_name=place.group(step.group), deps=deps, extra_attrs=extra))
        return [ids[i] for i in block.exits]

    def _unit_params(self, unit: int) -> LayerParams:
        return self.params[unit]

    def _zero3_gather(self, unit: int, deps: list[int], mb: int, phase: str) -> list[int]:
        """All-gather the unit's parameter shards (dense over dp x cp, experts over edp)."""
        out = []
        params = self._unit_params(unit)
        for elems, group in ((params.dense, self.grad_group), (params.expert, self.edp_group)):
            if elems and group is not None:
                n = self._group_size(group)
                shard = -(-elems // n)
                out.append(self.b.collective("zero3_param_allgather." + phase, CollectiveType.ALL_GATHER,
                                             shard * self.c.dtype_bytes, pg_name=group, deps=deps,
                                             extra_attrs=self._attrs(unit, mb, phase, "zero3_param_allgather")))
        return out

    def _zero3_scatter(self, unit: int, deps: list[int], mb: int) -> None:
        params = self._unit_params(unit)
        for elems, group in ((params.dense, self.grad_group), (params.expert, self.edp_group)):
            if elems and group is not None:
                n = self._group_size(group)
                padded = -(-elems // n) * n
                self.deferred.append(self.b.collective(
                    "zero3_grad_reducescatter.bwd", CollectiveType.REDUCE_SCATTER, padded * self.c.grad_bytes,
                    pg_name=group, deps=deps, extra_attrs=self._attrs(unit, mb, "bwd", "zero3_grad_reducescatter")))

    @staticmethod
    def _attrs(layer: int, mb: int, phase: str, role: str) -> list[Attr]:
        return [Attr("layer", layer, "int64_val"), Attr("micro_batch", mb, "int64_val"),
                Attr("phase", phase, "string_val"), Attr("op_role", role, "string_val")]

    def _p2p(self, send: bool, forward: bool, mb: int, vs_recv: int, layer: int, deps: list[int]) -> int:
        place, c = self.place, self.c
        t = c.micro_batch_size * c.model.seq_length // c.parallel.cp
        if c.parallel.sequence_parallel:
            t //= c.parallel.tp
        nbytes = t * c.model.hidden_size * c.dtype_bytes
        tag = 2 * (mb * self.n_vstages + vs_recv) + (0 if forward else 1)
        what = "activation" if forward else "grad"
        role = f"pp_{'send' if send else 'recv'}_{what}"
        phase = "fwd" if forward else "bwd"
        attrs = self._attrs(layer, mb, phase, role)
        pg = place.group("pp")
        if send:
            peer = place.next_rank if forward else place.prev_rank
            return self.b.send(f"{role}.{phase}", nbytes, dst=peer, tag=tag, pg_name=pg, deps=deps,
                               extra_attrs=attrs)
        peer = place.prev_rank if forward else place.next_rank
        return self.b.recv(f"{role}.{phase}", nbytes, src=peer, tag=tag, pg_name=pg, deps=deps,
                           extra_attrs=attrs)

    # ----- one iteration ----------------------------------------------------------------------
    def build(self) -> ExecutionTrace:
        c, p = self.c, self.c.parallel
        lpc = c.layers_per_chunk
        prev_exit: list[int] = []
        for op in stage_order(p.schedule, p.pp, c.num_micro_batches, self.place.pp_rank, p.virtual_stages):
            vs = op.chunk * p.pp + self.place.pp_rank
            layers = range(vs * lpc, (vs + 1) * lpc)
            mb = op.micro_batch
            if op.kind == FORWARD:
                units = ([-1] if vs == 0 else []) + list(layers) + ([self.n_layers] if vs == self.n_vstages - 1 else [])
                entry = prev_exit
                if vs > 0:
                    entry = [self._p2p(False, True, mb, vs, layers[0], entry)]
                entry = self._run(units, entry, mb, forward=True)
                if vs < self.n_vstages - 1:
                    self._p2p(True, True, mb, vs + 1, layers[-1], entry)
            else:
                units = ([self.n_layers] if vs == self.n_vstages - 1 else []) + list(reversed(layers)) + \
                        ([-1] if vs == 0 else [])
                entry = prev_exit
                if vs < self.n_vstages - 1:
                    entry = [self._p2p(False, False, mb, vs, layers[-1], entry)]
                entry = self._run(units, entry, mb, forward=False)
                if vs > 0:
                    self._p2p(True, False, mb, vs - 1, layers[0], entry)
            prev_exit = entry
        self._grad_sync_and_step(prev_exit)
        return self.b.build(_meta(c))

    def _run(self, units: list[int], entry: list[int], mb: int, *, forward: bool) -> list[int]:
        plan = self.plan
        prefetch_deps = entry
        for unit in units:
            start = entry
            if self.zero3 and (forward or unit != -1):
                entry = entry + self._zero3_gather(unit, prefetch_deps, mb, "fwd" if forward else "bwd")
            prefetch_deps = start
            if unit == -1:
                entry = self.emit(plan.embed_fwd if forward else plan.embed_bwd, entry, -1, mb)
            elif unit == self.n_layers:
                entry = self.emit(plan.head_fwd if forward else plan.head_bwd, entry, unit, mb)
            elif forward:
                entry = self.emit(plan.layer_fwd, entry, unit, mb)
            else:
                if plan.layer_recompute is not None:
                    entry = self.emit(plan.layer_recompute, entry, unit, mb)
                entry = self.emit(plan.layer_bwd, entry, unit, mb)
            if not forward:
                self.last_bwd[unit] = max(entry)
                if self.zero3:
                    self._zero3_scatter(unit, entry, mb)
        return entry

    def _buckets(self, expert: bool) -> list[tuple[list[int], int]]:
        """Units in the order their gradients become final, packed into buckets: ``[(units, elements)]``."""
        limit = bucket_limit_elems(self.c.parallel.grad_bucket_bytes, self.c.grad_bytes)
        order = sorted(self.last_bwd, key=self.last_bwd.__getitem__)

        def elems(unit: int) -> int:
            params = self._unit_params(unit)
            return params.expert if expert else params.dense

        return pack_buckets(order, elems, limit)

    def _grad_sync_and_step(self, final: list[int]) -> None:
        b, c, p = self.b, self.c, self.c.parallel
        waits: list[int] = list(final) + self.deferred
        shard_elems = 0
        gathers: list[tuple[str, int]] = []
        for expert, group in ((False, self.grad_group), (True, self.edp_group)):
            buckets = self._buckets(expert)
            n = self._group_size(group)
            for index, (units, elems) in enumerate(buckets):
                if self.zero3 or group is None:
                    shard_elems += -(-elems // n) if self.zero3 else elems
                    continue
                deps = sorted({self.last_bwd[u] for u in units}) if p.overlap_grad_reduce else final
                attrs = [Attr("layers", units, "int64_list"), Attr("micro_batch", -1, "int64_val"),
                         Attr("phase", "grad_sync", "string_val"), Attr("bucket", index, "int64_val")]
                kind = "expert_" if expert else ""
                if p.zero_stage == 0:
                    shard_elems += elems
                    waits.append(b.collective(f"{kind}dp_grad_allreduce.grad_sync", CollectiveType.ALL_REDUCE,
                                              elems * c.grad_bytes, pg_name=group, deps=deps,
                                              extra_attrs=attrs + [Attr("op_role", f"{kind}dp_grad_allreduce",
                                                                        "string_val")]))
                else:
                    shard = -(-elems // n)
                    shard_elems += shard
                    gathers.append((group, shard))
                    waits.append(b.collective(f"{kind}dp_grad_reducescatter.grad_sync",
                                              CollectiveType.REDUCE_SCATTER, shard * n * c.grad_bytes,
                                              pg_name=group, deps=deps,
                                              extra_attrs=attrs + [Attr("op_role", f"{kind}dp_grad_reducescatter",
                                                                        "string_val")]))
        misc = [Attr("micro_batch", -1, "int64_val"), Attr("phase", "grad_sync", "string_val")]
        if p.sequence_parallel:
            norm = sum(self._unit_params(u).norm for u in self.last_bwd)
            waits.append(b.collective("sp_norm_grad_allreduce.grad_sync", CollectiveType.ALL_REDUCE,
                                      norm * c.grad_bytes, pg_name=self._group("tp"), deps=final,
                                      extra_attrs=misc + [Attr("op_role", "sp_norm_grad_allreduce", "string_val")]))
        emb = self._group("emb")
        if emb is not None:
            rows = c.padded_vocab_size // p.tp * c.model.hidden_size
            waits.append(b.collective("embedding_grad_allreduce.grad_sync", CollectiveType.ALL_REDUCE,
                                      rows * c.grad_bytes, pg_name=emb, deps=final,
                                      extra_attrs=misc + [Attr("op_role", "embedding_grad_allreduce", "string_val")]))
        per_param = ADAM_STATE_BYTES_PER_PARAM + c.grad_bytes + c.dtype_bytes
        roof = self.plan.roofline
        flops, nbytes = ADAM_FLOPS_PER_PARAM * shard_elems, per_param * shard_elems
        step = b.comp("optimizer_step.optim", duration_ns=roof.optimizer_ns(flops, nbytes, shard_elems) if roof else 0,
                      num_ops=flops, tensor_bytes=nbytes, deps=waits,
                      extra_attrs=[Attr("micro_batch", -1, "int64_val"), Attr("phase", "optim", "string_val"),
                                   Attr("op_role", "optimizer_step", "string_val")])
        for index, (group, shard) in enumerate(gathers):
            b.collective("dp_param_allgather.optim", CollectiveType.ALL_GATHER, shard * c.dtype_bytes,
                         pg_name=group, deps=[step],
                         extra_attrs=[Attr("micro_batch", -1, "int64_val"), Attr("phase", "optim", "string_val"),
                                      Attr("bucket", index, "int64_val"),
                                      Attr("op_role", "dp_param_allgather", "string_val")])


def build_rank_trace(config: LLMConfig, rank: int, hardware=None, *,
                     _cache: tuple[Plan, ProcessGroups, list[RankPlace]] | None = None) -> ExecutionTrace:
    """Build one rank's trace directly (no byte templates); mainly for tests and small jobs.

    Raises:
        ConfigError: bad hardware spec, rank outside the world.
    """
    from tracekit.errors import ConfigError

    plan, groups, places = _cache if _cache is not None else (Plan.of(config, hardware), *layout(config))
    if not 0 <= rank < config.world_size:
        raise ConfigError(f"rank {rank} is outside 0..{config.world_size - 1}")
    return _RankBuilder(plan, groups, places[rank]).build()


def _varying_attrs(place: RankPlace) -> dict[tuple[str, str], Attr]:
    """The attribute values that differ between ranks of one pipeline stage."""
    attrs = {("pg", kind): Attr("pg_name", name, "string_val") for kind, name in place.groups}
    if place.prev_rank is not None:
        for key, rank in (("self", place.rank), ("prev", place.prev_rank), ("next", place.next_rank)):
            attrs[("src", key)] = Attr("comm_src", rank, "int32_val")
            attrs[("dst", key)] = Attr("comm_dst", rank, "int32_val")
    return attrs


def _encode(trace: ExecutionTrace, names, attrs) -> bytes:
    """The `.et` bytes of a freshly built rank (:func:`tracekit._batch.encode_node_list` with the job's tables).

    Raises:
        TracekitError: a value protobuf cannot encode (naming the node id and rank).
    """
    from tracekit.errors import TracekitError
    from tracekit._batch import encode_node_list
    from tracekit.io import encode_metadata

    try:
        return encode_metadata(trace.metadata, rank=trace.rank) + encode_node_list(
            trace.nodes, names=names, attrs=attrs)
    except TracekitError as exc:
        raise exc.with_context(rank=trace.rank) from None


def iter_rank_classes(config: LLMConfig, hardware=None) -> Iterator[tuple[bytes, list[Attr], list[tuple[int, list[Attr]]]]]:
    """Per pipeline stage: ``(representative's .et bytes, its varying attributes, [(rank, its values), ...])``.

    The ranks of one stage differ only in the attributes :func:`_varying_attrs`
    lists (same keys, in the same order for every rank); the representative is
    the stage's lowest rank and comes first.  :func:`iter_rank_bytes` and
    :func:`tracekit.classset.write_class_set` build on it.

    Raises:
        ConfigError: bad hardware values.
    """
    from tracekit._batch import FieldTable

    plan = Plan.of(config, hardware)
    tables = FieldTable.names(), FieldTable.attributes()  # each distinct name and attribute encoded once per job
    groups, places = layout(config)
    per_stage = config.world_size // config.parallel.pp
    for stage in range(config.parallel.pp):
        rep = places[stage * per_stage]
        keys = list(_varying_attrs(rep))
        data = _encode(_RankBuilder(plan, groups, rep).build(), *tables)
        members = []
        for place in places[stage * per_stage:(stage + 1) * per_stage]:
            attrs = _varying_attrs(place)
            members.append((place.rank, [attrs[k] for k in keys]))
        yield data, list(_varying_attrs(rep).values()), members


def iter_rank_bytes(config: LLMConfig, hardware=None) -> Iterator[tuple[int, bytes]]:
    """``(rank, .et bytes)`` for every rank in rank order, one representative built per stage.

    Args:
        config: the job.
        hardware: None (durations 0), a :class:`~.llm_ops.Roofline`, a
            ``(peak_flops_per_s, mem_bandwidth_bytes_per_s)`` pair, or any
            object with those two attributes.

    Raises:
        ConfigError: bad hardware values.
    """
    from tracekit.workloads.rank_template import RankTemplate

    for data, slots, members in iter_rank_classes(config, hardware):
        template = RankTemplate(data, dict(enumerate(slots)))
        for rank, attrs in members:
            yield rank, template.for_rank(dict(enumerate(attrs)))


def _stamped_rank_bytes(config: LLMConfig, hardware=None) -> Iterator[tuple[int, bytes]]:
    """:func:`iter_rank_bytes` with each file's metadata naming its class (:func:`tracekit.classset.stamp_rank_class`)."""
    from tracekit.classset import class_key, stamp_rank_class
    from tracekit.workloads.rank_template import RankTemplate

    for data, slots, members in iter_rank_classes(config, hardware):
        template, key = RankTemplate(data, dict(enumerate(slots))), class_key(data)
        for rank, attrs in members:
            yield rank, stamp_rank_class(template.for_rank(dict(enumerate(attrs))), key, slots,
                                         [a.value for a in attrs])


def generate_llm(config: LLMConfig, hardware=None) -> TraceSet:
    """The traces of one training iteration of ``config`` on every rank.

    Traces hold their encoded records (nodes decode on first use), so a big
    job costs about its file size in memory; use :func:`write_llm` to stream
    to disk instead.

    Raises:
        ConfigError: bad hardware values.
    """
    from tracekit.io import trace_from_bytes

    groups, _ = layout(config)
    traces = {rank: trace_from_bytes(data, rank=rank) for rank, data in iter_rank_bytes(config, hardware)}
    return TraceSet(traces, groups.mapping())


def write_llm(config: LLMConfig, prefix: str | os.PathLike[str], hardware=None, *,
              progress: Callable[[Iterable, int], Iterable] | None = None, classes: bool = False) -> list[Path]:
    """Write ``<prefix>.<rank>.et`` for every rank, one rank in memory at a time.

    Each file's metadata names its rank class (:data:`tracekit.classset.RANK_CLASS_ATTR`), so replays
    derive the members of a class from its first file (their node records are verified byte for byte).

    Args:
        progress: optional wrapper ``progress(iterable, total)`` (e.g. a progress bar).
        classes: write a rank-class set instead (one trace per pipeline stage
            plus ``<prefix>.classes.json``; :mod:`tracekit.classset`); returns
            ``[manifest path]``.

    Returns:
        The paths written, in rank order.  The set is written as a unit
        (:class:`tracekit.io.TraceSetWriter`): an error or Ctrl-C leaves no file.
    """
    from tracekit.astra_compat import astra_group_ids, comm_groups_document
    from tracekit.io import TraceSetWriter

    if classes:
        from tracekit.classset import write_class_set

        stages: Iterable = iter_rank_classes(config, hardware)
        if progress is not None:
            stages = progress(stages, config.parallel.pp)
        return [write_class_set(prefix, config.world_size, stages)]
    items: Iterable[tuple[int, bytes]] = _stamped_rank_bytes(config, hardware)
    if progress is not None:
        items = progress(items, config.world_size)
    groups = layout(config)[0].mapping()
    with TraceSetWriter(prefix) as writer:
        for rank, data in items:
            writer.add(rank, data)
        writer.comm_groups = comm_groups_document(groups, astra_group_ids(groups, config.world_size))
    return writer.paths
