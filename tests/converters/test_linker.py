"""ET <-> Kineto linking: each join method, device attachment, errors, real link rates."""

from __future__ import annotations

import pytest

from _pytorch_synth import cpu, et_doc, kineto_doc, mlp_et, mlp_kineto, node, roots
from tracekit.converters.pytorch.et_reader import parse_et, read_et
from tracekit.converters.pytorch.kineto_reader import parse_kineto, read_kineto
from tracekit.converters.pytorch.linker import link
from tracekit.errors import ConversionError


def _link(et_doc_, k_doc, **kw):
    return link(parse_et(et_doc_, path="et.json"), parse_kineto(k_doc, path="k.json"), **kw)


def test_record_function_id_join():
    got = _link(mlp_et(), mlp_kineto())
    assert got.report.method == "rf_id"
    assert (got.report.host_linked, got.report.host_ops) == (5, 5)
    assert got.host[13].name == "aten::addmm" and got.host[13].start_ns == 25_000


def test_external_id_join_when_no_record_function_id():
    got = _link(mlp_et(), mlp_kineto(with_rf=False))
    assert got.report.method == "external_id" and got.report.host_linked == 5


def test_disjoint_record_function_ids_are_an_error():
    with pytest.raises(ConversionError, match="different profiler steps") as exc:
        _link(mlp_et(), mlp_kineto(rf_base=1000))
    assert "1..5" in str(exc.value) and "1001..1005" in str(exc.value)


def test_zero_link_rate_is_an_error_unless_allowed():
    k = kineto_doc([cpu("aten::other", 0, 5, ext=900)])
    with pytest.raises(ConversionError, match="link rate is zero"):
        _link(mlp_et(), k)
    got = _link(mlp_et(), k, allow_unlinked=True)
    assert got.report.host_linked == 0 and got.report.method == "none"


def test_sequence_alignment_over_many_iterations_with_noise():
    names = ["aten::linear", "aten::t", "aten::addmm", "aten::relu", "aten::mm", "aten::sum"]
    et_nodes = roots() + [node(10 + i, n, 2, 500 + i) for i, n in enumerate(names)]
    events, t, ext = [], 0, 1
    for it in range(5):  # five iterations; the third has an extra op in the middle
        for i, n in enumerate(names):
            if it == 2 and i == 3:
                events.append(cpu("aten::empty", t, 1, ext=ext))
                t, ext = t + 2, ext + 1
            events.append(cpu(n, t, 1, ext=ext))
            t, ext = t + 2, ext + 1
    got = _link(et_doc(et_nodes), kineto_doc(events))
    assert got.report.method == "sequence"
    assert got.report.host_linked == len(names)
    assert [got.host[10 + i].name for i in range(len(names))] == names
    # one iteration, in order
    starts = [got.host[10 + i].start_ns for i in range(len(names))]
    assert starts == sorted(starts) and starts[-1] - starts[0] == 10_000


def test_kernels_attach_through_correlation_and_graph_launch():
    et = et_doc(roots() + [node(10, "aten::mm", 2, 1), node(11, "aten::add", 2, 2)])
    ev = [
        cpu("aten::mm", 0, 10, rf=1),
        cpu("aten::add", 20, 10, rf=2),
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 100,
            "tid": 100,
            "ts": 2,
            "dur": 3,
            "args": {"correlation": 7},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaGraphLaunch",
            "pid": 100,
            "tid": 100,
            "ts": 22,
            "dur": 3,
            "args": {"correlation": 8},
        },
    ]
    for i, (ts, corr) in enumerate([(6, 7), (30, 8), (40, 8)]):
        ev.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"k{i}",
                "pid": 0,
                "tid": 7,
                "ts": ts,
                "dur": 5,
                "args": {"correlation": corr, "stream": 7, "device": 0},
            }
        )
    got = _link(et, kineto_doc(ev))
    assert [e.name for e in got.device[10]] == ["k0"]
    assert [e.name for e in got.device[11]] == ["k1", "k2"]
    assert got.report.kernels_attached == 3 and got.report.aten_with_kernels == 2


@pytest.mark.parametrize(
    "et_rel, k_rel, method, minimum",
    [
        ("torch-cpu-gloo/single/et_rank0.json", "torch-cpu-gloo/single/kineto_rank0.json", "rf_id", 0.99),
        (
            "hta-simple-add/benchmark_simple_add_et.json.gz",
            "hta-simple-add/benchmark_simple_add_trace.json.gz",
            "external_id",
            0.99,
        ),
    ],
)
def test_real_host_link_rates(real_dir, et_rel, k_rel, method, minimum):
    got = link(read_et(real_dir / "pytorch" / et_rel), read_kineto(real_dir / "pytorch" / k_rel))
    assert got.report.method == method and got.report.host_rate >= minimum


def test_real_simple_add_kernels(real_dir):
    d = real_dir / "pytorch/hta-simple-add"
    got = link(read_et(d / "benchmark_simple_add_et.json.gz"), read_kineto(d / "benchmark_simple_add_trace.json.gz"))
    assert (got.report.host_linked, got.report.host_ops, got.report.kernels_attached) == (36, 36, 4)


def test_real_param_linear_sequence_alignment(real_dir):
    d = real_dir / "pytorch/param-linear"
    got = link(read_et(d / "linear_et.json.gz"), read_kineto(d / "linear_kineto.json.gz"))
    r = got.report
    assert r.method == "sequence"
    assert r.aten_rate >= 0.90 and (r.aten_linked, r.aten_ops) == (710, 710)
    assert r.kernels_attached == 220  # one iteration's kernels out of 8,716 in the Kineto file
