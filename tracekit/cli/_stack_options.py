"""``generate llm --stack NAME --stack-knob KNOB=VALUE``: the training software stack and its single knobs.

The stacks and knobs themselves live in :mod:`tracekit.workloads.stacks`; this module parses the options and
applies them to an :class:`~tracekit.workloads.config.LLMConfig`.
"""

from __future__ import annotations

from typing import Any, Callable

import click

from tracekit.errors import ConfigError

STACK_OPTIONS = ("stack_name", "stack_knobs")
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def stack_options(f: Callable) -> Callable:
    """Add ``--stack`` and ``--stack-knob`` (stored as ``stack_name``, ``stack_knobs``)."""
    f = click.option(
        "--stack-knob",
        "stack_knobs",
        multiple=True,
        metavar="KNOB=VALUE",
        help="Set one stack knob (repeatable): fused_attention, tp_comm_overlap, tp_dgrad_overlap, "
        "overlap_param_gather, overlap_grad_reduce = true/false; cp_comm = ring/allgather; "
        "fp8_recipe = transformer-engine/all.",
    )(f)
    return click.option(
        "--stack",
        "stack_name",
        default=None,
        metavar="NAME",
        help="Training software stack: megatron-2021 (the default mechanisms), megatron-core, nemo, deepspeed "
        "(tracekit/workloads/stacks.py lists what each runs, with sources).",
    )(f)


def _value(knob: str, text: str) -> Any:
    if knob in ("cp_comm", "fp8_recipe"):  # the knobs that take a name; the others are flags
        from tracekit.workloads.stacks import CP_COMM, FP8_RECIPES

        names = CP_COMM if knob == "cp_comm" else FP8_RECIPES
        if text.strip() not in names:
            raise ConfigError(f"--stack-knob {knob}={text}: expected one of {', '.join(names)}")
        return text.strip()
    if knob == "tp_overlap_comm_sms":  # the knob that takes a count
        if not text.strip().isdigit():
            raise ConfigError(f"--stack-knob {knob}={text}: expected a non-negative integer")
        return int(text.strip())
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ConfigError(f"--stack-knob {knob}={text}: expected true or false")


def parse_knobs(knobs: tuple[str, ...]) -> dict[str, Any]:
    """``{knob: value}`` of ``--stack-knob KNOB=VALUE`` options.

    Raises:
        ConfigError: no ``=``, an unknown knob, or a flag value other than true/false (the message names it).
    """
    from tracekit.workloads.stacks import knob_names

    out: dict[str, Any] = {}
    for item in knobs:
        knob, sep, text = item.partition("=")
        knob = knob.strip().replace("-", "_")
        if not sep:
            raise ConfigError(f"--stack-knob {item!r}: expected KNOB=VALUE")
        if knob not in knob_names():
            raise ConfigError(f"--stack-knob {item!r}: unknown knob; knobs: {', '.join(knob_names())}")
        out[knob] = _value(knob, text)
    return out


def apply_stack_options(config: Any, stack_name: str | None, stack_knobs: tuple[str, ...], no_overlap: bool) -> Any:
    """``config`` with the stack (default: Megatron-LM 2021's mechanisms, and the gradient overlap the
    command's ``--no-overlap`` says) and the knobs applied; ``--no-overlap`` always wins.

    Raises:
        ConfigError: an unknown stack or knob, or an invalid combination.
    """
    from dataclasses import replace

    from tracekit.workloads.stacks import apply_stack

    knobs = parse_knobs(stack_knobs)
    if stack_name is None:
        knobs.setdefault("overlap_grad_reduce", config.parallel.overlap_grad_reduce)
    config = apply_stack(config, stack_name or "megatron-2021", **knobs)
    if no_overlap:
        config = replace(config, parallel=replace(config.parallel, overlap_grad_reduce=False))
    return config
