"""Small shared helpers for producers that build per-rank traces from scratch.

Generators (microbenchmarks, LLM, DLRM) and the ASTRA-sim text converter all
do the same few things: hand out node ids per rank, add COMP and COMM nodes
carrying the standard attributes other tools read (docs/design.md section 3), name
process groups and declare them in a ``process_group:init`` METADATA node, and
parse human sizes such as ``64MiB``.  This module owns exactly that.

Attribute kinds written (what ASTRA-sim and Chakra's tools expect):

=============  ============  =========================================
name           kind          meaning
=============  ============  =========================================
is_cpu_op      bool_val      False for device kernels and collectives
num_ops        int64_val     floating-point operations (FLOPs, not MACs)
tensor_size    uint64_val    bytes moved to and from memory
comm_type      int64_val     :class:`~tracekit.model.CollectiveType`
comm_size      int64_val     bytes per rank (the collective's buffer)
pg_name        string_val    process group id (``"1"``, ...); absent = all ranks
comm_src/dst   int32_val     peer ranks of a send/recv
comm_tag       int32_val     matching tag of a send/recv
=============  ============  =========================================

Example::

    groups = ProcessGroups(world_size=8)
    tp = groups.add(range(0, 4), "tp 0")          # -> "1"
    b = RankTraceBuilder(rank=0)
    g = b.comp("gemm", duration_ns=1500, num_ops=2 * 4096**3)
    b.collective("tp_allreduce", CollectiveType.ALL_REDUCE, 64 << 20, pg_name=tp, deps=[g])
    trace = b.build(groups)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from tracekit.errors import ConfigError
from tracekit.model import Attr, CollectiveType, ExecutionTrace, Metadata, Node, NodeType

DEFAULT_PG = "0"
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# ----- sizes ---------------------------------------------------------------------------

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Bytes from a size string.

    Decimal units are powers of 1000 (``KB``, ``MB``, ``GB``, ``TB``); binary
    units are powers of 1024 (``KiB``, ``MiB``, ``GiB``, ``TiB``; the bare
    letters ``K``, ``M``, ``G``, ``T`` are binary too, as in nccl-tests
    ``-b 64M``).  Case does not matter; a plain number is bytes.  Fractions
    are allowed when the result is a whole number of bytes (``1.5KiB``).

    Raises:
        ConfigError: not a size, negative, unknown unit, or not whole bytes.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ConfigError(f"size must not be negative, got {text}")
        return text
    match = _SIZE_RE.match(str(text))
    if match is None and str(text).strip().startswith("-"):
        raise ConfigError(f"size must not be negative, got {text!r}")
    if match is None:
        raise ConfigError(
            f"cannot read size {text!r}: expected a number with an optional unit "
            "such as 4096, 64KiB, 64MiB (2^20) or 1GB (10^9)"
        )
    number, unit = match.groups()
    factor = _SIZE_UNITS.get(unit.lower())
    if factor is None:
        raise ConfigError(
            f"unknown size unit {unit!r} in {text!r}; use B, KB, MB, GB, TB (10^3n) or KiB, MiB, GiB, TiB (2^10n)"
        )
    if "." in number:
        num, den = number.split(".")
        scaled = int(num + den) * factor
        divisor = 10 ** len(den)
        if scaled % divisor:
            raise ConfigError(f"size {text!r} is not a whole number of bytes")
        return scaled // divisor
    return int(number) * factor


def parse_ranks(text: str) -> tuple[int, ...]:
    """Ranks from ``"0,1,2,3"``, ``"0-3"``, ``"0-3,8-11"`` or ``"0-14:2"`` (step).

    Returns the ranks in the given order, without duplicates.

    Raises:
        ConfigError: malformed text, a negative rank, or a rank listed twice.
    """
    ranks: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part)
        if m is None:
            raise ConfigError(f"cannot read rank list {text!r} at {part!r}: use e.g. 0,1,2 or 0-7 or 0-14:2")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        step = int(m.group(3)) if m.group(3) is not None else 1
        if hi < lo or step < 1:
            raise ConfigError(f"rank range {part!r} in {text!r} is empty")
        ranks.extend(range(lo, hi + 1, step))
    if len(set(ranks)) != len(ranks):
        raise ConfigError(f"rank list {text!r} names a rank twice")
    return tuple(ranks)


def _check_bytes(what: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{what} must be an integer number of bytes, got {value!r}")
    if value < 0:
        raise ConfigError(f"{what} must not be negative, got {value} bytes")
    if value > INT64_MAX:
        raise ConfigError(f"{what} must be at most 2^63-1 bytes, got {value}")
    return value


# ----- process groups ------------------------------------------------------------------


class ProcessGroups:
    """Named communicator groups of one job.

    Group ``"0"`` is always all ranks.  :meth:`add` gives each further
    distinct set of ranks the next number as its ``pg_name`` (``"1"``,
    ``"2"``, ...), as PyTorch names its groups; the human description goes to
    ``pg_desc`` in the declaration.

    Args:
        world_size: number of ranks in the job.
    """

    def __init__(self, world_size: int) -> None:
        if world_size < 1:
            raise ConfigError(f"world size must be at least 1, got {world_size}")
        self.world_size = world_size
        self._ranks: dict[str, tuple[int, ...]] = {DEFAULT_PG: tuple(range(world_size))}
        self._desc: dict[str, str] = {DEFAULT_PG: "all ranks"}
        self._by_ranks: dict[tuple[int, ...], str] = {tuple(range(world_size)): DEFAULT_PG}

    def add(self, ranks: Iterable[int], description: str = "") -> str:
        """The ``pg_name`` of the group of ``ranks`` (registered if new).

        The same set of ranks always gets the same name (the first
        description wins); the full rank set is ``"0"``.

        Raises:
            ConfigError: empty group, a rank out of range, or a repeated rank.
        """
        members = tuple(sorted(int(r) for r in ranks))
        if not members:
            raise ConfigError("a process group needs at least one rank")
        if len(set(members)) != len(members):
            raise ConfigError(f"process group {description or members} names a rank twice")
        if members[0] < 0 or members[-1] >= self.world_size:
            raise ConfigError(
                f"process group {description or ''} {list(members)} has ranks outside 0..{self.world_size - 1}"
            )
        name = self._by_ranks.get(members)
        if name is None:
            name = str(len(self._ranks))
            self._ranks[name] = members
            self._desc[name] = description
            self._by_ranks[members] = name
        return name

    def ranks(self, pg_name: str) -> tuple[int, ...]:
        """Members of group ``pg_name`` (sorted)."""
        try:
            return self._ranks[pg_name]
        except KeyError:
            raise ConfigError(f"unknown process group {pg_name!r}") from None

    def description(self, pg_name: str) -> str:
        """The ``pg_desc`` of group ``pg_name`` (raises KeyError for a group this job does not declare)."""
        return self._desc[pg_name]

    def mapping(self) -> dict[str, tuple[int, ...]]:
        """``pg_name -> ranks`` for every group, ``"0"`` first."""
        return dict(self._ranks)

    @property
    def has_subgroups(self) -> bool:
        """True when any group other than all ranks is registered."""
        return len(self._ranks) > 1

    def __len__(self) -> int:
        return len(self._ranks)

    def pg_init_node(self, node_id: int) -> Node:
        """The ``process_group:init`` METADATA node declaring every group.

        ``"0"`` is declared with ``ranks: []`` (all ranks), the PyTorch form.
        """
        from tracekit.model.groups import pg_init_node

        declared = {name: (() if name == DEFAULT_PG else ranks) for name, ranks in self._ranks.items()}
        return pg_init_node(node_id, declared, self._desc, world_size=self.world_size)


# ----- one rank's nodes ---------------------------------------------------------------


_CPU_OP = {flag: Attr("is_cpu_op", flag, "bool_val") for flag in (False, True)}


def _pg_attr(pg_name: str) -> list[Attr]:
    """The ``pg_name`` attribute of a communication node: none for all ranks (ASTRA-sim's convention)."""
    return [] if str(pg_name) == DEFAULT_PG else [Attr("pg_name", str(pg_name), "string_val")]


@dataclass(frozen=True)
class NodeRef:
    """A node added to a :class:`RankTraceBuilder`: its id and type."""

    id: int
    type: NodeType


Deps = Iterable["int | NodeRef | None"]


def _dep_ids(deps: Deps) -> list[int]:
    ids: list[int] = []
    for d in deps:
        if d is None:
            continue
        i = d.id if isinstance(d, NodeRef) else int(d)
        if i not in ids:
            ids.append(i)
    return ids


class RankTraceBuilder:
    """Builds the node list of one rank, handing out ids ``first_id, first_id+1, ...``.

    Every ``add``-style method returns the new node's id (an int) so callers
    can pass it in ``deps`` of later nodes; ``None`` entries in ``deps`` are
    ignored, which lets a schedule say "after X if there is an X".

    Args:
        rank: the rank this trace is for.
        first_id: id of the first node (ids restart per rank).
    """

    def __init__(self, rank: int, *, first_id: int = 0) -> None:
        self.rank = rank
        self._next_id = first_id
        self.nodes: list[Node] = []
        # equal int values share one Attr (a GPT-3 175B rank has ~500 k COMP nodes and a few hundred distinct sizes)
        self._ops_attrs: dict[int, Attr] = {}
        self._size_attrs: dict[int, Attr] = {}
        self._comm_attrs: dict[tuple[str, int], Attr] = {}

    def _comm_attr(self, key: str, value: int) -> Attr:
        """The shared ``int64_val`` attribute ``key = value`` of a collective (``comm_type`` / ``comm_size``)."""
        a = self._comm_attrs.get((key, value)) if value.__class__ is int else None
        if a is None:
            a = Attr(key, value, "int64_val")
            if value.__class__ is int:
                self._comm_attrs[(key, value)] = a
        return a

    def _comm_size(self, comm_bytes: int, name: str) -> Attr:
        """The ``comm_size`` attribute (bytes per rank), checked (ConfigError: not a byte count below 2^63)."""
        a = self._comm_attrs.get(("comm_size", comm_bytes)) if comm_bytes.__class__ is int else None
        if a is None:
            a = self._comm_attr("comm_size", _check_bytes(f"node {name!r}: comm size", comm_bytes))
        return a

    def _new_id(self) -> int:
        node_id = self._next_id
        self._next_id += 1
        return node_id

    def _append(self, node: Node) -> int:
        self.nodes.append(node)
        return node.id

    def add_node(
        self, name: str, node_type: NodeType, *, duration_ns: int = 0, deps: Deps = (), attrs: Sequence[Attr] = ()
    ) -> int:
        """Add a node of any type with the given attributes; returns its id."""
        if duration_ns < 0:
            raise ConfigError(f"node {name!r}: duration must not be negative, got {duration_ns} ns")
        node_id = self._next_id
        self._next_id = node_id + 1
        self.nodes.append(Node(node_id, name, node_type, _dep_ids(deps), (), 0, int(duration_ns), None, None, attrs))
        return node_id

    def comp(
        self,
        name: str,
        *,
        duration_ns: int = 0,
        num_ops: int | None = None,
        tensor_bytes: int | None = None,
        deps: Deps = (),
        is_cpu_op: bool = False,
        extra_attrs: Sequence[Attr] = (),
    ) -> int:
        """Add a COMP node.

        Args:
            duration_ns: run time in nanoseconds (0 = unknown; a roofline model
                may compute it from ``num_ops`` and ``tensor_bytes``).
            num_ops: floating-point operations (FLOPs), stored as ``num_ops``.
            tensor_bytes: bytes read and written, stored as ``tensor_size``.
        """
        attrs = [_CPU_OP[bool(is_cpu_op)]]
        if num_ops is not None:
            a = self._ops_attrs.get(num_ops) if num_ops.__class__ is int else None
            if a is None:
                if num_ops < 0 or num_ops > INT64_MAX:
                    raise ConfigError(f"node {name!r}: num_ops must be between 0 and 2^63-1, got {num_ops}")
                a = Attr("num_ops", int(num_ops), "int64_val")
                if num_ops.__class__ is int:
                    self._ops_attrs[num_ops] = a
            attrs.append(a)
        if tensor_bytes is not None:
            a = self._size_attrs.get(tensor_bytes) if tensor_bytes.__class__ is int else None
            if a is None:
                a = Attr("tensor_size", _check_bytes(f"node {name!r}: tensor size", tensor_bytes), "uint64_val")
                self._size_attrs[tensor_bytes] = a
            attrs.append(a)
        attrs.extend(extra_attrs)
        return self.add_node(name, NodeType.COMP_NODE, duration_ns=duration_ns, deps=deps, attrs=attrs)

    def collective(
        self,
        name: str,
        comm_type: CollectiveType,
        comm_bytes: int,
        *,
        pg_name: str = DEFAULT_PG,
        deps: Deps = (),
        duration_ns: int = 0,
        extra_attrs: Sequence[Attr] = (),
    ) -> int:
        """Add a COMM_COLL node: ``comm_type``, ``comm_size`` (bytes per rank) and ``pg_name``."""
        comm_type = CollectiveType(comm_type)
        attrs = [_CPU_OP[False], self._comm_attr("comm_type", int(comm_type)), self._comm_size(comm_bytes, name)]
        attrs.extend(_pg_attr(pg_name))
        attrs.extend(extra_attrs)
        return self.add_node(name, NodeType.COMM_COLL_NODE, duration_ns=duration_ns, deps=deps, attrs=attrs)

    def _p2p(
        self,
        name: str,
        node_type: NodeType,
        comm_bytes: int,
        src: int,
        dst: int,
        tag: int,
        pg_name: str,
        deps: Deps,
        extra_attrs: Sequence[Attr],
    ) -> int:
        for what, value in (("source rank", src), ("destination rank", dst), ("tag", tag)):
            if not 0 <= value <= INT32_MAX:
                raise ConfigError(f"node {name!r}: {what} must be between 0 and 2^31-1, got {value}")
        attrs = [
            Attr("is_cpu_op", False, "bool_val"),
            Attr("comm_src", int(src), "int32_val"),
            Attr("comm_dst", int(dst), "int32_val"),
            Attr("comm_tag", int(tag), "int32_val"),
            Attr("comm_size", _check_bytes(f"node {name!r}: comm size", comm_bytes), "int64_val"),
            *_pg_attr(pg_name),
        ]
        attrs.extend(extra_attrs)
        return self.add_node(name, node_type, deps=deps, attrs=attrs)

    def send(
        self,
        name: str,
        comm_bytes: int,
        *,
        dst: int,
        tag: int,
        pg_name: str = DEFAULT_PG,
        deps: Deps = (),
        extra_attrs: Sequence[Attr] = (),
    ) -> int:
        """Add a COMM_SEND node from this rank to ``dst``."""
        return self._p2p(name, NodeType.COMM_SEND_NODE, comm_bytes, self.rank, dst, tag, pg_name, deps, extra_attrs)

    def recv(
        self,
        name: str,
        comm_bytes: int,
        *,
        src: int,
        tag: int,
        pg_name: str = DEFAULT_PG,
        deps: Deps = (),
        extra_attrs: Sequence[Attr] = (),
    ) -> int:
        """Add a COMM_RECV node on this rank from ``src``."""
        return self._p2p(name, NodeType.COMM_RECV_NODE, comm_bytes, src, self.rank, tag, pg_name, deps, extra_attrs)

    def declare_groups(self, groups: ProcessGroups) -> int:
        """Add the ``process_group:init`` METADATA node for ``groups``; returns its id."""
        return self._append(groups.pg_init_node(self._new_id()))

    def __len__(self) -> int:
        return len(self.nodes)

    def build(self, metadata_attrs: Mapping[str, str] | None = None) -> ExecutionTrace:
        """The finished :class:`ExecutionTrace` of this rank.

        Args:
            metadata_attrs: string attributes for the global metadata (for
                example ``{"producer": "tracekit generate micro"}``).
        """
        md = Metadata(version="0.0.4", attrs=[Attr(k, str(v), "string_val") for k, v in (metadata_attrs or {}).items()])
        return ExecutionTrace(self.nodes, md, rank=self.rank)


def parse_collective(text: str | CollectiveType) -> CollectiveType:
    """A :class:`CollectiveType` from ``all_reduce``, ``allreduce``, ``ALL-REDUCE``, ``0``...

    Raises:
        ConfigError: no such collective (the message lists the valid names).
    """
    if isinstance(text, CollectiveType):
        return text
    key = str(text).strip().upper().replace("-", "").replace("_", "")
    for ct in CollectiveType:
        if key == ct.name.replace("_", "") or key == str(int(ct)):
            return ct
    names = ", ".join(ct.name.lower() for ct in CollectiveType)
    raise ConfigError(f"unknown collective {text!r}; choose one of {names}")
