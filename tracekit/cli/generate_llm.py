"""``tracekit generate llm``: one training iteration of a transformer on a dp x tp x pp (x cp, ep) job."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click

from tracekit.cli._common import CONTEXT_SETTINGS, hold_output_prefix, path_span, progress, say
from tracekit.cli._options import MEM_BW_GBPS, PEAK_TFLOPS, IntRange, emit_json, json_option
from tracekit.cli._stack_options import STACK_OPTIONS, apply_stack_options, stack_options
from tracekit.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.converters.generators.calibration import CalibratedCost
    from tracekit.converters.generators.llm_steps import Roofline
    from tracekit.workloads.config import LLMConfig, ModelSpec


def roofline_from_options(
    hw: str | None,
    peak_tflops: float | None,
    mem_bw_gbps: float | None,
    dtype: str,
    cost: str = "roofline",
    config: LLMConfig | None = None,
) -> Roofline | CalibratedCost | None:
    """Op durations from ``--hw`` (a replayer spec name or file) or ``--peak-tflops``/``--mem-bw-gbps``; or None.

    With ``--hw`` and ``cost="calibrated"``: a :class:`~tracekit.converters.generators.calibration.CalibratedCost`
    (GEMM efficiency by shape, overheads; see that module); ``cost="roofline"``: the flat roofline at the
    spec's ``compute_efficiency`` / ``memory_efficiency``.

    Args:
        hw: preset name or spec file, or None.
        peak_tflops: peak compute, TFLOP/s (1e12 FLOP/s).
        mem_bw_gbps: memory bandwidth, GB/s (1e9 bytes/s).
        dtype: compute dtype whose peak the spec gives (the device default when it lists none for it).
        cost: ``roofline`` or ``calibrated`` (with ``--hw`` only).
        config: the job, for a calibrated cost that follows its FP8 recipe (``calibration.cost_for``).

    Raises:
        ConfigError: ``--hw`` given with ``--peak-tflops``/``--mem-bw-gbps``, or only one of those two.
        SpecError: an unknown preset or invalid spec file, or a device without a peak.
    """
    from tracekit.converters.generators.llm_steps import Roofline

    if hw is not None:
        if peak_tflops is not None or mem_bw_gbps is not None:
            raise ConfigError("give either --hw or --peak-tflops/--mem-bw-gbps, not both")
        from tracekit.replayer.simulation.specs import load_spec

        if cost == "calibrated":
            from tracekit.converters.generators.calibration import CalibratedCost, cost_for

            return cost_for(load_spec(hw), config) if config is not None else CalibratedCost(load_spec(hw), dtype)
        device = load_spec(hw).device
        names = [n for n, _ in device.peak_flops_per_s]
        peak = device.peak(dtype if dtype in names else None)
        return Roofline(peak * device.compute_efficiency, device.mem_bandwidth_bytes_per_s * device.memory_efficiency)
    if (peak_tflops is None) != (mem_bw_gbps is None):
        raise ConfigError("--peak-tflops and --mem-bw-gbps go together")
    if peak_tflops is None or mem_bw_gbps is None:  # both None here (the check above)
        return None
    return Roofline(peak_tflops * 1e12, mem_bw_gbps * 1e9)


@click.command("llm", context_settings=CONTEXT_SETTINGS)
@click.option(
    "--model",
    "model_name",
    required=True,
    metavar="NAME",
    help="Preset: gpt3-175b, gpt3-13b, gpt3-1.3b, llama2-7b, llama3-8b, llama3-70b, llama3-405b, mixtral-8x7b, "
    "nemotron4-15b, nemotron4-340b.",
)
@click.option("--layers", type=int, default=None, help="Override the number of layers.")
@click.option("--hidden", type=int, default=None, help="Override the hidden size.")
@click.option("--heads", type=int, default=None, help="Override the attention heads.")
@click.option("--kv-heads", type=int, default=None, help="Override the key/value heads (grouped-query attention).")
@click.option("--ffn", type=int, default=None, help="Override the FFN size.")
@click.option("--seq", type=int, default=None, help="Override the sequence length.")
@click.option("--vocab", type=int, default=None, help="Override the vocabulary size.")
@click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel degree.")
@click.option("--pp", type=int, default=1, show_default=True, help="Pipeline-parallel degree.")
@click.option("--dp", type=int, default=None, help="Data-parallel degree (default: from --ranks, else 1).")
@click.option("--cp", type=int, default=1, show_default=True, help="Context-parallel degree.")
@click.option("--ep", type=int, default=1, show_default=True, help="Expert-parallel degree (MoE; divides dp).")
@click.option("--ranks", "num_ranks", type=int, default=None, help="World size; dp = ranks / (tp pp cp).")
@click.option("--global-batch", type=int, default=None, help="Sequences per iteration (default: the preset's).")
@click.option("--micro-batch", type=int, default=1, show_default=True, help="Sequences per micro-batch.")
@click.option("--schedule", type=click.Choice(["gpipe", "1f1b", "interleaved"]), default="1f1b", show_default=True)
@click.option("--virtual-stages", type=int, default=None, help="Model chunks per stage (interleaved; default 2).")
@click.option(
    "--microbatch-group-size",
    type=IntRange(1, None),
    default=None,
    metavar="N",
    help="Interleaved: contiguous micro-batches per virtual stage (Llama 3's flexible interleaving; any number "
    "of micro-batches). Default: pp when it divides the micro-batches, else the smallest N >= pp without "
    "dependency bubbles.",
)
@click.option("--zero", "zero_stage", type=IntRange(0, 3), default=0, show_default=True, help="ZeRO stage.")
@click.option("--sp", "sequence_parallel", is_flag=True, help="Sequence parallelism (needs tp >= 2).")
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default="none", show_default=True)
@click.option("--dtype", default="bf16", show_default=True, help="bf16, fp16, fp32, fp8.")
@click.option("--bucket", default="160MB", show_default=True, metavar="SIZE", help="Gradient bucket size.")
@click.option("--no-overlap", is_flag=True, help="Reduce gradients only after the whole backward.")
@click.option("--hw", default=None, metavar="SPEC", help="Hardware spec (preset name or TOML) for roofline durations.")
@click.option(
    "--cost",
    type=click.Choice(["calibrated", "roofline"]),
    default="calibrated",
    show_default=True,
    help="With --hw: 'calibrated' prices each GEMM by its shape with kernel, attention and optimizer "
    "overheads (converters/generators/calibration.py); 'roofline' uses the spec's flat efficiencies.",
)
@click.option(
    "--peak-tflops", type=PEAK_TFLOPS, default=None, help="Peak TFLOP/s for roofline durations (1e-6 to 1e6)."
)
@click.option(
    "--mem-bw-gbps", type=MEM_BW_GBPS, default=None, help="Memory bandwidth GB/s for roofline durations (1e-6 to 1e9)."
)
@click.option(
    "--classes",
    "as_classes",
    is_flag=True,
    help="Store the job as its rank classes: one trace per pipeline stage plus PREFIX.classes.json "
    "(every command reads it; `tracekit expand` writes the per-rank files).",
)
@click.option(
    "--memory",
    "show_memory",
    is_flag=True,
    help="Print the peak memory per rank class (printed anyway with --hw, checked against its device's memory).",
)
@click.option("-o", "--output", "prefix", required=True, metavar="PREFIX", help="Output prefix: PREFIX.<rank>.et.")
@stack_options
@json_option()
def llm(
    model_name: str,
    layers: int | None,
    hidden: int | None,
    heads: int | None,
    kv_heads: int | None,
    ffn: int | None,
    seq: int | None,
    vocab: int | None,
    hw: str | None,
    cost: str,
    peak_tflops: float | None,
    mem_bw_gbps: float | None,
    as_classes: bool,
    show_memory: bool,
    prefix: str,
    as_json: bool,
    **parallel_options: Any,
) -> None:
    """Generate one training iteration of a transformer LLM, one trace per rank.

    Ranks follow Megatron-LM's order (tp fastest, then cp, dp, pp).  GEMM,
    attention and elementwise nodes carry FLOPs (num_ops) and bytes
    (tensor_size); with --hw also a duration calibrated against Megatron-LM
    (GEMM efficiency by shape, kernel and optimizer overheads; --cost
    roofline for the flat roofline), with --peak-tflops/--mem-bw-gbps a
    roofline duration.

    \b
    Example:
      tracekit generate llm --model gpt3-175b --tp 8 --pp 16 --dp 8 -o out/gpt3
      tracekit generate llm --model llama2-7b --tp 2 --pp 2 --ranks 16 --sp --zero 1 \\
          --schedule interleaved --virtual-stages 2 --global-batch 64 -o out/llama
    """
    hold_output_prefix(prefix)
    from tracekit.converters.generators.llm import write_llm

    model, default_batch = _model_spec(model_name, layers, hidden, heads, kv_heads, ffn, seq, vocab)
    stack = {k: parallel_options.pop(k) for k in STACK_OPTIONS}
    config = _llm_config(model, default_batch, **parallel_options)
    config = apply_stack_options(config, **stack, no_overlap=parallel_options["no_overlap"])
    _check_int64_sizes(
        config,
        model_name,
        {"--layers": layers, "--hidden": hidden, "--ffn": ffn, "--seq": seq, "--vocab": vocab},
    )
    roofline = roofline_from_options(hw, peak_tflops, mem_bw_gbps, config.dtype, cost, config)
    what = "writing rank classes" if as_classes else "writing ranks"
    paths = write_llm(
        config,
        prefix,
        roofline,
        classes=as_classes,
        progress=lambda items, total: progress(items, f"{model.name}: {what}", total=total),
    )
    _report(config, prefix, paths, as_classes, as_json, memory=_memory(config, hw, show_memory, as_json))


def _memory(config: LLMConfig, hw: str | None, show: bool, as_json: bool) -> dict[str, Any] | None:
    """The job's peak memory per rank class (:func:`tracekit.workloads.memory.memory_report`) against ``--hw``'s
    device, printed as a table on stdout unless ``--json``; None when none of ``--hw``, ``--memory``, ``--json``
    asks for it."""
    if hw is None and not show and not as_json:
        return None
    from tracekit.cli._common import out_console
    from tracekit.cli._memory import device_memory_of, render_memory
    from tracekit.workloads.memory import memory_report

    device = device_memory_of(hw)
    report = memory_report(config, device[1] if device else None)
    report["device"] = device[0] if device else None
    if not as_json:
        render_memory(out_console(), report, report["device"])
    return report


def _model_spec(
    model_name: str,
    layers: int | None,
    hidden: int | None,
    heads: int | None,
    kv_heads: int | None,
    ffn: int | None,
    seq: int | None,
    vocab: int | None,
) -> tuple[ModelSpec, int]:
    """The preset's :class:`~tracekit.workloads.config.ModelSpec` with the given overrides, and its global batch.

    Raises:
        ConfigError: an unknown preset or an invalid override.
    """
    import dataclasses

    from tracekit.workloads.config import preset

    model, default_batch = preset(model_name)
    overrides: dict[str, Any] = {
        k: v
        for k, v in (
            ("num_layers", layers),
            ("hidden_size", hidden),
            ("num_heads", heads),
            ("num_kv_heads", kv_heads),
            ("ffn_hidden_size", ffn),
            ("seq_length", seq),
            ("vocab_size", vocab),
        )
        if v is not None
    }
    return (dataclasses.replace(model, **overrides) if overrides else model), default_batch


def _llm_config(
    model: ModelSpec,
    default_batch: int,
    *,
    tp: int,
    pp: int,
    dp: int | None,
    cp: int,
    ep: int,
    num_ranks: int | None,
    global_batch: int | None,
    micro_batch: int,
    schedule: str,
    virtual_stages: int | None,
    microbatch_group_size: int | None,
    zero_stage: int,
    sequence_parallel: bool,
    recompute: str,
    dtype: str,
    bucket: str,
    no_overlap: bool,
) -> LLMConfig:
    """The :class:`~tracekit.workloads.config.LLMConfig` of the command's parallel and batch options.

    Raises:
        ConfigError: ``--dp`` disagreeing with ``--ranks``, a bad bucket size, or an invalid layout.
    """
    from tracekit.converters.generators.build import parse_size
    from tracekit.workloads.config import LLMConfig, ParallelSpec, world_to_dp

    if num_ranks is not None:
        implied = world_to_dp(num_ranks, tp=tp, pp=pp, cp=cp)
        if dp is not None and dp != implied:
            raise ConfigError(
                f"--dp {dp} disagrees with --ranks {num_ranks} / (tp {tp} x pp {pp} x cp {cp}) = {implied}"
            )
        dp = implied
    if virtual_stages is None:
        virtual_stages = 2 if schedule == "interleaved" else 1
    parallel = ParallelSpec(
        dp=1 if dp is None else dp,
        tp=tp,
        pp=pp,
        cp=cp,
        ep=ep,
        sequence_parallel=sequence_parallel,
        zero_stage=zero_stage,
        recompute=recompute,
        schedule=schedule,
        virtual_stages=virtual_stages,
        microbatch_group_size=microbatch_group_size,
        grad_bucket_bytes=parse_size(bucket),
        overlap_grad_reduce=not no_overlap,
    )
    batch = default_batch if global_batch is None else global_batch
    return LLMConfig(model, parallel, global_batch_size=batch, micro_batch_size=micro_batch, dtype=dtype)


#: Size options and the ModelSpec field each sets (the ones the op sizes grow with).
_SIZE_FIELDS = {
    "--seq": "seq_length",
    "--hidden": "hidden_size",
    "--ffn": "ffn_hidden_size",
    "--vocab": "vocab_size",
    "--layers": "num_layers",
}


def _check_int64_sizes(config: LLMConfig, model_name: str, given: dict[str, int | None]) -> None:
    """Refuse, before generating, sizes whose products overflow the traces' int64 fields (num_ops, tensor_size,
    comm_size): one line naming the option, its value, the node and field, and the largest value that fits.

    The option blamed is the first given size option (``--seq``, ``--hidden``, ``--ffn``, ``--vocab``,
    ``--layers``, ``--micro-batch``) whose preset value makes the job fit; when no single one does, all of them.

    Raises:
        ValueOutOfRange: exit 1 (a value of the right type outside its range, docs/cli.md).
    """
    from tracekit.cli._options import ValueOutOfRange
    from tracekit.converters.generators.build import INT64_MAX
    from tracekit.converters.generators.llm_limits import int64_overflow, largest_fitting, replace_model
    from tracekit.workloads.config import preset

    overflow = int64_overflow(config)
    if overflow is None:
        return
    preset_model = preset(model_name)[0]
    p = config.parallel
    units = {
        "--seq": p.cp * (p.tp if p.sequence_parallel else 1),
        "--hidden": config.model.num_heads,
        "--ffn": p.tp,
        "--vocab": 1,
        "--layers": p.pp * p.virtual_stages,
    }
    builders: dict[str, Callable[[int], LLMConfig]] = {
        name: functools.partial(replace_model, config, field)
        for name, field in _SIZE_FIELDS.items()
        if given.get(name) is not None
    }
    values = {name: int(given[name] or 0) for name in builders}
    if config.micro_batch_size > 1:  # keep the micro-batches per iteration: the global batch follows
        builders["--micro-batch"] = functools.partial(_with_micro_batch, config)
        values["--micro-batch"], units["--micro-batch"] = config.micro_batch_size, 1
    what = (
        f"node '{overflow.node_name}' would carry {overflow.field} {overflow.value}, above the int64 bound "
        f"2^63-1 = {INT64_MAX}"
    )
    for name, build in builders.items():
        reset = getattr(preset_model, _SIZE_FIELDS[name]) if name in _SIZE_FIELDS else 1
        if int64_overflow(build(reset)) is None:
            bound = largest_fitting(build, values[name], units[name])
            limit = f"; with the other options as given, {name} can be at most {bound}" if bound else ""
            raise ValueOutOfRange(f"{values[name]} is too large: {what}{limit}", param_hint=f"'{name}'")
    options = ", ".join(f"{name} {value}" for name, value in values.items()) or f"the preset {model_name!r}"
    raise ValueOutOfRange(f"{options} together are too large: {what}")


def _with_micro_batch(config: LLMConfig, micro_batch: int) -> LLMConfig:
    """``config`` with ``micro_batch`` sequences per micro-batch and as many micro-batches per iteration."""
    per_iteration = config.num_micro_batches * config.parallel.dp
    return dataclasses.replace(config, micro_batch_size=micro_batch, global_batch_size=micro_batch * per_iteration)


def _report(
    config: LLMConfig,
    prefix: str,
    paths: list[Path],
    as_classes: bool,
    as_json: bool,
    memory: dict[str, Any] | None = None,
) -> None:
    """What was written: a JSON document (``--json``, with the peak memory per rank class) or one line on stderr
    (nothing under ``-q``)."""
    if as_json:
        emit_json(
            {
                "prefix": prefix,
                "files": [str(p) for p in paths],
                "ranks": config.world_size,
                "classes": as_classes,
                "micro_batches": config.num_micro_batches,
                "memory": memory,
            }
        )
    elif as_classes:
        say(
            f"wrote {paths[0]}: {config.world_size} ranks in {config.parallel.pp} rank classes "
            f"({config.num_micro_batches} micro-batches per pipeline)"
        )
    else:
        say(f"wrote {len(paths)} trace(s): {path_span(paths)} ({config.num_micro_batches} micro-batches per pipeline)")


COMMANDS = [llm]
