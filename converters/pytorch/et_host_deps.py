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
            if prev is not None:
                self.add_dep(op.id, prev)
            comm = comms.get(op.id)
            if comm is None or comm.blocks_host:
                last[op.tid] = op.id

    def cross_thread(self, ops: list[EtOp], comms: dict[int, CommOp]) -> None:
        """Edges between consecutive ops on different threads when unlinked or the first ended before the next."""
        prev: EtOp | None = None
        for op in ops:
            if op.id not in self.nodes:
                continue
            comm = comms.get(op.id)
            if prev is not None and prev.tid != op.tid:
                a, b = self.host_times(prev), self.host_times(op)
                if a is None or b is None or a[0] + a[1] <= b[0]:
                    self.add_dep(op.id, prev.id)
            if comm is None or comm.blocks_host:
                prev = op

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
                self.add_dep(wait_id, c.node_id)
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
                self.add_dep(best.id, c.node_id)
