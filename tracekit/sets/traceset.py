"""A job: the execution traces of all its ranks plus its process groups."""

from __future__ import annotations

from typing import ItemsView, Iterator, Mapping, Sequence

from tracekit.errors import ValidationError
from tracekit.model.groups import GroupsMerger, canonical_pg_name, resolve_groups, shared_groups
from tracekit.model import ExecutionTrace


class TraceSet:
    """All ranks of one job.

    Args:
        traces: rank -> trace, or a sequence whose index is the rank.
        process_groups: pg_name -> ranks.  When omitted, the groups declared
            in the traces' ``process_group:init`` nodes are used (the union
            over ranks).  A group with no ranks means all ranks.

    Attributes:
        process_groups: pg_name -> tuple of ranks, all-ranks groups expanded;
            the default group ``"0"`` (all ranks) is always present.

    Raises:
        ValidationError: not at construction (groups are resolved lazily) but on first use of
            :attr:`world_size` or :attr:`process_groups` when two declarations of one group disagree, and
            of :attr:`process_groups` when a group names a rank outside the world.
    """

    def __init__(
        self,
        traces: Mapping[int, ExecutionTrace] | Sequence[ExecutionTrace],
        process_groups: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        if isinstance(traces, Mapping):
            items = sorted(traces.items())
        else:
            items = list(enumerate(traces))
        self._traces: dict[int, ExecutionTrace] = {}
        for rank, trace in items:
            if trace.rank is None:
                trace = trace.with_label(rank=int(rank))
            self._traces[int(rank)] = trace
        self._declared = (
            {str(k): tuple(int(r) for r in v) for k, v in process_groups.items()}
            if process_groups is not None
            else None
        )
        self._groups: dict[str, tuple[int, ...]] | None = None
        self._declared_cache: dict[str, tuple[int, ...]] | None = None

    # ----- ranks ----------------------------------------------------------------------
    @property
    def ranks(self) -> tuple[int, ...]:
        """Ranks that have a trace in this set, ascending."""
        return tuple(self._traces)

    @property
    def world_size(self) -> int:
        """Ranks in the job: 1 + the highest rank of a trace file or of a declared group member.

        A set may hold fewer traces than its world (a partial job, e.g. one
        captured rank of two); :attr:`missing_ranks` lists the others.

        Raises:
            ValidationError: two ranks declare one process group differently.
        """
        top = max(self._traces) if self._traces else -1
        for ranks in self._declared_groups().values():
            if ranks:
                top = max(top, max(ranks))
        return top + 1

    @property
    def missing_ranks(self) -> tuple[int, ...]:
        """Ranks of the world with no trace in this set."""
        return tuple(r for r in range(self.world_size) if r not in self._traces)

    def __len__(self) -> int:
        return len(self._traces)

    def __getitem__(self, rank: int) -> ExecutionTrace:
        return self._traces[rank]

    def __iter__(self) -> Iterator[ExecutionTrace]:
        return iter(self._traces.values())

    def items(self) -> ItemsView[int, ExecutionTrace]:
        """``(rank, trace)`` pairs, ascending rank."""
        return self._traces.items()

    def with_traces(
        self,
        traces: Mapping[int, ExecutionTrace] | Sequence[ExecutionTrace],
        process_groups: Mapping[str, Sequence[int]] | None = None,
    ) -> "TraceSet":
        """A new set with other traces (process groups kept unless given)."""
        return TraceSet(traces, process_groups if process_groups is not None else self._declared)

    # ----- process groups -------------------------------------------------------------
    @property
    def process_groups(self) -> dict[str, tuple[int, ...]]:
        """pg_name -> ranks of every group, all-ranks groups expanded, default group ``"0"`` included.

        Resolved once, on first use.

        Raises:
            ValidationError: two ranks declare one group differently, or a group names a rank outside the world.
        """
        if self._groups is None:
            self._groups = self._resolve_groups()
        return self._groups

    def _declared_groups(self) -> dict[str, tuple[int, ...]]:
        if self._declared_cache is not None:
            return self._declared_cache
        if self._declared is not None:
            self._declared_cache = dict(self._declared)
            return self._declared_cache
        merger = GroupsMerger()
        for rank, trace in self._traces.items():
            # every rank declaring the same list (the usual case) shares one dict: merged in O(1), not O(groups)
            groups = shared_groups(trace)
            bad = merger.add(groups)
            if bad is not None:
                raise ValidationError(
                    f"process group {bad!r} declared as {list(merger.groups[bad])} on another rank "
                    f"and as {list(groups[bad])} here",
                    rank=rank,
                    path=trace.path,
                )
        self._declared_cache = merger.groups
        return merger.groups

    def _resolve_groups(self) -> dict[str, tuple[int, ...]]:
        return resolve_groups(self._declared_groups(), self.world_size)

    def group_ranks(self, pg_name: str | None) -> tuple[int, ...]:
        """Ranks of the group a collective names (``""``/None = default group).

        Raises:
            ValidationError: unknown group.
        """
        key = canonical_pg_name(pg_name)
        try:
            return self.process_groups[key]
        except KeyError:
            raise ValidationError(f"unknown process group {key!r} (declared: {sorted(self.process_groups)})") from None

    def __repr__(self) -> str:
        return f"TraceSet(ranks={len(self)}, nodes={sum(len(t) for t in self)})"
