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
closed form of :mod:`.astra_model`; the message-by-message form is
:func:`.astra_algorithms.ring_times`, used here with the members' own starts.
Splits run one after another per member (``active-chunks-per-dimension`` 1):
chunk ``c + 1`` starts when the member ends chunk ``c``.  Measured against the binary: a 2-member all-reduce whose
members arrive 4,634 ns apart ends one message time ``X`` earlier on the
early member (tests/interop).

Covered: members that arrive apart, on one network dimension (or a group
that runs flat on one), ring algorithm, one active chunk.  Elsewhere, and
whenever the members arrive together, :func:`member_ends` returns None and the
engine uses the model's cost (``CommCost.member_ns`` where members of an
unequal ring end apart).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.astra_model import AstraModel

_KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")


def _ring(model: "AstraModel", kind: str, group: tuple[int, ...]):
    """``(send_ns(u, v, m), hand-off e)`` of the one ring the collective runs on, or None when not covered.

    A communicator group smaller than the network runs one ring over its sorted members with 10 ns hand-offs,
    each message on the innermost dimension where the two members differ (astra_model ``_comm_group_ns``);
    the whole network's group is covered when it runs one ring phase on one dimension.
    """
    from tracekit.replayer.simulation.astra_model import _GROUP_HANDOFF_NS, astra_hops
    from tracekit.replayer.simulation.placement import rank_coords

    if kind not in _KINDS or model.settings.active_chunks_per_dimension != 1:
        return None
    sizes = model.spec.dim_sizes
    if len(group) < math.prod(sizes):
        coords = [rank_coords(r, sizes) for r in group]

        def group_send(u: int, v: int, m: int) -> int:
            """Message time (ns) of ``m`` bytes from member ``u`` to ``v``, on the innermost dimension where they differ."""
            d = next(i for i, (a, b) in enumerate(zip(coords[u], coords[v])) if a != b)
            dim = model.spec.network[d]
            return model.message_ns(d, m, astra_hops(dim.topology, coords[u][d], coords[v][d], dim.size))

        return group_send, _GROUP_HANDOFF_NS
    pl = model.placement(group)
    if not pl.dims:
        return None
    phases = model.phases(kind, model.chunking(kind, 0)[0], pl)
    if len(phases) != 1 or phases[0][5] != "ring" or phases[0][3] != len(group):
        return None
    d, ring_coords = phases[0][0], phases[0][4]
    dim = model.spec.network[d]

    def send(u: int, v: int, m: int) -> int:
        """Message time (ns) of ``m`` bytes between ring positions ``u`` and ``v`` of the ring's dimension."""
        return model.message_ns(d, m, astra_hops(dim.topology, ring_coords[u], ring_coords[v], dim.size))

    return send, model.settings.endpoint_delay_ns


def ends_apart_when_together(model: "AstraModel", group: tuple[int, ...]) -> bool:
    """True when members of ``group`` arriving together may still end apart (ring links of unequal hops)."""
    ring = _ring(model, "all_reduce", group)
    if ring is None:
        return False
    send = ring[0]
    p = len(group)
    return len({send((i - 1) % p, i, 1) for i in range(p)}) > 1


def member_ends(
    model: "AstraModel", kind: str, comm_bytes: int, group: tuple[int, ...], arrivals: Sequence[float]
) -> list[int] | None:
    """Each member's end (ns) of a collective whose members (``group``, ascending) arrive at ``arrivals``.

    Returns:
        ends in the order of ``group``, or None when the members arrive together (the model's costs are
        exact then) or the case is not covered (module doc).
    """
    if len(set(arrivals)) == 1:
        return None
    return _ends_on(_ring(model, kind, group), model, kind, comm_bytes, arrivals)


def _ends_on(ring, model: "AstraModel", kind: str, comm_bytes: int, arrivals: Sequence[float]) -> list[int] | None:
    """:func:`member_ends` on the ring :func:`_ring` gave (None: not covered)."""
    from tracekit.replayer.simulation.astra_algorithms import ring_times

    if ring is None:
        return None
    send, e = ring
    chunk, chunks = model.chunking(kind, comm_bytes)
    times = [int(a) for a in arrivals]
    for _ in range(chunks):  # one active chunk: a member starts chunk k + 1 when it ends chunk k
        times = [f for f, _ in ring_times(kind, chunk, times, send_ns=send, e=e, reduction_ns=model.reduction_ns)]
    return times


def engine_hook(model: "AstraModel"):
    """The engine's ``member_ends(instance, arrivals_ns)`` for the ASTRA-compatible model (``ReplayProgram``).

    Called at every collective's start and every eager send: what does not depend on the arrivals (the
    collective's kind, its ring) is worked out once per comm type and group.
    """
    from tracekit.model import CollectiveType
    from tracekit.replayer.simulation.collectives import collective_kind

    kinds: dict[int, str] = {}
    rings: dict[tuple[str, tuple[int, ...]], Any] = {}

    def ends(inst, arrivals: list[float]) -> list[int] | None:
        """Members' ends (ns) of ASTRA-model collective ``inst`` arriving at ``arrivals`` (ns), or None (see :func:`member_ends`)."""
        if inst.kind != "collective" or inst.link_ranks is not None or len(set(arrivals)) == 1:
            return None
        if inst.cost is None or not inst.cost.algorithm.startswith("astra:") or len(inst.nodes) != len(inst.ranks):
            return None
        kind = kinds.get(inst.comm_type)
        if kind is None:
            kind = kinds[inst.comm_type] = collective_kind(CollectiveType(inst.comm_type))
        key = (kind, inst.ranks)
        if key not in rings:
            rings[key] = _ring(model, kind, inst.ranks)
        return _ends_on(rings[key], model, kind, inst.comm_bytes, arrivals)

    return ends
