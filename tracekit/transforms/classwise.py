"""Transforms of a rank-class set, class by class: each representative is transformed and the members keep
their slot values (:mod:`tracekit.sets.classset`). Only the steps in :data:`CLASSWISE_TRANSFORMS` can run this way;
``tracekit transform`` on a class set with other steps writes per-rank files, and :mod:`.classrescale` runs
Rescale on classes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

from tracekit.errors import TracekitError

if TYPE_CHECKING:
    from tracekit.sets.classset import ClassSet
    from tracekit.model import Attr
    from tracekit.transforms.pipeline import Pipeline

__all__ = ["CLASSWISE_TRANSFORMS", "classwise", "transform_class_set"]

#: Steps whose result on a member is the member's slot values put into their result on the representative:
#: they read and write each rank's nodes by type, dependencies, durations, sizes and streams, never group
#: names or peers, and add no attribute equal to a slot.
CLASSWISE_TRANSFORMS = ("ScaleCompute", "ScaleComm", "Retarget", "DropCpuOps", "Compact")


def classwise(pipeline: Pipeline) -> bool:
    """Whether :func:`transform_class_set` can run ``pipeline`` (every step in :data:`CLASSWISE_TRANSFORMS`)."""
    return all(type(step).__name__ in CLASSWISE_TRANSFORMS for step in pipeline.steps)


def transform_class_set(cs: ClassSet, pipeline: Pipeline, output: str | os.PathLike[str]) -> tuple[Path, int, int]:
    """Run ``pipeline`` on each class representative and write the result as a class set.

    Returns:
        ``(manifest path, nodes in, nodes out)`` counted over every rank.

    Raises:
        TracekitError: a step is not class-wise (see :func:`classwise`), an output is an input of the
            running command, or as the steps raise (TransformError, ConfigError).
        TraceFormatError: a class file cannot be decoded.
    """
    from tracekit.sets.classset import write_class_set
    from tracekit.wire.io import encode_trace
    from tracekit.sets.traceset import TraceSet

    if not classwise(pipeline):
        raise TracekitError(
            "these steps need every rank: "
            + ", ".join(type(s).__name__ for s in pipeline.steps if type(s).__name__ not in CLASSWISE_TRANSFORMS),
            path=cs.manifest,
        )
    counts = [0, 0]

    def classes() -> Iterator[tuple[bytes, Sequence[Attr], Sequence[tuple[int, Sequence[Attr]]]]]:
        """Each class's transformed representative as ``write_class_set`` takes it, counting nodes in and out."""
        for cls in cs.classes:
            trace = cs.read_representative(cls)
            ts = TraceSet({cls.representative: trace}, trace.process_groups())
            out = pipeline.run(ts, source=cs.manifest)[cls.representative]
            counts[0] += len(trace) * len(cls.ranks)
            counts[1] += len(out) * len(cls.ranks)
            yield encode_trace(out), cls.slots, [(r, cls.member_attrs(i)) for i, r in enumerate(cls.ranks)]

    manifest = write_class_set(output, cs.world_size, classes())
    return manifest, counts[0], counts[1]
