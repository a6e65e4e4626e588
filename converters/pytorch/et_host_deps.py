"""Host-side dependencies of a rank's graph (:mod:`.et_convert`, module docstring "Dependencies").

Ops on one ET thread keep their start order, except that an asynchronous collective branches off its thread;
it is joined by the op that waits for it (a ``record_param_comms`` wait with its sequence number) or else by the
first later op reading one of its tensors' storage. Across threads an edge is drawn only where the trace shows a
hand-over (consecutive ops in start order, the first ending before the second starts).
"""

from __future__ import annotations

from typing import Any

from tracekit.converters.pytorch.collectives import CommOp
from tracekit.converters.pytorch.et_graph import GraphDraft
from tracekit.converters.pytorch.et_reader import EtOp


def _storages(value: Any, out: set[int]) -> None:
    if isinstance(value, list):
        if len(value) >= 5 and all(isinstance(x, int) and not isinstance(x, bool) for x in value[:5]):
            if value[1] != 0 or value[3] != 0:
                out.add(value[1])
            return
        for v in value:
            _storages(v, out)


class HostDeps(GraphDraft):
    """Adds the host-side edges (thread chains, cross-thread hand-overs, joins of asynchronous collectives)."""

    def thread_chains(self, ops: list[EtOp], comms: dict[int, CommOp]) -> None:
        """Chain each ET thread's nodes in order; a non-blocking collective does not hold up the next op."""
        last: dict[int, int] = {}
        for op in ops:
            if op.id not in self.nodes:
                continue
            prev = last.get(op.tid)
            issue = self.issue_of.get(op.id)
            if issue is not None:  # the thread's part of an asynchronous collective (et_convert.issue_node)
                if prev is not None:
                    self.add_dep(issue, prev)
                self.add_dep(op.id, issue)
                last[op.tid] = issue
                continue
            if prev is not None:
                self.add_dep(op.id, prev)
            comm = comms.get(op.id)
            if comm is None or comm.blocks_host:
                last[op.tid] = op.id

    def cross_thread(self, ops: list[EtOp], comms: dict[int, CommOp]) -> None:
        """Edges between consecutive ops on different threads when unlinked or the first ended before the next.

        With Kineto times a hand-over goes to an op that is top-level work on its thread (a nested op's
        thread is inside its parent, busy, not waiting) from an op whose outermost enclosing work ended
        before it started: the main thread's CPU ``AccumulateGrad`` running while the autograd thread is
        inside ``AddmmBackward0`` interleaves with it in ET order but hands nothing over.
        """
        prev: EtOp | None = None
        for op in ops:
            if op.id not in self.nodes:
                continue
            comm = comms.get(op.id)
            if prev is not None and prev.tid != op.tid:
                a, b = self.host_times(prev), self.host_times(op)
                if a is not None and b is not None and self.work_top.get(op.id, op.id) == op.id:
                    top = self.link.host.get(self.work_top.get(prev.id, prev.id)) if self.link else None
                    if top is not None:
                        a = (top.start_ns, top.duration_ns)
                if a is None or b is None or self._hands_over(a[0] + a[1], op.id, b[0]):
                    self.add_dep(self.issue_of.get(op.id, op.id), self.issue_of.get(prev.id, prev.id))
            if comm is None or comm.blocks_host or op.id in self.issue_of:
                prev = op

    def _hands_over(self, end_ns: int, op_id: int, start_ns: int) -> bool:
        """An op ending at ``end_ns`` can hand over to ``op_id`` (top-level work starting at ``start_ns``) when
        it ended while ``op_id``'s thread sat idle before it (:attr:`.host_timing.ThreadTiming.uncovered_lead_ns`).
        """
        if self.work_top.get(op_id, op_id) != op_id:
            return False
        idle_from = start_ns - self.uncovered_ns.get(op_id, start_ns)
        return idle_from <= end_ns <= start_ns

    def joins(self, ops: list[EtOp], comms: dict[int, CommOp], position: dict[int, int]) -> None:
        """Join asynchronous collectives where the trace shows who waits for them."""
        pending = [c for c in comms.values() if not c.blocks_host]
        if not pending:
            return
        by_seq = {c.seq: c for c in pending if c.seq is not None}
        joined: set[int] = set()
        for wait_id, seq in self.plan.waits.items():
            c = by_seq.get(seq)
            if c is not None and wait_id in self.nodes:
                self._join(wait_id, c)
                joined.add(c.node_id)
        # first later reader of the collective's storage
        reader: dict[int, list[EtOp]] = {}
        for op in ops:
            if op.id in self.nodes and op.id not in comms:
                found: set[int] = set()
                _storages(op.inputs.values, found)
                for s in found:
                    reader.setdefault(s, []).append(op)
        for c in pending:
            if c.node_id in joined:
                continue
            storages: set[int] = set()
            head = self.et.by_id[c.node_id]
            _storages(head.inputs.values, storages)
            _storages(head.outputs.values, storages)
            best = None
            for s in storages:
                for op in reader.get(s, ()):
                    if position[op.id] > position[c.node_id] and self.et.by_id[op.id].parent != c.node_id:
                        if best is None or position[op.id] < position[best.id]:
                            best = op
                        break
            if best is not None:
                self._join(best.id, c)

    def _join(self, joiner: int, comm: CommOp) -> None:
        """``joiner`` waits for ``comm``: on the host for CPU data, else deferred to :meth:`device_joins`."""
        if self.link is not None and comm.device and not comm.device.startswith("cpu"):
            self.pending_joins.append((joiner, comm.node_id))
        else:
            self.add_dep(joiner, comm.node_id)

    def device_joins(self, position: dict[int, int]) -> None:
        """Joins of device collectives: the joiner's thread's next device op waits, not the host.

        A ``wait()`` on an NCCL work (or a later op reading its tensors) makes the *stream* of the reader wait
        for the collective (``cudaStreamWaitEvent``); the host thread goes on enqueueing. So the first device
        op launched by the joiner or a later op of its thread depends on the COMM node. A collective whose
        kernel was not linked (no stream) keeps the host join.
        """
        if not self.pending_joins:
            return
        launched: dict[int, list[tuple[tuple, int]]] = {}
        for nid, key in self.order.items():
            if key[1] == 1:
                launcher = self.nodes[nid].ctrl_deps[0] if self.nodes[nid].ctrl_deps else None
                if launcher in self.et.by_id:
                    launched.setdefault(self.et.by_id[launcher].tid, []).append((key, nid))
        for lane in launched.values():
            lane.sort()
        for joiner, comm_id in self.pending_joins:
            if self.nodes[comm_id].stream is None:
                self.add_dep(joiner, comm_id)
                continue
            lane = launched.get(self.et.by_id[joiner].tid, [])
            first = next((nid for key, nid in lane if key[0] >= position[joiner]), None)
            if first is not None:
                self.add_dep(first, comm_id)
