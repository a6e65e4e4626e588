"""Is the job given the whole job? A collective of the default group run over fewer ranks than its set has.

A Chakra collective without ``pg_name`` belongs to the default group, which is every rank of the job (Chakra's
and ASTRA-sim's reading, docs/design.md section 3). Replaying one file of ASTRA-sim's 4-rank
``all_reduce.{0..3}.et`` alone therefore runs its all-reduce over one rank, which takes 0 ns: a plausible-looking
wrong answer. Nothing inside such a file says how many ranks the job had, but its name does: the rank files
``<prefix>.<rank>.et[.gz]`` beside it. :func:`check_whole_job` refuses a replay whose default-group collectives
would span fewer ranks than the set of files beside it holds, or than the ``group_size`` its ``process_group:init``
gives the default group (PyTorch's Execution Trace records it), and warns when a one-rank job has such collectives,
no sibling files and declares no process group at all (ASTRA-sim's files; the other ranks' files may be
elsewhere). A capture that declares its all-ranks group without a size (tracekit's converter writes
``group_size`` 0) is trusted: one-GPU NCCL runs have one-rank collectives.
"""

from __future__ import annotations

import glob as _glob
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from tracekit.errors import ReplayError
from tracekit.model.groups import DEFAULT_PG, default_group_size
from tracekit.io import rank_from_path
from tracekit.model import CollectiveType

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.sets.traceset import TraceSet

log = logging.getLogger("tracekit.replayer")

__all__ = ["check_whole_job", "check_whole_traceset", "rank_files_beside"]

_PREFIX_RE = re.compile(r"^(.*)\.\d+\.et(?:\.gz)?$")


def rank_files_beside(path: str | None) -> tuple[str, list[int]] | None:
    """The prefix of a ``<prefix>.<rank>.et[.gz]`` file and the ranks of every file of that prefix beside it.

    Returns:
        ``(prefix, ascending ranks)``, or None when ``path`` is None or has no rank in its name.
    """
    if path is None:
        return None
    m = _PREFIX_RE.match(str(path))
    if m is None:
        return None
    prefix = m.group(1)
    from tracekit.sets.io import is_rank_file_of

    names = _glob.glob(_glob.escape(prefix) + ".*.et") + _glob.glob(_glob.escape(prefix) + ".*.et.gz")
    stem = Path(prefix).name
    ranks = sorted(
        {
            r
            for r in (rank_from_path(Path(n).name) for n in names if is_rank_file_of(stem, Path(n).name))
            if r is not None
        }
    )
    return prefix, ranks


def _names(prefix: str, ranks: list[int]) -> str:
    """``name.0.et ... name.3.et`` for the files of a set (ranks ascending, at least one)."""
    stem = Path(prefix).name
    return f"{stem}.{ranks[0]}.et" if len(ranks) == 1 else f"{stem}.{ranks[0]}.et ... {stem}.{ranks[-1]}.et"


def missing_ranks_hint(path: str | None, world: int) -> str:
    """``; N rank files of this set lie beside it (...): pass the whole set: tracekit replay PREFIX`` when the
    files beside ``path`` name more ranks than ``world`` ("" otherwise)."""
    beside = rank_files_beside(path)
    if beside is None or not beside[1] or max(beside[1]) + 1 <= world:
        return ""
    prefix, ranks = beside
    return (
        f"; {len(ranks)} rank files of this set lie beside it ({_names(prefix, ranks)}): pass the whole set: "
        f"tracekit replay {prefix}"
    )


def _how(path: str | None, beside: tuple[str, list[int]] | None, on_disk: int, expected: int) -> str:
    """How to pass the whole set: ``tracekit replay PREFIX`` (with the files it needs when some are missing)."""
    if beside is not None and on_disk >= expected:
        return f"tracekit replay {beside[0]}"
    m = _PREFIX_RE.match(str(path)) if path is not None else None
    if m is None:
        return "every rank's file (<prefix>.<rank>.et)"
    stem = Path(m.group(1)).name
    return f"tracekit replay {m.group(1)} with every rank's file beside it ({stem}.0.et ... {stem}.{expected - 1}.et)"


