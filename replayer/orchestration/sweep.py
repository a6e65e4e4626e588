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
pass a :class:`~tracekit.sets.traceset.TraceSet` to ship it through the object
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
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from tracekit.errors import ConfigError, TracekitError, ReplayError

from tracekit.replayer.orchestration.sweep_cases import (  # noqa: F401 - re-exported: the sweep's API
    HW_KEY,
    SweepAxis,
    SweepCase,
    bandwidth_notes,
    build_cases,
    parse_vary,
    unused_key_notes,
)

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer import ReplayOptions, ReplayResult
    from tracekit.replayer.simulation.hardware import HardwareSpec
    from tracekit.sets.traceset import TraceSet

SWEEP_FORMAT = "tracekit.sweep"
SWEEP_FORMAT_VERSION = 1


# ----------------------------------------------------------------------------- rows
@dataclass(frozen=True)
class SweepRow:
    """The figures of one sweep point (times in ns).

    Attributes:
        index, params: as in :class:`SweepCase`.
        spec_name: the variant's base spec.
        collective_model: the model used (``alpha_beta``, ``astra``, ``nccl``, ``measured``).
        compute: how compute was timed (:func:`~.projected.compute_label`: ``projected SRC -> DST``,
            ``measured``, ``roofline`` ...), as ``replay`` prints it.
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
    compute: str
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


def row_from_result(
    case: SweepCase, result: "ReplayResult", replay_s: float = 0.0, compute: str | None = None
) -> SweepRow:
    """Reduce a replay result to its sweep row (see :class:`SweepRow`; ``compute``: how compute was timed,
    default the spec's compute mode)."""
    from tracekit.replayer.results.result import slowest_rank

    slow = slowest_rank(result.ranks)
    other_idle = slow.other_idle_ns
    cp = result.critical_path
    return SweepRow(
        case.index,
        case.params,
        case.spec.name,
        result.provenance.collective_model,
        compute or result.provenance.compute_mode,
        result.iteration_time_ns,
        slow.rank,
        slow.compute_ns,
        slow.exposed_comm_ns,
        slow.comm_wait_ns,
        other_idle,
        slow.comm_ns,
        cp.compute_ns,
        cp.comm_ns,
        result.node_count,
        replay_s,
    )


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
        notes: lines on how the collective model used a swept value (:func:`.sweep_cases.bandwidth_notes`)
            and on swept keys that moved no point (:func:`.sweep_cases.unused_key_notes`).
    """

    rows: tuple[SweepRow, ...]
    parameters: tuple[str, ...]
    world_size: int
    source: str
    executor: str = field(default="serial", compare=False)
    results: tuple["ReplayResult", ...] = field(default=(), compare=False, repr=False)
    notes: tuple[str, ...] = field(default=(), compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: format tag, parameters, world size, source, executor, flat rows."""
        return {
            "format": SWEEP_FORMAT,
            "version": SWEEP_FORMAT_VERSION,
            "parameters": list(self.parameters),
            "world_size": self.world_size,
            "source": self.source,
            "executor": self.executor,
            "rows": [r.flat() for r in self.rows],
            **({"notes": list(self.notes)} if self.notes else {}),
        }

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
        from tracekit.sets.classset import find_class_set

        classes = find_class_set(source)
        files = (
            [classes.manifest, *(c.file for c in classes.classes)] if classes else [p for _, p in trace_paths(source)]
        )
        return ("path", tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files))
    if hasattr(source, "hex"):  # ray.ObjectRef
        return ("ray", source.hex())
    return ("object", id(source))


def _load(source: Any) -> "TraceSet | str | tuple[str, ...]":
    key = _source_key(source)
    if _LOADED[0] == key:
        return _LOADED[1]
    if isinstance(source, (str, tuple)):
        from tracekit.io import read_traceset
        from tracekit.sets.classset import find_class_set

        # a class set stays a path: replay_with_compute replays its classes (folded), never every rank
        traceset = source if find_class_set(source) is not None else read_traceset(source)
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
    return replace(
        result,
        ranks=(slow,),
        collectives=(),
        schedule=None,
        critical_path=CriticalPath((), cp.length_ns, cp.compute_ns, cp.comm_ns),
    )


def replay_case(task: tuple[Any, SweepCase]) -> tuple[SweepRow, "ReplayResult"]:
    """Worker entry point: replay one case on the (cached) trace set, timing compute as ``replay`` does
    (:func:`~.projected.replay_with_compute`: by default projected from the capture device to the point's
    device); ``(row, slim result)``."""
    from tracekit.replayer.orchestration.projected import compute_label, replay_with_compute

    source, case = task
    traceset = _load(source)
    t0 = time.perf_counter()
    try:
        result, _, plan, _ = replay_with_compute(
            traceset, case.spec, options=case.options, compute=case.compute, capture_device=case.capture_device
        )
    except TracekitError as exc:
        where = ", ".join(f"{k}={v}" for k, v in case.params) or case.spec.name
        exc.message = f"sweep point {case.index} ({where}): {exc.message}"
        raise
    elapsed = time.perf_counter() - t0
    return row_from_result(case, result, elapsed, compute_label(plan, result)), _slim(result)


