"""diff pairs the same ops across runs whose node ids differ: a replay vs its `--dp 64 --compact` rescale."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.io import read_traceset
from tracekit.replayer import replay
from tracekit.replayer.reporting.diff import diff_results
from tracekit.replayer.results.result import ReplayResult
from tracekit.transforms import Compact, Pipeline, Rescale

from tests.replayer._reportkit import ws2_prefix  # noqa: F401 - fixture


@pytest.fixture(scope="module")
def pair(ws2_prefix):  # noqa: F811
    a_ts = read_traceset(ws2_prefix)
    b_ts = Pipeline([Rescale(64), Compact()]).run(a_ts)
    # through JSON, as `tracekit diff` reads them
    a = ReplayResult.from_json(replay(a_ts, "dgx-a100").to_json(include_schedule=True))
    b = ReplayResult.from_json(replay(b_ts, "dgx-a100").to_json(include_schedule=True))
    return a_ts, b_ts, a, b


def test_rescaled_compacted_diff_names_the_same_ops_on_both_sides(pair):
    a_ts, b_ts, a, b = pair
    d = diff_results(a, b, top=1000)
    assert d.nodes_matched > 500 and len(d.nodes) > 10
    for n in d.nodes:
        a_node, b_node = a_ts[n.rank].node_by_id(n.node_id), b_ts[n.rank].node_by_id(n.b_node_id)
        assert n.name and a_node.name == n.name == b_node.name, n
    # Compact merged chains of host ops here: some of them moved (the all-reduce bucket they wait for grew)
    assert any(len(x.get_attr("merged_node_ids") or ()) > 1 for x in b_ts[0])
    # the occurrence matches too: the k-th op of that name among the rank's unmerged nodes
    n = next(n for n in d.nodes if n.merged == 1)
    same = [x.id for x in a_ts[n.rank] if x.name == n.name]
    assert same[n.occurrence] == n.node_id


def test_a_node_merged_by_compact_is_compared_with_the_sum_of_its_sources(pair):
    a_ts, _, a, _ = pair
    c_ts = Pipeline([Compact()]).run(a_ts)
    c = replay(c_ts, "dgx-a100")
    d = diff_results(a, c, top=10_000)
    # Compact is exact for the replay, so nothing moved -- which holds only if each merged head is compared with
    # the sum of its sources: against its first source alone (plain name matching) it would have grown
    assert d.nodes == () and d.iteration.delta_ns == 0
    grown = [
        x
        for r in c_ts.ranks
        for x in c_ts[r]
        if len(x.get_attr("merged_node_ids") or ()) > 1
        and x.duration_ns > a_ts[r].node_by_id(x.get_attr("merged_node_ids")[0]).duration_ns
    ]
    assert len(grown) >= 4


def test_results_without_names_fall_back_to_node_ids(pair):
    _, _, a, b = pair
    import dataclasses

    strip = lambda r: dataclasses.replace(r, schedule=tuple(dataclasses.replace(s, names=None) for s in r.schedule))  # noqa: E731
    d = diff_results(strip(a), strip(b))
    assert any("matched by node id" in n for n in d.notes)


def test_results_without_schedules_name_the_option_that_writes_them(pair):
    _, _, a, b = pair
    import dataclasses

    d = diff_results(a, dataclasses.replace(b, schedule=None))
    assert d.nodes == ()
    assert "node-level changes need per-node schedules, missing in B (replay with --with-schedule -o RESULT.json)" in (
        d.notes
    )


def test_cli_diff_of_a_non_json_file_is_one_clear_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("hello\n")
    res = CliRunner().invoke(cli, ["diff", str(bad), str(bad)])
    assert res.exit_code == 1
    assert res.stderr == (
        f"tracekit: error: {bad}: not a tracekit replay result: not JSON "
        f"(unexpected character, expected a JSON value at line 1, column 1)\n"
    )
    other = tmp_path / "timeline.json"
    other.write_text('{"traceEvents": []}')
    res = CliRunner().invoke(cli, ["diff", str(other), str(other)])
    assert res.exit_code == 1 and res.stderr.count("\n") == 1
    assert "not a tracekit replay result (format None" in res.stderr and "tracekit replay -o FILE" in res.stderr
