"""ASTRA-sim 1.0 text workloads -> per-rank Chakra traces (``tracekit convert text``).

The format (ASTRA-sim ``astra-sim/workload/Workload.cc``, ``initialize_workload``,
and ``workload_inputs/README.md``; the same columns as Chakra's
``src/converter/text_converter.py``)::

    <PARALLELISM> [options]
    <number of layers>
    <name> <reserved> <fwd compute> <fwd comm type> <fwd comm size>
           <ig compute> <ig comm type> <ig comm size>
           <wg compute> <wg comm type> <wg comm size> <update time>

one layer per line, fields separated by whitespace (tabs in ASTRA-sim's
files, which also end lines with CR LF).  ``ig`` is the input-gradient
(backward data) step, ``wg`` the weight-gradient step.  Communication types
are ``ALLREDUCE``, ``ALLGATHER``, ``ALLTOALL``, ``REDUCESCATTER`` or ``NONE``;
sizes are bytes.  ASTRA-sim also knows ``ALLREDUCEALLTOALL`` (its own
hierarchical variant, with no Chakra collective type): it is read, but using
it in a converted position is an error.  ASTRA-sim maps any other word
silently to "no communication" and Chakra's converter to an all-reduce; here
it is a :class:`~tracekit.errors.ConversionError` naming file and line.

Units and names follow the reference toolchain, Chakra's text converter
(mlcommons/chakra 21585d8 ``src/converter/text_converter.py``, which
ASTRA-sim 2 runs): a compute value goes into ``duration_micros`` as written,
so by default ``duration_ns = value x 1000`` (``time_unit="ns"`` reads ASTRA-sim
1.0 cycles instead); nodes are named ``COMP_NODE_<layer>_FWD`` /
``_BWD_IG`` / ``_BWD_WG`` and ``COMM_COLL_NODE_<layer>_<TYPE>``; wherever
Chakra's converter emits a collective position it is emitted even when the
file says ``NONE``, as an all-reduce of 0 bytes (Chakra's mapping of ``NONE``).
tests/interop compares every real workload node for node with Chakra's
output.  The update-time column (ASTRA-sim: a delay after each of the
layer's collectives finishes) is read and checked but not modelled, as in
Chakra's converter.

Parallelism (first line) and the schedule built for each, per pass; ``F``,
``I``, ``W`` are the fwd, ig and wg compute nodes of a layer and ``Fc``,
``Ic``, ``Wc`` its collectives (0 bytes for ``NONE``, except where noted).
Node ids restart at 0 on every rank; passes follow each other on a rank (layer l's forward in pass k+1 waits for
the end of its weight-gradient step in pass k).

* ``DATA``: forward F over layers; backward from the last layer: W, Wc
  (all ranks), then I (no I for the first layer).  fwd/ig columns ignored
  (ASTRA-sim involves no network dimension for them).  4L-1 nodes per pass.
  The next pass's F waits for the layer's Wc.
* ``MODEL``: F, Fc per layer; backward: I (after the next layer's W and Ic),
  Ic (none for the first layer), W.  wg communication ignored.
* ``HYBRID_DATA_MODEL`` / ``HYBRID_MODEL_DATA``: as MODEL plus Wc after W;
  fwd/ig collectives on the model-parallel group, wg on the data-parallel
  group; DATA_MODEL names its Ic ``COMM_COLL_NODE_<layer>_IG_COMM__<TYPE>``
  (as Chakra's converter does).  ASTRA-sim puts model parallelism on the first network dimension
  for DATA_MODEL and data parallelism there for MODEL_DATA; here the
  model-parallel size ``tp`` is given and DATA_MODEL groups ranks
  ``[k*tp, (k+1)*tp)`` for model parallelism (data groups strided by tp),
  MODEL_DATA groups ``[k*dp, (k+1)*dp)`` for data parallelism (model groups
  strided by dp = ranks / tp).
* ``HYBRID_TRANSFORMER model_parallel_NPU_group: <tp>`` (ASTRA-sim's
  ``iterate_hybrid_parallel_Transformer``; Chakra's converter rejects it):
  forward F, Fc (blocking) per layer; backward from the last layer: I, Ic
  (blocking, also for the first layer), W after Ic, Wc (non-blocking), and
  the next layer's I after W; ``NONE`` positions emit nothing (no reference
  converter to follow).  fwd/ig collectives on the model-parallel group
  of ``tp`` consecutive ranks (ASTRA-sim's ``break_dimension`` takes the first
  network dimensions up to tp NPUs), wg on the data-parallel group.
* ``HYBRID_DLRM <last bottom layer>`` (and ``HYBRID_DLRM_ENHANCED``): F per
  layer after the previous F; only an ``ALLTOALL`` fwd collective is issued;
  F of the last bottom-MLP layer waits for the first layer's fwd all-to-all;
  backward from the last layer: W (after the next layer's I, and for the
  first layer after its ig all-to-all), Wc unless NONE, I (not for the first
  layer); after I of layer last_bottom+1 the first layer's ig collective.
  All collectives on all ranks.
* ``MICRO``: only the wg collectives, every layer, every pass, independent.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

from tracekit.converters.generators.build import DEFAULT_PG, ProcessGroups, RankTraceBuilder
from tracekit.converters.text_workload_format import (  # the format's vocabulary and parser, importable from here
    COMM_TOKENS,
    NONE_TOKEN,
    PARALLELISMS,
    TIME_UNITS_NS,
    Comm,
    TextLayer,
    TextWorkload,
    line_error,
    parse_text_workload,
    read_text_workload,
)
from tracekit.errors import ConfigError, ConversionError
from tracekit.model import CollectiveType, check_node_count, check_rank_count
from tracekit.sets.traceset import TraceSet

PRODUCER = "tracekit.converters.text_workload"

# ----- process groups -------------------------------------------------------------------


def _groups(wl: TextWorkload, num_ranks: int, tp: int | None) -> tuple[ProcessGroups, list[str], list[str]]:
    """(groups, model-parallel pg per rank, data-parallel pg per rank)."""
    groups = ProcessGroups(num_ranks)
    kind = wl.parallelism
    if kind == "HYBRID_TRANSFORMER":
        if tp is not None and tp != wl.model_parallel_size:
            raise ConfigError(
                f"{wl.path}: --tp {tp} disagrees with the file's model_parallel_NPU_group {wl.model_parallel_size}"
            )
        tp = wl.model_parallel_size
    elif kind in ("HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA"):
        if tp is None:
            raise ConfigError(
                f"{wl.path}: {kind} needs the model-parallel group size (--tp); ASTRA-sim takes "
                "it from the first network dimension"
            )
    elif tp is not None:
        raise ConfigError(f"{wl.path}: --tp applies to hybrid workloads only, not {kind}")
    if tp is None:
        return groups, [DEFAULT_PG] * num_ranks, [DEFAULT_PG] * num_ranks
    if tp < 1 or num_ranks % tp:
        raise ConfigError(f"{wl.path}: model-parallel size {tp} must be positive and divide the {num_ranks} ranks")
    dp = num_ranks // tp
    model_pg, data_pg = [DEFAULT_PG] * num_ranks, [DEFAULT_PG] * num_ranks
    if kind == "HYBRID_MODEL_DATA":  # data parallelism innermost
        blocks = [range(k * dp, (k + 1) * dp) for k in range(tp)]
        strided = [range(j, num_ranks, dp) for j in range(dp)]
        data_groups, model_groups = blocks, strided
    else:  # model parallelism innermost
        model_groups = [range(k * tp, (k + 1) * tp) for k in range(dp)]
        data_groups = [range(j, num_ranks, tp) for j in range(tp)]
    for i, members in enumerate(model_groups):
        name = groups.add(members, f"model-parallel {i}")
        for r in members:
            model_pg[r] = name
    for i, members in enumerate(data_groups):
        name = groups.add(members, f"data-parallel {i}")
        for r in members:
            data_pg[r] = name
    return groups, model_pg, data_pg


# ----- schedules -------------------------------------------------------------------------


class _Rank:
    """Emits one rank's nodes with the names, types and sizes Chakra's text converter writes."""

    def __init__(
        self, builder: RankTraceBuilder, wl: TextWorkload, ns_per_unit: int, model_pg: str, data_pg: str
    ) -> None:
        self.b, self.wl, self.k = builder, wl, ns_per_unit
        self.model_pg, self.data_pg = model_pg, data_pg

    def comp(self, phase: str, layer: TextLayer, deps: Sequence[int | None]) -> int:
        """The COMP node of ``phase`` (``fwd``/``ig``/``wg``) of ``layer``: the file's time x ``ns_per_unit`` ns; returns its id."""
        value = {"fwd": layer.fwd_time, "ig": layer.ig_time, "wg": layer.wg_time}[phase]
        return self.b.comp(f"COMP_NODE_{layer.name}_{_PHASE_NAMES[phase]}", duration_ns=value * self.k, deps=deps)

    def coll(
        self,
        phase: str,
        layer: TextLayer,
        pg: str,
        deps: Sequence[int | None],
        *,
        none_too: bool = True,
        label: str = "",
    ) -> int | None:
        """The collective of ``phase``; ``NONE`` gives an all-reduce of 0 bytes when ``none_too``
        (Chakra's converter does), else nothing."""
        comm = {"fwd": layer.fwd_comm, "ig": layer.ig_comm, "wg": layer.wg_comm}[phase]
        if comm is None:
            if not none_too:
                return None
            token, ctype, nbytes = NONE_TOKEN, CollectiveType.ALL_REDUCE, 0
        elif comm.comm_type is None:
            raise line_error(
                self.wl.path,
                layer.line,
                f"communication type {comm.token} ({phase}) has no Chakra collective type and cannot be converted",
            )
        else:
            token, ctype, nbytes = comm.token, comm.comm_type, comm.comm_bytes
        return self.b.collective(f"COMM_COLL_NODE_{layer.name}{label}_{token}", ctype, nbytes, pg_name=pg, deps=deps)


