"""What changed between two replays: iteration time, time per category, collectives and nodes that moved.

Inputs are two :class:`~tracekit.replayer.results.result.ReplayResult` (typically
the same trace replayed on two hardware specs or with two options).

- Categories: the iteration time; the mean over ranks of each
  :class:`~tracekit.replayer.results.result.RankStats` figure (compute,
  communication, exposed communication, waiting for peers, idle); the
  critical path's compute and communication time; the summed transfer time of
  all collectives.  A category *changed* when it moved by more than 1 ns and
  by more than one part per million.
- Collectives are matched by (kind, process group, members, bytes,
  occurrence number of that key), so the same trace replayed twice matches
  one to one; the ``top`` with the largest absolute change in transfer time
  are kept (only those that :func:`moved`).  When either result is in the compact form (no instances,
  :mod:`tracekit.replayer.results.compact`), the collective tables' rows are matched instead, by (kind,
  process group, group size, bytes), and their mean times compared.
- Nodes (needs both results' schedules) are matched per rank by (op name,
  occurrence of that name in file order), so runs whose node ids differ
  (after compaction or rescaling) still pair the same ops; a node a
  transform merged (Compact's ``merged_node_ids``) is compared with the sum
  of the nodes it stands for.  Results without node names fall back to
  node ids (a note says so).  A node's time is its run time for compute
  nodes and its transfer time for communication nodes; the ``top`` with the
  largest absolute change are kept (only those that :func:`moved`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.errors import ReplayError

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.results.result import RankSchedule, ReplayResult

_K_TIMED, _K_COLL = 0, 2


@dataclass(frozen=True)
class CategoryChange:
    """One figure in run A and run B, ns."""

    name: str
    a_ns: float
    b_ns: float

    @property
    def delta_ns(self) -> float:
        """``b_ns - a_ns``, ns (positive: run B took longer)."""
        return self.b_ns - self.a_ns

    @property
    def ratio(self) -> float | None:
        """``b / a`` (None when ``a`` is 0)."""
        return self.b_ns / self.a_ns if self.a_ns else None

    @property
    def changed(self) -> bool:
        """Moved by more than 1 ns and more than 1e-6 of the larger value."""
        d = abs(self.delta_ns)
        return d > 1.0 and d > 1e-6 * max(abs(self.a_ns), abs(self.b_ns))

    def to_dict(self) -> dict[str, Any]:
        """The change as JSON-ready values: names, ``a_ns``, ``b_ns``, ``delta_ns`` (ns), ``ratio``, ``changed``."""
        return {
            "name": self.name,
            "a_ns": self.a_ns,
            "b_ns": self.b_ns,
            "delta_ns": self.delta_ns,
            "ratio": self.ratio,
            "changed": self.changed,
        }


@dataclass(frozen=True)
class CollectiveChange:
    """One collective (or send/recv pair) matched in both runs; times ns, bandwidths GB/s."""

    kind: str
    comm_bytes: int
    pg_name: str
    group_size: int
    occurrence: int
    a_index: int
    b_index: int
    a_time_ns: float
    b_time_ns: float
    a_busbw_gbps: float | None
    b_busbw_gbps: float | None
    a_algorithm: str
    b_algorithm: str

    @property
    def delta_ns(self) -> float:
        """``b_time_ns - a_time_ns``, ns (positive: the collective took longer in run B)."""
        return self.b_time_ns - self.a_time_ns

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-ready values plus ``delta_ns`` (ns)."""
        return {**asdict(self), "delta_ns": self.delta_ns}


