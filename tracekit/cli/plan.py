"""``tracekit plan``: the fastest layout of a model on N GPUs that fits, found by simulating the candidates."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracekit.cli._common import CONTEXT_SETTINGS, err_console, out_console, progress_callback, state
from tracekit.cli._options import (
    FloatRange,
    IntRange,
    check_address,
    emit_json,
    executor_options,
    json_option,
    resolve_executor,
)
from tracekit.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.orchestration.planning.search import PlanResult
    from tracekit.workloads.config import LLMConfig

_KNOB_HELP = "Fix {what}: one value or a comma-separated list (default: every value the rules allow)."


def _knob_options(f: Any) -> Any:
    for knob, what in reversed(
        (
            ("tp", "the tensor-parallel degree (within a node)"),
            ("pp", "the pipeline-parallel degree"),
            ("dp", "the data-parallel degree"),
            ("cp", "the context-parallel degree (default 1 below sequence 8192, else 1,2,4,8)"),
            ("ep", "the expert-parallel degree (MoE)"),
            ("micro-batch", "the micro-batch size (default 1,2,4,8)"),
            ("vp", "the virtual pipeline stages per rank (1 = 1F1B; default up to 8)"),
            ("recompute", "activation recomputation: none, selective, full"),
            ("zero", "the ZeRO stage: 0, 1 (distributed optimizer), 2, 3"),
            ("dtype", "the training precision (default bf16)"),
        )
    ):
        f = click.option(
            f"--{knob}", knob.replace("-", "_"), default=None, metavar="V[,V...]", help=_KNOB_HELP.format(what=what)
        )(f)
    return f


@click.command("plan", context_settings=CONTEXT_SETTINGS)
@click.option(
    "--model",
    "model_name",
    required=True,
    metavar="NAME|FILE",
    help="A preset (gpt3-175b, llama3-70b ...; see generate llm), a paper row (megatron-1.7B ... megatron-1T of "
    "Narayanan et al. 2021 Table 1, korthikanti-175B / -530B of Korthikanti et al. 2022; run by the "
    'megatron-2021 stack), or a JSON file of model fields with an optional "preset" to start from.',
)
@click.option("--gpus", type=IntRange(1, None), required=True, help="GPUs of the job.")
@click.option("--hw", "specs", multiple=True, required=True, metavar="SPEC", help="Hardware spec; repeat to compare.")
@click.option(
    "--global-batch", type=IntRange(1, None), default=None, help="Sequences per iteration (default: the model's)."
)
@click.option("--seq", type=IntRange(1, None), default=None, help="Sequence length (default: the model's).")
@click.option("--stack", "stack_name", default=None, metavar="NAME", help="Training stack (see generate llm).")
@_knob_options
@click.option("--sp", "sp_on", is_flag=True, help="Fix sequence parallelism on (default: on when tp > 1).")
@click.option("--no-sp", "sp_off", is_flag=True, help="Fix sequence parallelism off.")
@click.option(
    "--max-memory-fraction",
    type=FloatRange(0, 1, min_open=True),
    default=1.0,
    show_default=True,
    help="Share of the device memory a rank may use (0.9 keeps 10 % headroom).",
)
@click.option(
    "--keep",
    type=IntRange(1, 100),
    default=1,
    show_default=True,
    help="Prune against the KEEP-th best simulated time (3: the top 3 are the true top 3, within --gap).",
)
@click.option(
    "--gap",
    type=float,
    default=0.05,
    show_default=True,
    help="Optimality gap: prune a layout whose bound is at least (1 - GAP) x that time; the chosen layout is "
    "then within GAP of the fastest (0: exact, slower).",
)
@executor_options
@click.option("-o", "--output", "out_dir", default=None, metavar="DIR", help="Write DIR/plan.json and DIR/plan.html.")
@json_option()
def plan(
    model_name: str,
    gpus: int,
    specs: tuple[str, ...],
    global_batch: int | None,
    seq: int | None,
    stack_name: str | None,
    max_memory_fraction: float,
    keep: int,
    gap: float,
    executor: str,
    workers: int | None,
    address: str | None,
    out_dir: str | None,
    as_json: bool,
    sp_on: bool,
    sp_off: bool,
    **knobs: str | None,
) -> None:
    """Find the fastest layout of a model on --gpus GPUs that fits the memory of --hw's device.

    Every layout the divisibility rules allow (tp within a node, pp, dp,
    cp, ep, micro-batch, virtual stages, recomputation, sequence
    parallelism, ZeRO stage, precision) is checked against the memory model
    first; the ones that fit are ordered by a lower bound on their step
    time and simulated in that order (generated as a rank-class set and
    replayed folded, as generate llm --classes and replay do), until no
    remaining bound can beat the --keep-th best time.  The ranked table goes
    to stdout with the chosen layout's generate llm command.

    \b
    Example:
      tracekit plan --model gpt3-175b --gpus 1024 --hw dgx-h100 --global-batch 1536
      tracekit plan --model megatron-18.4B --gpus 256 --hw dgx-a100 --tp 8 --recompute full -o plan_out
    """
    from tracekit.replayer.orchestration.planning.enumerate import KNOBS, KnobSpace

    check_address(executor, address)
    base, command_model = resolve_model(model_name, global_batch, seq, stack_name)
    check_specs(specs, out_dir)
    if sp_on and sp_off:
        raise ConfigError("give --sp or --no-sp, not both")
    knobs["sp"] = "on" if sp_on else "off" if sp_off else None
    try:
        space = KnobSpace.parse({k: knobs[k] for k in KNOBS})
    except ConfigError as exc:  # a bad option value: a usage error (exit 2), as click's own
        raise click.UsageError(exc.message) from None
    executor = resolve_executor(executor, 2, workers)
    run = {"executor": executor, "workers": workers, "address": address, "bound_all": out_dir is not None}
    results = [
        _plan_one(base, command_model, gpus, spec_name, space, max_memory_fraction, keep, gap, run)
        for spec_name in specs
    ]
    if out_dir is not None:  # the printed generate command writes next to the plan
        for r in results:
            r.best_prefix = str(_folder(out_dir, r, len(results) > 1) / "best")
    written = _write(results, out_dir)
    if as_json:
        from tracekit.replayer.orchestration.planning.report import plan_dict

        emit_json(plan_dict(results[0]) if len(results) == 1 else {"plans": [plan_dict(r) for r in results]})
    else:
        for result in results:
            _print(result)
        if len(results) > 1:
            _print_comparison(results)
    if written and not state().quiet:
        err_console().print("wrote " + ", ".join(written), markup=False, highlight=False, soft_wrap=True)


def _plan_one(
    base: "LLMConfig",
    command_model: str,
    gpus: int,
    spec_name: str,
    space: Any,
    max_memory_fraction: float,
    keep: int,
    gap: float,
    run: dict[str, Any],
) -> "PlanResult":
    """The plan on one spec, with a progress bar of layouts simulated / pruned / left (``run``: executor,
    workers, address and bound_all for :func:`~tracekit.replayer.orchestration.planning.search.plan_layouts`;
    bound_all so the page draws every layout at a time)."""
    from tracekit.replayer.orchestration.planning.report import spec_price
    from tracekit.replayer.orchestration.planning.search import PlanRequest, plan_layouts
    from tracekit.replayer.simulation.specs import load_spec

    spec = load_spec(spec_name)
    request = PlanRequest(
        base, command_model, gpus, spec, spec_name, space, max_memory_fraction, keep, gap, spec_price(spec)
    )
    with progress_callback(f"planning on {spec_name}") as callback:

        def tell(done: int, pruned: int, left: int) -> None:
            if callback is not None:
                callback(
                    done + pruned, done + pruned + left, f"{spec_name}: {done} simulated, {pruned} pruned, {left} left"
                )

        return plan_layouts(request, llm_generator(), progress=tell, **run)


def llm_generator() -> Any:
    """The planner's :class:`~tracekit.replayer.orchestration.planning.search.Generator`: the LLM generator's
    calibrated blocks and class-set writer (:mod:`tracekit.converters.generators.llm_plan`)."""
    from tracekit.converters.generators.llm_plan import calibrated_plan, write_calibrated_classes
    from tracekit.replayer.orchestration.planning.search import Generator

    return Generator(calibrated_plan, write_calibrated_classes)


def _folder(out_dir: str, result: "PlanResult", several: bool) -> "Path":
    """The folder of ``result``'s plan: ``DIR``, or ``DIR/<spec stem>`` when comparing specs."""
    return Path(out_dir) / Path(result.request.spec_name).stem if several else Path(out_dir)


