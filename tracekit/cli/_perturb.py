"""``tracekit replay --perturb ... [--samples N]``: reading the perturbation and printing the samples."""

from __future__ import annotations

from typing import Any

import click

from tracekit.cli._options import IntRange, emit_json, executor_options

PERTURB_HELP = (
    "Perturb the replay (repeatable): slow=RANKS:F (compute x F), delay=NODE:TIME, link=RANK/DIM:F|down, "
    "jitter=compute:SIGMA, jitter=comm:SIGMA, seed=N, or a TOML file with a [perturb] table. A --hw TOML file's "
    "[perturb] table applies too."
)
SAMPLES_HELP = "Run N seeded perturbed replays (seeds seed..seed+N-1); print the step-time median, p90, p99."


def perturb_options(f: Any) -> Any:
    """``--perturb``, ``--samples`` and the executor options (samples run on the local pool or Ray)."""
    f = executor_options(f)
    f = click.option("--samples", type=IntRange(1, 1_000_000), default=None, metavar="N", help=SAMPLES_HELP)(f)
    return click.option("--perturb", "perturb_items", multiple=True, metavar="ITEM", help=PERTURB_HELP)(f)


def read_perturbation(hw: str, items: tuple[str, ...]) -> Any:
    """The perturbation of a spec file's ``[perturb]`` table (when ``hw`` is one) plus ``--perturb`` items."""
    from tracekit.replayer.simulation.perturb_spec import parse_perturbation

    base = None
    if hw.endswith(".toml"):
        import tomllib

        try:
            with open(hw, "rb") as fh:
                table = tomllib.load(fh).get("perturb")
        except (OSError, ValueError, RecursionError):  # TOMLDecodeError is a ValueError
            table = None  # load_spec reports an unreadable or malformed spec itself
        if isinstance(table, dict):
            from tracekit.replayer.simulation.perturb_spec import perturbation_from_table

            base = perturbation_from_table(table, where=hw)
    return parse_perturbation(items, base)


def check_samples(samples: int, pert: Any, *outputs: Any) -> None:
    """Refuse ``--samples N`` with outputs it does not write or without jitter (N identical replays).

    ``outputs``: the values of ``-o``, ``--timeline-out``, ``--html-out``, ``--with-schedule``, ``--per-rank``.

    Raises:
        click.UsageError: naming the option (exit 2).
    """
    names = ("-o", "--timeline-out", "--html-out", "--with-schedule", "--per-rank")
    given = [name for name, value in zip(names, outputs) if value]
    if given:
        raise click.UsageError(
            f"--samples {samples} prints the step-time distribution only; {given[0]} belongs to a single replay "
            "(drop --samples for it)"
        )
    if pert is None or not pert.random:
        raise click.UsageError(
            f"--samples {samples}: the perturbation has no jitter (--perturb jitter=compute:SIGMA or "
            "jitter=comm:SIGMA), so every sample would be the same replay"
        )


def run_samples(traces: Any, hw: str, options: Any, pert: Any, samples: int, **kw: Any) -> None:
    """Run the samples and print their distribution (JSON with ``as_json``); ``kw``: executor, workers, address."""
    from tracekit.cli._common import out_console
    from tracekit.cli._render import _fmt_ns
    from tracekit.replayer.orchestration.samples import sample_replays

    as_json = kw.pop("as_json")
    executor = "serial" if kw["executor"] == "auto" else kw["executor"]
    summary = sample_replays(
        traces, hw, pert, samples, options=options, executor=executor, workers=kw["workers"], address=kw["address"]
    )
    if as_json:
        emit_json(summary.to_dict())
        return
    console = out_console()
    d = summary.to_dict()
    console.print(
        f"{d['samples']} perturbed replays (seeds {pert.seed}..{pert.seed + samples - 1}) in {summary.seconds:.1f} s: "
        f"step time median {_fmt_ns(d['median_ns'])}, p90 {_fmt_ns(d['p90_ns'])}, p99 {_fmt_ns(d['p99_ns'])} "
        f"(min {_fmt_ns(d['min_ns'])}, max {_fmt_ns(d['max_ns'])})",
        soft_wrap=True,
    )
    console.print(waited_on_line(summary.waited_on, summary.communications * samples), soft_wrap=True)


def waited_on_line(waited_on: Any, total: int) -> str:
    """The summary's last line: the ranks the others waited on, with their share of the ``total`` communications
    (of >= 2 members, over all samples); says so when there was none, or when no member ever arrived last."""
    if not total:
        return "waited on: nothing (no communication with two or more members)"
    if not waited_on:
        return f"waited on: no rank (the members of all {total:,} communications arrived together)"
    top = ", ".join(f"rank {r} {c / total:.1%}" for r, c in waited_on[:8])
    return f"waited on (last to arrive, share of {total:,} communications): {top}"
