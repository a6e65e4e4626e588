"""Per-rank breakdowns partition the iteration exactly, in integer ns, on real and generated jobs.

compute + exposed communication + waiting for peers + other idle == iteration time, for every rank,
with and without rank folding; the sweep's slowest rank on a tie is the one the others wait for.
"""

from __future__ import annotations

import pytest

from tracekit.io import read_traceset
from tracekit.replayer import ReplayOptions, replay
from tracekit.replayer.results.result import RankStats, ReplayResult, slowest_rank

from tests.replayer._reportkit import ws2_prefix  # noqa: F401 - fixture


def _assert_partition(result: ReplayResult) -> None:
    assert isinstance(result.iteration_time_ns, int)
    assert result.iteration_time_ns == max(r.iteration_time_ns for r in result.ranks)
    for r in result.ranks:
        parts = r.categories_ns()
        assert all(isinstance(x, int) and x >= 0 for x in (*parts, r.comm_ns)), r
        assert sum(parts) == r.iteration_time_ns, r
        assert r.idle_ns == r.comm_wait_ns + r.other_idle_ns
    for c in result.collectives:
        assert isinstance(c.start_ns, int) and c.time_ns == c.end_ns - c.start_ns
    cp = result.critical_path
    assert cp.length_ns == cp.compute_ns + cp.comm_ns == result.iteration_time_ns
    assert "." not in result.to_json().decode().split('"iteration_time_ns"')[1].split(",")[0]


def test_real_gloo_job_partitions_exactly(ws2_prefix):  # noqa: F811
    result = replay(read_traceset(ws2_prefix), "dgx-a100")
    _assert_partition(result)
    # the real job spends time waiting for its peer: the category is not empty, and not the whole idle time
    assert any(r.comm_wait_ns > 0 for r in result.ranks)
    again = ReplayResult.from_json(result.to_json())
    assert again == result


def test_real_text_workload_partitions_exactly(test_data_dir):
    """ASTRA-sim's Resnet50 data-parallel workload (real, tests/data), 8 ranks, folded and not."""
    from tracekit.converters.text_workload import convert_text_workload

    ts = convert_text_workload(str(test_data_dir / "Resnet50_DataParallel.txt"), 8)
    for fold in (True, False):
        result = replay(ts, "dgx-a100", options=ReplayOptions(fold=fold))
        _assert_partition(result)
        assert all(r.exposed_comm_ns > 0 for r in result.ranks)


@pytest.mark.parametrize("fold", [True, False])
def test_generated_llm_partitions_exactly(fold):
    from tracekit.converters.generators.llm import generate_llm
    from tracekit.workloads.config import LLMConfig, ParallelSpec, preset

    model, _ = preset("gpt3-1.3b")
    import dataclasses

    model = dataclasses.replace(model, num_layers=2, seq_length=256)
    config = LLMConfig(model, ParallelSpec(dp=2, tp=2, pp=2), global_batch_size=8, micro_batch_size=1)
    from tracekit.converters.generators.llm_ops import Roofline

    ts = generate_llm(config, Roofline(312e12, 2.0e12))
    result = replay(ts, "dgx-a100", options=ReplayOptions(fold=fold))
    _assert_partition(result)
    assert any(r.comm_wait_ns > 0 for r in result.ranks)  # pipeline bubbles: ranks wait for their peers


def test_slowest_rank_on_a_tie_is_not_a_waiting_rank():
    # ranks 0 and 1 end together; rank 0 spent 40 ns waiting for rank 1, so rank 1 is the slow one
    waiting = RankStats(0, 150, 60, 50, 50, 40, 0, 2)
    busy = RankStats(1, 150, 100, 50, 50, 0, 0, 2)
    assert slowest_rank([waiting, busy]).rank == 1
    assert slowest_rank([busy, waiting]).rank == 1
    # equal in every way: the lowest rank
    assert slowest_rank([RankStats(3, 10, 10, 0, 0, 0, 0, 1), RankStats(2, 10, 10, 0, 0, 0, 0, 1)]).rank == 2
