"""A folded replay's collective table as its summary only (``ReplayOptions.summary``; issue 34 item 2).

The full expansion (:func:`.fold_expand.expand_result`) builds one
:class:`~tracekit.replayer.results.result.CollectiveRow` per unfolded instance (3.1 M objects, ~45 CPU s and ~3 GB
for GPT-3 175B on 2,048 ranks) and a schedule per rank, and the compact result then keeps only their summary.
:func:`summary_rows` computes that summary straight from the fold plan: the rows
:meth:`~tracekit.replayer.results.result.ReplayResult.collective_summary` returns for the full result, equal to
the bit (same keys in first-seen order, the same sums in the same order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.replayer.results.result import bus_factor, nccl_tests_size

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.engine import Schedule
    from tracekit.replayer.simulation.folding import FoldPlan
    from tracekit.replayer.simulation.program import ReplayProgram

__all__ = ["summary_rows"]


class _Row:
    """One summary row being summed: count, total time (ns) and the bandwidths of instances that have one."""

    __slots__ = ("count", "total", "alg", "bus", "with_bw")

    def __init__(self) -> None:
        self.count = self.total = self.with_bw = 0
        self.alg: float = 0
        self.bus: float = 0


def summary_rows(program: "ReplayProgram", sched: "Schedule", plan: "FoldPlan") -> tuple[dict[str, Any], ...]:
    """The unfolded job's collective summary rows (module doc), from the rounded folded ``sched``.

    Each row: ``kind``, ``comm_bytes``, ``pg_name``, ``group_size``, ``algorithm``, ``count``, ``total_time_ns``,
    ``mean_time_ns``, ``algbw_gbps`` and ``busbw_gbps`` (means over instances with a positive time, else None);
    an instance's time is its folded image's transfer end minus start in ns (0 for one timed per member).
    """
    from tracekit.replayer.simulation.fold_expand import _algorithms, _kind_name

    xs = np.nan_to_num(sched.xfer_start_ns, nan=0.0).astype(np.int64).tolist()
    xe = np.nan_to_num(sched.xfer_end_ns, nan=0.0).astype(np.int64).tolist()
    algorithms = _algorithms(program)
    timing: dict[tuple, tuple] = {}  # (folded instance, kind, type, bytes, members) -> row key, time, bandwidths
    rows: dict[tuple, _Row] = {}
    for kind, ctype, nbytes, pg, p, fid in plan.unfolded.summary_columns():
        tk = timing.get((fid, kind, ctype, nbytes, p))
        if tk is None:
            name = _kind_name(kind, ctype)
            t = xe[fid] - xs[fid]
            alg_bw = nccl_tests_size(name, nbytes, p) / t if t > 0 else None
            bus_bw = alg_bw * bus_factor(name, p) if alg_bw is not None else None
            tk = timing[(fid, kind, ctype, nbytes, p)] = ((name, nbytes, p, algorithms[fid]), t, alg_bw, bus_bw)
        (name, _, _, algorithm), t, alg_bw, bus_bw = tk
        key = (name, nbytes, pg, p, algorithm)
        row = rows.get(key)
        if row is None:
            row = rows[key] = _Row()
        row.count += 1
        row.total += t
        if alg_bw is not None:
            row.with_bw += 1
            row.alg += alg_bw
            row.bus += bus_bw
    return tuple(
        {
            "kind": name,
            "comm_bytes": nbytes,
            "pg_name": pg,
            "group_size": p,
            "algorithm": algorithm,
            "count": row.count,
            "total_time_ns": row.total,
            "mean_time_ns": row.total / row.count,
            "algbw_gbps": row.alg / row.with_bw if row.with_bw else None,
            "busbw_gbps": row.bus / row.with_bw if row.with_bw else None,
        }
        for (name, nbytes, pg, p, algorithm), row in rows.items()
    )
