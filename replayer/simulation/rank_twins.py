"""One compile for ranks whose programs differ only in what the compile does not read (issue 34).

A TP x PP x DP job's ranks of one pipeline stage run the same nodes; their files differ in ``pg_name`` and the
``comm_src``/``comm_dst`` peers only, so :func:`tracekit.wire.sharing.share_identical_columns` (byte-identical
records) does not pair them, yet :func:`.rank_arrays.compile_rank` gives them the same arrays: it reads node ids,
types, measured durations, data dependencies and a few attributes (``is_cpu_op``; ``comm_type`` under the
ASTRA-sim model; ``tid``/``stream`` when streams come from the trace; ``num_ops``/``tensor_size`` when the
compute model may use them), never a group name or peer.

:class:`CompileTwins` finds a compiled rank whose inputs are exactly those of a new rank and hands back its
:class:`~.rank_arrays.RankArrays` (relative to the rank, so they place at any offset).  Exact, never a summary:
the inputs' bytes (with each array's length and dtype) are the key of a dict of compiled ranks.  Attributes
are compared only as integers read from a file (``NodeColumns.attr_num_fn``: presence and int64 value per node;
``is_cpu_op`` with bools as 0/1, the form :func:`.rank_compile.bool_attr` reads): a rank with a float, bool
(other than ``is_cpu_op``), string or in-memory attribute is compiled on its own, so every reading rule (strict
or lenient) sees equal values on both ranks.  Equal ids and dependencies also mean equal duplicate-id and cycle
checks, so a twin raises exactly when its representative would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.model.attrs import COMM_TYPE, IS_CPU_OP, NUM_OPS, STREAM, TENSOR_SIZE, TID

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace
    from tracekit.replayer.simulation.compute import ComputeModel
    from tracekit.replayer.simulation.rank_arrays import RankArrays


def compile_inputs(
    trace: "ExecutionTrace", streams: str, model_name: str, compute: "ComputeModel"
) -> tuple[np.ndarray, ...] | None:
    """Every array :func:`.rank_arrays.compile_rank` reads of ``trace`` under these settings, or None when an
    attribute it reads is not held as plain integers of a file (module doc: then the rank is not shared).

    Returns:
        ``(ids, types, duration_ns, data_ptr, data_ids, present_1, values_1, ...)``, one present bool[N] and
        values int64[N] pair per attribute read.

    Raises:
        TraceFormatError: a corrupt attribute message (as the compile's own reading would).
    """
    cols = trace.columns()
    num = cols.attr_num_fn
    if num is None:
        return None
    out = [cols.ids, cols.types, cols.duration_ns, cols.data_ptr, cols.data_ids]
    fast = num(str(IS_CPU_OP), True, True)
    if fast is None:
        return None
    out.extend(fast)
    names = []
    if model_name == "astra":
        names.append(COMM_TYPE)
    elif streams == "trace":
        names += [TID, STREAM]
    if not (compute.mode == "measured" and bool(np.all(cols.duration_ns > 0))):
        names += [NUM_OPS, TENSOR_SIZE]
    for name in names:
        fast = num(str(name), True, False)
        if fast is None:
            return None
        out.extend(fast)
    return tuple(out)


def _blob(inputs: tuple[np.ndarray, ...]) -> bytes:
    """The inputs as one bytes key: each array's length and dtype, then every array's bytes (exact: equal keys
    mean equal arrays; a dict compares colliding keys byte by byte)."""
    head = np.asarray([x for a in inputs for x in (len(a), a.dtype.num)], dtype=np.int64).tobytes()
    return b"".join([head, *(np.ascontiguousarray(a).tobytes() for a in inputs)])


class CompileTwins:
    """Compiled ranks by their compile inputs (:func:`compile_inputs`), for one compile's settings."""

    def __init__(self, streams: str, model_name: str, compute: "ComputeModel") -> None:
        self.streams, self.model_name, self.compute = streams, model_name, compute
        self._seen: dict[bytes, "RankArrays"] = {}
        self.shared = 0  #: ranks that reused a twin's arrays

    def find(self, trace: "ExecutionTrace") -> tuple["RankArrays | None", Any]:
        """``(arrays of a compiled twin or None, token for :meth:`add`)``.

        Raises:
            TraceFormatError: as :func:`compile_inputs`.
        """
        inputs = compile_inputs(trace, self.streams, self.model_name, self.compute)
        if inputs is None:
            return None, None
        key = _blob(inputs)
        arrays = self._seen.get(key)
        if arrays is not None:
            self.shared += 1
        return arrays, key

    def add(self, token: Any, arrays: "RankArrays") -> None:
        """Remember ``arrays``, compiled from the rank :meth:`find` gave ``token`` for (None: nothing to keep)."""
        if token is not None:
            self._seen[token] = arrays
