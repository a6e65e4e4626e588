"""A job: the traces of all its ranks, their process groups, and a trace set on disk.

:class:`~tracekit.sets.traceset.TraceSet` (ranks plus process groups), reading and writing a set
(:mod:`tracekit.sets.io`: rank files of a prefix, atomic writes of the whole set, the prefix lock in
``_prefix_lock``), rank-class sets (:mod:`tracekit.sets.classset`, stamps in :mod:`tracekit.sets.stamps`),
ASTRA-sim's communicator-group file (:mod:`tracekit.sets.comm_groups`) and the one collective matcher
(:mod:`tracekit.sets.rendezvous`). Uses :mod:`tracekit.wire` and :mod:`tracekit.model`.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracekit.sets._prefix_lock import hold_prefix, hold_prefix_shared
    from tracekit.sets.classset import ClassSet, find_class_set, read_class_set, write_class_set
    from tracekit.sets.comm_groups import (
        COMM_GROUPS_SUFFIX,
        astra_group_ids,
        check_members_on_file,
        comm_groups_beside,
        comm_groups_document,
        comm_groups_near,
        comm_groups_path,
        merge_declared,
        read_comm_groups,
        with_comm_groups,
    )
    from tracekit.sets.io import read_traceset, trace_paths, write_traceset
    from tracekit.sets.rendezvous import CommTable, collective_instances, comm_table, group_order, p2p_pairs
    from tracekit.sets.stamps import class_key, read_rank_class, stamp_rank_class
    from tracekit.sets.traceset import TraceSet
    from tracekit.sets.writer import TraceSetWriter

__all__ = [
    "COMM_GROUPS_SUFFIX",
    "ClassSet",
    "CommTable",
    "TraceSet",
    "TraceSetWriter",
    "astra_group_ids",
    "check_members_on_file",
    "class_key",
    "collective_instances",
    "comm_groups_beside",
    "comm_groups_document",
    "comm_groups_near",
    "comm_groups_path",
    "comm_table",
    "find_class_set",
    "group_order",
    "hold_prefix",
    "hold_prefix_shared",
    "merge_declared",
    "p2p_pairs",
    "read_class_set",
    "read_comm_groups",
    "read_rank_class",
    "read_traceset",
    "stamp_rank_class",
    "trace_paths",
    "with_comm_groups",
    "write_class_set",
    "write_traceset",
]

# name -> the module defining it, imported on first use (PEP 562): importing the package imports no module
_FACE = {
    "COMM_GROUPS_SUFFIX": "tracekit.sets.comm_groups",
    "ClassSet": "tracekit.sets.classset",
    "CommTable": "tracekit.sets.rendezvous",
    "TraceSet": "tracekit.sets.traceset",
    "TraceSetWriter": "tracekit.sets.writer",
    "astra_group_ids": "tracekit.sets.comm_groups",
    "check_members_on_file": "tracekit.sets.comm_groups",
    "class_key": "tracekit.sets.stamps",
    "collective_instances": "tracekit.sets.rendezvous",
    "comm_groups_beside": "tracekit.sets.comm_groups",
    "comm_groups_document": "tracekit.sets.comm_groups",
    "comm_groups_near": "tracekit.sets.comm_groups",
    "comm_groups_path": "tracekit.sets.comm_groups",
    "comm_table": "tracekit.sets.rendezvous",
    "find_class_set": "tracekit.sets.classset",
    "group_order": "tracekit.sets.rendezvous",
    "hold_prefix": "tracekit.sets._prefix_lock",
    "hold_prefix_shared": "tracekit.sets._prefix_lock",
    "merge_declared": "tracekit.sets.comm_groups",
    "p2p_pairs": "tracekit.sets.rendezvous",
    "read_class_set": "tracekit.sets.classset",
    "read_comm_groups": "tracekit.sets.comm_groups",
    "read_rank_class": "tracekit.sets.stamps",
    "read_traceset": "tracekit.sets.io",
    "stamp_rank_class": "tracekit.sets.stamps",
    "trace_paths": "tracekit.sets.io",
    "with_comm_groups": "tracekit.sets.comm_groups",
    "write_class_set": "tracekit.sets.classset",
    "write_traceset": "tracekit.sets.io",
}


def __getattr__(name: str) -> object:
    """A name of the face, from its defining module on first use; ``AttributeError`` for any other name."""
    if name not in _FACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_FACE[name]), name)
