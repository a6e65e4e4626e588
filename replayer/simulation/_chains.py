"""The engine's same-resource chain runs, compiled: starting a run and cutting it (see :mod:`.engine`).

A *run* is a timed node ``h`` together with the nodes behind it on the same
resource that it may start at once: ``chain_delta[m]`` (global index of
``m``'s chain successor minus ``m``, 0 for none; :func:`.rank_compile.chain_next`)
leads from each member to the next, and a member joins while its file position
is below ``limit`` (the first node queued on the resource) and it waits for
nothing but its predecessor (``remaining == 1``).  Each member starts when the
previous one ends: ``end = start + duration``, added in float64 in the same
order as the engine's Python did, so the times are the same to the bit.

The engine calls :func:`extend_run` whenever a run follows the node it starts
(a Python copy of the walk for short runs measured no faster).

The arrays are the engine's own state, shared with its Python code (numpy
views of :class:`array.array` buffers): ``start``/``end`` float64[N] ns,
``reason`` int64[N], ``remaining`` int32[N], ``duration`` float64[N] ns,
``chain_delta`` int32[N].  The kernels write them in place and return plain
numbers; they cannot fail.
"""

from __future__ import annotations

import numpy as np

from tracekit.jit import kernel


@kernel
def extend_run(
    start: np.ndarray,
    end: np.ndarray,
    reason: np.ndarray,
    remaining: np.ndarray,
    duration: np.ndarray,
    chain_delta: np.ndarray,
    m: int,
    e: float,
    limit: int,
) -> tuple[int, int, float]:  # pragma: no cover - compiled
    """Start the rest of a run behind member ``m``, which is started and ends at ``e`` (ns).

    Returns:
        ``(last, top, end_ns)``: the run's last member, the highest member index
        started here (-1 when none), and the last member's end (ns).
    """
    top = -1
    d = chain_delta[m]
    while d != 0:
        nx = m + d
        if nx >= limit or remaining[nx] != 1:
            break
        remaining[nx] = 0
        start[nx] = e
        reason[nx] = m
        e = e + duration[nx]
        end[nx] = e
        if nx > top:
            top = nx
        m = nx
        d = chain_delta[m]
    return m, top, e


@kernel
def cut_run(
    start: np.ndarray,
    end: np.ndarray,
    reason: np.ndarray,
    remaining: np.ndarray,
    chain_delta: np.ndarray,
    head: int,
    last: int,
    h: int,
    now_ns: float,
    now_kind: int,
    now_key: int,
    node_kind: int,
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Node ``h`` was queued while the run ``head .. last`` holds its resource: cut the run where ``h`` gets in.

    The run is cut after the first member ``m`` whose successor comes after
    ``h`` in file order and whose end event ``(end[m], node_kind, m)`` is still
    to come after the event being processed, ``(now_ns, now_kind, now_key)``;
    the members behind ``m`` are reset to not started (NaN times, reason -1,
    waiting for their predecessor again).

    Returns:
        ``(head, cut)``: the new first member still worth checking (members that
        ended before ``now_ns`` can never be cut again) and ``m``, or -1 when
        the run cannot be cut.
    """
    m = head
    while m != last:
        nx = m + chain_delta[m]
        e = end[m]
        if h < nx and (
            e > now_ns or (e == now_ns and (node_kind > now_kind or (node_kind == now_kind and m > now_key)))
        ):
            x = nx
            while True:
                start[x] = np.nan
                end[x] = np.nan
                reason[x] = -1
                remaining[x] = 1
                if x == last:
                    break
                x += chain_delta[x]
            return head, m
        if e < now_ns:
            head = nx
        m = nx
    return head, -1
