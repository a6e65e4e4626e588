"""SMs a userbuffers communication kernel keeps from the GEMM it overlaps (``StackSpec.tp_overlap_comm_sms``).

Source: Transformer Engine ``transformer_engine/pytorch/module/base.py`` ``initialize_ub`` default config: the
``pipeline`` overlaps (attention projection and FC2 forward with their reduce-scatter) and the ``bulk`` ones (QKV
and FC1 dgrad / wgrad) run the communication on ``num_sm = 16`` SMs and launch the GEMM with ``set_sm_margin``;
``ring_exchange`` (QKV / FC1 forward, projection / FC2 dgrad) uses copy engines and no margin.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from tests.converters._llm_helpers import nodes_by
from tracekit.converters.generators import calibration as cal
from tracekit.converters.generators.llm import build_rank_trace
from tracekit.costs.devices import gemm_efficiency
from tracekit.errors import ConfigError
from tracekit.replayer.simulation.specs import load_spec
from tracekit.workloads.config import LLMConfig, ModelSpec, ParallelSpec
from tracekit.workloads.stacks import STACKS, apply_stack, stack

MODEL = ModelSpec("m", num_layers=2, hidden_size=4096, num_heads=32, seq_length=2048, vocab_size=1024)


def _durations(sms: int) -> dict[tuple[str, str], int]:
    c = LLMConfig(MODEL, ParallelSpec(tp=4, sequence_parallel=True), global_batch_size=1)
    c = apply_stack(c, "nemo", tp_overlap_comm_sms=sms)
    trace = build_rank_trace(c, 0, cal.cost_for(load_spec("dgx-h100"), c))
    return {
        (role, phase): nodes_by(trace, op_role=role, layer=0, phase=phase)[0].duration_ns
        for role in ("qkv_gemm", "proj_gemm", "fc1_gemm", "fc2_gemm")
        for phase in ("fwd", "bwd", "wgrad")
    }


def test_the_margin_slows_the_pipeline_and_bulk_gemms_only():
    plain, margin = _durations(0), _durations(16)
    slowed = {k for k in plain if margin[k] > plain[k]}
    assert slowed == {
        ("proj_gemm", "fwd"),
        ("fc2_gemm", "fwd"),
        ("qkv_gemm", "bwd"),
        ("qkv_gemm", "wgrad"),
        ("fc1_gemm", "bwd"),
        ("fc1_gemm", "wgrad"),
    }
    assert all(margin[k] == plain[k] for k in plain if k not in slowed)  # ring-exchange GEMMs keep every SM


def test_a_gemm_on_the_remaining_sms_is_the_closed_form():
    cost = cal.cost_for(load_spec("dgx-h100"), LLMConfig(MODEL, global_batch_size=1))
    m, k, n = 2048, 1024, 4096  # the projection: t tokens x (h / tp) -> h
    nbytes = 2 * (m * k + k * n + m * n)
    dev = cost.device
    rest = dataclasses.replace(dev, compute_units=dev.compute_units - 16)  # 116 of the H100's 132 SMs
    eff = gemm_efficiency(m, n, k, "bf16", rest) * k / (k + cost.gemm_k_fill) * cost._sustained
    peak = dev.peak("bf16")[0] * 116 / 132
    want = math.ceil(max(2 * m * n * k / (peak * eff), cost._memory_s(nbytes)) * 1e9 + cost.kernel_overhead_ns)
    assert cost.gemm_ns(m, k, n, nbytes, comm_sms=16) == want > cost.gemm_ns(m, k, n, nbytes)


def test_every_preset_keeps_no_margin_and_bad_counts_are_refused():
    assert all(p.spec.tp_overlap_comm_sms == 0 for p in STACKS.values())
    with pytest.raises(ConfigError, match="tp_overlap_comm_sms must be a non-negative integer, got -1"):
        stack("nemo", tp_overlap_comm_sms=-1)


def test_the_cli_sets_the_margin(tmp_path):
    import json

    from click.testing import CliRunner

    from tracekit.cli import cli
    from tracekit.io import read_traceset

    args = ["generate", "llm", "--model", "gpt3-1.3b", "--layers", "2", "--tp", "2", "--sp", "--global-batch", "1"]
    args += ["--seq", "256", "--stack", "nemo", "-o", str(tmp_path / "a")]
    res = CliRunner().invoke(cli, [*args, "--stack-knob", "tp_overlap_comm_sms=16"])
    assert res.exit_code == 0, res.output
    cfg = json.loads(read_traceset(tmp_path / "a")[0].metadata.get_attr("llm_config"))
    assert cfg["stack"]["tp_overlap_comm_sms"] == 16
    bad = CliRunner().invoke(cli, [*args, "--stack-knob", "tp_overlap_comm_sms=many"])
    assert bad.exit_code == 1 and "expected a non-negative integer" in bad.output
