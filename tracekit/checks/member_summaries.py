"""The summary of a rank-class set, class by class: its cost grows with the classes, not the ranks.

A member's summary is its representative's with its own rank and file (``<manifest>#rank<R>``).  A
:class:`~tracekit.checks.summary.TraceSetSummary` of a class set holds a :class:`MemberSummaries` as ``per_rank``: a
sequence over every rank (``len`` is the world size, ``[r]`` is rank ``r``'s summary, made when asked) whose
:attr:`MemberSummaries.groups` are the classes, so the tables of ``tracekit info``
(:meth:`~tracekit.checks.summary.TraceSetSummary.rank_groups`) and the node total read one summary per class.  ``info`` of
a 1,048,576-rank set built per rank (one ``dataclasses.replace`` per rank, then one grouping key per rank) took
minutes; tests/hardening/test_leftovers_of_the_trial.py has the measured figures.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, overload

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.sets.classset import ClassSet
    from tracekit.checks.summary import TraceSummary

__all__ = ["MemberSummaries"]


class MemberSummaries(Sequence["TraceSummary"]):
    """Every rank's summary of a class set, in rank order, made on demand from its class's.

    Args:
        cs: the class set (its manifest names each member's file).
        reps: per class (in ``cs.classes`` order), the representative's summary.
    """

    def __init__(self, cs: "ClassSet", reps: Sequence["TraceSummary"]) -> None:
        self._manifest = str(cs.manifest)
        self._owner = np.empty(cs.world_size, dtype=np.int32)  # class index per rank
        for k, cls in enumerate(cs.classes):
            self._owner[np.asarray(cls.ranks, dtype=np.int64)] = k
        self._reps = list(reps)
        #: ``[(ranks, summary of the class's first rank)]``, one per class, in class order
        self.groups: list[tuple[Sequence[int], TraceSummary]] = [
            (cls.ranks, self._member(cls.ranks[0], k)) for k, cls in enumerate(cs.classes)
        ]

    def _member(self, rank: int, k: int) -> "TraceSummary":
        out = copy.copy(self._reps[k])  # frozen: rank and path set on the copy (a dataclasses.replace costs 10x)
        object.__setattr__(out, "rank", rank)
        object.__setattr__(out, "path", f"{self._manifest}#rank{rank}")
        return out

    def __len__(self) -> int:
        return len(self._owner)

    @overload
    def __getitem__(self, index: int) -> "TraceSummary": ...

    @overload
    def __getitem__(self, index: slice) -> list["TraceSummary"]: ...

    def __getitem__(self, index: int | slice) -> "TraceSummary | list[TraceSummary]":
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        rank = range(len(self))[index]  # IndexError past the world, negative indices from the end
        return self._member(rank, int(self._owner[rank]))

    def __iter__(self) -> Iterator["TraceSummary"]:
        for rank, k in enumerate(self._owner.tolist()):
            yield self._member(rank, k)
