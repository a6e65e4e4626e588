"""ASTRA-sim's communicator-group file as a declaration of process groups.

ASTRA-sim does not read ``process_group:init`` nodes: it looks every non-empty ``pg_name`` up in the JSON given
to ``--comm-group-configuration`` (``{"1": [0, 1], "2": [2, 3]}``: communicator id -> member NPUs; ASTRA-sim
c459ab6 and 518bd51 ``CommunicatorGroup``).  Trace sets written for ASTRA-sim master (518bd51), which aborts on
any METADATA node, carry their groups only there.  This module reads such a file and merges its groups with the
ones the traces declare, so ``replay``, ``validate`` and ``info`` accept those sets:

- :func:`read_comm_groups` parses and checks the file;
- :func:`comm_groups_near` finds ``<prefix>.comm_groups.json`` beside a set's rank files (what tracekit writes and
  ``export astra`` passes to ASTRA-sim);
- :func:`merge_declared` adds the file's groups to declared ones; a group declared in both with other members is
  an error naming the file.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Mapping, Sequence

from tracekit.errors import ValidationError
from tracekit.model.groups import DEFAULT_PG

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.sets.traceset import TraceSet

#: group name -> member ranks, as ``ExecutionTrace.process_groups`` gives them
Groups = dict[str, tuple[int, ...]]


def read_comm_groups(path: str | os.PathLike[str]) -> Groups:
    """The groups of an ASTRA-sim comm-group JSON: ``{"<id>": [rank, ...], ...}``.

    Args:
        path: the file (``groups.json``, ``<prefix>.comm_groups.json``).

    Returns:
        id -> member ranks, ascending, in file order; ``{}`` for ``{}``.

    Raises:
        ValidationError: unreadable file, not JSON, not an object, an id given twice, an id that is empty or ``"0"`` (the world
            group has no entry in ASTRA-sim's file), or members that are not a non-empty list of distinct
            non-negative integers.
    """
    from tracekit.output import read_input_bytes

    try:
        raw = read_input_bytes(path)
    except OSError as exc:
        raise ValidationError(f"cannot read the comm-group file: {exc.strerror or exc}", path=path) from None
    try:
        doc = json.loads(raw, object_pairs_hook=lambda pairs: _unique_keys(pairs, path))
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of more than 4,300 digits
        raise ValidationError(f"comm-group file is not valid JSON: {exc}", path=path) from None
    except RecursionError:
        raise ValidationError("comm-group file nests deeper than Python can parse", path=path) from None
    if not isinstance(doc, dict):
        raise ValidationError(
            f"comm-group file must be a JSON object of id -> ranks, got {type(doc).__name__}", path=path
        )
    out: Groups = {}
    for key, members in doc.items():
        if key in ("", "0"):
            raise ValidationError(
                f"comm-group id {key!r}: ASTRA-sim's ids are non-empty and not '0' (the world group)", path=path
            )
        if (
            not isinstance(members, list)
            or not members
            or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in members)
            or len(set(members)) != len(members)
        ):
            raise ValidationError(
                f"comm-group {key!r}: members must be a non-empty list of distinct non-negative ranks, "
                f"got {str(members)[:80]}",
                path=path,
            )
        out[str(key)] = tuple(sorted(members))
    return out


def _unique_keys(pairs: list[tuple[str, object]], path: str | os.PathLike[str]) -> dict[str, object]:
    """A JSON object's pairs as a dict; an id given twice is refused (``json`` would keep the last silently)."""
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise ValidationError(f"comm-group id {key!r} appears twice in the file; give each group once", path=path)
        out[key] = value
    return out


def check_members_on_file(groups: Mapping[str, Sequence[int]], n_files: int, path: str | os.PathLike[str]) -> None:
    """Raise ValidationError when a group of the file ``path`` names a rank past the set's rank files 0..n_files-1.

    Raises:
        ValidationError: naming the file, the group and the rank.
    """
    for name, members in groups.items():
        top = max(members, default=-1)
        if top >= n_files:
            raise ValidationError(
                f"comm-group {name!r} names rank {top} but the trace set's rank files stop at rank {n_files - 1}",
                path=path,
            )


def comm_groups_near(first_rank_file: str | os.PathLike[str]) -> str | None:
    """``<prefix>.comm_groups.json`` beside the rank file ``<prefix>.<rank>.et[.gz]``; None if there is none."""
    found = comm_groups_beside(str(first_rank_file))
    return found[0] if found is not None else None


def merge_declared(
    declared: Mapping[str, Sequence[int]], extra: Mapping[str, Sequence[int]], path: str | os.PathLike[str] | None
) -> Groups:
    """``declared`` plus the groups of a comm-group file ``extra`` (read from ``path``).

    Raises:
        ValidationError: a group both declare with other members.
    """
    out: Groups = {str(k): tuple(int(r) for r in v) for k, v in declared.items()}
    for name, ranks in extra.items():
        ranks = tuple(sorted(int(r) for r in ranks))
        have = out.get(name)
        if have is not None and have and tuple(sorted(have)) != ranks:
            raise ValidationError(
                f"comm-group {name!r} has ranks {list(ranks)[:16]} but the traces declare it as {list(have)[:16]}",
                path=path,
            )
        out.setdefault(name, ranks)
    return out


def with_comm_groups(
    traceset: "TraceSet", extra: Mapping[str, Sequence[int]], path: str | os.PathLike[str] | None
) -> "TraceSet":
    """``traceset`` with the groups of a comm-group file added to the ones its traces declare (same object if none).

    Raises:
        ValidationError: a group both declare with other members (:func:`merge_declared`).
    """
    if not extra:
        return traceset
    merged = merge_declared(traceset._declared_groups(), extra, path)
    return traceset.with_traces(dict(traceset.items()), process_groups=merged)


COMM_GROUPS_SUFFIX = ".comm_groups.json"


def comm_groups_path(prefix: str) -> str:
    """``<prefix>.comm_groups.json``: the ASTRA-sim comm-group file written beside a trace set."""
    return f"{prefix}{COMM_GROUPS_SUFFIX}"


def comm_groups_beside(rank_file: str) -> "tuple[str, int] | None":
    """``(path, number of groups)`` of the comm-group file beside ``<prefix>.<rank>.et[.gz]``, None if absent.

    An unreadable file counts -1 groups (``info`` says so instead of failing).
    """
    import re

    import orjson

    m = re.match(r"^(.*)\.\d+\.et(\.gz)?$", str(rank_file))
    if m is None:
        return None
    path = comm_groups_path(m.group(1))
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as fh:
            doc = orjson.loads(fh.read())
        return path, len(doc) if isinstance(doc, dict) else -1
    except (OSError, orjson.JSONDecodeError):
        return path, -1


def astra_group_ids(groups: Mapping[str, Sequence[int]], world_size: int) -> dict[str, str | None]:
    """The ``pg_name`` each group gets in files written for ASTRA-sim.

    Args:
        groups: pg_name -> member ranks (resolved: the all-ranks group listed with every rank).
        world_size: number of ranks in the set.

    Returns:
        pg_name -> None for the all-ranks group ``"0"`` (written without ``pg_name``), else a positive
        integer as a string: the name itself when it already is one, else the next free integer.
    """
    world = tuple(range(world_size))
    out: dict[str, str | None] = {}
    taken = {name for name in groups if name.isdigit() and int(name) > 0}
    next_id = 1
    for name, ranks in groups.items():
        if name in ("", DEFAULT_PG) and tuple(sorted(ranks)) in (world, ()):
            out[name] = None
        elif name.isdigit() and int(name) > 0 and str(int(name)) == name:
            out[name] = name
        else:
            while str(next_id) in taken:
                next_id += 1
            out[name] = str(next_id)
            taken.add(str(next_id))
    return out


def comm_groups_document(groups: Mapping[str, Sequence[int]], ids: Mapping[str, str | None]) -> dict[str, list[int]]:
    """ASTRA-sim's comm-group JSON: ``{"<id>": [ranks...]}`` for every group with an id, ids ascending."""
    doc: dict[str, list[int]] = {}
    for name, ranks in groups.items():
        gid = ids.get(name)
        if gid:
            doc[gid] = sorted(int(r) for r in ranks)
    return {k: doc[k] for k in sorted(doc, key=int)}
