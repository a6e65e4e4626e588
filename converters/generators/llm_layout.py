"""Rank layout of a parallel transformer job: coordinates, process groups and pipeline peers.

Megatron-LM order (Narayanan et al. 2021, section 3.3; Megatron-LM's
``parallel_state``): tensor-parallel rank fastest, then context, then data,
then pipeline::

    rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))

Groups (only those with more than one rank are declared; descriptions such as
``tp_3`` go to ``pg_desc``, the ``pg_name`` is the number
:class:`~tracekit.converters.generators._build.ProcessGroups` hands out):

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

from tracekit.converters.generators._build import ProcessGroups
from tracekit.converters.generators.llm_config import LLMConfig

GROUP_KINDS = ("tp", "cp", "dp", "grad", "ep", "edp", "pp", "emb")


@dataclass(frozen=True)
class RankPlace:
    """Where one rank sits in the job.

    Attributes:
        rank: global rank.
        tp_rank, cp_rank, dp_rank, pp_rank, ep_rank: coordinates.
        groups: ``(kind, pg_name)`` pairs for the groups this rank uses.
        prev_rank, next_rank: pipeline neighbours (stage ``pp_rank - 1`` and
            ``+ 1`` modulo pp, same other coordinates); None when pp is 1.
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

    def group(self, kind: str) -> str | None:
        """``pg_name`` of this rank's group of ``kind``, None when it has no such group."""
        for k, name in self.groups:
            if k == kind:
                return name
        return None


def rank_of(config: LLMConfig, tp_rank: int, cp_rank: int, dp_rank: int, pp_rank: int) -> int:
    """Global rank of the given coordinates (Megatron order)."""
    p = config.parallel
    return tp_rank + p.tp * (cp_rank + p.cp * (dp_rank + p.dp * pp_rank))


def coordinates(config: LLMConfig, rank: int) -> tuple[int, int, int, int]:
    """``(tp_rank, cp_rank, dp_rank, pp_rank)`` of ``rank``."""
    p = config.parallel
    rest, tp_rank = divmod(rank, p.tp)
    rest, cp_rank = divmod(rest, p.cp)
    pp_rank, dp_rank = divmod(rest, p.dp)
    return tp_rank, cp_rank, dp_rank, pp_rank


def _members(config: LLMConfig, kind: str, tp_r: int, cp_r: int, dp_r: int, pp_r: int) -> list[int]:
    p = config.parallel
    if kind == "tp":
        return [rank_of(config, t, cp_r, dp_r, pp_r) for t in range(p.tp)]
    if kind == "cp":
        return [rank_of(config, tp_r, c, dp_r, pp_r) for c in range(p.cp)]
    if kind == "dp":
        return [rank_of(config, tp_r, cp_r, d, pp_r) for d in range(p.dp)]
    if kind == "grad":
        return [rank_of(config, tp_r, c, d, pp_r) for d in range(p.dp) for c in range(p.cp)]
    if kind == "ep":
        base = dp_r - dp_r % p.ep
        return [rank_of(config, tp_r, cp_r, base + e, pp_r) for e in range(p.ep)]
    if kind == "edp":
        return [rank_of(config, tp_r, cp_r, d, pp_r) for d in range(dp_r % p.ep, p.dp, p.ep)]
    if kind == "pp":
        return [rank_of(config, tp_r, cp_r, dp_r, s) for s in range(p.pp)]
    if kind == "emb":
        return [rank_of(config, tp_r, cp_r, dp_r, 0), rank_of(config, tp_r, cp_r, dp_r, p.pp - 1)]
    raise ValueError(kind)


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
    p = config.parallel
    groups = ProcessGroups(config.world_size)
    coords = [coordinates(config, r) for r in range(config.world_size)]
    names: dict[tuple[str, int], str] = {}
    for kind in GROUP_KINDS:
        index: dict[tuple[int, ...], int] = {}
        for r, (t, c, d, s) in enumerate(coords):
            if not _uses(config, kind, s):
                continue
            members = tuple(_members(config, kind, t, c, d, s))
            if len(members) < 2:
                continue
            k = index.setdefault(members, len(index))
            names[(kind, r)] = groups.add(members, f"{kind}_{k}")
    places = []
    for r, (t, c, d, s) in enumerate(coords):
        prev_rank = next_rank = None
        if p.pp > 1:
            prev_rank = rank_of(config, t, c, d, (s - 1) % p.pp)
            next_rank = rank_of(config, t, c, d, (s + 1) % p.pp)
        own = tuple((kind, names[(kind, r)]) for kind in GROUP_KINDS if (kind, r) in names)
        places.append(RankPlace(r, t, c, d, s, d % p.ep, own, prev_rank, next_rank))
    return groups, places
