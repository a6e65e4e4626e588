"""Pipelines: transforms run in order, from Python, from the CLI, or from a TOML file.

Python::

    Pipeline([ScaleCompute(0.5), Rescale(dp=64), Compact()]).run(traceset, source="traces/job")

TOML (read with :mod:`tomllib`), one ``[[transform]]`` table per step, ``kind``
naming the transform and the other keys its parameters::

    input = "traces/job"          # optional: default input of `tracekit transform --pipeline`
    output = "out/job_dp64"       # optional: default output prefix

    [[transform]]
    kind = "scale_compute"
    factor = 0.5

    [[transform]]
    kind = "rescale"
    dp = 64

    [[transform]]
    kind = "compact"

Kinds: see :data:`KINDS`.  Every output trace records the steps and the input
in its metadata (:func:`tracekit.transforms.base.stamp_provenance`), and
:meth:`Pipeline.write` encodes every rank before writing any file, so a failing
pipeline writes nothing.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from tracekit.errors import ConfigError, TracekitError, malformed_input
from tracekit.transforms.base import Transform, stamp_provenance
from tracekit.transforms.compact import Compact
from tracekit.transforms.reparallel import ChangePP, ChangeTP
from tracekit.transforms.rescale import Rescale
from tracekit.transforms.scale import Retarget, ScaleComm, ScaleCompute
from tracekit.transforms.select import DropCpuOps, KeepIteration, KeepRanks, RemoveNodes

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.sets.traceset import TraceSet

KINDS: dict[str, type[Transform]] = {
    "scale_compute": ScaleCompute,
    "retarget": Retarget,
    "scale_comm": ScaleComm,
    "rescale": Rescale,
    "change_tp": ChangeTP,
    "change_pp": ChangePP,
    "keep_iteration": KeepIteration,
    "drop_cpu_ops": DropCpuOps,
    "keep_ranks": KeepRanks,
    "remove_nodes": RemoveNodes,
    "compact": Compact,
}
_LIST_FIELDS = {"node_types", "ranks"}


@dataclass(frozen=True)
class Pipeline(Transform):
    """Transforms applied in order.

    Raises:
        ConfigError: a step that is not a :class:`Transform`.
    """

    steps: tuple[Transform, ...] = field(default_factory=tuple)

    def __init__(self, steps: Sequence[Transform] = ()) -> None:
        steps = tuple(steps)
        for i, s in enumerate(steps):
            if not isinstance(s, Transform):
                raise ConfigError(f"pipeline step {i + 1} is not a transform: {s!r}")
        object.__setattr__(self, "steps", steps)

    def describe(self) -> dict[str, Any]:
        """``{"transform": "Pipeline", "steps": [each step's describe()]}`` (JSON-ready)."""
        return {"transform": "Pipeline", "steps": [s.describe() for s in self.steps]}

    def apply(self, traceset: TraceSet) -> TraceSet:
        """Apply every step in order; returns the last step's trace set.

        Raises:
            TransformError, ConfigError: as the failing step raises them.
        """
        for step in self.steps:
            traceset = step.apply(traceset)
        return traceset

    def run(self, traceset: TraceSet, *, source: str | os.PathLike[str] | None = None) -> TraceSet:
        """Apply every step, then record the provenance (steps and ``source``) in each trace.

        Raises:
            TransformError, ConfigError: as the failing step raises them; TransformError also for an earlier
                provenance record that is not JSON.
        """
        out = self.apply(traceset)
        return stamp_provenance(
            out, [s.describe() for s in self.steps], os.fspath(source) if source is not None else None
        )

    def write(
        self,
        traceset: TraceSet,
        output_prefix: str | os.PathLike[str],
        *,
        source: str | os.PathLike[str] | None = None,
        compress: bool = False,
    ) -> list[Path]:
        """:meth:`run` then write ``<output_prefix>.<rank>.et`` (all ranks encoded before any file is written).

        Returns:
            the paths written, in rank order.

        Raises:
            TransformError, ConfigError: as the failing step raises them.
            TracekitError: the prefix holds other rank files, or an output is an input of the running command.
        """
        from tracekit.interop.astra import write_traceset

        return write_traceset(self.run(traceset, source=source), output_prefix, compress=compress)


def transform_from_table(table: dict[str, Any], *, where: str = "") -> Transform:
    """One transform from a ``{"kind": ..., <params>}`` table.

    Raises:
        ConfigError: missing/unknown kind, unknown or bad parameters (names ``where``).
    """
    import dataclasses

    prefix = f"{where}: " if where else ""
    if not isinstance(table, dict):
        raise ConfigError(f"{prefix}a transform must be a table, got {table!r}")
    params = dict(table)
    kind = params.pop("kind", None)
    if kind is None:
        raise ConfigError(f"{prefix}transform table has no 'kind' (one of {', '.join(KINDS)})")
    cls = KINDS.get(str(kind))
    if cls is None:
        raise ConfigError(f"{prefix}unknown transform kind {kind!r}; choose one of {', '.join(KINDS)}")
    assert dataclasses.is_dataclass(cls)  # every KINDS entry is a frozen dataclass
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(params) - names)
    if unknown:
        raise ConfigError(
            f"{prefix}{kind}: unknown parameter(s) {', '.join(unknown)}; accepted: {', '.join(sorted(names)) or 'none'}"
        )
    for k in _LIST_FIELDS & set(params):
        if isinstance(params[k], list):
            params[k] = tuple(params[k])
    try:
        return cls(**params)
    except TypeError as exc:
        raise ConfigError(f"{prefix}{kind}: {exc}") from None
    except TracekitError as exc:
        raise ConfigError(f"{prefix}{kind}: {exc.message}") from None


@dataclass(frozen=True)
class PipelineFile:
    """A parsed pipeline file: the pipeline and its optional default input/output."""

    pipeline: Pipeline
    input: str | None = None
    output: str | None = None
    path: str | None = None


def load_pipeline(path: str | os.PathLike[str]) -> PipelineFile:
    """Read a TOML pipeline file (format in the module docstring).

    Raises:
        ConfigError: unreadable file, bad TOML, no ``[[transform]]`` tables,
            or a bad step (the message names the file and the step number).
    """
    p = os.fspath(path)
    try:
        from tracekit.output import read_input_bytes

        data = tomllib.loads(read_input_bytes(p).decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read pipeline file: {exc.strerror}", path=p) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=p) from None
    except RecursionError:
        raise ConfigError("not valid TOML: arrays or tables nested too deeply", path=p) from None
    unknown = sorted(set(data) - {"input", "output", "transform", "perturb"})  # [perturb]: for replay --perturb
    if unknown:
        raise ConfigError(
            f"unknown top-level key(s) {', '.join(unknown)}; expected input, output, [[transform]]", path=p
        )
    tables = data.get("transform")
    if not isinstance(tables, list) or not tables:
        raise ConfigError("no [[transform]] tables", path=p)
    steps = []
    for i, table in enumerate(tables, start=1):
        try:
            with malformed_input(f"[[transform]] table {i}", None, ConfigError):
                steps.append(transform_from_table(table, where=f"transform {i}"))
        except ConfigError as exc:
            raise exc.with_context(path=p)
    for key in ("input", "output"):
        if key in data and not isinstance(data[key], str):
            raise ConfigError(f"{key} must be a string, got {data[key]!r}", path=p)
    return PipelineFile(Pipeline(steps), data.get("input"), data.get("output"), p)


__all__ = ["KINDS", "Pipeline", "PipelineFile", "load_pipeline", "transform_from_table"]