# ----------------------------------------------------------------------------- driver
def run_sweep(
    traces: "TraceSet | str | os.PathLike[str] | list[str | os.PathLike[str]] | tuple[str | os.PathLike[str], ...]",
    specs: Sequence["HardwareSpec | str | os.PathLike[str]"],
    axes: Sequence[SweepAxis] = (),
    *,
    options: "ReplayOptions | None" = None,
    compute: str = "auto",
    capture_device: str | None = None,
    executor: str = "process",
    max_workers: int | None = None,
    ray_address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SweepResult:
    """Replay ``traces`` on every point of the sweep (see module docstring).

    Args:
        traces: a trace set, or its path (prefix, glob or directory as
            :func:`tracekit.io.read_traceset` takes).
        specs: base hardware specs (see :func:`build_cases`).
        axes: swept parameters.
        options: base replay options.
        compute, capture_device: how compute is timed, as ``replay --compute`` (:mod:`.projected`).
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
    from tracekit.parallel import EXECUTORS

    if executor not in EXECUTORS:
        raise ConfigError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    paths, world_size, label = _trace_source(traces)
    in_memory = paths is None
    cases = build_cases(specs, axes, world_size, options=options, compute=compute, capture_device=capture_device)
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
            from tracekit.parallel import ray_init

            ray_started = ray_init(ray_address)
            import ray

            source = ray.put(traces)
        else:
            source = traces if paths is None else paths
        out = _map_cases(source, cases, executor, max_workers, ray_address, progress)
    finally:
        if tmp_dir is not None:
            shutil.rmtree(tmp_dir, ignore_errors=True)
        if ray_started:
            import ray

            ray.shutdown()
        if in_memory and executor == "serial":
            _LOADED[0] = _LOADED[1] = None
    rows = tuple(r for r, _ in out)
    notes = bandwidth_notes(cases, world_size) + unused_key_notes(rows, parameters)
    return SweepResult(rows, parameters, world_size, label, executor, tuple(s for _, s in out), notes)


def _trace_source(
    traces: "TraceSet | str | os.PathLike[str] | list[str | os.PathLike[str]] | tuple[str | os.PathLike[str], ...]",
) -> tuple[str | tuple[str, ...] | None, int, str]:
    """``(paths, world size, label)`` of :func:`run_sweep`'s ``traces``; paths None for an in-memory trace set.

    Raises:
        TraceFormatError: the paths match no trace files (or two files claim one rank).
    """
    from tracekit.io import trace_paths
    from tracekit.sets.classset import find_class_set

    if isinstance(traces, (str, os.PathLike)):
        path = os.fspath(traces)
        classes = find_class_set(path)  # a rank-class set (what transform --dp writes)
        return path, classes.world_size if classes is not None else len(trace_paths(path)), path
    if isinstance(traces, (list, tuple)):
        paths = tuple(os.fspath(t) for t in traces)
        return paths, len(trace_paths(paths)), " ".join(paths)
    return None, traces.world_size, "<in-memory>"


def _map_cases(
    source: Any,
    cases: list[SweepCase],
    executor: str,
    max_workers: int | None,
    ray_address: str | None,
    progress: Callable[[int, int], None] | None,
) -> list[Any]:
    """:func:`replay_case` of every case on ``executor``, in case order.

    Raises:
        TracekitError: the first replay that fails (a Ray task error is unwrapped to it).
    """
    from tracekit.parallel import parallel_map

    try:
        return parallel_map(
            replay_case,
            [(source, c) for c in cases],
            executor=executor,
            max_workers=max_workers,
            ray_address=ray_address,
            progress=progress,
        )
    except Exception as exc:  # Ray wraps task errors (RayTaskError.cause): re-raise ours unwrapped
        cause = getattr(exc, "cause", None)
        if isinstance(cause, TracekitError):
            raise cause from None
        raise


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


def write_sweep(
    result: SweepResult, out_dir: str | os.PathLike[str], *, plot: bool = True, title: str | None = None
) -> dict[str, Path]:
    """Write ``sweep.csv``, ``sweep.json`` and (with ``plot`` and results) ``sweep.html`` into ``out_dir``.

    The files are written as one unit (:func:`tracekit.io.write_files_atomic`): all of them or none, and a
    ``sweep.html`` of an earlier sweep is removed when this one has no plot.  ``sweep.html`` is self-contained (the
    plotting library inlined, see :mod:`.html_page`; opens offline), titled
    ``title`` or "Sweep of SOURCE (N ranks)".

    Returns:
        ``{"csv": path, "json": path[, "html": path]}``.
    """
    from tracekit.io import write_files_atomic

    out = Path(out_dir)
    paths = {"csv": out / "sweep.csv", "json": out / "sweep.json"}
    try:
        text = json.dumps(result.to_dict(), indent=1, allow_nan=False) + "\n"  # never bare NaN/Infinity
    except ValueError as exc:
        raise ReplayError(f"the sweep result holds a non-finite number ({exc}); check the spec's values") from None
    files = {paths["csv"]: result.to_csv().encode(), paths["json"]: text.encode()}
    if plot and result.results:
        from tracekit.replayer.reporting.report import build_sweep_html

        parameter = " / ".join(result.parameters) or "spec"
        rows = [(row.label, res) for row, res in zip(result.rows, result.results)]
        html = build_sweep_html(rows, parameter, title=title or f"Sweep of {result.source} ({result.world_size} ranks)")
        paths["html"] = out / "sweep.html"
        files[paths["html"]] = html.encode()
    # one unit: all three files of this sweep, or the folder as it was; an older sweep.html goes with them
    write_files_atomic(files, remove=() if "html" in paths else (out / "sweep.html",))
    return paths


__all__ = [
    "SweepAxis",
    "SweepCase",
    "SweepResult",
    "SweepRow",
    "build_cases",
    "parse_vary",
    "replay_case",
    "row_from_result",
    "run_sweep",
    "sweep_plot",
    "write_sweep",
]
