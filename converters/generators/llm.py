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

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, TypeAlias

from tracekit.converters.generators.build import ProcessGroups
from tracekit.converters.generators.llm_layout import RankPlace, layout
from tracekit.converters.generators.llm_rank import PRODUCER as PRODUCER
from tracekit.converters.generators.llm_rank import Plan, _RankBuilder
from tracekit.converters.generators.llm_steps import Dims
from tracekit.model import Attr, ExecutionTrace
from tracekit.sets.traceset import TraceSet
from tracekit.workloads.config import LLMConfig

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.wire.batch import FieldTable
    from tracekit.converters.generators.calibration import CalibratedCost
    from tracekit.converters.generators.llm_steps import HardwareLike, Roofline

#: What sets op durations (``Plan.of``): None (durations 0), a Roofline, a CalibratedCost, a
#: ``(peak_flops_per_s, mem_bandwidth_bytes_per_s)`` pair, or any object with those two attributes.
Hardware: TypeAlias = "HardwareLike | Roofline | CalibratedCost | tuple[float, float] | None"
#: One rank class: (representative's .et bytes, its varying attributes, [(rank, its values), ...])
RankClass: TypeAlias = tuple[bytes, list[Attr], list[tuple[int, list[Attr]]]]


def build_rank_trace(
    config: LLMConfig,
    rank: int,
    hardware: Hardware = None,
    *,
    _cache: tuple[Plan, ProcessGroups, list[RankPlace]] | None = None,
) -> ExecutionTrace:
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
    peers: tuple[tuple[str, int | None], ...] = (
        ("prev", place.prev_rank),
        ("next", place.next_rank),
        ("cp_prev", place.cp_prev_rank),
        ("cp_next", place.cp_next_rank),
    )
    if any(rank is not None for _, rank in peers):
        for key, rank in (("self", place.rank), *peers):
            if rank is not None:
                attrs[("src", key)] = Attr("comm_src", rank, "int32_val")
                attrs[("dst", key)] = Attr("comm_dst", rank, "int32_val")
    return attrs


def _encode(trace: ExecutionTrace, names: FieldTable, attrs: FieldTable) -> bytes:
    """The `.et` bytes of a freshly built rank (:func:`tracekit.wire.batch.encode_node_list` with the job's tables).

    Raises:
        TracekitError: a value protobuf cannot encode (naming the node id and rank).
    """
    from tracekit.errors import TracekitError
    from tracekit.wire.batch import encode_node_list
    from tracekit.io import encode_metadata

    try:
        return encode_metadata(trace.metadata, rank=trace.rank) + encode_node_list(
            trace.nodes, names=names, attrs=attrs
        )
    except TracekitError as exc:
        raise exc.with_context(rank=trace.rank) from None


def iter_rank_classes(config: LLMConfig, hardware: Hardware = None) -> Iterator[RankClass]:
    """Per pipeline stage: ``(representative's .et bytes, its varying attributes, [(rank, its values), ...])``;
    under ring context parallelism per stage and cp rank (the ring's tags name the sender's cp rank).

    The ranks of one class differ only in the attributes :func:`_varying_attrs`
    lists (same keys, in the same order for every rank); the representative is
    the class's lowest rank and comes first.  :func:`iter_rank_bytes` and
    :func:`tracekit.sets.classset.write_class_set` build on it.

    Raises:
        ConfigError: bad hardware values.
    """
    from tracekit.wire.batch import FieldTable

    plan = Plan.of(config, hardware)
    tables = FieldTable.names(), FieldTable.attributes()  # each distinct name and attribute encoded once per job
    groups, places = layout(config)
    per_stage = config.world_size // config.parallel.pp
    ring = Dims.of(config).ring_cp  # ring tags differ by cp rank (llm_attention): one class per stage and cp rank
    for stage in range(config.parallel.pp):
        stage_places = places[stage * per_stage : (stage + 1) * per_stage]
        for cp_rank in range(config.parallel.cp) if ring else (None,):
            cls = [p for p in stage_places if cp_rank is None or p.cp_rank == cp_rank]
            rep = cls[0]
            keys = list(_varying_attrs(rep))
            data = _encode(_RankBuilder(plan, groups, rep).build(), *tables)
            members = []
            for place in cls:
                attrs = _varying_attrs(place)
                members.append((place.rank, [attrs[k] for k in keys]))
            yield data, list(_varying_attrs(rep).values()), members


def iter_rank_bytes(config: LLMConfig, hardware: Hardware = None) -> Iterator[tuple[int, bytes]]:
    """``(rank, .et bytes)`` for every rank, stage by stage, one representative built per rank class
    (:func:`iter_rank_classes`; ranks in rank order unless ring context parallelism splits a stage by cp rank).

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


def _stamped_rank_bytes(config: LLMConfig, hardware: Hardware = None) -> Iterator[tuple[int, bytes]]:
    """:func:`iter_rank_bytes` with each file's metadata naming its class (:func:`tracekit.sets.classset.stamp_rank_class`)."""
    from tracekit.sets.classset import class_key, stamp_rank_class
    from tracekit.workloads.rank_template import RankTemplate

    for data, slots, members in iter_rank_classes(config, hardware):
        template, key = RankTemplate(data, dict(enumerate(slots))), class_key(data)
        for rank, attrs in members:
            yield (
                rank,
                stamp_rank_class(template.for_rank(dict(enumerate(attrs))), key, slots, [a.value for a in attrs]),
            )


def generate_llm(config: LLMConfig, hardware: Hardware = None) -> TraceSet:
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


def write_llm(
    config: LLMConfig,
    prefix: str | os.PathLike[str],
    hardware: Hardware = None,
    *,
    progress: Callable[[Iterable[Any], int], Iterable[Any]] | None = None,
    classes: bool = False,
) -> list[Path]:
    """Write ``<prefix>.<rank>.et`` for every rank, one rank in memory at a time.

    Each file's metadata names its rank class (:data:`tracekit.sets.classset.RANK_CLASS_ATTR`), so replays
    derive the members of a class from its first file (their node records are verified byte for byte).

    Args:
        progress: optional wrapper ``progress(iterable, total)`` (e.g. a progress bar).
        classes: write a rank-class set instead (one trace per pipeline stage
            plus ``<prefix>.classes.json``; :mod:`tracekit.sets.classset`); returns
            ``[manifest path]``.

    Returns:
        The paths written, in rank order.  The set is written as a unit
        (:class:`tracekit.io.TraceSetWriter`): an error or Ctrl-C leaves no file.
    """
    from tracekit.interop.astra import astra_group_ids, comm_groups_document
    from tracekit.io import TraceSetWriter

    if classes:
        from tracekit.sets.classset import write_class_set

        stages: Iterable[RankClass] = iter_rank_classes(config, hardware)
        if progress is not None:
            stages = progress(stages, config.parallel.pp * (config.parallel.cp if Dims.of(config).ring_cp else 1))
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
