"""`validate --stream` and `transform --stream` through the CLI (CliRunner, stdout and stderr apart)."""

from __future__ import annotations

from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.io import read_trace, write_traceset
from tracekit.model import ExecutionTrace, Node, NodeType
from tracekit.sets.traceset import TraceSet


def _job(tmp_path):
    nodes = [
        Node(id=i, name="op", type=NodeType.COMP_NODE, duration_ns=1000 * (i + 1), data_deps=[i - 1] if i else [])
        for i in range(10)
    ]
    write_traceset(TraceSet([ExecutionTrace(nodes), ExecutionTrace(list(nodes))]), tmp_path / "job")
    return tmp_path / "job"


def test_validate_stream_matches_full_validation(tmp_path, samples_dir):
    runner = CliRunner()
    full = runner.invoke(cli, ["validate", str(samples_dir / "chakra" / "feeder.0.et")])
    streamed = runner.invoke(cli, ["validate", "--stream", str(samples_dir / "chakra" / "feeder.0.et")])
    # feeder.0.et = Chakra's chakra.0.et: only warnings (COMM nodes without comm_type/comm_size read as ASTRA-sim
    # reads them; ctrl deps on missing ids)
    assert full.exit_code == streamed.exit_code == 0
    issues = lambda out: sorted(
        line
        for line in out.splitlines()  # noqa: E731
        if line.startswith(("error:", "warning: [comm-attrs]", "warning: [dangling"))
    )
    assert issues(full.stdout) == issues(streamed.stdout) and len(issues(full.stdout)) > 0
    ok = runner.invoke(cli, ["validate", "--stream", str(_job(tmp_path))])
    assert ok.exit_code == 0 and ok.stdout.strip().endswith("OK: 2 ranks, 20 nodes, 0 warnings")


def test_transform_stream_scales_every_duration(tmp_path):
    job = _job(tmp_path)
    res = CliRunner().invoke(
        cli, ["transform", str(job), "-o", str(tmp_path / "half"), "--scale-compute", "0.5", "--stream"]
    )
    assert res.exit_code == 0, res.stderr
    assert "20 -> 20 nodes" in res.stderr
    out = read_trace(tmp_path / "half.1.et")
    assert [n.duration_ns for n in out.nodes] == [500 * (i + 1) for i in range(10)]


def test_transform_stream_refuses_whole_graph_steps_and_writes_nothing(tmp_path):
    job = _job(tmp_path)
    res = CliRunner().invoke(cli, ["transform", str(job), "-o", str(tmp_path / "c"), "--compact", "--stream"])
    assert res.exit_code == 1
    assert (
        res.stderr.strip() == "tracekit: error: these steps cannot stream (they need the whole graph or job): Compact"
    )
    assert not list(tmp_path.glob("c.*"))
