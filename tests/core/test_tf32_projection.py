"""fp32 convolutions as TF32 where PyTorch runs them so (Ampere and later), in device projection.

Sources: PyTorch docs, "CUDA semantics", "TensorFloat-32 (TF32) on Ampere (and later) devices":
``torch.backends.cudnn.allow_tf32`` defaults to True, ``torch.backends.cuda.matmul.allow_tf32`` to False since
1.12.  Published check: NVIDIA/DeepLearningExamples PyTorch/Classification/ConvNets/resnet50v1.5/README.md
@ 291f0d0 (pytorch-21.03), ResNet-50 v1.5 training on 1 GPU: A100 80GB TF32 938 img/s, V100 16GB FP32 367 img/s
(ratio 2.556); the 8-GPU rows (7,248 vs 2,855 img/s, 2.539) agree.
"""

from __future__ import annotations

import dataclasses

import pytest

from tracekit.costs.devices import device_model, gemm_efficiency, op_seconds, tf32_classes
from tracekit.errors import ConfigError

PUBLISHED_A100_OVER_V100 = 938 / 367  # img/s, 1 GPU, TF32 vs FP32


def _big_conv():
    """A compute-bound conv: F FLOPs over B fp32 bytes, its equivalent square GEMM edge s = 1.5 e F / B."""
    s = 4096
    return 2 * s**3, 3 * s * s * 4, s


def test_an_fp32_convolution_runs_as_tf32_on_an_a100_at_its_conv_efficiency():
    a100 = device_model("a100-80gb")
    flops, nbytes, s = _big_conv()
    t = op_seconds(flops, nbytes, "conv", "fp32", a100)
    assert t.dtype == "tf32" and not t.dtype_fallback
    eff = gemm_efficiency(s, s, s, "tf32", a100) * 0.30
    assert t.seconds == pytest.approx(flops / (156e12 * eff))


def test_a_v100_has_no_tf32_and_fp32_matmuls_stay_fp32():
    flops, nbytes, s = _big_conv()
    v100 = device_model("v100")
    t = op_seconds(flops, nbytes, "conv", "fp32", v100)
    assert t.dtype == "fp32" and t.seconds == pytest.approx(flops / (15.7e12 * gemm_efficiency(s, s, s, "fp32", v100)))
    a100 = device_model("a100-80gb")
    assert op_seconds(flops, nbytes, "gemm", "fp32", a100).dtype == "fp32"  # matmul.allow_tf32 is False
    assert op_seconds(flops, nbytes, "gemm", "fp32", a100, tf32_classes("all")).dtype == "tf32"
    assert op_seconds(flops, nbytes, "conv", "fp32", a100, tf32_classes("off")).dtype == "fp32"
    # a conv the capture recorded as tf32 (cuDNN's allow_tf32 argument) stays tf32
    assert op_seconds(flops, nbytes, "conv", "tf32", a100, tf32_classes("off")).dtype == "tf32"


def test_amd_devices_keep_fp32_convolutions():
    mi300x = device_model("mi300x")
    flops, nbytes, _ = _big_conv()
    assert op_seconds(flops, nbytes, "conv", "fp32", mi300x).dtype == "fp32"  # PyTorch's TF32 flags are CUDA's


def test_an_unknown_policy_is_refused():
    with pytest.raises(ConfigError, match="unknown TF32 policy 'some'; choose pytorch, off, all"):
        tf32_classes("some")


