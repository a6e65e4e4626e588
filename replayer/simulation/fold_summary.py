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

from tracekit.model import CollectiveType
from tracekit.replayer.results.result import bus_factor, nccl_tests_size

if TYPE_CHECKING:  # pragma: no cover
    import numpy.typing as npt

    from tracekit.replayer.simulation.engine import Schedule
    from tracekit.replayer.simulation.folding import FoldPlan
    from tracekit.replayer.simulation.program import ReplayProgram

__all__ = ["summary_rows"]


def summary_rows(program: "ReplayProgram", sched: "Schedule", plan: "FoldPlan") -> tuple[dict[str, Any], ...]:
    """The unfolded job's collective summary rows (module doc), from the rounded folded ``sched``.

    Each row: ``kind``, ``comm_bytes``, ``pg_name``, ``group_size``, ``algorithm``, ``count``, ``total_time_ns``,
    ``mean_time_ns``, ``algbw_gbps`` and ``busbw_gbps`` (means over instances with a positive time, else None);
    an instance's time is its folded image's transfer end minus start in ns (0 for one timed per member).
    Kind, type, bytes and algorithm are one folded instance's (the fold proof keys on them); sums run in instance
    order (``np.add.at`` adds unbuffered, index by index), as the per-row sums of ``collective_summary`` do.
    """
    table = plan.unfolded
    n = len(table)
    if n == 0:
        return ()
    fid = np.frombuffer(table.fid, dtype=np.int64)
    pg = np.frombuffer(table.pg, dtype=np.int32).astype(np.int64)
    set_sizes = np.asarray([len(m) for m in table.member_sets], dtype=np.int64)
    size_values, size_code = np.unique(set_sizes, return_inverse=True)
    size_code = size_code.reshape(-1)[np.frombuffer(table.members, dtype=np.int32)]
    fid_key, fid_rows = _fid_keys(program, table, fid)
    code = (fid_key[fid] * len(table.pg_names) + pg) * len(size_values) + size_code
    first, row_of = _first_seen(code, len(fid_rows) * len(table.pg_names) * len(size_values))
    xs = np.nan_to_num(sched.xfer_start_ns, nan=0.0).astype(np.int64)
    xe = np.nan_to_num(sched.xfer_end_ns, nan=0.0).astype(np.int64)
    t = (xe - xs)[fid]
    rows = len(first)
    out = []
    nccl = np.empty(rows)
    factor = np.empty(rows)
    for r, i in enumerate(first.tolist()):
        name, nbytes, algorithm = fid_rows[int(fid_key[fid[i]])]
        p = int(size_values[size_code[i]])
        nccl[r], factor[r] = nccl_tests_size(name, nbytes, p), bus_factor(name, p)
        out.append({"kind": name, "comm_bytes": nbytes, "pg_name": table.pg_names[int(pg[i])], "group_size": p,
                    "algorithm": algorithm})  # fmt: skip
    positive = t > 0
    row_bw = row_of[positive]
    algbw = nccl[row_bw] / t[positive]
    busbw = algbw * factor[row_bw]
    count = np.bincount(row_of, minlength=rows)
    with_bw = np.bincount(row_bw, minlength=rows)
    total = np.zeros(rows, dtype=np.int64)
    alg_sum = np.zeros(rows)
    bus_sum = np.zeros(rows)
    np.add.at(total, row_of, t)
    np.add.at(alg_sum, row_bw, algbw)
    np.add.at(bus_sum, row_bw, busbw)
    for r, row in enumerate(out):
        c, tot, w = int(count[r]), int(total[r]), int(with_bw[r])
        row.update(count=c, total_time_ns=tot, mean_time_ns=tot / c)
        row.update(algbw_gbps=float(alg_sum[r]) / w if w else None, busbw_gbps=float(bus_sum[r]) / w if w else None)
    return tuple(out)


def _fid_keys(
    program: "ReplayProgram", table: Any, fid: "npt.NDArray[np.int64]"
) -> "tuple[npt.NDArray[np.int64], list[tuple[str, int, str]]]":
    """Per folded instance a code of its ``(kind name, comm bytes, algorithm)``, and each code's triple."""

    algorithms = instance_algorithms(program)
    first = np.full(len(algorithms), len(fid), dtype=np.int64)
    np.minimum.at(first, fid, np.arange(len(fid), dtype=np.int64))
    keys: dict[tuple[str, int, str], int] = {}
    codes = np.zeros(len(algorithms), dtype=np.int64)
    for f, i in enumerate(first.tolist()):
        if i < len(fid):  # a folded instance some unfolded one maps onto (all are)
            kind, ctype, nbytes = table.kind[i], table.ctype[i], table.nbytes[i]
            name = kind_name("p2p" if kind == 1 else "collective", None if kind == 1 else ctype)
            codes[f] = keys.setdefault((name, nbytes, algorithms[f]), len(keys))
    return codes, list(keys)


def _first_seen(code: "npt.NDArray[np.int64]", space: int) -> "tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]":
    """The distinct values of ``code`` (in ``0..space-1``) in order of first occurrence: ``(first index of each,
    each element's distinct number)``."""
    n = len(code)
    if space <= 4 * n + 1_000_000:  # a table over the code space: no sort
        first_at = np.full(space, n, dtype=np.int64)
        np.minimum.at(first_at, code, np.arange(n, dtype=np.int64))
        present = np.flatnonzero(first_at < n)
        order = np.argsort(first_at[present], kind="stable")
        number = np.empty(space, dtype=np.int64)
        number[present[order]] = np.arange(len(present), dtype=np.int64)
        return first_at[present[order]], number[code]
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    number = np.empty(len(first), dtype=np.int64)
    number[order] = np.arange(len(first), dtype=np.int64)
    return first[order], number[inverse.reshape(-1)]


def instance_algorithms(program: "ReplayProgram") -> list[str]:
    """Each folded instance's cost algorithm (its members all exist, so compile_program costed it)."""
    out = []
    for inst in program.instances:
        assert inst.cost is not None
        out.append(inst.cost.algorithm)
    return out


def kind_name(kind: str, ctype: int | None) -> str:
    """The collective table's ``kind`` of an instance: ``SEND_RECV`` or the collective type's name."""
    if kind == "p2p":
        return "SEND_RECV"
    assert ctype is not None  # a collective's (rendezvous: a missing one reads as ALL_REDUCE)
    return CollectiveType(ctype).name
