"""The published layouts of the Megatron-LM rows ``tracekit plan`` is checked against (tests and bench_plan).

Narayanan et al. 2021 (SC'21) Table 1 gives tp, pp and GPUs per row (dp = GPUs / (tp pp)); the project's
Table-1 assumptions (converters/generators/calibration.py) add micro-batch 1, 1F1B, full recomputation, no
sequence parallelism and plain data parallelism (the 2021 code had no distributed optimizer).  Korthikanti et
al. 2022 Table 3 gives tp, pp (virtual stages) and GPUs; the paper's own method is sequence parallelism with
selective recomputation, micro-batch 1.
"""

from __future__ import annotations

from tracekit.replayer.orchestration.planning.enumerate import Layout

#: name -> (plan --model, GPUs, published layout)
PUBLISHED = {
    "1.7B": ("megatron-1.7B", 32, Layout(1, 1, 32, recompute="full")),
    "18.4B": ("megatron-18.4B", 256, Layout(8, 1, 32, recompute="full")),
    "39.1B": ("megatron-39.1B", 512, Layout(8, 2, 32, recompute="full")),
    "1T": ("megatron-1T", 3072, Layout(8, 64, 6, recompute="full")),
    "k175B": ("korthikanti-175B", 64, Layout(8, 8, 1, vp=3, recompute="selective", sp=True)),
    "k530B": ("korthikanti-530B", 280, Layout(8, 35, 1, vp=3, recompute="selective", sp=True)),
}


def published_layout(name: str) -> tuple[str, int, Layout]:
    """``(plan --model, GPUs, layout)`` of a row of :data:`PUBLISHED`."""
    return PUBLISHED[name]
