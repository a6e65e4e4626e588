"""``tracekit generate micro``: collective, send/recv and Chakra-shape microbenchmarks."""

from __future__ import annotations

import click

from tracekit.cli._common import CONTEXT_SETTINGS, hold_output_prefix
from tracekit.cli._options import FloatRange, emit_json, json_option, write_generated
from tracekit.errors import ConfigError


from tracekit.model import check_rank_count

#: Repetitions a microbenchmark may have: each adds nodes to every rank, and a job beyond this is a typo.
MAX_ITERATIONS = 1_000_000


@click.command("micro", context_settings=CONTEXT_SETTINGS)
@click.option(
    "--collective",
    default=None,
    metavar="NAME",
    help="all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, gather, scatter, "
    "reduce_scatter_block or barrier.",
)
@click.option(
    "--pattern",
    default=None,
    type=click.Choice(["ring", "pairwise", "pingpong"]),
    help="Send/recv pattern instead of a collective.",
)
@click.option(
    "--shape",
    default=None,
    metavar="NAME",
    help="A fixed Chakra et_generator shape (e.g. one_comm_coll_node_allreduce); --list-shapes.",
)
@click.option("--list-shapes", is_flag=True, help="Print the shape names and exit.")
@click.option(
    "--size",
    default=None,
    metavar="SIZE",
    help="Bytes per rank (collective) or per message: 4096, 64KiB, 64MiB (2^20), 1GB (10^9).",
)
@click.option("--ranks", "num_ranks", type=int, default=None, help="Number of ranks in the job.")
@click.option("--group", default=None, metavar="RANKS", help="Member ranks, e.g. 0-3 or 0,2,4,6 (default all).")
@click.option(
    "--compute-us",
    type=FloatRange(0, 1e12),
    default=0.0,
    show_default=True,
    help="Compute node (microseconds, 0 to 1e12) before each iteration's communication.",
)
@click.option("--iterations", type=int, default=1, show_default=True, help="Repetitions, one after another.")
@click.option(
    "--moe-skew",
    type=FloatRange(0, 1e6),
    default=0.0,
    show_default=True,
    help="all_to_all only: MoE token-routing imbalance, Zipf exponent of the experts' (ranks') shares; 0 = even.",
)
@click.option(
    "-o",
    "--output",
    "prefix",
    default=None,
    metavar="PREFIX",
    help="Output prefix: PREFIX.<rank>.et (required unless --list-shapes).",
)
@json_option()
def micro(
    collective: str | None,
    pattern: str | None,
    shape: str | None,
    list_shapes: bool,
    size: str | None,
    num_ranks: int | None,
    group: str | None,
    compute_us: float,
    iterations: int,
    moe_skew: float,
    prefix: str | None,
    as_json: bool,
) -> None:
    """Generate a microbenchmark: one collective, a send/recv pattern, or a fixed small shape.

    \b
    Example:
      tracekit generate micro --collective all_reduce --size 64MiB --ranks 8 -o out/ar
      tracekit generate micro --pattern ring --size 1MiB --ranks 4 --iterations 10 -o out/ring
      tracekit generate micro --collective all_to_all --size 16MiB --ranks 8 --moe-skew 1 -o out/moe
      tracekit generate micro --shape two_comp_nodes_dependent --ranks 2 -o out/shape
    """
    from tracekit.converters.generators import micro as gen

    if list_shapes:
        if as_json:
            emit_json(list(gen.CHAKRA_SHAPES))
        else:
            click.echo("\n".join(gen.CHAKRA_SHAPES))
        return
    num_ranks, prefix = _check_options(collective, pattern, shape, num_ranks, iterations, prefix, compute_us)
    hold_output_prefix(prefix)
    from tracekit.converters.generators.build import parse_ranks

    compute_ns = round(compute_us * 1000)
    members = parse_ranks(group) if group is not None else None
    if shape is not None:
        if members is not None or iterations != 1:
            raise ConfigError("--group and --iterations do not apply to --shape")
        kwargs = {"comm_bytes": _size_bytes(size)} if size is not None else {}
        if compute_ns:
            kwargs["duration_ns"] = compute_ns
        traceset = gen.chakra_shape(shape, num_ranks, **kwargs)
    else:
        if size is None:
            raise ConfigError("--size is required with --collective and --pattern")
        nbytes = _size_bytes(size)
        if collective is not None:
            traceset = gen.collective_bench(
                num_ranks,
                collective,
                nbytes,
                group=members,
                compute_ns=compute_ns,
                iterations=iterations,
                moe_skew=moe_skew,
            )
        else:
            traceset = gen.send_recv_bench(
                num_ranks, pattern, nbytes, group=members, compute_ns=compute_ns, iterations=iterations
            )
    write_generated(traceset, prefix, as_json)


def _size_bytes(size: str) -> int:
    """``--size`` in bytes, at most 2^63-1 (a Chakra ``comm_size`` is an int64).

    Raises:
        ConfigError: naming ``--size``: not a size, or too large.
    """
    from tracekit.converters.generators.build import parse_size

    try:
        nbytes = int(parse_size(size))
    except ConfigError as exc:
        raise ConfigError(f"--size {size}: {exc.message}") from None
    if nbytes > 2**63 - 1:
        raise ConfigError(f"--size {size}: {nbytes:,} bytes; a Chakra comm_size holds at most 2^63-1 bytes")
    return nbytes


def _check_options(
    collective: str | None,
    pattern: str | None,
    shape: str | None,
    num_ranks: int | None,
    iterations: int,
    prefix: str | None,
    compute_us: float,
) -> tuple[int, str]:
    """``(num_ranks, prefix)`` once both are given; ConfigError naming the option for combinations and values
    ``micro`` cannot run."""
    chosen = [
        name
        for name, value in (("--collective", collective), ("--pattern", pattern), ("--shape", shape))
        if value is not None
    ]
    if len(chosen) != 1:
        raise ConfigError(
            "give exactly one of --collective, --pattern or --shape"
            + (f" (got {' and '.join(chosen)})" if chosen else "")
        )
    if num_ranks is None:
        raise ConfigError("--ranks is required")
    check_rank_count(num_ranks, "generate micro --ranks")
    if not 1 <= iterations <= MAX_ITERATIONS:
        raise ConfigError(f"--iterations {iterations:,} is out of range (1 to {MAX_ITERATIONS:,})")
    if prefix is None:
        raise ConfigError("-o/--output is required")
    if compute_us < 0:
        raise ConfigError(f"--compute-us must not be negative, got {compute_us}")
    return num_ranks, prefix


COMMANDS = [micro]