def _coll_name(comm_type: int) -> str:
    try:
        return CollectiveType(comm_type).name
    except ValueError:
        return f"comm_type {comm_type}"


def check_whole_job(
    path: str | None,
    rank: int,
    world: int,
    declared: Mapping[str, tuple[int, ...]],
    first_world_collective: Callable[[], tuple[int, int] | None],
    group_size: Callable[[], int | None] = lambda: None,
) -> None:
    """Refuse (or warn about) a job whose default-group collectives would span too few ranks (module doc).

    Args:
        path: the file of the job's lowest rank (its name gives the prefix of the set).
        rank: that rank.
        world: the ranks the replay would simulate (from file names and declared groups).
        declared: the process groups the ranks declare (a declared default group ``"0"`` with its ranks is
            taken as the truth).
        first_world_collective: returns ``(node id, comm_type)`` of the lowest rank's first collective of the
            default group, or None; called only when a problem is possible.
        group_size: returns the default group's ``group_size`` from the lowest rank's ``process_group:init``
            (:func:`tracekit.model.groups.default_group_size`), or None; called only when a problem is possible.

    Raises:
        ReplayError: the trace's own process group, or files of the same set with higher ranks beside ``path``,
            say the default group has more ranks than ``world`` and a default-group collective would run over
            only ``world`` ranks (names the file, the node, the group size and how to pass the whole set).
    """
    if declared.get(DEFAULT_PG):
        return
    beside = rank_files_beside(path)
    on_disk = max(beside[1]) + 1 if beside and beside[1] else world
    if on_disk <= world and world != 1:
        return
    size = group_size()
    if size is not None and size <= world and on_disk <= world:
        return  # the capture says the job had these ranks only (a one-GPU run has one-rank collectives)
    found = first_world_collective()
    if found is None:
        return
    node_id, comm_type = found
    what = f"{_coll_name(comm_type)} without a process group spans every rank of the job"
    expected = max(size or 0, on_disk)
    if expected > world:
        effect = "takes 0 ns" if world == 1 else "is timed as a smaller group"
        source = (
            f"its process_group:init gives the default group {size} ranks"
            if size is not None and size == expected
            else f"{len(beside[1])} rank files {_names(beside[0], beside[1])} lie beside it"  # type: ignore[index]
        )
        raise ReplayError(
            f"{what}, and the set expects {expected} ranks ({source}) but only {world} "
            f"{'is' if world == 1 else 'are'} given: a collective over {world} rank{'' if world == 1 else 's'} "
            f"{effect}; pass the whole set: {_how(path, beside, on_disk, expected)}",
            path=path,
            rank=rank,
            node_id=node_id,
        )
    if DEFAULT_PG in declared:  # a capture that declares its all-ranks group (a one-GPU NCCL run): trusted
        return
    log.warning(
        "%srank %d: node %d: %s, and the job has 1 rank: it takes 0 ns; if the job had more ranks, give "
        "every rank's file (<prefix>.<rank>.et)",
        f"{path}: " if path is not None else "",
        rank,
        node_id,
        what,
    )


def check_whole_traceset(traceset: "TraceSet") -> None:
    """:func:`check_whole_job` of a trace set in memory (its lowest rank's file and declared groups).

    Raises:
        ReplayError: as :func:`check_whole_job`.
    """
    if not len(traceset):
        return
    rank = traceset.ranks[0]
    trace = traceset[rank]

    def first() -> tuple[int, int] | None:
        from tracekit.sets.rendezvous import comm_table

        table = comm_table(trace)
        positions = table.coll.get(DEFAULT_PG)
        if not positions:
            return None
        return int(trace.columns().ids[positions[0]]), table.coll_attr[positions[0]][0]

    check_whole_job(
        trace.path, rank, traceset.world_size, traceset._declared_groups(), first, lambda: default_group_size(trace)
    )
