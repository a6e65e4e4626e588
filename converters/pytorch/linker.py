"""Linking one rank's Execution Trace to its Kineto trace.

The ET knows the operator graph (ids, call stack, tensors) but no times; Kineto
knows times, threads and GPU activity.  :func:`link` pairs each ET host op with
the Kineto CPU event (``cpu_op`` or ``user_annotation``) that recorded the same
RecordFunction, then attaches GPU activity to the ET op that launched it.

Host join, first method that works:

1. ``rf_id`` == Kineto ``Record function id`` (PyTorch >= 2.1 writes it);
2. ``rf_id`` == Kineto ``External id`` (older captures, e.g. HTA's samples,
   where both counters advanced together);
3. when the ids do not join -- Kineto spanning many iterations while the ET
   holds one, or the two files coming from different runs of one program --
   the per-thread sequences of operator names are aligned (a greedy diff
   with bounded look-ahead, anchored by k-gram votes; linear in practice).

Pairs only count when the names agree.  If Kineto carries ``Record function
id`` values and none of them joins the ET's ``rf_id`` range, the files come
from different profiler steps: that is an error rather than a guess.

Device join: a kernel / memcpy / memset is launched by the runtime call with
the same ``correlation`` (one ``cudaGraphLaunch`` may launch many); the
launching host op is the innermost Kineto CPU event enclosing that runtime
call on its thread, lifted to the nearest ancestor that is linked to the ET.
ROCm kernels without ``correlation`` use their ``External id`` instead.

The :class:`LinkReport` says which method was used and how much linked.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tracekit.errors import ConversionError

from tracekit.converters.pytorch.device_graph import DeviceGraph, build_device_graph
from tracekit.converters.pytorch.et_reader import EtOp, EtTrace
from tracekit.converters.pytorch.kineto_reader import KinetoEvent, KinetoTrace

HOST_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
LAUNCH_CATEGORIES = frozenset(
    {
        "cuda_runtime",
        "cuda_driver",
        "hip_runtime",
        "hip_driver",
        "runtime",
        "mtia_runtime",
        "xpu_runtime",
        "privateuse1_runtime",
    }
)
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})

_KGRAM = 4  # length of the k-grams that anchor an alignment
_LOOKAHEAD = 24  # how far the greedy diff looks for a resynchronisation point
_AGREE = 3  # names that must agree after a resynchronisation point
_REANCHOR = 2048  # how far ahead in the ET a re-anchoring k-gram is searched


def is_et_root(op: EtOp) -> bool:
    """ET bookkeeping nodes (process/thread roots, process-group declaration) that Kineto never records."""
    return op.is_root or op.name.startswith("[pytorch|profiler|execution_") or "process_group:init" in op.name


@dataclass(frozen=True)
class LinkReport:
    """How an ET and a Kineto trace were joined.

    Attributes:
        method: ``rf_id``, ``external_id``, ``sequence`` or ``none``.
        host_ops: ET ops that could link (roots excluded).
        host_linked: of those, linked to a Kineto event.
        aten_ops, aten_linked: the same for ``aten::*`` ops.
        aten_with_kernels: linked aten ops with at least one device event attached
            to them or their descendants.
        device_events: device events (kernels, memcpy, memset) in the Kineto trace.
        device_attached: device events attached to a linked ET op.
        kernels_attached: of those, kernels.
    """

    method: str
    host_ops: int
    host_linked: int
    aten_ops: int = 0
    aten_linked: int = 0
    aten_with_kernels: int = 0
    device_events: int = 0
    device_attached: int = 0
    kernels_attached: int = 0

    @property
    def host_rate(self) -> float:
        """Fraction of linkable ET host ops linked, ``host_linked / host_ops`` in [0, 1] (0 when there are none)."""
        return self.host_linked / self.host_ops if self.host_ops else 0.0

    @property
    def aten_rate(self) -> float:
        """Fraction of ``aten::*`` ET ops linked, ``aten_linked / aten_ops`` in [0, 1] (0 when there are none)."""
        return self.aten_linked / self.aten_ops if self.aten_ops else 0.0

    def summary(self) -> str:
        """One line for people, e.g. ``rf_id: 165/166 host ops (99.4%), 0 kernels``."""
        text = f"{self.method}: {self.host_linked}/{self.host_ops} host ops ({100 * self.host_rate:.1f}%)"
        if self.aten_ops:
            text += f", aten {self.aten_linked}/{self.aten_ops} ({100 * self.aten_rate:.1f}%)"
        text += f", {self.kernels_attached} kernels attached"
        if self.device_events:
            text += f" ({self.device_attached}/{self.device_events} device events)"
        return text


@dataclass
class Linkage:
    """Result of :func:`link`.

    Attributes:
        report: the :class:`LinkReport`.
        host: ET id -> linked Kineto host event.
        device: ET id -> device events it launched directly, in start order.
        launch_of: Kineto index of a device event -> the runtime event that launched it.
        device_graph: launch, stream and synchronization structure of the Kineto trace.
        host_of_call: Kineto index of a runtime call -> innermost enclosing host event.
        host_parent: Kineto index of a host event -> enclosing host event.
    """

    report: LinkReport
    host: dict[int, KinetoEvent] = field(default_factory=dict)
    device: dict[int, list[KinetoEvent]] = field(default_factory=dict)
    launch_of: dict[int, KinetoEvent] = field(default_factory=dict)
    device_graph: DeviceGraph | None = None
    host_of_call: dict[int, KinetoEvent] = field(default_factory=dict)
    host_parent: dict[int, KinetoEvent] = field(default_factory=dict)


# ----------------------------------------------------------------------------- id joins
def _join_by(ops: list[EtOp], host: list[KinetoEvent], key: str) -> dict[int, KinetoEvent]:
    index: dict[int, KinetoEvent] = {}
    for e in host:
        k = getattr(e, key)
        if k is not None:
            index.setdefault(k, e)
    out: dict[int, KinetoEvent] = {}
    for op in ops:
        hit = index.get(op.rf_id)
        if hit is not None and hit.name == op.name:
            out[op.id] = hit
    return out


# ----------------------------------------------------------------------------- alignment
def _kgrams(seq: list[int]) -> dict[tuple[int, ...], list[int]]:
    index: dict[tuple[int, ...], list[int]] = {}
    for p in range(len(seq) - _KGRAM + 1):
        index.setdefault(tuple(seq[p : p + _KGRAM]), []).append(p)
    return index


def _greedy_align(
    a: list[int], b: list[int], offset: int, budget: int, b_grams: dict[tuple[int, ...], list[int]] | None = None
) -> list[tuple[int, int]]:
    """Pairs (i, j) with a[i] == b[j], walking both sequences from b-offset ``offset``.

    On a mismatch, looks up to ``_LOOKAHEAD`` steps ahead in both sequences for
    the nearest point where ``_AGREE`` names agree.  If there is none (a long
    insertion on one side), re-anchors at the next k-gram of ``a`` that occurs
    in ``b`` at or after the current position (``b_grams`` index); failing
    that, skips one element of ``a``.  Stops after ``budget`` re-anchorings.
    Each step moves forward in both sequences, so pairs are increasing.
    """
    i, j = (0, offset) if offset >= 0 else (-offset, 0)
    na, nb = len(a), len(b)
    pairs: list[tuple[int, int]] = []
    misses = 0
    while i < na and j < nb:
        if a[i] == b[j]:
            pairs.append((i, j))
            i += 1
            j += 1
            continue
        found = False
        for d in range(1, _LOOKAHEAD + 1):
            for di in range(d + 1):
                ii, jj = i + di, j + d - di
                if ii >= na or jj >= nb or a[ii] != b[jj]:
                    continue
                k = 1
                while k < _AGREE and ii + k < na and jj + k < nb and a[ii + k] == b[jj + k]:
                    k += 1
                if k == _AGREE or ii + k == na or jj + k == nb:
                    i, j, found = ii, jj, True
                    break
            if found:
                break
        if found:
            continue
        misses += 1
        if misses > budget:
            break
        if b_grams is not None:
            limit = j + 2 * (na - i) + 4 * _LOOKAHEAD
            for ii in range(i + 1, min(na - _KGRAM + 1, i + _REANCHOR)):
                hits = b_grams.get(tuple(a[ii : ii + _KGRAM]))
                if not hits:
                    continue
                p = bisect_left(hits, j)
                if p < len(hits) and hits[p] <= limit:
                    i, j, found = ii, hits[p], True
                    break
        if not found:
            i += 1
    return pairs


def _align(ops: list[EtOp], host: list[KinetoEvent]) -> dict[int, KinetoEvent]:
    """Sequence alignment of ET threads onto Kineto threads (see the module docstring)."""
    vocab: dict[str, int] = {}

    def code(name: str) -> int:
        """A small integer per distinct operator name (shared by ET and Kineto sequences), assigned on first use."""
        return vocab.setdefault(name, len(vocab))

    et_threads: dict[int, list[EtOp]] = {}
    for op in ops:
        et_threads.setdefault(op.tid, []).append(op)
    k_threads: dict[Any, list[KinetoEvent]] = {}
    for e in host:
        k_threads.setdefault((e.pid, e.tid), []).append(e)
    k_seqs = {}
    for key, evs in k_threads.items():
        evs.sort(key=lambda e: (e.start_ns, -e.duration_ns, e.index))
        k_seqs[key] = [code(e.name) for e in evs]
    k_index = {key: _kgrams(seq) for key, seq in k_seqs.items()}

    out: dict[int, KinetoEvent] = {}
    used: set[Any] = set()
    for _tid, et_ops in sorted(et_threads.items(), key=lambda kv: -len(kv[1])):
        a = [code(op.name) for op in et_ops]
        votes: Counter = Counter()
        step = max(1, len(a) // 64)
        for p in range(0, max(1, len(a) - _KGRAM + 1), step):
            gram = tuple(a[p : p + _KGRAM])
            for key, index in k_index.items():
                if key in used:
                    continue
                for q in index.get(gram, ())[:256]:
                    votes[(key, q - p)] += 1
        best: list[tuple[int, int]] = []
        best_key = None
        for (key, offset), _ in votes.most_common(8):
            pairs = _greedy_align(a, k_seqs[key], offset, budget=max(64, len(a) // 4), b_grams=k_index[key])
            if len(pairs) > len(best):
                best, best_key = pairs, key
        if best_key is None:
            continue
        used.add(best_key)
        evs = k_threads[best_key]
        for i, j in best:
            out[et_ops[i].id] = evs[j]
    return out


# ----------------------------------------------------------------------------- device side
def _innermost_host(
    host_by_thread: dict[Any, list[KinetoEvent]], events: list[KinetoEvent]
) -> tuple[dict[int, KinetoEvent], dict[int, KinetoEvent]]:
    """(event index -> innermost enclosing host event, host index -> enclosing host event)."""
    enclosing: dict[int, KinetoEvent] = {}
    parent: dict[int, KinetoEvent] = {}
    by_thread: dict[Any, list[KinetoEvent]] = {}
    for e in events:
        by_thread.setdefault((e.pid, e.tid), []).append(e)
    for key in set(by_thread) | set(host_by_thread):
        hs = host_by_thread.get(key, [])
        merged = [(h.start_ns, -h.duration_ns, 0, h.index, h) for h in hs]
        merged += [(e.start_ns, -e.duration_ns, 1, e.index, e) for e in by_thread.get(key, [])]
        merged.sort(key=lambda t: t[:4])
        stack: list[KinetoEvent] = []
        for start, _, is_event, _, ev in merged:
            while (
                stack and stack[-1].end_ns <= start and not (stack[-1].duration_ns == 0 and stack[-1].start_ns == start)
            ):
                stack.pop()
            if is_event:
                if stack:
                    enclosing[ev.index] = stack[-1]
            else:
                if stack:
                    parent[ev.index] = stack[-1]
                stack.append(ev)
    return enclosing, parent


def _join_host(
    et: EtTrace, ops: list[EtOp], host: list[KinetoEvent], kpath: str, allow_unlinked: bool
) -> tuple[str, dict[int, KinetoEvent]]:
    """``(method, ET id -> Kineto host event)`` by the first join that pairs anything (module docstring).

    Raises:
        ConversionError: Kineto carries ``Record function id`` values and none joins the ET (different profiler
            steps), unless ``allow_unlinked``.
    """
    method = "none"
    pairs: dict[int, KinetoEvent] = {}
    by_rf = _join_by(ops, host, "rf_id")
    has_rf = any(e.rf_id is not None for e in host)
    if by_rf:
        method, pairs = "rf_id", by_rf
    elif has_rf and not allow_unlinked:
        et_ids = [op.rf_id for op in ops] or [0]
        k_ids = [e.rf_id for e in host if e.rf_id is not None]
        raise ConversionError(
            f"no ET rf_id (range {min(et_ids)}..{max(et_ids)}) joins a Kineto 'Record function id' "
            f"(range {min(k_ids)}..{max(k_ids)} in {os.path.basename(kpath)}): the two files come from "
            f"different profiler steps; capture both in the same step (tracekit.capture)",
            path=et.path,
        )
    if not pairs:
        by_ext = _join_by(ops, host, "external_id")
        if len(by_ext) >= 0.5 * len(ops) and by_ext:
            method, pairs = "external_id", by_ext
    if not pairs and host:
        aligned = _align(ops, host)
        if aligned:
            method, pairs = "sequence", aligned
    return method, pairs


@dataclass(frozen=True)
class _DeviceJoin:
    """Device events attached to linked ET ops (:func:`_join_device`); fields as :class:`Linkage`'s, plus counts."""

    device: dict[int, list[KinetoEvent]]
    launch_of: dict[int, KinetoEvent]
    graph: DeviceGraph
    host_of_call: dict[int, KinetoEvent]
    host_parent: dict[int, KinetoEvent]
    events: int  # device events in the Kineto trace
    attached: int  # of those, attached to a linked ET op
    kernels: int  # of those, kernels


