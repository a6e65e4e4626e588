"""The fold plan's unfolded instances as columns (:attr:`.folding.FoldPlan.unfolded`; issue 34 item 2).

A folded job still has one entry per communication instance of the unfolded job (4.6 M for GPT-3 175B with 64
interleaved micro-batches on 2,048 ranks).  As Python tuples (kind, type, bytes, group, members, positions,
folded index) they cost ~200 B each; here they are typed arrays with interned group names and member tuples
(~60-80 B), and a row is made into that tuple only when it is read (``table[u]``, iteration), so every reader
sees what it saw before.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import numpy.typing as npt

__all__ = ["UnfoldedTable"]

_KINDS = ("collective", "p2p")

#: one row: ``(kind, comm_type or None, comm_bytes, pg_name, ranks, positions, folded index)``
Row = tuple[str, "int | None", int, str, tuple[int, ...], tuple[int, ...], int]


class UnfoldedTable:
    """Unfolded instances in order; ``table[u]`` is instance ``u``'s row (module doc)."""

    def __init__(self) -> None:
        self.kind = bytearray()
        self.ctype = array("q")
        self.nbytes = array("q")
        self.pg = array("i")
        self.members = array("i")
        self.fid = array("q")
        self.pos_start = array("q", [0])
        self.positions = array("q")
        self.pg_names: list[str] = []
        self.member_sets: list[tuple[int, ...]] = []
        self._pg_index: dict[str, int] = {}
        self._member_index: dict[tuple[int, ...], int] = {}
        self._member_by_id: dict[int, int] = {}
        self._pack_memo: dict[Any, tuple[Any, bytes]] = {}  # id(s) of lists -> (the lists, their bytes)

    def _pg_id(self, name: str) -> int:
        found = self._pg_index.get(name)
        if found is None:
            found = self._pg_index[name] = len(self.pg_names)
            self.pg_names.append(name)
        return found

    def _members_id(self, ranks: tuple[int, ...]) -> int:
        found = self._member_by_id.get(id(ranks))
        if found is not None and self.member_sets[found] is ranks:
            return found
        found = self._member_index.get(ranks)
        if found is None:
            found = self._member_index[ranks] = len(self.member_sets)
            self.member_sets.append(ranks)
        self._member_by_id[id(ranks)] = found
        return found

    def append(self, row: Row) -> None:
        """Add one instance (a tuple as :data:`Row`)."""
        kind, ctype, nbytes, pg, ranks, positions, fid = row
        self.kind.append(_KINDS.index(kind))
        self.ctype.append(0 if ctype is None else ctype)
        self.nbytes.append(nbytes)
        self.pg.append(self._pg_id(pg))
        self.members.append(self._members_id(ranks))
        self.fid.append(fid)
        self.positions.extend(positions)
        self.pos_start.append(len(self.positions))

    def extend_group(
        self,
        ctypes: Sequence[int],
        sizes: Sequence[int],
        pg: str,
        ranks: tuple[int, ...],
        lists: list,
        fids: Sequence[int],
    ) -> None:
        """Add a group's collectives: instance ``k`` has type ``ctypes[k]``, ``sizes[k]`` bytes, member ``i`` at
        position ``lists[i][k]`` and folded index ``fids[k]``."""
        count = len(fids)
        self.kind.extend(bytes(count))
        self.ctype.frombytes(self._packed(ctypes))
        self.nbytes.frombytes(self._packed(sizes))
        self.pg.frombytes(np.full(count, self._pg_id(pg), dtype=np.int32).tobytes())
        self.members.frombytes(np.full(count, self._members_id(ranks), dtype=np.int32).tobytes())
        self.fid.frombytes(self._packed(fids))
        base = len(self.positions)
        self.positions.frombytes(self._packed_lists(lists, count))
        self.pos_start.frombytes((base + len(ranks) * np.arange(1, count + 1, dtype=np.int64)).tobytes())

    def _packed(self, values: Sequence[int]) -> bytes:
        """``values`` as int64 bytes, packed once per object (the groups of a class set share their lists)."""
        found = self._pack_memo.get(id(values))
        if found is None or found[0] is not values:
            found = self._pack_memo[id(values)] = (values, np.asarray(values, dtype=np.int64).tobytes())
        return found[1]

    def _packed_lists(self, lists: list, count: int) -> bytes:
        """Members' position lists as instance-major int64 bytes; kept from the second group with the same list
        objects on (the dp replicas of a class set's groups), so a job of distinct lists keeps no copies."""
        key = tuple(map(id, lists))
        found = self._pack_memo.get(key)
        if found is not None and found[1] and all(a is b for a, b in zip(found[0], lists)):
            return found[1]
        flat = np.ascontiguousarray(np.asarray(lists, dtype=np.int64).reshape(len(lists), count).T).tobytes()
        seen_before = found is not None and all(a is b for a, b in zip(found[0], lists))
        self._pack_memo[key] = (list(lists), flat if seen_before else b"")
        return flat

    def extend_pairs(
        self,
        nbytes: "npt.NDArray[np.int64]",
        pgs: "tuple[npt.NDArray[np.int64], list[str]]",
        src: "npt.NDArray[np.int64]",
        dst: "npt.NDArray[np.int64]",
        positions: "tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]",
        fids: "npt.NDArray[np.int64]",
    ) -> None:
        """Add send/recv pairs: pair ``j`` from ``src[j]`` (its send at ``positions[0][j]``) to ``dst[j]`` (receive at
        ``positions[1][j]``), ``nbytes[j]`` bytes on group ``pgs[1][pgs[0][j]]``, folded index ``fids[j]``."""
        from tracekit.replayer.simulation.fold_arrays import as_buffer, sorted_unique

        count = len(fids)
        self.kind.extend(b"\1" * count)
        self.ctype.frombytes(bytes(8 * count))
        self.nbytes.frombytes(as_buffer(nbytes))
        codes, names = pgs
        ids = np.zeros(len(names), dtype=np.int32)
        for c in np.unique(codes).tolist():  # the names used, interned
            ids[c] = self._pg_id(names[c])
        self.pg.frombytes(as_buffer(ids[codes], np.int32) if count else b"")
        span = int(max(src.max(), dst.max())) + 1 if count else 1
        keys, inverse = sorted_unique(src * span + dst)
        members = np.asarray([self._members_id(divmod(k, span)) for k in keys.tolist()], dtype=np.int32)
        self.members.frombytes(as_buffer(members[inverse], np.int32))
        self.fid.frombytes(as_buffer(fids))
        base = len(self.positions)
        self.positions.frombytes(as_buffer(np.stack(positions, axis=1)))
        self.pos_start.frombytes(as_buffer(base + 2 * np.arange(1, count + 1, dtype=np.int64)))

    def __len__(self) -> int:
        return len(self.fid)

    def __getitem__(self, u: int) -> Row:
        p2p = self.kind[u] == 1
        return (
            _KINDS[self.kind[u]],
            None if p2p else self.ctype[u],
            self.nbytes[u],
            self.pg_names[self.pg[u]],
            self.member_sets[self.members[u]],
            tuple(self.positions[self.pos_start[u] : self.pos_start[u + 1]]),
            self.fid[u],
        )

    def __iter__(self) -> Iterator[Row]:
        return (self[u] for u in range(len(self)))

    def summary_columns(self) -> Iterator[tuple[str, "int | None", int, str, int, int]]:
        """Per instance ``(kind, comm_type or None, comm_bytes, pg_name, group size, folded index)`` (no positions),
        as :func:`.fold_summary.summary_rows` reads them."""
        sizes = [len(m) for m in self.member_sets]
        names, kinds = self.pg_names, _KINDS
        for k, c, b, g, m, f in zip(self.kind, self.ctype, self.nbytes, self.pg, self.members, self.fid):
            yield kinds[k], (None if k else c), b, names[g], sizes[m], f

    def __eq__(self, other: Any) -> bool:
        return list(self) == list(other) if isinstance(other, (UnfoldedTable, list)) else NotImplemented
