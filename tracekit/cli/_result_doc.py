"""The JSON result ``tracekit replay`` writes (``-o``) or prints (``--json``): compact for a folded job
(:mod:`tracekit.replayer.results.compact`), every rank with ``--per-rank`` / ``--with-schedule``."""

from __future__ import annotations

from typing import Any


def _compact(result: Any, with_schedule: bool, per_rank: bool) -> bool:
    """Whether the JSON result takes the compact form (rank classes, collective table: :mod:`.compact`): a folded
    job's result, unless ``--per-rank`` or ``--with-schedule`` asks for every rank."""
    fold = result.folding
    folded = fold is not None and fold.reason is None and fold.classes < fold.ranks
    return folded and not (per_rank or with_schedule)


def _result_doc(result: Any, with_schedule: bool, plan: Any, report: Any, per_rank: bool = False) -> dict[str, Any]:
    """The result dict (compact for a folded job, see :func:`_compact`) plus ``compute_plan`` (method, devices,
    reason) and, when projected, ``compute_projection`` (nodes and ns per method): readers ignore the extra keys."""
    from tracekit.replayer.results.compact import compact_dict

    if _compact(result, with_schedule, per_rank):
        d = compact_dict(result)
    else:
        d = result.to_dict(include_schedule=with_schedule)
    d["compute_plan"] = {"method": plan.method, "source": plan.source, "target": plan.target, "reason": plan.reason}
    if report is not None:
        d["compute_projection"] = report.to_dict()
    return d


def _write_result_json(result: Any, path: str, with_schedule: bool, plan: Any, report: Any, per_rank: bool) -> None:
    """:func:`_result_doc` written atomically to ``path``."""
    import orjson

    from tracekit.io import atomic_output

    d = _result_doc(result, with_schedule, plan, report, per_rank)
    with atomic_output(path, "wb") as fh:
        fh.write(orjson.dumps(d, option=orjson.OPT_INDENT_2))
