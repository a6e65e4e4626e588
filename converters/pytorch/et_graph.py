"""A rank's Chakra graph under construction (:mod:`.et_convert`): the nodes, their order keys and the edge rule.

Every node gets an order key (host: its global start position; device: its launcher's position, then time), and
:meth:`GraphDraft.add_dep` keeps an edge only from a smaller to a larger key, so the graph is acyclic by
construction; the edges it refuses are counted in ``dropped``. :mod:`.et_host_deps` and :mod:`.et_device` add
edges and nodes through it.
"""

from __future__ import annotations

from tracekit.model import NodeDraft

from tracekit.converters.pytorch.collectives import CommPlan
from tracekit.converters.pytorch.et_reader import EtOp, EtTrace
from tracekit.converters.pytorch.kineto_reader import KinetoTrace
from tracekit.converters.pytorch.linker import Linkage


class GraphDraft:
    """The nodes built so far (``nodes``: id -> draft; ``order``: id -> order key) and the conversion's inputs.

    Args:
        et: the rank's ET.
        plan: its communication plan (:func:`.collectives.plan_comms`).
        rank: global rank, or None.
        linkage: the ET-Kineto linkage (:func:`.linker.link`), or None without Kineto.
        groups: process groups, name -> ranks.
        kineto: the rank's Kineto trace, or None.
    """

    def __init__(
        self,
        et: EtTrace,
        plan: CommPlan,
        rank: int | None,
        linkage: Linkage | None,
        groups: dict[str, tuple[int, ...]],
        kineto: KinetoTrace | None,
    ) -> None:
        self.et = et
        self.plan = plan
        self.rank = rank
        self.link = linkage
        self.groups = groups
        self.kineto = kineto
        self.world_size: int | None = None  # ranks of the capture (the default group's size), when known
        self.nodes: dict[int, NodeDraft] = {}
        self.order: dict[int, tuple] = {}  # node id -> order key
        self.dropped = 0
        self.issue_of: dict[int, int] = {}  # COMM node id -> its host issue node (et_convert issue_node)
        self.comm_launch_end: dict[int, int] = {}  # COMM node id -> end (ns) of its kernel's launch call
        self.work_top: dict = {}  # ET id -> its outermost enclosing work op on its Kineto thread (et_convert)
        self.uncovered_ns: dict = {}  # ET id -> uncovered time before it on its Kineto thread (et_convert)
        self.pending_joins: list[tuple[int, int]] = []  # (joiner, device COMM node) for et_host_deps.device_joins
        self.next_id = max(et.by_id) + 1

    def add_dep(self, dst: int, src: int) -> None:
        """Add ``src -> dst`` if both exist and ``src``'s order key is smaller; else count it in ``dropped``."""
        if src == dst or src not in self.nodes or dst not in self.nodes:
            return
        if self.order[src] < self.order[dst]:
            deps = self.nodes[dst].data_deps
            if src not in deps:
                deps.append(src)
        else:
            self.dropped += 1

    def fresh_id(self) -> int:
        """A node id no ET op uses (above the ET's largest id)."""
        nid = self.next_id
        self.next_id += 1
        return nid

    def host_times(self, op: EtOp) -> tuple[int, int] | None:
        """``(start_ns, duration_ns)`` of the Kineto event linked to ``op`` (its inclusive span), or None."""
        if self.link is None:
            return None
        e = self.link.host.get(op.id)
        return (e.start_ns, e.duration_ns) if e is not None else None
