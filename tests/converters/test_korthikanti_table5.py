"""Korthikanti et al. 2022, Table 5: generated jobs with full and with selective recomputation against the paper.

Rows and layouts: converters/generators/table5.py.  The 22B row (8 GPUs) runs here, both modes, generated as
rank classes and replayed folded on dgx-a100, within 10 % (the issue's target); the 175B, 530B and 1T rows
(64-512 GPUs, minutes each on 2 cores) run in benchmarks/bench_table5.py with the same code and target.
"""

from __future__ import annotations

import pytest

from tracekit.converters.generators import calibration as cal
from tracekit.converters.generators import table5
from tracekit.converters.generators.llm import write_llm
from tracekit.errors import ConfigError
from tracekit.replayer.simulation.specs import load_spec

# (row, mode, seconds in Table 5), the paper's values repeated so the test states its reference
PAPER = [("22B", "full", 1.42), ("22B", "selective", 1.10)]


@pytest.mark.parametrize("name, mode, paper_s", PAPER)
def test_table5_row_within_10_percent(name, mode, paper_s, tmp_path):
    from tracekit.replayer import replay_with_traces

    row = table5.table5_row(name)
    assert table5.table5_seconds(row, mode) == paper_s
    config = table5.table5_config(row, mode)
    assert config.world_size == row.gpus and config.micro_batch_size == 4 and config.num_micro_batches == 1
    assert config.parallel.sequence_parallel == (mode == "selective")
    write_llm(config, tmp_path / "job", cal.calibrated_cost(load_spec("dgx-a100")), classes=True)
    result, _ = replay_with_traces(tmp_path / "job", "dgx-a100")
    assert result.folding is not None and result.folding.ranks == row.gpus
    got = result.iteration_time_ns * 1e-9
    assert got == pytest.approx(paper_s, rel=0.10), f"{name} {mode}: {got:.3f} s vs {paper_s} s"


def test_the_layouts_are_the_papers():
    rows = {r.name: r for r in table5.TABLE5}
    c175 = table5.table5_config(rows["175B"], "selective")
    assert (c175.parallel.schedule, c175.parallel.virtual_stages, c175.layers_per_chunk) == ("interleaved", 3, 4)
    assert c175.num_micro_batches == 64 and c175.parallel.dp == 1
    c530 = table5.table5_config(rows["530B"], "full")
    assert (c530.parallel.pp, c530.parallel.virtual_stages, c530.layers_per_chunk) == (35, 3, 1)
    c1t = table5.table5_config(rows["1T"], "full")
    assert (c1t.parallel.schedule, c1t.world_size, c1t.num_micro_batches) == ("1f1b", 512, 512)
    assert [r.full_s / r.selective_s for r in table5.TABLE5] == pytest.approx([1.29, 1.32, 1.30, 1.32], abs=0.01)
    with pytest.raises(ConfigError, match="no Table-5 row '2T'"):
        table5.table5_row("2T")
    with pytest.raises(ConfigError, match="mode must be one of full, selective"):
        table5.table5_config(rows["22B"], "none")