def _join_device(kineto: KinetoTrace, host: list[KinetoEvent], pairs: dict[int, KinetoEvent]) -> _DeviceJoin:
    """Device activity -> launching runtime event -> innermost host event -> linked ET op (module docstring)."""
    host_by_thread: dict[Any, list[KinetoEvent]] = {}
    for e in host:
        host_by_thread.setdefault((e.pid, e.tid), []).append(e)
    dgraph = build_device_graph(kineto)
    launches = [e for e in kineto.events if e.category in LAUNCH_CATEGORIES]
    devices = [e for e in kineto.events if e.category in DEVICE_CATEGORIES]
    enclosing, kparent = _innermost_host(host_by_thread, launches)
    by_index = {e.index: e for e in launches}
    et_of_host = {e.index: et_id for et_id, e in pairs.items()}
    host_by_ext = {e.external_id: e for e in host if e.external_id is not None}
    device: dict[int, list[KinetoEvent]] = {}
    launch_of: dict[int, KinetoEvent] = {}
    attached = kernels = 0
    for d in devices:
        owner = None
        call = dgraph.launch_of.get(d.index)
        r = by_index.get(call) if call is not None else None
        if r is not None:
            launch_of[d.index] = r
            owner = enclosing.get(r.index)
        elif d.external_id is not None:  # ROCm: no correlation, External id names the op
            owner = host_by_ext.get(d.external_id)
        hops = 0
        while owner is not None and owner.index not in et_of_host and hops < 256:
            owner = kparent.get(owner.index)
            hops += 1
        if owner is None or owner.index not in et_of_host:
            continue
        device.setdefault(et_of_host[owner.index], []).append(d)
        attached += 1
        kernels += d.category == "kernel"
    for evs in device.values():
        evs.sort(key=lambda e: (e.start_ns, e.index))
    return _DeviceJoin(device, launch_of, dgraph, dict(enclosing), kparent, len(devices), attached, kernels)


