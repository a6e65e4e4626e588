"""The Megatron-LM rank grid: coordinates of a rank and the members of its process groups.

A job's ranks form a grid ``tp x cp x dp x pp``, tensor-parallel rank fastest,
then context, then data, then pipeline (Narayanan et al. 2021, SC21, section
3.3; Megatron-LM's ``parallel_state.initialize_model_parallel``)::

    rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))

Group kinds (:data:`GROUP_KINDS`), members = the ranks sharing ...

=========  ===============================================================
kind       members: ranks sharing ...
=========  ===============================================================
``tp``     cp, dp and pp coordinates (tensor-parallel collectives)
``cp``     tp, dp and pp coordinates (context-parallel key/value exchange)
``dp``     tp, cp and pp coordinates (ZeRO-3 parameter gathers)
``grad``   tp and pp coordinates: dp x cp ranks (gradient reduction)
``ep``     tp, cp, pp and ``dp_rank // ep`` (expert all-to-all)
``edp``    tp, cp, pp and ``dp_rank % ep`` (expert gradient reduction)
``pp``     tp, cp and dp coordinates (pipeline)
``emb``    first and last pipeline stage of one pp group (tied embeddings)
=========  ===============================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from tracekit.model import check_rank_count

DIMS = ("tp", "cp", "dp", "pp")
GROUP_KINDS = ("tp", "cp", "dp", "grad", "ep", "edp", "pp", "emb")
Coords = tuple[int, int, int, int]


@dataclass(frozen=True)
class Grid:
    """A ``tp x cp x dp x pp`` rank grid (Megatron order, tp fastest); coordinates are ``(t, c, d, s)``."""

    tp: int = 1
    cp: int = 1
    dp: int = 1
    pp: int = 1

    @property
    def world_size(self) -> int:
        """Number of ranks: ``tp * cp * dp * pp``."""
        return self.tp * self.cp * self.dp * self.pp

    @property
    def sizes(self) -> Coords:
        """``(tp, cp, dp, pp)``."""
        return (self.tp, self.cp, self.dp, self.pp)

    def rank(self, coords: Coords) -> int:
        """Global rank of ``(tp_rank, cp_rank, dp_rank, pp_rank)``."""
        t, c, d, s = coords
        return t + self.tp * (c + self.cp * (d + self.dp * s))

    def coords(self, rank: int) -> Coords:
        """``(tp_rank, cp_rank, dp_rank, pp_rank)`` of ``rank``."""
        rest, t = divmod(rank, self.tp)
        rest, c = divmod(rest, self.cp)
        s, d = divmod(rest, self.dp)
        return (t, c, d, s)

    def with_(self, **sizes: int) -> "Grid":
        """The grid with some sizes changed.

        Raises:
            ConfigError: the new grid would exceed :data:`tracekit.model.MAX_RANKS` ranks.
        """
        new = Grid(**{k: sizes.get(k, getattr(self, k)) for k in DIMS})
        check_rank_count(new.world_size, f"the new layout (tp {new.tp} x cp {new.cp} x dp {new.dp} x pp {new.pp})")
        return new

    def members(self, kind: str, coords: Coords, ep: int = 1) -> list[int]:
        """Ranks of the group of ``kind`` (:data:`GROUP_KINDS`) that the rank at ``coords`` belongs to.

        ``ep`` is the expert-parallel degree (a divisor of dp) for kinds ``ep`` and ``edp``.

        Raises:
            ValueError: an unknown kind.
        """
        t, c, d, s = coords
        rank = self.rank
        if kind == "tp":
            return [rank((x, c, d, s)) for x in range(self.tp)]
        if kind == "cp":
            return [rank((t, x, d, s)) for x in range(self.cp)]
        if kind == "dp":
            return [rank((t, c, x, s)) for x in range(self.dp)]
        if kind == "grad":
            return [rank((t, y, x, s)) for x in range(self.dp) for y in range(self.cp)]
        if kind == "ep":
            base = d - d % ep
            return [rank((t, c, base + e, s)) for e in range(ep)]
        if kind == "edp":
            return [rank((t, c, x, s)) for x in range(d % ep, self.dp, ep)]
        if kind == "pp":
            return [rank((t, c, d, x)) for x in range(self.pp)]
        if kind == "emb":
            return [rank((t, c, d, 0)), rank((t, c, d, self.pp - 1))]
        raise ValueError(f"unknown group kind {kind!r}; choose one of {', '.join(GROUP_KINDS)}")

    def pipeline_peers(self, coords: Coords) -> tuple[int, int]:
        """``(previous, next)`` pipeline neighbours: stage ``pp_rank -/+ 1`` modulo pp, other coordinates kept."""
        t, c, d, s = coords
        return self.rank((t, c, d, (s - 1) % self.pp)), self.rank((t, c, d, (s + 1) % self.pp))


__all__ = ["DIMS", "GROUP_KINDS", "Coords", "Grid"]
