"""PyTorch converter speed on the largest real inputs (issue 3).

Workloads (from ../shared/real/pytorch):
  - param-hf-gpt2: read + convert the 24 MB ET (27,156 nodes, nested tensor lists), no Kineto;
  - param-resnet: read + link (sequence alignment: 14,392 ET nodes vs 111,631 Kineto events from
    another run) + convert; the link+convert part is also timed alone (files already parsed).
Prints medians of 3 runs (min-max).  Reference on this machine (issue 3): Chakra's trace_link took
67 s and its converter 2.5 s on the resnet pair; our target is under 3 s for link + convert.
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from pathlib import Path

RUNS = 3
REAL = Path(os.environ.get("TRACEKIT_REAL_DATA", Path(__file__).resolve().parents[2] / "shared" / "real"))


def _median(fn) -> tuple[float, float, float]:
    times = []
    for _ in range(RUNS):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def main() -> dict:
    from tracekit.converters.pytorch import convert_rank
    from tracekit.converters.pytorch.kineto_reader import paused_gc as _gc_paused
    from tracekit.converters.pytorch.et_convert import convert_et
    from tracekit.converters.pytorch.et_reader import read_et
    from tracekit.converters.pytorch.kineto_reader import read_kineto
    from tracekit.converters.pytorch.linker import link

    d = REAL / "pytorch"
    gpt2 = d / "param-hf-gpt2/hf_GPT2_et.json.tar.gz"
    r_et, r_k = d / "param-resnet/resnet_et.json.gz", d / "param-resnet/resnet_kineto.json.gz"
    out = {}
    out["gpt2_read_convert_s"] = _median(lambda: convert_rank(gpt2, rank=0))
    out["resnet_read_link_convert_s"] = _median(lambda: convert_rank(r_et, r_k, rank=0))
    et, kt = read_et(r_et), read_kineto(r_k)

    def link_convert():
        with _gc_paused():
            convert_et(et, rank=0, kineto=kt, linkage=link(et, kt))

    out["resnet_link_convert_s"] = _median(link_convert)
    for key, (med, lo, hi) in out.items():
        print(f"{key:30s} median {med:6.2f} s  (min {lo:.2f}, max {hi:.2f}, {RUNS} runs)")
    print("reference: Chakra trace_link 67 s + converter 2.5 s on the resnet pair; target < 3 s link + convert")
    return {k: {"median": v[0], "min": v[1], "max": v[2]} for k, v in out.items()}


if __name__ == "__main__":
    main()
