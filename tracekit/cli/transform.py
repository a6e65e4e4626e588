"""``tracekit transform``: rewrite a trace set with transforms given as options or in a TOML pipeline file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracekit.cli._common import CONTEXT_SETTINGS, echo_literal, hold_output_prefix, say
from tracekit.cli._options import COUNT, FACTOR, emit_json, json_option, traces_argument

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.transforms import Pipeline
    from tracekit.transforms.base import Transform
    from tracekit.sets.traceset import TraceSet

# The TRACES argument: one spec or several paths (tracekit.cli._options.traces_argument)
Traces = str | tuple[str, ...]


def _steps_from_options(opts: dict[str, Any]) -> list[Transform]:
    from tracekit.transforms import (
        ChangePP,
        ChangeTP,
        Compact,
        DropCpuOps,
        KeepIteration,
        KeepRanks,
        Rescale,
        Retarget,
        ScaleComm,
        ScaleCompute,
    )

    steps: list[Transform] = []
    if opts["keep_iteration"] is not None:
        steps.append(KeepIteration(opts["keep_iteration"]))
    keep_ranks = opts["keep_ranks"] or opts["ranks_old"]
    if keep_ranks is not None:
        steps.append(KeepRanks(keep_ranks))
    if opts["drop_cpu_ops"]:
        steps.append(DropCpuOps())
    if opts["scale_compute"] is not None:
        steps.append(ScaleCompute(opts["scale_compute"]))
    if opts["retarget"] is not None:
        from tracekit.costs.devices import find_device
        from tracekit.errors import ConfigError
        from tracekit.replayer.simulation.specs import load_spec

        src, sep, dst = opts["retarget"].partition(":")
        if not sep or not src or not dst:
            raise ConfigError(f"--retarget wants FROM:TO (two specs or presets), got {opts['retarget']!r}")
        steps.append(
            Retarget(find_device(src) or load_spec(src), find_device(dst) or load_spec(dst), tf32=opts["tf32"])
        )
    if opts["scale_comm"] is not None:
        steps.append(ScaleComm(opts["scale_comm"]))
    if opts["tp"] is not None:
        steps.append(ChangeTP(opts["tp"]))
    if opts["pp"] is not None:
        steps.append(ChangePP(opts["pp"], schedule=opts["schedule"]))
    if opts["dp"] is not None:
        steps.append(Rescale(opts["dp"], mode="strong" if opts["strong"] else "weak"))
    if opts["compact"]:
        steps.append(Compact())
    return steps


@click.command(context_settings=CONTEXT_SETTINGS)
@traces_argument(required=False, metavar="[TRACES...]")
@click.option(
    "-o",
    "--output",
    metavar="OUT",
    help="Output prefix: writes OUT.<rank>.et (--dp: OUT.classes.json, a rank-class set, unless --per-rank).  "
    "[required, unless the --pipeline file sets output]",
)
@click.option("--pipeline", "pipeline_file", metavar="FILE.toml", help="Steps from a TOML pipeline file (run first).")
@click.option("--keep-iteration", type=int, metavar="N", help="Keep iteration N (ProfilerStep#N).")
@click.option("--keep-ranks", metavar="LIST", help="Keep these ranks, e.g. 0-7 or 0,2,4 (renumbered from 0).")
@click.option("--ranks", "ranks_old", metavar="LIST", hidden=True, default=None)
@click.option("--drop-cpu-ops", is_flag=True, help="Remove host-only compute nodes (keeping their dependencies).")
@click.option("--scale-compute", type=FACTOR, metavar="F", help="Multiply compute time by F.")
@click.option(
    "--retarget",
    metavar="FROM:TO",
    help="Move measured compute between devices per op class "
    "(device presets such as a100-80gb:h100-sxm, hardware specs or presets such as dgx-a100:dgx-h100); "
    "prints how many nodes and how much time each method covered.",
)
@click.option(
    "--tf32",
    type=click.Choice(["pytorch", "off", "all"]),
    default=None,
    help="With --retarget: fp32 ops run as TF32 on Ampere and later as PyTorch does by default (convolutions), "
    "not at all (the capture set torch.backends.cudnn.allow_tf32=False), or matmuls too "
    "(torch.backends.cuda.matmul.allow_tf32=True). Default: the capture's 'tf32' metadata flag, else pytorch.",
)
@click.option("--scale-comm", type=FACTOR, metavar="F", help="Multiply message sizes by F.")
@click.option("--tp", type=COUNT, metavar="N", help="New tensor-parallel degree (layer-structured traces).")
@click.option("--pp", type=COUNT, metavar="N", help="New pipeline-parallel degree (layer-structured traces).")
@click.option("--schedule", type=click.Choice(["gpipe", "1f1b"]), help="Pipeline schedule with --pp.")
@click.option("--dp", type=COUNT, metavar="N", help="New data-parallel degree.")
@click.option("--strong", is_flag=True, help="With --dp: strong scaling (global batch fixed); default weak.")
@click.option("--compact", is_flag=True, help="Merge compute chains and drop redundant dependencies.")
@click.option(
    "--per-rank",
    is_flag=True,
    help="With --dp on per-rank files: write one file per rank (default: a rank-class set, OUT.classes.json, "
    "whose size does not grow with the rank count; `tracekit expand` writes its rank files).",
)
@click.option("--compress", is_flag=True, help="Write .et.gz files.")
@click.option(
    "--stream",
    is_flag=True,
    help="Transform each rank file node by node (files larger than memory). Only per-node steps "
    "stream: --scale-compute, --retarget, --scale-comm, --drop-cpu-ops.",
)
@json_option()
def transform(traces: Traces | None, output: str | None, pipeline_file: str | None, as_json: bool, **opts: Any) -> None:
    """Rewrite the trace set TRACES and write it to OUT.<rank>.et.

    Steps run in this order: the pipeline file's, then --keep-iteration,
    --keep-ranks, --drop-cpu-ops, --scale-compute, --retarget, --scale-comm,
    --tp, --pp, --dp, --compact.  Every output trace records the steps and
    the input in its metadata (tracekit_provenance).  Nothing is written
    unless every rank is transformed and encoded.  --tp and --pp rewrite
    layer-structured traces (those `generate llm` writes); a captured trace
    has no layer structure to split.

    \b
    Example:
      tracekit transform out/gpt -o out/gpt_dp64 --dp 64 --compact
      tracekit transform --pipeline whatif.toml
    """
    from tracekit.transforms import Pipeline, load_pipeline

    compress = opts.pop("compress")
    stream = opts.pop("stream")
    per_rank = opts.pop("per_rank")
    if opts["tf32"] is not None and opts["retarget"] is None:  # it would be silently ignored
        raise click.UsageError("--tf32 needs --retarget FROM:TO (it says how the retarget projects fp32 ops)")
    steps: list[Transform] = []
    if pipeline_file is not None:
        pf = load_pipeline(pipeline_file)
        steps.extend(pf.pipeline.steps)
        traces = traces or pf.input
        output = output or pf.output
    steps.extend(_steps_from_options(opts))
    if traces is None:
        raise click.UsageError("no input: give IN or an input in the pipeline file")
    if output is None:
        raise click.UsageError("no output: give -o OUT or an output in the pipeline file")
    if not steps:
        raise click.UsageError("no transform given: add a transform option or --pipeline FILE")
    hold_output_prefix(output)
    if stream:
        _transform_streaming(traces, output, Pipeline(steps), compress, as_json)
        return
    if per_rank and not compress and _rescale_per_rank(traces, steps, output, as_json):
        return
    if not compress and _transform_class_set(traces, steps, output):
        return
    if not (compress or per_rank) and _rescale_as_classes(traces, steps, output, as_json):
        return
    _transform_in_memory(traces, output, steps, compress, as_json)


def _transform_class_set(traces: Traces, steps: list[Transform], output: str) -> bool:
    """Transform a rank-class set as a class set (no per-rank trace) when the steps allow it; False otherwise."""
    from tracekit.sets.classset import find_class_set, read_class_set
    from tracekit.transforms import Pipeline
    from tracekit.transforms.classrescale import runs_on_classes, transform_classes
    from tracekit.transforms.classwise import classwise, transform_class_set

    classes = find_class_set(traces)
    if classes is None:
        return False
    names = ", ".join(s.describe()["transform"] for s in steps)
    if runs_on_classes(steps):
        # rescaled on the classes and the manifest, written as a class set (no per-rank trace)
        manifest, nodes_in, nodes_out = transform_classes(
            classes, steps, output, source=str(classes.manifest), progress=_progress_of("mapping groups to new ranks")
        )
        written = read_class_set(manifest)
        say(
            f"wrote {manifest} ({_classes_text(len(written.classes))} of {written.world_size} ranks): "
            f"{nodes_in} -> {nodes_out} nodes ({names})"
        )
        return True
    if classwise(Pipeline(steps)):  # per class, written as a class set
        manifest, nodes_in, nodes_out = transform_class_set(classes, Pipeline(steps), output)
        say(
            f"wrote {manifest} ({_classes_text(len(classes.classes))} of {classes.world_size} ranks): "
            f"{nodes_in} -> {nodes_out} nodes ({names})"
        )
        return True
    return False


def _progress_of(description: str) -> Any:
    """A ``progress(items, total)`` wrapper drawing a bar on stderr (see tracekit.cli._common.progress)."""
    from tracekit.cli._common import progress

    return lambda items, total: progress(items, description, total=total)


def _rescale_as_classes(traces: Traces, steps: list[Transform], output: str, as_json: bool) -> bool:
    """``--dp`` of per-rank files written as a rank-class set (issue 34 item 1): one class per distinct input rank,
    its representative regridded once, so time and memory do not grow with the new rank count; False when the
    steps do not rescale or cannot run on classes (then every rank is written)."""
    from tracekit.io import read_traceset
    from tracekit.transforms import Rescale
    from tracekit.transforms.classrescale import rank_files_as_classes, run_on_classes, supports

    if not any(isinstance(s, Rescale) for s in steps) or not supports(steps):
        return False
    ts = read_traceset(traces)
    source = traces if isinstance(traces, str) else " ".join(traces)
    manifest, nodes_in, nodes_out = run_on_classes(
        rank_files_as_classes(ts),
        len(ts),
        steps,
        output,
        source=source,
        progress=_progress_of("mapping groups to new ranks"),
    )
    from tracekit.sets.classset import read_class_set

    cs = read_class_set(manifest)
    if as_json:
        emit_json(
            {
                "output": str(manifest),
                "ranks_in": len(ts),
                "ranks_out": cs.world_size,
                "classes": len(cs.classes),
                "nodes_in": nodes_in,
                "nodes_out": nodes_out,
                "steps": [s.describe() for s in steps],
            }
        )
        return True
    say(
        f"wrote {manifest} ({_classes_text(len(cs.classes))} of {cs.world_size} ranks; --per-rank or "
        f"`tracekit expand` for one file per rank): {len(ts)} -> {cs.world_size} ranks, {nodes_in} -> {nodes_out} "
        f"nodes ({', '.join(s.describe()['transform'] for s in steps)})"
    )
    return True


def _rescale_per_rank(traces: Traces, steps: list[Transform], output: str, as_json: bool) -> bool:
    """``--dp ... --per-rank``: rescaled as rank classes in a temporary class set, whose rank files are then
    written one at a time (:meth:`~tracekit.sets.classset.ClassSet.expand`), so memory does not grow with the new
    rank count (building every output rank took ~45 MB each: --dp 512 of param-resnet was killed at 23 GB);
    a class-set input gets its rank files too (--per-rank was ignored).  False when the steps do not rescale or
    cannot run on classes, or retarget (whose projection summary reads every output rank)."""
    import shutil
    import tempfile

    from tracekit.io import read_traceset
    from tracekit.sets.classset import find_class_set, read_class_set
    from tracekit.transforms import Rescale
    from tracekit.transforms.classrescale import rank_files_as_classes, run_on_classes, supports, transform_classes

    names = [s.describe()["transform"] for s in steps]
    if not any(isinstance(s, Rescale) for s in steps) or not supports(steps) or "Retarget" in names:
        return False
    tmp = tempfile.mkdtemp(prefix="tracekit-rescale-")
    try:
        mapping = _progress_of("mapping groups to new ranks")
        classes = find_class_set(traces)
        if classes is not None:
            ranks_in = classes.world_size
            manifest, nodes_in, nodes_out = transform_classes(
                classes, steps, f"{tmp}/job", source=str(classes.manifest), progress=mapping
            )
        else:
            ts = read_traceset(traces)
            ranks_in, source = len(ts), traces if isinstance(traces, str) else " ".join(traces)
            manifest, nodes_in, nodes_out = run_on_classes(
                rank_files_as_classes(ts), len(ts), steps, f"{tmp}/job", source=source, progress=mapping
            )
            del ts
        cs = read_class_set(manifest)
        paths = cs.expand(output, progress=_progress_of("writing rank files"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if as_json:
        emit_json(
            {
                "output": output,
                "files": [str(p) for p in paths],
                "ranks_in": ranks_in,
                "ranks_out": cs.world_size,
                "nodes_in": nodes_in,
                "nodes_out": nodes_out,
                "steps": [s.describe() for s in steps],
            }
        )
        return True
    say(
        f"wrote {len(paths)} ranks to {output}.<rank>.et: {ranks_in} -> {cs.world_size} ranks, "
        f"{nodes_in} -> {nodes_out} nodes ({', '.join(names)})"
    )
    return True


def _transform_in_memory(traces: Traces, output: str, steps: list[Transform], compress: bool, as_json: bool) -> None:
    """Read the whole trace set, run the steps, write every rank (all or none) and say what was written."""
    from tracekit.cli._common import warn_duplicate_ids
    from tracekit.io import read_traceset, write_traceset
    from tracekit.transforms import Pipeline

    ts = read_traceset(traces)
    warn_duplicate_ids(ts)
    nodes_in = sum(len(t) for t in ts)
    out = Pipeline(steps).run(ts, source=traces if isinstance(traces, str) else " ".join(traces))
    paths = write_traceset(out, output, compress=compress)
    nodes_out = sum(len(t) for t in out)
    if as_json:
        emit_json(
            {
                "output": output,
                "files": [str(p) for p in paths],
                "ranks_in": len(ts),
                "ranks_out": len(out),
                "nodes_in": nodes_in,
                "nodes_out": nodes_out,
                "steps": [s.describe() for s in steps],
            }
        )
        return
    say(
        f"wrote {len(paths)} ranks to {output}.<rank>.et{'.gz' if compress else ''}: "
        f"{len(ts)} -> {len(out)} ranks, {nodes_in} -> {nodes_out} nodes "
        f"({', '.join(s.describe()['transform'] for s in steps)})"
    )
    if any(s.describe()["transform"] == "Retarget" for s in steps):
        for line in _projection_lines(out):
            echo_literal(line)


def _projection_lines(traceset: TraceSet) -> list[str]:
    """The merged ``compute_projection`` records Retarget left in the output traces' metadata."""
    import orjson

    from tracekit.costs.projection import ProjectionReport

    merged = None
    for trace in traceset:
        raw = trace.metadata.get_attr("compute_projection")
        if not isinstance(raw, str):
            continue
        d = orjson.loads(raw)
        rep = ProjectionReport(d["source"], d["target"], dtype_fallbacks=d["dtype_fallbacks"], rough=d["rough"])
        for m, v in d["methods"].items():
            rep.nodes[m], rep.measured_ns[m], rep.projected_ns[m] = v["nodes"], v["measured_ns"], v["projected_ns"]
        if merged is None:
            merged = rep
        else:
            merged.merge(rep)
    return merged.lines() if merged is not None else []


