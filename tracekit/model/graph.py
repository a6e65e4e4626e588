"""The node table as columns and the dependency graph as compact arrays.

:class:`NodeColumns` is one rank's node table as numpy arrays (ids, types,
times, dependency lists in CSR form).  :class:`DepGraph` indexes it: node id ->
position, predecessor and successor lists over positions (data dependencies
only: what simulators follow), topological order, longest path, and a
networkx view on request.  Both are built without Python objects per node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from tracekit.errors import ValidationError

if TYPE_CHECKING:  # pragma: no cover
    import networkx

    from tracekit.model import Node


def csr_from_lists(lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """CSR (``ptr`` int64[N+1], ``values`` uint64[E]) from a list of int lists."""
    counts = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
    ptr = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    values = np.fromiter((v for x in lists for v in x), dtype=np.uint64, count=int(ptr[-1]))
    return ptr, values


@dataclass
class NodeColumns:
    """One rank's node table as arrays (N nodes, E dependency entries).

    Attributes:
        ids: uint64[N] node ids in file order.
        types: int16[N] NodeType wire numbers.
        duration_ns: int64[N] durations, nanoseconds.
        start_time_ns: int64[N] measured starts, nanoseconds (a read-only zero view when no node has one).
        data_ptr, data_ids: CSR of data dependencies (int64[N+1], uint64[E]) by id.
        ctrl_ptr, ctrl_ids: CSR of control dependencies.
        names_fn: produces the list of N names on first use of :attr:`names`.
        attr_fn: ``attr_fn(name) -> (present bool[N], values list[N])``.
        attr_num_fn: optional fast path for :meth:`attr_int`: ``(present, int64[N])``
            when every value is a scalar number, else None.
        prefetch_fn: optional: find several attributes in one pass before they are asked for
            (see :meth:`prefetch_attrs`); ``prefetch_fn(names, keep=True)`` keeps them (:meth:`keep_attrs`).
        release_fn: optional: forget what ``prefetch_fn(..., keep=True)`` kept.
        memo: tables derived from these columns by other modules (e.g. :func:`tracekit.sets.rendezvous.comm_table`)
            while attributes are kept; emptied by :meth:`release_attrs`.
    """

    ids: np.ndarray
    types: np.ndarray
    duration_ns: np.ndarray
    start_time_ns: np.ndarray
    data_ptr: np.ndarray
    data_ids: np.ndarray
    ctrl_ptr: np.ndarray
    ctrl_ids: np.ndarray
    names_fn: Callable[[], list[str]] = field(repr=False, default=list)
    attr_fn: Callable[[str], tuple[np.ndarray, list[Any]]] | None = field(repr=False, default=None)
    attr_num_fn: Callable[..., tuple[np.ndarray, np.ndarray] | None] | None = field(repr=False, default=None)
    verify_fn: Callable[[], None] | None = field(repr=False, default=None)
    prefetch_fn: Callable[..., None] | None = field(repr=False, default=None)
    release_fn: Callable[[], None] | None = field(repr=False, default=None)
    memo: dict[Any, Any] | None = field(default=None, repr=False, compare=False)
    _names: list[str] | None = field(default=None, repr=False)
    _attr_cache: dict[str, tuple[np.ndarray, list[Any]]] = field(default_factory=dict, repr=False)
    _all_text: set[str] = field(default_factory=set, repr=False)  # cached attributes whose values are all str/None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def names(self) -> list[str]:
        """Node names (list of N str), decoded on first use."""
        if self._names is None:
            self._names = self.names_fn()
        return self._names

    def verify(self) -> None:
        """Check what is decoded lazily (attribute framing); TraceFormatError when corrupt."""
        if self.verify_fn is not None:
            self.verify_fn()

    def prefetch_attrs(self, names: list[str]) -> None:
        """Hint: attributes ``names`` will be asked for next; columns read from a file find them in one pass.

        Raises:
            TraceFormatError: a corrupt attribute message.
        """
        if self.prefetch_fn is not None:
            self.prefetch_fn([x for x in names if x not in self._attr_cache])

    def keep_attrs(self, names: list[str]) -> None:
        """Find attributes ``names`` in one pass and serve every later ask from it until :meth:`release_attrs`;
        derived tables may be memoised in :attr:`memo` meanwhile (a replay's checks, compile and matching read
        the same few attributes and communication table several times each).

        Raises:
            TraceFormatError: a corrupt attribute message.
        """
        if self.memo is None:
            self.memo = {}
        if self.prefetch_fn is not None:
            self.prefetch_fn([x for x in names if x not in self._attr_cache], keep=True)

    def release_attrs(self) -> None:
        """End :meth:`keep_attrs`: the kept attributes and :attr:`memo` are dropped."""
        self.memo = None
        if self.release_fn is not None:
            self.release_fn()

    def attr(self, name: str) -> tuple[np.ndarray, list[Any]]:
        """Attribute ``name`` of every node: ``(present bool[N], values list[N])`` (None where absent)."""
        if name not in self._attr_cache:
            assert self.attr_fn is not None
            self._attr_cache[name] = self.attr_fn(name)
        return self._attr_cache[name]

    def attr_int(self, name: str, default: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Integer attribute as ``(present bool[N], values int64[N])`` (``default`` where absent).

        The integer rule of :func:`tracekit.model.attrs.as_int`, vectorized: any
        integer kind, floats truncated toward zero.

        Raises:
            ValidationError: a bool or non-numeric value (names the node).
        """
        if self.attr_num_fn is not None and name not in self._attr_cache:
            fast = self.attr_num_fn(name)  # vectorized when every value is a scalar int or finite float
            if fast is not None:
                present, values_arr = fast
                if default != 0:
                    values_arr = np.where(present, values_arr, default)
                return present, values_arr
        from tracekit.model.attrs import as_int

        present, values = self.attr(name)
        out = np.full(len(self.ids), default, dtype=np.int64)
        for i in np.flatnonzero(present).tolist():
            value = as_int(name, values[i], int(self.ids[i]))
            out[i] = default if value is None else value
        return present, out

    def attr_bool(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Boolean attribute as ``(present bool[N], values bool[N])`` (False where absent).

        The bool rule of :func:`tracekit.model.attrs.as_bool`, vectorized: ``bool_val`` or an integer 0/1.

        Raises:
            ValidationError: any other value (names the node).
        """
        if self.attr_num_fn is not None and name not in self._attr_cache:
            fast = self.attr_num_fn(name, bools=True)
            if fast is not None and not bool(((fast[1].view(np.uint64) > 1) & fast[0]).any()):  # all 0 or 1
                return fast[0], fast[1].astype(bool)
        from tracekit.model.attrs import as_bool

        present, values = self.attr(name)
        out = np.zeros(len(self.ids), dtype=bool)
        for i in np.flatnonzero(present).tolist():
            out[i] = as_bool(name, values[i], int(self.ids[i]))
        return present, out

    def attr_str(self, name: str) -> tuple[np.ndarray, list[str | None]]:
        """String attribute as ``(present bool[N], values list[N])`` by the string rule of
        :func:`tracekit.model.attrs.as_str` (None where absent).

        Raises:
            ValidationError: a value that is not text (names the node).
        """
        from tracekit.model.attrs import as_str

        present, values = self.attr(name)
        if name in self._all_text:
            return present, values
        if all(v is None or v.__class__ is str for v in values):
            self._all_text.add(name)  # the cached values are checked once (checks and compile both ask)
            return present, values
        return present, [as_str(name, v, int(self.ids[i])) for i, v in enumerate(values)]

    @classmethod
    def from_nodes(cls, nodes: Sequence["Node"]) -> "NodeColumns":
        """Columns of a list of :class:`~tracekit.model.Node`."""
        n = len(nodes)
        ids = np.fromiter((x.id for x in nodes), dtype=np.uint64, count=n)
        types = np.fromiter((int(x.type) for x in nodes), dtype=np.int16, count=n)
        try:
            dur = np.fromiter((x.duration_ns for x in nodes), dtype=np.int64, count=n)
            start = np.fromiter((x.start_time_ns for x in nodes), dtype=np.int64, count=n)
        except OverflowError:  # a time past int64 (e.g. scaled in memory): name the node
            from tracekit.model import MAX_DURATION_NS, MAX_TIME_NS, time_range_error

            for x in nodes:
                problem = time_range_error("duration", x.duration_ns, MAX_DURATION_NS) or time_range_error(
                    "start time", x.start_time_ns, MAX_TIME_NS
                )
                if (
                    problem
                    and not -(2**63)
                    <= min(x.duration_ns, x.start_time_ns)
                    <= max(x.duration_ns, x.start_time_ns)
                    < 2**63
                ):
                    raise ValidationError(problem, node_id=x.id) from None
            raise
        dptr, dids = csr_from_lists([x.data_deps for x in nodes])
        cptr, cids = csr_from_lists([x.ctrl_deps for x in nodes])

        def attr_fn(name: str) -> tuple[np.ndarray, list[Any]]:
            values = [x.get_attr(name) for x in nodes]
            present = np.fromiter((v is not None for v in values), dtype=bool, count=n)
            return present, values

        cols = cls(
            ids, types, dur, start, dptr, dids, cptr, cids, names_fn=lambda: [x.name for x in nodes], attr_fn=attr_fn
        )
        cols.prefetch_fn = lambda names, keep=False: _attrs_in_one_pass(cols, nodes, names)
        return cols


def _attrs_in_one_pass(cols: NodeColumns, nodes: Sequence["Node"], names: list[str]) -> None:
    """Fill ``cols``' attribute cache with attributes ``names`` of ``nodes`` in one walk over their attributes
    (as :meth:`NodeColumns.attr` finds each: the first attribute of the name; one ``get_attr`` walk per name
    otherwise)."""
    todo = {name: k for k, name in enumerate(x for x in dict.fromkeys(names) if x not in cols._attr_cache)}
    if not todo:
        return
    where: list[list[int]] = [[] for _ in todo]  # per name: positions of the nodes that have it, and the values
    found: list[list[Any]] = [[] for _ in todo]
    get = todo.get
    for i, x in enumerate(nodes):
        for a in x.attrs:
            k = get(a.name)
            if k is not None and (not where[k] or where[k][-1] != i):  # the node's first of that name
                where[k].append(i)
                found[k].append(a.value)
    n = len(nodes)
    for name, k in todo.items():
        values: list[Any] = [None] * n
        for i, v in zip(where[k], found[k]):
            values[i] = v
        present = np.zeros(n, dtype=bool)
        present[np.asarray(where[k], dtype=np.int64)] = True
        present[present] = np.fromiter((v is not None for v in found[k]), dtype=bool, count=len(found[k]))
        cols._attr_cache[name] = (present, values)


class DepGraph:
    """Data-dependency graph of one rank over node positions ``0..n-1`` (file order).

    Attributes:
        n: number of nodes.
        ids: uint64[n] node ids.
        pred_ptr, pred_pos: CSR of predecessors (int64[n+1], int64[E]).
        succ_ptr, succ_pos: CSR of successors.
        missing: int64[M, 2] rows ``(position, missing dep id)`` for data
            deps that name no node (excluded from the edges).
    """

    def __init__(self, columns: NodeColumns, *, path: str | None = None, rank: int | None = None) -> None:
        self.columns = columns
        self.path, self.rank = path, rank
        self.n = len(columns)
        self.ids = columns.ids
        if self.n < 2 or bool(np.all(self.ids[1:] > self.ids[:-1])):
            order, sorted_ids = None, self.ids  # ids ascend in file order (the common case): no copy
        else:
            order = np.argsort(self.ids, kind="stable")
            sorted_ids = self.ids[order]
        self._order, self._sorted_ids = order, sorted_ids
        dup = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1]) if order is not None else np.zeros(0, np.int64)
        self.duplicate_ids = np.unique(sorted_ids[dup + 1]) if len(dup) else np.zeros(0, dtype=np.uint64)
        # resolve dependency ids to positions (int32 positions where the trace allows: half the memory)
        pos_t = np.int32 if self.n < 2**31 else np.int64
        owner = np.repeat(np.arange(self.n, dtype=pos_t), np.diff(columns.data_ptr))
        pos, found = self._lookup(columns.data_ids)
        pos = pos.astype(pos_t)
        self.missing = (
            np.stack([owner[~found].astype(np.int64), columns.data_ids[~found].astype(np.int64)], axis=1)
            if not found.all()
            else np.zeros((0, 2), dtype=np.int64)
        )
        if not found.all():
            owner, pos = owner[found], pos[found]
        self.pred_ptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner, minlength=self.n), out=self.pred_ptr[1:])
        self.pred_pos = pos
        by_src = np.argsort(pos, kind="stable")
        self.succ_pos = owner[by_src]
        del by_src
        self.succ_ptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(np.bincount(pos, minlength=self.n), out=self.succ_ptr[1:])
        self._topo: np.ndarray | None = None
        self._topo_rank: np.ndarray | None = None

    @classmethod
    def build(cls, columns: NodeColumns, *, path: str | None = None, rank: int | None = None) -> "DepGraph":
        """The graph of ``columns`` (see the class docstring); duplicate ids are listed in ``duplicate_ids``."""
        return cls(columns, path=path, rank=rank)

    def _lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.n == 0:
            return np.zeros(len(ids), dtype=np.int64), np.zeros(len(ids), dtype=bool)
        idx = np.searchsorted(self._sorted_ids, ids)
        idx_c = np.minimum(idx, self.n - 1)
        found = self._sorted_ids[idx_c] == ids
        if self._order is None:
            return idx_c.astype(np.int64), found
        return self._order[idx_c].astype(np.int64), found

    def position_of(self, node_id: int) -> int:
        """Position (file index) of ``node_id``.

        Raises:
            ValidationError: no node has that id.
        """
        pos, found = self._lookup(np.asarray([node_id], dtype=np.uint64))
        if not found[0]:
            raise ValidationError(f"no node with id {node_id}", path=self.path, rank=self.rank)
        return int(pos[0])

    def positions_of(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorized :meth:`position_of`: ``(positions int64[K], found bool[K])``."""
        return self._lookup(np.asarray(ids, dtype=np.uint64))

    def predecessors(self, pos: int) -> np.ndarray:
        """Positions (int32/int64 array) whose completion the node at ``pos`` waits for (data deps)."""
        return self.pred_pos[self.pred_ptr[pos] : self.pred_ptr[pos + 1]]

    def successors(self, pos: int) -> np.ndarray:
        """Positions (int32/int64 array) of the nodes that wait for the node at ``pos``."""
        return self.succ_pos[self.succ_ptr[pos] : self.succ_ptr[pos + 1]]

    def topological_order(self) -> np.ndarray:
        """Positions in a topological order of the data dependencies (int64[n]).

        File order is used when every dependency points to an earlier node
        (the common case, checked in one vectorized pass); otherwise Kahn's
        algorithm (smallest position first, so the order is deterministic).

        Raises:
            ValidationError: the graph has a cycle; the message lists the
                cycle's node ids and names.
        """
        if self._topo is not None:
            return self._topo
        owner = np.repeat(np.arange(self.n, dtype=self.pred_pos.dtype), np.diff(self.pred_ptr))
        if bool(np.all(self.pred_pos < owner)):
            self._topo = np.arange(self.n, dtype=np.int64)
            return self._topo
        import heapq

        indeg = np.diff(self.pred_ptr).tolist()
        succ_ptr, succ_pos = self.succ_ptr.tolist(), self.succ_pos.tolist()
        heap = [i for i in range(self.n) if indeg[i] == 0]
        heapq.heapify(heap)
        order: list[int] = []
        while heap:
            u = heapq.heappop(heap)
            order.append(u)
            for k in range(succ_ptr[u], succ_ptr[u + 1]):
                v = succ_pos[k]
                indeg[v] -= 1
                if indeg[v] == 0:
                    heapq.heappush(heap, v)
        if len(order) < self.n:
            cycle = self.find_cycle([i for i in range(self.n) if indeg[i] > 0])
            ids = [int(self.ids[p]) for p in cycle]
            names = self.columns.names
            desc = " -> ".join(f"{i} ({names[p]})" for i, p in zip(ids, cycle))
            raise ValidationError(
                f"dependency cycle: {desc} -> {ids[0]}", path=self.path, rank=self.rank, node_id=ids[0]
            )
        self._topo = np.asarray(order, dtype=np.int64)
        return self._topo

    def in_topological_order(self, positions: np.ndarray) -> list[int]:
        """``positions`` sorted by their place in :meth:`topological_order` (e.g. a rank's collectives in issue order).

        Raises:
            ValidationError: the graph has a cycle.
        """
        if self._topo_rank is None:
            order = self.topological_order()
            self._topo_rank = np.empty(self.n, dtype=np.int64)
            self._topo_rank[order] = np.arange(len(order))
        positions = np.asarray(positions, dtype=np.int64)
        ordered: list[int] = positions[np.argsort(self._topo_rank[positions], kind="stable")].tolist()
        return ordered

    def find_cycle(self, candidates: Sequence[int]) -> list[int]:
        """One cycle among ``candidates`` (positions left with in-degree > 0), as positions in dependency order.

        Iterative: walks predecessor links, which always exist inside the
        leftover set, until a position repeats.
        """
        left = set(candidates)
        start = min(left)
        seen: dict[int, int] = {}
        path: list[int] = []
        u = start
        while u not in seen:
            seen[u] = len(path)
            path.append(u)
            preds = [int(p) for p in self.predecessors(u) if int(p) in left]
            u = min(preds)
        cycle = path[seen[u] :]
        cycle.reverse()  # dependency order: each node is a dep of the next
        k = cycle.index(min(cycle))  # start at the earliest node, for a stable message
        return cycle[k:] + cycle[:k]

    def longest_path(self, weights: np.ndarray) -> tuple[float, list[int]]:
        """Longest weighted path (node weights, e.g. durations) through the data dependencies.

        Args:
            weights: float or int array [n], the cost of each node.

        Returns:
            ``(length, positions)`` of one longest path, in execution order.

        Raises:
            ValidationError: the graph has a cycle.
        """
        order = self.topological_order().tolist()
        w = np.asarray(weights, dtype=np.float64).tolist()
        finish = [0.0] * self.n
        best_pred = [-1] * self.n
        pred_ptr, pred_pos = self.pred_ptr.tolist(), self.pred_pos.tolist()
        for u in order:
            best, arg = 0.0, -1
            for k in range(pred_ptr[u], pred_ptr[u + 1]):
                p = pred_pos[k]
                if finish[p] > best:
                    best, arg = finish[p], p
            finish[u] = best + w[u]
            best_pred[u] = arg
        if self.n == 0:
            return 0.0, []
        end = int(np.argmax(finish))
        path = []
        u = end
        while u != -1:
            path.append(u)
            u = best_pred[u]
        path.reverse()
        return finish[end], path

    def to_networkx(self) -> "networkx.DiGraph":
        """A ``networkx.DiGraph`` keyed by node id, with ``name``, ``type`` and ``duration_ns`` attributes."""
        import networkx as nx

        g = nx.DiGraph()
        ids = self.ids.tolist()
        names = self.columns.names
        types = self.columns.types.tolist()
        durs = self.columns.duration_ns.tolist()
        g.add_nodes_from((ids[i], {"name": names[i], "type": types[i], "duration_ns": durs[i]}) for i in range(self.n))
        owner = np.repeat(np.arange(self.n), np.diff(self.pred_ptr))
        g.add_edges_from(zip(self.ids[self.pred_pos].tolist(), self.ids[owner].tolist()))
        return g
