"""tracekit check-replay, info's steps, missing timing and partial jobs on real captures."""

from __future__ import annotations

import json
import logging

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.converters.pytorch import convert_pytorch
from tracekit.converters.pytorch.kineto_convert import convert_kineto
from tracekit.errors import ReplayError
from tracekit.io import write_traceset
from tracekit.replayer.results.measured import check_replay
from tracekit.checks.summary import summarize_traceset

pytestmark = pytest.mark.realdata


def test_check_replay_cli_tables_json_html_and_info_steps(real_dir, tmp_path):
    d = real_dir / "pytorch/torch-cpu-gloo/single"
    ts = convert_pytorch([d / "et_rank0.json"], [d / "kineto_rank0.json"], executor="serial")
    # Kineto's ProfilerStep#2: "dur": 175834.341 us
    assert summarize_traceset(ts).per_rank[0].steps == {"ProfilerStep#2": 175_834_341}
    write_traceset(ts, tmp_path / "job")
    runner = CliRunner()
    res = runner.invoke(
        cli,
        ["check-replay", str(tmp_path / "job"), "-o", str(tmp_path / "c.json"), "--html-out", str(tmp_path / "c.html")],
    )
    assert res.exit_code == 0, res.output
    out = " ".join(res.stdout.split())
    assert "175.834" in out and "175.806" in out and "-0.0%" in out
    doc = json.loads((tmp_path / "c.json").read_text())
    (row,) = doc["rows"]
    assert (row["rank"], row["step"], row["measured_ns"]) == (0, 2, 175_834_341)
    assert abs(row["error"]) < 0.001
    page = (tmp_path / "c.html").read_text()
    assert "175.834 ms" in page and "Kineto ProfilerStep#2 duration" in page
    info = runner.invoke(cli, ["info", str(tmp_path / "job")])
    assert "2: 175.834 ms" in " ".join(info.stdout.split())


def test_et_only_trace_never_replays_to_zero_silently(real_dir, tmp_path):
    ts = convert_pytorch([real_dir / "pytorch/param-resnet-1gpu/resnet_1gpu_et.json.gz"], executor="serial")
    with pytest.raises(ReplayError, match="no measured durations: every node of the trace set has duration 0") as err:
        check_replay(ts)
    assert str(err.value).endswith("with `tracekit replay --compute roofline`")  # a command that exists (below)
    write_traceset(ts, tmp_path / "r")
    roofline = CliRunner().invoke(cli, ["replay", str(tmp_path / "r"), "--hw", "dgx-h100", "--compute", "roofline"])
    assert roofline.exit_code == 0, roofline.output
    res = CliRunner().invoke(cli, ["replay", str(tmp_path / "r"), "--hw", "dgx-h100"])
    assert res.exit_code == 0
    out = " ".join(res.stdout.split())
    # the op cost pass gives some ops FLOPs/bytes (roofline); the rest are said to be 0 ns, never silently
    assert "no compute node has a measured duration" in out
    assert "timed by a cost model from their FLOPs/bytes" in out and "with neither replayed as 0 ns" in out


def test_single_rank_of_a_multi_rank_job_is_said_and_replayed_alone(real_dir, caplog):
    with caplog.at_level(logging.WARNING):
        ts = convert_kineto(list((real_dir / "kineto/hta-nccl_parser_config").glob("*.json.gz")))
    assert "declare world size 2 (Kineto distributedInfo) but 1 rank file(s) were converted (ranks 0)" in caplog.text
    c = check_replay(ts)
    assert any(n.startswith("partial job: 1 of 2 ranks present (missing 1)") for n in c.notes)
    assert [r.step for r in c.rows] == [4, 5, 6] and c.worst_error < 0.05
