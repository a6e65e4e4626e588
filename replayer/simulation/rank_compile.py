"""Compiling one rank: node kinds, resources, compute durations and same-resource chains (numpy, per rank).

Used by :func:`.program.compile_program`; the resource table is in :mod:`.program`'s module doc.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.jit import kernel
from tracekit.model.attrs import COMM_TYPE, IS_CPU_OP, NUM_OPS, STREAM, TENSOR_SIZE, TID, BoolField
from tracekit.errors import ReplayError, TracekitError
from tracekit.model import MAX_DURATION_NS, NodeType

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace
    from tracekit.replayer.simulation.compute import ComputeModel

# node kinds
K_TIMED, K_ZERO, K_COLL, K_SEND, K_RECV = range(5)
KIND_NAMES = ("timed", "zero", "collective", "send", "recv")
# resource classes
R_HOST, R_COMPUTE, R_COMM, R_MEMORY, R_P2P = range(5)
RESOURCE_CLASS_NAMES = ("host thread", "compute stream", "comm stream", "memory", "p2p stream")


def bool_attr(cols: Any, flag: BoolField) -> np.ndarray:
    """bool[n]: standard attribute ``flag`` (e.g. :data:`~tracekit.model.attrs.IS_CPU_OP`) of a rank's columns, leniently.

    Absent, or a value that is neither a bool nor a number, reads as False; a
    number reads as its truth value (unlike the strict :meth:`BoolField.column`,
    the replay never fails on it).  Raises nothing.
    """
    fast = cols.attr_num_fn(str(flag), ints_only=True, bools=True) if cols.attr_num_fn is not None else None
    if fast is not None:  # every value a bool or an integer (read from a file): truth values in one pass
        return fast[0] & (fast[1] != 0)
    present, values = flag.raw(cols)
    out = np.zeros(len(present), dtype=bool)
    for i in np.flatnonzero(present).tolist():
        v = values[i]
        out[i] = bool(v) if isinstance(v, (bool, int, float)) else False
    return out


#: comm types ASTRA-sim simulates (all-reduce, all-gather, all-to-all, reduce-scatter; REDUCE_SCATTER_BLOCK
#: is costed as reduce-scatter and exported as one); the others it replays for their duration (broadcast).
_ASTRA_SIMULATED = (0, 2, 6, 7, 8)


def classify(cols: Any, streams: str, *, astra: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Node kind, resource class and resource sub-id (tid/stream) per node.

    ``astra``: ASTRA-sim's hardware resources (astra-sim c459ab6 ``workload/HardwareResource.cc``): one
    CPU, one compute and one communication resource per rank whatever the ``tid``/``stream``
    attributes say, and a send holds the communication resource like a collective (a recv holds none).
    """
    types = cols.types
    n = len(types)
    kind = np.full(n, K_ZERO, dtype=np.int8)
    kind[types == NodeType.COMP_NODE] = K_TIMED
    mem = (types == NodeType.MEM_LOAD_NODE) | (types == NodeType.MEM_STORE_NODE)
    kind[mem] = K_TIMED
    kind[types == NodeType.COMM_COLL_NODE] = K_COLL
    kind[types == NodeType.COMM_SEND_NODE] = K_SEND
    kind[types == NodeType.COMM_RECV_NODE] = K_RECV
    cls = np.full(n, -1, dtype=np.int64)
    sub = np.zeros(n, dtype=np.int64)
    comp = types == NodeType.COMP_NODE
    if n and comp.any():
        is_cpu = bool_attr(cols, IS_CPU_OP)
        cls[comp & is_cpu] = R_HOST
        cls[comp & ~is_cpu] = R_COMPUTE
    cls[mem] = R_MEMORY
    cls[kind == K_COLL] = R_COMM
    cls[(kind == K_SEND) | (kind == K_RECV)] = R_P2P
    if astra:
        cls[kind == K_SEND] = R_COMM
        coll = np.flatnonzero(kind == K_COLL)
        if len(coll):
            _, ctypes = COMM_TYPE.raw(cols)
            for i in coll.tolist():
                if ctypes[i] is not None and ctypes[i] not in _ASTRA_SIMULATED:
                    kind[i] = K_TIMED  # ASTRA-sim replays it for its duration on this rank alone
        return kind, cls, sub
    if streams == "trace" and n:
        if (cls == R_HOST).any():
            _, tid = TID.column(cols)
            sub = np.where(cls == R_HOST, tid, sub)
        streamed = (cls == R_COMPUTE) | (cls == R_COMM) | (cls == R_P2P)
        if streamed.any():
            _, stream = STREAM.column(cols)
            sub = np.where(streamed, stream, sub)
    return kind, cls, sub


