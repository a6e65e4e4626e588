"""Core commands: ``info``, ``validate``, ``dump``, ``load``."""

from __future__ import annotations

import sys
from typing import Any

import click

from tracekit.cli._common import (
    CONTEXT_SETTINGS,
    EXIT_FINDINGS,
    echo_literal,
    out_console,
    progress,
    progress_callback,
)
from tracekit.cli._options import (
    MAX_TOP,
    IntRange,
    comm_groups_option,
    load_comm_groups,
    emit_json,
    check_address,
    executor_options,
    json_option,
    resolve_executor,
    traces_argument,
)


def _pairs(spec, rank: int | None) -> list:
    from tracekit.errors import TraceFormatError
    from tracekit.io import trace_paths

    pairs = trace_paths(spec)
    if rank is not None:
        pairs = [(r, p) for r, p in pairs if r == rank]
        if not pairs:
            raise TraceFormatError(f"no file for rank {rank}", path=spec if isinstance(spec, str) else spec[0])
    return pairs


@click.command(context_settings=CONTEXT_SETTINGS)
@traces_argument()
@click.option("--rank", type=int, default=None, help="Only this rank.")
@json_option()
@click.option(
    "--top",
    type=IntRange(1, MAX_TOP),
    default=16,
    show_default=True,
    help="Rows per table (ranks with equal summaries share a row).",
)
@comm_groups_option()
def info(traces, rank: int | None, as_json: bool, top: int, comm_groups: str | None) -> None:
    """Summarise traces: metadata, nodes by type and collective, compute time, bytes by collective.

    TRACES is one or more of: a prefix (dir/job), a quoted glob, a directory, or trace files.

    \b
    Example:
      tracekit info sample_traces/chakra/all_reduce.0.et
      tracekit info out/job --json
      tracekit info out/job.*.et
    """
    from tracekit.interop.astra import comm_groups_beside
    from tracekit.sets.classset import find_class_set
    from tracekit.checks.classset import summarize_class_set
    from tracekit.checks.summary import summarize_files

    groups_file = None
    groups, groups_path = load_comm_groups(traces, comm_groups)
    classes = find_class_set(traces)
    if classes is not None:  # stored as rank classes: one summary per class
        summary = summarize_class_set(classes)
        if rank is not None:
            import dataclasses

            classes.locate(rank)  # TracekitError naming the manifest when the rank is not in the job
            summary = dataclasses.replace(summary, ranks=1, per_rank=[summary.per_rank[rank]])
    else:
        pairs = _pairs(traces, rank)
        with progress_callback("reading ranks") as callback:
            summary = summarize_files(
                pairs,
                executor="process" if len(pairs) >= 8 else "serial",
                progress=callback,
                comm_groups=groups,
                comm_groups_path=groups_path,
            )
        groups_file = comm_groups_beside(str(pairs[0][1])) if pairs else None
        if comm_groups is not None:  # the file given is the one the summary used, not the one beside the set
            groups_file = (comm_groups, len(groups))
    if as_json:
        doc = summary.to_dict()
        doc["comm_groups_file"] = groups_file[0] if groups_file else None
        emit_json(doc)
        return
    from tracekit.cli._render import render_summary

    render_summary(out_console(), summary, top=top)
    if groups_file is not None:
        n = f"{groups_file[1]} sub-group(s)" if groups_file[1] >= 0 else "unreadable"
        out_console().print(
            f"comm groups for ASTRA-sim (--comm-group-configuration): {groups_file[0]} ({n})",
            markup=False,
            highlight=False,
        )


def _validate_streaming(traces: Any, rank: int | None) -> Any:
    """``validate --stream``: each rank file checked in one streaming pass, the findings in one report."""
    from tracekit.transforms.streaming import validate_stream
    from tracekit.checks.validate import ValidationReport

    report = ValidationReport()
    for r, path in progress(_pairs(traces, rank), "checking ranks"):
        sub = validate_stream(path, rank=r)
        report.add(*sub.issues)
        report.checked_ranks += 1
        report.checked_nodes += sub.checked_nodes
    return report


def _refuse_stream_groups(stream: bool, comm_groups: str | None) -> None:
    """A usage error for ``validate --stream --comm-groups FILE``: the streaming pass has no group checks."""
    if stream and comm_groups is not None:
        raise click.UsageError(
            f"--comm-groups {comm_groups}: validate --stream checks each rank file alone, without process groups; "
            "drop --stream to check the groups"
        )


