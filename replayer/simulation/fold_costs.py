"""The cost key of the folding proof (:mod:`.folding`, point 2): two instances fold together only when their
costs are equal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.errors import TracekitError

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.collectives import CommCost
    from tracekit.replayer.simulation.hardware import HardwareSpec
    from tracekit.replayer.simulation.program import ReplayOptions

__all__ = ["CostCheck"]


class CostCheck:
    """A comparable key for the cost of an instance (equal keys: equal costs)."""

    def __init__(self, spec: "HardwareSpec", options: "ReplayOptions") -> None:
        from tracekit.replayer.simulation.collective_models import make_collective_model

        self.measured = (options.collective_model or spec.collective_model) == "measured"
        self.model = None if self.measured else make_collective_model(spec)
        self.cache: dict[tuple[str, int | None, int, tuple[int, ...]], CommCost | str] = {}

    def key(self, kind: str, ctype: int | None, nbytes: int, ranks: tuple[int, ...]) -> "CommCost | str":
        """The cost of a ``collective``/``p2p`` instance, or ``"measured"`` (priced from durations); NotFoldable."""
        if self.measured:
            return "measured"  # the members' measured starts and durations: equal by the digest
        ck = (kind, ctype, nbytes, ranks)
        found = self.cache.get(ck)
        if found is not None:
            return found
        from tracekit.model import CollectiveType
        from tracekit.replayer.simulation.collectives import UnsupportedCollectiveError
        from tracekit.replayer.simulation.fold_types import NotFoldable

        assert self.model is not None  # every model but "measured" has one
        cost: CommCost | str
        try:
            if kind == "p2p":
                cost = self.model.p2p_cost(nbytes, ranks[0], ranks[1])
            else:
                assert ctype is not None  # a collective's (rendezvous: a missing one reads as ALL_REDUCE)
                cost = self.model.collective_cost(CollectiveType(ctype), nbytes, ranks)
        except UnsupportedCollectiveError:
            cost = "measured"  # priced from the members' durations: equal by the digest
        except (TracekitError, ValueError) as exc:  # a bad spec or comm_type: the unfolded replay reports it
            raise NotFoldable(f"cannot cost a communication ({exc})") from None
        if not isinstance(cost, str) and len(set(cost.member_ns)) > 1:
            raise NotFoldable("members of a collective finish at different times (ASTRA-sim's double binary tree)")
        self.cache[ck] = cost
        return cost
