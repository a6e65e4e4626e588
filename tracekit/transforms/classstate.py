"""One rank class held in memory while a class-wise transform runs (:mod:`tracekit.transforms.classrescale`,
:mod:`tracekit.transforms.classselect`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracekit.model import Attr, ExecutionTrace


@dataclass(frozen=True)
class ClassState:
    """One rank class in memory: the representative's trace, the member ranks (ascending), slots and values."""

    trace: ExecutionTrace
    ranks: tuple[int, ...]
    slots: tuple[Attr, ...]
    values: tuple[tuple[Any, ...], ...]

    def member_trace(self, index: int) -> ExecutionTrace:
        """The trace of member ``ranks[index]`` (the representative's bytes with the member's slot values)."""
        if index == 0 or not self.slots:
            return self.trace
        from tracekit.workloads.rank_template import RankTemplate
        from tracekit.wire.io import encode_trace, trace_from_bytes

        template = RankTemplate(encode_trace(self.trace), dict(enumerate(self.slots)))
        attrs: dict[object, Attr] = {
            k: Attr(s.name, v, s.kind) for k, (s, v) in enumerate(zip(self.slots, self.values[index]))
        }
        return trace_from_bytes(template.for_rank(attrs), rank=self.ranks[index])