@dataclass(frozen=True)
class NodeChange:
    """One node matched in both runs: ``kind`` is ``compute`` or ``comm`` (transfer time); times ns.

    ``node_id`` / ``b_node_id``: the node in A / in B; ``occurrence``: how many nodes of that name came
    before it on the rank; ``merged``: how many nodes of the other run it stands for (a transform merged
    them; its time is compared with their sum).
    """

    rank: int
    node_id: int
    name: str
    kind: str
    a_ns: float
    b_ns: float
    occurrence: int = 0
    b_node_id: int | None = None
    merged: int = 1

    @property
    def delta_ns(self) -> float:
        """``b_ns - a_ns``, ns (positive: the node took longer in run B)."""
        return self.b_ns - self.a_ns

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-ready values plus ``delta_ns`` (ns)."""
        return {**asdict(self), "delta_ns": self.delta_ns}


@dataclass(frozen=True)
class ResultDiff:
    """The comparison of run A with run B (see module doc).

    Attributes:
        a_label, b_label: how to call the runs (spec name by default).
        categories: every category, ``categories[0]`` being the iteration time.
        collectives: the ``top`` collectives by absolute change, largest first.
        collectives_matched, a_only_collectives, b_only_collectives: matching counts.
        nodes: the ``top`` nodes by absolute change (empty without schedules).
        nodes_matched: nodes compared (0 without schedules).
        notes: sentences about what could not be compared.
    """

    a_label: str
    b_label: str
    categories: tuple[CategoryChange, ...]
    collectives: tuple[CollectiveChange, ...]
    collectives_matched: int
    a_only_collectives: int
    b_only_collectives: int
    nodes: tuple[NodeChange, ...]
    nodes_matched: int
    notes: tuple[str, ...] = ()

    @property
    def iteration(self) -> CategoryChange:
        """The iteration-time change (``categories[0]``), ns."""
        return self.categories[0]

    def changed_categories(self) -> list[CategoryChange]:
        """The categories that :attr:`CategoryChange.changed` (moved by > 1 ns and > 1e-6), in order."""
        return [c for c in self.categories if c.changed]

    def to_dict(self) -> dict[str, Any]:
        """The diff as the ``tracekit.replay_diff`` JSON document (format_version 1); times in ns."""
        return {
            "format": "tracekit.replay_diff",
            "format_version": 1,
            "a_label": self.a_label,
            "b_label": self.b_label,
            "categories": [c.to_dict() for c in self.categories],
            "changed_categories": [c.name for c in self.changed_categories()],
            "collectives": [c.to_dict() for c in self.collectives],
            "collectives_matched": self.collectives_matched,
            "a_only_collectives": self.a_only_collectives,
            "b_only_collectives": self.b_only_collectives,
            "nodes": [n.to_dict() for n in self.nodes],
            "nodes_matched": self.nodes_matched,
            "notes": list(self.notes),
        }


def moved(a_ns: float, b_ns: float) -> bool:
    """Whether a collective's or node's time moved: by more than 0.001 ns and one part per billion
    (smaller differences are float rounding of times far from 0)."""
    d = abs(b_ns - a_ns)
    return d > 1e-3 and d > 1e-9 * max(abs(a_ns), abs(b_ns))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _categories(r: "ReplayResult") -> list[tuple[str, float]]:
    ranks = r.ranks
    return [
        ("iteration time", r.iteration_time_ns),
        ("compute (rank mean)", _mean([s.compute_ns for s in ranks])),
        ("comm (rank mean)", _mean([s.comm_ns for s in ranks])),
        ("exposed comm (rank mean)", _mean([s.exposed_comm_ns for s in ranks])),
        ("waiting for peers (rank mean)", _mean([s.comm_wait_ns for s in ranks])),
        ("other idle (rank mean)", _mean([s.other_idle_ns for s in ranks])),
        ("critical path compute", r.critical_path.compute_ns),
        ("critical path comm", r.critical_path.comm_ns),
        ("collective time (sum)", sum(g["total_time_ns"] for g in r.collective_summary())),
    ]


def _keyed_collectives(r: "ReplayResult", by_group: bool = False) -> dict[tuple, Any]:
    """Collective instances keyed by (kind, group, members, bytes, occurrence); ``by_group`` (a compact result on
    either side: no instances): the collective table's rows as instances keyed by (kind, group, group size, bytes,
    0), ``index`` their row number, their time the row's mean."""
    if by_group:
        return {
            (g["kind"], g["pg_name"], g["group_size"], g["comm_bytes"], 0): _GroupRow(
                g["kind"],
                g["comm_bytes"],
                g["pg_name"],
                range(g["group_size"]),
                g["algorithm"],
                i,
                g["mean_time_ns"],
                g["busbw_gbps"],
            )  # fmt: skip
            for i, g in enumerate(r.collective_summary())
        }
    seen: dict[tuple, int] = {}
    out = {}
    for row in r.collectives:
        base = (row.kind, row.pg_name, tuple(row.ranks), row.comm_bytes)
        k = seen.get(base, 0)
        seen[base] = k + 1
        out[base + (k,)] = row
    return out


@dataclass(frozen=True)
class _GroupRow:
    """A collective-table row standing in for a :class:`CollectiveRow` in :func:`diff_results`."""

    kind: str
    comm_bytes: int
    pg_name: str
    ranks: range
    algorithm: str
    index: int
    time_ns: float
    busbw_gbps: float | None


