"""simulate(progress=...): called every engine.PROGRESS_EVERY events with the count so far, same schedule as without."""

from __future__ import annotations

import numpy as np

from tracekit.converters.generators import send_recv_bench
from tracekit.replayer import ReplayOptions
import tracekit.replayer.simulation.engine as engine
from tracekit.replayer.simulation.engine import events_progress, simulate
from tracekit.replayer.simulation.specs import load_spec
from tracekit.replayer.simulation.program import compile_program, effective_spec


def test_progress_counts_events_and_changes_nothing(monkeypatch):
    monkeypatch.setattr(engine, "PROGRESS_EVERY", 1000)
    ts = send_recv_bench(2, "ring", 1 << 10, iterations=1000)  # 4,000 nodes
    spec = effective_spec(load_spec("dgx-h100"), ReplayOptions(), 2)
    program = compile_program(ts, spec, ReplayOptions())
    seen: list[int] = []
    with_progress = simulate(program, progress=seen.append)
    plain = simulate(program)
    assert len(seen) >= 3 and seen == [1000 * (k + 1) for k in range(len(seen))]
    np.testing.assert_array_equal(with_progress.end_ns, plain.end_ns)
    np.testing.assert_array_equal(with_progress.start_ns, plain.start_ns)


def test_events_progress_reports_a_stage():
    said: list[tuple] = []
    report = events_progress(lambda *a: said.append(a))
    assert events_progress(None) is None and said == [("simulating events", 0, None)]
    report(16384)
    assert said[-1] == ("simulating events", 16384, None)
