"""A rank-class set whose representatives are in memory (issue 34 item 3: projection hands its classes to the
folded replay without writing a temporary class set).

:class:`MemoryClassSet` is a :class:`~tracekit.sets.classset.ClassSet` (same manifest label, world size, classes,
slots and member values) whose representatives' traces are held instead of read from their files; a member's
bytes are the representative's encoded once (:meth:`ClassSet.rank_bytes` through a
:class:`~tracekit.workloads.rank_template.RankTemplate`), exactly what the written class set would have given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tracekit.sets.classset import ClassSet

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.sets.classset import RankClass
    from tracekit.model import ExecutionTrace
    from tracekit.workloads.rank_template import RankTemplate

__all__ = ["MemoryClassSet"]


@dataclass(frozen=True)
class MemoryClassSet(ClassSet):
    """A :class:`~tracekit.sets.classset.ClassSet` with ``traces[i]`` the representative trace of ``classes[i]``."""

    traces: tuple["ExecutionTrace", ...] = field(default=(), repr=False)

    def _index(self, cls: "RankClass") -> int:
        for i, c in enumerate(self.classes):
            if c is cls or c.representative == cls.representative:
                return i
        raise KeyError(cls.representative)  # pragma: no cover - only this set's classes are asked for

    def read_representative(self, cls: "RankClass") -> "ExecutionTrace":
        """The representative's trace held in memory (rank = the representative)."""
        trace = self.traces[self._index(cls)]
        return trace if trace.rank == cls.representative else trace.with_label(rank=cls.representative)

    def _template(self, cls: "RankClass") -> "RankTemplate":
        from tracekit.io import encode_trace
        from tracekit.workloads.rank_template import RankTemplate

        cache: dict[int, RankTemplate] = self.__dict__.setdefault("_templates", {})
        i = self._index(cls)
        if i not in cache:
            cache.clear()  # one representative's bytes at a time, as the file-backed set
            cache[i] = RankTemplate(encode_trace(self.traces[i]), dict(enumerate(cls.slots)))
        return cache[i]
