"""A rank-class set visited rank by rank: one member's trace alive at a time (issue 34).

:meth:`tracekit.sets.classset.ClassSet.to_traceset` builds every member's trace up front; a command that visits
each rank once and writes it (``export astra``) then holds every rank's bytes and, once read, its decoded
columns: 1.6 GB at 1,024 ranks of a 14,000-node capture.  :class:`StreamedClassSet` offers what such a
command reads of a :class:`~tracekit.sets.traceset.TraceSet` (``world_size``, ``len``, ``process_groups``,
``items()``), making each member's trace from its class's representative when ``items()`` reaches it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace
    from tracekit.sets.classset import ClassSet


class StreamedClassSet:
    """The members of ``classes`` one at a time, in the class set's order (class by class, ranks ascending)."""

    def __init__(self, classes: "ClassSet") -> None:
        self.classes = classes
        self._groups: dict[str, tuple[int, ...]] | None = None

    @property
    def world_size(self) -> int:
        """Ranks in the job."""
        return self.classes.world_size

    def __len__(self) -> int:
        return self.classes.world_size

    @property
    def process_groups(self) -> dict[str, tuple[int, ...]]:
        """pg_name -> ranks, as the whole set's :attr:`TraceSet.process_groups` gives them: the groups each
        class's representative declares (a member's declaration is its representative's; slots rename only
        collectives' groups and peers), all-ranks groups expanded.

        Raises:
            ValidationError: two classes declare one group differently (names the class file).
        """
        if self._groups is None:
            from tracekit.errors import ValidationError
            from tracekit.model.groups import resolve_groups

            declared: dict[str, tuple[int, ...]] = {}
            for cls in self.classes.classes:
                for name, ranks in self.classes.read_representative(cls).process_groups().items():
                    if declared.setdefault(name, tuple(ranks)) != tuple(ranks):
                        raise ValidationError(
                            f"process group {name!r} declared as {list(declared[name])} by another class "
                            f"and as {list(ranks)} here",
                            path=cls.file,
                            rank=cls.representative,
                        )
            self._groups = resolve_groups(declared, self.world_size)
        return self._groups

    def items(self) -> Iterator[tuple[int, "ExecutionTrace"]]:
        """``(rank, trace)`` of every member, each trace made from its bytes when reached (not kept).

        Raises:
            TraceFormatError: a class file cannot be decoded.
        """
        from tracekit.wire.io import trace_from_bytes

        path = str(self.classes.manifest)
        for rank, data in self.classes.iter_rank_bytes():
            yield rank, trace_from_bytes(data, path=f"{path}#rank{rank}", rank=rank)
