"""DLRM generator: table placement, all-to-all sizes, MLP FLOPs and gradient bytes.

Source of the structure: Naumov et al. 2019, "Deep Learning Recommendation
Model for Personalization and Recommendation Systems", section 4 (tables
model-parallel, MLPs data-parallel, all-to-all of pooled embeddings in the
forward and backward).  Shape: the ``dlrm-small`` preset (T=8 tables, d=16,
pooling 4, bottom 13-64-16, top 45-64-1, fp32).
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tracekit.converters.generators import dlrm_preset, generate_dlrm
from tracekit.errors import ConfigError
from tracekit.model import CollectiveType
from tracekit.checks.validate import validate_traceset


@pytest.fixture(scope="module")
def small():
    config = dlrm_preset("dlrm-small", 3, global_batch_size=96)  # local batch 32
    return config, generate_dlrm(config)


def _roles(trace, role):
    return [n for n in trace.nodes if n.get_attr("op_role") == role]


def test_tables_round_robin(small):
    config, ts = small
    assert [config.tables_of(r) for r in range(3)] == [[0, 3, 6], [1, 4, 7], [2, 5]]
    assert [[n.get_attr("table") for n in _roles(ts[r], "embedding_lookup")] for r in range(3)] == [
        [0, 3, 6],
        [1, 4, 7],
        [2, 5],
    ]


def test_alltoall_forward_and_backward(small):
    config, ts = small
    for trace in ts:
        a2a = _roles(trace, "embedding_alltoall")
        assert [n.get_attr("phase") for n in a2a] == ["fwd", "bwd"]
        assert {n.comm_type for n in a2a} == {CollectiveType.ALL_TO_ALL}
        # local batch 32 x 8 tables x 16 dims x 4 bytes
        assert {n.comm_bytes for n in a2a} == {32 * 8 * 16 * 4} == {16_384}


def test_mlp_flops(small):
    config, ts = small
    b = 32
    bottom = 2 * b * (13 * 64 + 64 * 16)
    top = 2 * b * (52 * 64 + 64 * 1)  # 52 = d + T (T+1) / 2 = 16 + 36 interaction features
    assert config.interaction_features == 52
    for trace in ts:
        fwd = sum(
            n.num_ops
            for n in trace.nodes
            if n.get_attr("phase") == "fwd" and n.get_attr("op_role") in ("bottom_mlp_gemm", "top_mlp_gemm")
        )
        assert fwd == bottom + top
        # backward: dgrad + wgrad for every layer except the first bottom layer's dgrad
        bwd = sum(
            n.num_ops
            for n in trace.nodes
            if n.get_attr("phase") in ("bwd", "wgrad") and n.get_attr("op_role") in ("bottom_mlp_gemm", "top_mlp_gemm")
        )
        assert bwd == 2 * (bottom + top) - 2 * b * 13 * 64
        inter = [n.num_ops for n in _roles(trace, "interaction")]
        assert inter == [2 * b * 9 * 9 * 16, 2 * 2 * b * 9 * 9 * 16]


def test_gradient_allreduce_carries_every_mlp_parameter(small):
    config, ts = small
    params = (13 * 64 + 64) + (64 * 16 + 16) + (52 * 64 + 64) + (64 * 1 + 1)
    assert config.mlp_params() == params == 5_393
    for trace in ts:
        assert sum(n.comm_bytes for n in _roles(trace, "dp_grad_allreduce")) == params * 4


def test_small_buckets_follow_the_backward_order():
    config = dlrm_preset("dlrm-small", 2, global_batch_size=64, grad_bucket_bytes=4 * 3000)
    trace = generate_dlrm(config)[0]
    # limit 3,000 elements: top1 (65) | top0 (3,392, alone) | bottom1 (1,040) + bottom0 (896)
    assert [list(n.get_attr("layers")) for n in _roles(trace, "dp_grad_allreduce")] == [
        ["top1"],
        ["top0"],
        ["bottom1", "bottom0"],
    ]


def test_validates(small):
    _, ts = small
    assert validate_traceset(ts).ok


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(global_batch_size=100), "not divisible by 3 ranks"),
        (dict(embedding_dim=-4), "embedding dim must be a positive integer"),
        (dict(bottom_mlp=(64, 32)), "must end in the embedding dim 16"),
        (dict(top_mlp=()), "top mlp needs at least one layer"),
    ],
)
def test_bad_configs(overrides, message):
    with pytest.raises(ConfigError, match=message):
        dlrm_preset("dlrm-small", 3 if "global_batch_size" in overrides else 4, **overrides)


class _Main:
    """Adapter so CliRunner runs the CLI with its real error rendering (run_cli)."""

    name = "tracekit"

    def main(self, args=None, prog_name=None, **extra):
        from tracekit.cli import cli
        from tracekit.cli._common import invoke_for_test

        invoke_for_test(cli, list(args))


def test_cli_writes_and_rejects(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(
        _Main(), ["-q", "generate", "dlrm", "--model", "dlrm-small", "--ranks", "4", "-o", str(tmp_path / "d")]
    )
    assert ok.exit_code == 0, ok.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"d.{r}.et" for r in range(4)] + ["d.comm_groups.json"]
    bad = runner.invoke(_Main(), ["generate", "dlrm", "--ranks", "3", "-o", str(tmp_path / "x")])
    assert bad.exit_code == 1
    assert bad.stderr.strip() == "tracekit: error: global batch 65536 is not divisible by 3 ranks"
    assert bad.stdout == ""
