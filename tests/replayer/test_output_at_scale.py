"""What a person sees of a large job (issue 17.5): a grouped summary of a fixed size, named timeline slices.

(These replace test_class_sets' "<= 60 lines" and "no `node <id>` names" checks with exact counts.)

The counts below were read from one run of the generated jobs (deterministic generators, fixed spec); the
summary's shape is: 2 header lines, the per-rank table (one row per group of ranks with equal figures), the
collective table (``--top`` rows), the critical path and its longest steps, and two compute lines.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.converters.generators import LLMConfig, ParallelSpec, Roofline, llm_preset
from tracekit.converters.generators.llm import write_llm
from tracekit.io import read_traceset
from tracekit.replayer import ReplayOptions, replay
from tracekit.replayer import replay_with_traces
from tracekit.replayer.reporting.timeline import replay_timeline

ROOF = Roofline(989e12 * 0.7, 3.35e12 * 0.8)


def _config(tp: int, pp: int, dp: int, layers: int = 4) -> LLMConfig:
    model, _ = llm_preset("gpt3-1.3b")
    return LLMConfig(
        replace(model, num_layers=layers),
        ParallelSpec(dp=dp, tp=tp, pp=pp),
        global_batch_size=2 * pp * dp,
        micro_batch_size=1,
    )


def test_512_rank_replay_summary_has_a_fixed_number_of_lines(tmp_path):
    write_llm(_config(tp=2, pp=4, dp=64), tmp_path / "job", ROOF, classes=True)
    runner = CliRunner()
    # alpha-beta pinned (the preset's default is nccl): the row count depends on which group times differ
    default = runner.invoke(
        cli, ["replay", str(tmp_path / "job"), "--hw", "dgx-h100", "--collective-model", "alpha_beta"]
    )
    assert default.exit_code == 0, default.output
    lines = default.stdout.splitlines()
    # 512 ranks in 4 rows (one per pipeline stage), the 8 distinct collective rows (groups whose mean times
    # differ by float noise only share a row; --top default 8); the headline is one line (it wrapped in two)
    # and, for a generated job, the peak-memory table (issue 33): title, 3 header lines, one row per stage (4),
    # its bottom border and the verdict line: 10 lines
    assert len(lines) == 38 + 10
    assert (
        sum(
            1
            for line in lines
            if line.startswith("│") and line.split("│")[1].strip() in ("0-127", "128-255", "256-383", "384-511")
        )
        == 4
    )
    assert "communication (17,034 collectives and send/recv pairs)" in default.stdout
    assert "rows with the most time" not in default.stdout
    top2 = runner.invoke(
        cli, ["replay", str(tmp_path / "job"), "--hw", "dgx-h100", "--collective-model", "alpha_beta", "--top", "2"]
    )
    assert top2.exit_code == 0, top2.output
    # --top 2: 2 rank rows instead of 4, 2 collective rows instead of 8, one line more saying so
    assert len(top2.stdout.splitlines()) == 31 + 10 and "the 2 of 8 rows with the most time" in top2.stdout
    info = runner.invoke(cli, ["info", str(tmp_path / "job"), "--top", "2"])
    assert info.exit_code == 0 and "the first 2 rows" in info.stdout


def test_folded_64_rank_timeline_has_the_unfolded_slices_and_names(tmp_path):
    write_llm(_config(tp=2, pp=4, dp=8), tmp_path / "job", ROOF)
    folded, kept = replay_with_traces(tmp_path / "job", "dgx-h100", options=ReplayOptions())
    assert folded.folding.classes == 4 and len(kept) == 4  # 60 ranks have no trace in memory
    full = read_traceset(str(tmp_path / "job"))
    unfolded = replay(full, "dgx-h100", options=ReplayOptions(fold=False))

    def names_per_rank(result, ts) -> dict[int, Counter]:
        out: dict[int, Counter] = {}
        for e in replay_timeline(result, ts)["traceEvents"]:
            if e["ph"] == "X":
                out.setdefault(e["pid"], Counter())[e["name"]] += 1
        return out

    a, b = names_per_rank(folded, kept), names_per_rank(unfolded, full)
    assert sorted(a) == list(range(64))
    assert a == b  # every rank: the same slices, named the same, as many times
    assert sum(sum(c.values()) for c in a.values()) == sum(sum(c.values()) for c in b.values()) > 64 * 200
    assert not [n for c in a.values() for n in c if n.startswith("node ")]
