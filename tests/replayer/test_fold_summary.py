"""A folded replay's summary-only result (``ReplayOptions.summary``, issue 34 item 2): no per-instance collective
rows or per-rank schedules, and the same figures as the full expansion to the ns (ranks, critical path, the
collective table's summary rows, compact JSON)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tracekit.converters.generators import LLMConfig, ParallelSpec, Roofline, llm_preset
from tracekit.converters.generators.llm import write_llm
from tracekit.replayer import ReplayOptions, replay
from tracekit.replayer.results.compact import compact_dict

ROOF = Roofline(989e12 * 0.7, 3.35e12 * 0.8)


def _job(base, schedule: str, vp: int | None):
    model, _ = llm_preset("gpt3-1.3b")
    extra = {"schedule": schedule} if vp is None else {"schedule": schedule, "virtual_stages": vp}
    parallel = ParallelSpec(dp=4, tp=2, pp=2, **extra)
    write_llm(LLMConfig(replace(model, num_layers=4), parallel, global_batch_size=16), base / "job", ROOF, classes=True)
    return base / "job"


@pytest.mark.parametrize("schedule, vp", [("1f1b", None), ("interleaved", 2)])
def test_summary_result_equals_the_full_expansion(tmp_path, schedule, vp):
    job = _job(tmp_path, schedule, vp)
    full = replay(job, "dgx-h100")
    lean = replay(job, "dgx-h100", options=ReplayOptions(summary=True))
    assert full.folding is not None and full.folding.reason is None and full.folding.classes == 2
    assert lean.collectives == () and lean.schedule is None and full.schedule is not None
    assert lean.iteration_time_ns == full.iteration_time_ns
    assert lean.ranks == full.ranks and lean.critical_path == full.critical_path
    assert lean.collective_summary() == full.collective_summary()
    assert compact_dict(lean) == compact_dict(full)
    # the table counts every unfolded instance: tp all-reduces/all-gathers, dp gradient sync, pipeline send/recv
    assert sum(row["count"] for row in lean.collective_summary()) == len(full.collectives) > 0


def test_summary_is_ignored_when_the_job_does_not_fold(tmp_path):
    job = _job(tmp_path, "1f1b", None)
    full = replay(job, "dgx-h100", options=ReplayOptions(fold=False))
    lean = replay(job, "dgx-h100", options=ReplayOptions(fold=False, summary=True))
    assert lean.collectives == full.collectives and lean.schedule is not None
    assert lean.collective_rows is None


@pytest.mark.parametrize("space", [50, 10**9])  # a table over the code space, and the sort (np.unique)
def test_first_seen_numbers_values_in_order_of_first_occurrence(space):
    import numpy as np

    from tracekit.replayer.simulation.fold_summary import _first_seen

    code = np.asarray([7, 3, 7, 0, 3, 49, 0, 7], dtype=np.int64)
    first, number = _first_seen(code, space)
    assert first.tolist() == [0, 1, 3, 5]  # 7, 3, 0, 49 first appear at these indices
    assert number.tolist() == [0, 1, 0, 2, 1, 3, 2, 0]
