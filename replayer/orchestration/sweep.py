"""Replay sweeps: one trace set replayed on many hardware variants, results as one table.

A sweep is the cartesian product of *axes*.  Each axis is a key and a list of
values (:class:`SweepAxis`, parsed from ``key=v1,v2,...`` by
:func:`parse_vary`):

==============================  ==================================================================
``hw``                          whole specs: preset names or TOML paths (``--hw`` given twice)
``network[1].bandwidth_gbps``   any key of the spec's TOML form (see :mod:`.hardware`), with
``compute.duration_scale``      ``[i]`` indexing the ``[[network]]`` dimensions of the spec
``device.mem_bandwidth_gbps``   *fitted* to the trace set's world size (so ``network[1]`` is the
``collectives.model``           scale-out dimension of dgx-h100 with 64 ranks: 8 x 8)
``collective_model``            alias of ``collectives.model``
``options.<field>``             a :class:`~tracekit.replayer.ReplayOptions` field
                                (``options.collective_model=measured``, ``options.streams=single``)
==============================  ==================================================================

Every variant is built and validated in the calling process before any
replay starts (:func:`build_cases`), through the same TOML schema checks as a
spec file, so a bad value fails at once with a :class:`~tracekit.errors.SpecError`
naming the key.

Each point replays in a worker through :func:`tracekit.parallel.parallel_map`
(local process pool by default, Ray with ``executor="ray"``).  Workers do not
receive the trace set with every task: a trace set given as a path is read by
each worker once and kept for its next points; an in-memory trace set is
written once to a temporary directory (process pool) or put once into Ray's
object store (``ray.put``), and each worker reads or fetches it once.  On a
multi-node Ray cluster a *path* must be on a file system every node sees;
pass a :class:`~tracekit.traceset.TraceSet` to ship it through the object
store instead.

Results come back as a :class:`SweepResult`: one :class:`SweepRow` per point
(parameters, iteration time, the slowest rank's breakdown, critical-path
split), written by :func:`write_sweep` as CSV, JSON and an HTML plot (the
report's :func:`~tracekit.replayer.reporting.plots.sweep_figure`).  Replays are
deterministic, so the same sweep gives the same numbers on any executor;
``replay_s`` (wall time of the point) is the only field that varies and is
excluded from comparisons.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from tracekit.errors import ConfigError, SpecError, TracekitError, ReplayError

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer import ReplayOptions, ReplayResult
    from tracekit.replayer.simulation.hardware import HardwareSpec
    from tracekit.traceset import TraceSet

SWEEP_FORMAT = "tracekit.sweep"
SWEEP_FORMAT_VERSION = 1
HW_KEY = "hw"
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
    _key_steps(key)  # syntax check now
    return SweepAxis(key, tuple(items))


def _key_steps(key: str) -> list[tuple[str, int | None]]:
    if key == HW_KEY:
        return []
    steps = []
    for part in key.split("."):
        m = _STEP_RE.match(part)
        if not m:
            raise ConfigError(f"sweep parameter {key!r}: bad key part {part!r} (expected name or name[index])")
        steps.append((m.group(1), None if m.group(2) is None else int(m.group(2))))
    if steps[0][0] == "options":
        if len(steps) != 2 or steps[1][0] not in _OPTION_FIELDS or steps[1][1] is not None:
            raise ConfigError(f"sweep parameter {key!r}: replay options that can vary are "
                              f"{', '.join('options.' + f for f in _OPTION_FIELDS)}")
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
            raise ConfigError(f"sweep parameter {key}: {'.'.join(s for s, _ in steps[:depth])} is not a table "
                              f"in spec {spec_label}")
        if index is not None:
            seq = node.get(name)
            if not isinstance(seq, list):
                raise ConfigError(f"sweep parameter {key}: spec {spec_label} has no list {name!r}")
            if index >= len(seq):
                raise ConfigError(f"sweep parameter {key}: spec {spec_label} has {len(seq)} {name} entries "
                                  f"(indexes 0..{len(seq) - 1}) for this trace set")
            if last:
                raise ConfigError(f"sweep parameter {key}: cannot replace the whole {name}[{index}] entry; "
                                  f"name one of its keys")
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
    """

    index: int
    params: tuple[tuple[str, Any], ...]
    spec: "HardwareSpec"
    options: "ReplayOptions"


