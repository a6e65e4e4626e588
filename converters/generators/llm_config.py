"""Moved to :mod:`tracekit.workloads.config` (shared with the rewrites); the names stay importable from here."""

from tracekit.workloads.config import (ACTIVATIONS, NORMS, PRESETS, RECOMPUTE, SCHEDULES, ZERO_STAGES, LLMConfig,
                                       ModelSpec, ParallelSpec, preset, world_to_dp)

__all__ = ["ACTIVATIONS", "NORMS", "PRESETS", "RECOMPUTE", "SCHEDULES", "ZERO_STAGES", "LLMConfig", "ModelSpec",
           "ParallelSpec", "preset", "world_to_dp"]
