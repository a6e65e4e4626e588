"""The replay report with the measured run beside it (report --kineto), on the bundled 2-rank gloo job."""

from __future__ import annotations

import re

from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.converters.pytorch.kineto_analysis import analyze_kineto_files
from tracekit.replayer.reporting.report import load_result
from tracekit.replayer.reporting.report_measured import replay_time_by_class

from tests.replayer._reportkit import DIST_WS2, ws2_prefix, ws2_results  # noqa: F401 - fixtures


def test_report_with_the_measured_run(ws2_results, tmp_path):
    out = tmp_path / "r.html"
    res = CliRunner().invoke(
        cli,
        ["-q", "report", str(ws2_results["dgx-a100"]), "-o", str(out), "--kineto", str(DIST_WS2 / "kineto_rank*.json")],
    )
    assert res.exit_code == 0, res.output
    page = out.read_text()
    values = dict(re.findall(r'data-key="([^"]+)" data-value="([^"]*)"', page))
    measured = analyze_kineto_files(sorted(str(p) for p in DIST_WS2.glob("kineto_rank*.json"))).to_dict()
    for r in measured["ranks"]:
        assert values[f"measured.{r['rank']}.compute_ns"] == str(r["compute_ns"])
    replayed = replay_time_by_class(load_result(ws2_results["dgx-a100"]))
    # measured and replayed side by side, same classes: every replayed compute node's run time and every
    # member's transfer time lands in exactly one class
    result = load_result(ws2_results["dgx-a100"])
    compute = sum(int((s.end_ns - s.start_ns)[s.kind == 0].sum()) for s in result.schedule)
    transfers = sum(c.time_ns * len(c.ranks) for c in result.collectives)
    assert sum(replayed.values()) == compute + transfers and replayed["comm"] >= transfers
    assert values["replayed.class.gemm"] == str(replayed["gemm"]) and replayed["gemm"] > 0
    assert values["measured.class.comm"] == str(sum(r["time_by_class_ns"]["comm"] for r in measured["ranks"]))
    assert out.stat().st_size <= 1_500_000
