"""Transforms: pure functions from trace sets to trace sets, composable into pipelines.

Each transform is a frozen dataclass with ``apply(traceset) -> TraceSet`` and
``describe() -> dict`` (recorded as provenance by :class:`Pipeline`).

=========================  ==========================================================
module                     transforms
=========================  ==========================================================
:mod:`.scale`              :class:`ScaleCompute`, :class:`Retarget`, :class:`ScaleComm`
:mod:`.rescale`            :class:`Rescale` (data-parallel degree, weak/strong)
:mod:`.reparallel`         :class:`ChangeTP`, :class:`ChangePP` (layer-structured traces)
:mod:`.select`             :class:`KeepIteration`, :class:`DropCpuOps`, :class:`KeepRanks`,
                           :class:`RemoveNodes`
:mod:`.compact`            :class:`Compact`
:mod:`.pipeline`           :class:`Pipeline`, :func:`load_pipeline` (TOML)
=========================  ==========================================================

Traces that hold encoded records (read from files, or written by an earlier
columnar step) are transformed on columns without ``Node`` objects (issue 17):
:mod:`.colscale` (ScaleCompute; ScaleComm and Retarget decode only the nodes
they may change), :mod:`.colcompact` (Compact), :mod:`.colselect` (DropCpuOps,
RemoveNodes), all written through :mod:`._records` (numpy splicing of the
records).  Traces built in memory take the per-node path; both give the same
traces.  :mod:`.classrescale` runs Rescale (and class-wise steps) on a
rank-class set without per-rank traces.

This package imports neither ``tracekit.converters`` nor ``tracekit.replayer``.
"""

from tracekit.transforms.base import PROVENANCE_ATTR, Transform, provenance_of, stamp_provenance
from tracekit.transforms.compact import Compact, CompactStats, compact_trace
from tracekit.transforms.pipeline import KINDS, Pipeline, PipelineFile, load_pipeline, transform_from_table
from tracekit.transforms.reparallel import ChangePP, ChangeTP, reparallelize
from tracekit.transforms.rescale import Rescale
from tracekit.transforms.scale import Device, Retarget, ScaleComm, ScaleCompute
from tracekit.transforms.select import DropCpuOps, KeepIteration, KeepRanks, RemoveNodes, parse_rank_list

__all__ = [
    "KINDS",
    "PROVENANCE_ATTR",
    "ChangePP",
    "ChangeTP",
    "Compact",
    "CompactStats",
    "Device",
    "DropCpuOps",
    "KeepIteration",
    "KeepRanks",
    "Pipeline",
    "PipelineFile",
    "RemoveNodes",
    "Rescale",
    "Retarget",
    "ScaleComm",
    "ScaleCompute",
    "Transform",
    "compact_trace",
    "load_pipeline",
    "parse_rank_list",
    "provenance_of",
    "reparallelize",
    "stamp_provenance",
    "transform_from_table",
]