def resources(cls: np.ndarray, sub: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
    """Local resource index per node (-1 for none) and the resources' names."""
    has = cls >= 0
    res = np.full(len(cls), -1, dtype=np.int32)
    if not has.any():
        return res, ()
    subs, sub_idx = np.unique(sub[has], return_inverse=True)
    key = cls[has] * len(subs) + sub_idx.reshape(-1)
    keys, inverse = np.unique(key, return_inverse=True)
    res[has] = inverse.reshape(-1)
    names = []
    for k in keys.tolist():
        c, s = divmod(k, len(subs))
        names.append("memory" if c == R_MEMORY else f"{RESOURCE_CLASS_NAMES[c]} {int(subs[s])}")
    return res, tuple(names)


def compute_durations(
    cols: Any, kind: np.ndarray, model: "ComputeModel", trace: "ExecutionTrace", counts: dict[str, int]
) -> np.ndarray:
    """Replay duration of each node of one rank, ns: the compute model's for timed nodes, 0 for the others.

    Args:
        cols: the rank's columns (measured ``duration_ns``; ``num_ops`` FLOPs and
            ``tensor_size`` bytes are read only when the model may need them).
        kind: int8[n] node kinds (:func:`classify`); only ``K_TIMED`` nodes get a duration.
        model: the spec's :class:`~.compute.ComputeModel` (mode and scale; formulas in :mod:`.compute`).
        trace: the rank's trace, named in errors.
        counts: per method name, how many nodes it costed; incremented in place.

    Returns:
        float64[n] durations in ns (integers, at most ``MAX_DURATION_NS``).

    Raises:
        ValidationError: ``num_ops``/``tensor_size`` break the integer rule (names file, rank, node).
        SpecError: the model needs a peak the spec does not give (:meth:`.compute.ComputeModel.costs`).
        ReplayError: a duration over ``MAX_DURATION_NS`` (names file, rank, node).
    """
    dur = np.zeros(len(kind), dtype=np.float64)
    timed = kind == K_TIMED
    if not timed.any():
        return dur
    measured = cols.duration_ns[timed]
    if model.mode == "measured" and bool(np.all(measured > 0)):
        # every node has a duration, so the roofline inputs cannot matter: skip reading them
        ops = nbytes = np.zeros(len(measured), dtype=np.float64)
    else:
        try:
            ops = NUM_OPS.column(cols)[1][timed].astype(np.float64)
            nbytes = TENSOR_SIZE.column(cols)[1][timed].astype(np.float64)
        except TracekitError as exc:
            raise exc.with_context(path=trace.path, rank=trace.rank)
    costs = model.costs(ops, nbytes, measured)
    over = np.flatnonzero(costs.duration_ns > MAX_DURATION_NS)
    if len(over):
        pos = int(np.flatnonzero(timed)[over[0]])
        raise ReplayError(
            f"compute time is out of range (more than {MAX_DURATION_NS:,} ns): measured "
            f"{int(measured[over[0]]):,} ns, compute scale {model.scale:g}, {model.mode} model",
            path=trace.path,
            rank=trace.rank,
            node_id=int(cols.ids[pos]),
        )
    dur[timed] = costs.duration_ns.astype(np.float64)
    for name, c in costs.counts().items():
        counts[name] = counts.get(name, 0) + c
    return dur


def chain_next(kind: np.ndarray, res: np.ndarray, graph: Any) -> np.ndarray:
    """For each timed node u: its only successor v when v is timed and runs on u's resource, else -1.

    When v waits for nothing but u by the time u starts, the engine starts v
    right behind u without an event of its own (see :mod:`.engine`).
    """
    n = len(kind)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return out
    outdeg = np.diff(graph.succ_ptr)
    cand = np.flatnonzero((outdeg == 1) & (kind == K_TIMED))
    if not len(cand):
        return out
    v = graph.succ_pos[graph.succ_ptr[cand]]
    ok = (kind[v] == K_TIMED) & (res[v] == res[cand])
    out[cand[ok]] = v[ok]
    return out


# Fibonacci hashing (Knuth, TAOCP vol. 3, 6.4): the top bits of key * 2^64/phi spread consecutive keys apart.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@kernel
def _factorize_bits(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """codes int64[n] and firsts int64[k]: ``keys[firsts[codes[i]]] == keys[i]``, distinct keys in first-seen order.

    One pass over ``keys`` (uint64 bit patterns) with an open-addressing hash table sized to the distinct
    keys (load <= 1/2, doubled as it fills), so the work is O(n) and the extra memory O(k), not a sort.
    """
    codes = np.empty(keys.shape[0], dtype=np.int64)
    bits = 4
    slot_code = np.full(1 << bits, -1, dtype=np.int64)
    slot_key = np.zeros(1 << bits, dtype=np.uint64)
    firsts = np.empty(1 << (bits - 1), dtype=np.int64)
    k = 0
    for i in range(keys.shape[0]):
        key = keys[i]
        mask = np.uint64((1 << bits) - 1)
        h = (key * _GOLDEN) >> np.uint64(64 - bits)
        while slot_code[h] >= 0 and slot_key[h] != key:
            h = (h + np.uint64(1)) & mask
        if slot_code[h] >= 0:
            codes[i] = slot_code[h]
            continue
        slot_code[h], slot_key[h], firsts[k], codes[i] = k, key, i, k
        k += 1
        if 2 * k >= (1 << bits):  # grow: twice the slots, every distinct key re-inserted
            bits += 1
            mask = np.uint64((1 << bits) - 1)
            slot_code = np.full(1 << bits, -1, dtype=np.int64)
            slot_key = np.zeros(1 << bits, dtype=np.uint64)
            grown = np.empty(1 << (bits - 1), dtype=np.int64)
            grown[:k] = firsts[:k]
            firsts = grown
            for c in range(k):
                key = keys[firsts[c]]
                h = (key * _GOLDEN) >> np.uint64(64 - bits)
                while slot_code[h] >= 0:
                    h = (h + np.uint64(1)) & mask
                slot_code[h], slot_key[h] = c, key
    return codes, firsts[:k].copy()


def shared_items(values: np.ndarray) -> list:
    """``values.tolist()`` (float64 or int64 ``[n]``) with one Python object per distinct value.

    A list of n references to k shared objects: 8 bytes a node instead of 8 + 24-32 for a float or int
    object per node.  Values are told apart by their bit patterns (``-0.0`` and ``0.0`` stay distinct), so
    every item equals the value it replaces exactly.  Hashing, not sorting (``np.unique`` sorts twice).
    """
    if not len(values):
        return []
    values = np.ascontiguousarray(values)
    codes, firsts = _factorize_bits(values.view(np.uint64))
    objects = np.empty(len(firsts), dtype=object)
    objects[:] = values[firsts].tolist()
    return objects[codes].tolist()
