"""`tracekit diff` and replayer.diff: categories, collectives and nodes that moved, with their numbers."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from _reportkit import toy_result, ws2_prefix, ws2_results  # noqa: F401  (fixtures)
from tracekit.cli import cli
from tracekit.errors import ReplayError
from tracekit.replayer.reporting.diff import diff_results
from tracekit.replayer.reporting.report import build_diff_html, load_result


def test_toy_diff_closed_form():
    # collective 50 ns -> 100 ns: iteration 150 -> 200; compute unchanged; comm +50 on both ranks
    d = diff_results(toy_result(scale=1.0, spec_name="slow"), toy_result(scale=2.0, spec_name="fast"))
    cats = {c.name: c for c in d.categories}
    assert d.iteration.a_ns == 150.0 and d.iteration.delta_ns == 50.0 and d.iteration.ratio == pytest.approx(4 / 3)
    assert cats["compute (rank mean)"].delta_ns == 0.0 and not cats["compute (rank mean)"].changed
    assert cats["comm (rank mean)"].delta_ns == 50.0
    assert cats["waiting for peers (rank mean)"].a_ns == 20.0 and not cats["waiting for peers (rank mean)"].changed
    assert cats["other idle (rank mean)"].a_ns == 0.0
    assert cats["critical path comm"].b_ns == 100.0
    assert [c.name for c in d.changed_categories()] == [
        "iteration time",
        "comm (rank mean)",
        "exposed comm (rank mean)",
        "critical path comm",
        "collective time (sum)",
    ]
    assert len(d.collectives) == 1 and d.collectives[0].delta_ns == 50.0 and d.collectives[0].b_busbw_gbps == 10.0
    # nodes: the two collective nodes moved by 50 ns each, the compute nodes not at all
    assert [(n.rank, n.node_id, n.kind, n.delta_ns) for n in d.nodes] == [(0, 2, "comm", 50.0), (1, 12, "comm", 50.0)]
    assert d.nodes[0].name == "allreduce"  # named from the critical path
    assert d.nodes_matched == 4 and (d.a_label, d.b_label) == ("slow", "fast")
    from tracekit.replayer.reporting.plots import diff_figure

    bars = diff_figure(d).figure.data[0]
    pct = dict(zip(bars.y, bars.x))
    assert pct["iteration time"] == pytest.approx(100 / 3) and pct["comm (rank mean)"] == pytest.approx(100.0)
    assert pct["compute (rank mean)"] == 0.0 and bars.y[-1] == "iteration time"  # drawn on top


def test_identical_runs_change_nothing():
    d = diff_results(toy_result(), toy_result())
    assert d.changed_categories() == [] and d.collectives == () and d.nodes == ()
    assert (d.a_label, d.b_label) == ("toy (A)", "toy (B)")
    assert d.collectives_matched == 1 and d.a_only_collectives == d.b_only_collectives == 0


def test_unmatched_collectives_and_missing_schedules_are_reported():
    a = toy_result()
    b = replace(toy_result(with_schedule=False), collectives=(), provenance=replace(a.provenance, world_size=3))
    d = diff_results(a, b)
    assert (d.collectives_matched, d.a_only_collectives, d.b_only_collectives) == (0, 1, 0)
    assert d.nodes == () and d.nodes_matched == 0
    assert any("missing in B" in n for n in d.notes)
    assert any("different world sizes (2 and 3)" in n for n in d.notes)
    page = build_diff_html(d)
    assert "No collective moved." in page and "Nodes were not compared (see the notes)." in page
    with pytest.raises(ReplayError, match="top must be"):
        diff_results(a, a, top=-1)


def test_a100_vs_h100_names_the_changed_categories_with_numbers(ws2_results):
    a_json = json.loads(ws2_results["dgx-a100"].read_text())
    b_json = json.loads(ws2_results["dgx-h100"].read_text())
    d = diff_results(load_result(ws2_results["dgx-a100"]), load_result(ws2_results["dgx-h100"]))
    cats = {c.name: c for c in d.categories}
    assert d.iteration.delta_ns == b_json["iteration_time_ns"] - a_json["iteration_time_ns"]
    comm_a = sum(r["comm_ns"] for r in a_json["ranks"]) / 2
    comm_b = sum(r["comm_ns"] for r in b_json["ranks"]) / 2
    assert cats["comm (rank mean)"].delta_ns == pytest.approx(comm_b - comm_a, rel=1e-12)
    # the bundled job is CPU-measured compute: only communication moves; H100's NVLink4 is faster
    changed = {c.name for c in d.changed_categories()}
    assert {"comm (rank mean)", "collective time (sum)"} <= changed
    assert "compute (rank mean)" not in changed and comm_b < comm_a
    # every one of the 10 collectives matched; the largest move is the largest |delta| computed from the JSON
    assert d.collectives_matched == len(a_json["collectives"]) == 10
    deltas = [b["time_ns"] - a["time_ns"] for a, b in zip(a_json["collectives"], b_json["collectives"])]
    assert d.collectives[0].delta_ns == pytest.approx(max(deltas, key=abs), rel=1e-12)
    assert d.nodes_matched > 0 and d.nodes[0].kind == "comm"


def test_diff_page_has_the_numbers(ws2_results):
    d = diff_results(load_result(ws2_results["dgx-a100"]), load_result(ws2_results["dgx-h100"]))
    page = build_diff_html(d)
    assert 'data-key="category.iteration time.delta_ns"' in page
    assert f'data-value="{d.iteration.delta_ns!r}"' in page
    assert "Changed: comm (rank mean)" in page


def test_cli_diff_tables_json_and_html(ws2_results, tmp_path):
    runner = CliRunner()
    a, b = str(ws2_results["dgx-a100"]), str(ws2_results["dgx-h100"])
    res = runner.invoke(cli, ["diff", a, b, "--top", "3"])
    assert res.exit_code == 0, res.output
    out = " ".join(res.stdout.split())
    assert "Iteration time 327.141 ms on dgx-a100 -> 327.140 ms on dgx-h100" in out  # both presets on nccl
    assert "Changed: comm (rank mean) 130.698 us -> 130.107 us (-591 ns)" in out
    res = runner.invoke(cli, ["diff", a, b, "--json", "--labels", "A100,H100", "--html-out", str(tmp_path / "d.html")])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["a_label"] == "A100" and "comm (rank mean)" in data["changed_categories"]
    assert 1_000_000 < (tmp_path / "d.html").stat().st_size <= 1_500_000 and "wrote" in res.stderr
    res = runner.invoke(cli, ["diff", a, b, "--json", "-o", str(tmp_path / "d.json")])
    assert res.stdout == "" and json.loads((tmp_path / "d.json").read_text())["format"] == "tracekit.replay_diff"
    bad = runner.invoke(cli, ["diff", a, b, "--labels", "onlyone"])
    assert bad.exit_code == 1 and "--labels takes two names" in bad.stderr
    assert "Example:" in runner.invoke(cli, ["diff", "--help"]).stdout


def test_a_diff_of_runs_with_different_collective_models_says_so():
    a = toy_result()
    b = replace(a, provenance=replace(a.provenance, collective_model="nccl"))
    assert a.provenance.collective_model != "nccl"
    note = (
        f"the runs use different collective models ({a.provenance.collective_model} and nccl): the change mixes "
        "the model's with the hardware's; replay both with the same --collective-model"
    )
    assert diff_results(a, b).notes[0] == note
    assert not any("collective models" in n for n in diff_results(a, toy_result()).notes)