def build_cases(specs: Sequence["HardwareSpec | str | os.PathLike[str]"], axes: Sequence[SweepAxis],
                world_size: int, *, options: "ReplayOptions | None" = None) -> list[SweepCase]:
    """The sweep's points: every base spec x the product of ``axes``.

    Args:
        specs: base specs (objects, preset names or TOML paths); more than one
            adds an ``hw`` axis in front.  An ``hw`` entry in ``axes`` is
            the same thing (give one or the other).
        axes: parameters to vary.
        world_size: ranks of the trace set (specs are fitted to it first).
        options: base replay options (``options.*`` axes override fields).

    Raises:
        ConfigError: no spec, an axis key given twice, a key that does not
            exist in a variant (e.g. ``network[2]`` on a two-dimension spec),
            a value of the wrong type.
        SpecError: a variant fails the spec checks (names the key), or a spec
            cannot have ``world_size`` ranks.
    """
    from tracekit.replayer import ReplayOptions
    from tracekit.replayer.simulation.hardware import HardwareSpec, load_spec, spec_from_dict

    options = options or ReplayOptions()
    axes = list(axes)
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
        axes.insert(0, SweepAxis(HW_KEY, tuple(os.fspath(s) if not isinstance(s, HardwareSpec) else s.name
                                             for s in specs)))
    if not specs:
        raise ConfigError("a sweep needs at least one hardware spec")
    loaded = {}
    for s in specs:
        spec = s if isinstance(s, HardwareSpec) else load_spec(s)
        label = s.name if isinstance(s, HardwareSpec) else os.fspath(s)
        loaded[label] = spec.fitted(world_size)
    if len(loaded) != len(specs):
        raise ConfigError("a hardware spec is listed twice in the sweep")
    base_labels = list(loaded)

    cases = []
    grid = itertools.product(*[a.values for a in axes]) if axes else [()]
    for index, combo in enumerate(grid):
        chosen = dict(zip([a.key for a in axes], combo))
        label = chosen.get(HW_KEY, base_labels[0])
        label = label.name if isinstance(label, HardwareSpec) else os.fspath(label)
        base = loaded[label]
        doc = base.to_dict()
        case_options = options
        params: list[tuple[str, Any]] = []
        for key, raw in chosen.items():
            if key == HW_KEY:
                params.append((key, label))
            elif key.startswith("options."):
                name = key.split(".", 1)[1]
                value = _convert(raw, getattr(case_options, name), key) if name != "compute_scale" else \
                    _convert(raw, 1.0, key)
                case_options = replace(case_options, **{name: value})
                params.append((key, value))
            else:
                params.append((key, _set_path(doc, key, raw, repr(base.name))))
        where = ", ".join(f"{k}={v}" for k, v in params) or "base spec"
        spec_changed = any(k != HW_KEY and not k.startswith("options.") for k in chosen)
        try:
            spec = spec_from_dict(doc, path=base.path) if spec_changed else base
        except SpecError as exc:
            raise SpecError(f"sweep point {index} ({where}): {exc.message}", path=exc.path) from None
        _check_models(spec, case_options, world_size, index, where)
        if spec.world_size != world_size:
            raise SpecError(f"sweep point {index} ({where}): the variant has {spec.world_size} ranks but the "
                            f"trace set has {world_size}", path=base.path)
        cases.append(SweepCase(index, tuple(params), spec, case_options))
    return cases


def _check_models(spec: "HardwareSpec", options: "ReplayOptions", world_size: int, index: int, where: str) -> None:
    """Build the point's collective model now, so a missing ``[astra]`` table fails before any replay."""
    from tracekit.replayer.simulation.program import effective_spec
    from tracekit.replayer.simulation.collectives import make_collective_model

    if options.collective_model == "measured":
        return
    try:
        make_collective_model(effective_spec(spec, options, world_size))
    except SpecError as exc:
        raise SpecError(f"sweep point {index} ({where}): {exc.message}", path=exc.path) from None


