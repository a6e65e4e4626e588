"""``tracekit generate dlrm``: one DLRM training iteration with sharded tables and data-parallel MLPs."""

from __future__ import annotations

import click

from tracekit.cli._common import CONTEXT_SETTINGS, hold_output_prefix
from tracekit.cli._options import COUNT, MEM_BW_GBPS, PEAK_TFLOPS, dtype_option, json_option, write_generated
from tracekit.errors import ConfigError


def _widths(text: str | None, what: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(w) for w in text.replace("-", ",").split(",") if w.strip())
    except ValueError:
        raise ConfigError(f"{what} {text!r}: expected widths like 512-256-128") from None


@click.command("dlrm", context_settings=CONTEXT_SETTINGS)
@click.option(
    "--model",
    "model_name",
    default="dlrm-mlperf",
    show_default=True,
    metavar="NAME",
    help="Preset: dlrm-mlperf or dlrm-small.",
)
@click.option("--ranks", "num_ranks", type=COUNT, required=True, help="Number of ranks.")
@click.option("--global-batch", type=COUNT, default=None, help="Samples per iteration (default: the preset's).")
@click.option("--tables", type=COUNT, default=None, help="Number of embedding tables.")
@click.option("--dim", type=COUNT, default=None, help="Embedding dimension.")
@click.option("--pooling", type=COUNT, default=None, help="Lookups per sample per table.")
@click.option("--bottom-mlp", default=None, metavar="W-W-...", help="Bottom MLP widths, e.g. 512-256-128.")
@click.option("--top-mlp", default=None, metavar="W-W-...", help="Top MLP widths, e.g. 1024-1024-512-256-1.")
@dtype_option(None, "Element type (default: fp32).")
@click.option("--hw", default=None, metavar="SPEC", help="Hardware spec (preset name or TOML) for roofline durations.")
@click.option(
    "--peak-tflops", type=PEAK_TFLOPS, default=None, help="Peak TFLOP/s for roofline durations (1e-6 to 1e6)."
)
@click.option(
    "--mem-bw-gbps", type=MEM_BW_GBPS, default=None, help="Memory bandwidth GB/s for roofline durations (1e-6 to 1e9)."
)
@click.option("-o", "--output", "prefix", required=True, metavar="PREFIX", help="Output prefix: PREFIX.<rank>.et.")
@json_option()
def dlrm(
    model_name: str,
    num_ranks: int,
    global_batch: int | None,
    tables: int | None,
    dim: int | None,
    pooling: int | None,
    bottom_mlp: str | None,
    top_mlp: str | None,
    dtype: str | None,
    hw: str | None,
    peak_tflops: float | None,
    mem_bw_gbps: float | None,
    prefix: str,
    as_json: bool,
) -> None:
    """Generate one DLRM training iteration: tables sharded round robin, all-to-all, data-parallel MLPs.

    \b
    Example:
      tracekit generate dlrm --ranks 16 -o out/dlrm
      tracekit generate dlrm --model dlrm-small --ranks 4 --pooling 8 --hw dgx-a100 -o out/small
    """
    hold_output_prefix(prefix)
    from tracekit.cli.generate_llm import roofline_from_options
    from tracekit.converters.generators.dlrm import dlrm_preset, generate_dlrm

    config = dlrm_preset(
        model_name,
        num_ranks,
        global_batch_size=global_batch,
        num_tables=tables,
        embedding_dim=dim,
        pooling_factor=pooling,
        bottom_mlp=_widths(bottom_mlp, "--bottom-mlp"),
        top_mlp=_widths(top_mlp, "--top-mlp"),
        dtype=dtype,
    )
    roofline = roofline_from_options(hw, peak_tflops, mem_bw_gbps, config.dtype)
    traceset = generate_dlrm(config, roofline)
    write_generated(traceset, prefix, as_json)


COMMANDS = [dlrm]
