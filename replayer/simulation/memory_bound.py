"""The replay's memory bound, stated and enforced up front (issue 34 item 5).

Before a replay reads every rank (unfolded) or proves a folding, it estimates the memory the rest will take and
refuses with :class:`MemoryBoundError` (the estimate, what it rests on, the bound, the option that raises it) when
that exceeds the bound: ``ReplayOptions.memory_bound_gb`` (``tracekit replay --memory-bound GB``), by default the
memory available when the replay starts.  The kernel's OOM killer, which used to end such jobs minutes in, gives no reason.

Estimates (measured on this machine with generated LLM jobs, ``tracekit replay --hw dgx-h100``, peak RSS):

- every rank simulated: :data:`BASE_BYTES` + :data:`UNFOLDED_BYTES_PER_FILE_BYTE` x the encoded trace bytes
  (64 and 512 ranks of gpt3-1.3b tp 2 pp 4: 15.5 MB / 94 MB peak and 150.5 MB / 449 MB: 2.63 bytes per byte);
- folded: the base, 3 bytes per byte of the representatives' traces, and :data:`FOLDED_BYTES_PER_MEMBER_COMM` per
  communication node of every rank (the fold proof's per-instance tables: GPT-3 175B tp 4 pp 8 vp 12 on 2,048
  ranks, 12.6 M communication nodes, 1.71 GB peak: ~120 B each).
"""

from __future__ import annotations

import os
from typing import Any, Iterable

from tracekit.errors import TracekitError

__all__ = ["MemoryBoundError", "bound_bytes", "check_folded", "check_unfolded", "encoded_bytes"]

#: the interpreter with tracekit's modules and kernels loaded (peak RSS of a 4-rank replay)
BASE_BYTES = 90_000_000
#: peak memory per byte of encoded trace when every rank is simulated (module doc)
UNFOLDED_BYTES_PER_FILE_BYTE = 2.7
#: peak memory per communication node of the whole job in a folded replay (module doc)
FOLDED_BYTES_PER_MEMBER_COMM = 130
#: more per communication node when the folded result is expanded to every collective instance (--per-rank,
#: --html-out, --timeline-out, --with-schedule): Llama 3 405B tp 8 pp 16 dp 64, 9,388,032 communication nodes,
#: replay --per-rank 2,009 MB peak against 570 MB for the summary (153 B each; writing that form with -o adds more)
EXPANDED_BYTES_PER_MEMBER_COMM = 160


class MemoryBoundError(TracekitError):
    """The replay would need more memory than the bound allows (the message gives both and the option)."""


def bound_bytes(memory_bound_gb: float | None) -> int:
    """The bound in bytes: ``memory_bound_gb`` GB (10^9 bytes); when None, the memory available now (Linux
    ``MemAvailable``: what can be allocated without swapping, other processes' use excluded), else the machine's
    physical memory."""
    if memory_bound_gb is not None:
        return int(memory_bound_gb * 1e9)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - no sysconf: no bound
        return 2**62


def encoded_bytes(source: Any) -> int | None:
    """The encoded size of every rank of ``source`` (a :class:`~tracekit.sets.classset.ClassSet`: each class file once
    per member; else what :func:`tracekit.io.trace_paths` finds); None when it names no readable files."""
    from tracekit.sets.classset import ClassSet

    try:
        if isinstance(source, ClassSet):
            return sum(os.path.getsize(c.file) * len(c.ranks) for c in source.classes)
        from tracekit.io import trace_paths

        return sum(os.path.getsize(p) for _, p in trace_paths(source))
    except (OSError, TracekitError):
        return None  # the read that follows reports it


def _amount(n_bytes: int) -> str:
    """``12.6 GB`` from 1 GB up, else ``450 MB`` (a bound of 0.001 GB read '0.0 GB' with one decimal of GB)."""
    return f"{n_bytes / 1e9:.1f} GB" if n_bytes >= 1e9 else f"{n_bytes / 1e6:,.0f} MB"


def _refuse(what: str, estimate: int, bound: int, basis: str) -> None:
    if estimate > bound:
        raise MemoryBoundError(
            f"{what} needs about {_amount(estimate)} ({basis}); the memory bound is {_amount(bound)} "
            f"(--memory-bound GB to raise it)"
        )


def check_unfolded(source: Any, ranks: int | None, memory_bound_gb: float | None) -> None:
    """Refuse an unfolded replay of ``source`` whose estimate (module doc) exceeds the bound.

    Raises:
        MemoryBoundError: the estimate and the bound.
    """
    size = encoded_bytes(source)
    if size is None:
        return
    estimate = BASE_BYTES + int(UNFOLDED_BYTES_PER_FILE_BYTE * size)
    ranks_text = f" on {ranks:,} ranks" if ranks else ""
    basis = f"{size / 1e6:,.0f} MB of traces{ranks_text} x {UNFOLDED_BYTES_PER_FILE_BYTE} when every rank is simulated"
    _refuse("replaying every rank", estimate, bound_bytes(memory_bound_gb), basis)


def check_folded(
    rep_files: Iterable[str], comm_nodes: int, memory_bound_gb: float | None, *, expanded: bool = False
) -> None:
    """Refuse a folded replay whose estimate (module doc) exceeds the bound: ``rep_files`` the representatives'
    traces, ``comm_nodes`` the communication nodes of every rank; ``expanded``: the result lists every collective
    instance (not ``ReplayOptions.summary``), :data:`EXPANDED_BYTES_PER_MEMBER_COMM` more per node.

    Raises:
        MemoryBoundError: the estimate and the bound.
    """
    size = 0
    for path in rep_files:
        try:
            size += os.path.getsize(path)
        except (OSError, TypeError, ValueError):
            continue  # in memory or not a file: not counted
    per_node = FOLDED_BYTES_PER_MEMBER_COMM + (EXPANDED_BYTES_PER_MEMBER_COMM if expanded else 0)
    estimate = BASE_BYTES + 3 * size + per_node * comm_nodes
    why = "to prove the folding and list every collective instance" if expanded else "to prove the folding"
    basis = f"{comm_nodes:,} communication nodes x {per_node} B {why}, {size / 1e6:,.0f} MB of representative traces"
    _refuse("the folded replay", estimate, bound_bytes(memory_bound_gb), basis)
