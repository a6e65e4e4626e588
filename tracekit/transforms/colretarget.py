"""Retarget on the encoded records of a rank (issue 17): :class:`~tracekit.transforms.scale.Retarget` by column.

The per-node rule of :meth:`Retarget.project_trace` decided on
:class:`~tracekit.model.graph.NodeColumns`: the device ratio of
:func:`tracekit.costs.projection.projected_duration` depends on a node's FLOPs, bytes,
op class and dtype only (``duration x (t_target / t_source)``), so it is computed
once per distinct tuple (by calling that function with a 1 ns duration, which
returns the ratio itself) and multiplied in, the same float operation the node
path does.  The report sums each method's durations in node order (``cumsum``,
the node path's left-to-right additions) and lists methods in order of first
appearance, so its JSON is the node path's byte for byte
(``tests/transforms/test_columnar_equal.py``).  New durations are re-encoded in
place (:func:`tracekit.transforms.colscale.set_durations`): no node is decoded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracekit.model.attrs import IS_CPU_OP, NUM_OPS, TENSOR_SIZE
from tracekit.errors import ValidationError
from tracekit.model import ExecutionTrace


def _str_column(cols: Any, name: str, rows: np.ndarray) -> list[str | None]:
    """``name`` of the nodes ``rows`` when a non-empty string, else None (``projection._str_attr``)."""
    present, values = cols.attr(name)
    if not present.any():
        return [None] * len(rows)
    return [v if isinstance(v, str) and v else None for v in (values[i] for i in rows.tolist())]


def _ratios(
    rows: np.ndarray,
    ops: np.ndarray,
    nbytes: np.ndarray,
    op_class: list,
    dtype: list,
    src: Any,
    dst: Any,
    tf32: frozenset[str],
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Per row: method, ratio (nan: keep the duration), dtype fell back, from one call per distinct tuple."""
    from tracekit.costs.projection import projected_duration

    cache: dict[tuple, tuple[str, float, bool]] = {}
    methods, ratio, fell = [], np.empty(len(rows)), np.zeros(len(rows), dtype=bool)
    for k, key in enumerate(zip(ops[rows].tolist(), nbytes[rows].tolist(), op_class, dtype)):
        hit = cache.get(key)
        if hit is None:
            value, method, fb = projected_duration(1.0, key[0], key[1], key[2], key[3], src, dst, tf32)
            hit = cache[key] = (method, value if method == "projected" else float("nan"), fb)
        methods.append(hit[0])
        ratio[k], fell[k] = hit[1], hit[2]
    return methods, ratio, fell


def retarget_encoded(trace: ExecutionTrace, rt: Any, host_compute: bool, fallback: float | None, report: Any) -> Any:
    """``rt`` (a :class:`~tracekit.transforms.scale.Retarget`) on an encoded trace, counting into ``report``.

    Returns:
        The new trace, or None when an attribute the rule reads is not a number/bool (the caller
        decodes nodes then, and raises what the node path raises).

    Raises:
        TransformError: a projected duration out of range (names the node).
    """
    from tracekit.costs.projection import tf32_policy
    from tracekit.transforms.colscale import carry_columns, patched_columns, set_durations, type_mask
    from tracekit.transforms.nodescale import _TIMED

    from tracekit.wire.records import Edit, Records, rewrite

    cols = trace.columns()
    try:
        cpu_present, cpu_value = IS_CPU_OP.column(cols)
        ops = NUM_OPS.column(cols)[1]
        nbytes = TENSOR_SIZE.column(cols)[1]
    except ValidationError:
        return None
    dur = cols.duration_ns
    timed = type_mask(cols.types, _TIMED)
    moves = np.where(cpu_present & cpu_value, host_compute, rt.cpu is not True)
    unknown = timed & moves & (dur > 0) & ~((ops > 0) | (nbytes > 0)) if fallback is not None else timed & False
    method = np.full(len(dur), "", dtype=object)
    new = dur.astype(np.float64)
    method[unknown] = "unknown_" + rt.unknown
    new[unknown] = dur[unknown] * fallback if fallback is not None else 0.0
    method[timed & ~moves] = "kept_host"
    proj = np.flatnonzero(timed & moves & ~unknown)
    untimed = dur[proj] <= 0
    method[proj[untimed]] = "no_duration"
    new[proj[untimed]] = 0.0
    rows = proj[~untimed]
    names, ratio, fell = _ratios(
        rows,
        ops,
        nbytes,
        _str_column(cols, "op_class", rows),
        _str_column(cols, "compute_dtype", rows),
        rt.source,
        rt.target,
        tf32_policy(trace, rt.tf32),
    )
    method[rows] = np.asarray(names, dtype=object)
    scaled = ~np.isnan(ratio)
    new[rows[scaled]] = dur[rows[scaled]].astype(np.float64) * ratio[scaled]
    report.dtype_fallbacks += int(fell.sum())
    _count(report, method, dur, new)
    moved = np.flatnonzero(timed & moves)
    rounded = np.round(new[moved])
    change = rounded != dur[moved]
    edit = Edit()
    set_durations(edit, moved[change], rounded[change].astype(np.int64), cols.ids)
    if edit.empty():
        return trace
    out = rewrite(Records.of(trace), edit, trace.metadata)
    new_dur = dur.copy()
    new_dur[moved[change]] = rounded[change].astype(np.int64)
    carry_columns(out, patched_columns(cols, new_dur, {}))
    return out


def _count(report: Any, method: np.ndarray, dur: np.ndarray, new: np.ndarray) -> None:
    """``report.add`` for every counted node, in node order (methods by first appearance, sums left to right)."""
    counted = np.flatnonzero(method != "")
    if not len(counted):
        return
    labels = method[counted].astype(str)
    distinct, first = np.unique(labels, return_index=True)
    for name in distinct[np.argsort(first)].tolist():
        sel = counted[labels == name]
        report.nodes[name] = report.nodes.get(name, 0) + len(sel)
        measured = np.cumsum(dur[sel].astype(np.float64))[-1]
        projected = np.cumsum(new[sel])[-1]
        report.measured_ns[name] = report.measured_ns.get(name, 0.0) + float(measured)
        report.projected_ns[name] = report.projected_ns.get(name, 0.0) + float(projected)
