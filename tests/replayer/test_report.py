"""The HTML replay report (without a browser): content, sizes, aggregation, sweep plot, `tracekit report`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace

import numpy as np
import orjson
import pytest
from click.testing import CliRunner

from _reportkit import toy_result, ws2_prefix, ws2_results  # noqa: F401  (fixtures)
from tracekit.cli import cli
from tracekit.errors import ReplayError
from tracekit.replayer.reporting import plots, timeline_plot
from tracekit.replayer.reporting.report import (
    build_report_html,
    build_sweep_html,
    load_result,
    summary_values,
    write_report,
)
from tracekit.replayer.results.result import RankStats


def _data_values(page: str) -> dict[str, str]:
    return dict(re.findall(r'data-key="([^"]+)" data-value="([^"]*)"', page))


def test_summary_values_equal_the_json(ws2_results):
    d = json.loads(ws2_results["dgx-a100"].read_text())
    rows = {key: value for _, key, value, _ in summary_values(load_result(ws2_results["dgx-a100"]))}
    assert rows["iteration_time_ns"] == d["iteration_time_ns"]
    assert rows["world_size"] == 2 and rows["node_count"] == d["node_count"] == 644
    for key in ("compute_ns", "comm_ns", "exposed_comm_ns", "comm_wait_ns", "other_idle_ns"):
        assert rows[f"mean_{key}"] == pytest.approx(sum(r[key] for r in d["ranks"]) / 2, rel=1e-12)
    kinds = [c["kind"] for c in d["collectives"]]
    assert rows["collectives"] == len(kinds) - kinds.count("SEND_RECV") == 9
    assert rows["send_recv_pairs"] == 1
    assert rows["critical_path_compute_ns"] + rows["critical_path_comm_ns"] == pytest.approx(d["iteration_time_ns"])


def test_report_is_self_contained_and_carries_the_numbers(ws2_results, tmp_path):
    out = write_report(load_result(ws2_results["dgx-a100"]), tmp_path / "r.html")
    page = out.read_text()
    # no network: no external script/style/image references
    assert not re.search(r'<(script|link|img)[^>]+(src|href)="(https?:)?//', page)
    assert "Plotly.newPlot" in page and 1_000_000 < len(page) <= 1_500_000  # plotly.js basic inlined once
    assert page.count("Plotly.newPlot") == 1
    values = _data_values(page)
    d = json.loads(ws2_results["dgx-a100"].read_text())
    assert float(values["iteration_time_ns"]) == d["iteration_time_ns"]
    assert float(values["rank.1.exposed_comm_ns"]) == d["ranks"][1]["exposed_comm_ns"]
    for section in (
        "summary-section",
        "ranks-section",
        "timeline-section",
        "critical-path-section",
        "collectives-section",
        "hardware-section",
        "provenance-section",
    ):
        assert f'id="{section}"' in page
    assert page.count('class="plot"') == 2  # rank bars and timeline
    assert "A100-SXM4-80GB" in page and "nvlink" in page  # the spec, re-loaded from the preset
    assert "job.0.et" in page  # provenance


def test_collective_table_lists_achieved_bandwidth(ws2_results):
    r = load_result(ws2_results["dgx-a100"])
    page = build_report_html(r)
    table = page[page.index('id="collectives"') :]
    table = table[: table.index("</table>")]
    big = max(r.collectives, key=lambda c: c.comm_bytes)
    # the 104,488-byte all-reduce: busbw = algbw * 2(p-1)/p = algbw for p = 2, from the result row
    assert big.kind == "ALL_REDUCE" and big.comm_bytes == 104_488
    assert f"{big.busbw_gbps:.2f} GB/s" in table
    assert table.count("<tr>") == 1 + len(r.collective_summary())


def test_report_shows_the_spec_stored_in_the_result(ws2_results):
    from tracekit.replayer.simulation.specs import load_spec

    d = json.loads(ws2_results["dgx-a100"].read_text())
    spec = load_spec("dgx-h100").fitted(2)  # deliberately not the replayed one: the page must show this
    page = build_report_html({**d, "spec": spec.to_dict()})
    assert "The spec the replay used (stored in the result)." in page
    assert "H100" in page and "A100-SXM4-80GB" not in page.split('id="hardware-section"')[1]
    reloaded = build_report_html(d)
    assert "re-loaded now from" in reloaded and "fitted to 2 ranks" in reloaded


def test_report_without_schedule_says_why_no_timeline(ws2_results):
    r = replace(load_result(ws2_results["dgx-a100"]), schedule=None)
    page = build_report_html(r.to_dict())
    assert "written without its per-node schedule" in page
    assert page.count('class="plot"') == 1


def test_timeline_labels_spans_with_node_names_from_the_traceset(ws2_prefix, ws2_results):
    from tracekit.io import read_traceset

    r = load_result(ws2_results["dgx-a100"])
    own_names = build_report_html(r)  # results keep node names with their schedule
    r = replace(r, schedule=tuple(replace(s, names=None) for s in r.schedule))  # as results written before
    without = build_report_html(r)
    with_names = build_report_html(r, traceset=read_traceset(ws2_prefix))
    # span labels sit in the figure JSON, where "<br>" is written \u003cbr\u003e
    br = "\\u003cbr\\u003e"
    assert with_names.count(f'"aten::mm{br}') > 0 and without.count(f'"aten::mm{br}') == 0
    assert own_names.count(f'"aten::mm{br}') == with_names.count(f'"aten::mm{br}')
    assert f'"node 113{br}' in without and f'"node 113{br}' not in with_names


def test_toy_timeline_spans_and_critical_path():
    fig = timeline_plot.timeline_figure(toy_result()).figure
    by_name = {}
    for trace in fig.data:
        if trace.mode == "lines":
            by_name[trace.name] = trace
    # rows: r0 compute stream 7, r0 comm stream 0, r1 compute stream 7, r1 comm stream 0
    assert list(fig.layout.yaxis.ticktext) == [
        "r0 compute stream 7",
        "r0 comm stream 0",
        "r1 compute stream 7",
        "r1 comm stream 0",
    ]
    x = np.asarray(by_name["compute"].x, dtype=float)
    assert x[0::3].tolist() == [0.0, 0.0] and (x[1::3] * 1e6).tolist() == [100.0, 60.0]
    wait = np.asarray(by_name["waiting for peers"].x, dtype=float) * 1e6
    assert wait[0::3].tolist() == [60.0] and wait[1::3].tolist() == [100.0]  # only rank 1 waits
    path = by_name["critical path"]
    assert (np.asarray(path.x, dtype=float)[1::3] * 1e6).tolist() == [100.0, 150.0]
    assert np.asarray(path.y, dtype=float)[0::3].tolist() == [-0.33, 1 - 0.33]  # over rows 0 and 1
    labels = [t.text for t in fig.data if t.mode == "markers" and t.name == "transfer"][0]
    assert labels[0].startswith("ALL_REDUCE 1000 B pg 0 #0")


def test_merge_closed_form():
    row = np.array([0, 0, 0, 1])
    start = np.array([0.0, 12.0, 30.0, 5.0])
    end = np.array([10.0, 20.0, 31.0, 6.0])
    m_row, m_lo, m_hi, count, first = timeline_plot._merge(row, start, end, 2.0)
    assert m_row.tolist() == [0, 0, 1] and m_lo.tolist() == [0.0, 30.0, 5.0]
    assert m_hi.tolist() == [20.0, 31.0, 6.0] and count.tolist() == [2, 1, 1] and first.tolist() == [0, 2, 3]


def test_timeline_merges_to_its_budget_and_says_so():
    r = toy_result()
    fig = timeline_plot.timeline_figure(r, max_spans=3)  # budget 1 per category, but the 2 compute spans are on 2 rows
    assert fig.note == ""  # spans on different rows are never merged, and the loop ends
    many = timeline_plot._span_budget_merge(
        np.zeros(1000, dtype=np.int64), np.arange(1000.0) * 10, np.arange(1000.0) * 10 + 9, 100, 10_000.0
    )
    (m_row, m_lo, m_hi, count, _), gap = many
    assert len(m_row) <= 100 and count.sum() == 1000 and gap >= 1.0
    assert m_lo[0] == 0.0 and m_hi[-1] == 9999.0


def test_rank_bars_bin_large_jobs():
    ranks = [RankStats(i, 1000.0, float(i), 0.0, 0.0, 0.0, 1000.0 - i, 1) for i in range(1000)]
    fig = plots.rank_breakdown_figure(ranks, max_bars=256)
    compute = fig.figure.data[0]
    assert len(compute.x) == 250 and compute.x[0] == "0-3" and compute.x[-1] == "996-999"
    # mean of ranks 0..3 = 1.5 ns, in ms
    assert float(np.asarray(compute.y)[0]) == pytest.approx(1.5e-6)
    assert "1,000 ranks shown as 250 bars of 4" in fig.note
    small = plots.rank_breakdown_figure(ranks[:5], max_bars=256)
    assert small.note == "" and list(small.figure.data[0].x) == ["0", "1", "2", "3", "4"]
    with pytest.raises(ReplayError, match="max_bars"):
        plots.rank_breakdown_figure(ranks, max_bars=0)


def test_large_job_page_reports_spread_not_rows():
    base = toy_result(with_schedule=False)
    ranks = tuple(RankStats(i, 150.0, 100.0 - i % 7, 50.0, 50.0, 0.0, float(i % 7), 2) for i in range(100))
    r = replace(base, ranks=ranks)
    page = build_report_html(r)
    assert "100 ranks: the table gives the spread over ranks" in page
    assert "rank.5.compute_ns" not in page


def test_sweep_points_and_figure(ws2_results):
    a = load_result(ws2_results["dgx-a100"])
    rows = [(1, toy_result(scale=1.0)), (2, toy_result(scale=2.0).to_dict()), ("a100", a)]
    points = plots.sweep_points(rows)
    assert [p.iteration_time_ns for p in points] == [150.0, 200.0, a.iteration_time_ns]
    # slowest rank (ties: the one waiting least, then the lowest rank) categories add up to the iteration time
    assert (points[1].slowest_rank, points[1].compute_ns, points[1].exposed_comm_ns) == (0, 100.0, 100.0)
    for p in points:
        total = p.compute_ns + p.exposed_comm_ns + p.comm_wait_ns + p.other_idle_ns
        assert total == pytest.approx(p.iteration_time_ns, rel=1e-9)
    fig = plots.sweep_figure(rows, "compute scale").figure
    assert [t.name for t in fig.data] == [
        "compute",
        "exposed communication",
        "waiting for peers",
        "other idle",
        "iteration time",
    ]
    assert list(fig.data[4].x) == ["1", "2", "a100"]
    page = build_sweep_html(rows, "compute scale")
    assert _data_values(page)["sweep.1.iteration_time_ns"] == "200"
    with pytest.raises(ReplayError, match=r"sweep row 0 \(1\): expected a ReplayResult or its dict, got int"):
        plots.sweep_points([(1, 42)])
    with pytest.raises(ReplayError, match="sweep row 1 is not a .parameter value, result. pair"):
        plots.sweep_points([(1, toy_result()), (2,)])
    with pytest.raises(ReplayError, match="not a tracekit replay result"):
        plots.sweep_points([(1, {"format": "nope"})])
    with pytest.raises(ReplayError, match="at least one row"):
        plots.sweep_figure([], "x")


def test_load_result_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    with pytest.raises(ReplayError, match=r"bad\.json.*not a tracekit replay result"):
        load_result(bad)
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    with pytest.raises(ReplayError, match=r"junk\.json.*not JSON"):
        load_result(junk)


def test_write_report_is_atomic_on_failure(tmp_path):
    target = tmp_path / "r.html"
    with pytest.raises(ReplayError):
        write_report({"format": "tracekit.replay", "format_version": 1}, target)
    assert list(tmp_path.iterdir()) == []


def test_cli_report(ws2_results, tmp_path):
    runner = CliRunner()
    out = tmp_path / "r.html"
    res = runner.invoke(cli, ["report", str(ws2_results["dgx-a100"]), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert res.stdout == ""
    assert "wrote" in res.stderr and "327.141 ms" in res.stderr
    assert 1_000_000 < out.stat().st_size <= 1_500_000  # the 2-rank demo job: plotly.js basic inlined
    quiet = runner.invoke(cli, ["-q", "report", str(ws2_results["dgx-a100"]), "-o", str(tmp_path / "q.html")])
    assert quiet.exit_code == 0 and quiet.stderr == "" and quiet.stdout == ""
    helptext = runner.invoke(cli, ["report", "--help"]).stdout
    assert "Example:" in helptext and "tracekit report out/a100.json -o out/a100.html" in helptext


def test_cli_report_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(orjson.dumps({"format": "tracekit.replay", "format_version": 99}))
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit.cli._main", "report", str(bad), "-o", str(tmp_path / "x.html")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "bad.json" in lines[0] and "format version 99" in lines[0]
    assert not (tmp_path / "x.html").exists()
