"""Rank layout of a parallel transformer job: coordinates, process groups and pipeline peers.

Megatron-LM order (Narayanan et al. 2021, section 3.3; Megatron-LM's
``parallel_state``): tensor-parallel rank fastest, then context, then data,
then pipeline::

    rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))

Groups (kinds and members: :mod:`tracekit.workloads.grid`; only those with
more than one rank are declared; descriptions such as ``tp_3`` go to
``pg_desc``, the ``pg_name`` is the number
:class:`~tracekit.converters.generators.build.ProcessGroups` hands out).
"""

from __future__ import annotations

from dataclasses import dataclass

from tracekit.converters.generators.build import ProcessGroups
from tracekit.workloads.config import LLMConfig
from tracekit.workloads.grid import GROUP_KINDS, Grid


@dataclass(frozen=True)
class RankPlace:
    """Where one rank sits in the job.

    Attributes:
        rank: global rank.
        tp_rank, cp_rank, dp_rank, pp_rank, ep_rank: coordinates.
        groups: ``(kind, pg_name)`` pairs for the groups this rank uses.
        prev_rank, next_rank: pipeline neighbours (stage ``pp_rank - 1`` and
            ``+ 1`` modulo pp, same other coordinates); None when pp is 1.
        cp_prev_rank, cp_next_rank: context-parallel ring neighbours (``cp_rank - 1`` and ``+ 1`` modulo cp,
            same other coordinates); None when cp is 1.
    """

    rank: int
    tp_rank: int
    cp_rank: int
    dp_rank: int
    pp_rank: int
    ep_rank: int
    groups: tuple[tuple[str, str], ...]
    prev_rank: int | None
    next_rank: int | None
    cp_prev_rank: int | None = None
    cp_next_rank: int | None = None

    def group(self, kind: str) -> str | None:
        """``pg_name`` of this rank's group of ``kind``, None when it has no such group."""
        for k, name in self.groups:
            if k == kind:
                return name
        return None


def grid(config: LLMConfig) -> Grid:
    """The rank grid of ``config`` (:class:`tracekit.workloads.grid.Grid`)."""
    p = config.parallel
    return Grid(tp=p.tp, cp=p.cp, dp=p.dp, pp=p.pp)


def coordinates(config: LLMConfig, rank: int) -> tuple[int, int, int, int]:
    """``(tp_rank, cp_rank, dp_rank, pp_rank)`` of ``rank``."""
    return grid(config).coords(rank)


def _uses(config: LLMConfig, kind: str, pp_rank: int) -> bool:
    p, m = config.parallel, config.model
    if kind == "emb":
        return m.tied_embeddings and p.pp > 1 and pp_rank in (0, p.pp - 1)
    if kind in ("ep", "edp"):
        return m.is_moe
    return True


def layout(config: LLMConfig) -> tuple[ProcessGroups, list[RankPlace]]:
    """Process groups and the place of every rank (index = rank).

    Groups are registered kind by kind in :data:`GROUP_KINDS` order, so their
    numeric names do not depend on anything but the configuration.
    """
    p, g = config.parallel, grid(config)
    groups = ProcessGroups(config.world_size)
    coords = [g.coords(r) for r in range(config.world_size)]
    names: dict[tuple[str, int], str] = {}
    for kind in GROUP_KINDS:
        index: dict[tuple[int, ...], int] = {}
        for r, (t, c, d, s) in enumerate(coords):
            if not _uses(config, kind, s):
                continue
            members = tuple(g.members(kind, (t, c, d, s), p.ep))
            if len(members) < 2:
                continue
            k = index.setdefault(members, len(index))
            names[(kind, r)] = groups.add(members, f"{kind}_{k}")
    places = []
    for r, (t, c, d, s) in enumerate(coords):
        prev_rank = next_rank = None
        if p.pp > 1:
            prev_rank, next_rank = g.pipeline_peers((t, c, d, s))
        own = tuple((kind, names[(kind, r)]) for kind in GROUP_KINDS if (kind, r) in names)
        ring = g.members("cp", (t, c, d, s)) if p.cp > 1 else None
        cp_prev, cp_next = (ring[(c - 1) % p.cp], ring[(c + 1) % p.cp]) if ring else (None, None)
        places.append(RankPlace(r, t, c, d, s, d % p.ep, own, prev_rank, next_rank, cp_prev, cp_next))
    return groups, places
