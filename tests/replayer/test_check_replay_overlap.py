"""check-replay's compute/communication overlap (issue 30.2): a hand-computed case and real captures."""

from __future__ import annotations

import glob
import gzip
import json
import logging
import tarfile
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from tracekit.model.attrs import COMM_SIZE, COMM_TYPE, IS_CPU_OP, STREAM
from tracekit.cli import cli
from tracekit.io import write_traceset
from tracekit.model import Attr, ExecutionTrace, Node, NodeType
from tracekit.replayer.results.overlap import rank_overlap, spec_slowdown

S_C = 0.189  # tracekit/costs/devices.toml: overlap_compute_slowdown of the A100/H100 presets


def _kernel(nid: int, name: str, start: int, dur: int, stream: int, comm: bool = False) -> Node:
    attrs = [Attr(IS_CPU_OP, False, "bool_val"), Attr(STREAM, stream)]
    if comm:
        attrs += [Attr(COMM_TYPE, 4), Attr(COMM_SIZE, 1024)]
    kind = NodeType.COMM_COLL_NODE if comm else NodeType.COMP_NODE
    return Node(id=nid, name=name, type=kind, start_time_ns=start, duration_ns=dur, attrs=attrs)


def _hand_trace() -> ExecutionTrace:
    """gemm x3 alone (10 ns) and x3 under communication (12 ns); 'other' on a second stream; 'add' half covered."""
    nodes = [_kernel(i + 1, "gemm", 10 * i, 10, 7) for i in range(3)]
    nodes += [_kernel(4 + i, "gemm", s, 12, 7) for i, s in enumerate((100, 150, 300))]
    nodes += [_kernel(7, "other", 105, 10, 8), _kernel(8, "add", 190, 20, 7)]
    nodes += [_kernel(9, "nccl:all_reduce", 100, 100, 9, True), _kernel(10, "nccl:all_reduce", 300, 50, 9, True)]
    return ExecutionTrace(nodes, rank=0)


def test_hand_computed_overlap_slowdown_and_model_share():
    o = rank_overlap(_hand_trace(), 0, None, S_C)
    # compute union [0,30) [100,115) [150,162) [190,210) [300,312); communication [100,200) [300,350)
    assert o.measured_overlap_ns == 15 + 12 + 10 + 12
    assert (o.compute_kernels, o.comm_kernels, o.overlapped_kernels) == (8, 2, 5)
    assert (o.measured_compute_ns, o.measured_comm_ns) == (30 + 15 + 12 + 20 + 12, 150)
    (gemm,) = o.ops  # 'other' and 'add' have one instance: below 3 each way
    assert (gemm.name, gemm.overlapped, gemm.alone, gemm.measured_ratio) == ("gemm", 3, 3, 1.2)
    assert gemm.model_ratio == pytest.approx(1 + S_C)  # fully overlapped: fraction 1
    assert o.measured_extra_ns == 3 * (12 - 10)
    assert o.model_extra_ns == pytest.approx(S_C * 36) and o.explained == pytest.approx(S_C * 36 / 6)
    assert o.replay_overlap_ns is None


def test_replay_overlap_reads_the_schedule():
    """The replay moved the second all-reduce to [400, 450): it no longer overlaps the third gemm."""
    trace = _hand_trace()
    start = {n.id: float(n.start_time_ns) for n in trace.nodes}
    start[10] = 400.0
    ids = np.array(sorted(start))
    starts = np.array([start[i] for i in ids])
    dur = {n.id: n.duration_ns for n in trace.nodes}
    ends = starts + np.array([dur[i] for i in ids.tolist()], dtype=float)
    o = rank_overlap(trace, 0, SimpleNamespace(node_ids=ids, start_ns=starts, end_ns=ends), S_C)
    assert o.replay_overlap_ns == 15 + 12 + 10
    # per compute node: gemm@100 12, gemm@150 12, other 10, add 10
    assert o.replay_model_extra_ns == pytest.approx(S_C * 44)
    assert rank_overlap(trace, 0, None, None).model_extra_ns is None  # a device without a factor


def test_the_factor_is_the_spec_devices():
    assert spec_slowdown("dgx-a100")[1] == S_C


def _independent_overlap_ns(kineto_json: dict) -> tuple[int, int, int]:
    """From the raw Kineto events: (compute kernels, NCCL kernels, |U(compute) ∩ U(nccl)| in ns), merged simply."""
    comp, comm = [], []
    for e in kineto_json["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("dur", 0) > 0:
            span = (round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000))
            (comm if e["name"].startswith("ncclKernel") else comp).append(span)

    def merged(spans):
        out = []
        for s, e in sorted(spans):
            if out and s <= out[-1][1]:
                out[-1][1] = max(out[-1][1], e)
            else:
                out.append([s, e])
        return out

    total = sum(max(0, min(a1, b1) - max(a0, b0)) for a0, a1 in merged(comp) for b0, b1 in merged(comm))
    return len(comp), len(comm), total


