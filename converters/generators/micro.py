"""Microbenchmark trace sets: one collective, one send/recv pattern, or a fixed small shape.

Three families, each returning a :class:`~tracekit.sets.traceset.TraceSet` (write
it with :func:`tracekit.io.write_traceset`):

* :func:`collective_bench` -- every rank of a group issues the same collective
  ``iterations`` times, optionally after a compute node each time (the loop of
  nccl-tests' ``all_reduce_perf``; the collective's ``comm_size`` is the
  per-rank buffer in bytes, as in Chakra's traces).
* :func:`send_recv_bench` -- point-to-point patterns: ``ring`` (each rank
  sends to the next rank of the group and receives from the previous one),
  ``pairwise`` (the pairwise-exchange all-to-all schedule of Thakur,
  Rabenseifner and Gropp 2005: in step k of p-1, rank i sends to i+k and
  receives from i-k, mod p) and ``pingpong`` (two ranks; the first sends then
  receives, the second receives then sends).  ``comm_size`` is the bytes of
  one message.  Tags are ``iteration * steps + step``.
* :func:`chakra_shape` -- the shapes of Chakra's ``et_generator``
  (mlcommons/chakra ``src/generator/generator.py``: one_comp_node,
  two_comp_nodes_independent/dependent, one_comm_coll_node_<collective>,
  one_remote_mem_load/store_node, one_metadata_node_all_types) plus a few
  more for overlap tests (comp_comm_independent/dependent,
  two_comm_coll_nodes_independent/dependent) and a one-collective node for
  every :class:`~tracekit.model.CollectiveType`.

Within a rank, iterations run one after another (each depends on the previous
one), so the replayed time of k iterations is k times one iteration.  Ranks
outside the benchmarked group get an empty trace so the job keeps its world
size.  Collectives with a root (reduce, broadcast, gather, scatter) carry no
root: the Chakra schema has no attribute for it.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from tracekit.converters.generators.build import (
    DEFAULT_PG,
    INT32_MAX,
    ProcessGroups,
    RankTraceBuilder,
    parse_collective,
)
from tracekit.errors import ConfigError
from tracekit.model import Attr, CollectiveType, NodeType
from tracekit.sets.traceset import TraceSet
from tracekit.model.uneven import RECV_SPLIT_BYTES, SEND_SPLIT_BYTES

PRODUCER = "tracekit.converters.generators.micro"
SEND_RECV_PATTERNS = ("ring", "pairwise", "pingpong")

# Defaults of Chakra's et_generator (runtime 5 us, 64 KiB messages, 1 KiB tensors).
CHAKRA_DEFAULT_DURATION_NS = 5_000
CHAKRA_DEFAULT_COMM_BYTES = 65_536
CHAKRA_DEFAULT_TENSOR_BYTES = 1_024


def _check_common(world_size: int, iterations: int, compute_ns: int) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ConfigError(f"number of ranks must be a positive integer, got {world_size!r}")
    if iterations < 1:
        raise ConfigError(f"iterations must be at least 1, got {iterations}")
    if compute_ns < 0:
        raise ConfigError(f"compute time must not be negative, got {compute_ns} ns")


def _group(
    world_size: int, group: Iterable[int] | None, groups: ProcessGroups, what: str
) -> tuple[tuple[int, ...], str]:
    """(members in the given order, pg_name) of the benchmarked group."""
    members = tuple(range(world_size)) if group is None else tuple(int(r) for r in group)
    if not members:
        raise ConfigError(f"{what}: the group is empty")
    bad = [r for r in members if not 0 <= r < world_size]
    if bad:
        raise ConfigError(f"{what}: group ranks {bad} are outside 0..{world_size - 1} (--ranks {world_size})")
    return members, groups.add(members, f"{what} group")


def _finish(builders: Sequence[RankTraceBuilder], groups: ProcessGroups, description: str) -> TraceSet:
    md = {"producer": PRODUCER, "workload": description}
    traces = [b.build(md) for b in builders]
    return TraceSet(traces, groups.mapping() if groups.has_subgroups else None)


def _builders(world_size: int, groups: ProcessGroups) -> list[RankTraceBuilder]:
    """One builder per rank; the group declaration comes first when there are subgroups."""
    builders = [RankTraceBuilder(rank) for rank in range(world_size)]
    if groups.has_subgroups:
        for b in builders:
            b.declare_groups(groups)
    return builders


def collective_bench(
    world_size: int,
    collective: CollectiveType | str,
    comm_bytes: int,
    *,
    group: Iterable[int] | None = None,
    compute_ns: int = 0,
    iterations: int = 1,
    moe_skew: float = 0.0,
) -> TraceSet:
    """Every member of ``group`` runs ``iterations`` x (compute, then collective).

    Args:
        world_size: ranks in the job.
        collective: a :class:`CollectiveType` or its name (``all_reduce``...).
        comm_bytes: the collective's ``comm_size`` per rank, bytes.
        group: member ranks (default all); other ranks get empty traces.
        compute_ns: duration of a COMP node before each collective (0 = none).
        iterations: repetitions; iteration k+1 waits for iteration k.
        moe_skew: an all-to-all only: MoE token-routing imbalance (:func:`moe_splits`); 0 = even.

    Returns:
        A trace set where each member rank has ``iterations`` COMM_COLL nodes
        (plus as many COMP nodes when ``compute_ns`` > 0, plus the
        ``process_group:init`` node when ``group`` is not all ranks).

    Raises:
        ConfigError: bad size, group, iteration count or collective name; a skew on another collective.
    """
    _check_common(world_size, iterations, compute_ns)
    ctype = parse_collective(collective)
    groups = ProcessGroups(world_size)
    members, pg = _group(world_size, group, groups, ctype.name.lower())
    builders = _builders(world_size, groups)
    splits = _skewed(ctype, comm_bytes, len(members), moe_skew)
    for i, rank in enumerate(members):
        b = builders[rank]
        extra = (
            ()
            if splits is None
            else (
                Attr(SEND_SPLIT_BYTES, splits, "int64_list"),
                Attr(RECV_SPLIT_BYTES, [splits[i]] * len(splits), "int64_list"),
            )
        )
        last: int | None = None
        for it in range(iterations):
            if compute_ns:
                last = b.comp(f"compute_{it}", duration_ns=compute_ns, deps=[last])
            last = b.collective(f"{ctype.name}_{it}", ctype, comm_bytes, pg_name=pg, deps=[last], extra_attrs=extra)
    return _finish(builders, groups, f"{ctype.name.lower()} {comm_bytes} B x {iterations}")


def moe_splits(comm_bytes: int, experts: int, skew: float) -> list[int]:
    """Bytes each rank sends to each of ``experts`` expert-parallel ranks under skewed token routing.

    MoE routers send tokens to experts unevenly; expert ``j`` (one per rank) gets the Zipf share
    ``(j + 1)^-skew / sum_k (k + 1)^-skew`` of every rank's ``comm_bytes`` (skew 0: even; 1: the classic Zipf
    law), apportioned in whole bytes by largest remainder so they sum to ``comm_bytes``.  Every rank routes
    with the same statistics, so rank ``j`` receives ``experts x`` its share: the dispatch all-to-all's
    busiest member is expert 0.

    Raises:
        ConfigError: a negative or non-finite skew, or fewer than one expert.
    """
    if not (skew >= 0 and skew < float("inf")) or experts < 1:
        raise ConfigError(f"MoE skew must be a finite number >= 0 over >= 1 experts, got {skew!r} over {experts}")
    weights = [(j + 1) ** -skew for j in range(experts)]
    total = sum(weights)
    exact = [comm_bytes * w / total for w in weights]
    out = [int(x) for x in exact]
    for j in sorted(range(experts), key=lambda j: (-(exact[j] - out[j]), j))[: comm_bytes - sum(out)]:
        out[j] += 1
    return out


def _skewed(ctype: CollectiveType, comm_bytes: int, members: int, skew: float) -> list[int] | None:
    if not skew:
        return None
    if ctype != CollectiveType.ALL_TO_ALL:
        raise ConfigError(f"a MoE skew applies to an all-to-all (expert dispatch), not {ctype.name.lower()}")
    return moe_splits(comm_bytes, members, skew)


def _p2p_steps(pattern: str, members: tuple[int, ...]) -> dict[int, list[list[tuple[str, int]]]]:
    """Per member rank, the steps of one iteration: each a list of ("send"|"recv", peer)."""
    p = len(members)
    steps: dict[int, list[list[tuple[str, int]]]] = {}
    if pattern == "ring":
        if p < 2:
            raise ConfigError("send/recv pattern 'ring' needs at least 2 ranks in the group")
        for i, rank in enumerate(members):
            steps[rank] = [[("send", members[(i + 1) % p]), ("recv", members[(i - 1) % p])]]
    elif pattern == "pairwise":
        if p < 2:
            raise ConfigError("send/recv pattern 'pairwise' needs at least 2 ranks in the group")
        for i, rank in enumerate(members):
            steps[rank] = [[("send", members[(i + k) % p]), ("recv", members[(i - k) % p])] for k in range(1, p)]
    elif pattern == "pingpong":
        if p != 2:
            raise ConfigError(f"send/recv pattern 'pingpong' needs exactly 2 ranks, got group {list(members)}")
        a, b = members
        steps[a] = [[("send", b)], [("recv", b)]]
        steps[b] = [[("recv", a)], [("send", a)]]
    else:
        raise ConfigError(f"unknown send/recv pattern {pattern!r}; choose one of {', '.join(SEND_RECV_PATTERNS)}")
    return steps


def send_recv_bench(
    world_size: int,
    pattern: str,
    comm_bytes: int,
    *,
    group: Iterable[int] | None = None,
    compute_ns: int = 0,
    iterations: int = 1,
) -> TraceSet:
    """Point-to-point pattern ``ring``, ``pairwise`` or ``pingpong`` among ``group``.

    Args:
        world_size: ranks in the job.
        pattern: one of :data:`SEND_RECV_PATTERNS` (see the module docstring).
        comm_bytes: bytes of each message (``comm_size``).
        group: member ranks in pattern order (default all; ``pingpong``
            defaults to ranks 0 and 1).
        compute_ns: a COMP node of this duration before each iteration's messages.
        iterations: repetitions; iteration k+1 waits for all messages of k.

    Returns:
        A trace set.  Node counts per member rank and iteration: ring 2
        (one send, one recv), pairwise 2(p-1), pingpong 2; plus one COMP per
        iteration when ``compute_ns`` > 0.  Within a step the send and recv
        are independent; a step waits for the previous step.

    Raises:
        ConfigError: unknown pattern, too few ranks, bad size, or tags that
            would not fit in int32.
    """
    _check_common(world_size, iterations, compute_ns)
    if group is None and pattern == "pingpong":
        if world_size < 2:
            raise ConfigError("send/recv pattern 'pingpong' needs at least 2 ranks")
        group = (0, 1)
    groups = ProcessGroups(world_size)
    members, pg = _group(world_size, group, groups, pattern)
    plan = _p2p_steps(pattern, members)
    n_steps = len(next(iter(plan.values())))
    if iterations * n_steps - 1 > INT32_MAX:
        raise ConfigError(f"{iterations} iterations x {n_steps} steps do not fit in int32 message tags")
    builders = _builders(world_size, groups)
    for rank, rank_steps in plan.items():
        b = builders[rank]
        prev: Sequence[int | None] = [None]  # the first step of a rank depends on nothing
        for it in range(iterations):
            if compute_ns:
                prev = [b.comp(f"compute_{it}", duration_ns=compute_ns, deps=prev)]
            for s, step in enumerate(rank_steps):
                tag = it * n_steps + s if pattern != "pingpong" else it
                done = []
                for op, peer in step:
                    if op == "send":
                        done.append(
                            b.send(f"send_to_{peer}_{it}_{s}", comm_bytes, dst=peer, tag=tag, pg_name=pg, deps=prev)
                        )
                    else:
                        done.append(
                            b.recv(f"recv_from_{peer}_{it}_{s}", comm_bytes, src=peer, tag=tag, pg_name=pg, deps=prev)
                        )
                prev = done
    return _finish(builders, groups, f"{pattern} {comm_bytes} B x {iterations}")


# ----- Chakra et_generator shapes --------------------------------------------------------

ShapeFn = Callable[[RankTraceBuilder, int, int, int], None]


def _one_comp(b: RankTraceBuilder, dur: int, comm: int, tensor: int) -> None:
    b.comp("COMP_NODE", duration_ns=dur)


def _two_comp_independent(b: RankTraceBuilder, dur: int, comm: int, tensor: int) -> None:
    b.comp("COMP_NODE", duration_ns=dur)
    b.comp("COMP_NODE", duration_ns=dur)


def _two_comp_dependent(b: RankTraceBuilder, dur: int, comm: int, tensor: int) -> None:
    parent = b.comp("COMP_NODE", duration_ns=dur)
    b.comp("COMP_NODE", duration_ns=dur, deps=[parent])


def _mem(node_type: NodeType) -> ShapeFn:
    def shape(b: RankTraceBuilder, dur: int, comm: int, tensor: int) -> None:
        b.add_node(
            node_type.name,
            node_type,
            attrs=[Attr("is_cpu_op", False, "bool_val"), Attr("tensor_size", tensor, "uint64_val")],
        )

    return shape


def _one_coll(ctype: CollectiveType) -> ShapeFn:
    def shape(b: RankTraceBuilder, dur: int, comm: int, tensor: int) -> None:
        b.collective(ctype.name, ctype, comm)

    return shape


def _comp_comm(dependent: bool) -> ShapeFn:
    def shape(b: RankTraceBuilder, dur: int, comm: int, tensor: int) -> None:
        c = b.comp("COMP_NODE", duration_ns=dur)
        b.collective("ALL_REDUCE", CollectiveType.ALL_REDUCE, comm, deps=[c] if dependent else [])

    return shape


def _two_coll(dependent: bool) -> ShapeFn:
    def shape(b: RankTraceBuilder, dur: int, comm: int, tensor: int) -> None:
        first = b.collective("ALL_REDUCE", CollectiveType.ALL_REDUCE, comm)
        b.collective("ALL_REDUCE", CollectiveType.ALL_REDUCE, comm, deps=[first] if dependent else [])

    return shape


def _metadata_all_types(b: RankTraceBuilder, dur: int, comm: int, tensor: int) -> None:
    """One METADATA node with one attribute of every AttributeProto value kind."""
    scalars = {
        "double": 1.2345,
        "float": 1.5,
        "int32": 12345,
        "int64": 9876543210,
        "uint32": 12345,
        "uint64": 9876543210,
        "sint32": -12345,
        "sint64": -9876543210,
        "fixed32": 12345,
        "fixed64": 9876543210,
        "sfixed32": -12345,
        "sfixed64": -9876543210,
        "bool": True,
        "string": "12345",
        "bytes": b"12345",
    }
    attrs = [Attr("is_cpu_op", True, "bool_val")]  # else ASTRA-sim never completes it
    for kind, value in scalars.items():
        attrs.append(Attr(kind, value, f"{kind}_val"))
        attrs.append(Attr(f"{kind}_list", [value, value], f"{kind}_list"))
    b.add_node("METADATA_NODE", NodeType.METADATA_NODE, attrs=attrs)


def _shape_table() -> dict[str, ShapeFn]:
    table: dict[str, ShapeFn] = {
        "one_metadata_node_all_types": _metadata_all_types,
        "one_remote_mem_load_node": _mem(NodeType.MEM_LOAD_NODE),
        "one_remote_mem_store_node": _mem(NodeType.MEM_STORE_NODE),
        "one_comp_node": _one_comp,
        "two_comp_nodes_independent": _two_comp_independent,
        "two_comp_nodes_dependent": _two_comp_dependent,
    }
    for ct in CollectiveType:
        table[f"one_comm_coll_node_{ct.name.replace('_', '').lower()}"] = _one_coll(ct)
    table.update(
        {
            "comp_comm_independent": _comp_comm(False),
            "comp_comm_dependent": _comp_comm(True),
            "two_comm_coll_nodes_independent": _two_coll(False),
            "two_comm_coll_nodes_dependent": _two_coll(True),
        }
    )
    return table


CHAKRA_SHAPES: dict[str, ShapeFn] = _shape_table()


def chakra_shape(
    name: str,
    world_size: int,
    *,
    duration_ns: int = CHAKRA_DEFAULT_DURATION_NS,
    comm_bytes: int = CHAKRA_DEFAULT_COMM_BYTES,
    tensor_bytes: int = CHAKRA_DEFAULT_TENSOR_BYTES,
) -> TraceSet:
    """The same small graph on every rank (one of :data:`CHAKRA_SHAPES`).

    Args:
        name: shape name, e.g. ``one_comm_coll_node_allreduce``.
        world_size: ranks.
        duration_ns: duration of each COMP node (Chakra's default 5 us).
        comm_bytes: ``comm_size`` of each collective (default 64 KiB).
        tensor_bytes: ``tensor_size`` of memory nodes (default 1 KiB).

    Raises:
        ConfigError: unknown shape (the message lists them) or bad sizes.
    """
    _check_common(world_size, 1, duration_ns)
    try:
        shape = CHAKRA_SHAPES[name]
    except KeyError:
        raise ConfigError(f"unknown shape {name!r}; choose one of {', '.join(CHAKRA_SHAPES)}") from None
    groups = ProcessGroups(world_size)
    builders = _builders(world_size, groups)
    for b in builders:
        shape(b, duration_ns, comm_bytes, tensor_bytes)
    return _finish(builders, groups, name)


__all__ = [
    "CHAKRA_SHAPES",
    "DEFAULT_PG",
    "SEND_RECV_PATTERNS",
    "chakra_shape",
    "collective_bench",
    "send_recv_bench",
]