def _node_times(s: "RankSchedule") -> tuple[np.ndarray, np.ndarray]:
    """Per node: its time (run time / transfer time, NaN for neither) and kind code (0 compute, 1 comm)."""
    t = np.full(len(s.node_ids), np.nan)
    timed = s.kind == _K_TIMED
    t[timed] = s.end_ns[timed] - s.start_ns[timed]
    comm = (s.kind >= _K_COLL) & ~np.isnan(s.xfer_start_ns)
    t[comm] = s.end_ns[comm] - s.xfer_start_ns[comm]
    return t, comm.astype(np.int8)


def _match_rank(sa: "RankSchedule", sb: "RankSchedule") -> tuple[list[tuple], bool]:
    """Nodes of one rank matched across two runs: ``[(name, occurrence, a_id, b_id, merged, is_comm, a_ns, b_ns)]``
    and whether names were available (else matched by node id).

    With names: a node merged by a transform (``merged_ids``, Compact's provenance map) is matched with the
    sum of the nodes it stands for on the other side; every other node by (op name, occurrence of that name
    among the rank's unmerged nodes, in file order).
    """
    time_a, kind_a = _node_times(sa)
    time_b, kind_b = _node_times(sb)
    if sa.names is None or sb.names is None:
        common, pos_a, pos_b = np.intersect1d(sa.node_ids, sb.node_ids, return_indices=True)
        return [
            ("", 0, int(sa.node_ids[p]), int(sb.node_ids[q]), 1, bool(kind_a[p]), float(time_a[p]), float(time_b[q]))
            for p, q in zip(pos_a.tolist(), pos_b.tolist())
            if not (np.isnan(time_a[p]) or np.isnan(time_b[q]))
        ], False
    names_a, names_b = sa.names, sb.names
    out: list[tuple] = []
    used_a: set[int] = set()
    used_b: set[int] = set()
    for big, small, t_big, t_small, big_is_b in ((sb, sa, time_b, time_a, True), (sa, sb, time_a, time_b, False)):
        if not big.merged_ids:
            continue
        pos_small = {int(x): i for i, x in enumerate(small.node_ids.tolist())}
        pos_big = {int(x): i for i, x in enumerate(big.node_ids.tolist())}
        for head, sources in big.merged_ids.items():
            found = [pos_small.get(x) for x in sources]
            pb = pos_big.get(head)
            ps = [p for p in found if p is not None]
            if pb is None or len(ps) != len(found) or np.isnan(t_big[pb]):
                continue
            big_name = (names_b if big_is_b else names_a)[pb]
            t_group = float(sum(t_small[p] for p in ps))
            if big_is_b:
                out.append((big_name, 0, int(small.node_ids[ps[0]]), head, len(ps), False, t_group, float(t_big[pb])))
                used_b.add(pb)
                used_a.update(ps)
            else:
                out.append((big_name, 0, head, int(small.node_ids[ps[0]]), len(ps), False, float(t_big[pb]), t_group))
                used_a.add(pb)
                used_b.update(ps)
    keyed_b: dict[tuple[str, int], int] = {}
    seen: dict[str, int] = {}
    for q, name in enumerate(names_b):
        if q in used_b:
            continue
        k = seen.get(name, 0)
        seen[name] = k + 1
        keyed_b[(name, k)] = q
    seen = {}
    for p, name in enumerate(names_a):
        if p in used_a:
            continue
        k = seen.get(name, 0)
        seen[name] = k + 1
        match = keyed_b.get((name, k))
        if match is None or np.isnan(time_a[p]) or np.isnan(time_b[match]):
            continue
        out.append(
            (
                name,
                k,
                int(sa.node_ids[p]),
                int(sb.node_ids[match]),
                1,
                bool(kind_a[p]),
                float(time_a[p]),
                float(time_b[match]),
            )
        )
    return out, True


def _node_changes(a: "ReplayResult", b: "ReplayResult", top: int) -> tuple[list[NodeChange], int, list[str]]:
    if a.schedule is None or b.schedule is None:
        which = " and ".join(x for x, r in (("A", a), ("B", b)) if r.schedule is None)
        return (
            [],
            0,
            [
                f"node-level changes need per-node schedules, missing in {which} "
                "(replay with --with-schedule -o RESULT.json)"
            ],
        )
    names: dict[tuple[int, int], str] = {}
    for r in (a, b):
        for step in r.critical_path.steps:
            names.setdefault((step.rank, step.node_id), step.name)
    b_by_rank = {s.rank: s for s in b.schedule}
    rows: list[tuple[int, tuple]] = []
    by_id = False
    found_rank = False
    for sa in a.schedule:
        sb = b_by_rank.get(sa.rank)
        if sb is None:
            continue
        found_rank = True
        matched, named = _match_rank(sa, sb)
        by_id = by_id or not named
        rows.extend((sa.rank, m) for m in matched)
    if not found_rank:
        return [], 0, ["no rank is in both results"]
    notes = (
        ["nodes matched by node id (a result has no node names: replay it again to match by op name)"] if by_id else []
    )
    moved_rows = [(rank, m) for rank, m in rows if moved(m[6], m[7])]
    moved_rows.sort(key=lambda x: (-abs(x[1][7] - x[1][6]), x[0], x[1][2]))
    out = []
    for rank, (name, occ, a_id, b_id, merged, is_comm, ta, tb) in moved_rows[:top]:
        out.append(
            NodeChange(
                rank,
                a_id,
                name or names.get((rank, a_id), ""),
                "comm" if is_comm else "compute",
                ta,
                tb,
                occ,
                b_id,
                merged,
            )
        )
    return out, len(rows), notes