_PHASE_NAMES = {"fwd": "FWD", "ig": "BWD_IG", "wg": "BWD_WG"}


def _or(a: int | None, b: int | None) -> int | None:
    return a if a is not None else b


def _data(r: _Rank, layers: Sequence[TextLayer], wg_tail: list[int | None]) -> None:
    fwd: list[int] = []
    for i, layer in enumerate(layers):
        fwd.append(r.comp("fwd", layer, [fwd[-1] if fwd else None, wg_tail[i]]))
    prev_ig: int | None = fwd[-1]
    for i in reversed(range(len(layers))):
        w = r.comp("wg", layers[i], [prev_ig])
        wg_tail[i] = r.coll("wg", layers[i], r.data_pg, [w])
        prev_ig = r.comp("ig", layers[i], [w]) if i else None


def _model_like(
    r: _Rank, layers: Sequence[TextLayer], wg_tail: list[int | None], *, wg_comm: bool, ig_label: str = ""
) -> None:
    """MODEL (no wg collective), HYBRID_DATA_MODEL (ig collectives named ``<layer>_IG_COMM_``) and
    HYBRID_MODEL_DATA: every collective position is emitted, NONE as 0 bytes."""
    tail: int | None = None
    for i, layer in enumerate(layers):
        f = r.comp("fwd", layer, [tail, wg_tail[i]])
        tail = r.coll("fwd", layer, r.model_pg, [f])
    prev: list[int | None] = [tail]
    for i in reversed(range(len(layers))):
        ig = r.comp("ig", layers[i], prev)
        ig_comm = r.coll("ig", layers[i], r.model_pg, [ig], label=ig_label) if i else None
        w = r.comp("wg", layers[i], [ig])
        wg_tail[i] = r.coll("wg", layers[i], r.data_pg, [w]) if wg_comm else w
        prev = [w, ig_comm]


