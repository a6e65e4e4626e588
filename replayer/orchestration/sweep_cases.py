"""Sweep axes and cases: parsing ``key=v1,v2,...`` and building every variant spec before any replay.

The keys an axis may name are listed in :mod:`.sweep`'s module doc. Every variant is built and validated here,
in the calling process, through the same TOML schema checks as a spec file, so a bad value fails at once with a
:class:`~tracekit.errors.SpecError` naming the key.
"""

from __future__ import annotations

import itertools
import math
import os
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

from tracekit.errors import ConfigError, SpecError
from tracekit.fmt import fmt_ns

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer import ReplayOptions
    from tracekit.replayer.simulation.hardware import HardwareSpec

HW_KEY = "hw"
#: The axis of ``--compute`` (auto, measured, roofline, projected: :data:`.projected.COMPUTE_CHOICES`), the one
#: timing rule of replay and sweep; ``compute.mode`` with those values is the same axis.
COMPUTE_KEY = "compute"
_ALIASES = {"collective_model": "collectives.model"}
_OPTION_FIELDS = ("collective_model", "compute_scale", "streams")
_STEP_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\[(\d+)\])?$")


# ----------------------------------------------------------------------------- axes
@dataclass(frozen=True)
class SweepAxis:
    """One swept parameter.

    Attributes:
        key: ``hw``, a spec TOML key path (``network[1].bandwidth_gbps``) or
            ``options.<ReplayOptions field>``; aliases resolved by :func:`parse_vary`.
        values: the values in sweep order (strings from the CLI are converted
            to the key's type when the variant is built).
    """

    key: str
    values: tuple[Any, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise ConfigError(f"sweep parameter {self.key!r} has no values")
        if len(set(map(repr, self.values))) != len(self.values):
            raise ConfigError(f"sweep parameter {self.key!r} lists a value twice: {list(self.values)}")


def parse_vary(text: str) -> SweepAxis:
    """``"network[1].bandwidth_gbps=25,50,100"`` -> :class:`SweepAxis` (values kept as strings).

    Raises:
        ConfigError: no ``=``, an empty key or value, or a malformed key path.
    """
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--vary {text!r}: expected KEY=V1,V2,... (e.g. network[1].bandwidth_gbps=25,50,100)")
    items = [v.strip() for v in values.split(",")]
    if not values.strip() or any(not v for v in items):
        raise ConfigError(f"--vary {text!r}: empty value in the list")
    key = _ALIASES.get(key, key)
    if key in (COMPUTE_KEY, "compute.mode"):
        key = _compute_axis_key(text, key, items)
    _key_steps(key)  # syntax check now
    return SweepAxis(key, tuple(items))


def _compute_axis_key(text: str, key: str, items: list[str]) -> str:
    """``compute`` for an axis of ``--compute`` choices; ``compute.mode`` (the spec's key) for its own modes.

    Raises:
        ConfigError: values of both kinds in one axis, or a value of neither.
    """
    from tracekit.replayer.orchestration.projected import COMPUTE_CHOICES

    modes = ("measured", "roofline", "astra")  # the spec's compute.mode values (hardware.ComputeSettings)
    if all(v in COMPUTE_CHOICES for v in items):
        return COMPUTE_KEY
    if key == "compute.mode" and all(v in modes for v in items):
        return key
    raise ConfigError(
        f"--vary {text!r}: {key} takes the --compute choices {', '.join(COMPUTE_CHOICES)}"
        + (" (or the spec modes measured, roofline, astra, in an axis of their own)" if key != COMPUTE_KEY else "")
    )


def _key_steps(key: str) -> list[tuple[str, int | None]]:
    if key in (HW_KEY, COMPUTE_KEY):
        return []
    steps = []
    for part in key.split("."):
        m = _STEP_RE.match(part)
        if not m:
            raise ConfigError(f"sweep parameter {key!r}: bad key part {part!r} (expected name or name[index])")
        steps.append((m.group(1), None if m.group(2) is None else int(m.group(2))))
    if steps[0][0] == "options":
        if len(steps) != 2 or steps[1][0] not in _OPTION_FIELDS or steps[1][1] is not None:
            raise ConfigError(
                f"sweep parameter {key!r}: replay options that can vary are "
                f"{', '.join('options.' + f for f in _OPTION_FIELDS)}"
            )
    return steps


def _convert(text: Any, like: Any, key: str) -> Any:
    """A CLI string converted to the type of the value it replaces (``like``); non-strings pass through."""
    if not isinstance(text, str) or isinstance(like, str):
        return text
    low = text.lower()
    try:
        if isinstance(like, bool) or (like is None and low in ("true", "false")):
            if low not in ("true", "false"):
                raise ValueError
            return low == "true"
        if isinstance(like, int) or like is None:
            try:
                return int(text)
            except ValueError:
                if isinstance(like, int):
                    raise
        if isinstance(like, (int, float)) or like is None:
            value = float(text)
            if not math.isfinite(value):
                raise ValueError
            return value
    except ValueError:
        if like is None:
            return text
        raise ConfigError(f"sweep parameter {key}: {text!r} is not a {type(like).__name__}") from None
    return text


def _set_path(doc: dict[str, Any], key: str, raw: Any, spec_label: str) -> Any:
    """Set ``key`` in the spec document ``doc``; returns the converted value."""
    steps = _key_steps(key)
    node: Any = doc
    for depth, (name, index) in enumerate(steps):
        last = depth == len(steps) - 1
        if not isinstance(node, dict):
            raise ConfigError(
                f"sweep parameter {key}: {'.'.join(s for s, _ in steps[:depth])} is not a table in spec {spec_label}"
            )
        if index is not None:
            seq = node.get(name)
            if not isinstance(seq, list):
                raise ConfigError(f"sweep parameter {key}: spec {spec_label} has no list {name!r}")
            if index >= len(seq):
                raise ConfigError(
                    f"sweep parameter {key}: spec {spec_label} has {len(seq)} {name} entries "
                    f"(indexes 0..{len(seq) - 1}) for this trace set"
                )
            if last:
                raise ConfigError(
                    f"sweep parameter {key}: cannot replace the whole {name}[{index}] entry; name one of its keys"
                )
            node = seq[index]
            continue
        if last:
            value = _convert(raw, node.get(name), key)
            node[name] = value
            return value
        node = node.setdefault(name, {})
    raise ConfigError(f"sweep parameter {key}: empty key")  # pragma: no cover (syntax checked)


# ----------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class SweepCase:
    """One point of the sweep, ready to replay.

    Attributes:
        index: position in the sweep (the first axis varies slowest).
        params: ``((key, value), ...)`` in axis order; values converted.
        spec: the variant, fitted to the trace set's world size.
        options: the replay options of this point.
        compute: how compute is timed (``replay --compute``: auto, measured, roofline, projected).
        capture_device: the device the trace was measured on, when it does not say (``--capture-device``).
    """

    index: int
    params: tuple[tuple[str, Any], ...]
    spec: "HardwareSpec"
    options: "ReplayOptions"
    compute: str = "auto"
    capture_device: str | None = None


def build_cases(
    specs: Sequence["HardwareSpec | str | os.PathLike[str]"],
    axes: Sequence[SweepAxis],
    world_size: int,
    *,
    options: "ReplayOptions | None" = None,
    compute: str = "auto",
    capture_device: str | None = None,
) -> list[SweepCase]:
    """The sweep's points: every base spec x the product of ``axes``.

    Args:
        specs: base specs (objects, preset names or TOML paths); more than one
            adds an ``hw`` axis in front.  An ``hw`` entry in ``axes`` is
            the same thing (give one or the other).
        axes: parameters to vary.
        world_size: ranks of the trace set (specs are fitted to it first).
        options: base replay options (``options.*`` axes override fields).
        compute, capture_device: how compute is timed (a ``compute`` axis overrides ``compute``), as in
            :func:`~tracekit.replayer.orchestration.projected.replay_with_compute`.

    Raises:
        ConfigError: no spec, an axis key given twice, a key that does not
            exist in a variant (e.g. ``network[2]`` on a two-dimension spec),
            a value of the wrong type.
        SpecError: a variant fails the spec checks (names the key), or a spec
            cannot have ``world_size`` ranks.
    """
    from tracekit.replayer import ReplayOptions
    from tracekit.replayer.simulation.hardware import HardwareSpec
    from tracekit.replayer.simulation.specs import spec_from_dict

    options = options or ReplayOptions()
    axes = list(axes)
    loaded = _base_specs(specs, axes, world_size)
    base_labels = list(loaded)

    cases = []
    grid = itertools.product(*[a.values for a in axes]) if axes else [()]
    for index, combo in enumerate(grid):
        chosen = dict(zip([a.key for a in axes], combo))
        label = chosen.get(HW_KEY, base_labels[0])
        label = label.name if isinstance(label, HardwareSpec) else os.fspath(label)
        base = loaded[label]
        doc = base.to_dict()
        params, case_options = _point(chosen, label, base, doc, options)
        where = ", ".join(f"{k}={v}" for k, v in params) or "base spec"
        spec_changed = any(k not in (HW_KEY, COMPUTE_KEY) and not k.startswith("options.") for k in chosen)
        try:
            spec = spec_from_dict(doc, path=base.path) if spec_changed else base
        except SpecError as exc:
            raise SpecError(f"sweep point {index} ({where}): {exc.message}", path=exc.path) from None
        _check_models(spec, case_options, world_size, index, where)
        if spec.world_size != world_size:
            raise SpecError(
                f"sweep point {index} ({where}): the variant has {spec.world_size} ranks but the "
                f"trace set has {world_size}",
                path=base.path,
            )
        point_compute = chosen.get(COMPUTE_KEY, compute)
        cases.append(SweepCase(index, tuple(params), spec, case_options, point_compute, capture_device))
    return cases


def _base_specs(
    specs: Sequence["HardwareSpec | str | os.PathLike[str]"], axes: list[SweepAxis], world_size: int
) -> dict[str, "HardwareSpec"]:
    """Label -> base spec fitted to ``world_size``, in order; several base specs add an ``hw`` axis to ``axes``.

    Raises:
        ConfigError: an axis key given twice, specs given both ways, no spec, or a spec listed twice.
        SpecError: a spec cannot be loaded or cannot have ``world_size`` ranks.
    """
    from tracekit.replayer.simulation.hardware import HardwareSpec
    from tracekit.replayer.simulation.specs import load_spec

    keys = [a.key for a in axes]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise ConfigError(f"sweep parameter given twice: {', '.join(dupes)}")
    hw_axis = next((a for a in axes if a.key == HW_KEY), None)
    if hw_axis is not None:
        if len(specs) > 0 and list(specs) != list(hw_axis.values):
            raise ConfigError("give the hardware specs either as the base specs or as an 'hw' axis, not both")
        specs = list(hw_axis.values)
    elif len(specs) > 1:
        axes.insert(
            0, SweepAxis(HW_KEY, tuple(os.fspath(s) if not isinstance(s, HardwareSpec) else s.name for s in specs))
        )
    if not specs:
        raise ConfigError("a sweep needs at least one hardware spec")
    loaded = {}
    for s in specs:
        spec = s if isinstance(s, HardwareSpec) else load_spec(s)
        label = s.name if isinstance(s, HardwareSpec) else os.fspath(s)
        loaded[label] = spec.fitted(world_size)
    if len(loaded) != len(specs):
        raise ConfigError("a hardware spec is listed twice in the sweep")
    return loaded


def _point(
    chosen: dict[str, Any], label: str, base: "HardwareSpec", doc: dict[str, Any], options: "ReplayOptions"
) -> tuple[list[tuple[str, Any]], "ReplayOptions"]:
    """One sweep point's ``(key, value)`` parameters and replay options; spec keys are set in ``doc``.

    Raises:
        ConfigError: a key that does not exist in the variant, or a value of the wrong type.
    """
    case_options = options
    params: list[tuple[str, Any]] = []
    for key, raw in chosen.items():
        if key in (HW_KEY, COMPUTE_KEY):
            params.append((key, label if key == HW_KEY else raw))
        elif key.startswith("options."):
            name = key.split(".", 1)[1]
            value = (
                _convert(raw, getattr(case_options, name), key) if name != "compute_scale" else _convert(raw, 1.0, key)
            )
            case_options = replace(case_options, **{name: value})
            params.append((key, value))
        else:
            params.append((key, _set_path(doc, key, raw, repr(base.name))))
    return params, case_options


def _check_models(spec: "HardwareSpec", options: "ReplayOptions", world_size: int, index: int, where: str) -> None:
    """Build the point's collective model now, so a missing ``[astra]`` table fails before any replay."""
    from tracekit.replayer.simulation.program import effective_spec
    from tracekit.replayer.simulation.collective_models import make_collective_model

    if options.collective_model == "measured":
        return
    try:
        make_collective_model(effective_spec(spec, options, world_size))
    except SpecError as exc:
        raise SpecError(f"sweep point {index} ({where}): {exc.message}", path=exc.path) from None


_BANDWIDTH_KEY_RE = re.compile(r"^network\[(\d+)\]\.bandwidth_gbps$")


def bandwidth_notes(cases: Sequence[SweepCase], world_size: int) -> tuple[str, ...]:
    """One line per swept ``network[i].bandwidth_gbps`` that the nccl model does not use in full.

    NCCL runs whole channels at fixed per-channel speeds, so a swept NIC bandwidth counts in steps (50 GB/s:
    one channel of 48), and inside a node the ring runs at most ``channels x per_channel_bw_gbps``
    (:meth:`~tracekit.replayer.simulation.nccl_model.NcclModel.dimension_use`); once a node's NICs carry more
    than its ring inside the node, rings across nodes stop gaining. A sweep says so instead of showing flat
    rows without a reason.

    Returns:
        lines such as ``nccl model: network[1].bandwidth_gbps ...: 50 -> 48 (1 x 48), ... GB/s``; empty when no
        point uses the nccl model or every swept value is used in full.
    """
    from tracekit.replayer.simulation.nccl_model import NcclModel
    from tracekit.replayer.simulation.program import effective_spec

    steps: dict[str, list[str]] = {}
    bound: dict[str, str] = {}
    for case in cases:
        spec = effective_spec(case.spec, case.options, world_size)
        if spec.collective_model != "nccl":
            continue
        model = NcclModel(spec)
        for key, value in case.params:
            m = _BANDWIDTH_KEY_RE.match(key)
            if m is None or int(m.group(1)) >= len(spec.network):
                continue
            d = int(m.group(1))
            used, how = model.dimension_use(d)
            points = steps.setdefault(key, [])
            shown = f"{float(value):g} -> {used:g}" + (f" ({how})" if how else "")
            if used < float(value) * (1 - 1e-12) and shown not in points:
                points.append(shown)
            ring = model.dimension_use(0)[0]
            if d and key not in bound and model.rails() * used >= ring:
                bound[key] = (
                    f"nccl model: from {key} = {float(value):g} on, a node's {model.rails()} NICs "
                    f"({model.rails()} x {used:g} GB/s) carry at least its ring inside the node ({ring:g} GB/s), "
                    f"which then bounds rings across nodes"
                )
    lines = [
        f"nccl model: {key} {_HOW[key.startswith('network[0]')]}: {', '.join(p)} GB/s" for key, p in steps.items() if p
    ]
    return (*lines, *bound.values())


_HOW = {
    True: "is used up to channels x per_channel_bw_gbps (the ring inside a node)",
    False: "is used as whole channels per NIC at NCCL's per-channel speeds (search.cc speedArrayInter)",
}


def unused_key_notes(rows: Sequence[Any], parameters: Sequence[str]) -> tuple[str, ...]:
    """One line per swept spec key that moved no point's iteration time: the chosen model does not use it here.

    Whether a model reads a field is taken from the replays themselves, not from a list kept beside the models:
    for each spec key swept (not ``hw``, ``compute`` or an ``options.*`` key) the rows are grouped by every
    other parameter; when each group has one iteration time for all the key's values, the key is reported as
    unused by the groups' collective models (``network[0].latency_ns`` under ``nccl``, whose collectives take
    NCCL's latency table, or any field a job's time does not depend on). A key that moves any group is used.

    Args:
        rows: the sweep's :class:`~.sweep.SweepRow` objects (``params``, ``collective_model``,
            ``iteration_time_ns``).
        parameters: the axis keys, in order.

    Returns:
        lines such as ``network[0].latency_ns = 100, 1e+05 did not move the iteration time under the nccl
        collective model: it is unused by that model for this job``; empty when every swept key moves it.
        A key that moved the slowest rank's communication time but no iteration time is said to be so (the
        model uses it; the communication overlaps compute), not called unused.
    """
    notes = []
    for key in parameters:
        if key in (HW_KEY, COMPUTE_KEY) or key.startswith("options."):
            continue
        groups: dict[tuple[Any, ...], set[int]] = {}
        comm: dict[tuple[Any, ...], set[int]] = {}
        values: list[Any] = []
        models: list[str] = []
        for row in rows:
            params = dict(row.params)
            if params[key] not in values:
                values.append(params[key])
            if row.collective_model not in models:
                models.append(row.collective_model)
            rest = tuple((k, repr(v)) for k, v in row.params if k != key)
            groups.setdefault(rest, set()).add(row.iteration_time_ns)
            comm.setdefault(rest, set()).add(row.comm_ns)
        if len(values) > 1 and all(len(times) == 1 for times in groups.values()):
            shown = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)
            moved = [times for times in comm.values() if len(times) > 1]
            if moved:  # the model reads the key; the job's communication is hidden behind compute
                low, high = min(min(t) for t in moved), max(max(t) for t in moved)
                notes.append(
                    f"{key} = {shown} did not move the iteration time: it moved the slowest rank's communication "
                    f"({fmt_ns(low)} to {fmt_ns(high)}), which overlaps compute off the critical path"
                )
                continue
            notes.append(
                f"{key} = {shown} did not move the iteration time under the {' / '.join(models)} collective "
                f"model{'s' if len(models) > 1 else ''}: it is unused by {'them' if len(models) > 1 else 'it'} "
                "for this job"
            )
    return tuple(notes)