# ----------------------------------------------------------------------------- rows
@dataclass(frozen=True)
class SweepRow:
    """The figures of one sweep point (times in ns).

    Attributes:
        index, params: as in :class:`SweepCase`.
        spec_name: the variant's base spec.
        collective_model: the model used (``alpha_beta``, ``astra``, ``nccl``, ``measured``).
        iteration_time_ns: the replayed iteration time.
        slowest_rank: the rank that ends last (:func:`~.results.slowest_rank`: on ties the one that
            waits least for peers, then the lowest).
        compute_ns, exposed_comm_ns, comm_wait_ns, other_idle_ns: that rank's
            time by category (:func:`~tracekit.replayer.reporting.plots.rank_categories_ns`;
            they sum to ``iteration_time_ns``).
        comm_ns: that rank's communication time (overlapped or not).
        critical_compute_ns, critical_comm_ns: the critical path's split.
        node_count: nodes replayed.
        replay_s: wall time of the point in its worker (excluded from comparisons).
    """

    index: int
    params: tuple[tuple[str, Any], ...]
    spec_name: str
    collective_model: str
    iteration_time_ns: int
    slowest_rank: int
    compute_ns: int
    exposed_comm_ns: int
    comm_wait_ns: int
    other_idle_ns: int
    comm_ns: int
    critical_compute_ns: int
    critical_comm_ns: int
    node_count: int
    replay_s: float = field(default=0.0, compare=False)

    def flat(self) -> dict[str, Any]:
        """One flat dict: ``index``, the parameters by key, then the figures (the CSV/JSON row)."""
        out: dict[str, Any] = {"index": self.index}
        out.update(self.params)
        for f in fields(self):
            if f.name not in ("index", "params"):
                out[f.name] = getattr(self, f.name)
        return out

    @property
    def label(self) -> str:
        """The point's parameter values, ``", "``-joined (plot axis label)."""
        return ", ".join(str(v) for _, v in self.params) or self.spec_name


def row_from_result(case: SweepCase, result: "ReplayResult", replay_s: float = 0.0) -> SweepRow:
    """Reduce a replay result to its sweep row (see :class:`SweepRow`)."""
    from tracekit.replayer.results.result import slowest_rank

    slow = slowest_rank(result.ranks)
    other_idle = slow.other_idle_ns
    cp = result.critical_path
    return SweepRow(case.index, case.params, case.spec.name, result.provenance.collective_model,
                    result.iteration_time_ns, slow.rank, slow.compute_ns, slow.exposed_comm_ns, slow.comm_wait_ns,
                    other_idle, slow.comm_ns, cp.compute_ns, cp.comm_ns, result.node_count, replay_s)


