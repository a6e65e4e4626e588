"""One attribute search per rank for a whole replay (issue 34 item 5: checks and compile in vectorised passes).

The up-front checks (:mod:`.checks`, :mod:`tracekit.checks.validate`), the program's compile
(:mod:`.rank_compile`) and the matching (:mod:`.matching`) each read a rank's communication attributes and its
communication table (:func:`tracekit.sets.rendezvous.comm_table`).  Read from a file, every ask of an attribute was
a compiled pass over all of the rank's records (21 passes a rank on a generated LLM job, 83 % of the checks'
time); inside :func:`kept_attributes` they are found in one pass and the table is built once.  Rank files with
byte-identical records share one column table there (:func:`tracekit.wire.sharing.share_identical_columns`), so
that search, the table and the per-rank work cached by columns (checks, compile) run once per distinct program.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

from tracekit.model.attrs import (
    COMM_DST,
    COMM_SIZE,
    COMM_SRC,
    COMM_TAG,
    COMM_TYPE,
    IS_CPU_OP,
    NUM_OPS,
    PG_NAME,
    STREAM,
    TENSOR_SIZE,
    TID,
)

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.sets.traceset import TraceSet

#: the attributes a replay of measured or modelled durations reads on every rank
REPLAY_ATTRS = [str(x) for x in (COMM_TYPE, COMM_SIZE, COMM_SRC, COMM_DST, COMM_TAG, PG_NAME, IS_CPU_OP, STREAM, TID)]
#: what a compute model other than ``measured`` reads too (:func:`.rank_compile.compute_durations`)
ROOFLINE_ATTRS = [str(NUM_OPS), str(TENSOR_SIZE)]


@contextmanager
def kept_attributes(traceset: "TraceSet", compute_mode: str = "measured") -> Iterator[None]:
    """Within the block, each rank's :data:`REPLAY_ATTRS` come from one search and its communication table is
    built once (:meth:`tracekit.model.graph.NodeColumns.keep_attrs`); released on the way out, errors included.
    ``compute_mode`` (the spec's ``[compute] mode``) other than ``measured`` adds :data:`ROOFLINE_ATTRS`.

    Raises:
        TraceFormatError: a rank's records or attributes cannot be decoded (as the first ask would).
    """
    from tracekit.wire.sharing import share_identical_columns

    kept = []
    searched: set[int] = set()
    names = REPLAY_ATTRS if compute_mode == "measured" else REPLAY_ATTRS + ROOFLINE_ATTRS
    try:
        share_identical_columns(traceset)  # byte-identical rank files: one column table (and one search) for all
        for trace in traceset:
            cols = trace.columns()
            if id(cols) in searched:  # shared by byte-identical ranks: searched already
                continue
            searched.add(id(cols))
            kept.append(cols)
            cols.keep_attrs(names)
        yield
    finally:
        for cols in kept:
            cols.release_attrs()
