"""The replay's memory bound (issue 34 item 5): a job estimated to need more memory than the bound is refused up
front, naming the estimate, what it rests on, the bound and the option that raises it."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.converters.generators import LLMConfig, ParallelSpec, Roofline, llm_preset
from tracekit.converters.generators.llm import write_llm
from tracekit.replayer import ReplayOptions, replay
from tracekit.replayer.simulation.memory_bound import (
    BASE_BYTES,
    UNFOLDED_BYTES_PER_FILE_BYTE,
    MemoryBoundError,
    bound_bytes,
)

ROOF = Roofline(989e12 * 0.7, 3.35e12 * 0.8)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A 16-rank class set (tp 2 x pp 2 x dp 4): two class files, each standing for 8 ranks."""
    base = tmp_path_factory.mktemp("bound")
    model, _ = llm_preset("gpt3-1.3b")
    config = LLMConfig(replace(model, num_layers=4), ParallelSpec(dp=4, tp=2, pp=2), global_batch_size=16)
    write_llm(config, base / "job", ROOF, classes=True)
    return base / "job"


def test_an_unfolded_replay_over_the_bound_is_refused_with_the_estimate(job):
    files = sorted(job.parent.glob("job.class*.et"))
    encoded = sum(os.path.getsize(f) * 8 for f in files)  # each class file stands for its 8 ranks
    estimate = BASE_BYTES + int(UNFOLDED_BYTES_PER_FILE_BYTE * encoded)
    with pytest.raises(MemoryBoundError) as info:
        replay(job, "dgx-h100", options=ReplayOptions(fold=False, memory_bound_gb=(estimate - 1) / 1e9))
    msg = str(info.value)
    assert estimate < 1e9  # figures under 1 GB are given in MB (not '0.1 GB', nor a bound of '0.0 GB')
    assert f"needs about {estimate / 1e6:,.0f} MB" in msg and f"{encoded / 1e6:,.0f} MB of traces" in msg
    assert f"the memory bound is {(estimate - 1) / 1e6:,.0f} MB" in msg
    assert "--memory-bound" in msg
    # just enough: it replays, as without a bound
    within = replay(job, "dgx-h100", options=ReplayOptions(fold=False, memory_bound_gb=estimate / 1e9))
    assert within.iteration_time_ns == replay(job, "dgx-h100", options=ReplayOptions(fold=False)).iteration_time_ns


def test_a_folded_replay_over_the_bound_is_refused_by_the_cli_in_one_line(job):
    out = CliRunner().invoke(cli, ["replay", str(job), "--hw", "dgx-h100", "--memory-bound", "0.01"])
    assert out.exit_code == 1
    line = out.output.strip().splitlines()[-1]
    assert line.startswith("tracekit: error: the folded replay needs about ") and " MB (" in line
    assert "communication nodes x 130 B" in line and "the memory bound is 10 MB (--memory-bound GB" in line
    ok = CliRunner().invoke(cli, ["replay", str(job), "--hw", "dgx-h100", "--memory-bound", "1"])
    assert ok.exit_code == 0, ok.output


@pytest.mark.skipif(not os.path.exists("/proc/meminfo"), reason="Linux: MemAvailable")
def test_the_default_bound_is_the_memory_available_now():
    with open("/proc/meminfo") as fh:
        available = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:"))
    assert abs(bound_bytes(None) - available) < 2e9  # other processes move it between the two reads
    assert bound_bytes(2.5) == 2_500_000_000


def test_rank_files_replayed_unfolded_are_estimated_from_their_sizes(job, tmp_path):
    out = CliRunner().invoke(cli, ["-q", "expand", str(job), "-o", str(tmp_path / "x")])
    assert out.exit_code == 0, out.output
    encoded = sum(os.path.getsize(f) for f in tmp_path.glob("x.*.et"))
    res = CliRunner().invoke(
        cli, ["replay", str(tmp_path / "x"), "--hw", "dgx-h100", "--no-fold", "--memory-bound", "0.01"]
    )
    assert res.exit_code == 1
    assert (
        f"replaying every rank needs about {(BASE_BYTES + UNFOLDED_BYTES_PER_FILE_BYTE * encoded) / 1e6:,.0f} MB"
        in res.output
    )
    assert f"({encoded / 1e6:,.0f} MB of traces x 2.7 when every rank is simulated)" in res.output