@dataclass(frozen=True)
class SweepResult:
    """A whole sweep: rows in sweep order.

    Attributes:
        rows: one per point.
        parameters: the axis keys, in order.
        world_size: ranks of the trace set.
        source: the trace-set path, or ``"<in-memory>"``.
        executor: where the points ran (not compared).
        results: per point, the replay result reduced to its slowest rank
            (for the plot; not compared, not written).
    """

    rows: tuple[SweepRow, ...]
    parameters: tuple[str, ...]
    world_size: int
    source: str
    executor: str = field(default="serial", compare=False)
    results: tuple["ReplayResult", ...] = field(default=(), compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: format tag, parameters, world size, source, executor, flat rows."""
        return {"format": SWEEP_FORMAT, "version": SWEEP_FORMAT_VERSION, "parameters": list(self.parameters),
                "world_size": self.world_size, "source": self.source, "executor": self.executor,
                "rows": [r.flat() for r in self.rows]}

    def to_csv(self) -> str:
        """The rows as CSV text (header: index, parameters, figures)."""
        flat = [r.flat() for r in self.rows]
        header = list(flat[0]) if flat else ["index", *self.parameters]
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(flat)
        return buf.getvalue()


# ----------------------------------------------------------------------------- workers
# Trace set loaded by this worker process: (key, TraceSet).  One entry: a
# worker serves one sweep at a time, and keeping the decoded set lets its next
# points skip reading and column decoding.
_LOADED: list[Any] = [None, None]


def _source_key(source: Any) -> Any:
    if isinstance(source, (str, tuple)):
        from tracekit.io import trace_paths

        return ("path", tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for _, p in trace_paths(source)))
    if hasattr(source, "hex"):  # ray.ObjectRef
        return ("ray", source.hex())
    return ("object", id(source))


def _load(source: Any) -> "TraceSet":
    key = _source_key(source)
    if _LOADED[0] == key:
        return _LOADED[1]
    if isinstance(source, (str, tuple)):
        from tracekit.io import read_traceset

        traceset = read_traceset(source)
    elif key[0] == "ray":
        import ray

        traceset = ray.get(source)
    else:
        traceset = source
    _LOADED[0], _LOADED[1] = key, traceset
    return traceset


def _slim(result: "ReplayResult") -> "ReplayResult":
    """The result with only what the sweep plot reads: the slowest rank, no tables."""
    from tracekit.replayer.results.result import CriticalPath

    from tracekit.replayer.results.result import slowest_rank

    slow = slowest_rank(result.ranks)
    cp = result.critical_path
    return replace(result, ranks=(slow,), collectives=(), schedule=None,
                   critical_path=CriticalPath((), cp.length_ns, cp.compute_ns, cp.comm_ns))


def replay_case(task: tuple[Any, SweepCase]) -> tuple[SweepRow, "ReplayResult"]:
    """Worker entry point: replay one case on the (cached) trace set; ``(row, slim result)``."""
    from tracekit.replayer import replay

    source, case = task
    traceset = _load(source)
    t0 = time.perf_counter()
    try:
        result = replay(traceset, case.spec, options=case.options)
    except TracekitError as exc:
        where = ", ".join(f"{k}={v}" for k, v in case.params) or case.spec.name
        exc.message = f"sweep point {case.index} ({where}): {exc.message}"
        raise
    elapsed = time.perf_counter() - t0
    return row_from_result(case, result, elapsed), _slim(result)


# ----------------------------------------------------------------------------- driver
def run_sweep(traces: "TraceSet | str | os.PathLike[str]",
              specs: Sequence["HardwareSpec | str | os.PathLike[str]"], axes: Sequence[SweepAxis] = (), *,
              options: "ReplayOptions | None" = None, executor: str = "process", max_workers: int | None = None,
              ray_address: str | None = None,
              progress: Callable[[int, int], None] | None = None) -> SweepResult:
    """Replay ``traces`` on every point of the sweep (see module docstring).

    Args:
        traces: a trace set, or its path (prefix, glob or directory as
            :func:`tracekit.io.read_traceset` takes).
        specs: base hardware specs (see :func:`build_cases`).
        axes: swept parameters.
        options: base replay options.
        executor: ``process`` (default), ``serial`` or ``ray``.
        max_workers: local pool size.
        ray_address: a running Ray cluster (``auto``, ``ray://host:10001``);
            None starts a local instance (and stops it afterwards).
        progress: ``progress(done, total)`` after each point.

    Returns:
        The :class:`SweepResult`, rows in sweep order.

    Raises:
        ConfigError, SpecError: see :func:`build_cases`; unknown executor or
            Ray missing (from :func:`tracekit.parallel.parallel_map`).
        TraceFormatError: the trace set cannot be read.
        TracekitError: the first replay that fails (e.g. ``DeadlockError``),
            with the point's parameters prepended to its message.
    """
    from tracekit.io import trace_paths
    from tracekit.parallel import EXECUTORS, parallel_map

    if executor not in EXECUTORS:
        raise ConfigError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    in_memory = not isinstance(traces, (str, os.PathLike, list, tuple))
    if in_memory:
        world_size, label = traces.world_size, "<in-memory>"
    else:
        paths = [os.fspath(t) for t in traces] if isinstance(traces, (list, tuple)) else os.fspath(traces)
        world_size = len(trace_paths(paths))
        label = " ".join(paths) if isinstance(paths, list) else paths
    cases = build_cases(specs, axes, world_size, options=options)
    parameters = tuple(k for k, _ in cases[0].params) if cases else ()

    tmp_dir = None
    ray_started = False
    try:
        if in_memory and executor == "process" and len(cases) > 1:
            from tracekit.io import write_traceset

            tmp_dir = tempfile.mkdtemp(prefix="tracekit-sweep-")
            write_traceset(traces, os.path.join(tmp_dir, "job"))
            source: Any = os.path.join(tmp_dir, "job")
        elif in_memory and executor == "ray":
            ray_started = _ray_init(ray_address)
            import ray

            source = ray.put(traces)
        else:
            source = traces if in_memory else (tuple(paths) if isinstance(paths, list) else paths)
        try:
            out = parallel_map(replay_case, [(source, c) for c in cases], executor=executor,
                               max_workers=max_workers, ray_address=ray_address, progress=progress)
        except Exception as exc:  # Ray wraps task errors (RayTaskError.cause): re-raise ours unwrapped
            cause = getattr(exc, "cause", None)
            if isinstance(cause, TracekitError):
                raise cause from None
            raise
    finally:
        if tmp_dir is not None:
            shutil.rmtree(tmp_dir, ignore_errors=True)
        if ray_started:
            import ray

            ray.shutdown()
        if in_memory and executor == "serial":
            _LOADED[0] = _LOADED[1] = None
    rows = tuple(r for r, _ in out)
    return SweepResult(rows, parameters, world_size, label, executor, tuple(s for _, s in out))


def _ray_init(address: str | None) -> bool:
    """Start or join Ray (as parallel_map would); True when this call started it."""
    try:
        import ray
    except ImportError:
        raise ConfigError("executor 'ray' needs Ray: pip install 'tracekit[ray]'") from None
    if ray.is_initialized():
        return False
    ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
             configure_logging=False)
    return address is None


# ----------------------------------------------------------------------------- output
def sweep_plot(result: SweepResult):
    """The sweep as a plotly figure: iteration time per point, stacked by the slowest rank's breakdown.

    Uses :func:`tracekit.replayer.reporting.plots.sweep_figure` (x axis: the points'
    parameter values).  Returns ``plots.Figure``.

    Raises:
        ReplayError: no rows.
    """
    from tracekit.replayer.reporting.plots import sweep_figure

    parameter = " / ".join(result.parameters) or "spec"
    return sweep_figure([(row.label, res) for row, res in zip(result.rows, result.results)], parameter)


def write_sweep(result: SweepResult, out_dir: str | os.PathLike[str], *, plot: bool = True,
                title: str | None = None) -> dict[str, Path]:
    """Write ``sweep.csv``, ``sweep.json`` and (with ``plot`` and results) ``sweep.html`` into ``out_dir``.

    Each file is written atomically.  ``sweep.html`` is self-contained (the
    plotting library inlined, see :mod:`.html_page`; opens offline), titled
    ``title`` or "Sweep of SOURCE (N ranks)".

    Returns:
        ``{"csv": path, "json": path[, "html": path]}``.
    """
    from tracekit.io import atomic_output

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "sweep.csv", "json": out / "sweep.json"}
    with atomic_output(paths["csv"], "w") as fh:
        fh.write(result.to_csv())
    try:
        text = json.dumps(result.to_dict(), indent=1, allow_nan=False) + "\n"  # never bare NaN/Infinity
    except ValueError as exc:
        raise ReplayError(f"the sweep result holds a non-finite number ({exc}); check the spec's values") from None
    with atomic_output(paths["json"], "w") as fh:
        fh.write(text)
    if plot and result.results:
        from tracekit.replayer.reporting.report import build_sweep_html

        parameter = " / ".join(result.parameters) or "spec"
        rows = [(row.label, res) for row, res in zip(result.rows, result.results)]
        html = build_sweep_html(rows, parameter,
                                title=title or f"Sweep of {result.source} ({result.world_size} ranks)")
        paths["html"] = out / "sweep.html"
        with atomic_output(paths["html"], "w") as fh:
            fh.write(html)
    return paths


__all__ = ["SweepAxis", "SweepCase", "SweepResult", "SweepRow", "build_cases", "parse_vary", "replay_case",
           "row_from_result", "run_sweep", "sweep_plot", "write_sweep"]
