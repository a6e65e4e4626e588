"""Compaction of a data-dependency chain (issue 17): must grow linearly with the chain.

Workload: N COMP nodes on one compute stream, each depending on the previous,
1 us each (the whole chain merges into one node).  Before issue 17 chain
merging re-checked the whole growing chain at every step: 10 k nodes 12 s,
20 k 41 s, 40 k > 120 s.  Figures: CPU seconds of ``compact_trace`` (median of
3 with min and max; the machine is shared, so CPU rather than wall time) and
nodes per CPU second, per N.
"""

from __future__ import annotations

import statistics
import time


def _chain(n: int):
    from tracekit.model import Attr, ExecutionTrace, Node, NodeType

    return ExecutionTrace([Node(id=i, name=f"op{i}", type=NodeType.COMP_NODE, data_deps=[i - 1] if i else [],
                                duration_ns=1000, attrs=[Attr("stream", 7, "int64_val")]) for i in range(n)])


def main() -> dict:
    from tracekit.transforms.compact import compact_trace

    out = {}
    for n in (10_000, 20_000, 40_000, 100_000):
        trace = _chain(n)
        times = []
        for _ in range(3):
            t0 = time.process_time()
            _, stats = compact_trace(trace)
            times.append(time.process_time() - t0)
        med = statistics.median(times)
        out[f"chain_{n}_cpu_s"] = med
        out[f"chain_{n}_cpu_s_range"] = [min(times), max(times)]
        out[f"chain_{n}_nodes_per_cpu_s"] = n / med
        print(f"chain {n:,} nodes -> {stats.nodes_after}: {med:.3f} s CPU ({min(times):.3f}-{max(times):.3f})",
              flush=True)
    return out


if __name__ == "__main__":
    main()
