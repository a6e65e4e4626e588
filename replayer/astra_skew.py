"""ASTRA-sim collectives whose members arrive at different times: each member's own end.

ASTRA-sim runs a ring collective as messages between neighbours over an
eager network (astra-sim c459ab6, ``astraccl/.../Ring.cc`` with the frontend
``CommonNetworkApi.cc``): a member sends its next message as soon as it has
what it needs, whether or not its neighbour has started the collective, and a
message that arrives before the receiver posts its recv is taken the moment
it is posted.  So a member that starts early finishes early, by up to one
message time, instead of every member ending together.

For one chunk of ``C`` bytes on a ring of ``p`` members (member ``i`` sends
to ``i + 1`` mod ``p``) with ``M`` messages of ``m`` bytes, ``X = X(m)`` and
``e`` = endpoint delay (the terms of :mod:`.astra_model`), member ``i``
arriving at ``a_i``:

- sends message 0 at ``s_i(0) = a_i + e``;
- has message ``k`` at ``A_i(k) = max(s_{i-1}(k) + X, s_i(k))`` (its recv for
  message ``k`` is posted with its send ``k``);
- sends message ``k + 1`` at ``s_i(k+1) = A_i(k) + e + R_k`` and ends at
  ``A_i(M-1) + e + R_{M-1}``,

with ``R_k = R(m)`` for the messages it reduces: all-reduce ``M = 2(p-1)``,
``m = C/p``, reducing the first ``p-1``; reduce-scatter ``M = p-1``,
``m = C/p``, reducing all; all-gather ``M = p-1``, ``m = C``; all-to-all
``M = p(p-1)/2``, ``m = C/p``.  With equal arrivals this is exactly the
closed form of :mod:`.astra_model`.  Splits run one after another per member
(``active-chunks-per-dimension`` 1): chunk ``c + 1`` starts when the member
ends chunk ``c``.  Measured against the binary: a 2-member all-reduce whose
members arrive 4,634 ns apart ends one message time ``X`` earlier on the
early member (tests/interop).

Covered: members that arrive apart, on one network dimension (or a group
that runs flat on one), ring algorithm, one active chunk.  Elsewhere, and
whenever the members arrive together, :func:`member_ends` returns None and the
engine uses the model's cost (``CommCost.member_ns`` where members of an
unequal ring end apart).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.astra_model import AstraModel

_MESSAGES = {
    "all_reduce": lambda p: 2 * (p - 1),
    "reduce_scatter": lambda p: p - 1,
    "all_gather": lambda p: p - 1,
    "all_to_all": lambda p: p * (p - 1) // 2,
}


def _ring_chunk(model: "AstraModel", kind: str, d: int, c: int, hops: list[int], starts: list[int]) -> list[int]:
    """Each member's end of one chunk of ``c`` bytes (recurrence in the module doc).

    ``hops[i]``: hops from member ``i - 1`` to member ``i`` (each message pays its own link's hops).
    """
    p = len(starts)
    e = model.settings.endpoint_delay_ns
    m = c if kind == "all_gather" else c // p
    x = [model.message_ns(d, m, h) for h in hops]
    r = model.reduction_ns(m)
    n_msgs = _MESSAGES[kind](p)
    reduces = {"all_reduce": p - 1, "reduce_scatter": n_msgs}.get(kind, 0)
    send = [a + e for a in starts]
    have = send
    for k in range(n_msgs):
        have = [max(send[i - 1] + x[i], send[i]) for i in range(p)]
        extra = e + (r if k < reduces else 0)
        send = [t + extra for t in have]
    return send


def ends_apart_when_together(model: "AstraModel", group: tuple[int, ...]) -> bool:
    """True when members of ``group`` arriving together may still end apart (ring links of unequal hops)."""
    ring = _ring(model, "all_reduce", 1, group)
    return ring is not None and len(set(ring[3])) > 1


def _ring(model: "AstraModel", kind: str, comm_bytes: int, group: tuple[int, ...]):
    """``(dimension, phase kind, chunk bytes, hops per link)`` when the recurrence covers the case, else None."""
    if kind not in _MESSAGES or model.settings.active_chunks_per_dimension != 1:
        return None
    pl = model.placement(group)
    if not pl.dims:
        return None
    phases = model.phases(kind, comm_bytes // model.settings.preferred_dataset_splits, pl)
    if len(phases) != 1:
        return None
    d, phase_kind, chunk, p, coords = phases[0]
    if p != len(group) or model.spec.network[d].algorithm(phase_kind) != "ring":
        return None
    from tracekit.replayer.astra_model import astra_hops

    dim = model.spec.network[d]
    return d, phase_kind, chunk, [astra_hops(dim.topology, coords[i - 1], coords[i], dim.size) for i in range(p)]


def member_ends(model: "AstraModel", kind: str, comm_bytes: int, group: tuple[int, ...],
                arrivals: Sequence[int]) -> list[int] | None:
    """Each member's end (ns) of a collective whose members (``group``, ascending) arrive at ``arrivals``.

    Returns:
        ends in the order of ``group``, or None where the recurrence is not covered (module doc).
    """
    ring = _ring(model, kind, comm_bytes, group)
    if ring is None:
        return None
    d, phase_kind, chunk, hops = ring
    if len(set(arrivals)) == 1:
        return None  # arriving together: astra_model's costs (member_ns where links differ) are exact
    times = [int(a) for a in arrivals]
    for _ in range(model.settings.preferred_dataset_splits):
        times = _ring_chunk(model, phase_kind, d, chunk, hops, times)
    return times