def _transformer(r: _Rank, layers: Sequence[TextLayer], wg_tail: list[int | None]) -> None:
    """HYBRID_TRANSFORMER (ASTRA-sim 1.0 only; Chakra's converter rejects it): NONE positions emit nothing."""
    tail: int | None = None
    for i, layer in enumerate(layers):
        f = r.comp("fwd", layer, [tail, wg_tail[i]])
        tail = _or(r.coll("fwd", layer, r.model_pg, [f], none_too=False), f)
    prev: list[int | None] = [tail]
    for i in reversed(range(len(layers))):
        ig = r.comp("ig", layers[i], prev)
        ig_comm = r.coll("ig", layers[i], r.model_pg, [ig], none_too=False)
        w = r.comp("wg", layers[i], [_or(ig_comm, ig)])
        wg_tail[i] = _or(r.coll("wg", layers[i], r.data_pg, [w], none_too=False), w)
        prev = [w]


def _dlrm(r: _Rank, layers: Sequence[TextLayer], wg_tail: list[int | None], bottom: int) -> None:
    fwd: list[int] = []
    emb_fwd_comm: int | None = None
    for i, layer in enumerate(layers):
        f = r.comp("fwd", layer, [fwd[-1] if fwd else None, wg_tail[i], emb_fwd_comm if i == bottom else None])
        fwd.append(f)
        if layer.fwd_comm is not None and layer.fwd_comm.comm_type is CollectiveType.ALL_TO_ALL:
            c = r.coll("fwd", layer, DEFAULT_PG, [f])
            if i == 0:
                emb_fwd_comm = c
    next_ig: int | None = None
    emb_ig_comm: int | None = None
    for i in reversed(range(len(layers))):
        deps = [fwd[-1]] if i == len(layers) - 1 else [next_ig, emb_ig_comm if i == 0 else None]
        w = r.comp("wg", layers[i], deps)
        wg_tail[i] = _or(r.coll("wg", layers[i], DEFAULT_PG, [w], none_too=False), w)
        next_ig = r.comp("ig", layers[i], [w]) if i else None
        if i == bottom + 1:
            emb_ig_comm = r.coll("ig", layers[0], DEFAULT_PG, [next_ig])


