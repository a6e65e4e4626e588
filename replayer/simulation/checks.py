"""Up-front checks: refuse a replay whose inputs cannot give a meaningful answer.

Run before the simulation (``ReplayOptions(check=True)``, the default):

- ``spec-size``: the trace set has as many ranks as the spec (or the spec may
  be fitted to it, ``fit_to_world_size``); raises :class:`~tracekit.errors.SpecError`.
- everything :func:`tracekit.checks.validate.validate_traceset` checks: ranks
  0..n-1 without gaps, per-trace structure (unique ids, dangling deps,
  cycles, node types, communication attributes), process groups that resolve
  and whose collectives come from members, and ``collective-order``: every
  member of a group issues the same sequence of collectives (type and size),
  via :func:`tracekit.checks.validate.collective_sequences`;
- ``p2p-match``: every send has a recv on its destination with the same
  source and tag, and the other way round (counted per (src, dst, tag));
  ``p2p-attrs``: a send's ``comm_src`` (when present) is its own rank, a recv's
  ``comm_dst`` likewise; ``p2p-size``: the k-th send and recv of a (src, dst, tag) carry the same ``comm_size``.

Problems are raised together as one :class:`ReplayCheckError` whose message
shows the first few and whose ``issues`` holds them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tracekit.model.attrs import COMM_DST, COMM_SIZE, COMM_SRC, COMM_TAG
from tracekit.errors import ReplayError
from tracekit.model import NodeType
from tracekit.checks.validate import ERROR, Issue, validate_traceset

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.hardware import HardwareSpec
    from tracekit.sets.traceset import TraceSet

MAX_IN_MESSAGE = 5


class ReplayCheckError(ReplayError):
    """The trace set fails the up-front checks.

    Attributes:
        issues: every problem found (:class:`tracekit.checks.validate.Issue`).
    """

    def __init__(self, issues: list[Issue]) -> None:
        shown = "; ".join(str(i) for i in issues[:MAX_IN_MESSAGE])
        more = f"; ... and {len(issues) - MAX_IN_MESSAGE} more" if len(issues) > MAX_IN_MESSAGE else ""
        total = sum(i.count for i in issues)
        super().__init__(f"{total:,} problem(s) found before replay: {shown}{more}")
        self.issues = list(issues)


def check_complete(present_ranks, world_size: int, *, path: str | None = None, file: str | None = None) -> None:
    """Raise ReplayError when a rank of the job has no trace (a replay needs every rank).

    ``world_size`` counts the ranks named by file names and process groups; ``file`` (one rank file of the set)
    lets the message name the files of the same set beside it and the command that takes them all.

    Raises:
        ReplayError: naming the missing ranks (and ``path``).
    """
    from tracekit.replayer.simulation.whole_job import missing_ranks_hint

    present = set(present_ranks)
    missing = [r for r in range(world_size) if r not in present]
    if missing:
        shown = ", ".join(map(str, missing[:16])) + (" ..." if len(missing) > 16 else "")
        raise ReplayError(
            f"no trace for rank(s) {shown}: the job has {world_size} ranks (from its file names and "
            f"process groups) and a replay needs every rank's trace{missing_ranks_hint(file, world_size)}",
            path=path,
        )


def check_spec_size(
    traceset: "TraceSet", spec: "HardwareSpec", world_size: int | None = None, *, ranks: "list[int] | None" = None
) -> None:
    """Raise SpecError when the spec cannot have the trace set's number of ranks.

    ``world_size`` and ``ranks`` give the job's size and trace files when
    ``traceset`` holds only some of them (rank folding keeps one trace per
    class of identical ranks: a set of identical files is still N ranks).

    Raises:
        ReplayError: the trace set has no traces.
        SpecError: the spec's rank count differs and cannot be fitted (see :meth:`HardwareSpec.fitted`).
    """
    from tracekit.errors import SpecError

    if len(traceset) == 0:
        raise ReplayError("the trace set has no traces")
    world = traceset.world_size if world_size is None else world_size
    files = list(traceset.ranks) if ranks is None else list(ranks)
    try:
        spec.fitted(world)
    except SpecError as exc:
        if len(files) != world:
            exc.message += f" (the trace set has {len(files)} trace files, highest rank {max(files)})"
        raise SpecError(exc.message, path=exc.path) from None


def p2p_issues(traceset: "TraceSet") -> list[Issue]:
    """Unmatched sends/recvs and sends/recvs naming another rank as themselves."""
    issues: list[Issue] = []
    sends: dict[tuple[int, int, int], list[tuple[int, int, int]]] = {}
    recvs: dict[tuple[int, int, int], list[tuple[int, int, int]]] = {}
    for rank, trace in traceset.items():
        cols = trace.columns()
        pos = np.flatnonzero((cols.types == NodeType.COMM_SEND_NODE) | (cols.types == NodeType.COMM_RECV_NODE))
        if not len(pos):
            continue
        src_has, src_v, src_ok = COMM_SRC.column_or(cols, absent=-1, bad=-1)
        dst_has, dst_v, dst_ok = COMM_DST.column_or(cols, absent=-1, bad=-1)
        _, tag_v, _ = COMM_TAG.column_or(cols, absent=0, bad=0)
        _, size_v, _ = COMM_SIZE.column_or(cols, absent=-1, bad=-1)
        is_send = cols.types[pos] == NodeType.COMM_SEND_NODE
        # own side: a send's comm_src, a recv's comm_dst; far side: the peer it pairs with
        own_has = np.where(is_send, src_has[pos], dst_has[pos])
        own_ok = np.where(is_send, src_ok[pos], dst_ok[pos])
        own_v = np.where(is_send, src_v[pos], dst_v[pos])
        wrong = own_has & (~own_ok | (own_v != rank))
        for j in np.flatnonzero(wrong).tolist():
            issues.append(_own_side_issue(trace, cols, rank, int(pos[j]), bool(is_send[j])))
        far_ok = np.where(is_send, (dst_ok & dst_has)[pos], (src_ok & src_has)[pos])
        far_v = np.where(is_send, dst_v[pos], src_v[pos])
        ids = cols.ids[pos]
        rows = zip(is_send[far_ok].tolist(), far_v[far_ok].tolist(), tag_v[pos][far_ok].tolist(),
                   ids[far_ok].tolist(), size_v[pos][far_ok].tolist())  # fmt: skip
        for send, peer, tag, nid, size in rows:  # in file order, as the k-th send pairs with the k-th recv
            if send:
                sends.setdefault((rank, peer, tag), []).append((rank, nid, size))
            else:
                recvs.setdefault((peer, rank, tag), []).append((rank, nid, size))
    for key in sorted(set(sends) | set(recvs)):
        src, dst, tag = key
        s, r = sends.get(key, []), recvs.get(key, [])
        issues.extend(_size_issues(traceset, s, r, tag))
        if len(s) == len(r):
            continue
        if len(s) > len(r):
            rank, nid, _ = s[len(r)]
            msg = (
                f"send to rank {dst} with tag {tag} has no matching recv: rank {src} sends {len(s)} such "
                f"messages, rank {dst} posts {len(r)} recvs from rank {src} with that tag"
            )
        else:
            rank, nid, _ = r[len(s)]
            msg = (
                f"recv from rank {src} with tag {tag} has no matching send: rank {dst} posts {len(r)} such "
                f"recvs, rank {src} sends {len(s)} messages to rank {dst} with that tag"
            )
        issues.append(Issue("p2p-match", ERROR, msg, traceset[rank].path, rank, nid))
    return issues


def _own_side_issue(trace, cols, rank: int, p: int, send: bool) -> Issue:  # type: ignore[no-untyped-def]
    """``p2p-attrs``: a send whose ``comm_src`` (a recv whose ``comm_dst``) is not its own rank."""
    key = COMM_SRC if send else COMM_DST
    has, values, ok = key.column_or(cols, absent=-1, bad=-1)
    shown = values[p] if ok[p] else key.raw(cols)[1][p]
    what = "send" if send else "recv"
    return Issue("p2p-attrs", ERROR, f"{what} has {key} {shown}, but it is on rank {rank}", trace.path, rank,
                 int(cols.ids[p]))  # fmt: skip


def _size_issues(
    traceset: "TraceSet", sends: list[tuple[int, int, int]], recvs: list[tuple[int, int, int]], tag: int
) -> list[Issue]:
    """The first send/recv pair of one (src, dst, tag) whose ``comm_size`` differ (both known): the replay
    would move one size from one side and another on the other (a 1 KiB send paired with a 1 GiB recv passed)."""
    from tracekit.fmt import fmt_bytes

    for (src, send_id, sent), (dst, recv_id, posted) in zip(sends, recvs):
        if sent >= 0 and posted >= 0 and sent != posted:
            msg = (
                f"send of {fmt_bytes(sent)} ({sent:,} B) to rank {dst} with tag {tag} pairs with recv node "
                f"{recv_id} on rank {dst} of {fmt_bytes(posted)} ({posted:,} B): the sizes must be equal"
            )
            return [Issue("p2p-size", ERROR, msg, traceset[src].path, src, send_id)]
    return []


def find_problems(traceset: "TraceSet") -> list[Issue]:
    """All errors of the trace-level checks (see module doc), without raising them.

    Raises:
        TraceFormatError: a trace's records cannot be decoded (not a finding: nothing can be checked).
    """
    report = validate_traceset(traceset)
    issues = list(report.errors)
    issues.extend(p2p_issues(traceset))
    return issues


def check_replay_inputs(traceset: "TraceSet", spec: "HardwareSpec") -> None:
    """Run every up-front check.

    Raises:
        SpecError: the spec cannot have the trace set's number of ranks.
        ReplayError: the trace set is empty.
        ReplayCheckError: any other problem (all listed in ``issues``).
    """
    check_spec_size(traceset, spec)
    issues = find_problems(traceset)
    if issues:
        raise ReplayCheckError(issues)