@click.command(context_settings=CONTEXT_SETTINGS)
@traces_argument()
@click.option("--rank", type=int, default=None, help="Only this rank (skips cross-rank checks).")
@json_option()
@executor_options
@click.option(
    "--stream",
    is_flag=True,
    help="Check each rank file in one streaming pass (for files larger than memory; per-rank checks "
    "only, no cross-rank collective order).",
)
@comm_groups_option()
def validate(
    traces,
    rank: int | None,
    as_json: bool,
    executor: str,
    workers: int | None,
    address: str | None,
    stream: bool,
    comm_groups: str | None,
) -> None:
    """Check traces: ids, dependencies, cycles, node attributes, process groups, collective order.

    Ranks are read and checked one at a time per worker (only each rank's findings are
    kept), so jobs of thousands of large rank files validate in bounded memory.
    Prints one line per issue.  Exit codes: 0 when the traces are valid (warnings allowed), 3 when they
    have errors, 1 when a file cannot be read or is not a trace, 2 for a wrong command line.
    With --executor auto, ranks are checked in a process pool from 8 ranks on.

    \b
    Example:
      tracekit validate out/job
      tracekit validate out/gpt3.*.et --workers 2
    """
    from tracekit.sets.classset import find_class_set
    from tracekit.checks.classset import validate_class_set
    from tracekit.checks.validate import validate_files

    check_address(executor, address)
    _refuse_stream_groups(stream, comm_groups)
    groups, groups_path = load_comm_groups(traces, comm_groups)
    classes = find_class_set(traces) if not stream else None
    if classes is not None and rank is not None:  # one rank of a class set: its derived trace, per-rank checks
        from tracekit.checks.classset import member_trace
        from tracekit.checks.validate import ValidationReport, validate_trace

        classes.locate(rank)
        sub = validate_trace(member_trace(classes, rank))
        report = ValidationReport(checked_ranks=1, checked_nodes=sub.checked_nodes)
        report.add(*sub.issues)
    elif classes is not None:  # stored as rank classes: representatives checked, members derived
        report = validate_class_set(classes)
    elif stream:
        report = _validate_streaming(traces, rank)
    else:
        pairs = _pairs(traces, rank)
        executor = resolve_executor(executor, len(pairs), workers, min_units=8)
        with progress_callback("checking ranks") as callback:
            report = validate_files(
                pairs,
                executor=executor,
                max_workers=workers,
                ray_address=address,
                progress=callback,
                comm_groups=groups,
                comm_groups_path=groups_path,
            )
    if as_json:
        emit_json(
            {
                "ok": report.ok,
                "ranks": report.checked_ranks,
                "nodes": report.checked_nodes,
                "issues": [i.__dict__ for i in report.issues],
            }
        )
    else:
        for issue in report.issues:
            echo_literal(str(issue))
        status = "OK" if report.ok else f"FAILED ({report.error_count:,} errors)"
        click.echo(
            f"{status}: {report.checked_ranks} ranks, {report.checked_nodes} nodes, {report.warning_count:,} warnings"
        )
    if not report.ok:
        sys.exit(EXIT_FINDINGS)


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the JSON here (atomically) instead of stdout.",
)
def dump(trace: str, output: str | None) -> None:
    """Write one trace file as a JSON document (lossless; `load` turns it back into the same bytes).

    \b
    Example:
      tracekit dump sample_traces/chakra/all_reduce.0.et -o all_reduce.0.json
    """
    from tracekit.io import read_trace, write_bytes_atomic
    from tracekit.wire.jsonform import dumps_trace

    from tracekit.cli._common import say

    _one_file(trace)
    loaded = read_trace(trace)
    data = dumps_trace(loaded)
    if output:
        write_bytes_atomic(output, data)
        say(f"wrote {output} (rank {loaded.rank}, {len(loaded):,} nodes, {len(data):,} bytes of JSON)")
    else:
        sys.stdout.buffer.write(data)


def _one_file(trace: str) -> None:
    """Raise TraceFormatError naming the rank files when ``trace`` is a trace-set prefix, not a file (dump
    takes one file)."""
    import os

    from tracekit.errors import TraceFormatError
    from tracekit.io import trace_paths

    if os.path.exists(trace):
        return
    try:
        pairs = trace_paths(trace)
    except TraceFormatError:
        return  # nothing of that name: reading it says so
    first, last = pairs[0][1], pairs[-1][1]
    shown = str(first) if len(pairs) == 1 else f"{first} ... {last}"
    raise TraceFormatError(
        f"dump takes one trace file; this names {len(pairs)} rank file(s) ({shown}): dump one, e.g. "
        f"tracekit dump {first} -o {first.name.removesuffix('.gz').removesuffix('.et')}.json",
        path=trace,
    )


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("json_file", type=click.Path(dir_okay=False))
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), required=True, help="The .et (or .et.gz) file to write."
)
@click.option(
    "--no-validate",
    is_flag=True,
    help="Write even when `validate` would report errors (e.g. to round-trip a file that had them).",
)
@json_option()
def load(json_file: str, output: str, no_validate: bool, as_json: bool) -> None:
    """Turn a JSON trace (tracekit JSON or Chakra feeder JSON) into a .et file (validated first).

    \b
    Example:
      tracekit load all_reduce.0.json -o all_reduce.0.et
    """
    from tracekit.errors import ValidationError
    from tracekit.io import write_trace
    from tracekit.wire.jsonform import read_json_trace
    from tracekit.checks.validate import validate_trace

    from tracekit.errors import TraceFormatError

    try:
        trace = read_json_trace(json_file)
    except TraceFormatError:
        if not json_file.endswith((".et", ".et.gz")):
            raise
        raise TraceFormatError(
            f"not JSON: by its name a Chakra .et trace (protobuf); load turns JSON into .et, "
            f"tracekit dump {json_file} turns it into JSON",
            path=json_file,
        ) from None
    if not no_validate:  # never write, unasked, a file `validate` would reject
        try:
            validate_trace(trace).raise_for_errors()
        except ValidationError as exc:
            exc.message += "; nothing written (--no-validate writes it anyway)"
            raise
    write_trace(trace, output)
    if as_json:
        emit_json({"output": output, "rank": trace.rank, "nodes": len(trace)})
    else:
        from tracekit.cli._common import say

        say(f"wrote {output} (rank {trace.rank}, {len(trace):,} nodes)")


COMMANDS = [info, validate, dump, load]
