"""Replays of real traces from ../shared/real (skipped with a notice when absent)."""

from __future__ import annotations

import tarfile

import numpy as np
import orjson
import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.io import read_traceset
from tracekit.model import NodeType
from tracekit.replayer import ReplayOptions, replay
from tracekit.replayer.simulation.astra_config import import_astra_config

pytestmark = pytest.mark.realdata
MiB = 1 << 20


def test_astra_sim_allreduce_4npus_reproduces_astra_sim(real_dir, test_data_dir):
    ts = read_traceset(real_dir / "chakra/astra-sim-allreduce-4npus/all_reduce")
    astra = test_data_dir / "astra"
    spec = import_astra_config(astra / "system_ring_splits1.json", astra / "network_ring_4.yml").spec
    result = replay(ts, spec)
    # ASTRA-sim's analytical backend: ring all-reduce, 4 ranks, 1 MiB, 50 GB/s, 500 ns (docs/design.md)
    assert result.iteration_time_ns == 33_829
    assert [r.iteration_time_ns for r in result.ranks] == [33_829] * 4


def test_astra_sim_allreduce_4npus_on_a_preset(real_dir):
    ts = read_traceset(real_dir / "chakra/astra-sim-allreduce-4npus/all_reduce")
    # fitted: 4 GPUs of one node, NVLink switch 450 GB/s, 600 ns; alpha-beta asked for (the preset's default is nccl)
    result = replay(ts, "dgx-h100", options=ReplayOptions(collective_model="alpha_beta"))
    assert result.iteration_time_ns == pytest.approx(2 * 3 * 600 + 2 * 3 / 4 * MiB / 450, abs=0.5)
    (row,) = result.collectives
    assert row.kind == "ALL_REDUCE" and row.comm_bytes == MiB and row.ranks == (0, 1, 2, 3)


def test_astra_sim_onecomm_64_replays_hierarchically(real_dir, tmp_path):
    with tarfile.open(real_dir / "chakra/astra-sim-onecomm-64/onecomm_allreduce.tar") as tar:
        tar.extractall(tmp_path, filter="data")
    ts = read_traceset(tmp_path)
    assert len(ts) == 64
    result = replay(ts, "dgx-h100", options=ReplayOptions(collective_model="alpha_beta"))  # 8 GPUs x 8 nodes
    n = 64 * 1024
    rs = 7 * 600 + 7 / 8 * n / 450
    ar = 2 * 7 * 3000 + 2 * 7 / 8 * (n / 8) / 50
    ag = 7 * 600 + 7 * (n / 8) / 450
    assert result.iteration_time_ns == pytest.approx(rs + ar + ag, abs=0.5)
    assert len(result.collectives) == 1 and len(result.collectives[0].ranks) == 64


def _profiler_step_ns(path) -> float:
    doc = orjson.loads(path.read_bytes())
    (ev,) = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    return ev["dur"] * 1000.0


def _convert(real_dir, name: str, n: int):
    pytorch = pytest.importorskip("tracekit.converters.pytorch")
    folder = real_dir / "pytorch/torch-cpu-gloo" / name
    ets = [folder / f"et_rank{r}.json" for r in range(n)]
    kinetos = [folder / f"kineto_rank{r}.json" for r in range(n)]
    return folder, pytorch.convert_pytorch(ets, kinetos, executor="serial")


def test_self_consistency_single_rank_step_time(real_dir):
    folder, ts = _convert(real_dir, "single", 1)
    measured = _profiler_step_ns(folder / "kineto_rank0.json")  # 175,834,341 ns
    result = replay(ts, "dgx-h100", options=ReplayOptions(collective_model="measured"))
    assert abs(result.iteration_time_ns - measured) / measured < 0.05
    # annotations are ranges of 0 ns: the compute model counts them "missing"
    ranges = sum(1 for n in ts[0].nodes if n.get_attr("range_duration_ns") is not None)
    assert ranges == 6  # ProfilerStep#2, ## forward/backward/optimizer ##, Optimizer.zero_grad/step#SGD.*
    assert dict(result.compute_methods) == {"measured": len(ts[0]) - ranges, "missing": ranges}


def test_dist_ws4_replays_with_every_collective_matched(real_dir):
    _, ts = _convert(real_dir, "dist_ws4", 4)
    result = replay(ts, "dgx-h100")
    for rank in ts.ranks:
        cols = ts[rank].columns()
        n_coll = int(np.sum(cols.types == NodeType.COMM_COLL_NODE))
        n_p2p = int(np.sum((cols.types == NodeType.COMM_SEND_NODE) | (cols.types == NodeType.COMM_RECV_NODE)))
        rows = [row for row in result.collectives if rank in row.ranks]
        assert sum(row.kind != "SEND_RECV" for row in rows) == n_coll == 9
        assert sum(row.kind == "SEND_RECV" for row in rows) == n_p2p == 1
    kinds = sorted({row.kind for row in result.collectives})
    assert kinds == ["ALL_GATHER", "ALL_REDUCE", "ALL_TO_ALL", "BARRIER", "BROADCAST", "REDUCE_SCATTER", "SEND_RECV"]
    assert result.critical_path.length_ns == pytest.approx(result.iteration_time_ns)


def test_chakra_feeder_trace_without_comm_types_replays_as_astra_sim_reads_it(real_dir):
    # 21 COMM_COLL nodes, 14 without comm_type or comm_size: read as ALL_REDUCE of 0 bytes (ASTRA-sim's and
    # Chakra's feeder's defaults), with warnings in validate; the checks no longer refuse the file
    ts = read_traceset(real_dir / "chakra/chakra-feeder-tests/chakra.0.et")
    result = replay(ts, "dgx-h100")
    kinds = [row.kind for row in result.collectives]
    assert len(kinds) == 21 and kinds.count("ALL_REDUCE") == 19 and kinds.count("BROADCAST") == 2


def test_cli_replay_on_a_real_set(real_dir, tmp_path):
    res = CliRunner().invoke(
        cli,
        [
            "replay",
            str(real_dir / "chakra/astra-sim-allreduce-4npus/all_reduce"),
            "--hw",
            "dgx-a100",
            "--collective-model",
            "nccl",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "iteration time" in res.stdout and "nccl" in res.stdout
    assert res.stderr == ""
    from tracekit.io import write_trace
    from tracekit.model import Attr, ExecutionTrace, Node, NodeType

    bad_coll = Node(id=3, type=NodeType.COMM_COLL_NODE, attrs=[Attr("comm_type", 99), Attr("comm_size", 8)])
    write_trace(ExecutionTrace([bad_coll]), tmp_path / "bad.0.et")
    bad = CliRunner().invoke(_Main(), ["replay", str(tmp_path / "bad.0.et"), "--hw", "dgx-a100"])
    assert bad.exit_code == 1
    assert bad.stderr.startswith("tracekit: error:") and "comm-attrs" in bad.stderr
    assert bad.stderr.strip().count("\n") == 0
    assert bad.stdout == ""


class _Main:
    """Adapter so CliRunner runs the CLI with its real error rendering (run_cli)."""

    name = "tracekit"

    def main(self, args=None, prog_name=None, **extra):
        from tracekit.cli._common import invoke_for_test

        invoke_for_test(cli, list(args))
