"""``tracekit convert pytorch``: PyTorch Execution Trace (+ Kineto) files -> ``<prefix>.<rank>.et``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from tracekit.cli._common import CONTEXT_SETTINGS, hold_output_prefix, out_console, progress_callback
from tracekit.cli._options import emit_json, executor_options, json_option, resolve_executor

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.converters.pytorch import JobConversion
    from tracekit.converters.pytorch.kineto_convert import KinetoConversion
    from tracekit.converters.pytorch.log_groups import LogLine


def _expand(pattern: str | None, what: str) -> list[str]:
    import glob

    from tracekit.errors import ConversionError

    if pattern is None:
        return []
    paths = sorted(glob.glob(pattern))
    if not paths:
        raise ConversionError(f"no {what} file matches {pattern!r}")
    return paths


@click.command("pytorch", context_settings=CONTEXT_SETTINGS)
@click.option(
    "--et",
    "et_glob",
    default=None,
    metavar="GLOB",
    help="ET JSON files, one per rank (.json, .json.gz, .tar.gz); quote the glob. "
    "Without --et, the Kineto traces alone are converted.",
)
@click.option(
    "--kineto",
    "kineto_glob",
    default=None,
    metavar="GLOB",
    help="Kineto trace files of the same ranks (optional; gives durations and GPU kernels).",
)
@click.option(
    "-o", "--output", "prefix", required=True, metavar="PREFIX", help="Output prefix: writes PREFIX.<rank>.et."
)
@click.option(
    "--allow-unlinked",
    is_flag=True,
    help="Convert even when no ET op links to a Kineto op (durations stay 0), or when the ET and Kineto files "
    "look like different runs or models (converted with a warning).",
)
@executor_options
@json_option()
def pytorch(
    et_glob: str,
    kineto_glob: str | None,
    prefix: str,
    allow_unlinked: bool,
    executor: str,
    workers: int | None,
    address: str | None,
    as_json: bool,
) -> None:
    """Convert PyTorch Execution Traces (and their Kineto traces) into Chakra traces, one file per rank.

    Ranks come from Kineto distributedInfo or a "rankN" in the file names; ET and Kineto
    files are paired by rank.  Prints, per rank, node counts, collectives and the link report.
    With --kineto alone, the graph is built from the Kineto traces (CPU ops, launches, kernels,
    NCCL collectives from record_param_comms).

    \b
    Example:
      tracekit convert pytorch --et 'run/et_rank*.json' --kineto 'run/kineto_rank*.json' -o out/job
      tracekit convert pytorch --kineto 'run/rank*.trace.json.gz' -o out/job
    """

    hold_output_prefix(prefix)
    from tracekit.converters.pytorch import convert_job
    from tracekit.io import write_traceset

    from tracekit.errors import ConversionError

    if et_glob is None and kineto_glob is None:
        raise ConversionError("give --et GLOB (with optional --kineto GLOB) or --kineto GLOB alone")
    if et_glob is None:
        paths = _expand(kineto_glob, "Kineto")
        _kineto_only(paths, prefix, workers, resolve_executor(executor, len(paths), workers), as_json)
        return
    ets = _expand(et_glob, "ET")
    kins = _expand(kineto_glob, "Kineto")
    executor = resolve_executor(executor, len(ets), workers)
    with progress_callback("converting ranks") as update:  # no bar with -q, --json or without a terminal
        job = convert_job(
            ets,
            kins or None,
            allow_unlinked=allow_unlinked,
            executor=executor,
            max_workers=workers,
            progress=None if as_json else update,
        )
    paths = write_traceset(job.traceset, prefix)
    _print_job(job, paths, prefix, as_json)


def _print_job(job: JobConversion, paths: list[Path], prefix: str, as_json: bool) -> None:
    """Per rank: nodes by type, collectives and the link report, as JSON or a table."""
    if as_json:
        emit_json(
            {
                "prefix": prefix,
                "files": [str(p) for p in paths],
                "ranks": [
                    {
                        "rank": res.trace.rank,
                        "nodes": len(res.trace),
                        "nodes_by_type": dict(res.node_counts),
                        "collectives": dict(res.comm_counts),
                        "link": res.link.summary() if res.link is not None else None,
                    }
                    for res in sorted(job.ranks, key=lambda r: r.trace.rank)
                ],
            }
        )
        return

    from rich.table import Table

    table = Table(title=f"{len(paths)} rank(s) written to {prefix}.<rank>.et")
    for col in ("rank", "nodes", "COMP", "COMM", "collectives", "link"):
        table.add_column(col)
    for res in sorted(job.ranks, key=lambda r: r.trace.rank):
        comm = sum(v for k, v in res.node_counts.items() if k.startswith("COMM"))
        colls = ", ".join(f"{k} {v}" for k, v in sorted(res.comm_counts.items())) or "-"
        table.add_row(
            str(res.trace.rank),
            str(len(res.trace)),
            str(res.node_counts.get("COMP_NODE", 0)),
            str(comm),
            colls,
            res.link.summary() if res.link is not None else "no Kineto",
        )
    out_console().print(table)


def _kineto_one(path: str) -> tuple[KinetoConversion, list[LogLine]]:
    """One Kineto file converted, with the converter's log records of it (grouped over ranks by the caller)."""
    from tracekit.converters.pytorch.kineto_convert import convert_kineto_trace, read_kineto
    from tracekit.converters.pytorch.log_groups import collected_log, emit_grouped
    from tracekit.errors import ConversionError, malformed_input

    lines: list[LogLine] = []
    try:
        with collected_log() as lines, malformed_input("Kineto trace", path, ConversionError):
            return convert_kineto_trace(read_kineto(path)), lines
    except BaseException:
        emit_grouped([(0, path, lines)])  # what was found before the error
        raise


