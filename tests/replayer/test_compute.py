"""Compute cost: measured (scaled), roofline, ASTRA-sim rules; scalar and vectorized agree."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tracekit.errors import SpecError
from tracekit.replayer.simulation.astra_config import import_astra_config
from tracekit.replayer.simulation.compute import ComputeModel
from tracekit.replayer.simulation.specs import load_spec, spec_from_dict


def with_compute(name: str, **compute):
    data = load_spec(name).to_dict()
    data["compute"].update(compute)
    return spec_from_dict(data)


def test_measured_duration_scaled():
    model = ComputeModel(with_compute("dgx-a100", duration_scale=1.5))
    assert (model.cost(1000).duration_ns, model.cost(1000).method) == (1500, "measured")
    assert model.cost(1001).duration_ns == 1502  # 1501.5 rounds half to even


def test_roofline_compute_and_memory_bound():
    """A100: 312e12 x 0.7 = 218,400 FLOP/ns; 2039 GB/s x 0.8 = 1631.2 B/ns."""
    model = ComputeModel(with_compute("dgx-a100", mode="roofline"))
    gemm_flops, gemm_bytes = 2 * 4096**3, 3 * 4096 * 4096 * 2
    c = model.cost(duration_ns=5000, num_ops=gemm_flops, tensor_bytes=gemm_bytes)
    assert (c.duration_ns, c.method) == (629_299, "roofline")  # 137,438,953,472 / 218,400
    c = model.cost(duration_ns=0, num_ops=1_000_000, tensor_bytes=8_000_000)
    assert c.duration_ns == 4904  # 8e6 / 1631.2 = 4904.36
    assert model.cost(duration_ns=777).method == "measured"  # no FLOPs or bytes: measured


def test_measured_mode_falls_back_to_roofline_and_counts_missing():
    model = ComputeModel(load_spec("dgx-h100"))
    costs = model.costs(np.array([0, 989_400_000, 0]), np.array([0, 0, 0]), np.array([250, 0, 0]))
    assert costs.duration_ns.tolist() == [250, round(989_400_000 / (989_400 * 0.7)), 0]
    assert costs.counts() == {"measured": 1, "roofline": 1, "missing": 1}


def test_astra_measured_rules(test_data_dir):
    spec = import_astra_config(test_data_dir / "astra" / "Ring.json", test_data_dir / "astra" / "Ring.yml").spec
    model = ComputeModel(spec)  # [astra] build = "518bd51" (the default)
    costs = model.costs(np.zeros(4), np.zeros(4), np.array([12_345, 500, 0, 7_000]))
    # duration_micros * 1000; zero: 1 ns (518bd51 printed 2 cycles for two such nodes: edge-compute-zero-duration)
    assert costs.duration_ns.tolist() == [12_000, 1, 1, 7_000]
    assert costs.counts() == {"astra_measured": 4}
    c459 = ComputeModel(dataclasses.replace(spec, astra=dataclasses.replace(spec.astra, build="c459ab6")))
    # c459ab6: zero without num_ops is skipped (0 ns; it printed 0 cycles for the same case)
    assert c459.costs(np.zeros(4), np.zeros(4), np.array([12_345, 500, 0, 7_000])).duration_ns.tolist() == [
        12_000,
        0,
        0,
        7_000,
    ]
    with_ops = c459.costs(np.array([0, 8, 8, 0]), np.zeros(4), np.array([12_345, 500, 0, 7_000]))
    assert with_ops.duration_ns.tolist() == [12_000, 1, 1, 7_000]  # zero with num_ops: 1 ns


def test_astra_roofline(tmp_path, test_data_dir):
    system = tmp_path / "roofline.json"  # the keys of ASTRA-sim inputs/system/FullyConnected_Roofline.json
    system.write_text(
        '{"endpoint-delay": 1, "preferred-dataset-splits": 1, "roofline-enabled": 1, '
        '"peak-perf": 2048, "local-mem-bw": 4096, "collective-optimization": "localBWAware"}'
    )
    spec = import_astra_config(system, test_data_dir / "astra" / "Ring.yml").spec
    model = ComputeModel(spec)
    costs = model.costs(np.array([1e9, 1e6, 5, 0]), np.array([1e6, 1e6, 0, 10]), np.array([9, 9, 9, 9]))
    # 1e9 / 2.048e15 s = 488.28 ns; 1e6 / (4.096e12 x 1) s = 244.14 ns; tensor_size 0: skipped; no FLOPs: 0.
    assert costs.duration_ns.tolist() == [488, 244, 0, 0]
    assert costs.counts() == {"astra_roofline": 3, "missing": 1}


def test_vectorized_equals_scalar():
    rng = np.random.default_rng(7)
    n = 500
    ops = rng.integers(0, 10**12, n) * (rng.random(n) < 0.6)
    nbytes = rng.integers(0, 10**9, n) * (rng.random(n) < 0.6)
    dur = rng.integers(0, 10**7, n) * (rng.random(n) < 0.6)
    for mode in ("measured", "roofline"):
        model = ComputeModel(with_compute("h200", mode=mode, duration_scale=0.9))
        costs = model.costs(ops, nbytes, dur)
        for i in range(n):
            one = model.cost(int(dur[i]), int(ops[i]), int(nbytes[i]))
            assert costs.duration_ns[i] == one.duration_ns
        assert sum(costs.counts().values()) == n


def test_missing_peak_is_a_spec_error(test_data_dir):
    spec = import_astra_config(test_data_dir / "astra" / "Ring.json", test_data_dir / "astra" / "Ring.yml").spec
    data = spec.to_dict()
    data["compute"]["mode"] = "roofline"
    model = ComputeModel(spec_from_dict(data))
    assert model.cost(1000).duration_ns == 1000
    with pytest.raises(SpecError, match="key device.peak_flops_per_s: device 'astra-sim NPU' has no peak"):
        model.cost(0, num_ops=100)


def test_shapes_must_agree():
    with pytest.raises(SpecError, match="differ in shape"):
        ComputeModel(load_spec("dgx-a100")).costs(np.zeros(2), np.zeros(3), np.zeros(2, dtype=np.int64))


@pytest.mark.realdata
def test_real_chakra_trace_compute_nodes(real_dir, test_data_dir):
    from tracekit.io import read_trace
    from tracekit.model import NodeType

    trace = read_trace(real_dir / "chakra" / "chakra-feeder-tests" / "chakra.0.et")
    comp = [n for n in trace.nodes if n.type == NodeType.COMP_NODE]
    assert len(comp) == 3643
    dur = np.array([n.duration_ns for n in comp], dtype=np.int64)
    ops = np.array([n.num_ops or 0 for n in comp])
    nbytes = np.array([n.tensor_bytes or 0 for n in comp])
    measured = ComputeModel(load_spec("dgx-a100")).costs(ops, nbytes, dur)
    assert int(measured.duration_ns.sum()) == int(dur.sum())
    n_zero = int((dur == 0).sum())
    assert measured.counts().get("missing", 0) == n_zero  # no num_ops / tensor_size in this file
    astra = ComputeModel(
        import_astra_config(test_data_dir / "astra" / "Ring.json", test_data_dir / "astra" / "Ring.yml").spec
    )
    got = astra.costs(ops, nbytes, dur).duration_ns
    assert got.tolist() == [d // 1000 * 1000 or 1 for d in dur.tolist()]  # 518bd51: 1 ns when zero
