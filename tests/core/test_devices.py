"""Device presets, efficiency curves and compute projection (round trips, ratios between the roofline bounds)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.costs.devices import (
    device_model,
    device_presets,
    find_device,
    gemm_efficiency,
    memory_efficiency,
    op_seconds,
)
from tracekit.errors import ConfigError
from tracekit.costs.projection import projected_duration

EXPECTED = {"v100", "rtx-2080-ti", "a100-80gb", "a100-40gb", "h100-sxm", "h200", "b200", "mi250x", "mi300x", "host-cpu"}


def test_presets_load_with_sources_and_datasheet_numbers():
    presets = device_presets()
    assert EXPECTED <= set(presets)
    for dev in presets.values():
        assert dev.source and dev.mem_bandwidth_bytes_per_s > 0 and dev.compute_units > 0
        assert 0 < dev.gemm_max_efficiency <= 1 and 0 < dev.memory_max_efficiency <= 1
    a100, h100 = presets["a100-80gb"], presets["h100-sxm"]
    # NVIDIA datasheets (dense): A100 bf16 312 TFLOP/s, 2,039 GB/s; H100 SXM bf16 989.4, 3.35 TB/s
    assert a100.peak("bf16") == (312e12, "bf16") and a100.mem_bandwidth_bytes_per_s == 2039e9
    assert h100.peak("bf16") == (989.4e12, "bf16") and h100.mem_bandwidth_bytes_per_s == 3350e9
    assert presets["v100"].peak("tf32") == (15.7e12, "fp32")  # no TF32 before Ampere: runs at fp32


@pytest.mark.parametrize(
    "name, key",
    [
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100-PG509-200", "a100-40gb"),  # hta-simple-add's device
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("H200-SXM-141GB", "h200"),
        ("NVIDIA GeForce RTX 2080 Ti", "rtx-2080-ti"),
        ("Tesla V100-SXM2-16GB", "v100"),
        ("AMD Instinct MI300X", "mi300x"),
        ("AMD Instinct MI250X", "mi250x"),
        ("NVIDIA B200", "b200"),
        ("cpu", "host-cpu"),
        ("h100-sxm", "h100-sxm"),
    ],
)
def test_find_device_by_recorded_name(name, key):
    assert find_device(name).key == key


def test_unknown_device_is_an_error():
    assert find_device("Some NPU") is None
    with pytest.raises(ConfigError, match="unknown device 'Some NPU'"):
        device_model("Some NPU")


def test_gemm_efficiency_by_hand():
    a100 = device_presets()["a100-80gb"]  # 108 SMs, 128 x 128 tiles, max 0.86
    # 8192^3 with 128-tiles: 4096 tiles = 38 waves over 108 SMs -> 4096 / 4104 (64-tiles run at half rate)
    assert gemm_efficiency(8192, 8192, 8192, "bf16", a100) == pytest.approx(0.86 * 4096 / 4104)
    # 128 x 128 x 64: 128-tile: 1 tile, split-K 1 -> 1/108; 64: 4/108 x 1/2; 32: 16/108 x 1/4; 16: 64/108 x 1/8
    assert gemm_efficiency(128, 128, 64, "bf16", a100) == pytest.approx(0.86 * 8 / 108)
    # with k = 16384 the 128-tile splits K into min(108, ceil(16384 / 512) = 32) slices: 32 / 108; the
    # 64-tile: 4 tiles x min(27, 64) = 108 / 108 at half rate: 0.5 (best)
    assert gemm_efficiency(128, 128, 16384, "bf16", a100) == pytest.approx(0.86 * 0.5)
    assert gemm_efficiency(0, 5, 5, "bf16", a100) == 0.0


@settings(max_examples=50, deadline=None)
@given(m=st.integers(1, 20000), n=st.integers(1, 20000), k=st.integers(1, 20000))
def test_gemm_efficiency_is_a_fraction_of_the_maximum(m, n, k):
    for dev in ("a100-80gb", "h100-sxm", "mi300x"):
        d = device_presets()[dev]
        assert 0 < gemm_efficiency(m, n, k, "bf16", d) <= d.gemm_max_efficiency + 1e-12


def test_memory_efficiency_grows_with_size():
    h100 = device_presets()["h100-sxm"]  # latency term 3.35e12 B/s x 1 us = 3.35 MB
    assert memory_efficiency(3.35e6, h100) == pytest.approx(0.9 / 2)
    assert memory_efficiency(1e12, h100) == pytest.approx(0.9, rel=1e-5)


# ----------------------------------------------------------------------------- projection
GEMM = dict(op_class="gemm", dtype="bf16")
op = st.tuples(
    st.integers(1, 10**13),
    st.integers(1, 10**10),
    st.sampled_from(["gemm", "conv", "attention", "elementwise", "norm", None]),
    st.sampled_from(["bf16", "fp32", "tf32", "fp16"]),
)


@settings(max_examples=60, deadline=None)
@given(case=op, d=st.integers(1, 10**9))
def test_h100_a100_h100_round_trip_is_exact_to_1e9(case, d):
    flops, nbytes, cls, dtype = case
    h100, a100 = find_device("h100-sxm"), find_device("a100-80gb")
    there, method, _ = projected_duration(d, flops, nbytes, cls, dtype, h100, a100)
    back, _, _ = projected_duration(there, flops, nbytes, cls, dtype, a100, h100)
    assert method == "projected"
    assert back == pytest.approx(d, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(s=st.integers(4096, 16384), dtype=st.sampled_from(["bf16", "fp16", "tf32"]))
def test_a100_to_h100_large_gemm_speedup_is_between_bandwidth_and_peak_ratios(s, dtype):
    # (small GEMMs are dominated by wave quantization over 108 vs 132 SMs and can leave these bounds one by
    # one; the aggregate over a real capture is checked in tests/converters/test_costs_real.py)
    a100, h100 = find_device("a100-80gb"), find_device("h100-sxm")
    flops, nbytes = 2 * s**3, 3 * s * s * (4 if dtype == "tf32" else 2)
    new, _, _ = projected_duration(1e6, flops, nbytes, "gemm", dtype, a100, h100)
    speedup = 1e6 / new
    bw_ratio = 3350 / 2039
    peak_ratio = h100.peak(dtype)[0] / a100.peak(dtype)[0]
    assert bw_ratio < speedup < peak_ratio


def test_projection_keeps_and_counts_what_it_cannot_price():
    a100, h100 = find_device("a100-80gb"), find_device("h100-sxm")
    assert projected_duration(500, 0, 0, None, None, a100, h100)[:2] == (500.0, "kept_no_cost")
    assert projected_duration(500, 0, 0, "view", None, a100, h100)[:2] == (500.0, "kept_no_work")
    assert projected_duration(0, 10**9, 10**6, "gemm", "bf16", a100, h100)[:2] == (0.0, "no_duration")
    # no class (num_ops/tensor_size only): the plain roofline of the default dtype, as ASTRA-sim-style traces
    t = op_seconds(1e12, 1e8, None, None, a100)
    assert t.seconds == pytest.approx(max(1e12 / 312e12, 1e8 / 2039e9))
    # an fp8 op on an A100 (no fp8 peak) is priced at fp32 and says so
    assert op_seconds(1e12, 1e8, "gemm", "fp8", a100).dtype_fallback
    assert not math.isnan(op_seconds(0, 1e6, "elementwise", "bf16", a100).seconds)