def _micro(r: _Rank, layers: Sequence[TextLayer], wg_tail: list[int | None]) -> None:
    for layer in layers:
        r.coll("wg", layer, DEFAULT_PG, [])


def _schedule(wl: TextWorkload) -> Callable[[_Rank, Sequence[TextLayer], list[int | None]], None]:
    kind = wl.parallelism
    if kind == "DATA":
        return _data
    if kind == "MODEL":
        return lambda r, ls, t: _model_like(r, ls, t, wg_comm=False)
    if kind == "HYBRID_DATA_MODEL":
        return lambda r, ls, t: _model_like(r, ls, t, wg_comm=True, ig_label="_IG_COMM_")
    if kind == "HYBRID_MODEL_DATA":
        return lambda r, ls, t: _model_like(r, ls, t, wg_comm=True)
    if kind == "HYBRID_TRANSFORMER":
        return _transformer
    if kind.startswith("HYBRID_DLRM"):
        bottom = wl.last_bottom_layer
        # parse_text_workload checks this; a TextWorkload built in code may lack it (a TypeError before)
        if bottom is None or not 0 <= bottom <= len(wl.layers) - 2:
            raise ConversionError(
                f"{kind} needs the index of its last bottom-MLP layer between 0 and {len(wl.layers) - 2}, "
                f"got {bottom!r}",
                path=wl.path,
            )
        return lambda r, ls, t: _dlrm(r, ls, t, bottom)
    return _micro


def convert_text_workload(
    workload: TextWorkload | str | os.PathLike[str],
    num_ranks: int,
    *,
    passes: int = 1,
    tp: int | None = None,
    time_unit: str = "us",
) -> TraceSet:
    """Per-rank traces of a text workload (schedules in the module docstring).

    Args:
        workload: a parsed :class:`TextWorkload` or a path to read.
        num_ranks: number of ranks (NPUs) to write.
        passes: training passes (iterations) per rank.
        tp: model-parallel group size; required for HYBRID_DATA_MODEL and
            HYBRID_MODEL_DATA, optional (must match the file) for
            HYBRID_TRANSFORMER, rejected for the others.
        time_unit: unit of the file's compute times: ``"us"`` (the default:
            Chakra's text converter stores them in ``duration_micros`` and
            ASTRA-sim 2 replays ``duration_micros x 1000`` ns) or ``"ns"``
            (ASTRA-sim 1.0's cycles).

    Returns:
        A :class:`TraceSet` whose ranks share one node structure.  Hybrid
        workloads declare their model- and data-parallel groups in a
        ``process_group:init`` node (node 0) and in the set's process groups.

    Raises:
        ConversionError: invalid file (see :func:`parse_text_workload`), an
            unconvertible communication type, or a HYBRID_DLRM workload (one
            built in code) without a last bottom-MLP layer in range.
        ConfigError: bad ``num_ranks``, ``passes``, ``tp`` or ``time_unit``.
    """
    wl = workload if isinstance(workload, TextWorkload) else read_text_workload(workload)
    if isinstance(num_ranks, bool) or not isinstance(num_ranks, int) or num_ranks < 1:
        raise ConfigError(f"number of ranks must be a positive integer, got {num_ranks!r}")
    check_rank_count(num_ranks, "the converted job")
    if passes < 1:
        raise ConfigError(f"passes must be at least 1, got {passes}")
    # each layer of a pass is at least its forward and backward compute nodes
    check_node_count(passes * len(wl.layers) * 2, f"--passes {passes:,} of {len(wl.layers)} layers")
    if time_unit not in TIME_UNITS_NS:
        raise ConfigError(f"time unit must be one of {', '.join(TIME_UNITS_NS)}, got {time_unit!r}")
    groups, model_pg, data_pg = _groups(wl, num_ranks, tp)
    schedule = _schedule(wl)
    md = {
        "producer": PRODUCER,
        "input_file": os.path.basename(wl.path),
        "parallelism": wl.parallelism,
        "time_unit": time_unit,
    }
    traces = []
    for rank in range(num_ranks):
        b = RankTraceBuilder(rank)
        if groups.has_subgroups:
            b.declare_groups(groups)
        r = _Rank(b, wl, TIME_UNITS_NS[time_unit], model_pg[rank], data_pg[rank])
        wg_tail: list[int | None] = [None] * len(wl.layers)
        for _ in range(passes):
            schedule(r, wl.layers, wg_tail)
        traces.append(b.build(md))
    return TraceSet(traces, groups.mapping() if groups.has_subgroups else None)


__all__ = [
    "COMM_TOKENS",
    "PARALLELISMS",
    "Comm",
    "TextLayer",
    "TextWorkload",
    "convert_text_workload",
    "parse_text_workload",
    "read_text_workload",
]