@pytest.mark.realdata
def test_param_resnet_projects_to_v100_and_a100_as_nvidia_measured(real_dir):
    """The real capture (RTX 2080 Ti) projected per node: V100 / A100 within 10 % of 2.556.

    Before (convs priced at the fp32 peak on the A100 unless the capture said tf32): 1.684; TF32 at the full GEMM
    curve: 5.43; with the fitted ``tf32_conv_efficiency`` 0.30 (devices.toml): 2.574 (+0.7 %).
    """
    from tracekit.converters.pytorch import convert_rank
    from tracekit.transforms import Retarget

    d = real_dir / "pytorch" / "param-resnet"
    trace = convert_rank(d / "resnet_et.json.gz", d / "resnet_kineto.json.gz", allow_unlinked=True).trace
    src, a100 = device_model("rtx-2080-ti"), device_model("a100-80gb")

    def projected_ns(target, tf32="pytorch"):
        return Retarget(src, target, tf32=tf32).project_trace(trace)[1].projected_ns["projected"]

    v100_ns = projected_ns(device_model("v100"))
    ratio = v100_ns / projected_ns(a100)
    assert ratio == pytest.approx(PUBLISHED_A100_OVER_V100, rel=0.10)
    assert ratio == pytest.approx(2.574, abs=0.001)
    assert v100_ns / projected_ns(dataclasses.replace(a100, tf32_conv_efficiency=1.0)) == pytest.approx(5.43, abs=0.01)
    assert v100_ns / projected_ns(a100, tf32="off") < 2.0  # the capture's run had set allow_tf32=False: no TF32


def test_transform_retarget_takes_the_tf32_policy(tmp_path):
    from click.testing import CliRunner

    from tracekit.cli import cli
    from tracekit.io import read_traceset

    runner = CliRunner()
    src = tmp_path / "job"
    res = runner.invoke(
        cli, ["generate", "micro", "--collective", "all_reduce", "--size", "1MiB", "--ranks", "2", "-o", str(src)]
    )
    assert res.exit_code == 0, res.output
    out = tmp_path / "moved"
    res = runner.invoke(cli, ["transform", str(src), "-o", str(out), "--retarget", "v100:a100-80gb", "--tf32", "off"])
    assert res.exit_code == 0, res.output
    assert '"tf32": "off"' in read_traceset(out)[0].metadata.get_attr("tracekit_provenance")
    bad = runner.invoke(cli, ["transform", str(src), "-o", str(out), "--retarget", "v100:a100-80gb", "--tf32", "x"])
    assert bad.exit_code == 2 and "--tf32" in bad.output


def _conv_trace(flag: str | None = None, encoded: bool = False):
    """One fp32 conv kernel measured 10 ms on a V100 (2 x 4096^3 FLOPs), with an optional capture ``tf32`` flag."""
    from tracekit.io import encode_trace, trace_from_bytes
    from tracekit.model import Attr, ExecutionTrace, Metadata, Node, NodeType

    flops, nbytes, _ = _big_conv()
    attrs = [
        Attr("num_ops", flops, "int64_val"),
        Attr("tensor_size", nbytes, "uint64_val"),
        Attr("op_class", "conv", "string_val"),
        Attr("compute_dtype", "fp32", "string_val"),
    ]
    md = Metadata(version="1")
    if flag is not None:
        md = md.with_attr("tf32", flag, "string_val")
    trace = ExecutionTrace([Node(1, "conv", NodeType.COMP_NODE, duration_ns=10_000_000, attrs=attrs)], md)
    return trace_from_bytes(encode_trace(trace), path="t.et", rank=0) if encoded else trace


@pytest.mark.parametrize("encoded", [False, True])
def test_the_captures_tf32_flag_is_followed_unless_the_option_says_otherwise(encoded):
    from tracekit.transforms import Retarget

    def moved(trace, **kw):
        return Retarget("v100", "a100-80gb", **kw).project_trace(trace)[0].nodes[0].duration_ns

    default, off = moved(_conv_trace(encoded=encoded)), moved(_conv_trace(encoded=encoded), tf32="off")
    assert default < off  # TF32 at 0.30 of the curve of 156 TFLOP/s beats fp32 at 19.5
    assert moved(_conv_trace("off", encoded)) == off
    assert moved(_conv_trace("off", encoded), tf32="pytorch") == default
    with pytest.raises(ConfigError, match="metadata attribute 'tf32' is 'maybe'; choose pytorch, off, all"):
        moved(_conv_trace("maybe", encoded))