def _transform_streaming(traces: Traces, output: str, pipe: Pipeline, compress: bool, as_json: bool) -> None:
    """Streaming path of ``transform --stream``: one rank file at a time, node by node."""
    from tracekit.cli._common import progress
    from tracekit.errors import TransformError
    from tracekit.io import trace_paths
    from tracekit.transforms.streaming import streamable, transform_stream

    if not streamable(pipe):
        raise TransformError(
            "these steps cannot stream (they need the whole graph or job): "
            + ", ".join(s.describe()["transform"] for s in pipe.steps if not streamable(s))
        )
    if compress:
        raise TransformError("--stream writes plain .et files; compress afterwards or drop --stream")
    from tracekit.io import TraceSetWriter

    pairs = trace_paths(traces)
    nodes_in = nodes_out = 0
    with TraceSetWriter(output) as writer:  # all ranks or none
        for rank, path in progress(pairs, "transforming rank files"):
            stats = transform_stream(path, writer.reserve(rank), pipe, rank=rank)
            nodes_in += stats.nodes_in
            nodes_out += stats.nodes_out
        writer.comm_groups = _comm_groups_streamed(pairs)
    if as_json:
        emit_json(
            {
                "output": output,
                "ranks_in": len(pairs),
                "ranks_out": len(pairs),
                "nodes_in": nodes_in,
                "nodes_out": nodes_out,
                "steps": [s.describe() for s in pipe.steps],
            }
        )
        return
    say(f"wrote {len(pairs)} ranks to {output}.<rank>.et (streamed): {nodes_in} -> {nodes_out} nodes")


def _comm_groups_streamed(pairs: list[tuple[int, Path]]) -> dict[str, list[int]]:
    """ASTRA-sim's comm-group document from the first rank's ``process_group:init`` (among its first 64 nodes:
    streaming steps are rank-local, so the groups are the input's)."""
    from itertools import islice

    from tracekit.interop.astra import astra_group_ids, comm_groups_document
    from tracekit.model.groups import is_pg_init, parse_pg_json, resolve_groups
    from tracekit.io import iter_nodes

    declared: dict[str, tuple[int, ...]] = {}
    if pairs:
        rank, path = pairs[0]
        for node in islice(iter_nodes(path), 64):
            if is_pg_init(node) and node.inputs is not None and node.inputs.values:
                declared = parse_pg_json(node.inputs.values, path=str(path), rank=rank, node_id=node.id)
                break
    world = max(r for r, _ in pairs) + 1 if pairs else 0
    groups = resolve_groups(declared, world)
    return comm_groups_document(groups, astra_group_ids(groups, world))


COMMANDS = [transform]


def _classes_text(count: int) -> str:
    """``"1 rank class"``, ``"3 rank classes"``."""
    return f"{count} rank class{'' if count == 1 else 'es'}"