def _kineto_only(paths: list[str], prefix: str, workers: int | None, executor: str, as_json: bool) -> None:

    from rich.table import Table

    from tracekit.errors import ConversionError
    from tracekit.io import write_traceset
    from tracekit.parallel import parallel_map
    from tracekit.sets.traceset import TraceSet

    from tracekit.converters.pytorch.log_groups import emit_grouped

    with progress_callback("converting ranks") as update:  # as with --et: no bar with -q, --json or off a terminal
        if update is not None and not as_json:
            update(0, len(paths))
        converted = parallel_map(
            _kineto_one, paths, executor=executor, max_workers=workers, progress=None if as_json else update
        )
    emit_grouped(
        [
            (i if res.trace.rank is None else res.trace.rank, path, lines)
            for i, (path, (res, lines)) in enumerate(zip(paths, converted))
        ]
    )
    results = [res for res, _ in converted]
    traces = {}
    for path, res in zip(paths, results):
        if res.trace.rank in traces:
            raise ConversionError(f"rank {res.trace.rank} appears twice", path=path)
        traces[res.trace.rank] = res.trace
    from tracekit.converters.pytorch import log as pytorch_log, world_size_warning

    warning = world_size_warning(traces)
    if warning:
        pytorch_log.warning(warning)
    written = write_traceset(TraceSet(traces), prefix)
    if as_json:
        emit_json(
            {
                "prefix": prefix,
                "files": [str(p) for p in written],
                "ranks": [
                    {
                        "rank": r.stats.rank,
                        "nodes": len(r.trace),
                        "host_ops": r.stats.host_ops,
                        "kernels_attached": r.stats.kernels_attached,
                        "device_ops": r.stats.device_ops,
                        "collectives": dict(r.stats.collectives),
                    }
                    for r in sorted(results, key=lambda r: r.trace.rank)
                ],
            }
        )
        return
    table = Table(title=f"{len(written)} rank(s) written to {prefix}.<rank>.et (Kineto only)")
    for col in ("rank", "nodes", "host ops", "kernels attached", "collectives"):
        table.add_column(col)
    for res in sorted(results, key=lambda r: r.trace.rank):
        st = res.stats
        colls = ", ".join(f"{k} {v}" for k, v in sorted(st.collectives.items())) or "-"
        table.add_row(
            str(st.rank), str(len(res.trace)), str(st.host_ops), f"{st.kernels_attached}/{st.device_ops}", colls
        )
    out_console().print(table)


COMMANDS = [pytorch]
