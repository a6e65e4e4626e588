"""PyTorch converter: Execution Trace (+ Kineto) and Kineto-only traces -> Chakra trace sets.

Public API:

* :func:`convert_rank` -- one rank: ET path, optional Kineto path -> :class:`RankConversion`
  (the trace plus node/collective counts and the link report);
* :func:`convert_job` -- many ranks in parallel -> :class:`JobConversion`;
* :func:`convert_pytorch` -- the same, returning just the :class:`~tracekit.sets.traceset.TraceSet`.

Ranks come from Kineto ``distributedInfo.rank``, else from a ``rank<N>`` in
the ET file name, else from the file's position in the sorted list.  ET and
Kineto files are paired by rank.  See :mod:`.et_reader`, :mod:`.linker`,
:mod:`.collectives` and :mod:`.et_convert` for the rules.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Callable, Sequence

from tracekit.converters.pytorch.kineto_reader import paused_gc
from tracekit.errors import ConversionError, TracekitError, malformed_input

_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
log = logging.getLogger(__name__)


def world_size_warning(traces) -> str | None:
    """A message when the world size the traces declare (Kineto ``distributedInfo.world_size``, kept in
    metadata attribute ``world_size``) disagrees with the rank files present, else None.

    Args:
        traces: mapping rank -> :class:`~tracekit.model.ExecutionTrace`.

    Returns:
        One line naming the declared size(s), the number of rank files and up to eight of their ranks; None when no
        trace declares a world size or every declared size equals ``len(traces)``.  Raises nothing.
    """
    declared = {}
    for rank, trace in traces.items():
        for a in trace.metadata.attrs if trace.metadata is not None else ():
            if a.name == "world_size" and isinstance(a.value, int):
                declared[rank] = a.value
    sizes = sorted(set(declared.values()))
    if not sizes or sizes == [len(traces)]:
        return None
    shown = ", ".join(str(r) for r in sorted(traces)[:8]) + (" ..." if len(traces) > 8 else "")
    return (
        f"the traces declare world size {' / '.join(str(s) for s in sizes)} (Kineto distributedInfo) but "
        f"{len(traces)} rank file(s) were converted (ranks {shown}): a partial job; its replay needs every rank "
        f"(tracekit check-replay replays each present rank alone)"
    )


@dataclass(frozen=True)
class RankJob:
    """What to convert for one rank (picklable, for process pools).

    Attributes:
        et_path: the rank's PyTorch Execution Trace (``.json``, ``.json.gz`` or ``.tar.gz``).
        kineto_path: its Kineto (Chrome trace format) file, or None to convert the ET alone.
        rank: the rank to record, or None to take it from Kineto ``distributedInfo.rank``, else the file name.
        allow_unlinked: convert even when no ET op links to a Kineto event (see :func:`.linker.link`).
    """

    et_path: str
    kineto_path: str | None
    rank: int | None
    allow_unlinked: bool = False


def rank_in_name(path: str | os.PathLike[str]) -> int | None:
    """The ``N`` of ``rankN`` / ``rank_N`` in a file name, or None."""
    m = _RANK_IN_NAME.search(os.path.basename(os.fspath(path)))
    return int(m.group(1)) if m else None


def convert_rank(
    et_path: str | os.PathLike[str],
    kineto_path: str | os.PathLike[str] | None = None,
    *,
    rank: int | None = None,
    allow_unlinked: bool = False,
):
    """Convert one rank's ET, linking its Kineto trace when given.

    Args:
        et_path: the rank's PyTorch Execution Trace file.
        kineto_path: its Kineto trace (Chrome trace format JSON), or None.
        rank: the rank to record; None takes Kineto ``distributedInfo.rank``, else the ``rankN`` of the ET file
            name, else leaves it unset.
        allow_unlinked: accept a Kineto file none of whose events links to an ET op, or from another run.

    Returns:
        :class:`.et_convert.RankConversion`; its trace's ``path`` is ``et_path``.

    Raises:
        TraceFormatError: unreadable or invalid JSON.
        ConversionError: unsupported schema, bad ET structure, unknown
            collective, zero link rate or ET and Kineto from different runs
            (both unless ``allow_unlinked``), a document of unexpected shape
            (``malformed PyTorch ET/Kineto input``) and the other conditions
            documented in the submodules; every TracekitError from the
            conversion step carries ``path`` and ``rank``.
        OSError: the ET file cannot be opened (an unreadable Kineto file is a TraceFormatError).
    """
    from tracekit.converters.pytorch.et_convert import convert_et
    from tracekit.converters.pytorch.et_reader import read_et
    from tracekit.converters.pytorch.kineto_reader import read_kineto
    from tracekit.converters.pytorch.linker import link

    with paused_gc(), malformed_input("PyTorch ET/Kineto input", et_path, ConversionError):
        # paused_gc, measured: the param-resnet pair converts in 1.6 s instead of 4.2 s
        et = read_et(et_path)
        kineto = linkage = None
        if kineto_path is not None:
            kineto = read_kineto(kineto_path)
            linkage = link(et, kineto, allow_unlinked=allow_unlinked)
            from tracekit.converters.pytorch.run_match import check_same_run

            check_same_run(
                et, kineto, linkage.report.host_linked, linkage.report.host_ops, allow_unlinked=allow_unlinked
            )
        if rank is None:
            rank = kineto.rank if kineto is not None and kineto.rank is not None else rank_in_name(et_path)
        try:
            result = convert_et(et, rank=rank, kineto=kineto, linkage=linkage)
        except TracekitError as exc:
            raise exc.with_context(path=os.fspath(et_path), rank=rank) from None
    result.trace = result.trace.with_label(path=os.fspath(et_path))
    return result


def _convert_job(job: RankJob):
    """:func:`convert_rank` of one job with its log records kept in the result (grouped by :func:`convert_job`)."""
    from tracekit.converters.pytorch.log_groups import collected_log, emit_grouped

    lines: list = []
    try:
        with collected_log() as lines:
            result = convert_rank(job.et_path, job.kineto_path, rank=job.rank, allow_unlinked=job.allow_unlinked)
    except BaseException:
        emit_grouped([(job.rank or 0, os.fspath(job.et_path), lines)])  # what was found before the error
        raise
    result.log = lines
    return result


def plan_jobs(
    et_paths: Sequence[str | os.PathLike[str]],
    kineto_paths: Sequence[str | os.PathLike[str]] | None = None,
    *,
    allow_unlinked: bool = False,
) -> list[RankJob]:
    """Pair ET and Kineto files by rank.

    Ranks are the ``rankN`` of the file names when every file of a kind has one, else the positions in the sorted
    list; a lone ET file without ``rankN`` gets rank None (decided at conversion).

    Args:
        et_paths: one ET file per rank, in any order.
        kineto_paths: one Kineto file per rank, or None/empty for ET-only conversion.
        allow_unlinked: copied into every job.

    Returns:
        One :class:`RankJob` per rank, in rank order.

    Raises:
        ConversionError: no ET file, a rank given twice, or an ET without a
            Kineto file of the same rank (or the reverse) when Kineto files are given.
    """
    ets = sorted(os.fspath(p) for p in et_paths)
    if not ets:
        raise ConversionError("no ET files given")
    kins = sorted(os.fspath(p) for p in kineto_paths or ())

    def ranked(paths: list[str]) -> dict[int, str]:
        """Rank -> path: the names' ``rankN`` when all have one (ConversionError on a repeat), else sorted positions."""
        named = [rank_in_name(p) for p in paths]
        known = [r for r in named if r is not None]
        if len(known) == len(named):
            out: dict[int, str] = {}
            for r, p in zip(known, paths):
                if r in out:
                    raise ConversionError(f"rank {r} given twice: {out[r]} and {p}")
                out[r] = p
            return out
        return dict(enumerate(paths))

    et_by_rank = ranked(ets)
    kin_by_rank = ranked(kins) if kins else {}
    if kins and set(kin_by_rank) != set(et_by_rank):
        only_et = sorted(set(et_by_rank) - set(kin_by_rank))
        only_kin = sorted(set(kin_by_rank) - set(et_by_rank))
        lone = (
            f"rank {only_et[0]} has an ET ({et_by_rank[only_et[0]]}) but no Kineto file"
            if only_et
            else f"rank {only_kin[0]} has a Kineto file ({kin_by_rank[only_kin[0]]}) but no ET"
        )
        raise ConversionError(
            f"ET ranks {sorted(et_by_rank)} and Kineto ranks {sorted(kin_by_rank)} differ: {lone}; give one ET and "
            f"one Kineto file per rank (or --et alone)"
        )
    return [
        RankJob(
            et_by_rank[r],
            kin_by_rank.get(r),
            r if len(et_by_rank) > 1 or rank_in_name(et_by_rank[r]) is not None else None,
            allow_unlinked,
        )
        for r in sorted(et_by_rank)
    ]


