"""A plan's result as data: the JSON document, the ranked rows, and the files ``tracekit plan -o DIR`` writes.

The JSON (``format: tracekit.plan``) holds the request (model, GPUs, global batch, spec, memory cap, knob space),
the counts (enumerated, simulated, pruned by memory / by bound / dominated, removed by the divisibility rules
with their reasons), the chosen layout's ``generate llm`` command, and every candidate with its status, reason,
bound, peak memory and, when simulated, its figures (:meth:`~.search.PlanResult.figures`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.orchestration.planning.search import Candidate, PlanResult

PLAN_FORMAT = "tracekit.plan"
PLAN_FORMAT_VERSION = 1


def spec_price(spec: Any) -> float | None:
    """The ``price_per_gpu_hour_usd`` top-level key of a spec read from a TOML file (USD per GPU-hour), or None
    (a preset, or a file without it).

    Raises:
        SpecError: the value is not a positive finite number (names the file and the key).
    """
    import math
    import tomllib

    from tracekit.errors import SpecError

    if spec.path is None:
        return None
    with open(spec.path, "rb") as fh:
        value = tomllib.load(fh).get("price_per_gpu_hour_usd")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise SpecError(f"key price_per_gpu_hour_usd: must be a positive number of USD, got {value!r}", path=spec.path)
    return float(value)


def candidate_dict(result: "PlanResult", c: "Candidate", rank: int | None) -> dict[str, Any]:
    """One candidate as JSON: rank (1 = fastest; None unless simulated), layout knobs, status, reason, bound,
    peak memory, figures."""
    out: dict[str, Any] = {"rank": rank, "label": c.layout.label, **c.layout.knobs(), "status": c.status}
    out["reason"] = c.reason
    out["peak_memory_bytes"] = c.peak_bytes
    out["peak_stage"] = c.peak_stage
    out["bound_s"] = None if c.bound is None else c.bound.step_ns / 1e9
    if c.simulated is not None:
        out.update(result.figures(c))
        out["simulated_ranks"] = c.simulated.simulated_ranks
        out["simulation_wall_s"] = c.simulated.wall_s
    return out


def plan_dict(result: "PlanResult") -> dict[str, Any]:
    """The whole result as JSON (module doc)."""
    req, base = result.request, result.request.base
    ranked = result.ranked
    return {
        "format": PLAN_FORMAT,
        "version": PLAN_FORMAT_VERSION,
        "model": base.model.name,
        "model_spec": dataclasses.asdict(base.model),
        "gpus": req.gpus,
        "global_batch": base.global_batch_size,
        "seq_length": base.model.seq_length,
        "hw": req.spec_name,
        "device": result.device,
        "device_memory_bytes": result.device_memory_bytes,
        "max_memory_fraction": req.max_memory_fraction,
        "memory_cap_bytes": result.cap_bytes,
        "peak_flops_per_s": result.peak_flops_per_s,
        "stack": base.stack.name,
        "overlap_grad_reduce": base.parallel.overlap_grad_reduce,
        "keep": req.keep,
        "gap": req.gap,
        "knob_space": {k: list(v) for k, v in dataclasses.asdict(req.space).items() if v},
        "counts": result.counts(),
        "divisibility_rejections": result.rejected,
        "executor": result.executor,
        "wall_s": result.wall_s,
        "best": candidate_dict(result, ranked[0], 1) if ranked else None,
        "generate_command": result.generate_command(ranked[0]) if ranked else None,
        "candidates": [
            candidate_dict(result, c, i + 1 if c.status == "simulated" else None)
            for i, c in enumerate(result.candidates)
        ],
    }


def plan_files(result: "PlanResult", out_dir: str | os.PathLike[str], *, page: bool = True) -> dict[Path, bytes]:
    """The bytes of ``out_dir/plan.json`` and (with ``page``) ``out_dir/plan.html``, by path.

    Raises:
        ConfigError: a non-finite figure (a spec value gone wrong).
    """
    out = Path(out_dir)
    try:
        text = json.dumps(plan_dict(result), indent=1, allow_nan=False) + "\n"
    except ValueError as exc:
        raise ConfigError(f"the plan holds a non-finite number ({exc}); check the spec's values") from None
    files = {out / "plan.json": text.encode()}
    if page:
        from tracekit.replayer.orchestration.planning.page import build_plan_html

        files[out / "plan.html"] = build_plan_html(result).encode()
    return files


def is_plan_file(path: Path) -> bool:
    """Whether ``path`` is a ``plan.json`` this tool wrote (a JSON object of format :data:`PLAN_FORMAT`)."""
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("format") == PLAN_FORMAT


def write_plan(result: "PlanResult", out_dir: str | os.PathLike[str], *, page: bool = True) -> dict[str, Path]:
    """Write ``plan.json`` and (with ``page``) ``plan.html`` into ``out_dir`` as one unit
    (:func:`tracekit.io.write_files_atomic`: both or neither; an older ``plan.html`` is removed without ``page``).

    Returns:
        ``{"json": path[, "html": path]}``.

    Raises:
        ConfigError: a non-finite figure (a spec value gone wrong). OSError: the folder cannot be written.
    """
    from tracekit.io import write_files_atomic

    files = plan_files(result, out_dir, page=page)
    write_files_atomic(files, remove=() if page else (Path(out_dir) / "plan.html",))
    return {p.suffix[1:]: p for p in files}


__all__ = [
    "PLAN_FORMAT",
    "PLAN_FORMAT_VERSION",
    "candidate_dict",
    "is_plan_file",
    "plan_dict",
    "plan_files",
    "write_plan",
]