def link(et: EtTrace, kineto: KinetoTrace, *, allow_unlinked: bool = False) -> Linkage:
    """Link one rank's ET and Kineto trace.

    Args:
        et: the rank's parsed Execution Trace.
        kineto: the same rank's parsed Kineto trace (times in ns).
        allow_unlinked: return a (possibly empty) linkage instead of raising.

    Returns:
        :class:`Linkage`: ET id -> Kineto host event by the first join method that pairs anything (``rf_id``,
        ``external_id`` when it pairs at least half of the ET's ops, else name-sequence alignment), device events
        attached through their launching runtime call (``correlation``; ROCm: ``External id``), and the device
        graph of :func:`.device_graph.build_device_graph`.

    Raises:
        ConversionError: the Kineto trace has ``Record function id`` values and
            none joins the ET (different profiler steps), or nothing links at
            all -- unless ``allow_unlinked``.
    """
    ops = [op for op in et.ops if not is_et_root(op)]
    host = [e for e in kineto.events if e.category in HOST_CATEGORIES]
    kpath = kineto.path or "kineto"
    method, pairs = _join_host(et, ops, host, kpath, allow_unlinked)
    dev = _join_device(kineto, host, pairs)
    aten = [op for op in ops if op.name.startswith("aten::")]
    with_kernels = _with_device_below(et, dev.device)
    report = LinkReport(
        method=method,
        host_ops=len(ops),
        host_linked=len(pairs),
        aten_ops=len(aten),
        aten_linked=sum(op.id in pairs for op in aten),
        aten_with_kernels=sum(op.id in pairs and op.id in with_kernels for op in aten),
        device_events=dev.events,
        device_attached=dev.attached,
        kernels_attached=dev.kernels,
    )
    if not pairs and not allow_unlinked:
        why = "Kineto has no CPU op events" if not host else "no ET op matches a Kineto op by id or name order"
        raise ConversionError(
            f"link rate is zero ({why}; {os.path.basename(kpath)}); pass --allow-unlinked "
            f"to convert the ET without timing",
            path=et.path,
        )
    return Linkage(
        report=report,
        host=pairs,
        device=dev.device,
        launch_of=dev.launch_of,
        device_graph=dev.graph,
        host_of_call=dev.host_of_call,
        host_parent=dev.host_parent,
    )


def _with_device_below(et: EtTrace, device: dict[int, list[KinetoEvent]]) -> set[int]:
    """ET ids that have device events attached to themselves or a descendant."""
    marked: set[int] = set()
    for et_id in device:
        node = et.by_id.get(et_id)
        hops = 0
        while node is not None and node.id not in marked and hops < 512:
            marked.add(node.id)
            if node.is_root:
                break
            node = et.by_id.get(node.parent)
            hops += 1
    return marked