@dataclass
class JobConversion:
    """A converted job: the trace set and each rank's :class:`.et_convert.RankConversion`."""

    traceset: object
    ranks: list


def convert_job(
    et_paths: Sequence[str | os.PathLike[str]],
    kineto_paths: Sequence[str | os.PathLike[str]] | None = None,
    *,
    allow_unlinked: bool = False,
    executor: str = "process",
    max_workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> JobConversion:
    """Convert every rank (in parallel with :func:`tracekit.parallel.parallel_map`).

    Args:
        et_paths, kineto_paths, allow_unlinked: as for :func:`plan_jobs`.
        executor: ``"process"``, ``"serial"`` or ``"ray"`` (one job always runs serially).
        max_workers: pool size for ``"process"`` (default: CPU count, at most 8).
        progress: called as ``progress(done, total)`` after each rank.

    Returns:
        :class:`JobConversion` with one trace per rank (a rank left unset takes its job's position); logs
        :func:`world_size_warning` when the declared world size disagrees with the files.

    Raises:
        ConversionError: the :func:`plan_jobs` errors, or two files that convert to the same rank.
        ConfigError: an unknown executor, or Ray requested but not installed (with more than one rank).
        TracekitError: the first rank's error (naming file and rank; see :func:`convert_rank`).
        OSError: an ET file cannot be opened.
    """
    from tracekit.parallel import parallel_map
    from tracekit.sets.traceset import TraceSet

    jobs = plan_jobs(et_paths, kineto_paths, allow_unlinked=allow_unlinked)
    if len(jobs) == 1:
        executor = "serial"
    results = parallel_map(_convert_job, jobs, executor=executor, max_workers=max_workers, progress=progress)
    traces = {}
    for i, (job, res) in enumerate(zip(jobs, results)):
        rank = res.trace.rank if res.trace.rank is not None else i
        if rank in traces:
            raise ConversionError(f"rank {rank} appears twice (from {job.et_path})", path=job.et_path)
        res.trace = res.trace.with_label(rank=rank)
        traces[rank] = res.trace
    from tracekit.converters.pytorch.log_groups import emit_grouped

    emit_grouped([(res.trace.rank, os.fspath(job.et_path), res.log) for job, res in zip(jobs, results)])
    warning = world_size_warning(traces)
    if warning:
        log.warning(warning)
    return JobConversion(traceset=TraceSet(traces), ranks=list(results))


def convert_pytorch(
    et_paths: Sequence[str | os.PathLike[str]],
    kineto_paths: Sequence[str | os.PathLike[str]] | None = None,
    *,
    allow_unlinked: bool = False,
    executor: str = "process",
    max_workers: int | None = None,
):
    """Convert a job's ET (+ Kineto) files into a :class:`~tracekit.sets.traceset.TraceSet`.

    See :func:`convert_job` for parameters and errors.
    """
    return convert_job(
        et_paths, kineto_paths, allow_unlinked=allow_unlinked, executor=executor, max_workers=max_workers
    ).traceset


__all__ = [
    "RankJob",
    "JobConversion",
    "convert_job",
    "convert_pytorch",
    "convert_rank",
    "plan_jobs",
    "rank_in_name",
    "world_size_warning",
]
