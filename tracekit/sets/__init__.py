"""A job: the traces of all its ranks, their process groups, and a trace set on disk.

:class:`~tracekit.sets.traceset.TraceSet` (ranks plus process groups), reading and writing a set
(:mod:`tracekit.sets.io`: rank files of a prefix, atomic writes of the whole set, the prefix lock in
``_prefix_lock``), rank-class sets (:mod:`tracekit.sets.classset`, stamps in :mod:`tracekit.sets.stamps`),
ASTRA-sim's communicator-group file (:mod:`tracekit.sets.comm_groups`) and the one collective matcher
(:mod:`tracekit.sets.rendezvous`). Uses :mod:`tracekit.wire` and :mod:`tracekit.model`.
"""
