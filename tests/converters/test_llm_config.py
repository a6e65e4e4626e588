"""LLM configuration: validation one-liners, presets, CLI errors, rank layout (parameter counts:
tests/core/test_workloads.py).

Rank order: Megatron-LM, tensor-parallel
fastest, then context, data, pipeline (Narayanan et al. 2021, section 3.3).
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tests.converters._llm_helpers import gpt_config
from tracekit.converters.generators import LLMConfig, ModelSpec, ParallelSpec, llm_preset
from tracekit.converters.generators.llm_layout import coordinates, layout
from tracekit.errors import ConfigError
from tracekit.workloads.config import PRESETS, world_to_dp


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: gpt_config(tp=3), "tp=3 does not divide the 8 attention heads"),
        (lambda: gpt_config(dp=3, B=16), "global batch 16 is not divisible by micro-batch 1 x dp 3"),
        (lambda: gpt_config(dp=2, B=16, b=3), "global batch 16 is not divisible by micro-batch 3 x dp 2"),
        (
            lambda: gpt_config(pp=3, schedule="interleaved", virtual_stages=3, B=48),
            "8 layers cannot fill pp=3 x virtual stages 3 = 9 chunks",
        ),
        (lambda: gpt_config(tp=-2), "tp must be positive, got -2"),
        (lambda: gpt_config(b=0), "micro-batch size must be positive, got 0"),
        (
            lambda: ModelSpec("m", num_layers=2, hidden_size=-64, num_heads=8, seq_length=32, vocab_size=10),
            "hidden size must be positive, got -64",
        ),
        (
            lambda: ModelSpec("m", num_layers=2, hidden_size=60, num_heads=8, seq_length=32, vocab_size=10),
            "hidden size 60 is not a multiple of the 8 heads",
        ),
        (
            lambda: gpt_config(pp=2, B=5, schedule="interleaved", virtual_stages=2, microbatch_group_size=6),
            "micro-batch group size 6 is more than the 5 micro-batches per iteration",
        ),
        (
            lambda: gpt_config(pp=2, B=4, microbatch_group_size=2),
            "a micro-batch group size needs --schedule interleaved, not 1f1b",
        ),
        (
            lambda: gpt_config(tp=2, sequence_parallel=True, schedule="1f1b", virtual_stages=2),
            "virtual stages 2 need --schedule interleaved",
        ),
        (lambda: gpt_config(sequence_parallel=True), "sequence parallelism needs tp >= 2"),
        (lambda: gpt_config(dp=4, ep=3, B=16), "ep=3 must divide dp=4"),
        (lambda: gpt_config(dp=2, ep=2), "ep=2 needs a mixture-of-experts model"),
        (lambda: gpt_config(zero_stage=4), "zero stage must be one of 0, 1, 2, 3; got 4"),
        (lambda: world_to_dp(1000, tp=8, pp=16), "1000 ranks are not divisible by tp 8 x pp 16 x cp 1"),
        (lambda: llm_preset("gpt5"), "unknown model preset 'gpt5'"),
    ],
)
def test_impossible_configurations_are_one_line_config_errors(make, message):
    with pytest.raises(ConfigError, match=message) as info:
        make()
    assert "\n" not in str(info.value)


def test_world_to_dp():
    assert world_to_dp(1024, tp=8, pp=16) == 8


def test_every_preset_builds_and_names_its_source():
    for name, (model, batch) in PRESETS.items():
        assert model.source, name
        LLMConfig(model, ParallelSpec(), global_batch_size=batch)


def test_padded_vocab_follows_megatron():
    model, _ = llm_preset("llama2-7b")  # V = 32,000
    assert LLMConfig(model, ParallelSpec(tp=8), global_batch_size=8).padded_vocab_size == 32_768  # 1024 x 32
    assert LLMConfig(model, ParallelSpec(tp=1), global_batch_size=8).padded_vocab_size == 32_000


def test_megatron_rank_order_and_groups():
    c = gpt_config(dp=2, tp=2, pp=2, B=8)
    assert [coordinates(c, r) for r in range(8)] == [
        (0, 0, 0, 0),
        (1, 0, 0, 0),
        (0, 0, 1, 0),
        (1, 0, 1, 0),
        (0, 0, 0, 1),
        (1, 0, 0, 1),
        (0, 0, 1, 1),
        (1, 0, 1, 1),
    ]
    groups, places = layout(c)
    members = {groups.description(name): ranks for name, ranks in groups.mapping().items()}
    assert members["tp_0"] == (0, 1) and members["tp_3"] == (6, 7)
    assert members["dp_0"] == (0, 2) and members["dp_3"] == (5, 7)
    assert members["pp_0"] == (0, 4) and members["pp_3"] == (3, 7)
    assert (places[5].prev_rank, places[5].next_rank) == (1, 1)


def test_cli_bad_parallelism_exits_2(tmp_path):
    class Main:
        name = "tracekit"

        def main(self, args=None, prog_name=None, **extra):
            from tracekit.cli import cli
            from tracekit.cli._common import invoke_for_test

            invoke_for_test(cli, list(args))

    runner = CliRunner()
    for args, message in [
        (["--tp", "7", "--pp", "16", "--dp", "8"], "tp=7 does not divide the 96 attention heads"),
        (["--tp", "8", "--pp", "16", "--ranks", "1000"], "1000 ranks are not divisible by tp 8 x pp 16 x cp 1"),
        (["--tp", "8", "--pp", "16", "--dp", "7"], "global batch 1536 is not divisible by micro-batch 1 x dp 7"),
        (
            ["--layers", "-4"],
            "Invalid value for '--layers': -4 is not in the range x>=1 (see 'tracekit generate llm --help')",
        ),
    ]:
        result = runner.invoke(Main(), ["generate", "llm", "--model", "gpt3-175b", *args, "-o", str(tmp_path / "x")])
        assert result.exit_code == 1, result.output
        assert result.stderr.strip() == f"tracekit: error: {message}"
    assert list(tmp_path.iterdir()) == []


def test_cli_writes_a_small_job(tmp_path):
    from tracekit.cli import cli
    from tracekit.io import read_traceset

    result = CliRunner().invoke(
        cli,
        [
            "-q",
            "generate",
            "llm",
            "--model",
            "gpt3-1.3b",
            "--layers",
            "4",
            "--tp",
            "2",
            "--pp",
            "2",
            "--ranks",
            "8",
            "--global-batch",
            "4",
            "--sp",
            "--zero",
            "1",
            "--peak-tflops",
            "312",
            "--mem-bw-gbps",
            "2039",
            "-o",
            str(tmp_path / "g"),
        ],
    )
    assert result.exit_code == 0, result.output
    ts = read_traceset(tmp_path / "g")
    assert ts.ranks == tuple(range(8))
    assert all(n.duration_ns > 0 for n in ts[0].nodes if n.get_attr("op_role") == "qkv_gemm")
