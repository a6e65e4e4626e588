"""One rank's iteration of a generated LLM job: the :class:`Plan` of op blocks and the builder that stamps them.

What each rank runs (passes, pipeline traffic, ZeRO collectives, gradient buckets, the optimizer step) is
described in :mod:`tracekit.converters.generators.llm`; the op blocks and their counting rules in
:mod:`.llm_ops`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from tracekit.converters.generators import llm_ops as ops
from tracekit.converters.generators.build import ProcessGroups, RankTraceBuilder
from tracekit.converters.generators.llm_layout import RankPlace
from tracekit.workloads.schedules import FORWARD, stage_order
from tracekit.errors import ConfigError
from tracekit.model import Attr, CollectiveType, ExecutionTrace
from tracekit.workloads.grid import GROUP_KINDS
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
        return cls(
            config,
            ops.layer_forward(config, roof),
            ops.layer_backward(config, roof),
            ops.layer_forward(config, roof, phase="recompute") if full else None,
            ops.embedding_forward(config, roof),
            ops.embedding_backward(config, roof),
            ops.head_forward(config, roof),
            ops.head_backward(config, roof),
            roof,
        )


def _meta(config: LLMConfig) -> dict[str, str]:
    data = dataclasses.asdict(config)
    if data["parallel"]["microbatch_group_size"] is None:  # defaults: files as before the knobs existed
        del data["parallel"]["microbatch_group_size"]
    if data["stack"]["tp_overlap_comm_sms"] == 0:
        del data["stack"]["tp_overlap_comm_sms"]
    return {"producer": PRODUCER, "model": config.model.name, "llm_config": json.dumps(data, sort_keys=True)}


#: ``stream`` of the first group kind's collectives (compute kernels carry no stream: stream 0).
COMM_STREAM_BASE = 1


def comm_streams(place: RankPlace) -> dict[str, Attr]:
    """The ``stream`` attribute of each of the rank's process groups: one communication stream per group.

    PyTorch's ProcessGroupNCCL gives every process group its own NCCL communicator and CUDA stream per device,
    and Megatron-LM issues tensor-parallel collectives, data-parallel gradient reductions
    (``distributed_data_parallel``/``param_and_grad_buffer``, on the data-parallel group) and pipeline P2P on
    different groups, so e.g. a bucket all-reduce runs concurrently with the tensor-parallel all-reduces of the
    backward it overlaps.  Groups are numbered by :data:`GROUP_KINDS` order from :data:`COMM_STREAM_BASE`; two
    kinds naming the same group share its stream.

    Returns:
        pg_name -> ``Attr("stream", n, "int64_val")``.
    """
    streams: dict[str, Attr] = {}
    for index, kind in enumerate(GROUP_KINDS):
        name = place.group(kind)
        if name is not None and name not in streams:
            streams[name] = Attr("stream", COMM_STREAM_BASE + index, "int64_val")
    return streams


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
        self.last_bwd: dict[int, int] = {}  # unit (layer, -1, L) -> exit id of its last backward
        self.grad_group = self._group("grad")
        self.edp_group = self._group("edp")
        self.deferred: list[int] = []  # ZeRO-3 reduce-scatters the optimizer waits for
        self._groups_ranks = groups.mapping()
        self.params = {u: unit_params(self.c.model, u, p.tp, p.pp, p.ep) for u in range(-1, self.n_layers + 1)}
        self._common: dict[tuple[int, int], tuple[Attr, Attr]] = {}  # (layer, micro-batch) -> their attributes
        self._steps: dict[int, list] = {}  # id(block) -> emit's per-step constants (blocks live as long as the plan)
        self._streams = comm_streams(place)

    def _group(self, kind: str) -> str | None:
        return self.place.group(kind)

    def _collective(
        self, name: str, comm_type: CollectiveType, comm_bytes: int, *, pg_name: str, deps: list[int], extra_attrs
    ) -> int:
        """A collective on its process group's communication stream (see :func:`comm_streams`)."""
        attrs = [*extra_attrs, self._streams[pg_name]]
        return self.b.collective(name, comm_type, comm_bytes, pg_name=pg_name, deps=deps, extra_attrs=attrs)

    def _pg(self, kind: str) -> str:
        """The ``pg_name`` of this rank's group of ``kind``.

        Raises:
            ConfigError: the layout has no such group for this rank (the block rules asked for one it lacks).
        """
        name = self.place.group(kind)
        if name is None:
            raise ConfigError(f"rank {self.place.rank} has no {kind} group")
        return name

    def _group_size(self, pg_name: str | None) -> int:
        return 1 if pg_name is None else len(self._groups_ranks[pg_name])

    # ----- stamping -----------------------------------------------------------------------
    def emit(self, block: ops.Block, entry: list[int], layer: int, mb: int) -> list[int]:
        b = self.b
        ids: list[int] = []
        common = self._common.get((layer, mb))
        if common is None:
            common = self._common[(layer, mb)] = (
                Attr("layer", layer, "int64_val"),
                Attr("micro_batch", mb, "int64_val"),
            )
        steps = self._steps.get(id(block))
        if steps is None:  # per step: its name and its phase and role attributes (shared by every stamping)
            steps = self._steps[id(block)] = [
                (step, step.name, (Attr("phase", step.phase, "string_val"), Attr("op_role", step.role, "string_val")))
                for step in block.steps
            ]
        for step, name, tail in steps:
            deps: list[int] = []
            for d in step.deps:
                deps.extend(entry if d == ops.ENTRY else (ids[d],))
            extra = [*common, *tail]
            if step.p2p:
                ids.append(self._ring_p2p(step, name, deps, extra))
            elif step.comm_type is None:
                ids.append(
                    b.comp(
                        name,
                        duration_ns=step.duration_ns,
                        num_ops=step.num_ops,
                        tensor_bytes=step.tensor_bytes,
                        deps=deps,
                        extra_attrs=extra,
                    )
                )
            else:
                ids.append(
                    self._collective(
                        name,
                        step.comm_type,
                        step.comm_bytes,
                        pg_name=self._pg(step.group),
                        deps=deps,
                        extra_attrs=extra,
                    )
                )
        return [ids[i] for i in block.exits]

    def _ring_p2p(self, step: ops.Step, name: str, deps: list[int], extra: list[Attr]) -> int:
        """A send to the next rank (or a receive from the previous one) of this rank's ring in ``step.group``
        (context parallelism: :mod:`.llm_attention`); ``comm_tag`` from the step's role."""
        from tracekit.converters.generators.llm_attention import CP_RING_TAG, RING_TAGS

        place, pg, cp = self.place, self._pg(step.group), self.c.parallel.cp
        sender = place.cp_rank if step.p2p == "send" else (place.cp_rank - 1) % cp
        tag = CP_RING_TAG + sender * len(RING_TAGS) + RING_TAGS[step.role]
        if step.p2p == "send" and place.cp_next_rank is not None:
            return self.b.send(
                name, step.comm_bytes, dst=place.cp_next_rank, tag=tag, pg_name=pg, deps=deps, extra_attrs=extra
            )
        if step.p2p == "recv" and place.cp_prev_rank is not None:
            return self.b.recv(
                name, step.comm_bytes, src=place.cp_prev_rank, tag=tag, pg_name=pg, deps=deps, extra_attrs=extra
            )
        raise ConfigError(f"rank {place.rank} has no {step.group} ring peer for {name}")

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
                out.append(
                    self._collective(
                        "zero3_param_allgather." + phase,
                        CollectiveType.ALL_GATHER,
                        shard * self.c.dtype_bytes,
                        pg_name=group,
                        deps=deps,
                        extra_attrs=self._attrs(unit, mb, phase, "zero3_param_allgather"),
                    )
                )
        return out

    def _zero3_scatter(self, unit: int, deps: list[int], mb: int) -> None:
        params = self._unit_params(unit)
        for elems, group in ((params.dense, self.grad_group), (params.expert, self.edp_group)):
            if elems and group is not None:
                n = self._group_size(group)
                padded = -(-elems // n) * n
                self.deferred.append(
                    self._collective(
                        "zero3_grad_reducescatter.bwd",
                        CollectiveType.REDUCE_SCATTER,
                        padded * self.c.grad_bytes,
                        pg_name=group,
                        deps=deps,
                        extra_attrs=self._attrs(unit, mb, "bwd", "zero3_grad_reducescatter"),
                    )
                )

    @staticmethod
    def _attrs(layer: int, mb: int, phase: str, role: str) -> list[Attr]:
        return [
            Attr("layer", layer, "int64_val"),
            Attr("micro_batch", mb, "int64_val"),
            Attr("phase", phase, "string_val"),
            Attr("op_role", role, "string_val"),
        ]

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
        pg = self._pg("pp")
        peer = place.next_rank if forward == send else place.prev_rank
        if peer is None:
            raise ConfigError(f"rank {place.rank} has no pipeline peer for {role}.{phase}")
        if send:
            return self.b.send(f"{role}.{phase}", nbytes, dst=peer, tag=tag, pg_name=pg, deps=deps, extra_attrs=attrs)
        return self.b.recv(f"{role}.{phase}", nbytes, src=peer, tag=tag, pg_name=pg, deps=deps, extra_attrs=attrs)

    # ----- one iteration ----------------------------------------------------------------------
    def build(self) -> ExecutionTrace:
        c, p = self.c, self.c.parallel
        chunks = c.chunk_layers  # uneven splits: tracekit.workloads.pipeline_split
        prev_exit: list[int] = []
        self.early_gathers = p.zero_stage in (1, 2) and c.stack.overlap_param_gather
        if self.early_gathers:
            self._param_gathers(self._stage_units(chunks), [])
        m, stage = c.num_micro_batches, self.place.pp_rank
        for op in stage_order(p.schedule, p.pp, m, stage, p.virtual_stages, p.microbatch_group_size):
            vs = op.chunk * p.pp + self.place.pp_rank
            layers = chunks[vs]
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
                units = (
                    ([self.n_layers] if vs == self.n_vstages - 1 else [])
                    + list(reversed(layers))
                    + ([-1] if vs == 0 else [])
                )
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
        """Gradient reduction after the last backward, then the optimizer step (ZeRO-1/2: and its gathers)."""
        waits: list[int] = list(final) + self.deferred
        gathers: list[tuple[str, int]] = []
        shard_elems = self._dp_grad_reduce(final, waits, gathers)
        c, p = self.c, self.c.parallel
        if p.sequence_parallel:
            norm = sum(self._unit_params(u).norm for u in self.last_bwd)
            waits.append(self._grad_allreduce("sp_norm_grad_allreduce", norm * c.grad_bytes, self._pg("tp"), final))
        emb = self._group("emb")
        if emb is not None:
            rows = c.padded_vocab_size // p.tp * c.model.hidden_size
            waits.append(self._grad_allreduce("embedding_grad_allreduce", rows * c.grad_bytes, emb, final))
        self._optimizer_step(waits, shard_elems, gathers)

    def _dp_grad_reduce(self, final: list[int], waits: list[int], gathers: list[tuple[str, int]]) -> int:
        """The data-parallel bucket reductions (appended to ``waits``; ZeRO-1/2 shards to ``gathers``).

        Returns:
            Parameters (elements) this rank's optimizer updates.
        """
        c, p = self.c, self.c.parallel
        shard_elems = 0
        for expert, group in ((False, self.grad_group), (True, self.edp_group)):
            n = self._group_size(group)
            for index, (units, elems) in enumerate(self._buckets(expert)):
                if self.zero3 or group is None:
                    shard_elems += -(-elems // n) if self.zero3 else elems
                    continue
                deps = sorted({self.last_bwd[u] for u in units}) if p.overlap_grad_reduce else final
                kind = "expert_" if expert else ""
                if p.zero_stage == 0:
                    shard_elems += elems
                    role, ctype, nbytes = f"{kind}dp_grad_allreduce", CollectiveType.ALL_REDUCE, elems * c.grad_bytes
                else:
                    shard = -(-elems // n)
                    shard_elems += shard
                    gathers.append((group, shard))
                    role, ctype = f"{kind}dp_grad_reducescatter", CollectiveType.REDUCE_SCATTER
                    nbytes = shard * n * c.grad_bytes
                attrs = [
                    Attr("layers", units, "int64_list"),
                    Attr("micro_batch", -1, "int64_val"),
                    Attr("phase", "grad_sync", "string_val"),
                    Attr("bucket", index, "int64_val"),
                    Attr("op_role", role, "string_val"),
                ]
                waits.append(
                    self._collective(f"{role}.grad_sync", ctype, nbytes, pg_name=group, deps=deps, extra_attrs=attrs)
                )
        return shard_elems

    def _grad_allreduce(self, role: str, nbytes: int, group: str, deps: list[int]) -> int:
        """One all-reduce of ``nbytes`` gradient bytes outside the buckets (phase ``grad_sync``)."""
        attrs = [
            Attr("micro_batch", -1, "int64_val"),
            Attr("phase", "grad_sync", "string_val"),
            Attr("op_role", role, "string_val"),
        ]
        return self._collective(
            f"{role}.grad_sync", CollectiveType.ALL_REDUCE, nbytes, pg_name=group, deps=deps, extra_attrs=attrs
        )

    def _optimizer_step(self, waits: list[int], shard_elems: int, gathers: list[tuple[str, int]]) -> None:
        """Adam on ``shard_elems`` parameters (FLOPs and bytes from :mod:`tracekit.workloads.flops`), then
        the ZeRO-1/2 all-gathers of the updated parameter shards."""
        b, c = self.b, self.c
        per_param = ADAM_STATE_BYTES_PER_PARAM + c.grad_bytes + c.dtype_bytes
        roof = self.plan.roofline
        flops, nbytes = ADAM_FLOPS_PER_PARAM * shard_elems, per_param * shard_elems
        optim = [Attr("micro_batch", -1, "int64_val"), Attr("phase", "optim", "string_val")]
        step = b.comp(
            "optimizer_step.optim",
            duration_ns=roof.optimizer_ns(flops, nbytes, shard_elems) if roof else 0,
            num_ops=flops,
            tensor_bytes=nbytes,
            deps=waits,
            extra_attrs=[*optim, Attr("op_role", "optimizer_step", "string_val")],
        )
        if self.early_gathers:
            return
        self._param_gathers_of(gathers, [step])

    def _stage_units(self, chunks: tuple[range, ...]) -> list[int]:
        """This stage's units (embedding -1, layers, head L) in the order their gradients become final."""
        p, units = self.c.parallel, []
        for chunk in range(p.virtual_stages):
            vs = chunk * p.pp + self.place.pp_rank
            units += (
                ([-1] if vs == 0 else []) + list(chunks[vs]) + ([self.n_layers] if vs == self.n_vstages - 1 else [])
            )
        return sorted(units, reverse=True)

    def _param_gathers(self, units: list[int], deps: list[int]) -> None:
        """Overlapped parameter gathers (``stack.overlap_param_gather``, Megatron-Core ``--overlap-param-gather``):
        in the steady state the previous step's updated shards are gathered while this step's forward runs,
        so they are issued first and nothing waits for them (bucket by bucket, as the step's own reductions)."""
        limit = bucket_limit_elems(self.c.parallel.grad_bucket_bytes, self.c.grad_bytes)
        gathers: list[tuple[str, int]] = []
        for expert, group in ((False, self.grad_group), (True, self.edp_group)):
            if group is None:
                continue
            n = self._group_size(group)

            def elems(unit: int, expert: bool = expert) -> int:
                params = self._unit_params(unit)
                return params.expert if expert else params.dense

            gathers += [(group, -(-total // n)) for _, total in pack_buckets(units, elems, limit)]
        self._param_gathers_of(gathers, deps)

    def _param_gathers_of(self, gathers: list[tuple[str, int]], deps: list[int]) -> None:
        c = self.c
        optim = [Attr("micro_batch", -1, "int64_val"), Attr("phase", "optim", "string_val")]
        for index, (group, shard) in enumerate(gathers):
            self._collective(
                "dp_param_allgather.optim",
                CollectiveType.ALL_GATHER,
                shard * c.dtype_bytes,
                pg_name=group,
                deps=deps,
                extra_attrs=[
                    *optim,
                    Attr("bucket", index, "int64_val"),
                    Attr("op_role", "dp_param_allgather", "string_val"),
                ],
            )