def _write(results: list["PlanResult"], out_dir: str | None) -> list[str]:
    """``plan.json``/``plan.html`` per spec (in ``DIR/<spec>/`` when comparing specs) as one atomic unit; the
    paths written.  The plans of an earlier run this one replaces go with it: ``DIR/plan.*`` under a comparison,
    ``DIR/*/plan.*`` under a single spec, removed only where ``plan.json`` is a plan this tool wrote."""
    if out_dir is None:
        return []
    from tracekit.io import write_files_atomic
    from tracekit.replayer.orchestration.planning.report import is_plan_file, plan_files

    root = Path(out_dir)
    files: dict[Path, bytes] = {}
    for r in results:
        files.update(plan_files(r, _folder(out_dir, r, len(results) > 1)))
    stale = [root / "plan.json"] if len(results) > 1 else sorted(root.glob("*/plan.json"))
    stale = [p for p in stale if p not in files and is_plan_file(p)]
    remove = [q for p in stale for q in (p, p.with_suffix(".html")) if q.exists() and q not in files]
    write_files_atomic(files, remove=tuple(remove))
    return [str(p) for p in files]


def resolve_model(
    name: str, global_batch: int | None, seq: int | None, stack_name: str | None
) -> tuple["LLMConfig", str]:
    """``(base job, generate llm --model and override options)`` of ``--model``.

    Raises:
        ConfigError: an unknown name, an unreadable or invalid JSON file, a bad batch or sequence length.
    """
    import dataclasses
    import json
    from pathlib import Path

    from tracekit.workloads.config import LLMConfig, ModelSpec, preset
    from tracekit.workloads.stacks import apply_stack

    stack = stack_name
    if name.endswith(".json"):
        try:
            fields = json.loads(Path(name).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--model {name}: {exc}") from None
        model, batch = model_from_fields(name, fields)
        base_name = preset(str(fields.get("preset", "gpt3-1.3b")))[0].name
    elif name.lower().startswith(("megatron-", "korthikanti-")):
        model, batch, base_name = _paper_model(name)
        stack = stack or "megatron-2021"
    else:
        model, batch = preset(name)
        base_name = model.name
    if seq is not None:
        model = dataclasses.replace(model, seq_length=seq)
    if not isinstance(model, ModelSpec):  # pragma: no cover - replace keeps the type
        raise ConfigError(f"--model {name}: not a model")
    config = LLMConfig(model, global_batch_size=global_batch or batch)
    if stack is not None:
        config = apply_stack(config, stack)
    if stack == "megatron-2021" and name.lower().startswith(("megatron-", "korthikanti-")):
        from tracekit.converters.generators.calibration import MEGATRON_2021_OVERLAP_GRAD_REDUCE

        config = config.with_parallel(overlap_grad_reduce=MEGATRON_2021_OVERLAP_GRAD_REDUCE)
    return config, _command_model(model, base_name, config)


#: ModelSpec fields a JSON model may set: the ones ``generate llm`` has an option for (so the chosen command
#: line rebuilds the model the plan timed), its label, and where it comes from.
_JSON_MODEL_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_heads",
    "num_kv_heads",
    "ffn_hidden_size",
    "seq_length",
    "vocab_size",
    "name",
    "source",
)


