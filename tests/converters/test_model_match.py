"""An ET and a Kineto trace of two different models are refused (issue 27), however well their names link.

``../shared/real/pytorch/param-resnet`` pairs a ResNet-50 ET (batch 32, DDP, ProfilerStep#6-#8) with a ResNet-18
Kineto trace (batch 128, 30 iterations, no ProfilerStep): the name-sequence linker joined 57.9 % of host ops and
attached 2,343 kernels of the wrong model without a word. Counts below are from the files (README of
../shared/real): 159 ``aten::convolution`` in 3 ET steps (53 per step: ResNet-50) vs 600 in 30 Kineto
``Optimizer.step#`` ranges (20: ResNet-18); 483 vs 1,860 ``AccumulateGrad`` (161 vs 62 parameter tensors).
"""

from __future__ import annotations

import logging

import pytest

from tracekit.converters.pytorch import convert_rank
from tracekit.converters.pytorch.et_reader import read_et
from tracekit.converters.pytorch.kineto_reader import read_kineto
from tracekit.converters.pytorch.run_match import model_mismatch
from tracekit.errors import ConversionError

RESNET = "pytorch/param-resnet"
EXPECTED = [
    "53.0 convolutions per iteration in the ET (159 in 3), 20.0 in Kineto (600 in 30)",
    "161.0 parameter-gradient accumulations per iteration in the ET (483 in 3), 62.0 in Kineto (1860 in 30)",
]


@pytest.mark.realdata
def test_param_resnet_is_refused_naming_the_per_iteration_counts(real_dir):
    et, kineto = real_dir / RESNET / "resnet_et.json.gz", real_dir / RESNET / "resnet_kineto.json.gz"
    assert model_mismatch(read_et(et), read_kineto(kineto)) == EXPECTED
    with pytest.raises(ConversionError) as err:
        convert_rank(et, kineto, rank=0)
    text = str(err.value)
    assert "record different models" in text and EXPECTED[0] in text and "--allow-unlinked" in text
    assert "8325 of 14388 ET host ops (57.9%)" in text


@pytest.mark.realdata
def test_allow_unlinked_converts_param_resnet_with_a_warning(real_dir, caplog):
    et, kineto = real_dir / RESNET / "resnet_et.json.gz", real_dir / RESNET / "resnet_kineto.json.gz"
    with caplog.at_level(logging.WARNING):
        res = convert_rank(et, kineto, rank=0, allow_unlinked=True)
    assert res.link is not None and res.link.host_linked == 8325
    assert [r for r in caplog.records if "record different models" in r.getMessage()]


@pytest.mark.realdata
@pytest.mark.parametrize(
    "et,kineto",
    [
        ("pytorch/param-linear/linear_et.json.gz", "pytorch/param-linear/linear_kineto.json.gz"),
        ("pytorch/torch-cpu-gloo/dist_ws2/et_rank0.json", "pytorch/torch-cpu-gloo/dist_ws2/kineto_rank0.json"),
        ("pytorch/torch-cpu-gloo/single/et_rank0.json", "pytorch/torch-cpu-gloo/single/kineto_rank0.json"),
    ],
)
def test_pairs_of_one_run_show_no_model_difference(real_dir, et, kineto):
    # param-linear: 1 ET iteration vs 40 in Kineto, 62 vs 2,480 GEMMs: 62 per iteration on both sides
    assert model_mismatch(read_et(real_dir / et), read_kineto(real_dir / kineto)) == []
