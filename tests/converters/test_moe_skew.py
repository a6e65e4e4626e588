"""MoE token-routing imbalance on generated expert-parallel all-to-alls (issue 27, ``generate micro --moe-skew``)."""

from __future__ import annotations

import pytest

from tracekit.converters.generators.micro import collective_bench, moe_splits
from tracekit.errors import ConfigError
from tracekit.replayer import ReplayOptions, replay
from tracekit.model.uneven import RECV_SPLIT_BYTES, SEND_SPLIT_BYTES

from tests.replayer._engine_kit import one_dim

MIB = 1 << 20


def test_zipf_shares_in_whole_bytes():
    # skew 1 over 4 experts: 1, 1/2, 1/3, 1/4 of 25/12 -> 12/25, 6/25, 4/25, 3/25
    assert moe_splits(2500, 4, 1.0) == [1200, 600, 400, 300]
    assert moe_splits(2500, 4, 0.0) == [625] * 4
    assert sum(moe_splits(1001, 3, 2.0)) == 1001  # largest remainder keeps the total
    with pytest.raises(ConfigError, match="MoE skew"):
        moe_splits(100, 4, -1.0)


def test_a_skewed_expert_all_to_all_replays_slower_by_the_busiest_experts_extra_bytes():
    skewed = collective_bench(4, "all_to_all", 25 * MIB, moe_skew=1.0)
    even = collective_bench(4, "all_to_all", 25 * MIB)
    n0 = skewed[0].nodes[0]
    assert list(n0.get_attr(SEND_SPLIT_BYTES)) == [12 * MIB, 6 * MIB, 4 * MIB, 3 * MIB]
    assert list(skewed[2].nodes[0].get_attr(RECV_SPLIT_BYTES)) == [4 * MIB] * 4
    assert even[0].nodes[0].get_attr(SEND_SPLIT_BYTES) is None
    # expert 0 takes in 3 x 12 MiB = 36 MiB; balanced, every rank moves 25 x 3/4 = 18.75 MiB: 17.25 MiB / B more
    spec = one_dim(4, 100.0, 1000.0, topology="switch", all_to_all="direct")  # B = 100 bytes/ns
    opts = ReplayOptions(collective_model="alpha_beta")
    extra = replay(skewed, spec, options=opts).iteration_time_ns - replay(even, spec, options=opts).iteration_time_ns
    assert extra == pytest.approx(17.25 * MIB / 100.0, abs=1.0)


def test_a_skew_on_another_collective_is_refused():
    with pytest.raises(ConfigError, match="applies to an all-to-all"):
        collective_bench(4, "all_reduce", MIB, moe_skew=1.0)


def test_cli_writes_the_splits(tmp_path):
    from click.testing import CliRunner

    from tracekit.cli import cli
    from tracekit.io import read_traceset

    out = tmp_path / "moe"
    res = CliRunner().invoke(
        cli,
        [
            "generate",
            "micro",
            "--collective",
            "all_to_all",
            "--size",
            "2500",
            "--ranks",
            "4",
            "--moe-skew",
            "1",
            "-o",
            str(out),
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    ts = read_traceset(str(out))
    assert list(ts[3].nodes[0].get_attr(RECV_SPLIT_BYTES)) == [300] * 4