def model_from_fields(name: str, fields: Any) -> tuple[Any, int]:
    """``(model, global batch)`` of a ``--model FILE.json`` document: its ``"preset"`` (default gpt3-1.3b) with
    the other fields replaced.

    A field ``generate llm`` has no option for (``activation``, ``num_experts`` ...) may only repeat the
    preset's value: otherwise the printed command line would time another model than the plan did.

    Raises:
        ConfigError: not a JSON object, an unknown preset or field, a field generate llm cannot set, a bad value
            (each naming ``--model FILE``).
    """
    import dataclasses

    from tracekit.workloads.config import ModelSpec, preset

    if not isinstance(fields, dict):
        raise ConfigError(f"--model {name}: not a JSON object of model fields (got {type(fields).__name__})")
    fields = dict(fields)
    start_name = fields.pop("preset", "gpt3-1.3b")
    try:
        start, batch = preset(str(start_name))
    except ConfigError as exc:
        raise ConfigError(f"--model {name}: key preset: {exc}") from None
    known = [f.name for f in dataclasses.fields(ModelSpec)]
    for key, value in fields.items():
        if key not in known:
            raise ConfigError(f"--model {name}: unknown field {key!r}; fields: preset, {', '.join(known)}")
        if key not in _JSON_MODEL_FIELDS and value != getattr(start, key):
            raise ConfigError(
                f"--model {name}: {key} {value!r} differs from preset {start.name}'s {getattr(start, key)!r} and "
                f'generate llm has no option for it; start from a preset that has it ("preset": NAME)'
            )
    try:
        return dataclasses.replace(start, **fields), batch
    except (ConfigError, ValueError, TypeError) as exc:
        raise ConfigError(f"--model {name}: {exc}") from None


