"""The collective model a hardware spec names (``[collectives] model``), bound to the spec: alpha-beta
(:mod:`~tracekit.replayer.simulation.collectives`), ASTRA-sim's analytical and congestion-aware models
(:mod:`~tracekit.replayer.simulation.astra_model`, :mod:`~tracekit.replayer.simulation.astra_congestion`) or
NCCL's (:mod:`~tracekit.replayer.simulation.nccl_model`). Above the models, so none of them imports it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.errors import SpecError
from tracekit.replayer.simulation.collectives import AlphaBetaModel, CollectiveModel

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.hardware import HardwareSpec


def make_collective_model(spec: "HardwareSpec") -> CollectiveModel:
    """The model ``spec.collective_model`` names, bound to ``spec``.

    Raises:
        SpecError: unknown model name, or settings the model needs are missing.
    """
    if spec.collective_model == "alpha_beta":
        return AlphaBetaModel(spec)
    if spec.collective_model == "astra":
        from tracekit.replayer.simulation.astra_model import AstraModel

        if spec.astra is not None and spec.astra.network_backend == "congestion_aware":
            from tracekit.replayer.simulation.astra_congestion import AstraCongestionModel

            return AstraCongestionModel(spec)
        return AstraModel(spec)
    if spec.collective_model == "nccl":
        from tracekit.replayer.simulation.nccl_model import NcclModel

        return NcclModel(spec)
    raise SpecError(f"key collectives.model: unknown model {spec.collective_model!r}", path=spec.path)
