"""`tracekit analyze` on real Kineto traces, checked against counts computed here from the raw JSON.

The independent counts use only the standard library: events read with json/gzip, microsecond timestamps turned
into ns through Decimal, containment found by brute force (O(n^2)), classes by plain name lists.
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal

import orjson
import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.converters.pytorch.kineto_analysis import analyze_kineto_files, self_segments, union_ns
from tracekit.converters.pytorch.kineto_reader import KinetoEvent


def _ns(us) -> int:
    return int(Decimal(repr(us)) * 1000)


def _raw(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fh:
        return [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]


def _union(intervals) -> int:
    covered = set()  # brute force on the distinct boundaries
    points = sorted({p for iv in intervals for p in iv})
    for a, b in zip(points, points[1:]):
        if any(s <= a and b <= e for s, e in intervals):
            covered.add((a, b))
    return sum(b - a for a, b in covered)


def test_hta_simple_add_gpu_numbers(real_dir):
    path = real_dir / "pytorch" / "hta-simple-add" / "benchmark_simple_add_trace.json.gz"
    raw = _raw(path)
    kernels = [e for e in raw if e["cat"] == "kernel"]
    spans = [(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in kernels]
    corr = {e["args"]["correlation"]: e for e in kernels}
    launches = [
        e
        for e in raw
        if e["cat"] == "cuda_runtime" and e["name"] == "cudaLaunchKernel" and e["args"].get("correlation") in corr
    ]
    delays = [_ns(corr[e["args"]["correlation"]]["ts"]) - (_ns(e["ts"]) + _ns(e["dur"])) for e in launches]

    (r,) = analyze_kineto_files([str(path)]).ranks
    assert r.device and r.events == len(kernels) == 4
    assert r.window_ns == max(b for _, b in spans) - min(a for a, _ in spans)
    by_class = dict(r.time_by_class_ns)
    assert sum(by_class.values()) == by_class["other"] == sum(b - a for a, b in spans) == 16_000
    assert r.compute_ns == _union(spans) and r.comm_ns == 0 and r.exposed_comm_ns == 0
    assert r.compute_ns + r.exposed_comm_ns + r.other_idle_ns == r.window_ns
    (stream,) = r.streams
    assert stream.name == "device 0 stream 7" and stream.events == 4 and stream.busy_ns == _union(spans)
    assert r.launch.launches == len(launches) == 4
    assert r.launch.cpu_ns == sum(_ns(e["dur"]) for e in launches)
    assert r.launch.delay_total_ns == sum(delays) and r.launch.delay_max_ns == max(delays)
    assert [(k.count, k.total_ns) for k in r.top_kernels] == [(2, 10_000), (2, 6_000)]


def _self_times(events) -> dict[int, int]:
    """Self time per event, brute force: between consecutive boundaries of a thread, the time belongs to the
    covering event that started last (the shortest on equal starts)."""
    spans = [(e["pid"], e["tid"], _ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in events]
    out = dict.fromkeys(range(len(events)), 0)
    for thread in {s[:2] for s in spans}:
        mine = [i for i, s in enumerate(spans) if s[:2] == thread]
        points = sorted({p for i in mine for p in spans[i][2:]})
        for a, b in zip(points, points[1:]):
            cover = [i for i in mine if spans[i][2] <= a and b <= spans[i][3]]
            if cover:
                owner = max(cover, key=lambda i: (spans[i][2], -(spans[i][3] - spans[i][2]), -i))
                out[owner] += b - a
    return out


GEMM = {"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear"}


@pytest.mark.parametrize("rank", [0, 1])
def test_dist_ws2_cpu_numbers(real_dir, rank):
    path = real_dir / "pytorch" / "torch-cpu-gloo" / "dist_ws2" / f"kineto_rank{rank}.json"
    events = [
        e
        for e in _raw(path)
        if e["cat"] == "cpu_op" or (e["cat"] == "user_annotation" and e["name"].startswith("gloo:"))
    ]
    self_ns = _self_times(events)
    comm = sum(t for i, t in self_ns.items() if events[i]["name"].startswith(("gloo:", "c10d::")))
    gemm = sum(t for i, t in self_ns.items() if events[i]["name"] in GEMM)
    starts = [_ns(e["ts"]) for e in events]
    ends = [_ns(e["ts"]) + _ns(e["dur"]) for e in events]

    (r,) = analyze_kineto_files([str(path)]).ranks
    assert r.rank == rank and not r.device and r.launch is None
    assert r.events == len(events)
    assert r.window_ns == max(ends) - min(starts)
    by_class = dict(r.time_by_class_ns)
    assert by_class["gemm"] == gemm and by_class["attention"] == 0
    # comm: the union of its time over threads (comm_ns), not the sum of self times that counted a collective on
    # the main thread (c10d) and on gloo's worker twice (issue 32: rank 1 98.7 vs 60.6 ms)
    assert by_class["comm"] == r.comm_ns < comm
    # self times partition each thread's busy time
    rest = sum(v for k, v in by_class.items() if k != "comm")
    assert rest + comm == sum(self_ns.values()) == sum(st.busy_ns for st in r.streams)
    threads = {(e["pid"], e["tid"]) for e in events}
    assert len(r.streams) == len(threads) == 3
    for st in r.streams:
        tid = int(st.name.split()[-1])
        mine = [(s, e) for s, e, ev in zip(starts, ends, events) if ev["tid"] == tid]
        assert st.events == len(mine) and st.busy_ns == _union(mine) and st.idle_ns == r.window_ns - st.busy_ns
    assert r.compute_ns + r.exposed_comm_ns + r.other_idle_ns == r.window_ns
    assert r.overlap_ns == r.compute_ns + r.comm_ns - (r.compute_ns + r.exposed_comm_ns)
    allreduce = next(k for k in r.top_kernels if k.name == "gloo:all_reduce")
    assert allreduce.count == sum(1 for e in events if e["name"] == "gloo:all_reduce") == 5


def test_self_segments_nesting_closed_form():
    def ev(i, s, d, tid=1):
        return KinetoEvent(i, "cpu_op", f"op{i}", 0, tid, s, d)

    # parent [0, 100) with children [10, 30) and [50, 60), grandchild [12, 20); another thread [0, 5);
    # op 5 [90, 120) outlives the parent: it owns [90, 120)
    segs = self_segments([ev(0, 0, 100), ev(1, 10, 20), ev(2, 12, 8), ev(3, 50, 10), ev(4, 0, 5, tid=2), ev(5, 90, 30)])
    own = {}
    for a, b, e in segs:
        own[e.index] = own.get(e.index, 0) + b - a
    assert own == {0: 60, 1: 12, 2: 8, 3: 10, 4: 5, 5: 30}
    assert union_ns([(0, 10), (5, 20), (30, 40)]) == 30


def test_cli_analyze_json_and_directory(real_dir, tmp_path):
    d = real_dir / "pytorch" / "torch-cpu-gloo" / "dist_ws2"
    res = CliRunner().invoke(cli, ["analyze", str(d), "--json", "--html-out", str(tmp_path / "m.html")])
    assert res.exit_code == 0, res.output
    doc = orjson.loads(res.stdout)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]  # the kineto_rank*.json files of the directory
    assert "Measured run" in (tmp_path / "m.html").read_text()
    res = CliRunner().invoke(cli, ["analyze", str(d / "kineto_rank0.json"), str(d / "kineto_rank1.json")])
    assert res.exit_code == 0 and "gloo:all_reduce" in res.stdout
    res = CliRunner().invoke(cli, ["analyze", str(d / "et_rank0.json")])
    assert res.exit_code == 1 and res.stderr.startswith("tracekit: error:") and res.stderr.count("\n") == 1


def test_converted_trace_set_gives_the_kernel_numbers_of_its_kineto_file(real_dir, tmp_path):
    from tracekit.converters.pytorch import convert_pytorch
    from tracekit.io import write_traceset

    d = real_dir / "pytorch" / "hta-simple-add"
    ts = convert_pytorch(
        [str(d / "benchmark_simple_add_et.json.gz")], [str(d / "benchmark_simple_add_trace.json.gz")], executor="serial"
    )
    write_traceset(ts, str(tmp_path / "job"))
    (k,) = analyze_kineto_files([str(d / "benchmark_simple_add_trace.json.gz")]).ranks
    res = CliRunner().invoke(cli, ["analyze", str(tmp_path / "job"), "--json"])
    assert res.exit_code == 0, res.output
    (c,) = orjson.loads(res.stdout)["ranks"]
    # the 4 kernels the converter attached keep their measured times: same window, classes, stream, top kernels
    assert c["device"] and c["events"] == k.events == 4 and c["window_ns"] == k.window_ns
    assert c["time_by_class_ns"] == dict(k.time_by_class_ns)
    assert [(s["events"], s["busy_ns"]) for s in c["streams"]] == [(s.events, s.busy_ns) for s in k.streams]
    assert [(x["count"], x["total_ns"]) for x in c["top_kernels"]] == [(x.count, x.total_ns) for x in k.top_kernels]
    assert c["launch"] is None  # no CUDA runtime calls in a Chakra trace