def check_specs(specs: tuple[str, ...], out_dir: str | None) -> None:
    """Refuse a ``--hw`` given twice, and (with ``-o``) two specs that would write the same ``DIR/<stem>/``.

    Raises:
        ConfigError: naming both ``--hw`` values.
    """
    from pathlib import Path

    same: dict[str, str] = {}
    folders: dict[str, str] = {}
    for spec in specs:
        is_file = spec.endswith(".toml") or Path(spec).is_file()
        key = str(Path(spec).resolve()) if is_file else spec
        if key in same:
            raise ConfigError(f"--hw {same[key]} and --hw {spec}: the same spec twice; give each spec once")
        same[key] = spec
        folder = Path(spec).stem if is_file else spec
        if out_dir is not None and len(specs) > 1 and folder in folders:
            raise ConfigError(
                f"--hw {folders[folder]} and --hw {spec}: both would be written to {Path(out_dir) / folder}; "
                "rename one spec file"
            )
        folders[folder] = spec


def _paper_model(name: str) -> tuple[Any, int, str]:
    """``(model, global batch, preset it is shaped on)`` of a Table-1 / Table-5 row name."""
    from tracekit.converters.generators.calibration import table1_config, table1_row
    from tracekit.converters.generators.table5 import table5_config, table5_row

    kind, row = name.split("-", 1)
    if kind.lower() == "megatron":
        config = table1_config(table1_row(row))
    else:
        config = table5_config(table5_row(row), "full")
    return config.model, config.global_batch_size, "gpt3-1.3b"


def _command_model(model: Any, base_name: str, config: "LLMConfig") -> str:
    """``NAME [--layers L ...]``: the preset and the overrides that make ``model`` for ``generate llm``."""
    from tracekit.workloads.config import preset

    start = preset(base_name)[0]
    options = (
        ("--layers", "num_layers"),
        ("--hidden", "hidden_size"),
        ("--heads", "num_heads"),
        ("--kv-heads", "num_kv_heads"),
        ("--ffn", "ffn_hidden_size"),
        ("--vocab", "vocab_size"),
    )
    out = [base_name] + [f"{o} {getattr(model, f)}" for o, f in options if getattr(model, f) != getattr(start, f)]
    from tracekit.workloads.stacks import StackSpec

    if config.stack != StackSpec():
        out.append(f"--stack {config.stack.name}")
    if not config.parallel.overlap_grad_reduce:
        out.append("--no-overlap")
    return " ".join(out)


def _print(result: "PlanResult") -> None:
    from rich.table import Table

    req = result.request
    counts = result.counts()
    table = Table(
        title=f"{req.base.model.name} on {req.gpus} GPUs ({req.spec_name}), global batch {req.base.global_batch_size}"
    )
    columns = (
        "#",
        "layout",
        "step s",
        "tokens/s",
        "TFLOP/s/GPU",
        "MFU",
        "peak GiB",
        "headroom GiB",
        "exposed comm s",
        "idle s",
    )
    for name in columns:
        table.add_column(name, justify="left" if name == "layout" else "right")
    for i, c in enumerate(result.ranked):
        f = result.figures(c)
        table.add_row(
            str(i + 1),
            c.layout.label,
            f"{f['step_s']:.3f}",
            f"{f['tokens_per_s']:,.0f}",
            f"{f['tflops_per_gpu']:.1f}",
            f"{f['mfu']:.1%}",
            f"{f['peak_memory_gib']:.1f}",
            f"{f['headroom_gib']:.1f}",
            f"{f['exposed_comm_s']:.3f}",
            f"{f['bubble_s']:.3f}",
        )
    console = out_console()
    console.print(table)
    lines = [
        f"layouts: {counts['enumerated']} enumerated, {counts['memory']} pruned by memory, {counts['dominated']} "
        f"dominated, {counts['bound']} pruned by bound, {counts['simulated']} simulated ({result.wall_s:.1f} s, "
        f"{result.executor})",
        "chosen: " + result.generate_command(result.best),
    ]
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _print_comparison(results: list["PlanResult"]) -> None:
    """One line per spec: its best layout, step time and (with a price) cost; cheapest first when every spec has
    a price, else fastest first."""
    console = out_console()
    by_cost = all(r.request.price_per_gpu_hour_usd is not None for r in results)
    key = "usd_per_step" if by_cost else "step_s"
    for r in sorted(results, key=lambda r: r.figures(r.best)[key]):
        f = r.figures(r.best)
        cost = f", {f['usd_per_step']:.2f} USD per step" if "usd_per_step" in f else ""
        console.print(
            f"{r.request.spec_name}: {r.best.layout.label}, step {f['step_s']:.3f} s{cost}, "
            f"{f['tflops_per_gpu']:.1f} TFLOP/s per GPU",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    console.print(f"ranked by {'cost' if by_cost else 'step time'}", markup=False, highlight=False)


COMMANDS = [plan]
