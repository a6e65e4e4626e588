"""What ``tracekit plan`` needs of the LLM generator, as two picklable functions of (job, hardware).

The planner (:mod:`tracekit.replayer.orchestration.planning`) lives in the replayer, which never imports the
converters; the CLI hands it these functions (:data:`tracekit.replayer.orchestration.planning.search.Generator`):

* :func:`calibrated_plan`: the op blocks of a job (:class:`~.llm_rank.Plan`) with the calibrated durations
  ``generate llm --hw`` gives them, and the cost model itself (the planner's bounds read both);
* :func:`write_calibrated_classes`: the job written as a rank-class set exactly as ``generate llm --hw SPEC
  --classes`` writes it (the planner's simulations replay it).
"""

from __future__ import annotations

import os
from typing import Any

from tracekit.workloads.config import LLMConfig


def calibrated_plan(config: LLMConfig, hardware: Any) -> tuple[Any, Any]:
    """``(Plan, CalibratedCost)`` of ``config`` on ``hardware`` (a replayer HardwareSpec or device).

    Raises:
        ConfigError: a device the calibration cannot price.
    """
    from tracekit.converters.generators.calibration import cost_for
    from tracekit.converters.generators.llm_rank import Plan

    cost = cost_for(hardware, config)
    return Plan.of(config, cost), cost


def write_calibrated_classes(config: LLMConfig, hardware: Any, prefix: str | os.PathLike[str]) -> None:
    """Write ``config`` as a rank-class set at ``prefix`` with calibrated durations on ``hardware``.

    Raises:
        ConfigError: as :func:`~.llm.write_llm`. OSError: the prefix cannot be written.
    """
    from tracekit.converters.generators.calibration import cost_for
    from tracekit.converters.generators.llm import write_llm

    write_llm(config, prefix, cost_for(hardware, config), classes=True)


__all__ = ["calibrated_plan", "write_calibrated_classes"]