def _setup_notes(pa: Any, pb: Any) -> list[str]:
    """A sentence when the two runs price communication with different collective models (a change the diff
    mixes in beside the hardware's); ``pa``/``pb`` are the results' provenance."""
    out = []
    if pa.collective_model != pb.collective_model:
        out.append(
            f"the runs use different collective models ({pa.collective_model} and {pb.collective_model}): the "
            f"change mixes the model's with the hardware's; replay both with the same --collective-model"
        )
    return out


def timing_differences(pa: Any, pb: Any) -> list[str]:
    """How runs A and B (their provenance) were timed differently: ``compute measured vs projected``,
    ``hardware dgx-a100 vs dgx-h100`` (a spec's file when two specs share a name); empty when the same."""
    out = []
    if pa.compute_mode != pb.compute_mode:
        out.append(f"compute {pa.compute_mode} vs {pb.compute_mode}")
    if pa.spec_name != pb.spec_name:
        out.append(f"hardware {pa.spec_name} vs {pb.spec_name}")
    elif pa.spec_path != pb.spec_path:
        out.append(f"hardware {pa.spec_name} from {pa.spec_path} vs {pb.spec_path}")
    return out


def diff_results(
    a: "ReplayResult", b: "ReplayResult", *, top: int = 10, a_label: str | None = None, b_label: str | None = None
) -> ResultDiff:
    """Compare replay ``a`` with replay ``b`` (``b - a``; see module doc).

    Args:
        top: how many collectives and nodes to keep (largest absolute change first).
        a_label, b_label: run names (default: the spec names, suffixed " (A)"/" (B)" when equal).

    Raises:
        ReplayError: ``top`` < 0.
    """
    if top < 0:
        raise ReplayError(f"top must be >= 0, got {top}")
    la = a_label or a.provenance.spec_name
    lb = b_label or b.provenance.spec_name
    if la == lb:
        la, lb = f"{la} (A)", f"{lb} (B)"
    cats = tuple(CategoryChange(name, va, vb) for (name, va), (_, vb) in zip(_categories(a), _categories(b)))
    by_group = a.collective_rows is not None or b.collective_rows is not None
    ka, kb = _keyed_collectives(a, by_group), _keyed_collectives(b, by_group)
    matched = [key for key in ka if key in kb]
    changes = []
    for key in matched:
        ra, rb = ka[key], kb[key]
        changes.append(
            CollectiveChange(
                ra.kind,
                ra.comm_bytes,
                ra.pg_name,
                len(ra.ranks),
                key[-1],
                ra.index,
                rb.index,
                ra.time_ns,
                rb.time_ns,
                ra.busbw_gbps,
                rb.busbw_gbps,
                ra.algorithm,
                rb.algorithm,
            )
        )
    changes.sort(key=lambda c: (-abs(c.delta_ns), c.a_index))
    changes = [c for c in changes if moved(c.a_time_ns, c.b_time_ns)][:top]
    nodes, n_nodes, notes = _node_changes(a, b, top)
    notes = list(notes)
    if a.provenance.world_size != b.provenance.world_size:
        notes.insert(
            0,
            f"the runs have different world sizes ({a.provenance.world_size} and "
            f"{b.provenance.world_size}); per-rank figures are means over each run's ranks",
        )
    notes[:0] = _setup_notes(a.provenance, b.provenance)
    return ResultDiff(
        la,
        lb,
        cats,
        tuple(changes),
        len(matched),
        len(ka) - len(matched),
        len(kb) - len(matched),
        tuple(nodes),
        n_nodes,
        tuple(notes),
    )


__all__ = ["CategoryChange", "CollectiveChange", "NodeChange", "ResultDiff", "diff_results", "moved"]