@pytest.fixture(scope="module")
def dlrm_dir(real_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("dlrm")
    with tarfile.open(real_dir / "pytorch/param-dlrm/dlrm_kineto.tar.gz") as tar:
        tar.extractall(out, filter="data")
    return out / "dlrm_kineto"


@pytest.mark.realdata
def test_dlrm_8_rank_v100_overlap_per_rank(dlrm_dir, tmp_path):
    """Kineto-only param-dlrm (8 x V100, NCCL): rank 0's overlap equals a plain interval merge of its Kineto file."""
    from tracekit.converters.pytorch.kineto_convert import convert_kineto

    files = sorted(dlrm_dir.glob("worker*_step_12.*.pt.trace.json"))
    logging.disable(logging.WARNING)
    try:
        write_traceset(convert_kineto(files), tmp_path / "job")
    finally:
        logging.disable(logging.NOTSET)
    res = CliRunner().invoke(cli, ["check-replay", str(tmp_path / "job"), "--hw", "dgx-a100", "--json"])
    assert res.exit_code == 0, res.output
    overlap = json.loads(res.stdout)["overlap"]
    assert [o["rank"] for o in overlap] == [*range(8), -1] and all(o["device"] for o in overlap)
    overlap, job = overlap[:-1], overlap[-1]
    raw = json.loads(next(f for f in files if f.name.startswith("worker0_")).read_text())
    assert _independent_overlap_ns(raw) == (253, 8, 261_000)
    o0 = overlap[0]
    assert (o0["compute_kernels"], o0["comm_kernels"], o0["measured_overlap_ns"]) == (253, 8, 261_000)
    want_ns = [261_000, 280_000, 275_000, 334_000, 37_000, 40_000, 269_000, 166_000]
    assert [o["measured_overlap_ns"] for o in overlap] == want_ns and job["measured_overlap_ns"] == sum(want_ns)
    # the job row: ranks 4 and 5 have no op with >= 3 instances each way (extra 0, no model figure)
    assert [o["measured_extra_ns"] for o in overlap] == [12_000, 14_000, 14_000, 12_000, 0, 0, 5_000, 3_000]
    assert job["measured_extra_ns"] == 60_000 and job["model_extra_ns"] == pytest.approx(
        sum(o["model_extra_ns"] or 0 for o in overlap)
    )
    assert job["explained"] == pytest.approx(job["model_extra_ns"] / 60_000)
    # rank 0: fill, scan and scan-init kernels have >= 3 instances each way (Kineto's 1 us resolution)
    assert [op["overlapped"] for op in o0["ops"]] == [11, 3, 3] and o0["measured_extra_ns"] == 12_000
    assert o0["model_extra_ns"] == pytest.approx(S_C * 52_000)  # their 17 overlapped instances' overlap, ns
    assert o0["replay_overlap_ns"] == 308_000 and o0["replay_model_extra_ns"] == pytest.approx(S_C * 308_000)


@pytest.mark.realdata
def test_a100_nccl_capture_overlap_and_html(real_dir, tmp_path):
    """hta-nccl_parser_config (rank 0 of 2, A100, NCCL): measured overlap vs a plain merge; the model's share."""
    import real_kineto

    from tracekit.replayer.reporting.measured_report import write_comparison_html
    from tracekit.replayer.results.measured import check_replay

    (path,) = glob.glob(f"{real_dir}/kineto/hta-nccl_parser_config/*.json.gz")
    with gzip.open(path) as f:
        comp_n, comm_n, overlap_ns = _independent_overlap_ns(json.load(f))
    logging.disable(logging.WARNING)
    try:
        c = check_replay(real_kineto.traceset([path]), "dgx-a100")
    finally:
        logging.disable(logging.NOTSET)
    (o,) = c.overlap
    assert (o.compute_kernels, o.comm_kernels, o.measured_overlap_ns) == (comp_n, comm_n, overlap_ns)
    assert (comp_n, comm_n, overlap_ns) == (3753, 21, 7_685_824)
    assert (o.overlapped_kernels, len(o.ops)) == (293, 19)
    assert o.measured_extra_ns == pytest.approx(1_527_750.5) and o.explained == pytest.approx(0.8938, abs=1e-4)
    assert o.replay_overlap_ns == pytest.approx(19_232)  # the replay starts the DDP all-reduces after the backward
    from rich.console import Console

    from tracekit.cli.check_replay import _print_overlap

    console = Console(record=True, width=240)
    _print_overlap(console, c.overlap)
    row = next(line for line in console.export_text().splitlines() if "293 of 3753" in line)
    cells = [cell.strip() for cell in row.split("│")[1:10]]
    assert cells == ["0", "7.686", "293 of 3753", "19", "1.528", "1.366", "89%", "0.019", "0.004"]
    write_comparison_html(c, tmp_path / "c.html")
    page = (tmp_path / "c.html").read_text()
    assert "Compute/communication overlap" in page and "7.686" in page and "89%" in page


@pytest.mark.realdata
def test_cpu_gloo_capture_says_there_is_no_device_overlap(real_dir, tmp_path):
    import real_kineto

    d = real_dir / "pytorch/torch-cpu-gloo/dist_ws2"
    write_traceset(real_kineto.traceset(sorted(d.glob("kineto_rank*.json"))), tmp_path / "job")
    res = CliRunner().invoke(cli, ["check-replay", str(tmp_path / "job")])
    assert res.exit_code == 0, res.output
    assert "rank(s) 0, 1: no device streams (a CPU capture), so no compute/communication device overlap" in " ".join(
        res.stdout.split()
    )
    doc = CliRunner().invoke(cli, ["check-replay", str(tmp_path / "job"), "--json"])
    assert [o["device"] for o in json.loads(doc.stdout)["overlap"]] == [False, False]


def test_an_et_collective_without_a_stream_is_a_host_call():
    """ET-converted collectives are is_cpu_op False but carry no stream: not device kernels."""
    host = _hand_trace().nodes[-1].replace(attrs=[Attr(IS_CPU_OP, False, "bool_val"), Attr(COMM_TYPE, 4)])
    assert not rank_overlap(ExecutionTrace([host], rank=0), 0, None, S_C).device
