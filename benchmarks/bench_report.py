"""How fast the HTML report of a 1,024-rank replay opens in headless Chromium, and how big it is (issue 8).

Workload: GPT-3 1.3B (``gpt3-1.3b`` preset) on tp 8 x pp 4 x dp ``BENCH_REPORT_DP``
(default 32, so 1,024 ranks), global batch 128, micro-batch 1, 1F1B, roofline
durations for the dgx-h100 device (as ``tracekit generate llm --hw dgx-h100``):
744 nodes per rank, 768,512 nodes in all.  Replayed on dgx-h100 (alpha-beta
model), the result written as JSON with its per-node schedule, then:

- ``report_build_s``: reading that JSON and writing the report (median of ``BENCH_RUNS``);
- ``report_bytes``: the HTML file size (plotly.js inlined is about 4.8 MB of it);
- ``open_wall_s``: wall time of one headless Chromium run that loads the file, runs
  its scripts until every plot is drawn and dumps the DOM (browser start-up included;
  median and spread of ``BENCH_RUNS``) -- the figure the issue's "under 5 seconds" is about;
- ``render_ms``: the page's own mark, ``performance.now()`` when all plots were drawn
  (from navigation start, without browser start-up).

Needs Chromium (``apt-get install -y chromium``); without it only the build figures are given.
"""

from __future__ import annotations

import os
import re
import statistics
import tempfile
import time
from pathlib import Path

DP = int(os.environ.get("BENCH_REPORT_DP", 32))
RUNS = int(os.environ.get("BENCH_RUNS", 3))


def _spread(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def main() -> dict:
    from tracekit.converters.generators.llm import generate_llm
    from tracekit.workloads.config import LLMConfig, ParallelSpec, preset
    from tracekit.converters.generators.llm_ops import Roofline
    from tracekit.replayer.simulation.program import ReplayOptions, compile_program, effective_spec
    from tracekit.replayer.reporting.browser import find_chromium, render_dom
    from tracekit.replayer.simulation.engine import simulate
    from tracekit.replayer.simulation.specs import load_spec
    from tracekit.replayer.reporting.report import load_result, write_report
    from tracekit.replayer.results.build import build_result

    model, _ = preset("gpt3-1.3b")
    config = LLMConfig(model, ParallelSpec(dp=DP, tp=8, pp=4), global_batch_size=128, micro_batch_size=1)
    spec = load_spec("dgx-h100")
    device = spec.device
    roofline = Roofline(
        device.peak("bf16") * device.compute_efficiency, device.mem_bandwidth_bytes_per_s * device.memory_efficiency
    )
    t0 = time.perf_counter()
    ts = generate_llm(config, roofline)
    options = ReplayOptions()
    program = compile_program(ts, effective_spec(spec, options, ts.world_size), options)
    result = build_result(program, simulate(program), ts)
    replay_s = time.perf_counter() - t0
    out: dict = {
        "ranks": ts.world_size,
        "nodes": result.node_count,
        "generate_and_replay_s": replay_s,
        "iteration_time_ms": result.iteration_time_ns / 1e6,
    }
    with tempfile.TemporaryDirectory(prefix="bench_report_") as tmp:
        json_path = Path(tmp) / "result.json"
        result.write_json(str(json_path), include_schedule=True)
        out["result_json_bytes"] = json_path.stat().st_size
        del result, program, ts
        html = Path(tmp) / "report.html"
        builds = []
        for _ in range(RUNS):
            t = time.perf_counter()
            write_report(load_result(json_path), html)
            builds.append(time.perf_counter() - t)
        out["report_build_s"] = _spread(builds)
        out["report_bytes"] = html.stat().st_size
        if find_chromium() is None:
            out["open_wall_s"] = "skipped: no Chromium (apt-get install -y chromium)"
            return out
        walls, renders = [], []
        for _ in range(RUNS):
            page = render_dom(html, timeout_s=120)
            m = re.search(r'data-plots-rendered="(\d+)" data-render-ms="([\d.]+)"', page.dom)
            if m is None:
                raise RuntimeError("the report did not finish drawing its plots in Chromium")
            walls.append(page.wall_s)
            renders.append(float(m.group(2)))
        out["open_wall_s"] = _spread(walls)
        out["render_ms"] = _spread(renders)
        out["under_5_s"] = statistics.median(walls) < 5.0
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
